"""Stored times: written by ``iso`` at a fixed width, read back by ``parse_iso`` to the microsecond."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.ledger.timefmt import iso, parse_iso

#: Every instant from 1970 to 2200, to the microsecond.
INSTANTS = st.integers(min_value=0, max_value=7_258_118_400_000_000).map(lambda us: us / 1_000_000)


@given(INSTANTS)
def test_a_stored_time_reads_back_as_the_instant_written(seconds: float) -> None:
    text = iso(seconds)
    assert len(text) == 27 and text.endswith("Z")
    assert abs(parse_iso(text) - seconds) < 1e-6


def test_a_stored_time_sorts_as_text_as_its_instants_do() -> None:
    earlier, later = iso(1_000_000_000.5), iso(1_000_000_000.500001)
    assert earlier < later and len(earlier) == len(later)


def test_text_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_iso("2020-13-01T12:00:00.000000Z")
