"""What a page shows while a thumbnail loads: a dominant colour and a ThumbHash, per source and ratio.

Both are computed from the crop analysis's small copy (about 256 px, already decoded, converted
to sRGB and upright), cut to the ratio's window, so they cost a few milliseconds per ratio and are
the same for every size and format of that ratio. Transparency was flattened onto the background
in that copy, as in a JPEG output.

**Dominant colour**, not average colour. A plain mean of a red product on a white table is a
pink that appears nowhere in the photo. Instead the pixels are counted in a coarse histogram of
sRGB codes (8 levels per channel); the bin whose 3x3x3 neighbourhood holds the most pixels seeds
one cluster, and the cluster's colour is the count-weighted mean, in linear light, of the pixels
within :data:`CLUSTER_RADIUS` of the seed (refined twice, as a k-means step would). Averaging in
linear light mixes colours as light does; sRGB codes would darken every mix.

**ThumbHash** (https://evanw.github.io/thumbhash/, the reference algorithm, in plain Python): a
low-frequency DCT of the window in about 25 bytes, keeping its aspect ratio. The page decodes it
with a small script; without one, the dominant colour is the background.
"""

from __future__ import annotations

import base64
import math
import operator
from dataclasses import dataclass
from functools import lru_cache

from PIL import Image

#: The longest side of the copy the placeholders are computed from: ThumbHash keeps 7 frequencies
#: at most, and the dominant colour needs counts, not detail.
SAMPLE_SIZE = 16
#: Histogram bins per channel (sRGB codes) the dominant colour's seed is found in.
BINS = 8
#: The fullest bins whose neighbourhoods are compared for the seed.
SEED_CANDIDATES = 8
#: How far (Euclidean, in linear light 0..1 per channel) a pixel may be from the seed to join its cluster.
CLUSTER_RADIUS = 0.12

_TO_LINEAR = [((c / 255) / 12.92) if c <= 10 else (((c / 255) + 0.055) / 1.055) ** 2.4 for c in range(256)]


def to_linear(code: int) -> float:
    """An sRGB code (0..255) as linear light (0..1)."""
    return _TO_LINEAR[code]


def to_srgb(value: float) -> int:
    """Linear light (0..1) as the nearest sRGB code."""
    value = min(1.0, max(0.0, value))
    coded = value * 12.92 if value <= 0.0031308 else 1.055 * value ** (1 / 2.4) - 0.055
    return math.floor(coded * 255 + 0.5)


@dataclass(frozen=True)
class Placeholder:
    """A window's dominant colour (``#rrggbb``) and ThumbHash (base64)."""

    colour: str
    thumbhash: str

    def to_json(self) -> dict[str, str]:
        return {"dominant_colour": self.colour, "thumbhash": self.thumbhash}


def placeholder_of(copy: Image.Image, src_w: int, src_h: int, box: tuple[int, int, int, int]) -> Placeholder:
    """The placeholder of the window ``box`` (upright source pixels of a ``src_w`` x ``src_h``
    source) on ``copy``, a small RGB copy of the whole upright source."""
    sx, sy = copy.width / src_w, copy.height / src_h
    left, top, right, bottom = box
    small = (
        max(0, math.floor(left * sx)),
        max(0, math.floor(top * sy)),
        min(copy.width, max(math.floor(left * sx) + 1, math.ceil(right * sx))),
        min(copy.height, max(math.floor(top * sy) + 1, math.ceil(bottom * sy))),
    )
    window = copy.crop(small)
    fit = SAMPLE_SIZE / max(window.width, window.height)
    if fit < 1:
        size = (max(1, round(window.width * fit)), max(1, round(window.height * fit)))
        window = window.resize(size, Image.Resampling.BOX)
    rgb = window.convert("RGB") if window.mode != "RGB" else window
    return Placeholder(dominant_colour(rgb), base64.b64encode(thumbhash(rgb)).decode("ascii"))


