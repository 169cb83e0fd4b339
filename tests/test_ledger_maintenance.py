"""The maintenance transitions of the ledger: each one applies only to the row reconcile saw."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlite_utils

from thumbctl import Ledger
from thumbctl.core.faults import Faults
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.ledger import iso
from thumbctl.ledger.schema import MIGRATIONS, SCHEMA_VERSION

from support import accept, check_invariants


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    """A fresh ledger on each backend (``[sqlite]``, ``[postgres]``); the migration of an old file is SQLite's own."""
    with Ledger(ledger_url) as led:
        yield led
        check_invariants(led)


def publish_all(ledger: Ledger) -> None:
    """Render every queued item for real."""
    run_worker(WorkerConfig(str(ledger.path), poll_seconds=0.01), threading.Event(), Faults(""))


def test_requeue_applies_only_to_the_succeeded_row_with_that_object(ledger: Ledger, photos: Path, out_dir: Path):
    batch = accept(ledger, photos, out_dir)
    publish_all(ledger)
    first = ledger.upkeep.published_items()[0]
    assert ledger.upkeep.requeue_published(first.row, first.object_path + ".other", "object_missing", "x") is None
    assert ledger.upkeep.requeue_published(first.row, first.object_path, "object_missing", "gone") == "queued"
    assert ledger.upkeep.requeue_published(first.row, first.object_path, "object_missing", "gone") is None  # moved on
    event = ledger.views.events(batch.batch_id)[-1]
    assert (event.from_state, event.to_state, event.error_code, event.detail) == (
        "succeeded",
        "queued",
        "object_missing",
        "gone",
    )


def test_a_replay_requeues_only_succeeded_items_whose_object_is_missing(
    ledger: Ledger, photos: Path, out_dir: Path
) -> None:
    batch = accept(ledger, photos, out_dir)
    publish_all(ledger)
    gone = {p.object_path for p in ledger.upkeep.published_items()[:2]}
    assert ledger.intake.requeue_missing_objects(batch.batch_id, lambda path: True) == 0
    assert ledger.intake.requeue_missing_objects(batch.batch_id, lambda path: path not in gone) == 2
    queued = ledger.views.items(batch.batch_id, state="queued")
    assert {i.object_path for i in queued} == gone and {(i.attempt, i.result) for i in queued} == {(0, None)}
    moved = [e for e in ledger.views.events(batch.batch_id) if e.error_code == "object_missing"]
    assert [(e.from_state, e.to_state) for e in moved] == [("succeeded", "queued")] * 2
    assert ledger.views.batch(batch.batch_id).counts["queued"] == 2


def test_a_replay_of_a_cancelled_batch_requeues_nothing(ledger_url: str, photos: Path, out_dir: Path) -> None:
    with Ledger(ledger_url) as ledger:  # its one success has no object file: no invariant check
        batch = accept(ledger, photos, out_dir)
        claim = ledger.queue.claim("host:1:1")
        assert claim is not None and ledger.queue.publish(claim, claim.items[0], lambda: None) == "succeeded"
        ledger.intake.request_cancel(batch.batch_id)
        assert ledger.intake.requeue_missing_objects(batch.batch_id, lambda path: False) == 0
        assert ledger.views.batch(batch.batch_id).counts["succeeded"] == 1


def test_relink_is_refused_to_an_item_whose_name_a_newer_success_claims(
    ledger: Ledger, photos: Path, out_dir: Path
) -> None:
    old = accept(ledger, photos, out_dir, key="old")
    publish_all(ledger)
    new = accept(ledger, photos, out_dir, key="new")  # same names, reused: created succeeded later
    owners = {(p.batch_id, p.friendly_path): p.owns_friendly_name for p in ledger.upkeep.published_items()}
    assert set(owners.values()) == {True, False}
    assert all(owners[(new.batch_id, name)] and not owners[(old.batch_id, name)] for _, name in owners)
    stale = next(p for p in ledger.upkeep.published_items() if p.batch_id == old.batch_id)
    linked: list[str] = []
    args = (stale.row, stale.object_path, stale.friendly_path, "friendly_link_wrong", "x")
    assert ledger.upkeep.relink_published(*args, lambda: linked.append("old")) is False
    fresh = next(
        p for p in ledger.upkeep.published_items() if p.owns_friendly_name and p.friendly_path == stale.friendly_path
    )
    args = (fresh.row, fresh.object_path, fresh.friendly_path, "friendly_link_wrong", "relinked by reconcile")
    assert ledger.upkeep.relink_published(*args, lambda: linked.append("new")) is True
    assert linked == ["new"]
    event = ledger.views.events(new.batch_id)[-1]
    assert (event.from_state, event.to_state, event.error_code) == ("succeeded", "relinked", "friendly_link_wrong")


def test_a_batch_expires_once_and_only_when_every_item_is_terminal(ledger: Ledger, photos: Path, out_dir: Path):
    batch = accept(ledger, photos, out_dir)
    future = iso(ledger.clock() + 60)
    assert ledger.upkeep.expirable_batches(future) == [] and ledger.upkeep.expire_batch(batch.batch_id, future) is False
    publish_all(ledger)
    assert ledger.upkeep.expirable_batches(iso(ledger.clock() - 60)) == []  # finished just now
    assert ledger.upkeep.expire_batch(batch.batch_id, future) is True
    assert ledger.upkeep.expire_batch(batch.batch_id, future) is False
    assert [e.to_state for e in ledger.views.events(batch.batch_id)][-1] == "expired"
    kept = ledger.upkeep.published_items()  # the names they published keep their records, and objects
    assert len(kept) == 12 and all(item.expired and item.owns_friendly_name for item in kept)
    assert ledger.upkeep.referenced_object_paths() == {item.object_path for item in kept}
    assert ledger.upkeep.expired_manifests() == [(str(out_dir), batch.batch_id, batch.manifest_path)]


def test_a_version_1_ledger_is_migrated_to_the_latest_version(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        MIGRATIONS[0][1](sqlite_utils.Database(conn))
        conn.execute("PRAGMA user_version = 1")
    with Ledger(path) as ledger:
        assert ledger.upkeep.output_folders() == [] and ledger.upkeep.verified_objects() == {}
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = {row[1] for row in conn.execute("PRAGMA table_info(batches)")}
        item_columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(items)")}
        event_indexes = {row[1] for row in conn.execute("PRAGMA index_list(events)")}
    assert "expired_at" in columns and "items_friendly_path" in indexes
    assert "stage_started_at" in item_columns and {"items_queued_keys", "items_queued_by_batch"} <= indexes
    assert "items_queued_age" in indexes
    assert {"events_at", "events_errors"} <= event_indexes
