"""Content sniffing and header probes under limits.

Formats are recognised by their leading bytes, never by file name, and a
source's dimensions are read from its header before anything is decoded, so
a decompression bomb is refused without allocating its pixels. Nothing here
decodes pixels: the EXIF orientation of a PNG is found by walking its chunk
headers, not by Pillow's ``getexif()`` (which decodes the whole image to look
for an eXIf chunk after the image data).
"""

from __future__ import annotations

import importlib.util
import io
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from PIL import Image, PngImagePlugin, UnidentifiedImageError

from ..core.errors import ItemFailure

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
#: What decoders raise on bad data; libavif's and libheif's refusals arrive as RuntimeError.
#: What Pillow's parsers raise on hostile bytes (struct.error from packed headers, KeyError from
#: tag tables, ArithmeticError from sizes that divide by zero or overflow).
DECODE_ERRORS = (
    UnidentifiedImageError,
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    RuntimeError,
    struct.error,
    KeyError,
    TypeError,
    ArithmeticError,
    MemoryError,
)
SWAPPED_ORIENTATIONS = {5, 6, 7, 8}
SNIFF_BYTES = 32
_ORIENTATION = 0x0112
#: Chunk headers walked looking for a PNG's eXIf before giving up (a hostile file can hold millions),
#: and the largest eXIf read (its length field is read before its data is).
_MAX_PNG_CHUNKS = 65_536
_MAX_EXIF_BYTES = 1 << 22


@dataclass(frozen=True)
class SourceInfo:
    """What a header says about a source: format and upright dimensions."""

    format: str
    width: int
    height: int
    orientation: int = 1


def sniff_format(head: bytes) -> str | None:
    """Name the image format of a file from its first bytes, or None."""
    if head.startswith(b"\xff\xd8"):  # the start-of-image marker: whatever follows, it claims to be a JPEG
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
    check_header_pixels(fmt, head, max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(source, formats=[PILLOW_FORMATS[fmt]]) as image:
                width, height = image.size
                check_pixels(fmt, width, height, max_pixels)
                orientation = read_orientation(image)
    except ItemFailure:
        raise
    except FileNotFoundError as exc:
        raise ItemFailure("source_missing", f"vanished while reading: {exc.strerror}") from exc
    except PermissionError as exc:
        raise ItemFailure("io_error", f"cannot read: {exc.strerror}") from exc
    except DECODE_ERRORS as exc:
        raise ItemFailure("corrupt_image", f"{fmt} header does not decode: {describe(exc)}") from exc
    except Exception as exc:  # anything else a parser raises still must not end a whole submit
        raise ItemFailure("corrupt_image", f"{fmt} header does not decode: {type(exc).__name__}: {exc}") from exc
    if orientation in SWAPPED_ORIENTATIONS:
        width, height = height, width
    return SourceInfo(fmt, width, height, orientation)


def check_pixels(fmt: str, width: int, height: int, max_pixels: int) -> None:
    """Refuse a header's dimensions when they are empty or over the pixel limit."""
    if width < 1 or height < 1:
        raise ItemFailure("corrupt_image", f"{fmt} header gives {width}x{height} pixels")
    if width * height > max_pixels:
        raise ItemFailure(
            "too_many_pixels",
            f"{width}x{height} = {width * height / 1e6:.1f} MP is over the limit of {max_pixels / 1e6:g} MP",
        )


def check_header_pixels(fmt: str, head: bytes, max_pixels: int) -> None:
    """The pixel limit, checked on the sizes the first bytes declare, for formats whose
    decoder Pillow sets up for the whole canvas as it opens them (WebP): a header over the
    limit is ``too_many_pixels`` without a decoder, or its buffers, ever being made."""
    size = webp_canvas_size(head) if fmt == "webp" else None
    if size is not None:
        check_pixels(fmt, *size, max_pixels)


def webp_canvas_size(head: bytes) -> tuple[int, int] | None:
    """The canvas a WebP's first chunk declares (its first 30 bytes hold it), or None.

    VP8X: 24-bit width - 1 and height - 1 at 24 and 27. VP8 (lossy): after the 3-byte frame
    tag and the start code 9d 01 2a, two 16-bit sizes whose top 2 bits are scaling. VP8L
    (lossless): after the signature byte 2f, 14 bits of width - 1 and 14 of height - 1.
    """
    chunk = head[12:16]
    if chunk == b"VP8X" and len(head) >= 30:
        return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    return None


def describe(exc: BaseException) -> str:
    """A decoder error in one line, without the repr of a file object Pillow puts in some."""
    if isinstance(exc, UnidentifiedImageError):
        return "unrecognised data"
    return " ".join(str(exc).split()) or type(exc).__name__


def read_orientation(image: Image.Image) -> int:
    """The EXIF orientation (1-8) still to apply to ``image`` once decoded; reads no pixels.

    Pillow (11.3 and later, our minimum) turns a TIFF upright itself as it loads it,
    and reports its upright size, so a TIFF has nothing left to apply.
    """
    if image.format == "TIFF":
        return 1
    try:
        if isinstance(image, PngImagePlugin.PngImageFile) and "exif" not in image.info:
            value = _png_orientation(image)
        else:
            value = image.getexif().get(_ORIENTATION, 1)
    except DECODE_ERRORS:
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _png_orientation(image: PngImagePlugin.PngImageFile) -> object:
    """Orientation from an eXIf chunk after the image data, else from what Pillow read before it
    (text profiles, XMP), as ``getexif()`` would give it after decoding everything."""
    late = _png_exif_chunk(image.fp) if image.fp is not None else None
    if late:
        exif = Image.Exif()
        exif.load(late)
        if _ORIENTATION in exif:
            return exif[_ORIENTATION]
    return Image.Image.getexif(image).get(_ORIENTATION, 1)  # the generic reader decodes nothing


def _png_exif_chunk(stream: BinaryIO) -> bytes | None:
    """The data of a PNG's eXIf chunk, found by seeking from chunk header to chunk header."""
    position = stream.tell()
    try:
        stream.seek(8)
        for _ in range(_MAX_PNG_CHUNKS):
            header = stream.read(8)
            if len(header) < 8:
                return None
            length, found = struct.unpack(">I4s", header)
            if found == b"eXIf":
                return stream.read(length) if length <= _MAX_EXIF_BYTES else None
            if found == b"IEND":
                return None
            stream.seek(length + 4, io.SEEK_CUR)  # data and CRC
        return None
    finally:
        stream.seek(position)
