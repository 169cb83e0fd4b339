"""Decoding a source once, upright, in sRGB, reduced as early as the outputs allow.

* Pixel limits are checked on the header before ``draft`` or ``load``.
* JPEGs are decoded with DCT scaling (``draft``) to the smallest scale that
  keeps at least ``headroom`` (default twice) the resolution the largest
  output needs.
* The decode is then box-reduced once, by the largest whole factor that still
  leaves the largest output's resolution, before colour conversion and
  orientation (a cheap transpose), so both touch as few pixels as possible.
* Embedded ICC profiles are converted to sRGB (ImageCms); CMYK goes through
  its embedded profile when it has one. Palette, 1-bit, 16-bit and grey
  sources become RGB(A) before any resampling; 16-bit values are rescaled.
  A transparent colour key (a PNG's tRNS on grey or RGB) becomes alpha.
* Transparency is kept (premultiplied for resampling) when the output
  format has alpha, else flattened onto the background once per source.
* Animated and multi-page files give their first frame.
* A big 8-bit PNG is decoded a band of rows at a time and reduced as it goes
  (:mod:`.pngstrips`), never whole; an RGBA decode is premultiplied band by band.
  Both give the pixels the whole-image steps would.
"""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from PIL import Image, ImageChops, ImageCms

from ..core.errors import ItemFailure
from . import pngstrips
from .formats import (
    DECODE_ERRORS,
    PILLOW_FORMATS,
    SNIFF_BYTES,
    SWAPPED_ORIENTATIONS,
    check_header_pixels,
    check_pixels,
    check_supported,
    describe,
    read_orientation,
    sniff_format,
)

