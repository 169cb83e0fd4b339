"""The listings benchmark runs (its smoke case): never timed here, only that it works."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_the_lists_benchmark_smoke_case_runs_and_prints_its_table() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "lists.py"), "--smoke"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "| code | command | items | rows | runs | median s |" in done.stdout
    for command in ("events --json", "status --items --json", "events (human, piped)", "status --items (human, piped)"):
        assert f"| after | `{command}` | 600 | " in done.stdout
        assert f"- `{command}`: peak RSS" in done.stdout
