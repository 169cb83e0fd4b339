"""How a local path is written for a person: with the home folder as ``~``, as they would type it."""

from __future__ import annotations

from pathlib import Path


def shown(path: Path) -> str:
    """``path`` with the home folder written ``~``, as a person would type it."""
    home = Path.home()
    try:
        return str(Path("~") / path.relative_to(home))
    except ValueError:
        return str(path)
