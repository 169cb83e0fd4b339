"""The PostgreSQL test fixtures: fresh databases, server control, and skip-only-when-unset."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pg import PG_ENV, SKIP_REASON, PgServer

if os.environ.get(PG_ENV):
    import psycopg  # with a server given, a missing driver is an error, not a skip
else:
    psycopg = pytest.importorskip("psycopg")

#: pytest's own fixture ``pytester``: a pytest session run in this process.
pytest_plugins = ["pytester"]

SEEN_DATABASES: list[str] = []


def database_names(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_gets_a_fresh_writable_database_of_its_own(pg_url: str, turn: int) -> None:
    with psycopg.connect(pg_url) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
        assert tables.fetchone()[0] == 0
        conn.execute("CREATE TABLE marker (turn integer)")
        conn.execute("INSERT INTO marker VALUES (%s)", (turn,))
        assert conn.execute("SELECT turn FROM marker").fetchall() == [(turn,)]
    assert name == urlsplit(pg_url).path.lstrip("/") and name not in SEEN_DATABASES
    assert not set(SEEN_DATABASES) & database_names(pg_url), "an earlier test's database was not dropped"
    SEEN_DATABASES.append(name)


def test_the_url_keeps_the_server_query(pg_url: str) -> None:
    assert urlsplit(pg_url).query == urlsplit(os.environ[PG_ENV]).query


def test_ledger_url_is_a_fresh_sqlite_path_or_postgresql_database(ledger_url: str, tmp_path: Path) -> None:
    if ledger_url.startswith("postgresql://"):
        with psycopg.connect(ledger_url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    else:
        assert ledger_url == str(tmp_path / "ledger.db") and not Path(ledger_url).exists()


def test_a_restart_breaks_open_connections_and_new_ones_succeed(pg_server: PgServer) -> None:
    conn = psycopg.connect(pg_server.url, autocommit=True)
    assert conn.execute("SELECT 1").fetchone() == (1,)
    pg_server.restart()
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    conn.close()
    with psycopg.connect(pg_server.url) as again:
        assert again.execute("SELECT 1").fetchone() == (1,)


def test_a_stopped_server_refuses_until_started(pg_server: PgServer) -> None:
    pg_server.stop()
    assert not pg_server.is_running()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_server.url, connect_timeout=5)
    pg_server.start()
    with psycopg.connect(pg_server.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def run_fresh_database_test(pytester: pytest.Pytester) -> str:
    """The outcome lines of a pytest session (in this process) running the fresh-database test
    under the environment the test has set."""
    node = f"{Path(__file__)}::test_the_url_keeps_the_server_query"
    done = pytester.runpytest_inprocess(node, "-rs", "-p", "no:cacheprovider", "-n", "0")  # one test: no workers
    return done.stdout.str()


def test_postgresql_tests_skip_only_when_the_server_is_unset(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PG_ENV, raising=False)
    out = run_fresh_database_test(pytester)
    assert "1 skipped" in out and SKIP_REASON in out


def test_an_unreachable_server_is_an_error_not_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(PG_ENV, f"postgresql://postgres@/postgres?host={tmp_path}&port=1")
    out = run_fresh_database_test(pytester)
    assert "1 error" in out and "skipped" not in out
