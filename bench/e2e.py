"""Benchmark: the whole ``thumbctl submit`` against ``vipsthumbnail`` as people run it, end to end.

Per corpus folder these commands make the thumbnails of every file vips and
thumbctl can read (``*.jpg``, ``*.jpeg``, ``*.png``) in the default profile (1:1,
4:3 and 16:9 at 512 px on the longest side, JPEG q85, smart crop), all pinned to
one CPU core (``os.sched_setaffinity`` on this process; the commands inherit it,
as under ``taskset -c CORE``), vips with ``VIPS_CONCURRENCY=1``:

* ``thumbctl`` -- ``python -m thumbctl submit FOLDER --out OUT --db LEDGER -w 1 -q``
  in the foreground (the contact sheet on, as by default), so interpreter
  start-up, imports, intake (scan, read, digest, probe), the ledger, the worker,
  publishing, the batch manifest and the sheet all count. Each run gets a fresh
  ledger and OUT (a temp folder, also the working folder, so ``python -m`` finds
  the tree ``PYTHONPATH`` names); a run only counts when it exits 0 and the
  store holds one object per item.
* ``before`` (with ``--before DIR``) -- the same command run from the checkout of
  an earlier thumbctl in DIR (``PYTHONPATH=DIR``, this interpreter).
* ``vips batched`` (the target) -- one process per ratio over the whole folder,
  as people run it:
  ``vipsthumbnail FILES... --smartcrop attention -s WxH -o 'OUT/%s_R.jpg[Q=85,strip]'``
  with W x H the box thumbctl's ``output_geometry`` gives a large source at that
  ratio (512x512, 512x384, 512x288). vips fills that box for every file (it
  enlarges a source smaller than the box; thumbctl does not, so on a folder with
  such sources the outputs differ in size); every output is checked to decode at
  its box size in the warm-up run.
* ``vips per output`` (reference; ``--no-per-output`` leaves it out) -- one
  ``vipsthumbnail FILE ... -s WxH`` process per file and ratio, W x H being the
  size thumbctl gives that file and ratio.

Two reference cases split the whole command: the imaging alone in this process
(``bench/imaging.py``'s ``ours`` over the same files) and start-up
(``python -m thumbctl --version``: interpreter start-up and the CLI's imports, as
``bench/startup.py`` measures it), each tree's own. "The rest" is whole - start-up
- imaging alone: intake, the ledger, worker start, files, fsyncs, verification,
publishing, the manifest and the sheet.

One untimed warm-up run of each case, then ``--repeat`` timed rounds, each
running every case once in turn; the tables give medians and ratios. Targets:
thumbctl <= 0.45 x vips batched on ``photos/`` (and any other folder), <= 0.50 x
on ``large/`` (6 files, so start-up weighs most); the rest <= 15% of the whole.

``--scaling N`` also times 1 against 2 workers (no pinning) on N distinct
photos made from the corpus' ``photos/`` with ``bench/throughput.py``'s
generator (random crop, slight rotation and recolouring, re-encoded), through
``bench/throughput.py``'s own runner, with its CPU time by part, the serial fraction and its
Amdahl bound. Target: 2 workers >= 1.9 x one.

``--smoke`` runs the two smallest files of ``photos/`` once each (no warm-up, no scaling),
to check that the benchmark works; its figures mean nothing. Without
vipsthumbnail the vips columns are skipped.

Run it from the repository root::

    python bench/e2e.py [--corpus ../shared/corpus] [--folders large,photos] [--repeat 5] [--core 0]
                        [--before DIR] [--no-per-output] [--scaling 200]
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from imaging import (
    DEFAULT_CORPUS,
    MAX_PIXELS,
    QUALITY,
    RATIOS,
    REPO,
    SIZE,
    code_version,
    command_line,
    machine_line,
    pin,
    run_ours,
    shown_path,
    source_files,
    vips_version,
)
from PIL import Image
from throughput import (
    check_distinct,
    children_cpu_seconds,
    cli_env,
    describe_photos,
    load_samples,
    make_photo,
    markdown_table,
    parts_table,
    run_benchmark,
)

from thumbctl.imaging import output_geometry, probe

TARGETS = {"large": 0.50}
DEFAULT_TARGET = 0.45
REST_TARGET = 0.15
SCALING_TARGET = 1.9
#: The vips cases: one process per ratio over the folder (the target), and one per file and ratio.
BATCHED, PER_OUTPUT = "vips batched", "vips per output"


@dataclass
class Tree:
    """A checkout of thumbctl whose ``submit`` is timed: this one (``after``) or ``--before``'s."""

    label: str
    path: Path
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + system seconds of the submit and its worker
    startup: list[float] = field(default_factory=list)  # ``python -m thumbctl --version``


