"""Resampling, encoding and verification of outputs.

Outputs carry no metadata but a fixed sRGB ICC profile (the same bytes every
time), so the same inputs give byte-identical files.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import BinaryIO

from PIL import Image, ImageCms

from ..core.encoders import EARLIER_EFFORT, avif_speed, webp_method
from .decode import DecodedSource
from .formats import DECODE_ERRORS, PILLOW_FORMATS

ALPHA_FORMATS = frozenset({"png", "webp", "avif"})
#: Box-reduce by whole factors, then Lanczos for the remaining (1x-2x) shrink, as libvips does.
#: On 12 MP photos this is within ~38 dB PSNR of Lanczos alone at about a third of its cost.
REDUCING_GAP = 1.0


def _fixed_srgb_profile() -> bytes:
    """lcms's sRGB profile with its creation date and profile id zeroed, so it never changes."""
    data = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    data[24:36] = bytes(12)
    data[84:100] = bytes(16)
    return bytes(data)


SRGB_PROFILE = _fixed_srgb_profile()


def resample(
    source: DecodedSource,
    box: tuple[int, int, int, int],
    width: int,
    height: int,
    kernel: Image.Resampling = Image.Resampling.LANCZOS,
) -> Image.Image:
    """Crop ``box`` (upright source pixels) and resample it to ``width`` x ``height``: an
    integer box reduction, then ``kernel`` (see REDUCING_GAP).

    The same request made again of the same decode returns the same image (the last one is
    kept), so the formats of one ratio and size share one resample: callers must not modify it.
    """
    key = (box, width, height, kernel)
    if source._last_resample is not None and source._last_resample[0] == key:
        return source._last_resample[1]
    scaled = source.to_decoded(box)
    image = source.for_resampling().resize((width, height), kernel, box=scaled, reducing_gap=REDUCING_GAP)
    image = image.convert("RGBA") if image.mode == "RGBa" else image
    image.info.clear()  # resize copies the source's info, and the PNG encoder would write its tRNS
    source._last_resample = (key, image)
    return image


def encode(image: Image.Image, fmt: str, quality: int, *, effort: int | None = None, progressive: bool = True) -> bytes:
    """Encode deterministically, with no metadata but the sRGB profile. JPEGs have optimised
    Huffman tables and are progressive unless ``progressive`` is False. ``effort`` is thumbctl's
    scale (:mod:`thumbctl.core.encoders`: higher is slower and smaller); None is the format's earlier
    fixed effort (WebP method 4, AVIF speed 8). JPEG and PNG take none."""
    buf = io.BytesIO()
    if image.mode == "RGBA" and fmt not in ALPHA_FORMATS:
        raise ValueError(f"{fmt} has no alpha channel; flatten first")
    common = {"icc_profile": SRGB_PROFILE}
    if fmt == "jpeg":
        image.save(buf, "JPEG", quality=quality, progressive=progressive, optimize=True, subsampling="4:2:0", **common)
    elif fmt == "webp":
        method = webp_method(EARLIER_EFFORT["webp"] if effort is None else effort)
        image.save(buf, "WEBP", quality=quality, method=method, exact=False, **common)
    elif fmt == "avif":
        speed = avif_speed(EARLIER_EFFORT["avif"] if effort is None else effort)
        image.save(buf, "AVIF", quality=quality, speed=speed, max_threads=1, **common)
    elif fmt == "png":
        image.save(buf, "PNG", compress_level=6, **common)
    else:
        raise ValueError(f"unknown output format {fmt!r}")
    return buf.getvalue()


#: JPEG quality of the contact sheet's previews: small files, good enough to judge a crop by.
PREVIEW_QUALITY = 70


def preview_jpeg(image: Image.Image) -> bytes:
    """A small baseline JPEG of ``image`` (already sRGB and small) for the contact sheet."""
    buf = io.BytesIO()
    (image if image.mode == "RGB" else image.convert("RGB")).save(buf, "JPEG", quality=PREVIEW_QUALITY)
    return buf.getvalue()


def verify_output(source: BinaryIO | Path, fmt: str, width: int, height: int, *, full: bool = True) -> str | None:
    """Why an output file is not what it should be, or None when it is.

    Checks the media type and exact dimensions from the header and, with
    ``full``, that every pixel decodes. A JPEG is decoded at 1/8 scale: libjpeg
    still reads every coefficient of the entropy-coded data (all of a progressive
    file's scans), where every decoding error arises, and skips most of the inverse
    DCT and upsampling, which cannot fail; about a fifth cheaper per output
    (``tests/test_imaging.py`` holds the two decodes to the same verdicts).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(source, formats=[PILLOW_FORMATS[fmt]]) as image:
                if image.size != (width, height):
                    return f"is {image.width}x{image.height}, expected {width}x{height}"
                if full:
                    if fmt == "jpeg":
                        image.draft(image.mode, (max(1, width // 8), max(1, height // 8)))
                    image.load()
    except FileNotFoundError:
        return "is missing"
    except DECODE_ERRORS as exc:
        return f"does not decode as {fmt}: {exc}"
    return None


def output_header_size(path: str, fmt: str) -> tuple[int, int] | None:
    """An output file's width and height from its header (nothing decoded), or None when it
    is missing or does not open as ``fmt``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path, formats=[PILLOW_FORMATS[fmt]]) as image:
                return image.size
    except DECODE_ERRORS:
        return None
