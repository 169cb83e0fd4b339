"""Benchmark: claim -> render -> publish -> commit throughput with a short queue and a long one.

Two ledgers are built through the ledger's own acceptance API: one with ``--small`` queued items
(default 10,000) and one with ``--large`` (default 1,000,000, accepted as batches of 100,000).
Each timed run then accepts one more batch of ``--items`` items (default 5,000: sources of three
ratios each) and runs ``--workers`` worker processes (1, then 2) scoped to that batch, as
``submit`` runs them, until it is done; the batches that fill the queue stay queued, so the queue
holds the same number of items in every run. Only the workers are timed; building the ledgers and
accepting the batch are not.

The render is a no-op: each worker is given, through :func:`thumbctl.engine.worker.run_worker`'s
``renderer`` argument, a renderer that returns a pre-encoded JPEG of exactly the requested
geometry instead of cropping, resampling and encoding. Everything else is the real worker: the
claim, reading and hashing the (tiny, real) source, its decode, the temp file and its
verification, the publish transaction with the object and its friendly name, the heartbeat. So
the figures are the per-item cost of the queue and the publish, which must not grow with the
queue.

Runs alternate (short, long) for each worker count; the rate of a case is the median over
``--repeat`` runs (default 5) of items / wall seconds, with the workers' CPU time per item beside
it. Run it from the repository root, with thumbctl importable (``PYTHONPATH=$PWD``)::

    python bench/queue_scale.py [--small 10000] [--large 1000000] [--items 5000] [--repeat 5] [--workers 1,2]
    python bench/queue_scale.py --smoke      # tiny sizes, one run: checks the benchmark still works
"""

from __future__ import annotations

import argparse
import hashlib
import io
import multiprocessing
import os
import resource
import shlex
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

try:
    import thumbctl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from resubmit import machine

from thumbctl import Ledger, Limits
from thumbctl.core.models import NewBatch, NewItem
from thumbctl.core.profile import Profile
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.imaging import Geometry

RATIOS = ("1:1", "4:3", "16:9")
SOURCE_SIZE = (64, 48)
PROFILE = {**Profile(size=32).encoder_settings, "size": 32}
FILL_BATCH = 100_000
TARGET = 1.25


@dataclass(frozen=True)
class Run:
    workers: int
    queued: int
    seconds: float
    cpu_seconds: float
    items: int

    @property
    def rate(self) -> float:
        return self.items / self.seconds

    @property
    def cpu_ms_per_item(self) -> float:
        return 1000 * self.cpu_seconds / self.items


# -- the no-op render -------------------------------------------------------------------------

_ENCODED: dict[tuple[int, int, str], bytes] = {}


def noop_render(geometry: Geometry, fmt: str) -> bytes:
    """A valid image of exactly the requested size, encoded once per size and reused."""
    key = (geometry.out_w, geometry.out_h, fmt)
    if key not in _ENCODED:
        buffer = io.BytesIO()
        Image.new("RGB", (geometry.out_w, geometry.out_h), (90, 120, 150)).save(buffer, fmt.upper())
        _ENCODED[key] = buffer.getvalue()
    return _ENCODED[key]


def worker_process(db: str, batch_id: str) -> None:
    run_worker(WorkerConfig(db, batch_id=batch_id, item_timeout=0), threading.Event(), renderer=noop_render)


# -- the ledgers --------------------------------------------------------------------------------


def make_sources(folder: Path, count: int) -> str:
    """``count`` tiny real JPEG sources (hard links of one file); returns their digest."""
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / "s0.jpg"
    Image.new("RGB", SOURCE_SIZE, (200, 100, 50)).save(first, "JPEG")
    for n in range(1, count):
        os.link(first, folder / f"s{n}.jpg")
    return hashlib.sha256(first.read_bytes()).hexdigest()


def items(count: int, tag: str, root: Path, out: Path, digest: str) -> tuple[NewItem, ...]:
    """``count`` queued items, three ratios per source; source ``n`` is ``root/s{n}.jpg``."""
    made = []
    for n in range(count):
        source, ratio = n // 3, RATIOS[n % 3]
        key = hashlib.sha256(f"{tag}-{n}".encode()).hexdigest()
        made.append(
            NewItem(
                f"s{source}.jpg",
                ratio,
                f"{root}/s{source}.jpg",
                "queued",
                source_digest=digest,
                source_format="jpeg",
                source_width=SOURCE_SIZE[0],
                source_height=SOURCE_SIZE[1],
                derivative_key=key,
                object_path=f"{out}/objects/{key[:2]}/{key}.jpg",
                friendly_path=f"{out}/s{source}.{ratio.replace(':', 'x')}.jpg",
            )
        )
    return tuple(made)


