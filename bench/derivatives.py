"""Benchmark: a derivative set per source against vipsthumbnail once per derivative and a decode + encode floor.

The set: 3 ratios (1:1, 4:3, 16:9) x 3 sizes (320, 640, 1280 px on the longest
side) x 2 formats (WebP, JPEG), quality 85, smart crop: 18 outputs per source.
Everything runs in one process pinned to one CPU core (``os.sched_setaffinity``;
subprocesses inherit the pinning, as under ``taskset -c CORE``).

Per source, timed in interleaved rounds (each case once per round):

* ``ours`` -- the library calls a worker makes for one claim of the source's 18
  items (``ClaimRun`` in ``thumbctl/engine/claimrun.py``) minus the ledger and the files:
  read the bytes, ``probe``, ``output_geometry`` per item, one ``SourceDecoder``
  asked for each item's decode (``decode_scale`` of its size, alpha kept for
  WebP), so one decode per DCT scale; ``analysis_copy`` at the reference size and
  one ``CropAnalysis``; then per derivative in claim order (ratio, size, format)
  the window of its ratio (chosen once, shared by every size), ``resample`` and
  ``encode``.
* ``verify`` -- the worker's in-memory check of each new output
  (``verify_output``: header, exact size, full decode), on ``ours``' 18 outputs.
  Reported beside ``ours``, not part of its figure (vipsthumbnail checks nothing).
* ``vips`` -- ``vipsthumbnail SRC --smartcrop attention -s WxH -o OUT.webp[Q=85,strip]``
  (``.jpg[Q=85,strip]`` for JPEG) once per derivative: 18 processes, W x H the
  size ``output_geometry`` gives. Wall time, so 18 process start-ups count.
* ``vips start`` -- ``vipsthumbnail --vips-version`` (process start and libvips
  initialisation, no image): "vips own" is ``vips`` minus 18 of these, libvips'
  work alone.
* ``floor`` -- the work no pipeline making these 18 files can skip: read the
  bytes, decode them once at each DCT scale the sizes need (Pillow ``draft``, the
  request ``decode.py`` makes, with its 2x headroom), and 18 encodes with
  ``encode`` (the same encoder settings) of images of the final sizes (our own
  outputs, made before timing). No orientation, colour conversion, crop
  analysis or resampling.

Per folder, in the same rounds: ``vips batched`` -- one ``vipsthumbnail`` process
per (ratio, size, format) over all the folder's files (18 processes instead of
18 per file), the nearest to libvips in-process that its command-line tool
offers (every file of the set has the same output sizes), reported per file.

Then end to end, ``--e2e-repeat`` alternated runs of the whole
``python -m thumbctl submit FOLDER --out OUT --db LEDGER -r 1:1 -r 4:3 -r 16:9
--size 320,640,1280 --format webp,jpeg -w 1 --json`` (fresh ledger and OUT each
run, contact sheet on, checked to end with every item succeeded) against the
same 18 ``vipsthumbnail`` runs per file.

Targets: ours <= 0.45 x vips and <= 1.5 x floor, on the median over sources of
the per-source ratios; the vips target is read against the wall time of the 18
runs (the issue's "run once per derivative"), and the ratio to libvips' own time
is printed beside it. Every case is also timed in CPU seconds (this process's
and its waited-for subprocesses'), printed in tables of their own: on a machine
shared with other work they move far less with the load than wall time does.

Run it from the repository root::

    python bench/derivatives.py [--corpus ../shared/corpus] [--folder large] [--repeat 5] [--e2e-repeat 3] [--core 0]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from e2e import tree_env
from imaging import (
    DEFAULT_CORPUS,
    MAX_PIXELS,
    RATIOS,
    code_version,
    command_line,
    machine_line,
    pin,
    shown_path,
    source_files,
    vips_version,
)
from PIL import Image

from thumbctl.core.profile import Ratio
from thumbctl.imaging import (
    ALPHA_FORMATS,
    ANALYSIS_REFERENCE_SIZE,
    CropAnalysis,
    CropChoice,
    Geometry,
    SourceDecoder,
    decode_scale,
    encode,
    output_geometry,
    probe,
    resample,
    verify_output,
)
from thumbctl.imaging.decode import DRAFT_HEADROOM

REPO = Path(__file__).resolve().parent.parent
SIZES = (320, 640, 1280)
FORMATS = ("webp", "jpeg")
QUALITY = 85
EXTENSIONS = {"webp": "webp", "jpeg": "jpg"}
TARGET_VIPS = 0.45
TARGET_FLOOR = 1.5
PER_SOURCE = ("ours", "verify", "vips", "vips start", "floor")


@dataclass(frozen=True)
class Derivative:
    ratio: Ratio
    size: int
    format: str
    geometry: Geometry

    @property
    def out_size(self) -> tuple[int, int]:
        return self.geometry.out_w, self.geometry.out_h


@dataclass
class Source:
    """One source file and what the cases need to know about it (prepared untimed)."""

    path: Path
    width: int  # upright
    height: int
    drafts: list[tuple[int, int] | None]  # the floor's decodes: one per DCT scale the sizes need
    derivatives: list[Derivative]
    floor_images: list[Image.Image] = field(default_factory=list)
    outputs: list[bytes] = field(default_factory=list)


def derivatives_of(width: int, height: int) -> list[Derivative]:
    """The 18 derivatives in the order intake creates the items (ratio, size, format)."""
    return [
        Derivative(ratio, size, fmt, output_geometry(width, height, ratio, size, False))
        for ratio in RATIOS
        for size in SIZES
        for fmt in FORMATS
    ]


# -- the cases ------------------------------------------------------------------


def render_set(path: Path) -> list[tuple[Image.Image, bytes]]:
    """What a worker's ``ClaimRun`` does with one claim of the source's 18 items, minus ledger
    and files: decode per item's DCT scale (each scale once), one analysis, a window per
    ratio, then resample and encode per derivative. Returns each output's image and bytes."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    items = derivatives_of(info.width, info.height)
    decoder = SourceDecoder(data, info.format, MAX_PIXELS, background="#ffffff", label=path.name)
    for item in items:  # decoding.decode_claim
        decoder.decoded(decode_scale(info.width, info.height, item.size), keep_alpha=item.format in ALPHA_FORMATS)
    copy = decoder.analysis_copy(decode_scale(info.width, info.height, ANALYSIS_REFERENCE_SIZE))
    analysis = CropAnalysis(copy, info.width, info.height, "smart")
    choices: dict[Ratio, CropChoice] = {}
    outputs = []
    for item in items:  # ClaimRun._render_and_publish, one derivative key each
        scale = decode_scale(info.width, info.height, item.size)
        decoded = decoder.decoded(scale, keep_alpha=item.format in ALPHA_FORMATS)
        if item.ratio not in choices:
            choices[item.ratio] = analysis.choose(item.geometry, None)
        image = resample(decoded, choices[item.ratio].box, *item.out_size)
        outputs.append((image, encode(image, item.format, QUALITY)))
    return outputs