_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SIXTEEN_BIT = {"I;16", "I;16B", "I;16L", "I;16N", "I"}
#: 16-bit grey to 8-bit, rescaled (65535 -> 255); as a table, so no 32-bit copy of the image is made.
_SIXTEEN_TO_EIGHT = [v // 257 for v in range(65536)]
_SRGB = ImageCms.createProfile("sRGB")
#: DCT scaling keeps at least this many times the resolution the largest output needs,
#: so the final Lanczos step, not the decoder's block scaling, makes the thumbnail.
DRAFT_HEADROOM = 2.0
#: Rows of an RGBA image premultiplied at a time for a reduction (see ``_reduced``).
PREMULTIPLY_ROWS = 256


@dataclass
class DecodedSource:
    """A source decoded once: upright, RGB or RGBA, possibly reduced by DCT scaling."""

    image: Image.Image
    width: int  # upright source width before any reduction
    height: int
    _premultiplied: Image.Image | None = field(default=None, repr=False)
    #: The last resample made from this decode and what it was asked for (see ``encode.resample``).
    _last_resample: tuple[tuple[object, ...], Image.Image] | None = field(default=None, repr=False)

    def to_decoded(self, box: tuple[int, int, int, int]) -> tuple[float, float, float, float]:
        """A box in upright source pixels, in the decoded (possibly reduced) image's pixels.

        DCT scaling rounds each axis up on its own, so each axis has its own scale.
        """
        sx, sy = self.image.width / self.width, self.image.height / self.height
        left, top, right, bottom = box
        return (
            min(left * sx, self.image.width),
            min(top * sy, self.image.height),
            min(right * sx, self.image.width),
            min(bottom * sy, self.image.height),
        )

    def for_resampling(self) -> Image.Image:
        """The image to resample: RGBA is premultiplied (``RGBa``) once, so edges do not darken."""
        if self.image.mode != "RGBA":
            return self.image
        if self._premultiplied is None:
            self._premultiplied = self.image.convert("RGBa")
        return self._premultiplied


def decode_source(
    data: bytes,
    fmt: str,
    max_pixels: int,
    needed_scale: float,
    *,
    background: str = "#ffffff",
    keep_alpha: bool = False,
    headroom: float = DRAFT_HEADROOM,
) -> DecodedSource:
    """Decode the first frame of ``data`` under ``max_pixels`` (see the module notes).

    ``fmt`` is what intake recorded; the bytes are sniffed again and their
    content decides.
    """
    decoder = SourceDecoder(data, fmt, max_pixels, background=background)
    return decoder.decoded(needed_scale, keep_alpha=keep_alpha, headroom=headroom)


#: Test instrumentation: when a list, every DCT decode appends ``("decode", label, (w, h))`` (the
#: decoded size names the DCT scale), every banded pass ``("bands", label, (w, h))`` and every
#: analysis copy ``("analysis", label, (w, h))``.
TRACE: list[tuple[str, str, tuple[int, int]]] | None = None


@dataclass
class _Raw:
    """One decode at one DCT scale, before any reduction: the source's stored orientation."""

    image: Image.Image
    stored: tuple[int, int]
    orientation: int
    icc: bytes | None


@dataclass
class _Banded:
    """A source decoded in bands (:mod:`.pngstrips`): its reductions, by factor, never the whole."""

    layout: pngstrips.PngLayout
    stored: tuple[int, int]
    orientation: int
    icc: bytes | None
    reductions: dict[int, Image.Image] = field(default_factory=dict)


class SourceDecoder:
    """One source's bytes, decoded once per DCT scale its outputs need.

    Each output size asks :meth:`decoded` for its own reduction, made exactly as a decode for that
    size alone would make it (the same DCT scale, box reduction, colour conversion and
    orientation), so an output's pixels never depend on which other sizes a claim renders; two
    sizes that need the same DCT scale share one decode. :meth:`analysis_copy` is the small
    copy crop analysis runs on: its scale depends only on the source.
    """

    def __init__(self, data: bytes, fmt: str, max_pixels: int, *, background: str = "#ffffff", label: str = "") -> None:
        self.data = data
        self.fmt = fmt
        self.max_pixels = max_pixels
        self.background = background
        self.label = label
        self._raw: dict[tuple[int, int], _Raw] = {}
        self._reduced: dict[tuple[tuple[int, int], int, bool], DecodedSource] = {}
        self._asked: dict[tuple[float, bool, float], DecodedSource] = {}  # what each call was given
        self._analysis: Image.Image | None = None
        self._expected: set[float] = set()
        self._banded: _Banded | None | bool = False  # False: not yet looked at; None: decodes whole

    def expect(self, scales: Iterable[float]) -> None:
        """The scales :meth:`decoded` will be asked for: a source decoded in bands makes all of
        their reductions in one pass."""
        self._expected.update(scales)

    def release(self) -> None:
        """Drop the whole-size decodes once every reduction the claim renders from is made (one
        asked for later decodes again)."""
        self._raw.clear()

    def decoded(
        self, needed_scale: float, *, keep_alpha: bool = False, headroom: float = DRAFT_HEADROOM
    ) -> DecodedSource:
        """The source reduced for outputs needing ``needed_scale`` of its resolution."""
        asked = (needed_scale, keep_alpha, headroom)
        if asked not in self._asked:
            self._asked[asked] = self._decoded(needed_scale, keep_alpha, headroom)
        return self._asked[asked]

    def _decoded(self, needed_scale: float, keep_alpha: bool, headroom: float) -> DecodedSource:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                banded = self._banded_for(needed_scale)
                if banded is not None:
                    return self._from_bands(banded, needed_scale, keep_alpha)
                raw = self._decode_at(needed_scale * headroom)
                factor = _shrink_factor(raw.image.size, *raw.stored, needed_scale)
                # Without transparency the reduction is the same whether alpha is kept or not: one serves both.
                key = (raw.image.size, factor, keep_alpha and raw.image.mode == "RGBA")
                if key not in self._reduced:
                    reduced = _reduced(raw.image, factor)
                    self._reduced[key] = self._finish(reduced, raw.stored, raw.orientation, raw.icc, key[2])
                return self._reduced[key]
        except ItemFailure:
            raise
        except DECODE_ERRORS as exc:
            raise ItemFailure("corrupt_image", f"{self.fmt} data does not decode: {describe(exc)}") from exc

    def analysis_copy(self, needed_scale: float) -> Image.Image:
        """The copy crop analysis runs on: the decode for ``needed_scale`` (a function of the
        source alone, see :data:`~thumbctl.core.profile.ANALYSIS_REFERENCE_SIZE`), upright and flattened; made once."""
        if self._analysis is None:
            self._analysis = self.decoded(needed_scale, keep_alpha=False).image
            if TRACE is not None:
                TRACE.append(("analysis", self.label, self._analysis.size))
        return self._analysis

    def _opened(self) -> Image.Image:
        """The source opened (header read, limits checked), not yet decoded."""
        head = self.data[:SNIFF_BYTES]
        self.fmt = check_supported(sniff_format(head), head)  # content decides
        check_header_pixels(self.fmt, head, self.max_pixels)
        image = Image.open(io.BytesIO(self.data), formats=[PILLOW_FORMATS[self.fmt]])
        check_pixels(self.fmt, *image.size, self.max_pixels)
        return image

    def _decode_at(self, draft_scale: float) -> _Raw:
        """The decode at the DCT scale ``draft_scale`` selects, made once."""
        image = self._opened()
        stored = image.size
        orientation = read_orientation(image)
        icc = image.info.get("icc_profile")
        _draft(image, self.fmt, *stored, draft_scale)
        if image.size in self._raw:
            image.close()
            return self._raw[image.size]
        image.load()
        if TRACE is not None:
            TRACE.append(("decode", self.label, image.size))
        raw = _Raw(_normalise_mode(image), stored, orientation, icc)
        self._raw[image.size] = raw
        return raw

    def _banded_for(self, needed_scale: float) -> _Banded | None:
        """The banded decode of a big 8-bit PNG whose reductions all shrink it (None otherwise)."""
        if self._banded is False:
            self._banded = self._look_for_bands()
        banded = self._banded
        if banded is None:
            return None
        w, h = banded.stored
        factors = {_shrink_factor(banded.stored, w, h, s) for s in self._expected | {needed_scale}}
        missing = factors - set(banded.reductions)
        if not missing:
            return banded
        rows = pngstrips.band_rows(banded.layout, factors) if min(factors) >= 2 else None
        if rows is None:  # a reduction too small to save anything, or bands too tall: decode whole
            self._banded = None
            return None
        if TRACE is not None:
            TRACE.append(("bands", self.label, banded.stored))
        made = pngstrips.reduced_bands(self.data, banded.layout, missing, rows, _normalise_mode)
        banded.reductions.update(made)
        return banded

    def _look_for_bands(self) -> _Banded | None:
        image = self._opened()  # limits first, whatever the path
        try:
            if self.fmt != "png" or image.width * image.height < pngstrips.MIN_PIXELS:
                return None
            layout = pngstrips.png_layout(self.data)
            if layout is None or (layout.width, layout.height) != image.size:
                return None
            return _Banded(layout, image.size, read_orientation(image), image.info.get("icc_profile"))
        finally:
            image.close()

    def _from_bands(self, banded: _Banded, needed_scale: float, keep_alpha: bool) -> DecodedSource:
        factor = _shrink_factor(banded.stored, *banded.stored, needed_scale)
        reduced = banded.reductions[factor]
        key = (banded.stored, factor, keep_alpha and reduced.mode == "RGBA")
        if key not in self._reduced:
            self._reduced[key] = self._finish(reduced, banded.stored, banded.orientation, banded.icc, key[2])
        return self._reduced[key]

    def _finish(
        self, reduced: Image.Image, stored: tuple[int, int], orientation: int, icc: bytes | None, keep_alpha: bool
    ) -> DecodedSource:
        """A reduction in sRGB, upright, flattened unless alpha is kept."""
        image = _to_srgb(reduced, icc)
        method = _TRANSPOSE.get(orientation)
        if method is not None:
            image = image.transpose(method)
        if image.mode == "RGBA" and not keep_alpha:
            image = flatten(image, self.background)
        stored_w, stored_h = stored
        upright = (stored_h, stored_w) if orientation in SWAPPED_ORIENTATIONS else (stored_w, stored_h)
        return DecodedSource(image, *upright)


def _draft(image: Image.Image, fmt: str, width: int, height: int, draft_scale: float) -> None:
    if fmt != "jpeg" or draft_scale >= 1:
        return
    want = (max(1, math.ceil(width * draft_scale)), max(1, math.ceil(height * draft_scale)))
    image.draft(image.mode if image.mode in ("CMYK", "L") else "RGB", want)


def _shrink_factor(size: tuple[int, int], stored_w: int, stored_h: int, needed_scale: float) -> int:
    """The largest whole factor that keeps the decoded image at least as large as the outputs of
    ``needed_scale`` need (resampling finishes each ratio with Lanczos); 1 for none. Colour
    conversion and orientation then run on fewer pixels."""
    width, height = size
    factor = math.floor(min(width / (stored_w * needed_scale), height / (stored_h * needed_scale)))
    return factor if factor >= 2 else 1


def _reduced(image: Image.Image, factor: int) -> Image.Image:
    if factor < 2:
        return image
    if image.mode != "RGBA":
        return image.reduce(factor)
    # Average premultiplied colour, or transparent pixels bleed in; premultiplied a band of whole
    # blocks at a time, so no second full-size copy is made (the same pixels as in one go).
    reduced = Image.new("RGBA", (math.ceil(image.width / factor), math.ceil(image.height / factor)))
    rows = factor * max(1, PREMULTIPLY_ROWS // factor)
    for top in range(0, image.height, rows):
        band = image.crop((0, top, image.width, min(image.height, top + rows)))
        reduced.paste(band.convert("RGBa").reduce(factor).convert("RGBA"), (0, top // factor))
    return reduced


def _normalise_mode(image: Image.Image) -> Image.Image:
    """RGB, RGBA, CMYK or L, from any mode Pillow decodes: 16-bit rescaled, palettes expanded,
    a transparent colour key turned into alpha."""
    if image.mode in _SIXTEEN_BIT:
        image = _eight_bit_grey(image)
    if image.mode == "F":
        image = _eight_bit_from_float(image)
    if image.mode == "1":
        image = image.convert("L")  # keeps a colour key: 1-bit white is 255 in L
    if image.mode in ("P", "L", "RGB") and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode == "P":
        image = image.convert("RGB")
    if image.mode in ("LA", "PA", "La", "RGBa"):
        image = image.convert("RGBA")
    if image.mode not in ("RGB", "RGBA", "CMYK", "L"):
        image = image.convert("RGB")
    return image


def _eight_bit_from_float(image: Image.Image) -> Image.Image:
    """L from floating-point grey: 0..1 data (the usual convention) is scaled to 0..255;
    anything else is taken as 0..255 and clamped."""
    _, high = image.getextrema()
    scale = 255.0 if 0 < high <= 1.0 else 1.0
    return image.point(lambda v: v * scale).convert("L") if scale != 1.0 else image.convert("L")


def _eight_bit_grey(image: Image.Image) -> Image.Image:
    """L from 16-bit grey, rescaled rather than clamped; LA when it has a transparent grey value."""
    wide = image if image.mode == "I" else image.convert("I")
    grey = wide.point(_SIXTEEN_TO_EIGHT, "L")
    key = image.info.get("transparency")
    if not isinstance(key, int):
        return grey
    alpha = wide.point([0 if v == key else 255 for v in range(65536)], "L")
    return Image.merge("LA", (grey, alpha))


def _to_srgb(image: Image.Image, icc: bytes | None) -> Image.Image:
    """RGB or RGBA in sRGB, from RGB, RGBA, CMYK or L."""
    if icc and image.mode in ("RGB", "RGBA", "CMYK"):
        return _apply_profile(image, icc)
    return image if image.mode in ("RGB", "RGBA") else image.convert("RGB")


def _apply_profile(image: Image.Image, icc: bytes) -> Image.Image:
    alpha = image.getchannel("A") if image.mode == "RGBA" else None
    base = image.convert("RGB") if alpha is not None else image
    try:
        transform = _transform(hashlib.sha256(icc).digest(), icc, base.mode)
        if transform is None:
            converted = base if base.mode == "RGB" else base.convert("RGB")
        else:
            converted = ImageCms.applyTransform(base, transform)
    except (OSError, ImageCms.PyCMSError) as exc:  # the profile does not parse, or lcms refuses it
        raise ItemFailure("corrupt_image", f"embedded colour profile is unusable: {describe(exc)}") from exc
    if alpha is not None:
        converted.putalpha(alpha)
    return converted


@lru_cache(maxsize=32)
def _transform(key: bytes, icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """A cached transform from the embedded profile to sRGB; None when the profile does not
    describe ``mode``, or when it leaves colours as they are (an sRGB profile, whatever its name)."""
    profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
    space = profile.profile.xcolor_space.strip()
    if (mode == "RGB" and space != "RGB") or (mode == "CMYK" and space != "CMYK"):
        return None
    transform = ImageCms.buildTransform(profile, _SRGB, mode, "RGB", renderingIntent=ImageCms.Intent.PERCEPTUAL)
    if mode == "RGB" and _leaves_colours_alone(transform):
        return None
    return transform


def _leaves_colours_alone(transform: ImageCms.ImageCmsTransform) -> bool:
    """True when every colour of a 9x9x9 grid (and so the cube between) moves by at most 1 step."""
    steps = [min(255, 32 * i) for i in range(9)]
    grid = Image.new("RGB", (81, 9))
    grid.putdata([(r, g, b) for r in steps for g in steps for b in steps])
    moved = ImageChops.difference(grid, ImageCms.applyTransform(grid, transform))
    return max(high for _, high in moved.getextrema()) <= 1


def flatten(image: Image.Image, background: str) -> Image.Image:
    """Composite RGBA onto an opaque background colour."""
    base = Image.new("RGB", image.size, background)
    base.paste(image, mask=image.getchannel("A"))
    return base
