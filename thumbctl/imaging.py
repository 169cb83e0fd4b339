"""Pixels: content sniffing and header probes under limits.

Formats are recognised by their leading bytes, never by file name, and a
source's dimensions are read from its header before anything is decoded, so
a decompression bomb is refused without allocating its pixels.
"""

from __future__ import annotations

import importlib.util
import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from PIL import Image, UnidentifiedImageError

from .errors import ItemFailure
from .settings import Ratio

# thumbctl enforces its own pixel limit from the header (Limits.max_pixels),
# before any decode; Pillow's global guard would only get in the way of it.
Image.MAX_IMAGE_PIXELS = None

#: Our format name -> the Pillow plugin that decodes it.
PILLOW_FORMATS: dict[str, str] = {
    "jpeg": "JPEG",
    "png": "PNG",
    "gif": "GIF",
    "webp": "WEBP",
    "tiff": "TIFF",
    "bmp": "BMP",
    "avif": "AVIF",
    "heif": "HEIF",
}
_AVIF_BRANDS = {b"avif", b"avis"}
_HEIF_BRANDS = {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"}
_DECODE_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, IndexError)
_SWAPPED_ORIENTATIONS = {5, 6, 7, 8}
SNIFF_BYTES = 32


@dataclass(frozen=True)
class SourceInfo:
    """What a header says about a source: format and upright dimensions."""

    format: str
    width: int
    height: int
    orientation: int = 1


