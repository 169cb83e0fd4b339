"""Benchmark: CPU of the process that supervises a run and draws its progress, at a million items.

A ledger holds one batch of ``--items`` queued items (accepted through the Ledger API; the
sources are never read). Each case runs, in a process of its own, what the parent of a command
does while a simulated worker moves items through real ledger transitions at a steady
``--rate`` (claim, then publish, or fail with a retry, or fail for good):

* ``submit``: the supervise tick loop of ``submit``/``work BATCH`` (time limit, reaping and
  rescue, ledger checks) with the Rich live view of the batch drawn to a terminal
  (``/dev/null`` made to look like one); the simulated worker is the pool's child process.
* ``work``: the same for ``work`` without a batch (the live view of every batch).
* ``watch``: ``status BATCH --watch`` with the live view, the worker a separate process.

The figure is the observing process's own CPU time (``getrusage(RUSAGE_SELF)``: children are
not counted) per wall second, after its first read of the ledger; that first read (which
counts the item rows once) is reported on its own. With ``--baseline REF`` every case also runs
the thumbctl of git revision REF (exported with ``git archive``) against a ledger it built
itself, alternated run by run with the working tree's; the table shows medians and the ratio.
Run from the repository root::

    python bench/supervisor_cpu.py [--items 1000000] [--seconds 10] [--runs 5] [--rate 300] [--baseline main]

``--smoke`` runs a tiny case once (CI).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = ("submit", "work", "watch")
RATIOS = ("1:1", "4:3", "16:9")


# -- the ledger ---------------------------------------------------------------------------------


def build(db: Path, items: int) -> None:
    """One batch of ``items`` queued items, ``RATIOS`` per source, accepted in one transaction."""
    from thumbctl import Ledger
    from thumbctl.core.models import NewBatch, NewItem
    from thumbctl.core.profile import Limits

    new = tuple(
        NewItem(
            f"img{n // 3}.jpg",
            RATIOS[n % 3],
            f"/src/img{n // 3}.jpg",
            "queued",
            source_digest=f"{n // 3:064d}",
            source_format="jpeg",
            source_width=40,
            source_height=30,
            derivative_key=f"k{n}",
            object_path=f"/out/o{n}",
            friendly_path=f"/out/f{n}",
        )
        for n in range(items)
    )
    limits = Limits(max_items=items, max_runnable=10 * items)
    with Ledger(db) as ledger:
        ledger.intake.accept_batch(NewBatch("bench", "bench", "/src", "/out", {"size": 64}, new), limits)


def move_items(db: str, rate: float, stop_at: float) -> None:
    """Claim and settle items at ``rate`` per second until ``stop_at``: of every 20 claims, one
    fails with a retry (back to the queue after a 2 s backoff), one fails for good, the rest publish."""
    from thumbctl import Ledger
    from thumbctl.core.proc import owner_id, owner_is_dead

    owner = owner_id()
    with Ledger(Path(db)) as ledger:
        n = 0
        started = time.monotonic()
        while time.time() < stop_at:
            claim = ledger.queue.claim(owner, lease_seconds=600, is_dead=owner_is_dead, delay_for=lambda attempt: 2.0)
            if claim is None:
                return
            rows = [item.row for item in claim.items]
            if n % 20 == 1:
                ledger.queue.fail(claim, rows, "source_unreadable", "simulated", lambda attempt: 2.0)
            elif n % 20 == 2:
                ledger.queue.fail(claim, rows, "corrupt_image", "simulated", lambda attempt: 2.0)
            else:
                for item in claim.items:
                    ledger.queue.publish(claim, item, lambda: None)
            n += len(rows)
            time.sleep(max(0.0, started + n / rate - time.monotonic()))


# -- the observing process ----------------------------------------------------------------------


class SimulatedPool:
    """What ``supervise`` asks of a pool, with one child process that moves items instead of
    rendering them, until the case's time is up."""

    def __init__(self, db: str, rate: float, stop_at: float) -> None:
        import multiprocessing

        from thumbctl.engine.worker import WorkerConfig

        self.config = WorkerConfig(db_path=db, batch_id=None, until_idle=False, item_timeout=300.0)
        self.ctx = multiprocessing.get_context("spawn")
        self.args = (db, rate, stop_at)
        self.children: list = []
        self.ledger_faults: list[str] = []
        self.stopping = False
        self.crashes = 0

    def start(self) -> None:
        child = self.ctx.Process(target=move_items, args=self.args)
        child.start()
        self.children.append(child)

    def reap(self) -> list:
        for child in [c for c in self.children if c.exitcode is not None]:
            child.join()
            self.children.remove(child)
        return []

    def child_for(self, owner: str):
        from thumbctl.core.proc import owner_id

        return next((c for c in self.children if owner_id(c.pid) == owner), None)

    def kill_child(self, child) -> None:
        child.kill()
        child.join()
        self.children.remove(child)

    def replace(self, count: int) -> None:
        pass

    def request_stop(self) -> None:
        self.stopping = True

    def kill(self) -> None:
        for child in list(self.children):
            child.kill()
            child.join()
            self.children.remove(child)

    def wait(self, timeout: float) -> None:
        from multiprocessing.connection import wait

        wait([child.sentinel for child in self.children], timeout) if self.children else time.sleep(timeout)

    def close(self) -> None:
        self.kill()

    def finish(self) -> None:
        """Let the child stop on its own at its time (not in a transaction), then make sure."""
        for child in self.children:
            child.join(timeout=10)
        self.kill()

    @property
    def alive(self) -> int:
        return len(self.children)


