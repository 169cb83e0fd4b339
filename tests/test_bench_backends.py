"""The backends benchmark runs (its smoke case, on the test server): never timed here, only that it works."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO
from pg import SKIP_REASON


def bench_databases(admin_url: str) -> set[str]:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'thumbctl_bench_%'").fetchall()
    return {name for (name,) in rows}


def test_the_backends_benchmark_smoke_case_runs_prints_its_tables_and_drops_its_databases(
    pg_admin_url: str | None,
) -> None:
    if pg_admin_url is None:
        pytest.skip(SKIP_REASON)
    before = bench_databases(pg_admin_url)
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "backends.py"), "--smoke", "--pg", pg_admin_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for label in ("SQLite", "PostgreSQL", "PostgreSQL, events lock skipped"):
        for workers in (1, 2):
            for queued in (120, 240):
                assert f"| {label} | {workers} | {queued} | " in done.stdout
    for backend in ("sqlite", "postgresql"):
        assert f"| accept_batch of 300 items | {backend} | " in done.stdout
        assert f"| `status BATCH --json`, 230 items | {backend} | " in done.stdout
    assert "- PostgreSQL, 120 queued: 2 workers / 1 = " in done.stdout
    assert "- events lock, 2 worker(s), 240 queued: " in done.stdout
    assert "| PostgreSQL sessions: share of samples |" in done.stdout
    assert bench_databases(pg_admin_url) <= before
