"""Benchmark: the imaging pipeline per source against vipsthumbnail, naive Pillow and a decode-only floor.

Workload per source: the default profile's three ratios (1:1, 4:3, 16:9) at
512 px on the longest side, JPEG quality 85, smart crop. Four cases, each
timed per source (all three outputs together), in one process pinned to one
CPU core (``os.sched_setaffinity``; subprocesses inherit the pinning):

* ``ours`` -- thumbctl in-process, exactly what a worker does for one source
  minus the ledger and the files: read the bytes, ``probe``, the three
  ``output_geometry``, one ``decode_source`` (DCT-scaled as ``decode_scale`` says
  for the size), one ``CropAnalysis`` (smart), then per ratio ``choose``,
  ``resample`` and ``encode``. (The worker's ``verify_output`` re-read of the
  written file is not included.)
* ``vips`` -- ``vipsthumbnail SRC --smartcrop attention -s WxH -o OUT.jpg[Q=85]``
  run once per ratio (three processes), W x H being the output size our
  ``output_geometry`` gives for that ratio. Skipped when vipsthumbnail is missing.
* ``naive`` -- naive per-ratio Pillow code: for each ratio ``Image.open``, full
  decode, ``ImageOps.exif_transpose``, ``convert("RGB")``,
  ``ImageOps.fit(..., LANCZOS)`` and a JPEG q85 save to memory (three full decodes).
* ``floor`` -- the least work any pipeline of ours must do: read the bytes,
  decode them at the same DCT scale ``decode_source`` picks (``draft``), and
  three plain JPEG q85 encodes of images of the output sizes (our own resampled
  outputs, prepared before timing). No orientation, crop analysis or resampling.

For each source every case runs once untimed (warm-up; every output is checked
to decode at the expected size), then ``--repeat`` times interleaved (ours,
vips, naive, floor, ours, ...); a source's time per case is the median of its
repetitions. Per folder the report gives the median over sources of those
times, and the ratios ours/vips, ours/naive and ours/floor computed per source,
then summarised by their median (which the targets are checked against) and
geometric mean over sources.

Targets: ours <= 0.40 x vipsthumbnail, <= 0.25 x naive Pillow, <= 1.8 x floor.

Run it from the repository root, with the interpreter that has thumbctl installed::

    python bench/imaging.py [--corpus ../shared/corpus] [--folders large,photos] [--repeat 5] [--core 0]

With ``--stages FILE`` it instead times each stage of ``ours`` on one source
with ``perf_counter`` (medians over ``--repeat`` runs) and prints a cProfile of
the pipeline, top 20 functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import math
import os
import platform
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import PIL
from PIL import Image, ImageOps

from thumbctl.core.profile import Ratio
from thumbctl.imaging import (
    CropAnalysis,
    Geometry,
    SourceInfo,
    decode_scale,
    decode_source,
    encode,
    output_geometry,
    probe,
    resample,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = "../shared/corpus"  # relative to the repository root
RATIOS = (Ratio(1, 1), Ratio(4, 3), Ratio(16, 9))
SIZE = 512
QUALITY = 85
MAX_PIXELS = 100_000_000
SUFFIXES = {".jpg", ".jpeg", ".png"}
CASES = ("ours", "vips", "naive", "floor")
#: case -> (label in the tables, target for ours / case)
TARGETS: dict[str, tuple[str, float]] = {
    "vips": ("vipsthumbnail (3 runs)", 0.40),
    "naive": ("naive Pillow", 0.25),
    "floor": ("decode-only floor", 1.8),
}
LABELS = {"ours": "ours (thumbctl in-process)", **{case: label for case, (label, _) in TARGETS.items()}}


@dataclass(frozen=True)
class Source:
    """One source file and what every case needs to know about it (prepared untimed)."""

    path: Path
    info: SourceInfo  # format and upright size
    stored: tuple[int, int]  # size as stored, before EXIF orientation
    geometries: tuple[Geometry, ...]
    needed: float  # the decode scale, as the worker computes it (decode_scale)
    floor_images: tuple[Image.Image, ...]  # images of the output sizes, for the floor's encodes

    @property
    def sizes(self) -> list[tuple[int, int]]:
        return [(g.out_w, g.out_h) for g in self.geometries]

    @property
    def megapixels(self) -> float:
        return self.info.width * self.info.height / 1e6


@dataclass(frozen=True)
class SourceResult:
    """Median milliseconds per case for one source (None: case skipped)."""

    source: Source
    ms: dict[str, float | None]

    def ratio(self, case: str) -> float | None:
        other = self.ms[case]
        ours = self.ms["ours"]
        return None if other is None or ours is None else ours / other


# -- the cases ------------------------------------------------------------------


def run_ours(path: Path) -> list[bytes]:
    """What ``ClaimRun`` does for one source, minus ledger and files."""
    return [encode(image, "jpeg", QUALITY) for image in resampled_outputs(path)]


def resampled_outputs(path: Path) -> Iterator[Image.Image]:
    """The source read, decoded and analysed as ``ClaimRun`` does, and each ratio's output
    resampled, ready for its encode (each made as the one before is used)."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    geoms = [output_geometry(info.width, info.height, r, SIZE, False) for r in RATIOS]
    needed = decode_scale(info.width, info.height, SIZE)
    decoded = decode_source(data, info.format, MAX_PIXELS, needed, background="#ffffff", keep_alpha=False)
    analysis = CropAnalysis(decoded.image, decoded.width, decoded.height, "smart")
    for g in geoms:
        box = analysis.choose(g, None).box
        yield resample(decoded, box, g.out_w, g.out_h)