@dataclass
class FolderResult:
    folder: Path
    files: int
    outputs: int
    trees: list[Tree]
    vips: dict[str, list[float]]  # per vips case, wall seconds (absent: skipped)
    pipeline: list[float]  # thumbctl's imaging in-process, same files (bench/imaging.py's ``ours``)

    @property
    def target(self) -> float:
        return TARGETS.get(self.folder.name, DEFAULT_TARGET)

    def ratio(self, tree: Tree, case: str = BATCHED) -> float | None:
        if not self.vips.get(case):
            return None
        return statistics.median(tree.wall) / statistics.median(self.vips[case])


def output_sizes(path: Path) -> list[tuple[int, int]]:
    """The (width, height) thumbctl gives ``path`` for each ratio of the default profile."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    geometries = (output_geometry(info.width, info.height, r, SIZE, False) for r in RATIOS)
    return [(g.out_w, g.out_h) for g in geometries]


def ratio_boxes() -> list[tuple[int, int]]:
    """The box of each ratio: the size thumbctl gives a source larger than it (512x512, 512x384, 512x288)."""
    geometries = (output_geometry(8192, 8192, r, SIZE, False) for r in RATIOS)
    return [(g.out_w, g.out_h) for g in geometries]


def tree_env(tree: Path) -> dict[str, str]:
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    return env


def vips_env() -> dict[str, str]:
    return {**os.environ, "VIPS_CONCURRENCY": "1"}


def run_thumbctl(tree: Path, folder: Path, work: Path, items: int) -> tuple[float, float]:
    """One foreground submit into a fresh ledger and OUT; wall and CPU seconds."""
    run_dir = Path(tempfile.mkdtemp(prefix="thumbctl-", dir=work))
    out = run_dir / "out"
    command = [sys.executable, "-m", "thumbctl", "submit", str(folder), "--out", str(out)]
    command += ["--db", str(run_dir / "ledger.db"), "-w", "1", "-q"]
    cpu_before = children_cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=tree_env(tree), cwd=run_dir)
    seconds = time.perf_counter() - started
    cpu = children_cpu_seconds() - cpu_before
    if done.returncode != 0:
        sys.exit(f"FAILED (exit {done.returncode}): {' '.join(command)} in {tree}\n{done.stderr}")
    store = run_dir / "ledger.store"  # the default store, beside the ledger
    objects = sum(1 for p in (store / "objects").rglob("*") if p.is_file() and not p.name.endswith(".preview.jpg"))
    if objects != items:
        sys.exit(f"FAILED: {objects} objects in {store / 'objects'} for {items} items")
    shutil.rmtree(run_dir)
    return seconds, cpu


def run_startup(tree: Path, work: Path) -> float:
    """``python -m thumbctl --version``: interpreter start-up and the CLI's imports; wall seconds."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "thumbctl", "--version"]
    subprocess.run(command, check=True, capture_output=True, env=tree_env(tree), cwd=work)
    return time.perf_counter() - started


def run_pipeline(files: list[Path]) -> float:
    """The imaging alone, in this process: bench/imaging.py's ``ours`` for every file; wall seconds."""
    started = time.perf_counter()
    for path in files:
        run_ours(path)
    return time.perf_counter() - started


