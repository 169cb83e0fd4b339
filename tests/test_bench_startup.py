"""The start-up benchmark runs (its smoke case: each command once); it is never a timed test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_startup_benchmark_smoke_prints_its_table() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "startup.py"), "--smoke"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "`floor`",
        "`--version`",
        "`status B`",
        "`events B`",
        "`submit 1 photo -w 1`",
    ]
    assert rows[-1].rstrip(" |").endswith("0/1")  # no process left in the submit's group
