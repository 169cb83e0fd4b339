"""Benchmark: placeholders per source and ratio, their cost beside the render, and how they look.

Per source, the default profile's three ratios (1:1, 4:3, 16:9) at 512 px, JPEG q85, smart crop:

* **render**: what a worker does for one source minus the ledger and the files (read, ``probe``,
  the decode for 512 px, the analysis copy and its smart ``CropAnalysis``, then per ratio
  ``choose``, ``resample`` and ``encode``);
* **placeholders**: what the worker adds, ``placeholder_of`` once per ratio (the dominant colour
  and the 16 px WebP ``data:`` URI) on the analysis copy's small copy.

Both are timed ``--repeat`` times interleaved, in one process pinned to one core; a source's time
is the median of its runs. The report gives the median over sources of each, and of the share
placeholders / render computed per source (target: <= 3%).

Then the candidates, per (source, ratio), made from the same window of the same small copy:

* ``thumbhash``: the ThumbHash, base64, of the window shrunk to 32 px (``placeholder_candidates.py``);
* ``blurhash 4x3``: the BlurHash (4 x 3 components, 3 x 4 for a portrait window) of the same 32 px
  copy, drawn at that size;
* ``lqip-webp-16``: what thumbctl ships, ``placeholder_of``'s ``data:`` URI (the window shrunk to
  16 px on its long side, WebP q50);
* ``lqip-jpeg-16`` / ``lqip-webp-32``: the window shrunk (Lanczos) to 16 or 32 px, as JPEG q50 or
  WebP q50, as a ``data:`` URI;
* ``dominant colour``: the flat ``#rrggbb`` fill, the floor any candidate must beat.

"make + draw ms" is the time to make a candidate and decode it again to compare (a ThumbHash or
BlurHash is drawn by its decoder in plain Python, most of its figure), not what a worker spends.

Size is the characters a page carries (the base64 string, or the whole ``data:`` URI). Look is
each candidate drawn at the thumbnail's size (ThumbHash by its reference decoder at 32 px, data
URIs decoded; both scaled up bilinearly) against the 512 px thumbnail, both reduced to 64 px on
the long side: mean absolute error per channel (0..255) and SSIM of the luma (8 x 8 windows,
stride 4). Reported as the median over every (source, ratio).

Run it from the repository root::

    python bench/placeholders.py [--corpus ../shared/corpus] [--folders photos,large] [--repeat 5] [--core 0]
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import PIL
from PIL import Image
from placeholder_candidates import blurhash, blurhash_image, thumbhash, thumbhash_image

from thumbctl.core.profile import Ratio
from thumbctl.imaging import (
    ANALYSIS_REFERENCE_SIZE,
    CropAnalysis,
    SourceDecoder,
    decode_scale,
    encode,
    output_geometry,
    placeholder_of,
    probe,
    resample,
)

DEFAULT_CORPUS = "../shared/corpus"
RATIOS = (Ratio(1, 1), Ratio(4, 3), Ratio(16, 9))
SIZE = 512
QUALITY = 85
MAX_PIXELS = 100_000_000
SUFFIXES = {".jpg", ".jpeg", ".png"}
TARGET_SHARE = 0.03
LOOK_SIZE = 64


def render_and_placeholders(data: bytes) -> tuple[float, float, list[tuple[bytes, Image.Image, tuple]]]:
    """(render ms, placeholders ms, per ratio (thumbnail bytes, small copy, box))."""
    started = time.perf_counter()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    w, h = info.width, info.height
    decoder = SourceDecoder(data, info.format, MAX_PIXELS)
    decoded = decoder.decoded(decode_scale(w, h, SIZE))
    analysis = CropAnalysis(decoder.analysis_copy(decode_scale(w, h, ANALYSIS_REFERENCE_SIZE)), w, h, "smart")
    outputs = []
    for ratio in RATIOS:
        geometry = output_geometry(w, h, ratio, SIZE, False)
        box = analysis.choose(geometry, None).box
        outputs.append((encode(resample(decoded, box, geometry.out_w, geometry.out_h), "jpeg", QUALITY), box))
    render = time.perf_counter() - started
    started = time.perf_counter()
    small = analysis.preview()
    for _, box in outputs:
        placeholder_of(small, w, h, box)
    extra = time.perf_counter() - started
    return render * 1000, extra * 1000, [(thumb, small, box) for thumb, box in outputs]


def window(small: Image.Image, w: int, h: int, box: tuple[int, int, int, int]) -> Image.Image:
    sx, sy = small.width / w, small.height / h
    return small.crop((round(box[0] * sx), round(box[1] * sy), round(box[2] * sx), round(box[3] * sy)))


def lqip(fmt: str, side: int) -> Callable[[Image.Image], tuple[str, Image.Image]]:
    def make(cut: Image.Image) -> tuple[str, Image.Image]:
        tiny = cut.copy()
        tiny.thumbnail((side, side), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        tiny.save(buf, fmt.upper(), quality=50)
        uri = f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode()}"
        return uri, Image.open(io.BytesIO(buf.getvalue())).convert("RGB")

    return make


def thumbhash_candidate(small: Image.Image, w: int, h: int, box: tuple) -> tuple[str, Image.Image]:
    cut = window(small, w, h, box)
    cut.thumbnail((32, 32), Image.Resampling.BOX)
    hashed = thumbhash(cut)
    return base64.b64encode(hashed).decode(), thumbhash_image(hashed)


def blurhash_candidate(small: Image.Image, w: int, h: int, box: tuple) -> tuple[str, Image.Image]:
    cut = window(small, w, h, box)
    cut.thumbnail((32, 32), Image.Resampling.BOX)
    text = blurhash(cut)
    return text, blurhash_image(text, cut.size)


def shipped_candidate(small: Image.Image, w: int, h: int, box: tuple) -> tuple[str, Image.Image]:
    uri = placeholder_of(small, w, h, box).lqip
    return uri, Image.open(io.BytesIO(base64.b64decode(uri.partition(",")[2]))).convert("RGB")


def colour_candidate(small: Image.Image, w: int, h: int, box: tuple) -> tuple[str, Image.Image]:
    colour = placeholder_of(small, w, h, box).colour
    return colour, Image.new("RGB", (1, 1), colour)


def look(candidate: Image.Image, thumb: Image.Image) -> tuple[float, float]:
    """(mean absolute error 0..255, luma SSIM) of ``candidate`` drawn at the thumbnail's size."""
    fit = LOOK_SIZE / max(thumb.size)
    size = (max(1, round(thumb.width * fit)), max(1, round(thumb.height * fit)))
    reference = thumb.convert("RGB").resize(size, Image.Resampling.BOX)
    drawn = candidate.resize(thumb.size, Image.Resampling.BILINEAR).resize(size, Image.Resampling.BOX)
    a, b = triples(reference), triples(drawn)
    mae = sum(abs(x - y) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True)) / (3 * len(a))
    return mae, ssim(reference.convert("L"), drawn.convert("L"))


