"""How things are written for a person (core/display.py): a crop's score to two places, rounded down."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from thumbctl.core.display import score_text


@given(st.floats(0, 1))
def test_a_score_is_written_to_two_places_never_above_itself(score: float) -> None:
    written = score_text(score)
    assert len(written) == 4 and written[1] == "."
    assert float(written) <= score + 1e-9 and score - float(written) < 0.01


def test_a_score_just_below_a_threshold_never_reads_as_the_threshold() -> None:
    assert [score_text(s) for s in (0.4996, 0.5, 0.29, 0.65, 1.0, 0.0)] == [
        "0.49",
        "0.50",
        "0.29",
        "0.65",
        "1.00",
        "0.00",
    ]
