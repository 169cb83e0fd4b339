"""Benchmark: the whole ``thumbctl submit`` against ``vipsthumbnail`` run once per ratio, end to end.

Per corpus folder two commands make the same thumbnails of every file (the
default profile: 1:1, 4:3 and 16:9 at 512 px on the longest side, JPEG q85,
smart crop), both pinned to one CPU core (``os.sched_setaffinity`` on this
process; the commands inherit it, as under ``taskset -c CORE``):

* ``thumbctl`` -- ``python -m thumbctl submit FOLDER --out OUT --db LEDGER -w 1 -q``
  in the foreground, so interpreter start-up, imports, intake (scan, read,
  digest, probe), the ledger, the worker, publishing and the batch manifest
  all count. Each run gets a fresh ledger and a fresh OUT (a temp folder); a
  run only counts when it exits 0 and OUT holds one object per item.
* ``vips`` -- per file and per ratio one
  ``vipsthumbnail FILE --smartcrop attention -s WxH -o OUT/NAME_N.jpg[Q=85,strip]``
  process, W x H being the size thumbctl's ``output_geometry`` gives that file
  and ratio (as in ``bench/imaging.py``), into a fresh folder each run.

One untimed warm-up run of each, then ``--repeat`` timed runs alternated
(thumbctl, vips, thumbctl, ...); the table gives the median wall time of each
and their ratio. Targets: thumbctl <= 0.50 x vips on ``large/`` (6 files, so
start-up weighs most) and <= 0.40 x on the other folders.

``--scaling N`` also times 1 against 2 workers (no pinning) on N distinct
photos made from the corpus' ``photos/`` with ``bench/throughput.py``'s
generator (random crop, slight rotation and recolouring, re-encoded), through
``bench/throughput.py``'s own runner, with its CPU time by part, the serial fraction and its
Amdahl bound. Target: 2 workers >= 1.9 x one.

``--smoke`` runs the two smallest files of ``photos/`` once each (no scaling),
to check that the benchmark works; its figures mean nothing. Without
vipsthumbnail the vips column is skipped.

Run it from the repository root::

    python bench/e2e.py [--corpus ../shared/corpus] [--folders large,photos] [--repeat 5] [--core 0] [--scaling 200]
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
from dataclasses import dataclass
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
DEFAULT_TARGET = 0.40
SCALING_TARGET = 1.9


@dataclass(frozen=True)
class FolderResult:
    folder: Path
    files: int
    thumbctl: list[float]
    cpu: list[float]  # user + system seconds of the submit and its worker
    vips: list[float] | None
    pipeline: list[float]  # thumbctl's imaging in-process, same files (bench/imaging.py's ``ours``)
    startup: list[float]  # ``python -m thumbctl --version``

    @property
    def target(self) -> float:
        return TARGETS.get(self.folder.name, DEFAULT_TARGET)

    @property
    def ratio(self) -> float | None:
        if not self.vips:
            return None
        return statistics.median(self.thumbctl) / statistics.median(self.vips)


def output_sizes(path: Path) -> list[tuple[int, int]]:
    """The (width, height) thumbctl gives ``path`` for each ratio of the default profile."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    geometries = (output_geometry(info.width, info.height, r, SIZE, False) for r in RATIOS)
    return [(g.out_w, g.out_h) for g in geometries]


def thumbctl_env() -> dict[str, str]:
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_thumbctl(folder: Path, work: Path, items: int) -> tuple[float, float]:
    """One foreground submit into a fresh ledger and OUT; wall and CPU seconds."""
    run_dir = Path(tempfile.mkdtemp(prefix="thumbctl-", dir=work))
    out = run_dir / "out"
    command = [sys.executable, "-m", "thumbctl", "submit", str(folder), "--out", str(out)]
    command += ["--db", str(run_dir / "ledger.db"), "-w", "1", "-q"]
    cpu_before = children_cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=thumbctl_env())
    seconds = time.perf_counter() - started
    cpu = children_cpu_seconds() - cpu_before
    if done.returncode != 0:
        sys.exit(f"FAILED (exit {done.returncode}): {' '.join(command)}\n{done.stderr}")
    store = run_dir / "ledger.store"  # the default store, beside the ledger
    objects = sum(1 for p in (store / "objects").rglob("*") if p.is_file() and not p.name.endswith(".preview.jpg"))
    if objects != items:
        sys.exit(f"FAILED: {objects} objects in {store / 'objects'} for {items} items")
    shutil.rmtree(run_dir)
    return seconds, cpu


def run_startup() -> float:
    """``python -m thumbctl --version``: interpreter start-up and the CLI's imports; wall seconds."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "thumbctl", "--version"]
    subprocess.run(command, check=True, capture_output=True, env=thumbctl_env())
    return time.perf_counter() - started


def run_pipeline(files: list[Path]) -> float:
    """The imaging alone, in this process: bench/imaging.py's ``ours`` for every file; wall seconds."""
    started = time.perf_counter()
    for path in files:
        run_ours(path)
    return time.perf_counter() - started