def run_ours(source: Source) -> list[bytes]:
    return [data for _, data in render_set(source.path)]


def run_verify(source: Source) -> list[bytes]:
    """The worker's check of each new output, in memory (``_write_verified``)."""
    for item, data in zip(source.derivatives, source.outputs, strict=True):
        problem = verify_output(io.BytesIO(data), item.format, *item.out_size)
        if problem:
            sys.exit(f"FAILED: {source.path.name} {item}: output {problem}")
    return source.outputs


def vips_target(directory: Path, name: str, fmt: str) -> str:
    return f"{directory}/{name}.{EXTENSIONS[fmt]}[Q={QUALITY},strip]"


def vips_command(paths: list[Path], item: Derivative, target: str) -> list[str]:
    w, h = item.out_size
    return ["vipsthumbnail", *map(str, paths), "--smartcrop", "attention", "-s", f"{w}x{h}", "-o", target]


def run_vips(source: Source, out_dir: Path) -> list[Path]:
    """One ``vipsthumbnail`` process per derivative, at our exact output size and quality."""
    outputs = []
    for n, item in enumerate(source.derivatives):
        target = vips_target(out_dir, f"vips-{n}", item.format)
        subprocess.run(vips_command([source.path], item, target), check=True, capture_output=True)
        outputs.append(out_dir / f"vips-{n}.{EXTENSIONS[item.format]}")
    return outputs


