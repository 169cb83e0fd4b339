"""Benchmark: what watchfiles gives `thumbctl watch` over polling, on a large idle folder.

A folder of ``--files`` photo names (empty files: only the scan is measured, nothing is rendered)
in 100 sub-folders. For each way of waking up, the waiter of :mod:`thumbctl.engine.watch` runs in this
process:

- idle CPU: the CPU time (user + system, every thread) of ``--idle`` seconds of waiting with
  nothing changing, as a percentage of one core. Polling scans the whole folder every second
  (the default ``--poll-interval``); watchfiles waits on inotify and scans nothing.
- latency: from a file written (by another thread) to the waiter's return, median of
  ``--changes`` changes made at random moments.

Run from the repository root::

    python bench/watch.py [--files 20000] [--idle 10] [--changes 9] [--smoke]

``--smoke`` uses a small folder and short waits: a check that the benchmark works, not a measurement.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from thumbctl.config.options import SubmitOptions
from thumbctl.engine.watch import EventWaiter, FolderScan, PollWaiter


def make_folder(root: Path, files: int) -> None:
    for n in range(files):
        folder = root / f"d{n % 100:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"p{n}.jpg").touch()


def idle_cpu(wait: Callable[[], None], seconds: float) -> float:
    """Percent of one core used while waiting ``seconds`` with nothing changing (scans included for polling)."""
    start, cpu = time.monotonic(), time.process_time()
    while time.monotonic() - start < seconds:
        wait()
    return 100 * (time.process_time() - cpu) / (time.monotonic() - start)


def latency(wait: Callable[[], None], scan: FolderScan, root: Path, changes: int, tag: str) -> float:
    """Median seconds from a file written to the scan after a wake-up that sees it."""
    found = []
    for n in range(changes):
        written: list[float] = []

        def write(n: int = n, written: list[float] = written) -> None:
            time.sleep(random.uniform(0.05, 0.6))
            (root / "d00" / f"{tag}{n}.jpg").write_bytes(b"x")
            written.append(time.monotonic())

        writer = threading.Thread(target=write)
        writer.start()
        while f"d00/{tag}{n}.jpg" not in scan():
            wait()
        found.append(time.monotonic() - written[0])
        writer.join()
    return statistics.median(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--changes", type=int, default=9)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.files, args.idle, args.changes = 300, 1.0, 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_folder(root, args.files)
        scan = FolderScan(root, SubmitOptions(out_dir=root.parent / "out"), frozenset())
        started = time.perf_counter()
        scanned = len(scan())
        scan_s = time.perf_counter() - started

        poll = PollWaiter(1.0, lambda: False)

        def poll_idle() -> None:  # what the watcher does when polling: wait, then scan
            poll.wait(None)
            scan()

        events = EventWaiter(root, scan.ignored, lambda: False)
        rows = [
            (
                "polling every 1s",
                idle_cpu(poll_idle, args.idle),
                latency(lambda: poll.wait(None), scan, root, args.changes, "poll"),
            ),
            (
                "watchfiles",
                idle_cpu(lambda: events.wait(1.0), args.idle),
                latency(lambda: events.wait(None), scan, root, args.changes, "event"),
            ),
        ]
    print(f"{scanned} files in 100 folders; one scan {scan_s * 1000:.0f} ms")
    print("| wake-up | idle CPU, % of a core | median latency s |")
    print("|---|---|---|")
    for name, cpu, lag in rows:
        print(f"| {name} | {cpu:.1f} | {lag:.2f} |")


if __name__ == "__main__":
    main()