def run_vips(jobs: list[tuple[Path, list[tuple[int, int]]]], work: Path) -> float:
    """vipsthumbnail once per file and ratio into a fresh folder; wall seconds."""
    out = Path(tempfile.mkdtemp(prefix="vips-", dir=work))
    started = time.perf_counter()
    for path, sizes in jobs:
        for n, (w, h) in enumerate(sizes):
            target = f"{out}/%s_{n}.jpg[Q={QUALITY},strip]"
            command = ["vipsthumbnail", str(path), "--smartcrop", "attention", "-s", f"{w}x{h}", "-o", target]
            subprocess.run(command, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    made = len(list(out.iterdir()))
    if made != sum(len(sizes) for _, sizes in jobs):
        sys.exit(f"FAILED: vipsthumbnail made {made} files")
    shutil.rmtree(out)
    return seconds


def bench_folder(folder: Path, files: list[Path], repeat: int, with_vips: bool) -> FolderResult:
    """Warm-up, then ``repeat`` alternated timed runs of each case over ``files`` (copied into
    a folder of their own when they are not the whole of ``folder``)."""
    jobs = [(path, output_sizes(path)) for path in files]
    items = sum(len(sizes) for _, sizes in jobs)
    times: dict[str, list[float]] = {"thumbctl": [], "cpu": [], "vips": [], "pipeline": [], "startup": []}
    with tempfile.TemporaryDirectory(prefix="thumbctl-e2e-") as tmp:
        work = Path(tmp)
        source = folder
        if len(files) != len(source_files(folder)):
            source = work / folder.name
            source.mkdir()
            for path in files:
                shutil.copyfile(path, source / path.name)
        runners = {
            "thumbctl": lambda: run_thumbctl(source, work, items),
            "vips": lambda: run_vips(jobs, work),
            "pipeline": lambda: run_pipeline(files),
            "startup": run_startup,
        }
        if not with_vips:
            del runners["vips"]
        for run in runners.values():
            run()  # warm-up, untimed: page cache, checks
        for n in range(repeat):
            for case, run in runners.items():
                result = run()
                if case == "thumbctl":
                    result, cpu = result
                    times["cpu"].append(cpu)
                times[case].append(result)
                print(f"  {folder.name} run {n + 1}/{repeat}: {case} {result:.2f} s", file=sys.stderr)
    return FolderResult(
        folder,
        len(files),
        times["thumbctl"],
        times["cpu"],
        times["vips"] if with_vips else None,
        times["pipeline"],
        times["startup"],
    )


def results_table(results: list[FolderResult], smoke: bool) -> str:
    lines = [
        "| corpus | files | thumbctl median s | vips median s | ratio | target | verdict |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        ours = f"{statistics.median(r.thumbctl):.2f}"
        if r.ratio is None:
            lines.append(f"| `{shown_path(r.folder)}/` | {r.files} | {ours} | skipped | | <= {r.target:.2f} | |")
            continue
        verdict = "smoke run, no verdict" if smoke else "PASS" if r.ratio <= r.target else "FAIL"
        lines.append(
            f"| `{shown_path(r.folder)}/` | {r.files} | {ours} | {statistics.median(r.vips):.2f} | "
            f"{r.ratio:.3f} | <= {r.target:.2f} | {verdict} |"
        )
    return "\n".join(lines)


def breakdown_table(results: list[FolderResult]) -> str:
    """Where the submit's time goes: start-up, the imaging alone, and the rest (intake, ledger,
    worker start, files, publish, manifest), each also as a share of the vips time."""
    lines = [
        "| corpus | submit s | submit CPU s | start-up (`--version`) s | imaging alone s | rest s "
        "| imaging alone / vips | start-up + imaging / vips |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        submit, startup, pipeline = (statistics.median(x) for x in (r.thumbctl, r.startup, r.pipeline))
        vips = statistics.median(r.vips) if r.vips else None
        shares = f"{pipeline / vips:.3f} | {(startup + pipeline) / vips:.3f}" if vips else "| "
        lines.append(
            f"| `{shown_path(r.folder)}/` | {submit:.2f} | {statistics.median(r.cpu):.2f} | {startup:.2f} | "
            f"{pipeline:.2f} | {submit - startup - pipeline:.2f} | {shares} |"
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
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per command (default 5)")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to (default 0)")
    parser.add_argument("--scaling", type=int, default=0, help="also time 1 vs 2 workers on this many photos")
    parser.add_argument("--smoke", action="store_true", help="two small photos, one run: checks the script only")
    args = parser.parse_args()
    if args.repeat < 1 or args.scaling < 0:
        parser.error("--repeat must be at least 1 and --scaling not negative")
    return args


def main() -> None:
    args = parse_args()
    corpus = (REPO / args.corpus).resolve()
    vips = vips_version()
    if vips is None:
        print("vipsthumbnail is not installed: the vips column is skipped", file=sys.stderr)
    pin(args.core)
    results = []
    if args.smoke:
        photos = corpus / "photos"
        smallest = sorted(source_files(photos), key=lambda p: p.stat().st_size)[:2]
        results.append(bench_folder(photos, smallest, 1, vips is not None))
    else:
        for name in [f for f in args.folders.split(",") if f]:
            files = source_files(corpus / name)
            results.append(bench_folder(corpus / name, files, args.repeat, vips is not None))
    scaling = bench_scaling(corpus, args.scaling, args.repeat) if args.scaling and not args.smoke else ""

    print(f"Command: `{command_line()}`\n")
    print(f"Machine: {machine_line(args.core, vips)}, SQLite {sqlite3.sqlite_version}\n")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; code: {code_version()}\n")
    print(results_table(results, args.smoke) + "\n")
    print(breakdown_table(results) + "\n")
    if scaling:
        print(scaling)


if __name__ == "__main__":
    main()
