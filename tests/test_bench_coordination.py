"""The coordination benchmark runs (its smoke case, on the test server): never timed here, only that
it works and that its workers finish every item on both backends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO
from pg import SKIP_REASON


def test_the_coordination_benchmark_smoke_case_prints_every_case_and_its_round_trips(
    pg_admin_url: str | None,
) -> None:
    if pg_admin_url is None:
        pytest.skip(SKIP_REASON)
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "coordination.py"), "--smoke", "--pg", pg_admin_url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for row in (
        "| PostgreSQL, one host | 2 | 1 | ",
        "| PostgreSQL, two hosts | 2 x 1 | 1 | ",
        "| SQLite, one host | 2 | 1 | ",
    ):
        assert row in done.stdout
    for operation in ("| claim | ", "| publish | ", "| all | "):
        assert operation in done.stdout
    assert "- PostgreSQL, two hosts: sessions waiting on a lock in " in done.stdout
    assert "- SQLite, one host: " in done.stdout and " write transactions per item" in done.stdout
