"""Reading the ledger: batch views, item and event listings. Every count is derived from item rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import BatchNotFound, ItemNotFound
from ..models import (
    ITEM_STATES,
    TERMINAL_BATCH_STATES,
    BatchView,
    EventView,
    FailureView,
    ItemState,
    ItemView,
    WorkerActivity,
    batch_state,
)
from .backend import Backend, Row, record
from .states import FAILED, LIVE, QUEUED, RUNNING, SUCCEEDED
from .timefmt import iso, parse_iso


class Views:
    """Read-only projections of one ledger."""

    def __init__(self, db: Backend) -> None:
        self.db = db

    def resolve_batch_id(self, text: str) -> str:
        """The full batch id for ``text``: an id, or an unambiguous prefix of one."""
        rows = self.db.execute(
            "SELECT batch_id FROM batches WHERE batch_id >= ? AND batch_id < ? LIMIT 2",
            (text, text + "\U0010ffff"),
        ).fetchall()
        ids = [r["batch_id"] for r in rows]
        if text in ids:
            return text
        if len(ids) == 1 and len(text) >= 4:
            return ids[0]
        if len(rows) > 1:
            raise BatchNotFound(f"batch id prefix {text!r} is ambiguous")
        if rows:
            raise BatchNotFound(f"batch id prefix {text!r} is too short: give at least 4 characters")
        raise BatchNotFound(f"no batch {text!r} in {self.db.name}")

    def batch(self, batch_id: str, *, with_failures: bool = True) -> BatchView:
        """The current view of one batch, counts derived from its item rows."""
        return self.batch_view(self.batch_row(self.resolve_batch_id(batch_id)), with_failures)

    def batch_settled(self, batch_id: str) -> bool:
        """No item of the batch is queued or running, i.e. the batch is terminal (see
        :func:`~thumbctl.models.batch_state`): a seek on the ``(batch_id, state)`` index, for
        waiting on a batch without counting its items on every poll."""
        return (
            self.db.execute(
                f"SELECT 1 FROM items WHERE batch_id = ? AND state IN {LIVE} LIMIT 1", (batch_id,)
            ).fetchone()
            is None
        )

    def batch_row(self, batch_id: str) -> Row:
        return self.db.execute(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE batch_id = ?", (batch_id,)).fetchone()

    def batches(self, limit: int = 20) -> list[BatchView]:
        """The most recent batches, newest first."""
        rows = self.db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches ORDER BY created_at DESC, batch_id LIMIT ?", (limit,)
        ).fetchall()
        return [self.batch_view(row, False) for row in rows]

    def batch_view(self, row: Row, with_failures: bool, counts: dict[str, int] | None = None) -> BatchView:
        """The view of the batch ``row``; its ``counts`` by state are counted from its item rows
        unless given (a :class:`~thumbctl.ledger.follow.Follower` keeps them from the log)."""
        batch_id, created, cancel_at = row["batch_id"], row["created_at"], row["cancel_requested_at"]
        counts = self.state_counts(batch_id) if counts is None else counts
        oldest_queued = self.oldest_runnable(batch_id, iso(self.db.clock())) if counts[ItemState.QUEUED] else None
        last = self.db.scalar("SELECT at FROM events WHERE batch_id = ? ORDER BY seq DESC LIMIT 1", (batch_id,))
        updated = last or created
        state = batch_state(counts, row["total"], cancel_at is not None)
        terminal = state in TERMINAL_BATCH_STATES
        runnable = oldest_queued is not None and cancel_at is None
        age = max(0.0, self.db.clock() - parse_iso(oldest_queued)) if runnable else None
        return record(
            BatchView,
            row,
            state=state,
            counts=counts,
            updated_at=updated,
            finished_at=updated if terminal else None,
            queue_age_seconds=age,
            failures=tuple(self._failures(batch_id)) if with_failures else (),
            smaller_than_target=self._smaller_than_target(batch_id) if with_failures else 0,
            replaced=self._flagged(batch_id, "name_replaced") if with_failures else 0,
            overwritten=self._flagged(batch_id, "name_overwritten") if with_failures else 0,
        )

    def state_counts(self, batch_id: str) -> dict[str, int]:
        """Items of the batch by state, counted on the ``(batch_id, state)`` index."""
        counts = dict.fromkeys(ITEM_STATES, 0)
        for row in self.db.execute(
            "SELECT state, count(*) AS n FROM items WHERE batch_id = ? GROUP BY state", (batch_id,)
        ).fetchall():
            counts[row["state"]] = row["n"]
        return counts

    def oldest_runnable(self, batch_id: str, at: str) -> str | None:
        """When the batch's longest-waiting runnable item was queued (not waiting out a backoff at
        ``at``): the first such row of the queued-age index, past only the delayed ones before it."""
        row = self.db.execute(
            f"SELECT queued_at FROM items INDEXED BY items_queued_age WHERE batch_id = ? AND state = {QUEUED} "
            "AND (not_before IS NULL OR not_before <= ?) ORDER BY queued_at LIMIT 1",
            (batch_id, at),
        ).fetchone()
        return row["queued_at"] if row else None

    def _failures(self, batch_id: str) -> Iterator[FailureView]:
        for row in self.db.execute(
            "SELECT item_id, ratio, size, format, error_code, error_detail AS detail FROM items "
            f"WHERE batch_id = ? AND state = {FAILED} ORDER BY id",
            (batch_id,),
        ).fetchall():
            yield record(FailureView, row)

    def _flagged(self, batch_id: str, flag: str) -> int:
        """Succeeded items of the batch whose ``result`` carries ``flag``."""
        return self.db.scalar(
            f"SELECT count(*) FROM items WHERE batch_id = ? AND state = {SUCCEEDED} "
            f"AND {self.db.json_flag('result', flag)}",
            (batch_id,),
        )

    def _smaller_than_target(self, batch_id: str) -> int:
        return self.db.scalar(
            f"SELECT count(*) FROM items WHERE batch_id = ? AND state = {SUCCEEDED} "
            f"AND {self.db.json_flag('result', 'source_smaller_than_target')}",
            (batch_id,),
        )

    def owned_friendly_names(self, batch_id: str) -> list[tuple[str, str]]:
        """(object path, friendly path) of the batch's succeeded items that own their friendly
        name: no succeeded item of a batch that has not expired claimed it later (the rule
        ``reconcile`` checks names by). Empty for an expired batch."""
        rows = self.db.execute(
            "SELECT i.object_path, i.friendly_path FROM items i JOIN batches b USING (batch_id) "
            f"WHERE i.batch_id = ? AND i.state = {SUCCEEDED} AND b.expired_at IS NULL "
            "AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL AND NOT EXISTS ("
            "SELECT 1 FROM items j JOIN batches c ON c.batch_id = j.batch_id "
            f"WHERE j.friendly_path = i.friendly_path AND j.state = {SUCCEEDED} AND c.expired_at IS NULL "
            "AND (j.updated_at > i.updated_at OR (j.updated_at = i.updated_at AND j.id > i.id))) "
            "ORDER BY i.id",
            (batch_id,),
        ).fetchall()
        return [(r["object_path"], r["friendly_path"]) for r in rows]

    def publishes_at(self, friendly_path: str) -> list[tuple[str, str | None]]:
        """(object path, name version) of every succeeded item (of any batch, expired or not) that
        recorded ``friendly_path`` as its name: what thumbctl itself may have published there (the
        version is None for a publish recorded before versions were)."""
        rows = self.db.execute(
            "SELECT DISTINCT object_path, name_version FROM items "
            f"WHERE friendly_path = ? AND state = {SUCCEEDED} AND object_path IS NOT NULL "
            "ORDER BY object_path, name_version",
            (friendly_path,),
        ).fetchall()
        return [(r["object_path"], r["name_version"]) for r in rows]

    def failed_since(self, at: str, batch_id: str | None) -> int:
        """How many items (of one batch, or of any) moved to ``failed`` at or after ``at``."""
        scope, params = ("AND batch_id = ?", (at, batch_id)) if batch_id else ("", (at,))
        return int(
            self.db.scalar(
                f"SELECT count(DISTINCT item_row) FROM events WHERE at >= ? AND to_state = {FAILED} {scope}", params
            )
        )

    def batches_touched_since(self, at: str) -> list[str]:
        """Ids of batches with an event at or after ``at``."""
        rows = self.db.execute("SELECT DISTINCT batch_id FROM events WHERE at >= ?", (at,)).fetchall()
        return [r["batch_id"] for r in rows]

    def items(self, batch_id: str, *, state: str | None = None) -> list[ItemView]:
        """The items of a batch (or those in ``state``), in the order they were recorded."""
        sql, params = self._items_query(batch_id, state)
        return [_item_view(row) for row in self.db.execute(sql, params).fetchall()]

    @contextmanager
    def streamed_items(self, batch_id: str, *, state: str | None = None) -> Iterator[Iterator[ItemView]]:
        """:meth:`items` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot."""
        with self.db.reading():
            sql, params = self._items_query(batch_id, state)
            with self.db.stream(sql, params) as rows:
                yield map(_item_view, rows)

    def _items_query(self, batch_id: str, state: str | None) -> tuple[str, list[object]]:
        sql = f"SELECT {_ITEM_VIEW_COLUMNS} FROM items WHERE batch_id = ?"
        params: list[object] = [self.resolve_batch_id(batch_id)]
        if state is not None:
            sql += " AND state = ?"
            params.append(state)
        return sql + " ORDER BY id", params

    def events(self, batch_id: str, *, item_id: str | None = None) -> list[EventView]:
        """The transition log of a batch (or of one item of it), in commit order."""
        sql, params = self._events_query(batch_id, item_id)
        return [_event_view(row) for row in self.db.execute(sql, params).fetchall()]

    @contextmanager
    def streamed_events(self, batch_id: str, *, item_id: str | None = None) -> Iterator[Iterator[EventView]]:
        """:meth:`events` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot. An unknown
        batch or item raises on entering, before anything is listed."""
        with self.db.reading():
            sql, params = self._events_query(batch_id, item_id)
            with self.db.stream(sql, params) as rows:
                yield map(_event_view, rows)

    def _events_query(self, batch_id: str, item_id: str | None) -> tuple[str, list[object]]:
        batch_id = self.resolve_batch_id(batch_id)
        sql = (
            "SELECT e.seq, e.at, e.batch_id, i.item_id, i.ratio, i.size, i.format, e.from_state, e.to_state, "
            "e.attempt, e.worker, e.error_code, e.detail, e.dedup "
            "FROM events e LEFT JOIN items i ON i.id = e.item_row WHERE e.batch_id = ?"
        )
        params: list[object] = [batch_id]
        if item_id is not None:
            self._check_item(batch_id, item_id)
            sql += " AND i.item_id = ?"
            params.append(item_id)
        return sql + " ORDER BY e.seq", params

    def _check_item(self, batch_id: str, item_id: str) -> None:
        if (
            self.db.execute(
                "SELECT 1 FROM items WHERE batch_id = ? AND item_id = ? LIMIT 1", (batch_id, item_id)
            ).fetchone()
            is None
        ):
            raise ItemNotFound(f"batch {batch_id} has no item {item_id!r} (see `thumbctl status {batch_id} --items`)")

    def source_sizes(self, batch_id: str) -> dict[str, tuple[int, int]]:
        """Item id -> upright (width, height) of its source, for items whose header was read at submit."""
        batch_id = self.resolve_batch_id(batch_id)
        rows = self.db.execute(
            "SELECT item_id, source_width, source_height FROM items "
            "WHERE batch_id = ? AND source_width IS NOT NULL AND source_height IS NOT NULL",
            (batch_id,),
        ).fetchall()
        return {r["item_id"]: (r["source_width"], r["source_height"]) for r in rows}

    def workers(self, batch_id: str | None) -> list[WorkerActivity]:
        """Each live lease: its owner, first item, ratios and since when."""
        scope, params = ("AND i.batch_id = ?", [batch_id]) if batch_id is not None else ("", [])
        rows = self.db.execute(
            "SELECT i.lease_owner, min(i.item_id) AS item_id, group_concat(i.ratio, ' ') AS ratios, "
            f"min(i.updated_at) AS since FROM items i WHERE i.state = {RUNNING} AND i.lease_owner IS NOT NULL {scope} "
            "GROUP BY i.lease_owner, i.lease_token ORDER BY min(i.updated_at), i.lease_owner",
            params,
        ).fetchall()
        return [WorkerActivity(r["lease_owner"], r["item_id"], tuple(r["ratios"].split(" ")), r["since"]) for r in rows]


def _item_view(row: Row) -> ItemView:
    return record(ItemView, row, result=json.loads(row["result"]) if row["result"] else None)


def _event_view(row: Row) -> EventView:
    return record(EventView, row, dedup=bool(row["dedup"]))


_BATCH_COLUMNS = (
    "batch_id, idempotency_key, request_digest, total, source_root, out_dir, "
    "manifest_path, created_at, cancel_requested_at, expired_at"
)
_ITEM_VIEW_COLUMNS = (
    "item_id, source, ratio, size, format, state, attempt, error_code, error_detail, derivative_key, "
    "object_path, friendly_path, updated_at, result"
)
