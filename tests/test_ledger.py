"""What is specific to the SQLite ledger file: its schema version and WAL mode, refusals of a file
that is not a ledger, and a read left early not holding back a WAL checkpoint. The behaviour both
backends share is in tests/test_ledger_contract.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl import Ledger, Limits
from thumbctl.core.errors import LedgerError
from thumbctl.core.models import ITEM_STATES, batch_state
from thumbctl.ledger.schema import SCHEMA_VERSION

from support import new_batch, own_sqlite_connection

# -- schema ---------------------------------------------------------------------


def test_a_new_ledger_is_migrated_and_in_wal_mode(tmp_path: Path) -> None:
    Ledger(tmp_path / "l.db").close()
    with sqlite3.connect(tmp_path / "l.db") as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"batches", "items", "events", "stat_cache"} <= tables
    assert {"items_runnable", "idx_items_batch_id_state"} <= indexes


def test_a_ledger_from_a_newer_thumbctl_is_refused(tmp_path: Path) -> None:
    Ledger(tmp_path / "l.db").close()
    with sqlite3.connect(tmp_path / "l.db") as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerError, match="upgrade thumbctl"):
        Ledger(tmp_path / "l.db")


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "l.db").write_text("this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="cannot use"):
        Ledger(tmp_path / "l.db")


# -- streamed listings ------------------------------------------------------------------


def test_a_streamed_listing_left_early_lets_the_wal_be_checkpointed(ledger: Ledger) -> None:
    batch_id = ledger.intake.accept_batch(new_batch("k", "d1", queued=1200), Limits()).batch_id
    with ledger.views.streamed_events(batch_id) as events:
        next(events)
    with Ledger(ledger.path) as other:
        other.intake.request_cancel(batch_id)
        own_sqlite_connection(other).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ledger.intake.request_cancel(batch_id)  # a write on this connection: no read transaction is left open
    assert ledger.views.batch(batch_id).state == "cancelled"


# -- batch state projection -----------------------------------------------------------


@given(st.dictionaries(st.sampled_from(ITEM_STATES), st.integers(0, 5)), st.booleans())
def test_batch_state_is_terminal_exactly_when_no_item_is_live(partial: dict[str, int], cancel: bool) -> None:
    counts = {s: partial.get(s, 0) for s in ITEM_STATES}
    total = sum(counts.values())
    if total == 0:
        return
    state = batch_state(counts, total, cancel)
    live = counts["queued"] + counts["running"]
    assert (state in {"succeeded", "partial", "failed", "cancelled"}) == (live == 0)
    if cancel:
        assert state in {"cancel_requested", "cancelled"}
    elif live == 0:
        expected = "succeeded" if counts["succeeded"] == total else "failed" if counts["failed"] == total else "partial"
        assert state == expected
