"""The watch benchmark runs (its smoke case): never timed here, only that it works."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_the_watch_benchmark_smoke_case_runs_and_prints_its_table() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "watch.py"), "--smoke"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "| wake-up | idle CPU, % of a core | median latency s |" in done.stdout
    assert "| polling every 1s | " in done.stdout and "| watchfiles | " in done.stdout
