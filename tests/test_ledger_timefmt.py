"""Stored times: written by ``iso``, read back by ``parse_iso`` as ``strptime`` with the same format
would read them, and refused where it would refuse them."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
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
def test_any_text_is_read_or_refused_as_strptime_would(text: str) -> None:
    assert same_verdict(text)