def check_made(out: Path, expected: dict[str, tuple[int, int]], check_pixels: bool) -> None:
    """Every expected file is there (and nothing else); with ``check_pixels`` each decodes at its size."""
    made = sorted(p.name for p in out.iterdir())
    if made != sorted(expected):
        sys.exit(f"FAILED: vipsthumbnail made {len(made)} files, expected {len(expected)}")
    for name, size in expected.items() if check_pixels else ():
        with Image.open(out / name) as image:
            image.load()
            if image.size != size:
                sys.exit(f"FAILED: vipsthumbnail made {name} at {image.size}, expected {size}")


def vips_command(files: list[Path], size: tuple[int, int], out: Path, tag: str) -> list[str]:
    names = [str(path) for path in files]
    target = f"{out}/%s_{tag}.jpg[Q={QUALITY},strip]"
    return ["vipsthumbnail", *names, "--smartcrop", "attention", "-s", f"{size[0]}x{size[1]}", "-o", target]


def run_vips_batched(files: list[Path], work: Path, check_pixels: bool = False) -> float:
    """vipsthumbnail once per ratio over all the files, into a fresh folder; wall seconds."""
    out = Path(tempfile.mkdtemp(prefix="vips-", dir=work))
    boxes = ratio_boxes()
    tags = [f"{r.w}x{r.h}" for r in RATIOS]
    started = time.perf_counter()
    for box, tag in zip(boxes, tags, strict=True):
        subprocess.run(vips_command(files, box, out, tag), check=True, capture_output=True, env=vips_env())
    seconds = time.perf_counter() - started
    expected = {f"{p.stem}_{tag}.jpg": box for p in files for box, tag in zip(boxes, tags, strict=True)}
    check_made(out, expected, check_pixels)
    shutil.rmtree(out)
    return seconds


def run_vips_per_output(
    jobs: list[tuple[Path, list[tuple[int, int]]]], work: Path, check_pixels: bool = False
) -> float:
    """vipsthumbnail once per file and ratio, at thumbctl's size for that file, into a fresh folder."""
    out = Path(tempfile.mkdtemp(prefix="vips-", dir=work))
    started = time.perf_counter()
    for path, sizes in jobs:
        for n, size in enumerate(sizes):
            subprocess.run(vips_command([path], size, out, str(n)), check=True, capture_output=True, env=vips_env())
    seconds = time.perf_counter() - started
    check_made(out, {f"{p.stem}_{n}.jpg": s for p, sizes in jobs for n, s in enumerate(sizes)}, check_pixels)
    shutil.rmtree(out)
    return seconds


def bench_folder(
    folder: Path, files: list[Path], trees: dict[str, Path], repeat: int, vips_cases: list[str], warm_up: bool = True
) -> FolderResult:
    """A warm-up round, then ``repeat`` rounds running each case once in turn over ``files`` (copied
    into a folder of their own when they are not the whole of ``folder``)."""
    jobs = [(path, output_sizes(path)) for path in files]
    items = sum(len(sizes) for _, sizes in jobs)
    timed = [Tree(label, path) for label, path in trees.items()]
    vips: dict[str, list[float]] = {case: [] for case in vips_cases}
    pipeline: list[float] = []
    with tempfile.TemporaryDirectory(prefix="thumbctl-e2e-") as tmp:
        work = Path(tmp)
        source = folder
        if len(files) != len(source_files(folder)):
            source = work / folder.name
            source.mkdir()
            for path in files:
                shutil.copyfile(path, source / path.name)
        cases = {BATCHED: lambda check: run_vips_batched(files, work, check)}
        cases[PER_OUTPUT] = lambda check: run_vips_per_output(jobs, work, check)
        first = 1 if warm_up else 0  # round 0, untimed, warms the page cache and byte code
        for n in range(1 - first, repeat + 1):
            for tree in timed:
                wall, cpu = run_thumbctl(tree.path, source, work, items)
                startup = run_startup(tree.path, work)
                if n:
                    tree.wall.append(wall)
                    tree.cpu.append(cpu)
                    tree.startup.append(startup)
                    print(f"  {folder.name} run {n}/{repeat}: {tree.label} {wall:.2f} s", file=sys.stderr)
            for case in vips_cases:
                seconds = cases[case](n == 1 - first)  # the first round checks every output's pixels
                if n:
                    vips[case].append(seconds)
                    print(f"  {folder.name} run {n}/{repeat}: {case} {seconds:.2f} s", file=sys.stderr)
            seconds = run_pipeline(files)
            if n:
                pipeline.append(seconds)
    return FolderResult(folder, len(files), items, timed, vips, pipeline)


