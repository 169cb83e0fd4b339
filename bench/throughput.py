"""Benchmark: end-to-end rendering throughput with 1 and 2 worker processes.

Each timed run is the real CLI as a subprocess, rendering in the foreground::

    python -m thumbctl submit PHOTOS --out OUT --db LEDGER -w N --json

with the default profile (ratios 1:1, 4:3 and 16:9 at 512 px, JPEG), so one
source is three items. Interpreter start-up, imports, the scan, hashing and
recording the batch, spawning the workers and writing the batch manifest all
count, as they do for a user.

Identical sources share output objects and a re-submit of the same folder is
a replay that renders nothing, so every run gets a fresh ledger and a fresh
output folder, and the generated photos all have distinct content. A run only
counts when the CLI exits 0, its JSON says ``state == "succeeded"`` with
``counts.succeeded == total == photos x 3``, and the output folder holds one
object per item (nothing was deduplicated).

The photos are made from the repository's ``sample_images/``: for each one a
sample is picked, rotated by a few degrees, randomly cropped, sometimes
mirrored, slightly recoloured, resized to 1600-2400 px on the long side and
saved as JPEG quality 90 (about one in twenty as PNG), all from a seeded RNG.
Making them is not timed.

Runs are interleaved (1, 2, 1, 2, ...) to spread machine noise over both
worker counts. Each run's CPU time is also split into its parts (``bench/cpuparts.py``:
the CLI before the first claim, its supervising while items render, after the last item;
the workers), which gives the serial fraction of a 1-worker run and the speed-up Amdahl's
law allows 2 workers: CPU time moves far less than wall time with other load on the machine.

``--before DIR`` names a checkout of an earlier thumbctl (e.g. ``git worktree add /tmp/before
main``): every run is then made with both trees, alternated (before 1, after 1, before 2,
after 2, ...), each as ``python -m thumbctl`` with ``PYTHONPATH`` set to its tree. Run it from
the repository root, with the interpreter that has thumbctl's dependencies::

    python bench/throughput.py [--photos 200] [--workers 1,2] [--repeat 3] [--seed 0] [--keep DIR] [--before DIR]

``--keep DIR`` writes the photos there and reuses them on later runs (a folder
that holds other files is refused). ``--smoke`` renders 2 photos once per worker count:
a check that the benchmark works, not a measurement.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cpuparts import Parts, Sampler, amdahl_bound, parts_of
from PIL import Image, ImageEnhance, ImageOps

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_images"
SAMPLE_SUFFIXES = {".jpg", ".jpeg", ".png"}
RATIOS_PER_SOURCE = 3  # the default profile: 1:1, 4:3, 16:9
LONG_SIDE = (1600, 2400)
JPEG_QUALITY = 90
PNG_FRACTION = 0.05
MAX_ROTATION_DEGREES = 4.0
CROP_FRACTION = (0.6, 0.95)


@dataclass(frozen=True)
class Run:
    workers: int
    seconds: float
    cpu_seconds: float
    items: int
    sources: int
    tree: str = "after"
    parts: Parts | None = None

    @property
    def items_per_second(self) -> float:
        return self.items / self.seconds


@dataclass(frozen=True)
class Summary:
    workers: int
    runs: list[Run]
    tree: str = "after"

    @property
    def times(self) -> list[float]:
        return [r.seconds for r in self.runs]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def median_items_per_second(self) -> float:
        return statistics.median(r.items_per_second for r in self.runs)

    @property
    def median_ms_per_source(self) -> float:
        return 1000 * self.median / self.runs[0].sources

    @property
    def median_cpu(self) -> float:
        return statistics.median(r.cpu_seconds for r in self.runs)

    def median_part(self, name: str) -> float:
        return statistics.median(getattr(r.parts, name) for r in self.runs if r.parts is not None)


# -- the photos -----------------------------------------------------------------


def load_samples(folder: Path) -> list[Image.Image]:
    """The sample photos, decoded, upright (EXIF orientation applied) and RGB."""
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in SAMPLE_SUFFIXES)
    if not paths:
        sys.exit(f"no JPEG or PNG files in {folder}")
    samples = []
    for path in paths:
        with Image.open(path) as image:
            samples.append(ImageOps.exif_transpose(image).convert("RGB"))
    return samples


def rotate_and_crop(image: Image.Image, rng: random.Random) -> Image.Image:
    """Rotate by a few degrees, then crop a random window that has no empty corners."""
    angle = rng.uniform(-MAX_ROTATION_DEGREES, MAX_ROTATION_DEGREES)
    rotated = image.rotate(angle, resample=Image.Resampling.BICUBIC)
    width, height = rotated.size
    # Every point at least this far from the edges came from inside the original frame.
    margin = math.ceil(max(width, height) / 2 * math.sin(math.radians(abs(angle)))) + 1
    usable_w, usable_h = width - 2 * margin, height - 2 * margin
    crop_w = round(usable_w * rng.uniform(*CROP_FRACTION))
    crop_h = round(usable_h * rng.uniform(*CROP_FRACTION))
    left = margin + rng.randint(0, usable_w - crop_w)
    top = margin + rng.randint(0, usable_h - crop_h)
    return rotated.crop((left, top, left + crop_w, top + crop_h))


def recolour(image: Image.Image, rng: random.Random) -> Image.Image:
    """Slight changes of saturation, brightness and contrast."""
    for enhancer in (ImageEnhance.Color, ImageEnhance.Brightness, ImageEnhance.Contrast):
        image = enhancer(image).enhance(rng.uniform(0.88, 1.12))
    return image


def resize_long_side(image: Image.Image, long_side: int) -> Image.Image:
    scale = long_side / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)


def make_photo(sample: Image.Image, rng: random.Random) -> Image.Image:
    """One new, distinct photo derived from ``sample``."""
    image = rotate_and_crop(sample, rng)
    if rng.random() < 0.3:
        image = ImageOps.mirror(image)
    image = recolour(image, rng)
    return resize_long_side(image, rng.randint(*LONG_SIDE))


def photo_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def generate_photos(folder: Path, count: int, seed: int) -> None:
    """Write ``count`` photos ``photo_NNNN.jpg`` (or ``.png``) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    samples = load_samples(SAMPLES)
    rng = random.Random(seed)
    for i in range(count):
        photo = make_photo(rng.choice(samples), rng)
        if rng.random() < PNG_FRACTION:
            photo.save(folder / f"photo_{i:04d}.png", "PNG")
        else:
            photo.save(folder / f"photo_{i:04d}.jpg", "JPEG", quality=JPEG_QUALITY)