def run_vips_start() -> None:
    subprocess.run(["vipsthumbnail", "--vips-version"], check=True, capture_output=True)


def draft_mode(image: Image.Image) -> str:
    return image.mode if image.mode in ("CMYK", "L") else "RGB"  # as decode.py asks


def draft_requests(data: bytes, width: int, height: int) -> list[tuple[int, int] | None]:
    """The ``draft`` requests ``decode.py`` makes for the set's sizes (None: a full decode), one per
    DCT scale they land on (asked of the header, nothing decoded)."""
    requests: dict[tuple[int, int], tuple[int, int] | None] = {}
    for size in SIZES:
        scale = decode_scale(width, height, size) * DRAFT_HEADROOM
        with Image.open(io.BytesIO(data)) as image:
            want = None
            if image.format == "JPEG" and scale < 1:
                want = (max(1, math.ceil(image.width * scale)), max(1, math.ceil(image.height * scale)))
                image.draft(draft_mode(image), want)
            requests.setdefault(image.size, want)
    return list(requests.values())


def run_floor(source: Source) -> list[bytes]:
    """Read, one decode per DCT scale the sizes need, 18 encodes of final-size images."""
    data = source.path.read_bytes()
    for want in source.drafts:
        with Image.open(io.BytesIO(data)) as image:
            if want is not None:
                image.draft(draft_mode(image), want)
            image.load()
    pairs = zip(source.floor_images, source.derivatives, strict=True)
    return [encode(image, item.format, QUALITY) for image, item in pairs]


# -- preparing, checking, timing --------------------------------------------------


def prepare(path: Path) -> Source:
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    drafts = draft_requests(data, info.width, info.height)
    source = Source(path, info.width, info.height, drafts, derivatives_of(info.width, info.height))
    rendered = render_set(path)
    source.floor_images = [image for image, _ in rendered]
    source.outputs = [data for _, data in rendered]
    return source


def output_sizes(outputs: list[bytes] | list[Path]) -> list[tuple[int, int]]:
    sizes = []
    for output in outputs:
        with Image.open(io.BytesIO(output) if isinstance(output, bytes) else output) as image:
            image.load()
            sizes.append(image.size)
    return sizes


def cpu_seconds() -> float:
    """User + system CPU of this process and of every subprocess it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of ``run`` (CPU counts its subprocesses)."""
    gc.collect()
    cpu, started = cpu_seconds(), time.perf_counter()
    run()
    return time.perf_counter() - started, cpu_seconds() - cpu


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


@dataclass
class Timings:
    """Seconds per case and run, per source, and for the folder-level cases."""

    per_source: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    folder: dict[str, list[float]] = field(default_factory=dict)
    loads: list[str] = field(default_factory=list)

    def add(self, case: str, seconds: tuple[float, float], source: str | None = None) -> None:
        """Record a run's wall seconds under ``case`` and its CPU seconds under ``case CPU``."""
        into = self.folder if source is None else self.per_source.setdefault(source, {})
        into.setdefault(case, []).append(seconds[0])
        into.setdefault(f"{case} CPU", []).append(seconds[1])

    def median(self, case: str, source: str | None = None) -> float:
        return statistics.median((self.folder if source is None else self.per_source[source])[case])


def source_runners(source: Source, out_dir: Path) -> dict[str, Callable[[], object]]:
    return {
        "ours": lambda: run_ours(source),
        "verify": lambda: run_verify(source),
        "vips": lambda: run_vips(source, out_dir),
        "vips start": run_vips_start,
        "floor": lambda: run_floor(source),
    }


