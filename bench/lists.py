"""Benchmark: the long listings (``events B``, ``status B --items``) at 100k and 1M items.

A ledger holding one batch of N items is built through the Ledger API (``accept_batch``
with ``NewBatch``/``NewItem``, no image files), then the whole batch is cancelled, so
the transition log holds two events per item (``∅ → queued`` at acceptance,
``queued → cancelled``) plus the batch's cancel request. Building is not timed.

Each timed run is the real CLI as a subprocess, as a user would run it:

* ``python -m thumbctl events B --json > /dev/null``
* ``python -m thumbctl status B --items --json > /dev/null``
* ``python -m thumbctl events B 2>&1 | (reader)`` and ``status B --items 2>&1 | (reader)``:
  the human forms into a pipe this script drains (both streams: the code before this
  change wrote these tables to stderr)

measuring wall time and the child's peak RSS (``ru_maxrss`` from ``os.wait4`` of that
child alone; the ledger is built in another process, because a child's ``ru_maxrss`` starts
from this process's size at the fork). Runs are interleaved over the cases and the median of ``--repeat`` runs is
shown. Each command also runs on a 1-item batch (start-up alone); the time per million
listed rows over that floor, at the largest size against the smallest, shows whether time
stays linear in the size.

``--before-rev REV`` also runs the same cases with the ``thumbctl`` package of git
revision REV (extracted with ``git archive`` into a temporary folder, put first on
PYTHONPATH), side by side in the same run: e.g. the commit before streaming lists.
The before code builds the whole list in memory, so it only runs up to ``--before-max``
items (default 100,000; at 1M its human tables take GBs and minutes).
``--smoke`` runs two tiny sizes once each (for CI). Run it from the repository root::

    python bench/lists.py [--sizes 100000,1000000] [--repeat 5] [--before-rev REV] [--before-max N] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from resubmit import machine  # noqa: E402

from thumbctl import Ledger, Limits  # noqa: E402
from thumbctl.core.models import NewBatch, NewItem  # noqa: E402

TARGET_RSS_MB = 100.0
RATIOS = ("1:1", "4:3", "16:9")
COMMANDS = {
    "events --json": (["events", "{batch}", "--json"], False),
    "status --items --json": (["status", "{batch}", "--items", "--json"], False),
    "events (human, piped)": (["events", "{batch}"], True),
    "status --items (human, piped)": (["status", "{batch}", "--items"], True),
}


@dataclass
class Case:
    code: str
    command: str
    size: int
    times: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def peak_rss(self) -> float:
        return max(self.rss_mb)


def new_items(count: int) -> tuple[NewItem, ...]:
    """``count`` queued items: sources under 100 folders, three ratios each."""
    return tuple(
        NewItem(
            f"d{(i // 3) % 100:02d}/photo{i // 3:07d}.jpg",
            RATIOS[i % 3],
            f"/photos/d{(i // 3) % 100:02d}/photo{i // 3:07d}.jpg",
            "queued",
            source_digest=f"{i // 3:064x}",
            source_format="jpeg",
            source_width=4000,
            source_height=3000,
            derivative_key=f"{i:040x}",
            object_path=f"/out/objects/{i:040x}.jpg",
            friendly_path=f"/out/d{(i // 3) % 100:02d}/photo{i // 3:07d}.{RATIOS[i % 3].replace(':', 'x')}.jpg",
        )
        for i in range(count)
    )


def build_ledger(path: Path, count: int) -> str:
    """A ledger with one batch of ``count`` items, cancelled: 2 * count + 1 events. Returns its id."""
    limits = Limits(max_items=count, max_runnable=count)
    request = NewBatch(f"bench-{count}", f"digest-{count}", "/photos", "/out", {"size": 512}, new_items(count))
    with Ledger(path) as ledger:
        batch_id = ledger.intake.accept_batch(request, limits).batch_id
        ledger.intake.request_cancel(batch_id)
        ledger._db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return batch_id


def extract_revision(rev: str, into: Path) -> Path:
    """The ``thumbctl`` package of git revision ``rev``, extracted under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "thumbctl"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def run_once(args: list[str], pythonpath: Path, piped: bool, cwd: Path) -> tuple[float, float]:
    """Run ``python -m thumbctl ARGS``; return wall seconds and the child's peak RSS in MB.

    ``piped``: stdout and stderr both go into one pipe this process drains (``2>&1 | reader``:
    before the listings moved to stdout, the human forms were written to stderr); else
    stdout goes to /dev/null."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUMBCTL_")}
    env.update(PYTHONPATH=str(pythonpath), NO_COLOR="1")
    started = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(
            [sys.executable, "-m", "thumbctl", *args],
            stdout=subprocess.PIPE if piped else devnull,
            stderr=subprocess.STDOUT if piped else subprocess.PIPE,
            env=env,
            cwd=cwd,  # not the repository: `python -m` puts the working folder first on sys.path
        )
        stream = proc.stdout if piped else proc.stderr
        assert stream is not None
        tail = b""
        while chunk := stream.read(1 << 16):
            tail = (tail + chunk)[-4096:]
        _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"FAILED (exit {proc.returncode}): thumbctl {shlex.join(args)}\n{tail.decode(errors='replace')}")
    return elapsed, usage.ru_maxrss / 1024


def run_benchmark(args: argparse.Namespace, codes: dict[str, Path], work: Path) -> list[Case]:
    """Every command at every size (plus a 1-item floor: start-up alone), runs interleaved over
    the cases; the ``before`` code only up to ``--before-max`` items (it holds the whole list)."""
    cases: list[Case] = []
    for size in [1, *args.sizes]:
        db = work / f"ledger-{size}.db"
        started = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(1) as pool:  # the build's memory stays out of this process
            batch_id = pool.apply(build_ledger, (db, size))
        print(f"built {size:,} items in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        here = [code for code in codes if code == "after" or size <= args.before_max]
        round_cases = [Case(code, name, size) for name in COMMANDS for code in here]
        for _ in range(args.repeat):
            for case in round_cases:
                template, piped = COMMANDS[case.command]
                command = [a.format(batch=batch_id) for a in template] + ["--db", str(db)]
                elapsed, rss = run_once(command, codes[case.code], piped, work)
                case.times.append(elapsed)
                case.rss_mb.append(rss)
        cases.extend(round_cases)
        db.unlink()
    return cases


def rows_listed(case: Case) -> int:
    """Rows the command lists: an event per item twice plus the cancel request, or an item each."""
    return 2 * case.size + 1 if case.command.startswith("events") else case.size


def per_million_rows(case: Case, cases: list[Case]) -> float:
    """Seconds per million rows listed, over the start-up floor (the same command and code on a 1-item batch)."""
    floor = next(c for c in cases if (c.code, c.command, c.size) == (case.code, case.command, 1))
    return (case.median - floor.median) / rows_listed(case) * 1e6


def markdown_table(cases: list[Case]) -> str:
    lines = [
        "| code | command | items | rows | runs | median s | s per 1M rows over start-up | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        rate = "(start-up)" if case.size == 1 else f"{per_million_rows(case, cases):.2f}"
        lines.append(
            f"| {case.code} | `{case.command}` | {case.size:,} | {rows_listed(case):,} | {len(case.times)} | "
            f"{case.median:.2f} | {rate} | {case.peak_rss:.0f} |"
        )
    return "\n".join(lines)


def verdicts(cases: list[Case]) -> list[str]:
    """Per command of the code under test: peak RSS within the target, and the time per row over
    start-up at the largest size within 1.25x of the smallest (linear)."""
    lines = []
    for name in COMMANDS:
        mine = [c for c in cases if c.code == "after" and c.command == name and c.size > 1]
        smallest, largest = min(mine, key=lambda c: c.size), max(mine, key=lambda c: c.size)
        rss = max(c.peak_rss for c in mine)
        linear = per_million_rows(largest, cases) / per_million_rows(smallest, cases)
        ok = rss <= TARGET_RSS_MB and 0 < linear <= 1.25
        lines.append(
            f"- `{name}`: peak RSS {rss:.0f} MB (target <= {TARGET_RSS_MB:.0f}), time per row at "
            f"{largest.size:,} / at {smallest.size:,} items = {linear:.2f}x (target <= 1.25): "
            + ("PASS" if ok else "FAIL")
        )
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="batch sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (default 5)")
    parser.add_argument("--before-rev", metavar="REV", help="also run the thumbctl of this git revision")
    parser.add_argument(
        "--before-max", type=int, default=100_000, help="run the before code only up to this many items (100000)"
    )
    parser.add_argument("--smoke", action="store_true", help="two tiny sizes, one run each (CI)")
    args = parser.parse_args()
    args.sizes = [300, 600] if args.smoke else [int(s) for s in args.sizes.split(",")]
    if args.smoke:
        args.repeat = 1
    if args.repeat < 1 or min(args.sizes) < 1:
        parser.error("--sizes and --repeat must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="thumbctl-bench-") as tmp:
        work = Path(tmp)
        codes = {"after": REPO}
        if args.before_rev:
            before = work / "before"
            before.mkdir()
            codes = {"before": extract_revision(args.before_rev, before), **codes}
        cases = run_benchmark(args, codes, work)
    print(f"Command: `python {shlex.join(sys.argv)}`")
    print(f"Machine: {machine()}; date {datetime.date.today().isoformat()}")
    print("after: this tree" + (f"; before: thumbctl of `{args.before_rev}`" if args.before_rev else "") + "\n")
    print(markdown_table(cases))
    print()
    print("\n".join(verdicts(cases)))


if __name__ == "__main__":
    main()