def check_distinct(files: list[Path]) -> None:
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    if len(digests) != len(files):
        sys.exit(f"FAILED: {len(files) - len(digests)} of the {len(files)} photos duplicate another one")


def describe_photos(files: list[Path]) -> str:
    sizes = [p.stat().st_size for p in files]
    pngs = sum(1 for p in files if p.suffix == ".png")
    return (
        f"{len(files)} photos ({len(files) - pngs} JPEG, {pngs} PNG), "
        f"{sum(sizes) / 1e6:.0f} MB, median {statistics.median(sizes) / 1e3:.0f} KB"
    )


def ensure_photos(folder: Path, count: int, seed: int) -> list[Path]:
    """Generate the photos unless ``folder`` already holds exactly ``count`` of them."""
    files = photo_files(folder)
    if not files:
        started = time.perf_counter()
        generate_photos(folder, count, seed)
        files = photo_files(folder)
        print(f"generated {len(files)} photos in {folder} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    elif len(files) == count and all(p.stem == f"photo_{i:04d}" for i, p in enumerate(files)):
        print(f"reused {count} photos in {folder}", file=sys.stderr)
    else:
        sys.exit(f"{folder} holds {len(files)} files, not the {count} photos this run needs; pick another --keep DIR")
    check_distinct(files)
    return files


# -- running the CLI ------------------------------------------------------------


def cli_env(tree: Path | None = None) -> dict[str, str]:
    """The caller's environment without THUMBCTL_* settings that could change the run, with byte-code
    caching on (as an installed package has its caches: the untimed first run writes them); with
    ``tree``, that checkout's thumbctl first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUMBCTL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["NO_COLOR"] = "1"
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def children_cpu_seconds() -> float:
    """User + system CPU time of every waited-for descendant so far (the CLI and its workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cli(args: list[str], tree: Path | None = None, cwd: Path | None = None) -> tuple[float, float, str, Sampler]:
    """Run ``python -m thumbctl ARGS`` (from ``tree``, in ``cwd``: ``python -m`` puts the working folder
    first on ``sys.path``); return wall seconds, CPU seconds, stdout and the CPU sampler of the run."""
    command = [sys.executable, "-m", "thumbctl", *args]
    cpu_before = children_cpu_seconds()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=cli_env(tree), cwd=cwd)
        sampler = Sampler(proc.pid)
        sampler.finish()
        elapsed = time.perf_counter() - started
        returncode = proc.wait()
        cpu = children_cpu_seconds() - cpu_before
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if returncode != 0:
        sys.exit(f"FAILED (exit {returncode}): {shlex.join(command)}\n{stderr}")
    return elapsed, cpu, stdout, sampler


def check_batch(doc: dict, expected_items: int, store: Path) -> None:
    """The run rendered every item itself: succeeded, all counted, one object per item in the store."""
    total = doc.get("total")
    succeeded = doc.get("counts", {}).get("succeeded")
    if doc.get("state") != "succeeded" or succeeded != total or total != expected_items:
        sys.exit(
            f"FAILED: state={doc.get('state')!r}, total={total!r}, succeeded={succeeded!r}; "
            f"expected succeeded with {expected_items} items"
        )
    if doc.get("replayed") is not False:
        sys.exit("FAILED: the submit was a replay; the ledger was not fresh")
    objects = sum(1 for p in (store / "objects").rglob("*") if p.is_file() and not p.name.endswith(".preview.jpg"))
    if objects != expected_items:
        sys.exit(f"FAILED: {objects} objects in {store / 'objects'} for {expected_items} items")


def timed_submit(photos: Path, run_dir: Path, workers: int, sources: int, tree: str, trees: dict[str, Path]) -> Run:
    """One foreground submit into a fresh ledger and output folder."""
    run_dir.mkdir(parents=True)
    out, ledger = run_dir / "out", run_dir / "ledger.db"
    args = ["submit", str(photos), "--out", str(out), "--db", str(ledger), "-w", str(workers), "--json"]
    seconds, cpu, stdout, sampler = run_cli(args, trees.get(tree), run_dir)
    items = sources * RATIOS_PER_SOURCE
    check_batch(json.loads(stdout), items, ledger.with_suffix(".store"))
    parts = parts_of(sampler, ledger)
    return Run(workers=workers, seconds=seconds, cpu_seconds=cpu, items=items, sources=sources, tree=tree, parts=parts)


def run_benchmark(
    photos: Path, work: Path, sources: int, workers: list[int], repeat: int, trees: dict[str, Path] | None = None
) -> list[Summary]:
    """``repeat`` runs per worker count and tree (``trees``: label -> checkout; default this one),
    alternated; one summary per (tree, worker count)."""
    trees = trees or {"after": REPO}
    for tree in trees.values():
        run_cli(["codes", "--json"], tree, work)  # untimed: imports into the page cache, byte code written
    runs: list[Run] = []
    schedule = [(t, w) for _ in range(repeat) for w in workers for t in trees]
    for n, (tree, count) in enumerate(schedule, start=1):
        run = timed_submit(photos, work / f"run-{n:02d}", count, sources, tree, trees)
        print(
            f"run {n}/{len(schedule)}: {tree}, {count} worker(s), {run.seconds:.2f} s, "
            f"{run.items_per_second:.1f} items/s, CPU {run.cpu_seconds:.2f} s",
            file=sys.stderr,
        )
        runs.append(run)
    return [Summary(w, [r for r in runs if r.workers == w and r.tree == t], t) for t in trees for w in workers]


# -- the report -----------------------------------------------------------------


def markdown_table(summaries: list[Summary]) -> str:
    lines = [
        "| tree | workers | runs | median s | min s | max s | median items/s | median ms per source | "
        "speed-up vs 1 worker | median CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        baseline = next((b for b in summaries if b.workers == 1 and b.tree == s.tree), None)
        speedup = f"{baseline.median / s.median:.2f}x" if baseline else "n/a"
        lines.append(
            f"| {s.tree} | {s.workers} | {len(s.runs)} | {s.median:.2f} | {min(s.times):.2f} | {max(s.times):.2f} | "
            f"{s.median_items_per_second:.1f} | {s.median_ms_per_source:.0f} | {speedup} | {s.median_cpu:.2f} |"
        )
    return "\n".join(lines)


def parts_table(summaries: list[Summary]) -> str:
    """CPU seconds by part (medians), the serial fraction of the 1-worker runs and its Amdahl bound."""
    lines = [
        "| tree | workers | CLI before the first claim | CLI while items render | CLI after the last item | "
        "workers outside rendering | workers rendering | serial fraction s | Amdahl bound, 2 workers |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        parts = [s.median_part(name) for name in Parts.__dataclass_fields__]
        fraction = statistics.median(r.parts.serial_fraction for r in s.runs if r.parts is not None)
        lines.append(
            f"| {s.tree} | {s.workers} | " + " | ".join(f"{p:.2f}" for p in parts) + f" | {fraction:.4f} | "
            f"{amdahl_bound(fraction):.3f}x |"
        )
    return "\n".join(lines)


def cpu_line(summaries: list[Summary]) -> str:
    parts = [f"{s.tree} {s.workers} worker(s) {s.median_cpu:.1f} s" for s in summaries]
    return "CPU time per run (user + system, CLI and workers, median): " + ", ".join(parts)


def machine() -> str:
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"nproc {nproc}, Python {platform.python_version()}, {platform.system()} {platform.machine()}"


def parse_workers(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"need distinct worker counts of at least 1: {text!r}")
    return counts


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photos", type=int, default=200, help="photos to generate (default 200)")
    parser.add_argument("--workers", type=parse_workers, default=[1, 2], help="worker counts (default 1,2)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per worker count (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the photo generator (default 0)")
    parser.add_argument("--keep", type=Path, help="generate the photos here and keep them, or reuse them")
    parser.add_argument("--before", type=Path, help="an earlier checkout of thumbctl to compare with, run by run")
    parser.add_argument("--smoke", action="store_true", help="2 photos, one run per worker count: checks the script")
    args = parser.parse_args()
    if args.smoke:
        args.photos, args.repeat = 2, 1
    if args.photos < 1 or args.repeat < 1:
        parser.error("--photos and --repeat must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    trees = {"after": REPO} if not args.before else {"before": args.before.resolve(), "after": REPO}
    with tempfile.TemporaryDirectory(prefix="thumbctl-throughput-") as tmp:
        work = Path(tmp)
        photos = (args.keep or work / "photos").resolve()
        files = ensure_photos(photos, args.photos, args.seed)
        description = describe_photos(files)
        summaries = run_benchmark(photos, work, len(files), args.workers, args.repeat, trees)

    print(f"Command: `python {shlex.join(sys.argv)}`")
    print(f"Machine: {machine()}; load average at the end {os.getloadavg()[0]:.1f}")
    print(f"Photos: {description}; x {RATIOS_PER_SOURCE} ratios = {len(files) * RATIOS_PER_SOURCE} items\n")
    print(markdown_table(summaries))
    print(f"\n{cpu_line(summaries)}\n")
    print("CPU seconds by part (medians; bench/cpuparts.py says how the serial fraction is computed):\n")
    print(parts_table(summaries))


if __name__ == "__main__":
    main()