def add_corpus_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        default=DEFAULT_CORPUS,
        help=f"corpus folder, relative to the repository root (default {DEFAULT_CORPUS})",
    )


def run_vips(source: Source, out_dir: Path) -> list[Path]:
    """One ``vipsthumbnail`` process per ratio, at our exact output size."""
    outputs = []
    for n, (w, h) in enumerate(source.sizes):
        out = out_dir / f"vips-{n}.jpg"
        command = ["vipsthumbnail", str(source.path), "--smartcrop", "attention", "-s", f"{w}x{h}"]
        subprocess.run([*command, "-o", f"{out}[Q={QUALITY}]"], check=True, capture_output=True)
        outputs.append(out)
    return outputs


def run_naive(source: Source) -> list[bytes]:
    """Per ratio: open, full decode, exif_transpose, RGB, ImageOps.fit (Lanczos), save JPEG q85."""
    outputs = []
    for size in source.sizes:
        with Image.open(source.path) as opened:
            image = ImageOps.exif_transpose(opened).convert("RGB")
        buf = io.BytesIO()
        ImageOps.fit(image, size, Image.Resampling.LANCZOS).save(buf, "JPEG", quality=QUALITY)
        outputs.append(buf.getvalue())
    return outputs


def draft_size(source: Source) -> tuple[int, int] | None:
    """The size ``decode_source`` asks ``draft`` for (see ``thumbctl/imaging/decode.py``), or None."""
    if source.info.format != "jpeg" or source.needed >= 0.5:
        return None
    width, height = source.stored
    return max(1, math.ceil(width * source.needed * 2)), max(1, math.ceil(height * source.needed * 2))


def run_floor(source: Source) -> list[bytes]:
    """Read, decode at our DCT scale, and three encodes of output-sized images with the
    pipeline's own encoder settings (progressive JPEG q85 with the sRGB profile): the work no
    thumbnailer of these outputs can skip."""
    data = source.path.read_bytes()
    with Image.open(io.BytesIO(data)) as image:
        want = draft_size(source)
        if want is not None:
            image.draft(image.mode if image.mode in ("CMYK", "L") else "RGB", want)
        image.load()
    outputs = []
    for picture in source.floor_images:
        outputs.append(encode(picture, "jpeg", QUALITY))
    return outputs


# -- preparing, checking and timing ---------------------------------------------