def check_source(source: Source, out_dir: Path) -> None:
    """Every case once, untimed: outputs at the expected sizes (the warm-up)."""
    expected = [item.out_size for item in source.derivatives]
    for case, made in (("ours", run_ours(source)), ("vips", run_vips(source, out_dir)), ("floor", run_floor(source))):
        if output_sizes(made) != expected:
            sys.exit(f"FAILED: {case} made {output_sizes(made)} for {source.path.name}, expected {expected}")
    run_verify(source)
    run_vips_start()


def run_vips_batched(sources: list[Source], work: Path) -> None:
    """One ``vipsthumbnail`` per (ratio, size, format) over every file of the folder."""
    out = Path(tempfile.mkdtemp(prefix="vips-batched-", dir=work))
    for n, item in enumerate(sources[0].derivatives):
        target = vips_target(out, f"%s_{n}", item.format)
        subprocess.run(vips_command([s.path for s in sources], item, target), check=True, capture_output=True)
    made = len(list(out.iterdir()))
    shutil.rmtree(out)
    if made != 18 * len(sources):
        sys.exit(f"FAILED: batched vipsthumbnail made {made} files for {len(sources)} sources")


def batchable(sources: list[Source]) -> bool:
    """One command line per derivative serves every file when their output sizes agree."""
    return len({tuple(i.out_size for i in s.derivatives) for s in sources}) == 1


def bench_sources(sources: list[Source], repeat: int) -> Timings:
    timings = Timings()
    with tempfile.TemporaryDirectory(prefix="thumbctl-derivatives-") as tmp:
        work = Path(tmp)
        for source in sources:
            check_source(source, work)
        for n in range(repeat):
            timings.loads.append(load_average())
            for source in sources:
                for case, run in source_runners(source, work).items():
                    timings.add(case, timed(run), source.path.name)
            if batchable(sources):
                timings.add("vips batched", timed(lambda: run_vips_batched(sources, work)))
            print(f"  round {n + 1}/{repeat} done, load average {load_average()}", file=sys.stderr)
    return timings


# -- end to end -------------------------------------------------------------------


def submit_command(folder: Path, run_dir: Path) -> list[str]:
    ratios = [arg for r in RATIOS for arg in ("-r", f"{r.w}:{r.h}")]
    sizes = ",".join(map(str, SIZES))
    return [
        *["python", "-m", "thumbctl", "submit", str(folder), "--out", str(run_dir / "out")],
        *["--db", str(run_dir / "ledger.db"), *ratios, "--size", sizes, "--format", ",".join(FORMATS)],
        *["-w", "1", "--json"],
    ]


def run_submit(folder: Path, work: Path, items: int) -> tuple[float, float]:
    """One foreground submit into a fresh ledger and OUT, sheet on; wall and CPU seconds."""
    run_dir = Path(tempfile.mkdtemp(prefix="thumbctl-", dir=work))
    command = submit_command(folder, run_dir)
    command[0] = sys.executable
    cpu, started = cpu_seconds(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=tree_env(REPO))
    seconds = time.perf_counter() - started, cpu_seconds() - cpu
    if done.returncode != 0:
        sys.exit(f"FAILED (exit {done.returncode}): {' '.join(command)}\n{done.stderr}")
    summary = json.loads(done.stdout)
    if summary["counts"]["succeeded"] != items or not summary.get("sheet"):
        sys.exit(f"FAILED: expected {items} succeeded items and a sheet, got {summary['counts']}")
    shutil.rmtree(run_dir)
    return seconds


def run_vips_all(sources: list[Source], work: Path) -> tuple[float, float]:
    out = Path(tempfile.mkdtemp(prefix="vips-", dir=work))
    seconds = timed(lambda: [run_vips(source, out) for source in sources])
    shutil.rmtree(out)
    return seconds


