"""Where a crop fix puts a window: the one function the render and the review page share.

A cover output's window is the largest of its ratio inside the photo (inside the trimmed box when
the batch trims), whatever the size asked for; a fix centres it on its focus point as nearly as the
edges allow. The focus of a trimmed photo is read inside its trimmed box, as the render reads it.
A contained output shows the whole (trimmed) photo: a fix does not move it.

The review page carries a JavaScript port of :func:`fixed_window` and :func:`focus_at`
(``thumbctl/web/static/geometry.js``), tested against these over a table of cases, so its preview is
the window the render will choose.
"""

from __future__ import annotations

from ..core.profile import Ratio
from .crop import focus_box, output_geometry

Box = tuple[int, int, int, int]
Point = tuple[float, float]


def fixed_window(src_w: int, src_h: int, ratio: Ratio, fit: str, trim: Box | None, focus: Point) -> Box:
    """The window (upright source pixels) an output of ``ratio`` shows when its fix is ``focus``
    (0..1 each, inside ``trim`` when given): the box a render with that fix crops."""
    if fit == "contain":
        return trim or (0, 0, src_w, src_h)
    left, top, right, bottom = trim or (0, 0, src_w, src_h)
    width, height = right - left, bottom - top
    x0, y0, x1, y1 = focus_box(width, height, output_geometry(width, height, ratio, 1, True), focus)
    return x0 + left, y0 + top, x1 + left, y1 + top


def focus_at(point: Point, src_w: int, src_h: int, trim: Box | None) -> Point:
    """The focus that centres a window on ``point`` of the photo (0..1 of its upright width and
    height): the point itself, or, for a trimmed photo, where it lies in the trimmed box (kept in it)."""
    if trim is None:
        return _inside(point[0]), _inside(point[1])
    left, top, right, bottom = trim
    x = (point[0] * src_w - left) / max(1, right - left)
    y = (point[1] * src_h - top) / max(1, bottom - top)
    return _inside(x), _inside(y)


def _inside(value: float) -> float:
    """``value`` kept in 0..1, to the nearest 1/10000 (a tenth of a pixel of a 1000 px photo)."""
    return round(min(1.0, max(0.0, value)) * 10000) / 10000