def accept(led: Ledger, tag: str, count: int, root: Path, out: Path, digest: str) -> str:
    new = NewBatch(tag, f"digest-{tag}", str(root), str(out), PROFILE, items(count, tag, root, out, digest))
    return led.intake.accept_batch(new, Limits(max_runnable=100_000_000)).batch_id


def build_ledger(path: Path, queued: int, root: Path, digest: str) -> None:
    """A ledger whose queue holds ``queued`` items in batches of at most FILL_BATCH (their sources
    are never read: the timed workers only claim the batch of their own run)."""
    with Ledger(path) as led:
        for start in range(0, queued, FILL_BATCH):
            size = min(FILL_BATCH, queued - start)
            accept(led, f"fill-{start}", size, root / "unread", path.parent / "out-fill", digest)


# -- the runs ------------------------------------------------------------------------------------


def timed_run(db: Path, queued: int, workers: int, args: argparse.Namespace, run: int, root: Path, digest: str) -> Run:
    out = db.parent / f"out-{run}"
    out.mkdir()
    with Ledger(db) as led:
        batch_id = accept(led, f"run-{run}", args.items, root, out, digest)
    context = multiprocessing.get_context("fork")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    procs = [context.Process(target=worker_process, args=(str(db), batch_id)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with Ledger(db) as led:
        counts = led.views.batch(batch_id, with_failures=False).counts
    if counts["succeeded"] != args.items or any(p.exitcode for p in procs):
        exits = [p.exitcode for p in procs]
        sys.exit(f"run {run}: expected {args.items} succeeded items, got {counts} (worker exit codes {exits})")
    return Run(workers, queued, seconds, cpu, args.items)


def report(runs: list[Run], args: argparse.Namespace) -> None:
    print(f"Command: `{shlex.join(['python', f'bench/{Path(__file__).name}', *sys.argv[1:]])}`")
    print(f"Machine: {machine()}; {time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"Items timed per run: {args.items} (no-op render); runs per case: {args.repeat}\n")
    print("| workers | queued items | runs | median items/s | min | max | CPU ms/item | short/long rate |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    verdicts = []
    for workers in args.workers:
        medians = {}
        for queued in (args.small, args.large):
            case = [r for r in runs if r.workers == workers and r.queued == queued]
            rates = [r.rate for r in case]
            medians[queued] = statistics.median(rates)
            slowdown = medians[args.small] / medians[queued]
            cpu = statistics.median(r.cpu_ms_per_item for r in case)
            print(
                f"| {workers} | {queued:,} | {len(case)} | {medians[queued]:.0f} | {min(rates):.0f} | "
                f"{max(rates):.0f} | {cpu:.2f} | {slowdown:.2f}x |"
            )
        slowdown = medians[args.small] / medians[args.large]
        verdicts.append(f"{workers} worker(s): {slowdown:.2f}x {'PASS' if slowdown <= TARGET else 'FAIL'}")
    target = f"rate at {args.large:,} queued within {TARGET}x of the rate at {args.small:,}"
    print(f"\nTarget: {target}: " + "; ".join(verdicts))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=10_000, help="queued items of the short queue (default 10000)")
    parser.add_argument("--large", type=int, default=1_000_000, help="queued items of the long queue (default 1000000)")
    parser.add_argument("--items", type=int, default=5_000, help="items processed per timed run (default 5000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (default 5)")
    parser.add_argument("--workers", default="1,2", help="worker counts, comma-separated (default 1,2)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and one run: only checks that it works")
    args = parser.parse_args()
    if args.smoke:
        args.small, args.large, args.items, args.repeat = 300, 3_000, 60, 1
    args.workers = [int(w) for w in args.workers.split(",")]
    if not 0 < args.items < args.small:
        parser.error("--items must be positive and less than --small")
    return args


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="queue-scale-") as tmp:
        base = Path(tmp)
        root = base / "src"
        digest = make_sources(root, -(-args.items // 3))
        ledgers = {}
        for queued in (args.small, args.large):
            db = base / f"q{queued}" / "ledger.db"
            db.parent.mkdir()
            build_ledger(db, queued - args.items, root, digest)
            ledgers[queued] = db
        runs = []
        for _ in range(args.repeat):
            for workers in args.workers:
                for queued, db in ledgers.items():
                    run = len(runs)
                    runs.append(timed_run(db, queued, workers, args, run, root, digest))
                    rate = runs[-1].rate
                    print(f"run {run}: {workers} worker(s), {queued:,} queued: {rate:.0f} items/s", file=sys.stderr)
        report(runs, args)


if __name__ == "__main__":
    main()
