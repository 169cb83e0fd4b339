"""Stored times: written by ``iso``, read back by ``parse_iso`` as ``strptime`` with the same format
would read them, and refused where it would refuse them."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import example, given
from hypothesis import strategies as st

from thumbctl.ledger.timefmt import _FORMAT, iso, parse_iso

#: Every instant from 1970 to 2200, to the microsecond.
INSTANTS = st.integers(min_value=0, max_value=7_258_118_400_000_000).map(lambda us: us / 1_000_000)


def by_strptime(text: str) -> float | str:
    try:
        return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return "refused"


def same_verdict(text: str) -> bool:
    return by_parse_iso(text) == by_strptime(text)


def by_parse_iso(text: str) -> float | str:
    try:
        return parse_iso(text)
    except ValueError:
        return "refused"


@given(INSTANTS)
def test_a_stored_time_reads_back_as_the_instant_written(seconds: float) -> None:
    text = iso(seconds)
    assert len(text) == 27 and text.endswith("Z")
    assert abs(parse_iso(text) - seconds) < 1e-6


@given(
    INSTANTS,
    st.lists(st.tuples(st.integers(0, 27), st.sampled_from("0123456789-T:.Z +x\u0663")), max_size=3),
)
def test_a_damaged_time_is_read_or_refused_as_strptime_would(seconds: float, edits: list[tuple[int, str]]) -> None:
    """Characters replaced or added at the end (a leap second, a short field, another script's
    digit): the same verdict."""
    chars = list(iso(seconds))
    for at, char in edits:
        if at < len(chars):
            chars[at] = char
        else:
            chars.append(char)
    text = "".join(chars)
    assert same_verdict(text)


@given(st.text(max_size=30))
@example("2020-01-01T24:00:00.000000Z")
@example("2020-01-01T23:59:60.000000Z")
@example("2021-02-29T12:00:00.000000Z")
@example("2020-13-01T12:00:00.000000Z")
@example("2020-00-01T12:00:00.000000Z")
@example("2020-01-00T12:00:00.000000Z")
@example("0000-01-01T00:00:00.000000Z")
@example("9999-12-31T23:59:59.999999Z")
@example("2020-01-01t12:00:00.000000z")
@example("2020-01-01T12:00:00.00000\u0663Z")
@example("2020-01-01T12:00:00.5Z")
@example("2020-1-01T12:00:00.000000Z")
def test_any_text_is_read_or_refused_as_strptime_would(text: str) -> None:
    """Arbitrary text, and the edges of each field in the stored shape: the same verdict."""
    assert same_verdict(text)