class Timed:
    """Wraps the run's observer: notes the CPU time and clock once its first read is done."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.first: tuple[float, float] | None = None

    def tick(self, ledger) -> None:
        self.inner.tick(ledger)
        if self.first is None:
            self.first = (cpu_seconds(), time.monotonic())

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def observe(case: str, db: str, seconds: float, rate: float) -> dict[str, float]:
    """Run ``case`` for ``seconds`` and return its CPU figures (see the module docstring)."""
    from rich.console import Console

    from thumbctl import Ledger
    from thumbctl.engine.pool import supervise
    from thumbctl.engine.runner import watch_batch
    from thumbctl.report.progress import RunProgress

    stop_at = time.time() + seconds
    console = Console(file=open(os.devnull, "w"), force_terminal=True, width=120)  # noqa: SIM115
    with Ledger(Path(db)) as ledger:
        batch_id = ledger.views.batches(1)[0].batch_id
        start = (cpu_seconds(), time.monotonic())
        progress = RunProgress(console, batch_id=None if case == "work" else batch_id)
        observer = Timed(progress)
        with progress:
            if case == "watch":
                mover = SimulatedPool(db, rate, stop_at)
                mover.start()
                watch_batch(ledger, batch_id, observer=observer, should_stop=lambda: time.time() >= stop_at)
                end = (cpu_seconds(), time.monotonic())
                mover.finish()
            else:
                pool = SimulatedPool(db, rate, stop_at)
                supervise(  # returns when the child has stopped at its time
                    ledger,
                    pool,  # type: ignore[arg-type]
                    interrupts=lambda: 2 if time.time() >= stop_at + 10 else 0,
                    on_first_interrupt=lambda: None,
                    on_tick=lambda: observer.tick(ledger),
                )
                end = (cpu_seconds(), time.monotonic())
    first = observer.first or end
    return {
        "first_read_cpu": first[0] - start[0],
        "cpu_percent": 100.0 * (end[0] - first[0]) / max(end[1] - first[1], 1e-9),
        "seconds": end[1] - first[1],
    }


# -- the driver ---------------------------------------------------------------------------------


def export_tree(ref: str, into: Path) -> Path:
    """The thumbctl package of git revision ``ref``, exported under ``into``."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "thumbctl"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def run_self(tree: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, *args], env=env, check=True, capture_output=True, text=True)
    return done.stdout


def moved(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM items WHERE state != 'queued'").fetchone()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=float, default=300.0, help="items moved per second by the simulated worker")
    parser.add_argument("--baseline", metavar="REF", help="also run the thumbctl of this git revision")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--smoke", action="store_true", help="a tiny case, once (for CI)")
    parser.add_argument("--build", metavar="DB", help=argparse.SUPPRESS)
    parser.add_argument("--observe", metavar="CASE", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(Path(args.build), args.items)
        return 0
    if args.observe:
        print(json.dumps(observe(args.observe, args.db, args.seconds, args.rate)))
        return 0
    if args.smoke:
        args.items, args.seconds, args.runs, args.cases = 3000, 0.5, 1, "submit,watch"
    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory(prefix="supervisor-cpu-") as tmp:
        trees = {"after": REPO}
        if args.baseline:
            trees = {"before": export_tree(args.baseline, Path(tmp) / "baseline"), **trees}
        dbs = {}
        for name, tree in trees.items():
            dbs[name] = Path(tmp) / f"{name}.db"
            started = time.monotonic()
            run_self(tree, "--build", str(dbs[name]), "--items", str(args.items))
            print(f"built {name} ledger of {args.items} items in {time.monotonic() - started:.0f}s", file=sys.stderr)
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for run in range(args.runs):
            for case in cases:
                for name in list(trees) if run % 2 == 0 else list(reversed(trees)):
                    common = ["--db", str(dbs[name]), "--seconds", str(args.seconds), "--rate", str(args.rate)]
                    figures = json.loads(run_self(trees[name], "--observe", case, *common))
                    results.setdefault((case, name), []).append(figures)
                    print(f"run {run + 1} {case} {name}: {figures}", file=sys.stderr)
        print(report(args, cases, trees, results, {name: moved(db) for name, db in dbs.items()}))
    return 0


def report(args, cases, trees, results, moved_items: dict[str, int]) -> str:
    """The markdown table: medians per case and code, and the ratio when there is a baseline."""
    out = io.StringIO()
    command = "python bench/supervisor_cpu.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    out.write(f"`{command}`  \n")
    out.write(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, nproc {os.cpu_count()}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}; {args.items} items, {args.rate:g} items/s moved, "
        f"{args.seconds:g} s per run, median of {args.runs} runs\n\n"
    )
    names = list(trees)
    head = ["case"] + [f"{n}: CPU % of one core" for n in names] + [f"{n}: first read (s CPU)" for n in names]
    if "before" in trees:
        head.append("before / after")
    out.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for case in cases:
        cpu = {n: statistics.median(r["cpu_percent"] for r in results[(case, n)]) for n in names}
        first = {n: statistics.median(r["first_read_cpu"] for r in results[(case, n)]) for n in names}
        row = [case] + [f"{cpu[n]:.1f}" for n in names] + [f"{first[n]:.2f}" for n in names]
        if "before" in trees:
            row.append(f"{cpu['before'] / max(cpu['after'], 0.01):.0f}x")
        out.write("| " + " | ".join(row) + " |\n")
    out.write("\nItems moved out of the queue over all runs: " + ", ".join(f"{n} {m}" for n, m in moved_items.items()))
    return out.getvalue()


if __name__ == "__main__":
    sys.exit(main())
