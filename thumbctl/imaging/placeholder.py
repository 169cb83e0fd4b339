"""What a page shows while a thumbnail loads: a dominant colour and a tiny image, per source and ratio.

Both are computed from the crop analysis's small copy (about 256 px, already decoded, converted
to sRGB and upright), cut to the ratio's window and sampled at :data:`SAMPLE_SIZE` px, so they cost
about a millisecond per ratio and are the same for every size and format of that ratio.
Transparency was flattened onto the background in that copy, as in a JPEG output. (The small
copy itself was reduced from the decode as every thumbnail is, by box filters on sRGB values.)

**Dominant colour**, not average colour. A plain mean of a red product on a white table is a
pink that appears nowhere in the photo. Instead the window's pixels are sampled on a grid of at
most 16 x 16 points (as they are: nothing is mixed before the mean) and counted in a coarse histogram of
sRGB codes (8 levels per channel); the bin whose 3x3x3 neighbourhood holds the most pixels seeds
one cluster, and the cluster's colour is the count-weighted mean, in linear light, of the pixels
within :data:`CLUSTER_RADIUS` of the seed (refined twice, as a k-means step would). Distances are
measured on sRGB codes (nearer to equal steps for the eye: in linear light every dark colour is
"near" every other), means are taken in linear light, which mixes colours as light does (a mean
of sRGB codes darkens every mix).

**The tiny image** (an LQIP) is the window box-filtered to 16 px, as a WebP ``data:`` URI of about
180 characters: a page shows it as the ``<img>``'s CSS background with no script. It was chosen
over a ThumbHash (about 28 characters, but a page script must draw it) and a BlurHash by size, look
and cost (``docs/benchmarks.md``, "Placeholders").
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass

from PIL import Image

#: The longest side of the sample both are computed from, and of the tiny image.
SAMPLE_SIZE = 16
#: The tiny image's WebP quality.
LQIP_QUALITY = 50
#: Histogram bins per channel (sRGB codes) the dominant colour's seed is found in.
BINS = 8
#: The fullest bins whose neighbourhoods are compared for the seed.
SEED_CANDIDATES = 8
#: How far (Euclidean, in sRGB codes, where steps are closer to equal to the eye than in linear
#: light) a pixel may be from the cluster's colour to join it.
CLUSTER_RADIUS = 40

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
    """A window's dominant colour (``#rrggbb``) and its tiny image (a WebP ``data:`` URI)."""

    colour: str
    lqip: str

    def to_json(self) -> dict[str, str]:
        return {"dominant_colour": self.colour, "lqip": self.lqip}


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
    rgb = copy.convert("RGB") if copy.mode != "RGB" else copy
    width, height = small[2] - small[0], small[3] - small[1]
    fit = min(1.0, SAMPLE_SIZE / max(width, height))
    size = (max(1, round(width * fit)), max(1, round(height * fit)))
    # Points of the window as they are (nearest) for the colour, so every mix is made in linear
    # light; a box-filtered picture for the tiny image.
    points = rgb.resize(size, Image.Resampling.NEAREST, box=small)
    picture = rgb.resize(size, Image.Resampling.BOX, box=small)
    return Placeholder(dominant_colour(points), lqip(picture))


def lqip(sample: Image.Image) -> str:
    """``sample`` (RGB, :data:`SAMPLE_SIZE` px at most) as a WebP ``data:`` URI."""
    buffer = io.BytesIO()
    sample.save(buffer, "WEBP", quality=LQIP_QUALITY)
    return "data:image/webp;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def dominant_colour(image: Image.Image) -> str:
    """The colour covering most of ``image`` (RGB), as ``#rrggbb`` (see the module notes)."""
    colours: list[_Colour] = []
    bins: dict[tuple[int, int, int], int] = {}
    for count, (r, g, b) in _colours(image):
        key = (_BIN[r], _BIN[g], _BIN[b])
        colours.append((count, r, g, b, key))
        bins[key] = bins.get(key, 0) + count
    candidates = sorted(bins, key=lambda key: (bins[key], key))[-SEED_CANDIDATES:]
    seed_bin = max(candidates, key=lambda key: (_neighbourhood(bins, key), key))
    seed = _mean_near(None, seed_bin, colours)
    for _ in range(2):
        seed = _mean_near([to_srgb(v) for v in seed], None, colours) or seed
    return "#" + "".join(f"{to_srgb(v):02x}" for v in seed)


#: A colour of the sample: its count, its sRGB codes and its histogram bin.
_Colour = tuple[int, int, int, int, tuple[int, int, int]]


def _mean_near(
    centre: list[int] | None, seed_bin: tuple[int, int, int] | None, colours: list[_Colour]
) -> tuple[float, float, float] | None:
    """The count-weighted mean, in linear light, of the colours within :data:`CLUSTER_RADIUS` of
    ``centre`` (squared distances of whole numbers: the same test as a Euclidean distance), or of
    the colours in ``seed_bin``; None for none."""
    total, lr, lg, lb = 0, 0.0, 0.0, 0.0
    cr, cg, cb = centre if centre is not None else (0, 0, 0)
    for count, r, g, b, key in colours:
        inside = key == seed_bin if centre is None else (r - cr) ** 2 + (g - cg) ** 2 + (b - cb) ** 2 <= _RADIUS_SQUARED
        if inside:
            total += count
            lr += count * _TO_LINEAR[r]
            lg += count * _TO_LINEAR[g]
            lb += count * _TO_LINEAR[b]
    return (lr / total, lg / total, lb / total) if total else None


def _colours(image: Image.Image) -> list[tuple[int, tuple[int, int, int]]]:
    return image.getcolors(image.width * image.height) or []


#: An sRGB code's histogram bin.
_BIN = [code * BINS // 256 for code in range(256)]
#: A bin and the 26 around it, as offsets.
_NEIGHBOURS = [(dr, dg, db) for dr in (-1, 0, 1) for dg in (-1, 0, 1) for db in (-1, 0, 1)]
_RADIUS_SQUARED = CLUSTER_RADIUS**2


def _neighbourhood(bins: dict[tuple[int, int, int], int], key: tuple[int, int, int]) -> int:
    r, g, b = key
    get = bins.get
    return sum([get((r + dr, g + dg, b + db), 0) for dr, dg, db in _NEIGHBOURS])
