"""A big PNG decoded a band of rows at a time and box-reduced as it goes, so the whole image is
never held: a 100 MP PNG would otherwise take 400 MB (Pillow keeps RGB in 4 bytes a pixel).

Pillow's PNG decoder only fills a whole image, so each band is handed to it as a PNG of its own:
the source's header with the band's height, its palette and transparency chunks, and the band's
filtered rows (inflated here, bounded) behind one unfiltered copy of the row above the band, which
is what the band's filters refer to; the decoded band then starts at its second row. Pillow thus
unfilters and unpacks every row exactly as in a whole decode, and a box reduction over whole blocks
of rows gives the same pixels band by band: the result is identical to reducing the whole decode.

Only non-interlaced 8-bit PNGs (grey, RGB, palette, grey with alpha, RGBA; not APNG) take this path:
there Pillow's mode holds the stored bytes as they are, so the row above can be packed back.
"""

from __future__ import annotations

import io
import math
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from PIL import Image

SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Sources of at least this many pixels take the banded path (smaller ones decode whole, faster).
MIN_PIXELS = 16_000_000
#: About this many bytes of decoded pixels per band.
BAND_BYTES = 2 * 1024 * 1024
#: Stored colour type (at bit depth 8) -> (Pillow mode, bytes per pixel).
_BYTE_MODES = {0: ("L", 1), 2: ("RGB", 3), 3: ("P", 1), 4: ("LA", 2), 6: ("RGBA", 4)}
#: Compressed bytes handed to the inflater at a time.
_FEED = 1 << 20


@dataclass(frozen=True)
class PngLayout:
    """Where a PNG's rows are, and the chunks a band needs to decode as the source would."""

    width: int
    height: int
    mode: str
    row_bytes: int
    ihdr: bytes  # the IHDR chunk's data
    extra: bytes  # the PLTE and tRNS chunks, whole, as stored
    idat: tuple[tuple[int, int], ...]  # (offset, length) of each IDAT chunk's data


def png_layout(data: bytes) -> PngLayout | None:
    """The layout of a PNG the banded path takes, or None (anything else, or a PNG whose chunks do
    not parse: the whole decode reports those)."""
    if not data.startswith(SIGNATURE):
        return None
    ihdr, extra, idat, offset = b"", b"", [], len(SIGNATURE)
    while offset + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        start, end = offset + 8, offset + 12 + length
        if end > len(data):
            return None
        if kind == b"IHDR":
            ihdr = data[start : start + length]
        elif kind in (b"PLTE", b"tRNS"):
            extra += data[offset:end]
        elif kind == b"acTL":
            return None
        elif kind == b"IDAT":
            idat.append((start, length))
        elif idat or kind == b"IEND":
            break
        offset = end
    if len(ihdr) != 13 or not idat:
        return None
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    if depth != 8 or colour not in _BYTE_MODES or interlace or width < 1 or height < 1:
        return None
    mode, bpp = _BYTE_MODES[colour]
    return PngLayout(width, height, mode, width * bpp, ihdr, extra, tuple(idat))


def band_rows(layout: PngLayout, factors: set[int]) -> int | None:
    """Rows per band: a multiple of every factor (so each band reduces in whole blocks) near
    :data:`BAND_BYTES`; None when even one common multiple is too tall to be worth it."""
    step = math.lcm(*factors)
    most = max(1, BAND_BYTES // (layout.width * 4))
    if step > most or step >= layout.height:
        return None
    return step * (most // step)


def reduced_bands(
    data: bytes, layout: PngLayout, factors: set[int], rows: int, normalise: Callable[[Image.Image], Image.Image]
) -> dict[int, Image.Image]:
    """The whole image, made mode-normal by ``normalise`` and box-reduced by each factor (RGBA
    through premultiplied RGBa, as the whole decode does), one band at a time."""
    made: dict[int, Image.Image] = {}
    top = 0
    for band, first in _bands(data, layout, rows):
        image = normalise(band)
        premultiplied = image.mode == "RGBA"
        source = image.convert("RGBa") if premultiplied else image
        box = (0, first, image.width, image.height)
        for factor in factors:
            part = source.reduce(factor, box)
            if factor not in made:
                size = (math.ceil(layout.width / factor), math.ceil(layout.height / factor))
                made[factor] = Image.new("RGBA" if premultiplied else part.mode, size)
            made[factor].paste(part.convert("RGBA") if premultiplied else part, (0, top // factor))
        top += image.height - first
        del band, image, source
    return made


def _bands(data: bytes, layout: PngLayout, rows: int) -> Iterator[tuple[Image.Image, int]]:
    """Each band decoded, with the index of its first own row (1 after the row above, else 0)."""
    stream = _filtered_rows(data, layout)
    above = b""
    for top in range(0, layout.height, rows):
        count = min(rows, layout.height - top)
        filtered = stream(count * (1 + layout.row_bytes))
        band = _decode_band(layout, above, filtered, count)
        first = 1 if above else 0
        above = band.crop((0, band.height - 1, band.width, band.height)).tobytes("raw", layout.mode)
        yield band, first


def _filtered_rows(data: bytes, layout: PngLayout) -> Callable[[int], bytes]:
    """A reader of the next ``n`` bytes of the inflated image data (filter byte + row each); inflates
    no more than asked, so a decompression bomb costs nothing beyond the rows the header declares."""
    inflater = zlib.decompressobj()
    chunks = iter(
        memoryview(data)[offset + i : offset + min(length, i + _FEED)]
        for offset, length in layout.idat
        for i in range(0, length, _FEED)
    )

    def read(n: int) -> bytes:
        out: list[bytes] = []
        have = 0
        while have < n:
            source = inflater.unconsumed_tail or next(chunks, None)
            if source is None or inflater.eof:
                raise OSError(f"image file is truncated: the image data ends {n - have} bytes short")
            try:
                piece = inflater.decompress(source, n - have)  # never more than asked
            except zlib.error as exc:
                raise OSError(f"image data does not inflate: {exc}") from exc
            out.append(piece)
            have += len(piece)
        return b"".join(out)

    return read


def _decode_band(layout: PngLayout, above: bytes, filtered: bytes, count: int) -> Image.Image:
    """One band as a PNG of its own (the row above, unfiltered, first), decoded by Pillow."""
    deflater = zlib.compressobj(0)  # stored: the band is only handed over, not compressed again
    idat = (
        [deflater.compress(b"\0" + above), deflater.compress(filtered), deflater.flush()]
        if above
        else [
            deflater.compress(filtered),
            deflater.flush(),
        ]
    )
    ihdr = struct.pack(">II", layout.width, count + (1 if above else 0)) + layout.ihdr[8:]
    png = b"".join([SIGNATURE, *_chunk(b"IHDR", [ihdr]), layout.extra, *_chunk(b"IDAT", idat), *_chunk(b"IEND", [])])
    image = Image.open(io.BytesIO(png), formats=["PNG"])
    image.load()
    return image


def _chunk(kind: bytes, body: list[bytes]) -> list[bytes]:
    crc = zlib.crc32(kind)
    for part in body:
        crc = zlib.crc32(part, crc)
    return [struct.pack(">I4s", sum(map(len, body)), kind), *body, struct.pack(">I", crc)]