def bench_e2e(folder: Path, sources: list[Source], repeat: int) -> Timings:
    timings = Timings()
    items = 18 * len(sources)
    with tempfile.TemporaryDirectory(prefix="thumbctl-derivatives-e2e-") as tmp:
        work = Path(tmp)
        run_submit(folder, work, items)  # warm-up, untimed
        run_vips_all(sources, work)
        for n in range(repeat):
            timings.loads.append(load_average())
            timings.add("submit", run_submit(folder, work, items))
            timings.add("vips", run_vips_all(sources, work))
            submit, vips = timings.folder["submit"][-1], timings.folder["vips"][-1]
            print(f"  end to end {n + 1}/{repeat}: submit {submit:.2f} s, vips {vips:.2f} s", file=sys.stderr)
    return timings


# -- the report ---------------------------------------------------------------------


def geometric_mean(values: list[float]) -> float:
    """The geometric mean; NaN when a value is not positive (vips' own time, a difference of two
    medians, can come out at or below zero on a busy machine: no ratio to average then)."""
    if any(v <= 0 for v in values):
        return math.nan
    return math.exp(statistics.fmean(math.log(v) for v in values))


def vips_own(t: Timings, name: str, kind: str = "") -> float:
    return t.median(f"vips{kind}", name) - 18 * t.median(f"vips start{kind}", name)


