"""Benchmark: fixed start-up cost of the CLI, side by side with the floor of its toolkit.

Cases, each a fresh interpreter run as a subprocess, as a user runs them::

    python -c "import typer, rich.console, rich.table, sqlite3"      # the floor: toolkit imports only
    python -m thumbctl --version
    python -m thumbctl status BATCH --db LEDGER
    python -m thumbctl events BATCH --db LEDGER
    python -m thumbctl submit ONE_TINY_PHOTO --out OUT --db LEDGER --workers 1 -q   # fresh ledger and OUT each run

``--before DIR`` names a checkout of an earlier thumbctl (e.g. ``git worktree add /tmp/before main``):
every thumbctl case then runs against both trees, alternated run by run (floor, before, after,
floor, ...), so machine noise falls on both alike. The figures are medians of ``--runs`` runs:
wall time, and the CPU time (user + system) of the command and the processes it waited for.
After each submit the processes left in its process group are counted (the submit runs as the
leader of a group of its own), since no process may outlive the command.

Byte-code caching is on (``PYTHONDONTWRITEBYTECODE`` is dropped for the runs) and one untimed
run of each case writes the caches first, as an installed package has them.

Run from the repository root with the interpreter that has thumbctl's dependencies::

    python bench/startup.py [--before DIR] [--runs 7] [--smoke]

``--smoke`` runs each case once, this tree only: a check that the benchmark works, not a measurement.
"""

from __future__ import annotations

import argparse
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
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parent.parent
FLOOR = 'python -c "import typer, rich.console, rich.table, sqlite3"'


@dataclass
class Case:
    """One command line; ``{db}``, ``{batch}``, ``{photo}`` and ``{fresh}`` are filled in per run."""

    name: str
    argv: list[str]
    thumbctl: bool = True


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    left: list[int] = field(default_factory=list)

    def median_ms(self, values: list[float]) -> float:
        return statistics.median(values) * 1000 if values else float("nan")


CASES = [
    Case("floor", [sys.executable, "-c", "import typer, rich.console, rich.table, sqlite3"], thumbctl=False),
    Case("--version", ["--version"]),
    Case("status B", ["status", "{batch}", "--db", "{db}"]),
    Case("events B", ["events", "{batch}", "--db", "{db}"]),
    Case("submit 1 photo -w 1", ["submit", "{photo}", "--out", "{fresh}/out", "--db", "{fresh}/l.db", "-w", "1", "-q"]),
]


def environment(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("THUMBCTL_")}
    env["PYTHONPATH"] = str(tree)
    env["XDG_CONFIG_HOME"] = str(Path(tempfile.gettempdir()) / "thumbctl-bench-startup-config")
    return env


def command(case: Case, fill: dict[str, str]) -> list[str]:
    argv = [part.format(**fill) for part in case.argv]
    return argv if not case.thumbctl else [sys.executable, "-m", "thumbctl", *argv]


def group_members(pgid: int) -> int:
    """Live processes whose process group is ``pgid``."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            count += int(fields[2]) == pgid and fields[0] != "Z"
    return count


def run_once(argv: list[str], env: dict[str, str], cwd: Path, samples: Samples | None) -> None:
    """Run ``argv`` in ``cwd`` (not the repository: ``python -m`` puts the working folder first
    on ``sys.path``, ahead of the tree ``PYTHONPATH`` names). Its stderr goes to a file, not a
    pipe: a process it leaves behind holding the pipe would stretch the timing to that one's exit.
    The wait blocks in ``waitpid`` (``Popen.wait`` with a timeout polls, in steps of up to 50 ms,
    which would round every figure up to the next step); a timer kills a run that hangs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, process_group=0)
        hung = threading.Timer(300, proc.kill)
        hung.start()
        proc.wait()
        hung.cancel()
        wall = time.perf_counter() - started
        stderr.seek(0)
        err = stderr.read()
    left = group_members(proc.pid)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} exited {proc.returncode}: {err.decode(errors='replace')}")
    if samples is not None:
        samples.wall.append(wall)
        samples.cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        samples.left.append(left)


def prepare(work: Path) -> dict[str, str]:
    """One tiny photo, and a ledger holding one finished batch of it (for status and events)."""
    photo = work / "one"
    photo.mkdir()
    Image.new("RGB", (64, 48), (120, 30, 200)).save(photo / "tiny.jpg", quality=90)
    db = work / "ledger.db"
    argv = [sys.executable, "-m", "thumbctl", "submit", str(photo), "--out", str(work / "out"), "--db", str(db)]
    done = subprocess.run(
        [*argv, "-w", "1", "--json"], env=environment(REPO), cwd=work, capture_output=True, check=True
    )
    return {"db": str(db), "batch": json.loads(done.stdout)["batch_id"], "photo": str(photo)}


def measure(trees: dict[str, Path], runs: int, work: Path, fill: dict[str, str]) -> dict[tuple[str, str], Samples]:
    results: dict[tuple[str, str], Samples] = {}
    plan = [(case, label) for case in CASES for label in (trees if case.thumbctl else ["-"])]
    for index in range(runs + 1):  # run 0 writes the byte-code caches and is not counted
        for case, label in plan:
            fresh = work / f"fresh-{index}-{label}-{case.name.split()[0].strip('-')}"
            fresh.mkdir()
            env = environment(trees.get(label, REPO))
            samples = results.setdefault((case.name, label), Samples()) if index else None
            run_once(command(case, {**fill, "fresh": str(fresh)}), env, work, samples)
    return results


def table(results: dict[tuple[str, str], Samples], trees: dict[str, Path], runs: int) -> list[str]:
    floor = results[("floor", "-")]
    floor_wall, floor_cpu = floor.median_ms(floor.wall), floor.median_ms(floor.cpu)
    lines = [
        "| case | tree | wall median ms | CPU median ms | wall / floor | CPU / floor | after / before (wall) "
        "| runs leaving a process |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in CASES:
        for label in trees if case.thumbctl else ["-"]:
            s = results[(case.name, label)]
            wall = s.median_ms(s.wall)
            versus = ""
            if label == "after" and "before" in trees:
                old = results[(case.name, "before")]
                versus = f"{wall / old.median_ms(old.wall):.2f}x"
            left = f"{sum(1 for n in s.left if n)}/{runs}" if case.name.startswith("submit") else ""
            cpu = s.median_ms(s.cpu)
            lines.append(
                f"| `{case.name}` | {label} | {wall:.0f} | {cpu:.0f} | {wall / floor_wall:.2f} | {cpu / floor_cpu:.2f} "
                f"| {versus} | {left} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="an earlier checkout of thumbctl to compare with")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="each case once, this tree only")
    args = parser.parse_args()
    runs = 1 if args.smoke else max(5, args.runs)
    trees = {"after": REPO} if args.smoke or not args.before else {"before": args.before.resolve(), "after": REPO}
    with tempfile.TemporaryDirectory(prefix="thumbctl-bench-startup-") as tmp:
        work = Path(tmp)
        fill = prepare(work)
        results = measure(trees, runs, work, fill)
    print(f"## Start-up ({'smoke' if args.smoke else f'median of {runs} runs, alternated'})\n")
    print(f"- command: `python bench/startup.py {' '.join(sys.argv[1:])}`")
    print(f"- floor: `{FLOOR}`")
    print(
        f"- machine: nproc {os.cpu_count()}, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.system()} {platform.release()}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    for label, tree in trees.items():
        print(f"- {label}: {tree}")
    print()
    print("\n".join(table(results, trees, runs)))


if __name__ == "__main__":
    main()