def median(values: list[float]) -> float:
    return statistics.median(values)


def results_table(results: list[FolderResult], smoke: bool) -> str:
    """Whole submit against vips batched (the target) and per output (reference), per tree."""
    lines = [
        "| corpus | files (outputs) | code | thumbctl s | vips batched s | ratio | target | verdict "
        "| vips per output s | ratio to per output | thumbctl CPU s |",
        "|---|---|---|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in results:
        for tree in r.trees:
            ratio = r.ratio(tree)
            batched = f"{median(r.vips[BATCHED]):.2f} | {ratio:.3f}" if ratio is not None else "skipped | "
            verdict = (
                "" if ratio is None else "smoke run, no verdict" if smoke else "PASS" if ratio <= r.target else "FAIL"
            )
            per = r.ratio(tree, PER_OUTPUT)
            per_output = f"{median(r.vips[PER_OUTPUT]):.2f} | {per:.3f}" if per is not None else "skipped | "
            lines.append(
                f"| `{shown_path(r.folder)}/` | {r.files} ({r.outputs}) | {tree.label} | {median(tree.wall):.2f} | "
                f"{batched} | <= {r.target:.2f} | {verdict} | {per_output} | {median(tree.cpu):.2f} |"
            )
    return "\n".join(lines)


def versus_table(results: list[FolderResult]) -> str:
    """After against before, from the same rounds: wall, CPU and the ratio to vips batched."""
    lines = ["| corpus | after / before, wall | after / before, CPU | rest after / before |", "|---|---:|---:|---:|"]
    for r in results:
        before, after = r.trees[0], r.trees[-1]
        lines.append(
            f"| `{shown_path(r.folder)}/` | {median(after.wall) / median(before.wall):.3f} | "
            f"{median(after.cpu) / median(before.cpu):.3f} | {rest(r, after) / rest(r, before):.3f} |"
        )
    return "\n".join(lines)


def rest(r: FolderResult, tree: Tree) -> float:
    return median(tree.wall) - median(tree.startup) - median(r.pipeline)


def breakdown_table(results: list[FolderResult], smoke: bool) -> str:
    """The issue's split of the whole command: start-up, the imaging alone and the rest, medians."""
    lines = [
        "| corpus | code | whole s | start-up (`--version`) s | imaging alone s | rest s | rest / whole "
        "| target | verdict | imaging alone / vips batched |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in results:
        pipeline = median(r.pipeline)
        share_of_vips = f"{pipeline / median(r.vips[BATCHED]):.3f}" if r.vips.get(BATCHED) else ""
        for tree in r.trees:
            whole, remainder = median(tree.wall), rest(r, tree)
            share = remainder / whole
            verdict = "smoke run, no verdict" if smoke else "PASS" if share <= REST_TARGET else "FAIL"
            lines.append(
                f"| `{shown_path(r.folder)}/` | {tree.label} | {whole:.2f} | {median(tree.startup):.2f} | "
                f"{pipeline:.2f} | {remainder:.2f} | {share:.1%} | <= {REST_TARGET:.0%} | {verdict} | {share_of_vips} |"
            )
    return "\n".join(lines)


def make_scaling_photos(corpus: Path, folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` distinct JPEGs derived from the corpus' photos (throughput.py's generator)."""
    folder.mkdir(parents=True)
    samples = load_samples(corpus / "photos")
    rng = random.Random(seed)
    for i in range(count):
        make_photo(rng.choice(samples), rng).save(folder / f"photo_{i:04d}.jpg", "JPEG", quality=90)
    files = sorted(folder.iterdir())
    check_distinct(files)
    return files


def bench_scaling(corpus: Path, count: int, repeat: int) -> str:
    """1 against 2 workers on ``count`` generated photos, unpinned; the table and verdict."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="thumbctl-e2e-scaling-") as tmp:
        work = Path(tmp)
        files = make_scaling_photos(corpus, work / "photos", count)
        description = describe_photos(files)  # while the photos exist
        summaries = run_benchmark(work / "photos", work, len(files), [1, 2], repeat)
    speedup = summaries[0].median / summaries[1].median
    verdict = "PASS" if speedup >= SCALING_TARGET else "FAIL"
    return (
        f"### 1 vs 2 workers: {description} from `{shown_path(corpus / 'photos')}/`\n\n"
        f"{markdown_table(summaries)}\n\n"
        f"2 workers / 1 worker: {speedup:.2f}x, target >= {SCALING_TARGET}x: {verdict}\n\n"
        f"CPU seconds by part (medians; bench/cpuparts.py):\n\n{parts_table(summaries)}\n"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--corpus", default=DEFAULT_CORPUS, help=f"relative to the repository (default {DEFAULT_CORPUS})"
    )
    parser.add_argument("--folders", default="large,photos", help="sub-folders of the corpus (default large,photos)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to (default 0)")
    parser.add_argument("--before", type=Path, help="a checkout of an earlier thumbctl, timed in the same rounds")
    parser.add_argument("--no-per-output", action="store_true", help="leave out vips once per file and ratio")
    parser.add_argument("--scaling", type=int, default=0, help="also time 1 vs 2 workers on this many photos")
    parser.add_argument("--smoke", action="store_true", help="two small photos, one run: checks the script only")
    args = parser.parse_args()
    if args.repeat < 1 or args.scaling < 0:
        parser.error("--repeat must be at least 1 and --scaling not negative")
    if args.before is not None and not (args.before / "thumbctl" / "__init__.py").is_file():
        parser.error(f"--before {args.before} is not a checkout of thumbctl")
    return args


def main() -> None:
    args = parse_args()
    corpus = (REPO / args.corpus).resolve()
    vips = vips_version()
    if vips is None:
        print("vipsthumbnail is not installed: the vips columns are skipped", file=sys.stderr)
    vips_cases = [] if vips is None else [BATCHED] if args.no_per_output else [BATCHED, PER_OUTPUT]
    trees = {"after": REPO} if args.before is None else {"before": args.before.resolve(), "after": REPO}
    pin(args.core)
    results = []
    if args.smoke:
        photos = corpus / "photos"
        smallest = sorted(source_files(photos), key=lambda p: p.stat().st_size)[:2]
        results.append(bench_folder(photos, smallest, trees, 1, vips_cases, warm_up=False))
    else:
        for name in [f for f in args.folders.split(",") if f]:
            files = source_files(corpus / name)
            results.append(bench_folder(corpus / name, files, trees, args.repeat, vips_cases))
    scaling = bench_scaling(corpus, args.scaling, args.repeat) if args.scaling and not args.smoke else ""

    print(f"Command: `{command_line()}`\n")
    print(f"Machine: {machine_line(args.core, vips)}, SQLite {sqlite3.sqlite_version}, VIPS_CONCURRENCY=1\n")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; code: {code_version()}\n")
    if args.before is not None:
        print(f"before: {code_version(trees['before'])}\n")
    if results:
        print(results_table(results, args.smoke) + "\n")
        print(breakdown_table(results, args.smoke) + "\n")
        if len(trees) > 1:
            print(versus_table(results) + "\n")
    if scaling:
        print(scaling)


if __name__ == "__main__":
    main()
