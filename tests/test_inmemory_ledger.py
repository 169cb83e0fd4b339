"""thumbctl.testing.InMemoryLedger: a ledger in memory, shared by name, gone with its last
connection; a ``--db`` text still names a file. The ledger contract runs on it as ``[memory]``
(tests/test_ledger_contract.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from thumbctl import Ledger, Limits
from thumbctl.core.errors import LedgerBusy
from thumbctl.core.retries import BusyPolicy
from thumbctl.testing import InMemoryLedger

from support import request


def test_it_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with InMemoryLedger("shop") as ledger:
        ledger.intake.accept_batch(request(), Limits())
        ledger.queue.claim("w1")
        assert ledger.path == "memory:shop" and ledger.backend == "sqlite"
    assert os.listdir(tmp_path) == []


def test_one_name_is_one_ledger_until_its_last_connection_closes() -> None:
    with InMemoryLedger("a") as first, InMemoryLedger("b") as other:
        batch_id = first.intake.accept_batch(request(), Limits()).batch_id
        with InMemoryLedger("a") as second:
            assert second.views.batch(batch_id).total == 4
        assert other.views.batches() == []
    with InMemoryLedger("a") as again:
        assert again.views.batches() == []


def test_a_fresh_name_each_time_none_is_given() -> None:
    with InMemoryLedger() as first, InMemoryLedger() as second:
        first.intake.accept_batch(request(), Limits())
        assert first.name != second.name and second.views.batches() == []


def test_a_db_text_naming_memory_is_still_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Ledger("memory:shop"):
        pass
    assert (tmp_path / "memory:shop").is_file()


def test_a_held_write_lock_is_ledger_busy_once_the_busy_policy_gives_up() -> None:
    """A second connection's write waits the busy policy out, then fails as a file ledger's does."""
    quick = BusyPolicy(timeout=0.05, bound=0.2)
    with InMemoryLedger("busy") as holder, InMemoryLedger("busy", busy=quick) as waiter:
        holding, done = threading.Event(), threading.Event()

        def hold() -> None:
            with holder._db.write():
                holding.set()
                done.wait(30)

        thread = threading.Thread(target=hold)
        thread.start()
        try:
            assert holding.wait(30)
            with pytest.raises(LedgerBusy):
                waiter.intake.accept_batch(request(), Limits())
        finally:
            done.set()
            thread.join(30)
        assert waiter.intake.accept_batch(request(), Limits()).total == 4
