"""The maintenance half of the ledger: what ``reconcile`` and ``gc`` read and change.

Every repair is one ``BEGIN IMMEDIATE`` transaction that first checks the row is
still as reconcile saw it (state, lease token, object and friendly path), so a
worker that renewed its lease or finished meanwhile is never disturbed, and every
change appends its event with the reason. Batches that ``gc`` expired are out of
scope for every check: their outputs are meant to go.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import astuple
from typing import TypeVar

from ..errors import LedgerUnavailable
from ..models import ItemState, ObjectStamp, PublishedItem, StalledItem
from .backend import Backend, record
from .states import ALL, LIVE, QUEUED, RUNNING, SUCCEEDED
from .timefmt import iso
from .transitions import Transitions, chunks, marks

DelayFor = Callable[[int], float]
IsDead = Callable[[str], bool]

_LIVE_BATCH = "b.expired_at IS NULL"
#: Serializes gc removing an object with a submit recording a reuse of it.
OBJECT_STORE = "object-store"
T = TypeVar("T")


class Maintenance:
    """Findings, repairs and retention of one ledger."""

    def __init__(self, db: Backend, log: Transitions) -> None:
        self.db = db
        self.log = log

    # -- reading --------------------------------------------------------------------------

    def stalled_candidates(self) -> list[StalledItem]:
        """Every ``running`` item, and ``queued`` items of batches whose cancel was requested.

        Two queries, so neither walks the queued items of batches without a cancel request (the
        second goes from the flagged batches to their items: ``CROSS JOIN`` keeps that order)."""
        columns = (
            "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.state, i.lease_owner, i.lease_token, "
            "i.lease_expires_at, b.cancel_requested_at FROM"
        )
        rows = self.db.execute(
            f"{columns} items i JOIN batches b USING (batch_id) WHERE i.state = {RUNNING} UNION ALL "
            f"{columns} batches b CROSS JOIN items i USING (batch_id) "
            f"WHERE b.cancel_requested_at IS NOT NULL AND i.state = {QUEUED} ORDER BY 1"
        ).fetchall()
        return [record(StalledItem, r, row=r["id"]) for r in rows]

    def published_items(self) -> list[PublishedItem]:
        """Succeeded items of batches that have not expired, with the facts their object is checked against."""
        rows = self.db.execute(
            "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.size, i.format, i.derivative_key, i.object_path, "
            "i.friendly_path, "
            "i.source_width, i.source_height, b.profile, b.out_dir, "
            "row_number() OVER (PARTITION BY i.friendly_path ORDER BY i.updated_at DESC, i.id DESC) = 1 AS owns, "
            f"{self.db.json_number('i.result', 'output_bytes')} AS output_bytes "
            f"FROM items i JOIN batches b USING (batch_id) WHERE i.state = {SUCCEEDED} AND {_LIVE_BATCH} "
            "AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL ORDER BY i.id"
        ).fetchall()
        return [
            record(PublishedItem, r, row=r["id"], profile=json.loads(r["profile"]), owns_friendly_name=bool(r["owns"]))
            for r in rows
        ]

    def verified_objects(self) -> dict[str, ObjectStamp]:
        """The objects reconcile last found sound, with the state their files were in then."""
        rows = self.db.execute("SELECT object_path, dev, inode, size, mtime_ns, ctime_ns FROM object_checks").fetchall()
        return {r["object_path"]: record(ObjectStamp, r) for r in rows}

    def replace_verified_objects(self, verified: dict[str, ObjectStamp]) -> bool:
        """Remember exactly these objects as sound (forgetting every other). It is only a
        cache: False, and nothing changed, when the ledger cannot be written (read-only, busy)."""
        try:
            with self.db.write():
                self.db.execute("DELETE FROM object_checks")
                self.db.executemany(
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
        rows = self.db.execute(
            f"SELECT DISTINCT i.object_path FROM items i JOIN batches b USING (batch_id) "
            f"WHERE i.object_path IS NOT NULL AND {_LIVE_BATCH}{exclude}",
            params,
        )
        return {r["object_path"] for r in rows}

    def output_folders(self) -> list[tuple[str, str]]:
        """Every output folder the ledger knows, with the id of its newest batch."""
        rows = self.db.execute(
            "SELECT out_dir, batch_id FROM (SELECT out_dir, batch_id, row_number() OVER "
            "(PARTITION BY out_dir ORDER BY created_at DESC, batch_id DESC) AS n FROM batches) AS newest "
            "WHERE n = 1 ORDER BY out_dir"
        ).fetchall()
        return [(r["out_dir"], r["batch_id"]) for r in rows]

    # -- repairs ----------------------------------------------------------------------------

    def rescue_stalled(self, row: int, token: str | None, is_dead: IsDead, delay_for: DelayFor) -> str | None:
        """Settle one stalled item if it still is as reconcile saw it; returns its new state.

        A running item whose lease (``token``) is unchanged and expired, or whose owner is
        gone, goes back to ``queued`` (the attempt counts) or ``failed`` when the budget is
        spent; in a batch whose cancel was requested it ends ``cancelled``, as does a queued
        item there. Anything else (a live lease, a renewed one, an item that moved on) is
        left alone: None.
        """
        with self.db.write() as now:
            at = iso(now)
            found = self.db.execute(
                "SELECT i.state, i.lease_token, i.lease_owner, i.lease_expires_at, b.cancel_requested_at "
                f"FROM items i JOIN batches b USING (batch_id) WHERE i.id = ?{self.db.lock('i')}",
                (row,),
            ).fetchone()
            if found is None or found["lease_token"] != token:
                return None
            state, owner, expires = found["state"], found["lease_owner"], found["lease_expires_at"]
            cancel_at = found["cancel_requested_at"]
            why = stall_reason(state, owner, expires, cancel_at, at, is_dead)
            if why is None:
                return None
            if cancel_at is not None:
                detail = f"reconcile finalized the cancel requested at {cancel_at}: {why}"
                self.log.move(at, [row], state, ItemState.CANCELLED, detail=detail, worker=owner)
                return ItemState.CANCELLED
            return self.log.settle(now, row, "worker_crashed", f"reconcile: {why}", None, owner, delay_for)

    def requeue_published(self, row: int, object_path: str, code: str, detail: str) -> str | None:
        """A succeeded item whose object is missing or damaged goes back to ``queued`` with a
        fresh attempt budget, to be rendered again (``cancelled`` instead when its batch's cancel
        was requested: nothing more is rendered for it). Returns the new state, or None when
        the item changed meanwhile."""
        with self.db.write() as now:
            at = iso(now)
            found = self.db.execute(
                "SELECT i.state, i.object_path, b.cancel_requested_at FROM items i JOIN batches b USING (batch_id) "
                f"WHERE i.id = ? AND {_LIVE_BATCH}{self.db.lock('i')}",
                (row,),
            ).fetchone()
            if found is None or found["state"] != ItemState.SUCCEEDED or found["object_path"] != object_path:
                return None
            target = ItemState.QUEUED if found["cancel_requested_at"] is None else ItemState.CANCELLED
            self.log.move(at, [row], ItemState.SUCCEEDED, target, error_code=code, detail=detail)
            if target == ItemState.QUEUED:  # rendered afresh: not a reuse any more, and the old result is void
                self.db.execute("UPDATE items SET attempt = 0, dedup = 0, result = NULL WHERE id = ?", (row,))
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
        with self.db.write() as now:
            rows = [row for row, path in self._renderable_successes(batch_id) if path in missing]
            detail = "replay: its object file is gone; rendering it again"
            moved = self.log.move(
                iso(now), rows, ItemState.SUCCEEDED, ItemState.QUEUED, error_code="object_missing", detail=detail
            )
            for chunk in chunks(moved):
                sql = f"UPDATE items SET attempt = 0, dedup = 0, result = NULL WHERE id IN ({marks(chunk)})"
                self.db.execute(sql, list(chunk))
            return len(moved)

    def _renderable_successes(self, batch_id: str) -> list[tuple[int, str]]:
        """(row, object path) of the succeeded items of a batch that is neither expired nor cancelled."""
        rows = self.db.execute(
            "SELECT i.id, i.object_path FROM items i JOIN batches b USING (batch_id) WHERE i.batch_id = ? "
            f"AND i.state = {SUCCEEDED} AND i.object_path IS NOT NULL AND {_LIVE_BATCH} "
            "AND b.cancel_requested_at IS NULL ORDER BY i.id",
            (batch_id,),
        ).fetchall()
        return [(r["id"], r["object_path"]) for r in rows]

    def relink_published(
        self, row: int, object_path: str, friendly_path: str, code: str, detail: str, link: Callable[[], str | None]
    ) -> bool:
        """Run ``link`` (point the friendly name at the object; it returns the name's new version) if
        the item is still succeeded with these paths and still the newest success to claim that
        name, record the version and log a ``relinked`` event; all in one write transaction, as
        publish does."""
        with self.db.write() as now:
            found = self.db.execute(
                "SELECT i.batch_id, i.attempt, i.updated_at FROM items i JOIN batches b USING (batch_id) "
                f"WHERE i.id = ? AND i.state = {SUCCEEDED} AND i.object_path = ? AND i.friendly_path = ? "
                f"AND {_LIVE_BATCH}{self.db.lock('i')}",
                (row, object_path, friendly_path),
            ).fetchone()
            if found is None or self._newer_claimant(row, friendly_path, found["updated_at"]):
                return False
            version = link()
            self.db.execute("UPDATE items SET name_version = ? WHERE id = ?", (version, row))
            self.log.event(
                iso(now),
                found["batch_id"],
                row,
                ItemState.SUCCEEDED,
                found["attempt"],
                "relinked",
                error_code=code,
                detail=detail,
            )
            return True

    def record_name_version(self, batch_id: str, friendly_path: str, version: str | None) -> None:
        """Inside a write transaction: record the version published at ``friendly_path`` on the
        batch's succeeded item there."""
        self.db.execute(
            f"UPDATE items SET name_version = ? WHERE batch_id = ? AND friendly_path = ? AND state = {SUCCEEDED}",
            (version, batch_id, friendly_path),
        )

    def _newer_claimant(self, row: int, friendly_path: str, updated_at: str) -> bool:
        return (
            self.db.execute(
                "SELECT 1 FROM items i JOIN batches b USING (batch_id) WHERE i.friendly_path = ? AND i.id != ? "
                f"AND i.state = {SUCCEEDED} AND {_LIVE_BATCH} "
                "AND (i.updated_at > ? OR (i.updated_at = ? AND i.id > ?)) "
                "LIMIT 1",
                (friendly_path, row, updated_at, updated_at, row),
            ).fetchone()
            is not None
        )

    def record_file_removal(self, batch_id: str, code: str, detail: str, remove: Callable[[], object]) -> None:
        """Run ``remove`` (delete a file of the batch's output folder) and log a batch-level
        ``removed`` event with the reason, in one write transaction."""
        with self.db.write() as now:
            remove()
            self.log.event(iso(now), batch_id, None, None, None, "removed", error_code=code, detail=detail)

    # -- retention ----------------------------------------------------------------------------

    def expirable_batches(self, cutoff: str, *, batch_id: str | None = None) -> list[str]:
        """Batches not yet expired whose every item is terminal and whose last item transition
        is before ``cutoff`` (only ``batch_id``, when given). Maintenance events (relinks, temp
        file removals) do not count: they do not make a batch's outputs newer."""
        only = " AND b.batch_id = ?" if batch_id is not None else ""
        rows = self.db.execute(
            f"SELECT b.batch_id FROM batches b WHERE {_LIVE_BATCH}{only} "
            f"AND NOT EXISTS (SELECT 1 FROM items i WHERE i.batch_id = b.batch_id AND i.state IN {LIVE}) "
            "AND coalesce((SELECT max(e.at) FROM events e WHERE e.batch_id = b.batch_id AND e.item_row IS NOT NULL "
            f"AND e.to_state IN {ALL}), b.created_at) < ? "
            "ORDER BY b.created_at, b.batch_id",
            [*([batch_id] if batch_id is not None else []), cutoff],
        ).fetchall()
        return [r["batch_id"] for r in rows]

    def expire_batch(self, batch_id: str, cutoff: str) -> bool:
        """Mark a batch expired (durably, with an ``expired`` event) if it still qualifies.

        Its idempotency key is released (suffixed ``#expired:<batch_id>``), so the same
        request submitted again makes a new batch instead of replaying one whose outputs
        are gone.
        """
        with self.db.write(durable=True) as now:
            if not self.expirable_batches(cutoff, batch_id=batch_id):
                return False
            at = iso(now)
            key = self.db.scalar(f"SELECT idempotency_key FROM batches WHERE batch_id = ?{self.db.lock()}", (batch_id,))
            self.db.execute(
                "UPDATE batches SET expired_at = ?, idempotency_key = ? WHERE batch_id = ?",
                (at, f"{key}#expired:{batch_id}", batch_id),
            )
            detail = f"retention: finished before {cutoff}; idempotency key {key!r} released"
            self.log.event(at, batch_id, None, None, None, "expired", detail=detail)
            return True

    def expired_manifests(self, *, also_expiring: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """(output folder, batch id, manifest path) of every expired batch (and those in ``also_expiring``)."""
        marks = ",".join("?" * len(also_expiring))
        extra = f" OR batch_id IN ({marks})" if also_expiring else ""
        rows = self.db.execute(
            f"SELECT out_dir, batch_id, manifest_path FROM batches WHERE expired_at IS NOT NULL{extra} "
            "ORDER BY batch_id",
            list(also_expiring),
        ).fetchall()
        return [(r["out_dir"], r["batch_id"], r["manifest_path"]) for r in rows]

    def expired_friendly_paths(self, key: str, object_path: str, *, also_expiring: Sequence[str] = ()) -> list[str]:
        """Friendly names of expired items of this object that no live item claims."""
        marks = ",".join("?" * len(also_expiring))
        expired = (
            f"(b.expired_at IS NOT NULL OR b.batch_id IN ({marks}))" if also_expiring else "b.expired_at IS NOT NULL"
        )
        rows = self.db.execute(
            "SELECT DISTINCT i.friendly_path FROM items i JOIN batches b USING (batch_id) "
            f"WHERE i.derivative_key = ? AND i.object_path = ? AND i.friendly_path IS NOT NULL AND {expired}",
            [key, object_path, *also_expiring],
        ).fetchall()
        return [r["friendly_path"] for r in rows if not self._claimed_name(r["friendly_path"], also_expiring)]

    def _claimed_name(self, friendly_path: str, also_expiring: Sequence[str]) -> bool:
        exclude, params = _excluding(also_expiring)
        return (
            self.db.execute(
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
        with self.db.write():
            self.db.serialize_on(OBJECT_STORE)  # a submit reusing the object waits, then finds it gone
            referenced = self.db.execute(
                f"SELECT 1 FROM items i JOIN batches b USING (batch_id) WHERE i.derivative_key = ? "
                f"AND i.object_path = ? AND {_LIVE_BATCH} LIMIT 1",
                (key, object_path),
            ).fetchone()
            return None if referenced is not None else remove()


def stall_reason(
    state: str, owner: str | None, expires: str | None, cancel_at: str | None, at: str, is_dead: IsDead
) -> str | None:
    """Why an item is stalled: nobody will ever finish it as it stands. None when it is live."""
    if state == ItemState.QUEUED:
        return "no claim remains" if cancel_at is not None else None
    if state != ItemState.RUNNING:
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
