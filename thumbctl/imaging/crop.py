"""Output geometry and crop policies: where the window of each ratio sits.

The window is always the largest one of the exact ratio that fits the
upright source, so it spans the source's full width or full height and only
slides along the other axis. Policies score that slide on a small copy of
the source (about 256 px):

* ``smart`` — a saliency map (edges, saturation as chroma, skin-like tones) weighted
  by a centre and rule-of-thirds prior with an edge penalty; the window
  that holds the most saliency wins. Window sums come from prefix sums of
  the map projected on the sliding axis (a summed-area table in one
  dimension), so every offset costs O(1).
* ``entropy`` — the window whose grey-level histogram has the most entropy.
* ``center`` — the middle.

A focal point overrides the policy: the window is centred on it as nearly
as the edges allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

from PIL import Image, ImageChops, ImageFilter

from ..core.profile import Ratio

ANALYSIS_SIZE = 256
# Crop analysis of every source runs on the decode a 512 px output (the default size,
# ANALYSIS_REFERENCE_SIZE in settings) is made from, whatever sizes are asked: the window of a ratio
# is then one for every size (a 2x image shows the framing of its 1x), and an output of the default
# size keeps the window, so the bytes, it had when each size was analysed on its own decode.
ENTROPY_STEPS = 32
#: Saliency channel weights: edges, saturation, skin.
_WEIGHTS = (0.5, 0.25, 0.25)


@dataclass(frozen=True)
class Geometry:
    """Crop window size and output size, in upright source pixels."""

    crop_w: int
    crop_h: int
    out_w: int
    out_h: int
    #: The source was smaller than asked; this is its largest exact-ratio crop.
    limited: bool = False


def output_geometry(src_w: int, src_h: int, ratio: Ratio, size: int, upscale: bool) -> Geometry:
    """The largest ``ratio`` window that fits the source, scaled so its longest side is ``size``.

    Without ``upscale`` the output is never larger than the window itself.
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
        return Geometry(crop_w, crop_h, crop_w, crop_h, limited=True)
    return Geometry(crop_w, crop_h, out_w, out_h)


def decode_scale(src_w: int, src_h: int, size: int) -> float:
    """The share of the upright source's resolution a decode must keep for outputs of ``size``.

    Of all ratios the square one needs the most: ``size`` over the shorter side. It depends
    only on the source and the size, never on which ratios a request renders together, so
    an output's bytes are a function of its derivative key (a retry of one ratio, or the
    same ratio in another request, decodes the source exactly the same way).
    """
    return size / max(1, min(src_w, src_h))


@dataclass(frozen=True)
class CropChoice:
    """The chosen window (upright source pixels), how well it scored, and why."""

    box: tuple[int, int, int, int]
    score: float
    policy: str

    def to_json(self) -> dict[str, object]:
        return {"box": list(self.box), "score": round(self.score, 4), "policy": self.policy}


class CropAnalysis:
    """One analysis per source, shared by all of its ratios and sizes."""

    def __init__(self, image: Image.Image, src_w: int, src_h: int, policy: str) -> None:
        self.src_w, self.src_h = src_w, src_h
        self.policy = policy
        self.small: Image.Image | None = None
        self.saliency: Image.Image | None = None
        self._image = image
        if policy in ("smart", "entropy"):
            self.small = small_copy(image)
            if policy == "smart":
                self.saliency = saliency_map(self.small)

    def preview(self) -> Image.Image:
        """The small copy the policies score (made once, now, for a policy that scores none): what
        the contact sheet draws the crop windows on and placeholders are made from, so it costs no
        second decode."""
        if self.small is None:
            self.small = small_copy(self._image)
        return self.small

    def choose(self, geometry: Geometry, focus: tuple[float, float] | None) -> CropChoice:
        if focus is not None:
            return CropChoice(focus_box(self.src_w, self.src_h, geometry, focus), 1.0, "focus")
        if geometry.crop_w == self.src_w and geometry.crop_h == self.src_h:
            return CropChoice((0, 0, self.src_w, self.src_h), 1.0, self.policy)
        if self.policy == "smart" and self.saliency is not None:
            return self._best_by_saliency(geometry)
        if self.policy == "entropy" and self.small is not None:
            return self._best_by_entropy(geometry)
        return CropChoice(focus_box(self.src_w, self.src_h, geometry, (0.5, 0.5)), 0.0, "center")

    def _slide(self, geometry: Geometry) -> tuple[bool, int, float]:
        """(horizontal?, window length, small-copy pixels per source pixel) along the sliding axis."""
        assert self.small is not None
        horizontal = geometry.crop_w < self.src_w
        scale = self.small.width / self.src_w if horizontal else self.small.height / self.src_h
        length = geometry.crop_w if horizontal else geometry.crop_h
        return horizontal, length, scale

    def _box_at(self, horizontal: bool, start: int, geometry: Geometry) -> tuple[int, int, int, int]:
        if horizontal:
            start = min(max(start, 0), self.src_w - geometry.crop_w)
            return start, 0, start + geometry.crop_w, geometry.crop_h
        start = min(max(start, 0), self.src_h - geometry.crop_h)
        return 0, start, geometry.crop_w, start + geometry.crop_h

    def _best_by_saliency(self, geometry: Geometry) -> CropChoice:
        assert self.saliency is not None
        horizontal, length, scale = self._slide(geometry)
        size = (self.saliency.width, 1) if horizontal else (1, self.saliency.height)
        profile = list(self.saliency.resize(size, Image.Resampling.BOX).tobytes())
        start, score = best_window(profile, length * scale)
        return CropChoice(self._box_at(horizontal, round(start / scale), geometry), score, "smart")

    def _best_by_entropy(self, geometry: Geometry) -> CropChoice:
        assert self.small is not None
        horizontal, length, scale = self._slide(geometry)
        grey = self.small.convert("L")
        span = (self.src_w if horizontal else self.src_h) - length
        best: tuple[float, float, int] | None = None
        for step in range(ENTROPY_STEPS + 1):
            start = round(span * step / ENTROPY_STEPS)
            box = self._box_at(horizontal, start, geometry)
            small_box = tuple(round(v * scale) for v in box)
            entropy = grey.crop(small_box).entropy()
            key = (entropy, -abs(step - ENTROPY_STEPS / 2), start)
            if best is None or key > best:
                best = key
        assert best is not None
        return CropChoice(self._box_at(horizontal, best[2], geometry), best[0], "entropy")