def triples(image: Image.Image) -> list[tuple[int, int, int]]:
    raw = image.tobytes()
    return list(zip(raw[0::3], raw[1::3], raw[2::3], strict=True))


def ssim(x: Image.Image, y: Image.Image, win: int = 8, stride: int = 4) -> float:
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    xs, ys, w = list(x.tobytes()), list(y.tobytes()), x.width
    scores = []
    for top in range(0, max(1, x.height - win + 1), stride):
        for left in range(0, max(1, x.width - win + 1), stride):
            a = [xs[(top + j) * w + left + i] for j in range(min(win, x.height)) for i in range(min(win, x.width))]
            b = [ys[(top + j) * w + left + i] for j in range(min(win, x.height)) for i in range(min(win, x.width))]
            ma, mb = statistics.fmean(a), statistics.fmean(b)
            va = statistics.fmean((v - ma) ** 2 for v in a)
            vb = statistics.fmean((v - mb) ** 2 for v in b)
            cov = statistics.fmean((p - ma) * (q - mb) for p, q in zip(a, b, strict=True))
            scores.append(((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma**2 + mb**2 + c1) * (va + vb + c2)))
    return statistics.fmean(scores)


def candidates() -> dict[str, Callable[[Image.Image, int, int, tuple], tuple[str, Image.Image]]]:
    made: dict[str, Callable[[Image.Image, int, int, tuple], tuple[str, Image.Image]]] = {
        "thumbhash": thumbhash_candidate,
        "blurhash 4x3": blurhash_candidate,
        "lqip-webp-16 (shipped)": shipped_candidate,
        "dominant colour": colour_candidate,
    }
    for name, (fmt, side) in {"lqip-jpeg-16": ("jpeg", 16), "lqip-webp-32": ("webp", 32)}.items():
        make = lqip(fmt, side)
        made[name] = lambda small, w, h, box, make=make: make(window(small, w, h, box))
    return made


def run_folder(folder: Path, repeat: int) -> None:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in SUFFIXES)
    rows = []
    looks: dict[str, list[tuple[int, float, float, float]]] = {name: [] for name in candidates()}
    for path in files:
        data = path.read_bytes()
        _, _, outputs = render_and_placeholders(data)  # warm-up, and the outputs to compare with
        runs = [render_and_placeholders(data)[:2] for _ in range(repeat)]
        render = statistics.median(r for r, _ in runs)
        extra = statistics.median(e for _, e in runs)
        rows.append((path.name, render, extra))
        info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
        for thumb_bytes, small, box in outputs:
            thumb = Image.open(io.BytesIO(thumb_bytes))
            for name, make in candidates().items():
                started = time.perf_counter()
                text, drawn = make(small, info.width, info.height, box)
                ms = (time.perf_counter() - started) * 1000
                mae, score = look(drawn, thumb)
                looks[name].append((len(text), ms, mae, score))
    shares = [extra / render for _, render, extra in rows]
    print(f"`{folder}`: {len(rows)} sources, 3 ratios each, {repeat} runs\n")
    print("| | median per source |")
    print("|---|---:|")
    print(f"| render (3 outputs) | {statistics.median(r for _, r, _ in rows):.1f} ms |")
    print(f"| placeholders (3 ratios) | {statistics.median(e for _, _, e in rows):.2f} ms |")
    share = statistics.median(shares)
    verdict = "PASS" if share <= TARGET_SHARE else "FAIL"
    name, render, extra = max(rows, key=lambda row: row[2] / row[1])
    print(f"| placeholders / render, median of per-source shares | {share:.1%} (max {max(shares):.1%}) | {verdict} |")
    print(f"\nLargest share: {name}, render {render:.1f} ms, placeholders {extra:.2f} ms")
    print()
    print(
        "| candidate | chars on the page, median (max) | make + draw ms, median | mean abs. error 0..255 | luma SSIM |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, values in looks.items():
        sizes = [v[0] for v in values]
        ms, mae, score = (statistics.median(v[i] for v in values) for i in (1, 2, 3))
        print(f"| {name} | {statistics.median(sizes):.0f} ({max(sizes)}) | {ms:.2f} | {mae:.1f} | {score:.3f} |")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--folders", default="photos,large")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--core", type=int, default=0)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})
    print(
        f"Machine: nproc {os.cpu_count()}, Python {platform.python_version()}, Pillow {PIL.__version__}, "
        f"pinned to core {args.core}\n"
    )
    for name in args.folders.split(","):
        run_folder(Path(args.corpus) / name, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
