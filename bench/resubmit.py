"""Benchmark: re-submitting an unchanged folder, with and without the stat cache.

What it measures, each case timed around the real CLI run as a subprocess
(``python -m thumbctl submit FOLDER --out OUT --detach --db LEDGER --json``),
so interpreter start-up and imports count, as they do for a user:

* cold submit: a fresh ledger; every file is read, hashed and probed, and the
  batch is recorded (one run);
* cached re-submit: the same folder against the same ledger; every file is
  answered from the stat cache (path, size, mtime_ns, inode -> digest) and the
  batch is replayed (``--repeat`` runs);
* re-submit without stat cache: the same folder against a fresh copy of the
  ledger whose ``stat_cache`` table was emptied, so every file is read and
  hashed again before the replay (``--repeat`` runs, a fresh copy each time);
* CLI start-up only: ``python -m thumbctl codes --json``, the floor under every
  case (``--repeat`` runs).

Every re-submit must print ``"replayed": true`` and the cold run's batch id.
Target: the cached re-submit of 10,000 files takes under 2 s (median).

Run it from the repository root, with the interpreter that has thumbctl installed::

    python bench/resubmit.py [--files 10000] [--repeat 5] [--keep DIR]

The images (small distinct PNGs over ~100 subfolders) go to a temporary folder,
or to ``--keep DIR``, which is reused as it is when it already holds them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

TARGET_SECONDS = 2.0
SUBFOLDERS = 100
SIDE = 16


@dataclass(frozen=True)
class Case:
    name: str
    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)


# -- the images -----------------------------------------------------------------


def image_paths(folder: Path, count: int) -> list[Path]:
    """Where image ``i`` of ``count`` lives: spread evenly over the subfolders."""
    return [folder / f"d{i % SUBFOLDERS:03d}" / f"img{i:05d}.png" for i in range(count)]


def generate_images(folder: Path, count: int) -> None:
    """Write ``count`` distinct 16x16 RGB noise PNGs (seeded by index, so reproducible)."""
    for sub in range(min(count, SUBFOLDERS)):
        (folder / f"d{sub:03d}").mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(image_paths(folder, count)):
        pixels = bytearray(random.Random(i).randbytes(SIDE * SIDE * 3))
        pixels[:4] = i.to_bytes(4, "big")  # distinct even if two seeds collided
        Image.frombytes("RGB", (SIDE, SIDE), bytes(pixels)).save(path, "PNG")


def ensure_images(folder: Path, count: int) -> str:
    """Generate the images unless ``folder`` already holds exactly them; say which."""
    existing = sum(1 for _ in folder.rglob("*.png")) if folder.is_dir() else 0
    if existing == count and all(p.is_file() for p in image_paths(folder, count)):
        return f"reused {count} images in {folder}"
    if existing:
        sys.exit(f"{folder} holds {existing} PNG files, not the {count} this run needs; pick another --keep DIR")
    started = time.perf_counter()
    generate_images(folder, count)
    return f"generated {count} images in {folder} in {time.perf_counter() - started:.1f} s"


# -- running the CLI ------------------------------------------------------------


def cli_env() -> dict[str, str]:
    """The caller's environment without THUMBCTL_* settings that could change the request."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUMBCTL_")}
    env["NO_COLOR"] = "1"
    return env


def run_cli(args: list[str]) -> tuple[float, dict]:
    """Run ``python -m thumbctl ARGS``; return wall seconds and the JSON it printed."""
    command = [sys.executable, "-m", "thumbctl", *args]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"FAILED (exit {done.returncode}): {shlex.join(command)}\n{done.stderr}")
    return elapsed, json.loads(done.stdout)


def submit_cli(images: Path, out: Path, ledger: Path) -> tuple[float, dict]:
    return run_cli(["submit", str(images), "--out", str(out), "--detach", "--db", str(ledger), "--json"])


def check_replay(doc: dict, batch_id: str, case: str) -> None:
    if doc.get("replayed") is not True or doc.get("batch_id") != batch_id:
        sys.exit(
            f"FAILED: {case} returned replayed={doc.get('replayed')!r}, batch_id={doc.get('batch_id')!r}; "
            f"expected replayed=true and {batch_id}"
        )


