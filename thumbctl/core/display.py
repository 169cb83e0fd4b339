"""How a local path is written for a person (with the home folder as ``~``, as they would type it),
and a crop's score."""

from __future__ import annotations

import math
from pathlib import Path


def shown(path: Path) -> str:
    """``path`` with the home folder written ``~``, as a person would type it."""
    home = Path.home()
    try:
        return str(Path("~") / path.relative_to(home))
    except ValueError:
        return str(path)


def score_text(score: float) -> str:
    """A crop's score to two places, rounded down (as every page and table shows it): a score below a
    threshold never reads as the threshold."""
    return f"{math.floor(score * 100 + 1e-9) / 100:.2f}"
