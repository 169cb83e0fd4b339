"""Benchmark: what meeting "0.25 x naive Pillow" would cost on small sources.

``bench/imaging.py`` measures the pipeline as specified: JPEGs decoded with DCT
scaling that keeps at least twice the resolution the largest output needs,
Lanczos, progressive JPEG. On 2-megapixel photos that misses the 0.25 x naive
Pillow target. This script measures the same pipeline with each of those three
quality choices given up, alone and together, so the cost of each is on the
table: time per source against naive Pillow (same workload and timing rules as
``bench/imaging.py``: one pinned core, interleaved runs, per-source medians,
ratios computed per source and summarised by their median), image quality and
bytes.

Quality is the PSNR of each variant's resampled outputs (before encoding)
against a reference made the slow way: a full decode and Lanczos straight from
it, no DCT scaling and no box reduction, with the same crop windows. Bytes are
the three encoded outputs together, relative to the default pipeline.

Run it from the repository root::

    python bench/tradeoffs.py [--folder ../shared/corpus/photos] [--repeat 5] [--core 0]
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from imaging import (
    MAX_PIXELS,
    QUALITY,
    RATIOS,
    REPO,
    SIZE,
    code_version,
    command_line,
    machine_line,
    parse_timing_args,
    pin,
    run_naive,
    shown_path,
    source_files,
    timed_ms,
    vips_version,
)
from imaging import prepare as prepare_naive
from PIL import Image, ImageChops

from thumbctl.imaging import (
    CropAnalysis,
    DecodedSource,
    decode_scale,
    decode_source,
    encode,
    output_geometry,
    probe,
    resample,
)

LANCZOS, BICUBIC, HAMMING = Image.Resampling.LANCZOS, Image.Resampling.BICUBIC, Image.Resampling.HAMMING


@dataclass(frozen=True)
class Variant:
    name: str
    gives_up: str
    headroom: float
    kernel: Image.Resampling
    progressive: bool


VARIANTS = (
    Variant("default", "nothing (the pipeline as specified)", 2.0, LANCZOS, True),
    Variant("baseline", "progressive JPEG", 2.0, LANCZOS, False),
    Variant("headroom-1x", "2x DCT headroom", 1.0, LANCZOS, True),
    Variant("baseline+1x", "progressive, 2x headroom", 1.0, LANCZOS, False),
    Variant("baseline+1x+bicubic", "progressive, 2x headroom, Lanczos (bicubic)", 1.0, BICUBIC, False),
    Variant("baseline+1x+hamming", "progressive, 2x headroom, Lanczos (Hamming)", 1.0, HAMMING, False),
    Variant("baseline+2x+hamming", "progressive, Lanczos (Hamming)", 2.0, HAMMING, False),
)


@dataclass
class Measured:
    """Per source: median ms per variant and for naive, PSNR and bytes per variant."""

    ms: dict[str, float]
    psnr: dict[str, float]
    size: dict[str, int]


def run_variant(path: Path, variant: Variant) -> tuple[list[Image.Image], list[bytes]]:
    """``bench/imaging.py``'s "ours" with the variant's choices; returns images and encodings."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    geoms = [output_geometry(info.width, info.height, r, SIZE, False) for r in RATIOS]
    needed = decode_scale(info.width, info.height, SIZE)
    decoded = decode_source(data, info.format, MAX_PIXELS, needed, headroom=variant.headroom)
    analysis = CropAnalysis(decoded.image, decoded.width, decoded.height, "smart")
    images, outputs = [], []
    for g in geoms:
        image = resample(decoded, analysis.choose(g, None).box, g.out_w, g.out_h, variant.kernel)
        images.append(image)
        outputs.append(encode(image, "jpeg", QUALITY, progressive=variant.progressive))
    return images, outputs


def reference(path: Path) -> list[Image.Image]:
    """Full decode, Lanczos straight to each output with the default pipeline's crop windows."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    geoms = [output_geometry(info.width, info.height, r, SIZE, False) for r in RATIOS]
    full = decode_source(data, info.format, MAX_PIXELS, 1.0)
    needed = decode_scale(info.width, info.height, SIZE)
    fast = decode_source(data, info.format, MAX_PIXELS, needed)
    analysis = CropAnalysis(fast.image, fast.width, fast.height, "smart")
    return [_lanczos(full, analysis.choose(g, None).box, g.out_w, g.out_h) for g in geoms]


def _lanczos(source: DecodedSource, box: tuple[int, int, int, int], width: int, height: int) -> Image.Image:
    return source.image.resize((width, height), LANCZOS, box=source.to_decoded(box))


def psnr(images: list[Image.Image], references: list[Image.Image]) -> float:
    """PSNR in dB over all channels of all outputs together."""
    squared, count = 0, 0
    for image, ref in zip(images, references, strict=True):
        histogram = ImageChops.difference(image.convert("RGB"), ref.convert("RGB")).histogram()
        squared += sum((i % 256) ** 2 * n for i, n in enumerate(histogram))
        count += image.width * image.height * 3
    return 99.0 if squared == 0 else 10 * math.log10(255**2 * count / squared)


def measure_source(path: Path, repeat: int) -> Measured:
    naive_source = prepare_naive(path)
    references = reference(path)
    psnrs, sizes = {}, {}
    for variant in VARIANTS:
        images, outputs = run_variant(path, variant)
        psnrs[variant.name] = psnr(images, references)
        sizes[variant.name] = sum(len(o) for o in outputs)
    runners = {"naive": lambda: run_naive(naive_source)}
    runners.update({v.name: (lambda v=v: run_variant(path, v)) for v in VARIANTS})
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeat):
        for name, run in runners.items():
            times[name].append(timed_ms(run))
    return Measured({name: statistics.median(values) for name, values in times.items()}, psnrs, sizes)


def table(results: list[Measured]) -> str:
    rows = [
        "| variant | gives up | median ms per source | ours / naive, median | <= 0.25 | PSNR vs reference, "
        "median dB | bytes vs default |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    naive = statistics.median(r.ms["naive"] for r in results)
    for v in VARIANTS:
        ratio = statistics.median(r.ms[v.name] / r.ms["naive"] for r in results)
        bytes_ratio = sum(r.size[v.name] for r in results) / sum(r.size["default"] for r in results)
        rows.append(
            f"| {v.name} | {v.gives_up} | {statistics.median(r.ms[v.name] for r in results):.1f} | {ratio:.3f} | "
            f"{'PASS' if ratio <= 0.25 else 'FAIL'} | {statistics.median(r.psnr[v.name] for r in results):.1f} | "
            f"{bytes_ratio:.3f} |"
        )
    rows.append(f"| naive Pillow | | {naive:.1f} | | | | |")
    return "\n".join(rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default="../shared/corpus/photos", help="folder, relative to the repository root")
    return parse_timing_args(parser)


def main() -> None:
    args = parse_args()
    pin(args.core)
    folder = (REPO / args.folder).resolve()
    results = []
    for n, path in enumerate(source_files(folder), start=1):
        results.append(measure_source(path, args.repeat))
        print(f"  [{n}] {path.name}", file=sys.stderr)
    print(f"Command: `{command_line()}`\n")
    print(f"Machine: {machine_line(args.core, vips_version())}\n")
    print(f"Code: {code_version()}\n")
    print(f"`{shown_path(folder)}/`: {len(results)} sources\n")
    print(table(results))


if __name__ == "__main__":
    main()
