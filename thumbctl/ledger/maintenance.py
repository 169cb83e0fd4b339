"""The maintenance half of the ledger: what ``reconcile`` and ``gc`` read and change.

Every repair is one ``BEGIN IMMEDIATE`` transaction that first checks the row is
still as reconcile saw it (state, lease token, object and friendly path), so a
worker that renewed its lease or finished meanwhile is never disturbed, and every
change appends its event with the reason. Batches that ``gc`` expired are out of
scope for every check: their outputs are meant to go.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import astuple
from typing import TypeVar

from ..errors import LedgerUnavailable
from ..models import ObjectStamp, PublishedItem, StalledItem
from .schema import ITEM_STATES_SQL
from .timefmt import iso

DelayFor = Callable[[int], float]
IsDead = Callable[[str], bool]

_LIVE_BATCH = "b.expired_at IS NULL"
_CHUNK = 500
T = TypeVar("T")


class Maintenance:
    """Mixin for :class:`~thumbctl.ledger.core.Ledger`: findings, repairs and retention."""

    _conn: sqlite3.Connection
    _write: Callable[..., AbstractContextManager[float]]
    _transition: Callable[..., list[int]]
    _settle_one: Callable[..., str]
    _append_event: Callable[..., None]

    # -- reading --------------------------------------------------------------------------

    def stalled_candidates(self) -> list[StalledItem]:
        """Every ``running`` item, and ``queued`` items of batches whose cancel was requested.

        Two queries, so neither walks the queued items of batches without a cancel request (the
        second goes from the flagged batches to their items: ``CROSS JOIN`` keeps that order)."""
        columns = (
            "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.state, i.lease_owner, i.lease_token, "
            "i.lease_expires_at, b.cancel_requested_at FROM"
        )
        rows = self._conn.execute(
            f"{columns} items i JOIN batches b USING (batch_id) WHERE i.state = 'running' UNION ALL "
            f"{columns} batches b CROSS JOIN items i USING (batch_id) "
            "WHERE b.cancel_requested_at IS NOT NULL AND i.state = 'queued' ORDER BY 1"
        ).fetchall()
        return [StalledItem(*row) for row in rows]

    def published_items(self) -> list[PublishedItem]:
        """Succeeded items of batches that have not expired, with the facts their object is checked against."""
        rows = self._conn.execute(
            "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.derivative_key, i.object_path, i.friendly_path, "
            "i.source_width, i.source_height, b.profile, b.out_dir, "
            "row_number() OVER (PARTITION BY i.friendly_path ORDER BY i.updated_at DESC, i.id DESC) = 1, "
            "json_extract(i.result, '$.output_bytes') "
            f"FROM items i JOIN batches b USING (batch_id) WHERE i.state = 'succeeded' AND {_LIVE_BATCH} "
            "AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL ORDER BY i.id"
        ).fetchall()
        return [PublishedItem(*row[:9], json.loads(row[9]), row[10], bool(row[11]), row[12]) for row in rows]

    def verified_objects(self) -> dict[str, ObjectStamp]:
        """The objects reconcile last found sound, with the state their files were in then."""
        rows = self._conn.execute(
            "SELECT object_path, dev, inode, size, mtime_ns, ctime_ns FROM object_checks"
        ).fetchall()
        return {row[0]: ObjectStamp(*row[1:]) for row in rows}

    def replace_verified_objects(self, verified: dict[str, ObjectStamp]) -> bool:
        """Remember exactly these objects as sound (forgetting every other). It is only a
        cache: False, and nothing changed, when the ledger cannot be written (read-only, busy)."""
        try:
            with self._write():
                self._conn.execute("DELETE FROM object_checks")
                self._conn.executemany(
                    "INSERT INTO object_checks (object_path, dev, inode, size, mtime_ns, ctime_ns) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [(path, *astuple(stamp)) for path, stamp in verified.items()],
                )
        except LedgerUnavailable:
            return False
        return True

    def referenced_object_paths(self, *, also_expiring: Sequence[str] = ()) -> set[str]:
        """Object paths named by any item (any state) of a batch that has not expired
        (and is not in ``also_expiring``)."""
        exclude, params = _excluding(also_expiring)
        rows = self._conn.execute(
            f"SELECT DISTINCT i.object_path FROM items i JOIN batches b USING (batch_id) "
            f"WHERE i.object_path IS NOT NULL AND {_LIVE_BATCH}{exclude}",
            params,
        )
        return {r[0] for r in rows}

    def output_folders(self) -> list[tuple[str, str]]:
        """Every output folder the ledger knows, with the id of its newest batch."""
        rows = self._conn.execute(
            "SELECT out_dir, batch_id FROM (SELECT out_dir, batch_id, row_number() OVER "
            "(PARTITION BY out_dir ORDER BY created_at DESC, batch_id DESC) AS n FROM batches) "
            "WHERE n = 1 ORDER BY out_dir"
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    # -- repairs ----------------------------------------------------------------------------

    def rescue_stalled(self, row: int, token: str | None, is_dead: IsDead, delay_for: DelayFor) -> str | None:
        """Settle one stalled item if it still is as reconcile saw it; returns its new state.

        A running item whose lease (``token``) is unchanged and expired, or whose owner is
        gone, goes back to ``queued`` (the attempt counts) or ``failed`` when the budget is
        spent; in a batch whose cancel was requested it ends ``cancelled``, as does a queued
        item there. Anything else (a live lease, a renewed one, an item that moved on) is
        left alone: None.
        """
        with self._write() as now:
            at = iso(now)
            found = self._conn.execute(
                "SELECT i.state, i.lease_token, i.lease_owner, i.lease_expires_at, b.cancel_requested_at "
                "FROM items i JOIN batches b USING (batch_id) WHERE i.id = ?",
                (row,),
            ).fetchone()
            if found is None or found[1] != token:
                return None
            state, _, owner, expires, cancel_at = found
            why = stall_reason(state, owner, expires, cancel_at, at, is_dead)
            if why is None:
                return None
            if cancel_at is not None:
                detail = f"reconcile finalized the cancel requested at {cancel_at}: {why}"
                self._transition(at, [row], state, "cancelled", detail=detail, worker=owner)
                return "cancelled"
            return self._settle_one(now, at, row, "worker_crashed", f"reconcile: {why}", None, owner, delay_for)

    def requeue_published(self, row: int, object_path: str, code: str, detail: str) -> str | None:
        """A succeeded item whose object is missing or damaged goes back to ``queued`` with a
        fresh attempt budget, to be rendered again (``cancelled`` instead when its batch's cancel
        was requested: nothing more is rendered for it). Returns the new state, or None when
        the item changed meanwhile."""
        with self._write() as now:
            at = iso(now)
            found = self._conn.execute(
                "SELECT i.state, i.object_path, b.cancel_requested_at FROM items i JOIN batches b USING (batch_id) "
                f"WHERE i.id = ? AND {_LIVE_BATCH}",
                (row,),
            ).fetchone()
            if found is None or found[0] != "succeeded" or found[1] != object_path:
                return None
            target = "queued" if found[2] is None else "cancelled"
            self._transition(at, [row], "succeeded", target, error_code=code, detail=detail)
            if target == "queued":  # rendered afresh: not a reuse any more, and the old result is void
                self._conn.execute("UPDATE items SET attempt = 0, dedup = 0, result = NULL WHERE id = ?", (row,))
            return target

    def requeue_missing_objects(self, batch_id: str, present: Callable[[str], bool]) -> int:
        """On a replay: the batch's succeeded items whose object is not ``present`` go back to
        ``queued`` with a fresh attempt budget, logged ``succeeded → queued`` with
        ``object_missing`` (as reconcile's repair does), so the run renders them again.

        Files are checked before the write transaction; inside it only items still succeeded
        with the same object move. A batch whose cancel was requested, or that expired, is left
        alone (nothing more is rendered for it). Returns how many items were requeued.
        """
        missing = {path for path in {p for _, p in self._renderable_successes(batch_id)} if not present(path)}
        if not missing:
            return 0
        with self._write() as now:
            rows = [row for row, path in self._renderable_successes(batch_id) if path in missing]
            detail = "replay: its object file is gone; rendering it again"
            moved = self._transition(iso(now), rows, "succeeded", "queued", error_code="object_missing", detail=detail)
            for start in range(0, len(moved), _CHUNK):
                chunk = moved[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = f"UPDATE items SET attempt = 0, dedup = 0, result = NULL WHERE id IN ({marks})"
                self._conn.execute(sql, chunk)
            return len(moved)

    def _renderable_successes(self, batch_id: str) -> list[tuple[int, str]]:
        """(row, object path) of the succeeded items of a batch that is neither expired nor cancelled."""
        return self._conn.execute(
            "SELECT i.id, i.object_path FROM items i JOIN batches b USING (batch_id) WHERE i.batch_id = ? "
            f"AND i.state = 'succeeded' AND i.object_path IS NOT NULL AND {_LIVE_BATCH} "
            "AND b.cancel_requested_at IS NULL ORDER BY i.id",
            (batch_id,),
        ).fetchall()

    def relink_published(
        self, row: int, object_path: str, friendly_path: str, code: str, detail: str, link: Callable[[], None]
    ) -> bool:
        """Run ``link`` (point the friendly name at the object) if the item is still
        succeeded with these paths and still the newest success to claim that name, and log a
        ``relinked`` event; all in one write transaction, as publish does."""
        with self._write() as now:
            found = self._conn.execute(
                "SELECT i.batch_id, i.attempt, i.updated_at FROM items i JOIN batches b USING (batch_id) "
                "WHERE i.id = ? AND i.state = 'succeeded' AND i.object_path = ? AND i.friendly_path = ? "
                f"AND {_LIVE_BATCH}",
                (row, object_path, friendly_path),
            ).fetchone()
            if found is None or self._newer_claimant(row, friendly_path, found[2]):
                return False
            link()
            self._append_event(
                iso(now), found[0], row, "succeeded", found[1], "relinked", error_code=code, detail=detail
            )
            return True

    def _newer_claimant(self, row: int, friendly_path: str, updated_at: str) -> bool:
        return (
            self._conn.execute(
                "SELECT 1 FROM items i JOIN batches b USING (batch_id) WHERE i.friendly_path = ? AND i.id != ? "
                f"AND i.state = 'succeeded' AND {_LIVE_BATCH} "
                "AND (i.updated_at > ? OR (i.updated_at = ? AND i.id > ?)) "
                "LIMIT 1",
                (friendly_path, row, updated_at, updated_at, row),
            ).fetchone()
            is not None
        )

    def record_file_removal(self, batch_id: str, code: str, detail: str, remove: Callable[[], object]) -> None:
        """Run ``remove`` (delete a file of the batch's output folder) and log a batch-level
        ``removed`` event with the reason, in one write transaction."""
        with self._write() as now:
            remove()
            self._append_event(iso(now), batch_id, None, None, None, "removed", error_code=code, detail=detail)

    # -- retention ----------------------------------------------------------------------------

    def expirable_batches(self, cutoff: str, *, batch_id: str | None = None) -> list[str]:
        """Batches not yet expired whose every item is terminal and whose last item transition
        is before ``cutoff`` (only ``batch_id``, when given). Maintenance events (relinks, temp
        file removals) do not count: they do not make a batch's outputs newer."""
        only = " AND b.batch_id = ?" if batch_id is not None else ""
        rows = self._conn.execute(
            f"SELECT b.batch_id FROM batches b WHERE {_LIVE_BATCH}{only} "
            "AND NOT EXISTS (SELECT 1 FROM items i WHERE i.batch_id = b.batch_id AND i.state IN ('queued', 'running')) "
            "AND coalesce((SELECT max(e.at) FROM events e WHERE e.batch_id = b.batch_id AND e.item_row IS NOT NULL "
            f"AND e.to_state IN {ITEM_STATES_SQL}), b.created_at) < ? "
            "ORDER BY b.created_at, b.batch_id",
            [*([batch_id] if batch_id is not None else []), cutoff],
        ).fetchall()
        return [r[0] for r in rows]

    def expire_batch(self, batch_id: str, cutoff: str) -> bool:
        """Mark a batch expired (durably, with an ``expired`` event) if it still qualifies.

        Its idempotency key is released (suffixed ``#expired:<batch_id>``), so the same
        request submitted again makes a new batch instead of replaying one whose outputs
        are gone.
        """
        with self._write(durable=True) as now:
            if not self.expirable_batches(cutoff, batch_id=batch_id):
                return False
            at = iso(now)
            key = self._conn.execute("SELECT idempotency_key FROM batches WHERE batch_id = ?", (batch_id,)).fetchone()[
                0
            ]
            self._conn.execute(
                "UPDATE batches SET expired_at = ?, idempotency_key = ? WHERE batch_id = ?",
                (at, f"{key}#expired:{batch_id}", batch_id),
            )
            detail = f"retention: finished before {cutoff}; idempotency key {key!r} released"
            self._append_event(at, batch_id, None, None, None, "expired", detail=detail)
            return True

    def expired_manifests(self, *, also_expiring: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """(output folder, batch id, manifest path) of every expired batch (and those in ``also_expiring``)."""
        marks = ",".join("?" * len(also_expiring))
        extra = f" OR batch_id IN ({marks})" if also_expiring else ""
        rows = self._conn.execute(
            f"SELECT out_dir, batch_id, manifest_path FROM batches WHERE expired_at IS NOT NULL{extra} "
            "ORDER BY batch_id",
            list(also_expiring),
        ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def expired_friendly_paths(self, key: str, object_path: str, *, also_expiring: Sequence[str] = ()) -> list[str]:
        """Friendly names of expired items of this object that no live item claims."""
        marks = ",".join("?" * len(also_expiring))
        expired = (
            f"(b.expired_at IS NOT NULL OR b.batch_id IN ({marks}))" if also_expiring else "b.expired_at IS NOT NULL"
        )
        rows = self._conn.execute(
            "SELECT DISTINCT i.friendly_path FROM items i JOIN batches b USING (batch_id) "
            f"WHERE i.derivative_key = ? AND i.object_path = ? AND i.friendly_path IS NOT NULL AND {expired}",
            [key, object_path, *also_expiring],
        ).fetchall()
        return [r[0] for r in rows if not self._claimed_name(r[0], also_expiring)]

    def _claimed_name(self, friendly_path: str, also_expiring: Sequence[str]) -> bool:
        exclude, params = _excluding(also_expiring)
        return (
            self._conn.execute(
                f"SELECT 1 FROM items i JOIN batches b USING (batch_id) WHERE i.friendly_path = ? AND {_LIVE_BATCH}"
                f"{exclude} LIMIT 1",
                [friendly_path, *params],
            ).fetchone()
            is not None
        )

    def remove_if_unreferenced(self, key: str, object_path: str, remove: Callable[[], T]) -> T | None:
        """Run ``remove`` (delete the object) only if no item of a live batch references it,
        checked by derivative key inside the same write transaction; returns what it returned,
        or None when the object is referenced."""
        with self._write():
            referenced = self._conn.execute(
                f"SELECT 1 FROM items i JOIN batches b USING (batch_id) WHERE i.derivative_key = ? "
                f"AND i.object_path = ? AND {_LIVE_BATCH} LIMIT 1",
                (key, object_path),
            ).fetchone()
            return None if referenced is not None else remove()


def stall_reason(
    state: str, owner: str | None, expires: str | None, cancel_at: str | None, at: str, is_dead: IsDead
) -> str | None:
    """Why an item is stalled: nobody will ever finish it as it stands. None when it is live."""
    if state == "queued":
        return "no claim remains" if cancel_at is not None else None
    if state != "running":
        return None
    if owner is not None and is_dead(owner):
        return f"its worker {owner} is gone"
    if expires is not None and expires <= at:
        return f"its lease expired at {expires}"
    return None


def _excluding(batch_ids: Sequence[str]) -> tuple[str, list[str]]:
    if not batch_ids:
        return "", []
    return f" AND b.batch_id NOT IN ({','.join('?' * len(batch_ids))})", list(batch_ids)