def small_copy(image: Image.Image) -> Image.Image:
    """An RGB copy of ``image`` about :data:`ANALYSIS_SIZE` px on its long side (never enlarged)."""
    fit = ANALYSIS_SIZE / max(image.width, image.height)
    size = (max(1, round(image.width * fit)), max(1, round(image.height * fit)))
    # reducing_gap=1: a whole-factor reduce() first, then a short box filter; same result, cheaper
    small = image.resize(size, Image.Resampling.BOX, reducing_gap=1.0) if fit < 1 else image
    return small.convert("RGB") if small.mode != "RGB" else small


def focus_box(src_w: int, src_h: int, geometry: Geometry, focus: tuple[float, float]) -> tuple[int, int, int, int]:
    """The window centred on ``focus`` (0..1 each) as nearly as the edges allow."""
    fx, fy = focus
    left = min(max(round(fx * src_w - geometry.crop_w / 2), 0), src_w - geometry.crop_w)
    top = min(max(round(fy * src_h - geometry.crop_h / 2), 0), src_h - geometry.crop_h)
    return left, top, left + geometry.crop_w, top + geometry.crop_h


def best_window(profile: list[float], length: float) -> tuple[float, float]:
    """The start of the window of ``length`` with the largest sum over ``profile``.

    Returns (start, share of the total it holds). Ties go to the window
    nearest the middle. Sums use prefix sums, with linear interpolation for
    a fractional window length.
    """
    n = len(profile)
    length = min(max(length, 1.0), float(n))
    prefix = [0.0, *accumulate(float(v) for v in profile)]
    total = prefix[-1] or 1.0

    def upto(x: float) -> float:
        i = min(int(x), n - 1)
        return prefix[i] + (x - i) * (prefix[i + 1] - prefix[i])

    middle = (n - length) / 2
    best_start, best_key = 0.0, (-1.0, 0.0)
    for start in range(int(n - length) + 1):
        key = (round(upto(start + length) - prefix[start], 6), -abs(start - middle))
        if key > best_key:
            best_start, best_key = float(start), key
    if n - length - int(n - length) > 1e-9:
        tail = n - length
        key = (round(total - upto(tail), 6), -abs(tail - middle))
        if key > best_key:
            best_start, best_key = tail, key
    return best_start, best_key[0] / total


def saliency_map(small: Image.Image) -> Image.Image:
    """Edges, saturation and skin-like tones, smoothed, times the composition prior."""
    grey = small.convert("L")
    edges = grey.filter(ImageFilter.FIND_EDGES)
    saturation = chroma(small)
    _, cb, cr = small.convert("YCbCr").split()
    skin = ImageChops.multiply(
        cb.point(lambda v: 255 if 77 <= v <= 127 else 0), cr.point(lambda v: 255 if 133 <= v <= 173 else 0)
    )
    stacked = Image.merge("RGB", (edges, saturation, skin))
    combined = stacked.convert("L", (*_WEIGHTS, 0.0))
    # one box of the spread (standard deviation) of a Gaussian with sigma = width / 64, at half its cost
    smooth = combined.filter(ImageFilter.BoxBlur(max(1.6, small.width / 40)))
    return ImageChops.multiply(smooth, composition_prior(small.width, small.height))


def chroma(image: Image.Image) -> Image.Image:
    """max(R, G, B) - min(R, G, B): saturation that, unlike HSV's, does not make dark noise
    look colourful, and costs a fifth of an HSV conversion."""
    red, green, blue = image.split()
    brightest = ImageChops.lighter(ImageChops.lighter(red, green), blue)
    darkest = ImageChops.darker(ImageChops.darker(red, green), blue)
    return ImageChops.subtract(brightest, darkest)


@lru_cache(maxsize=64)
def composition_prior(width: int, height: int) -> Image.Image:
    """Weights in 0..255: highest near the centre and the thirds, low at the borders."""
    column = Image.new("L", (width, 1))
    column.putdata([_prior(x / max(width - 1, 1)) for x in range(width)])
    row = Image.new("L", (1, height))
    row.putdata([_prior(y / max(height - 1, 1)) for y in range(height)])
    return ImageChops.multiply(
        column.resize((width, height), Image.Resampling.NEAREST), row.resize((width, height), Image.Resampling.NEAREST)
    )


def _prior(t: float) -> int:
    bumps = max(math.exp(-((t - c) ** 2) / 0.02) for c in (1 / 3, 0.5, 2 / 3))
    border = min(1.0, t / 0.06, (1 - t) / 0.06) ** 0.5
    return round(255 * (0.55 + 0.45 * bumps) * (0.35 + 0.65 * border))
