"""The damage sweep runs (its smoke case): damaged values, real processes, no traceback."""

from __future__ import annotations

import os

from pg import PG_ENV
from support import run_bench


def test_the_damage_sweep_smoke_case_runs_and_counts_no_traceback() -> None:
    pg = os.environ.get(PG_ENV)
    done = run_bench("damage.py", "--smoke", *(["--pg", pg] if pg else []), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| runs | damaged values | tracebacks | exit codes |" in done.stdout
    assert "| 8 | 4 | 0 |" in done.stdout  # SQLite: 1 column x 4 damages x 2 commands
    if pg:
        assert "## PostgreSQL" in done.stdout and "| 6 | 3 | 0 |" in done.stdout