def prepare(path: Path) -> Source:
    """Probe the source and make the floor's output-sized images (our resampled outputs), untimed."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    with Image.open(io.BytesIO(data)) as image:
        stored = image.size
    geoms = tuple(output_geometry(info.width, info.height, r, SIZE, False) for r in RATIOS)
    needed = decode_scale(info.width, info.height, SIZE)
    decoded = decode_source(data, info.format, MAX_PIXELS, needed)
    analysis = CropAnalysis(decoded.image, decoded.width, decoded.height, "smart")
    images = tuple(resample(decoded, analysis.choose(g, None).box, g.out_w, g.out_h) for g in geoms)
    return Source(path, info, stored, geoms, needed, images)


def output_size(output: bytes | Path) -> tuple[int, int]:
    """Decode an output fully and return its size."""
    with Image.open(io.BytesIO(output) if isinstance(output, bytes) else output) as image:
        image.load()
        return image.size


def check_outputs(case: str, source: Source, outputs: list[bytes] | list[Path]) -> None:
    got = [output_size(o) for o in outputs]
    if got != source.sizes:
        sys.exit(f"FAILED: {case} made {got} for {source.path.name}, expected {source.sizes}")


def case_runners(source: Source, out_dir: Path, with_vips: bool) -> dict[str, Callable[[], list]]:
    runners: dict[str, Callable[[], list]] = {
        "ours": lambda: run_ours(source.path),
        "vips": lambda: run_vips(source, out_dir),
        "naive": lambda: run_naive(source),
        "floor": lambda: run_floor(source),
    }
    if not with_vips:
        del runners["vips"]
    return runners


def timed_ms(run: Callable[[], object]) -> float:
    gc.collect()
    started = time.perf_counter()
    run()
    return 1000 * (time.perf_counter() - started)


def bench_source(source: Source, out_dir: Path, repeat: int, with_vips: bool) -> SourceResult:
    """Warm up and check every case once, then ``repeat`` interleaved rounds; medians per case."""
    runners = case_runners(source, out_dir, with_vips)
    for case, run in runners.items():
        try:
            outputs = run()
        except Exception as exc:
            sys.exit(f"FAILED: {case} raised {type(exc).__name__}: {exc} on {source.path.name}")
        check_outputs(case, source, outputs)
    times: dict[str, list[float]] = {case: [] for case in runners}
    for _ in range(repeat):
        for case, run in runners.items():
            times[case].append(timed_ms(run))
    ms: dict[str, float | None] = {case: None for case in CASES}
    ms.update({case: statistics.median(values) for case, values in times.items()})
    return SourceResult(source, ms)


def source_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        sys.exit(f"no JPEG or PNG files in {folder}")
    return files


def bench_folder(folder: Path, repeat: int, with_vips: bool) -> list[SourceResult]:
    results = []
    with tempfile.TemporaryDirectory(prefix="thumbctl-imaging-") as tmp:
        for n, path in enumerate(source_files(folder), start=1):
            result = bench_source(prepare(path), Path(tmp), repeat, with_vips)
            results.append(result)
            shown = ", ".join(f"{c} {v:.0f} ms" for c, v in result.ms.items() if v is not None)
            print(f"  [{n}] {path.name}: {shown}", file=sys.stderr)
    return results


# -- the report -----------------------------------------------------------------


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def folder_table(results: list[SourceResult]) -> str:
    """Median ms per source for each case, ours/case ratios (median and geometric mean over sources)."""
    lines = [
        "| case | median ms per source | ours / case, median | ours / case, geo. mean | target | result |",
        "|---|---:|---:|---:|---|---|",
    ]
    for case in CASES:
        values = [r.ms[case] for r in results if r.ms[case] is not None]
        if not values:
            lines.append(f"| {LABELS[case]} | skipped | | | | |")
            continue
        median_ms = f"{statistics.median(values):.1f}"
        if case == "ours":
            lines.append(f"| {LABELS[case]} | {median_ms} | 1.00 | 1.00 | | |")
            continue
        ratios = [r.ratio(case) for r in results]
        ratios = [x for x in ratios if x is not None]
        median_ratio = statistics.median(ratios)
        target = TARGETS[case][1]
        verdict = "PASS" if median_ratio <= target else "FAIL"
        lines.append(
            f"| {LABELS[case]} | {median_ms} | {median_ratio:.3f} | {geometric_mean(ratios):.3f} | "
            f"<= {target:.2f} | {verdict} |"
        )
    return "\n".join(lines)


def per_source_table(results: list[SourceResult]) -> str:
    lines = ["| file | MP | ours ms | vips ms | naive ms | floor ms |", "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        cells = [f"{r.ms[c]:.1f}" if r.ms[c] is not None else "skipped" for c in CASES]
        lines.append(f"| {r.source.path.name} | {r.source.megapixels:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_folder(results: list[SourceResult]) -> str:
    formats = [r.source.info.format for r in results]
    kinds = ", ".join(f"{formats.count(f)} {f.upper()}" for f in sorted(set(formats)))
    mps = [r.source.megapixels for r in results]
    return f"{len(results)} sources ({kinds}), {min(mps):.1f}-{max(mps):.1f} MP, median {statistics.median(mps):.1f} MP"


def vips_version() -> str | None:
    if shutil.which("vipsthumbnail") is None:
        return None
    done = subprocess.run(["vipsthumbnail", "--vips-version"], capture_output=True, text=True)
    return done.stdout.strip().removeprefix("libvips ") or "unknown"


def machine_line(core: int, vips: str | None) -> str:
    return (
        f"nproc {os.cpu_count()}, Python {platform.python_version()}, Pillow {PIL.__version__}, "
        f"libvips {vips or 'not installed'}, {platform.system()} {platform.machine()}, pinned to core {core}"
    )


def code_version(tree: Path = REPO) -> str:
    """The commit of the checkout ``tree``, and whether its ``thumbctl/`` differs from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "thumbctl"], cwd=tree, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"commit {commit}" + (", with uncommitted changes under thumbctl/" if changed else "")


def command_line() -> str:
    return shlex.join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def shown_path(path: Path) -> str:
    """A path as given relative to the repository root (never this machine's absolute path)."""
    try:
        return os.path.relpath(path, REPO)
    except ValueError:
        return path.name


# -- stage breakdown ------------------------------------------------------------