def dominant_colour(image: Image.Image) -> str:
    """The colour covering most of ``image`` (RGB), as ``#rrggbb`` (see the module notes)."""
    pixels = image.width * image.height
    colours = [(count, rgb, _linear(rgb)) for count, rgb in image.getcolors(pixels) or []]
    bins: dict[tuple[int, int, int], int] = {}
    for count, rgb, _ in colours:
        key = _bin_of(rgb)
        bins[key] = bins.get(key, 0) + count
    candidates = sorted(bins, key=lambda key: (bins[key], key))[-SEED_CANDIDATES:]
    seed_bin = max(candidates, key=lambda key: (_neighbourhood(bins, key), key))
    seed = _mean([(count, linear) for count, rgb, linear in colours if _bin_of(rgb) == seed_bin])
    for _ in range(2):
        near = [(count, linear) for count, _, linear in colours if math.dist(linear, seed) <= CLUSTER_RADIUS]
        seed = _mean(near) if near else seed
    return "#" + "".join(f"{to_srgb(v):02x}" for v in seed)


def _linear(rgb: tuple[int, int, int]) -> tuple[float, float, float]:
    return _TO_LINEAR[rgb[0]], _TO_LINEAR[rgb[1]], _TO_LINEAR[rgb[2]]


def _bin_of(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    return (rgb[0] * BINS // 256, rgb[1] * BINS // 256, rgb[2] * BINS // 256)


def _neighbourhood(bins: dict[tuple[int, int, int], int], key: tuple[int, int, int]) -> int:
    r, g, b = key
    return sum(bins.get((r + dr, g + dg, b + db), 0) for dr in (-1, 0, 1) for dg in (-1, 0, 1) for db in (-1, 0, 1))


def _mean(weighted: list[tuple[int, tuple[float, float, float]]]) -> tuple[float, float, float]:
    """The count-weighted mean of linear colours."""
    total = sum(count for count, _ in weighted)
    return (
        sum(count * c[0] for count, c in weighted) / total,
        sum(count * c[1] for count, c in weighted) / total,
        sum(count * c[2] for count, c in weighted) / total,
    )


# -- ThumbHash ---------------------------------------------------------------------------------------


def _round(value: float) -> int:
    """JavaScript's Math.round (halves up), as the reference encoder rounds."""
    return math.floor(value + 0.5)


def thumbhash(image: Image.Image) -> bytes:
    """The ThumbHash of an opaque RGB image of at most 100 x 100 px."""
    w, h = image.size
    if w > 100 or h > 100:
        raise ValueError(f"{w}x{h} does not fit in 100x100")
    pixels = [(r / 255, g / 255, b / 255) for r, g, b in image.getdata()]
    lum = [(r + g + b) / 3 for r, g, b in pixels]
    yellow_blue = [(r + g) / 2 - b for r, g, b in pixels]
    red_green = [r - g for r, g, b in pixels]
    l_limit = 7
    lx = max(1, _round(l_limit * w / max(w, h)))
    ly = max(1, _round(l_limit * h / max(w, h)))
    l_dc, l_ac, l_scale = _encode_channel(lum, w, h, max(3, lx), max(3, ly))
    p_dc, p_ac, p_scale = _encode_channel(yellow_blue, w, h, 3, 3)
    q_dc, q_ac, q_scale = _encode_channel(red_green, w, h, 3, 3)
    landscape = w > h
    header24 = (
        _round(63 * l_dc)
        | (_round(31.5 + 31.5 * p_dc) << 6)
        | (_round(31.5 + 31.5 * q_dc) << 12)
        | (_round(31 * l_scale) << 18)
    )
    header16 = (ly if landscape else lx) | (_round(63 * p_scale) << 3) | (_round(63 * q_scale) << 9) | (landscape << 15)
    factors = [*l_ac, *p_ac, *q_ac]
    out = bytearray([header24 & 255, (header24 >> 8) & 255, header24 >> 16, header16 & 255, header16 >> 8])
    out.extend(bytes((len(factors) + 1) // 2))
    for index, factor in enumerate(factors):
        out[5 + (index >> 1)] |= _round(15 * factor) << ((index & 1) << 2)
    return bytes(out)


def _encode_channel(channel: list[float], w: int, h: int, nx: int, ny: int) -> tuple[float, list[float], float]:
    """DC and normalised AC terms of the DCT (separable: rows first, then columns)."""
    wanted = [(cx, cy) for cy in range(ny) for cx in range(nx) if cx * ny < nx * (ny - cy)]
    cos_x, cos_y = _cosines(w, nx), _cosines(h, ny)
    rows = [channel[y * w : (y + 1) * w] for y in range(h)]
    columns = [[sum(map(operator.mul, row, cos_x[cx])) for row in rows] for cx in range(nx)]
    dc, ac, scale = 0.0, [], 0.0
    for cx, cy in wanted:
        f = sum(map(operator.mul, columns[cx], cos_y[cy])) / (w * h)
        if cx or cy:
            ac.append(f)
            scale = max(scale, abs(f))
        else:
            dc = f
    if scale:
        ac = [0.5 + 0.5 / scale * f for f in ac]
    return dc, ac, scale


@lru_cache(maxsize=64)
def _cosines(length: int, count: int) -> list[list[float]]:
    """The DCT basis along an axis of ``length`` pixels: ``count`` frequencies."""
    return [[math.cos(math.pi / length * k * (i + 0.5)) for i in range(length)] for k in range(count)]


def thumbhash_image(hashed: bytes) -> Image.Image:
    """The image a ThumbHash stands for (about 32 px on its long side), as the reference decoder draws it."""
    header24 = hashed[0] | (hashed[1] << 8) | (hashed[2] << 16)
    header16 = hashed[3] | (hashed[4] << 8)
    l_dc = (header24 & 63) / 63
    p_dc = ((header24 >> 6) & 63) / 31.5 - 1
    q_dc = ((header24 >> 12) & 63) / 31.5 - 1
    l_scale = ((header24 >> 18) & 31) / 31
    if header24 >> 23:
        raise ValueError("ThumbHashes with alpha are not made here")
    p_scale = ((header16 >> 3) & 63) / 63
    q_scale = ((header16 >> 9) & 63) / 63
    landscape = header16 >> 15
    lx = max(3, 7 if landscape else header16 & 7)
    ly = max(3, header16 & 7 if landscape else 7)
    nibbles = iter(((hashed[5 + (i >> 1)] >> ((i & 1) << 2)) & 15) for i in range(2 * (len(hashed) - 5)))

    def factors(nx: int, ny: int, scale: float) -> list[tuple[int, int, float]]:
        return [
            (cx, cy, (next(nibbles) / 7.5 - 1) * scale)
            for cy in range(ny)
            for cx in range(0 if cy else 1, nx)
            if cx * ny < nx * (ny - cy)
        ]

    l_ac = factors(lx, ly, l_scale)
    p_ac = factors(3, 3, p_scale * 1.25)
    q_ac = factors(3, 3, q_scale * 1.25)
    ratio = (7 if landscape else header16 & 7) / (header16 & 7 if landscape else 7)
    w = _round(32 if ratio > 1 else 32 * ratio)
    h = _round(32 / ratio if ratio > 1 else 32)
    out = []
    for y in range(h):
        fy = [math.cos(math.pi / h * (y + 0.5) * cy) for cy in range(max(ly, 3))]
        for x in range(w):
            fx = [math.cos(math.pi / w * (x + 0.5) * cx) for cx in range(max(lx, 3))]
            lum = l_dc + sum(f * fx[cx] * fy[cy] * 2 for cx, cy, f in l_ac)
            p = p_dc + sum(f * fx[cx] * fy[cy] * 2 for cx, cy, f in p_ac)
            q = q_dc + sum(f * fx[cx] * fy[cy] * 2 for cx, cy, f in q_ac)
            b = lum - 2 / 3 * p
            r = (3 * lum - b + q) / 2
            g = r - q
            out.append(tuple(int(max(0.0, 255 * min(1.0, v))) for v in (r, g, b)))
    image = Image.new("RGB", (w, h))
    image.putdata(out)
    return image
