"""Fit modes and trimming: the pixels of ``contain`` and ``--trim``.

* ``cover`` (the default) is the crop of :mod:`.crop`: the ratio's window, filled.
* ``contain`` keeps the whole photo: it is scaled to fit inside the ratio's canvas (the size a
  cover output of a large enough source has: the requested size on the long side) and centred on
  it, the rest padded with the background colour or left transparent. Without ``upscale`` the
  photo is never enlarged: a small source sits at its own size in the middle of the canvas, which
  keeps the requested size (what marketplaces expect of a main image).
* ``trim`` first finds a near-uniform border (the colour of the analysis copy's outer frame, within
  a tolerance on the largest channel difference) and keeps the box inside it. It is found once per
  source on the analysis copy (a function of the source alone) and mapped outward to source pixels,
  so an output's bytes depend only on its derivative key, and no object pixel is cut. A source of
  one colour throughout is not trimmed.

Output sizes never depend on the trim: a name's ``{width}`` and ``{height}`` and the verification
of an output are known at submit from the source's header. A trimmed cover output is therefore as
large as the untrimmed one would be, its window taken inside the trimmed box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PIL import Image, ImageChops

from ..core.profile import TRANSPARENT, Ratio
from .crop import Geometry, output_geometry

Box = tuple[int, int, int, int]


def canvas_size(ratio: Ratio, size: int) -> tuple[int, int]:
    """The ratio's canvas with ``size`` on its long side (a cover output's size, when not limited)."""
    if ratio.w >= ratio.h:
        return size, max(1, round(size * ratio.h / ratio.w))
    return max(1, round(size * ratio.w / ratio.h)), size


def fit_geometry(src_w: int, src_h: int, ratio: Ratio, size: int, upscale: bool, fit: str) -> Geometry:
    """An output's geometry as submit, the worker and reconcile compute it from the source's upright
    size. For ``contain`` the "crop" is the whole source and the output is always the full canvas;
    ``limited`` says the photo inside stays smaller than the canvas would let it be."""
    if fit != "contain":
        return output_geometry(src_w, src_h, ratio, size, upscale)
    out_w, out_h = canvas_size(ratio, size)
    limited = not upscale and min(out_w / src_w, out_h / src_h) > 1
    return Geometry(src_w, src_h, out_w, out_h, limited=limited)


@dataclass(frozen=True)
class Placement:
    """Where a contained photo sits on its canvas: the box kept of the source (upright source
    pixels) and the box it fills on the canvas (output pixels)."""

    source_box: Box
    placed: Box

    def to_json(self) -> dict[str, object]:
        return {"box": list(self.source_box), "placed": list(self.placed)}


def place(box: Box, canvas: tuple[int, int], upscale: bool) -> Placement:
    """The largest scale of ``box`` that fits ``canvas`` (at most 1 without ``upscale``), centred."""
    box_w, box_h = box[2] - box[0], box[3] - box[1]
    canvas_w, canvas_h = canvas
    scale = min(canvas_w / box_w, canvas_h / box_h)
    if not upscale:
        scale = min(scale, 1.0)
    width = min(canvas_w, max(1, round(box_w * scale)))
    height = min(canvas_h, max(1, round(box_h * scale)))
    left, top = (canvas_w - width) // 2, (canvas_h - height) // 2
    return Placement(box, (left, top, left + width, top + height))


def pad(photo: Image.Image, canvas: tuple[int, int], placed: Box, background: str) -> Image.Image:
    """``photo`` (already at the placed size) on a canvas of ``background`` or transparent. A
    photo with alpha keeps it where it lies, as a cover output of a format with alpha does."""
    if background == TRANSPARENT:
        base = Image.new("RGBA", canvas, (0, 0, 0, 0))
        base.paste(photo if photo.mode == "RGBA" else photo.convert("RGBA"), placed[:2])
        return base
    base = Image.new(photo.mode, canvas, background)
    base.paste(photo, placed[:2])
    return base


def trim_box(copy: Image.Image, src_w: int, src_h: int, tolerance: int) -> Box:
    """The box (upright source pixels) inside a near-uniform border of ``copy`` (the analysis copy:
    the whole source, upright, flattened). The border colour is the median of the copy's outer
    frame; a pixel whose largest channel difference from it exceeds ``tolerance`` is content. The
    box found on the copy is widened to whole source pixels, so no content is cut; a copy with no
    content (one colour) gives the whole source."""
    rgb = copy if copy.mode == "RGB" else copy.convert("RGB")
    border = border_colour(rgb)
    difference = ImageChops.difference(rgb, Image.new("RGB", rgb.size, border))
    red, green, blue = difference.split()
    largest = ImageChops.lighter(ImageChops.lighter(red, green), blue)
    content = largest.point(lambda v: 255 if v > tolerance else 0).getbbox()
    if content is None:
        return 0, 0, src_w, src_h
    sx, sy = src_w / rgb.width, src_h / rgb.height
    left, top, right, bottom = content
    return (
        max(0, math.floor(left * sx)),
        max(0, math.floor(top * sy)),
        min(src_w, math.ceil(right * sx)),
        min(src_h, math.ceil(bottom * sy)),
    )


def border_colour(image: Image.Image) -> tuple[int, int, int]:
    """The median colour, channel by channel, of the image's outer one-pixel frame."""
    width, height = image.size
    frame = Image.new("RGB", (2 * (width + height), 1))
    frame.paste(image.crop((0, 0, width, 1)), (0, 0))
    frame.paste(image.crop((0, height - 1, width, height)), (width, 0))
    frame.paste(image.crop((0, 0, 1, height)).transpose(Image.Transpose.TRANSPOSE), (2 * width, 0))
    frame.paste(image.crop((width - 1, 0, width, height)).transpose(Image.Transpose.TRANSPOSE), (2 * width + height, 0))
    return tuple(_median(channel.histogram()) for channel in frame.split())  # type: ignore[return-value]


def _median(histogram: list[int]) -> int:
    """The lower median of the values a 256-bin histogram counts."""
    half, seen = (sum(histogram) + 1) // 2, 0
    for value, count in enumerate(histogram):
        seen += count
        if seen >= half:
            return value
    return 255


def analysis_region(copy: Image.Image, box: Box, src_w: int, src_h: int) -> Image.Image:
    """The part of the analysis copy that shows ``box`` (source pixels): a trimmed source's crop
    analysis runs on it."""
    sx, sy = copy.width / src_w, copy.height / src_h
    left, top = math.floor(box[0] * sx), math.floor(box[1] * sy)
    right = max(left + 1, min(copy.width, math.ceil(box[2] * sx)))
    bottom = max(top + 1, min(copy.height, math.ceil(box[3] * sy)))
    return copy.crop((left, top, right, bottom))