def per_source_table(sources: list[Source], t: Timings, kind: str = "") -> str:
    """Per source, wall (``kind`` "") or CPU (" CPU") milliseconds and ours' ratios."""
    lines = [
        "| file | upright | ours ms | verify ms | vips ms (18 runs) | vips start ms | vips own ms | floor ms "
        "| ours / vips | ours / vips own | ours / floor |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in sources:
        n = s.path.name
        ms = {case: 1000 * t.median(case + kind, n) for case in PER_SOURCE}
        own = 1000 * vips_own(t, n, kind)
        lines.append(
            f"| {n} | {s.width}x{s.height} | {ms['ours']:.0f} | {ms['verify']:.0f} | {ms['vips']:.0f} | "
            f"{ms['vips start']:.1f} | {own:.0f} | {ms['floor']:.0f} | {ms['ours'] / ms['vips']:.3f} | "
            f"{ms['ours'] / own:.3f} | {ms['ours'] / ms['floor']:.3f} |"
        )
    return "\n".join(lines)


def ratio_row(label: str, ratios: list[float], target: float | None, other_ms: float) -> str:
    median = statistics.median(ratios)
    verdict = "" if target is None else ("PASS" if median <= target else "FAIL")
    shown = "" if target is None else f"<= {target:.2f}"
    return f"| {label} | {other_ms:.0f} | {median:.3f} | {geometric_mean(ratios):.3f} | {shown} | {verdict} |"


def summary_table(sources: list[Source], t: Timings, kind: str = "") -> str:
    """Medians over sources and ours' ratios, in wall (``kind`` "") or CPU (" CPU") time."""
    names = [s.path.name for s in sources]
    ours = [t.median("ours" + kind, n) for n in names]
    label = "wall" if not kind else "CPU"

    def per(case: str | Callable[[str], float]) -> tuple[list[float], float]:
        values = [case(n) if callable(case) else t.median(case + kind, n) for n in names]
        return [o / v for o, v in zip(ours, values, strict=True)], 1000 * statistics.median(values)

    lines = [
        f"| case | median {label} ms per source | ours / case, median | ours / case, geo. mean | target | verdict |",
        "|---|---:|---:|---:|---|---|",
        f"| ours (thumbctl's library path, 18 outputs) | {1000 * statistics.median(ours):.0f} | 1.000 | 1.000 | | |",
    ]
    vips_ratios, vips_ms = per("vips")
    lines.append(ratio_row("vipsthumbnail once per derivative (18 runs)", vips_ratios, TARGET_VIPS, vips_ms))
    own_ratios, own_ms = per(lambda n: vips_own(t, n, kind))
    lines.append(ratio_row("vipsthumbnail, its own time (18 runs - 18 x start)", own_ratios, None, own_ms))
    if "vips batched" in t.folder:
        batched = t.median("vips batched" + kind) / len(sources)
        ratio = statistics.median(ours) / batched
        lines.append(
            f"| vipsthumbnail, one process per derivative over all {len(sources)} files (per file) | "
            f"{1000 * batched:.0f} | {ratio:.3f} (of medians) | | | |"
        )
    floor_ratios, floor_ms = per("floor")
    lines.append(ratio_row("floor: decodes at the DCT scales + 18 encodes", floor_ratios, TARGET_FLOOR, floor_ms))
    verify_ms = 1000 * statistics.median(t.median("verify" + kind, n) for n in names)
    lines.append(f"| (worker's in-memory verify of the 18 outputs, not in ours) | {verify_ms:.0f} | | | | |")
    return "\n".join(lines)


def e2e_table(folder: Path, files: int, t: Timings) -> str:
    lines = [
        "| corpus | files | outputs | time | submit median s | vips median s (18 runs per file) | ratio | "
        "0.45 reference |",
        "|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for kind, label in (("", "wall"), (" CPU", "CPU")):
        submit, vips = t.median("submit" + kind), t.median("vips" + kind)
        ratio = submit / vips
        lines.append(
            f"| `{shown_path(folder)}/` | {files} | {18 * files} | {label} | {submit:.2f} | {vips:.2f} | "
            f"{ratio:.3f} | {'under' if ratio <= TARGET_VIPS else 'over'} |"
        )
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--corpus", default=DEFAULT_CORPUS, help=f"relative to the repository (default {DEFAULT_CORPUS})"
    )
    parser.add_argument("--folder", default="large", help="sub-folder of the corpus (default large)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds of the per-source cases (default 5)")
    parser.add_argument("--e2e-repeat", type=int, default=3, help="timed end-to-end runs of each (0: none; default 3)")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to (default 0)")
    args = parser.parse_args()
    if args.repeat < 1 or args.e2e_repeat < 0:
        parser.error("--repeat must be at least 1 and --e2e-repeat not negative")
    return args


def main() -> None:
    args = parse_args()
    vips = vips_version()
    if vips is None:
        sys.exit("vipsthumbnail is not installed: this benchmark compares against it")
    pin(args.core)
    folder = (REPO / args.corpus / args.folder).resolve()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    print(f"{args.folder}/: preparing, load average {load_average()}", file=sys.stderr)
    sources = [prepare(path) for path in source_files(folder)]
    timings = bench_sources(sources, args.repeat)
    e2e = bench_e2e(folder, sources, args.e2e_repeat) if args.e2e_repeat else None

    print(f"Command: `{command_line()}`\n")
    print(f"Machine: {machine_line(args.core, vips)}, SQLite {sqlite3.sqlite_version}\n")
    print(f"Date: {started}; code: {code_version()}\n")
    print(f"Load average (1, 5, 15 min) at each round's start: {'; '.join(timings.loads)}\n")
    print(f"### `{shown_path(folder)}/`: {len(sources)} files, 18 derivatives each, {args.repeat} rounds\n")
    print("Wall time (the verdicts):\n")
    print(summary_table(sources, timings) + "\n")
    print(per_source_table(sources, timings) + "\n")
    print("CPU time, this process and its subprocesses (the load moves it far less than wall time):\n")
    print(summary_table(sources, timings, " CPU") + "\n")
    print(per_source_table(sources, timings, " CPU") + "\n")
    if e2e is not None:
        print(f"### End to end, {args.e2e_repeat} alternated runs (load average: {'; '.join(e2e.loads)})\n")
        command = " ".join(submit_command(Path(shown_path(folder)), Path("RUN")))
        print(f"`{command}` against 18 `vipsthumbnail` runs per file\n")
        print(e2e_table(folder, len(sources), e2e) + "\n")


if __name__ == "__main__":
    main()