# -- ledgers --------------------------------------------------------------------


def stat_cache_rows(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return conn.execute("SELECT count(*) FROM stat_cache").fetchone()[0]


def copy_ledger(source: Path, target: Path) -> None:
    """A consistent copy of a (WAL-mode) ledger, through SQLite's backup API."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def ledger_without_stat_cache(source: Path, target: Path) -> None:
    copy_ledger(source, target)
    conn = sqlite3.connect(target)
    try:
        with conn:
            conn.execute("DELETE FROM stat_cache")
    finally:
        conn.close()


# -- the benchmark ----------------------------------------------------------------


def run_benchmark(images: Path, work: Path, files: int, repeat: int) -> list[Case]:
    out, ledger = work / "thumbs", work / "ledger.db"

    cold_seconds, cold = submit_cli(images, out, ledger)
    if cold.get("replayed") is not False or cold.get("total") != files * 3:
        sys.exit(f"FAILED: cold submit returned replayed={cold.get('replayed')!r}, total={cold.get('total')!r}")
    batch_id = cold["batch_id"]
    if stat_cache_rows(ledger) != files:
        sys.exit(f"FAILED: the stat cache holds {stat_cache_rows(ledger)} rows after the cold submit, not {files}")

    cached = []
    for _ in range(repeat):
        seconds, doc = submit_cli(images, out, ledger)
        check_replay(doc, batch_id, "cached re-submit")
        cached.append(seconds)

    template = work / "no-stat-cache.db"
    ledger_without_stat_cache(ledger, template)
    uncached = []
    for n in range(repeat):
        fresh = work / f"no-stat-cache-{n}.db"
        copy_ledger(template, fresh)  # a fresh copy each time: the run refills the cache
        seconds, doc = submit_cli(images, out, fresh)
        check_replay(doc, batch_id, "re-submit without stat cache")
        uncached.append(seconds)

    startup = [run_cli(["codes", "--json"])[0] for _ in range(repeat)]

    return [
        Case("cold submit (fresh ledger)", [cold_seconds]),
        Case("re-submit, stat cache", cached),
        Case("re-submit, stat cache emptied", uncached),
        Case("CLI start-up only (`codes --json`)", startup),
    ]


def markdown_table(cases: list[Case], baseline: Case) -> str:
    lines = [
        "| case | runs | median s | min s | max s | vs cached re-submit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        lines.append(
            f"| {case.name} | {len(case.times)} | {case.median:.3f} | {min(case.times):.3f} | "
            f"{max(case.times):.3f} | {case.median / baseline.median:.2f}x |"
        )
    return "\n".join(lines)


def machine() -> str:
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"nproc {nproc}, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.system()} {platform.machine()}"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000, help="images to generate (default 10000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per re-submit case (default 5)")
    parser.add_argument("--keep", type=Path, help="generate the images here and keep them, or reuse them")
    args = parser.parse_args()
    if args.files < 1 or args.repeat < 1:
        parser.error("--files and --repeat must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="thumbctl-bench-") as tmp:
        work = Path(tmp)
        images = (args.keep or work / "images").resolve()
        print(ensure_images(images, args.files), file=sys.stderr)
        cases = run_benchmark(images, work, args.files, args.repeat)

    cached = cases[1]
    verdict = "PASS" if cached.median < TARGET_SECONDS else "FAIL"
    print(f"Command: `python {shlex.join(sys.argv)}`")
    print(f"Machine: {machine()}")
    print(f"Files: {args.files} PNG sources x 3 ratios = {args.files * 3} items\n")
    print(markdown_table(cases, cached))
    print(
        f"\nTarget: cached re-submit of {args.files:,} files < {TARGET_SECONDS:g} s "
        f"(median {cached.median:.3f} s): {verdict}"
    )
    if verdict == "FAIL":
        sys.exit(1)


if __name__ == "__main__":
    main()