def sniff_format(head: bytes) -> str | None:
    """Name the image format of a file from its first bytes, or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:2] == b"BM" and len(head) >= 26:
        return "bmp"
    if head[4:8] == b"ftyp":
        brands = {head[i : i + 4] for i in range(8, min(len(head), SNIFF_BYTES) - 3, 4)}
        if brands & _AVIF_BRANDS:
            return "avif"
        if brands & _HEIF_BRANDS:
            return "heif"
    return None


def heif_available() -> bool:
    """Whether the optional HEIC/HEIF decoder (``thumbctl[heif]``) is installed."""
    return importlib.util.find_spec("pillow_heif") is not None


def _register_heif() -> None:
    import pillow_heif  # type: ignore[import-not-found]

    pillow_heif.register_heif_opener()


def check_supported(fmt: str | None, head: bytes) -> str:
    """Return ``fmt`` if thumbctl can decode it, else raise ``unsupported_format``."""
    if fmt is None:
        what = "an empty file" if not head else "not an image of a supported format"
        raise ItemFailure("unsupported_format", what)
    if fmt == "heif":
        if not heif_available():
            raise ItemFailure("unsupported_format", "HEIC/HEIF needs the optional extra: pip install 'thumbctl[heif]'")
        _register_heif()
    return fmt


def probe(source: BinaryIO | Path, head: bytes, max_pixels: int) -> SourceInfo:
    """Read the header of ``source`` (whose first bytes are ``head``) under the pixel limit.

    Raises :class:`ItemFailure` with ``unsupported_format``, ``corrupt_image``
    or ``too_many_pixels``. Nothing is decoded.
    """
    fmt = check_supported(sniff_format(head), head)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(source, formats=[PILLOW_FORMATS[fmt]]) as image:
                width, height = image.size
                orientation = _orientation(image)
    except FileNotFoundError as exc:
        raise ItemFailure("source_missing", f"vanished while reading: {exc.strerror}") from exc
    except PermissionError as exc:
        raise ItemFailure("io_error", f"cannot read: {exc.strerror}") from exc
    except _DECODE_ERRORS as exc:
        raise ItemFailure("corrupt_image", f"{fmt} header does not decode: {exc}") from exc
    if width < 1 or height < 1:
        raise ItemFailure("corrupt_image", f"{fmt} header gives {width}x{height} pixels")
    if width * height > max_pixels:
        raise ItemFailure(
            "too_many_pixels",
            f"{width}x{height} = {width * height / 1e6:.1f} MP is over the limit of {max_pixels / 1e6:g} MP",
        )
    if orientation in _SWAPPED_ORIENTATIONS:
        width, height = height, width
    return SourceInfo(fmt, width, height, orientation)


def _orientation(image: Image.Image) -> int:
    try:
        value = image.getexif().get(0x0112, 1)
    except _DECODE_ERRORS:
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


# -- rendering ------------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """Where one output comes from and how big it is, in upright source pixels."""

    crop_w: int
    crop_h: int
    out_w: int
    out_h: int


def output_geometry(src_w: int, src_h: int, ratio: Ratio, size: int, upscale: bool) -> Geometry:
    """The largest ``ratio`` window that fits the source, scaled so its longest side is ``size``.

    Without ``upscale`` the output is never larger than the window itself; a
    small source gives the largest exact-ratio crop it has.
    """
    if src_w * ratio.h >= src_h * ratio.w:
        crop_h = src_h
        crop_w = max(1, min(src_w, round(src_h * ratio.w / ratio.h)))
    else:
        crop_w = src_w
        crop_h = max(1, min(src_h, round(src_w * ratio.h / ratio.w)))
    if ratio.w >= ratio.h:
        out_w, out_h = size, max(1, round(size * ratio.h / ratio.w))
    else:
        out_w, out_h = max(1, round(size * ratio.w / ratio.h)), size
    if not upscale and max(out_w, out_h) > max(crop_w, crop_h):
        out_w, out_h = crop_w, crop_h
    return Geometry(crop_w, crop_h, out_w, out_h)


def crop_box(
    src_w: int, src_h: int, geometry: Geometry, focus: tuple[float, float] | None
) -> tuple[int, int, int, int]:
    """Place the crop window: centred, or centred on ``focus`` as near as the edges allow."""
    fx, fy = focus if focus is not None else (0.5, 0.5)
    left = min(max(round(fx * src_w - geometry.crop_w / 2), 0), src_w - geometry.crop_w)
    top = min(max(round(fy * src_h - geometry.crop_h / 2), 0), src_h - geometry.crop_h)
    return left, top, left + geometry.crop_w, top + geometry.crop_h


@dataclass
class DecodedSource:
    """A source decoded once, upright, in RGB or RGBA, possibly reduced by DCT scaling."""

    image: Image.Image
    width: int  # upright source width before any reduction
    height: int

    @property
    def scale(self) -> float:
        return self.image.width / self.width


def decode_source(data: bytes, fmt: str, max_pixels: int, needed_scale: float) -> DecodedSource:
    """Decode the first frame of ``data`` upright, reducing JPEGs at decode time.

    ``needed_scale`` is the largest output/source scale any output needs; the
    DCT reduction keeps at least twice that resolution. Pixel limits are
    checked on the header before anything is decoded.
    """
    try:
        image = Image.open(io.BytesIO(data), formats=[PILLOW_FORMATS[check_supported(fmt, data[:SNIFF_BYTES])]])
        stored_w, stored_h = image.size
        if stored_w * stored_h > max_pixels:
            raise ItemFailure("too_many_pixels", f"{stored_w}x{stored_h} is over the limit")
        orientation = _orientation(image)
        if fmt == "jpeg" and needed_scale < 0.5:
            want = max(1, math.ceil(stored_w * needed_scale * 2)), max(1, math.ceil(stored_h * needed_scale * 2))
            image.draft("RGB", want)
        image.load()
        image = _upright(image, orientation)
    except ItemFailure:
        raise
    except _DECODE_ERRORS as exc:
        raise ItemFailure("corrupt_image", f"{fmt} data does not decode: {exc}") from exc
    upright_w, upright_h = (stored_h, stored_w) if orientation in _SWAPPED_ORIENTATIONS else (stored_w, stored_h)
    return DecodedSource(_to_rgb_or_rgba(image), upright_w, upright_h)


def _upright(image: Image.Image, orientation: int) -> Image.Image:
    method = {
        2: Image.Transpose.FLIP_LEFT_RIGHT,
        3: Image.Transpose.ROTATE_180,
        4: Image.Transpose.FLIP_TOP_BOTTOM,
        5: Image.Transpose.TRANSPOSE,
        6: Image.Transpose.ROTATE_270,
        7: Image.Transpose.TRANSVERSE,
        8: Image.Transpose.ROTATE_90,
    }.get(orientation)
    return image.transpose(method) if method is not None else image


def _to_rgb_or_rgba(image: Image.Image) -> Image.Image:
    if image.mode in ("RGB", "RGBA"):
        return image
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        return image.point(lambda v: v / 256).convert("L").convert("RGB")
    if image.mode == "P" and "transparency" in image.info:
        return image.convert("RGBA")
    if image.mode in ("LA", "PA", "La", "RGBa"):
        return image.convert("RGBA")
    return image.convert("RGB")


def render(
    source: DecodedSource,
    geometry: Geometry,
    focus: tuple[float, float] | None,
    background: str,
) -> Image.Image:
    """Crop and resample one output from a decoded source (transparency flattened)."""
    box = crop_box(source.width, source.height, geometry, focus)
    scale = source.scale
    scaled_box = tuple(v * scale for v in box)
    image = source.image
    if image.mode == "RGBA":
        image = _flatten(image, background)
    return image.resize((geometry.out_w, geometry.out_h), Image.Resampling.LANCZOS, box=scaled_box, reducing_gap=3.0)


def _flatten(image: Image.Image, background: str) -> Image.Image:
    base = Image.new("RGB", image.size, background)
    base.paste(image, mask=image.getchannel("A"))
    return base


def encode(image: Image.Image, fmt: str, quality: int) -> bytes:
    """Encode deterministically, with no metadata."""
    buf = io.BytesIO()
    if fmt == "jpeg":
        image.save(buf, "JPEG", quality=quality, progressive=True, optimize=True, subsampling="4:2:0")
    elif fmt == "webp":
        image.save(buf, "WEBP", quality=quality, method=4)
    elif fmt == "avif":
        image.save(buf, "AVIF", quality=quality, speed=8, max_threads=1)
    elif fmt == "png":
        image.save(buf, "PNG", compress_level=6)
    else:
        raise ValueError(f"unknown output format {fmt!r}")
    return buf.getvalue()


def verify_output(source: BinaryIO | Path, fmt: str, width: int, height: int, *, full: bool = True) -> str | None:
    """Why an output file is not what it should be, or None when it is.

    Checks the media type and exact dimensions from the header and, with
    ``full``, that every pixel decodes.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(source, formats=[PILLOW_FORMATS[fmt]]) as image:
                if image.size != (width, height):
                    return f"is {image.width}x{image.height}, expected {width}x{height}"
                if full:
                    image.load()
    except FileNotFoundError:
        return "is missing"
    except _DECODE_ERRORS as exc:
        return f"does not decode as {fmt}: {exc}"
    return None
