"""What only the PostgreSQL backend has: migrations shared by racing processes, URL masking."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from thumbctl.core.errors import UsageError
from thumbctl.ledger import Ledger, is_server_url, masked
from thumbctl.ledger.pgschema import SCHEMA_VERSION

from support import raw_rows


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@db.example/thumbs", "postgresql://u:***@db.example/thumbs"),
        ("postgres://u:p%40ss@db:5433/t?sslmode=require", "postgres://u:***@db:5433/t?sslmode=require"),
        ("postgresql://u@db/t", "postgresql://u@db/t"),
        ("postgresql:///t?host=/run/postgresql", "postgresql:///t?host=/run/postgresql"),
    ],
)
def test_a_url_is_shown_with_its_password_masked(url: str, shown: str) -> None:
    assert masked(url) == shown


@pytest.mark.parametrize(
    ("target", "server"),
    [("postgresql://h/d", True), ("postgres://h/d", True), ("ledger.db", False), ("/x/postgresql://", False)],
)
def test_only_a_postgresql_url_selects_the_server_backend(target: str, server: bool) -> None:
    assert is_server_url(target) is server


def test_processes_opening_a_new_database_at_once_migrate_it_once(pg_url: str) -> None:
    """Four processes open a fresh database at the same moment; the advisory lock lets one migrate."""
    script = (
        "import sys; from thumbctl.ledger import Ledger\n"
        "with Ledger(sys.argv[1]) as ledger: print(ledger.views.batches(1))\n"
    )
    runs = [subprocess.Popen([sys.executable, "-c", script, pg_url], stderr=subprocess.PIPE) for _ in range(4)]
    errors = [run.communicate(timeout=60)[1].decode() for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0, 0], errors
    with Ledger(pg_url) as ledger:
        versions = raw_rows(ledger, "SELECT version FROM thumbctl_schema")
    assert [version for (version,) in versions] == [SCHEMA_VERSION]


def test_threads_opening_a_new_database_at_once_all_see_one_schema(pg_url: str) -> None:
    failures: list[BaseException] = []

    def open_it() -> None:
        try:
            with Ledger(pg_url) as ledger:
                ledger.views.batches(1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []


def test_a_ledger_opened_on_a_server_reports_its_backend_and_masked_name(pg_url: str) -> None:
    with_password = pg_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2-pw@")
    with Ledger(with_password) as ledger:
        assert ledger.backend == "postgresql"
        assert "hunter2-pw" not in ledger.path and ":***@" in ledger.path


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw-9x@db.invalid/t?bogus=1",
        "postgresql://u:pw-9x@db.invalid:99999/t",
        "postgresql://u:pw-9x@db.invalid:abc/t",
        "postgresql://u:pw-9x@db.invalid:" + "1" * 5000 + "/t",
        "postgresql://u:pw-9x@[::1/t",
    ],
)
def test_a_malformed_url_is_a_usage_error_not_an_outage(url: str) -> None:
    """Exit 2, not 75: cron retrying a URL that can never work would only hide the mistake."""
    pytest.importorskip("psycopg")
    with pytest.raises(UsageError) as caught:
        Ledger(url)
    assert caught.value.code == "bad_ledger_url" and caught.value.exit_code == 2
    assert "pw-9x" not in str(caught.value)


def test_a_transaction_chosen_as_a_deadlock_victim_is_run_again(pg_url: str) -> None:
    """Another session holds the batch row, the publish waits on it while holding its item, then the
    other session asks for that item: PostgreSQL breaks the deadlock by rolling one back. The
    publish chosen as the victim is run again (it waited longest, so its check fires first), and
    the item ends published once."""
    import psycopg

    from thumbctl.core.profile import Limits

    from support import request

    with Ledger(pg_url) as ledger:
        batch = ledger.intake.accept_batch(request("k", sources=1, ratios=("1:1",)), Limits())
        claim = ledger.queue.claim("host~x:1:1")
        assert claim is not None
        item = claim.items[0]
        other = psycopg.connect(pg_url, autocommit=False)
        other.execute("UPDATE batches SET total = total WHERE batch_id = %s", (batch.batch_id,))
        published: list[str] = []
        worker = threading.Thread(target=lambda: published.append(ledger.queue.publish(claim, item, lambda: None)))
        worker.start()
        _wait_for_lock_wait(other, pg_url)
        try:
            other.execute("SELECT 1 FROM items WHERE id = %s FOR UPDATE", (item.row,))
        finally:
            other.commit()  # the survivor commits; the retried publish then goes through
            other.close()
        worker.join(30)
        assert published == ["succeeded"]
        assert [e.to_state for e in ledger.views.events(batch.batch_id)] == ["queued", "running", "succeeded"]


def _wait_for_lock_wait(other: object, url: str) -> None:
    import time

    import psycopg

    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(200):
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.05)
    raise AssertionError("the publish never waited on the batch row")


@pytest.mark.parametrize(
    ("code", "exit_code", "advice"),
    [("ledger_full", 75, "out of disk space"), ("ledger_corrupt", 74, "restore the database")],
)
def test_a_server_fault_gives_server_advice_not_sqlite_advice(
    pg_url: str, code: str, exit_code: int, advice: str
) -> None:
    with Ledger(pg_url) as ledger:
        fault = ledger.fault(code, "reported by the server")
    assert (fault.code, int(fault.exit_code)) == (code, exit_code)
    assert advice in str(fault) and "sqlite3" not in str(fault) and "reported by the server" in str(fault)