def pipeline_stages(path: Path) -> dict[str, float]:
    """One run of ``ours`` on ``path``, each stage timed with perf_counter (ms, summed over ratios)."""
    stages: dict[str, float] = {}
    clock = time.perf_counter

    def lap(name: str, started: float) -> float:
        now = clock()
        stages[name] = stages.get(name, 0.0) + 1000 * (now - started)
        return now

    t = clock()
    data = path.read_bytes()
    t = lap("read bytes", t)
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    geoms = [output_geometry(info.width, info.height, r, SIZE, False) for r in RATIOS]
    needed = decode_scale(info.width, info.height, SIZE)
    t = lap("probe + geometry", t)
    decoded = decode_source(data, info.format, MAX_PIXELS, needed, background="#ffffff", keep_alpha=False)
    t = lap("decode_source (draft decode, sRGB, orientation)", t)
    analysis = CropAnalysis(decoded.image, decoded.width, decoded.height, "smart")
    t = lap("CropAnalysis (256 px copy + saliency map)", t)
    for g in geoms:
        box = analysis.choose(g, None).box
        t = lap("choose x3 (window search)", t)
        image = resample(decoded, box, g.out_w, g.out_h)
        t = lap("resample x3 (Lanczos)", t)
        encode(image, "jpeg", QUALITY)
        t = lap("encode x3 (progressive, optimize, ICC)", t)
    return stages


def plain_encode_ms(path: Path) -> float:
    """The floor's encode step alone for ``path``: three plain JPEG q85 saves of our outputs (ms)."""
    source = prepare(path)
    started = time.perf_counter()
    for picture in source.floor_images:
        picture.save(io.BytesIO(), "JPEG", quality=QUALITY)
    return 1000 * (time.perf_counter() - started)


def print_stages(path: Path, repeat: int) -> None:
    source = prepare(path)
    want = draft_size(source)
    print(
        f"Stages of ours on {path.name}: stored {source.stored[0]}x{source.stored[1]}, "
        f"upright {source.info.width}x{source.info.height}, needed scale {source.needed:.4f}, "
        f"draft request {want}, median of {repeat} runs\n"
    )
    run_ours(path)  # warm-up
    runs = [pipeline_stages(path) for _ in range(repeat)]
    names = list(runs[0])
    medians = {n: statistics.median(r[n] for r in runs) for n in names}
    total = sum(medians.values())
    print("| stage | median ms | share |\n|---|---:|---:|")
    for name in names:
        print(f"| {name} | {medians[name]:.1f} | {100 * medians[name] / total:.0f}% |")
    print(f"| total | {total:.1f} | 100% |")
    plain = statistics.median(plain_encode_ms(path) for _ in range(repeat))
    print(f"\nFor comparison, three plain baseline JPEG q85 saves of the same outputs: {plain:.1f} ms\n")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        run_ours(path)
    profiler.disable()
    print(f"cProfile of {repeat} runs of ours, top 20 by tottime:\n")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(20)


# -- main -----------------------------------------------------------------------


def pin(core: int) -> None:
    if not hasattr(os, "sched_setaffinity"):
        sys.exit("os.sched_setaffinity is not available on this platform; cannot pin to one core")
    allowed = os.sched_getaffinity(0)
    if core not in allowed:
        sys.exit(f"core {core} is not one this process may run on ({sorted(allowed)})")
    os.sched_setaffinity(0, {core})


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_corpus_option(parser)
    parser.add_argument("--folders", default="large,photos", help="sub-folders of the corpus (default large,photos)")
    parser.add_argument("--stages", type=Path, help="time the stages of ours on this one file and profile it instead")
    return parse_timing_args(parser)


def parse_timing_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Add the options every imaging benchmark shares (--repeat, --core) and parse."""
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per source and case (default 5)")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin the process to (default 0)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    pin(args.core)
    vips = vips_version()
    if args.stages is not None:
        print(f"Command: `{command_line()}`\nMachine: {machine_line(args.core, vips)}\n")
        print_stages(args.stages, args.repeat)
        return
    if vips is None:
        print("vipsthumbnail is not installed: the vipsthumbnail column is skipped", file=sys.stderr)
    corpus = (REPO / args.corpus).resolve()
    reports = []
    for name in [f for f in args.folders.split(",") if f]:
        print(f"{name}/:", file=sys.stderr)
        results = bench_folder(corpus / name, args.repeat, vips is not None)
        reports.append((shown_path(corpus / name), results))

    print(f"Command: `{command_line()}`\n")
    print(f"Machine: {machine_line(args.core, vips)}\n")
    print(f"Code: {code_version()}\n")
    for label, results in reports:
        print(f"### `{label}/`: {describe_folder(results)}\n")
        print(folder_table(results) + "\n")
    for label, results in reports:
        if label.rstrip("/").endswith("large"):
            print(f"Per source, `{label}/` (median ms per source of {args.repeat} runs):\n")
            print(per_source_table(results) + "\n")


if __name__ == "__main__":
    main()
