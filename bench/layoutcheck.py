"""Benchmark: the check a writing command makes for output folders still in the old layout.

Before a command writes, :func:`thumbctl.upkeep.migrate.settle_store` asks whether an output folder
the ledger knows still holds ``objects/`` (the layout before the store moved out of OUT). Two ways
of answering it, timed side by side in one process on one ledger:

- ``needs_migration``: what every writing command paid before the ledger kept a note, and what it
  still pays until the note is written: a query over every batch for its output folder, then one
  ``lstat`` per folder;
- ``old_layout_left`` with the note written (meta ``layout``): one row read.

The ledger holds ``--batches`` batches over ``--outs`` output folders (rows written directly: no
photo is rendered). Figures are medians of ``--runs`` calls. Run from the repository root::

    python bench/layoutcheck.py [--runs 15] [--smoke]

``--smoke`` runs the smallest ledger with 3 calls: a check that the benchmark works.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from thumbctl import Ledger
from thumbctl.upkeep.migrate import needs_migration, old_layout_left

#: (batches, output folders) of each ledger measured.
SIZES = ((100, 10), (10_000, 50), (100_000, 200))


def make_ledger(root: Path, batches: int, outs: int) -> Path:
    """A ledger of ``batches`` batches spread over ``outs`` output folders (each folder made, empty)."""
    db = root / "ledger.db"
    Ledger(db).close()
    folders = [root / f"out{i}" for i in range(outs)]
    for folder in folders:
        folder.mkdir()
    rows = [
        (f"b{i:07d}", f"k{i}", "d", 1, str(folders[i % outs]), f"2026-01-01T00:00:00.{i:06d}Z") for i in range(batches)
    ]
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO batches (batch_id, idempotency_key, request_digest, total, out_dir, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
    return db


def median_ms(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(batches: int, outs: int, runs: int) -> tuple[float, float]:
    """(needs_migration, old_layout_left with the note) in ms on a fresh ledger of that size."""
    with tempfile.TemporaryDirectory(prefix="layoutcheck-") as tmp:
        db = make_ledger(Path(tmp), batches, outs)
        with Ledger(db) as ledger:
            scan = median_ms(lambda: needs_migration(ledger), runs)
            assert not old_layout_left(ledger)  # no folder holds objects/: the note is written
            noted = median_ms(lambda: old_layout_left(ledger), runs)
    return scan, noted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    sizes, runs = (SIZES[:1], 3) if args.smoke else (SIZES, args.runs)
    print(f"## The old-layout check before a writing command (median of {runs} calls)\n")
    print(f"- command: `python bench/layoutcheck.py{' --smoke' if args.smoke else f' --runs {runs}'}`\n")
    print("| batches | output folders | needs_migration ms | with the note ms |")
    print("|---:|---:|---:|---:|")
    for batches, outs in sizes:
        scan, noted = measure(batches, outs, runs)
        print(f"| {batches:,} | {outs:,} | {scan:.2f} | {noted:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
