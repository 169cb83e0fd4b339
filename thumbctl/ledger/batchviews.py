"""Reading the ledger: batch views, item and event listings. Every count is derived from item rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..core.errors import BatchIdAmbiguous, BatchNotFound, ItemNotFound
from ..core.models import (
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
from .damage import BATCH_WAY_OUT, is_number, item_view, loose_object, needed_number
from .retry import direct
from .sql import damage as damage_sql
from .sql import views as sql
from .timefmt import iso, parse_iso


class BatchViews:
    """Read-only projections of one ledger: batch views and listings (the first half of the views
    port, :class:`~.observe.Views`)."""

    def __init__(self, db: Backend) -> None:
        self.db = db

    def resolve_batch_id(self, text: str) -> str:
        ids: list[str] = []
        for prefix in _batch_prefixes(text):
            rows = self.db.execute(sql.BATCH_IDS_FROM, (prefix, prefix + "\U0010ffff")).fetchall()
            if prefix in (found := [r["batch_id"] for r in rows]):
                return prefix
            ids += [batch_id for batch_id in found if batch_id not in ids]
        if ids and len(text) < 4:
            raise BatchNotFound(f"batch id prefix {text!r} is too short: give at least 4 characters")
        if len(ids) == 1:
            return ids[0]
        if ids:
            raise BatchIdAmbiguous(
                f"batch id prefix {text!r} is ambiguous: {ids[0]}, {ids[1]} and maybe more start with it; "
                "give more of the id"
            )
        raise BatchNotFound(f"no batch {text!r} in {self.db.name}")

    def batch(self, batch_id: str, *, with_failures: bool = True) -> BatchView:
        return self.batch_view(self.batch_row(self.resolve_batch_id(batch_id)), with_failures)

    def batch_settled(self, batch_id: str) -> bool:
        return self.db.execute(sql.BATCH_LIVE_ITEM, (batch_id,)).fetchone() is None

    def batch_row(self, batch_id: str) -> Row:
        return self.db.execute(sql.BATCH_ROW, (batch_id,)).fetchone()

    def batches(self, limit: int = 20) -> list[BatchView]:
        rows = self.db.execute(sql.RECENT_BATCHES, (limit,)).fetchall()
        return [self.batch_view(row, False) for row in rows]

    def batch_view(self, row: Row, with_failures: bool, counts: dict[ItemState, int] | None = None) -> BatchView:
        """The view of the batch ``row``; its ``counts`` by state are counted from its item rows
        unless given (a :class:`~thumbctl.ledger.follow.Follower` keeps them from the log)."""
        batch_id, created, cancel_at = row["batch_id"], row["created_at"], row["cancel_requested_at"]
        counts = self.state_counts(batch_id) if counts is None else counts
        oldest_queued = self.oldest_runnable(batch_id, iso(self.db.clock())) if counts[ItemState.QUEUED] else None
        last = self.db.scalar(sql.LAST_EVENT_AT, (batch_id,))
        updated = last or created
        total = needed_number("batches", batch_id, "total", row["total"], BATCH_WAY_OUT)
        state = batch_state(counts, total, cancel_at is not None)
        terminal = state in TERMINAL_BATCH_STATES
        runnable = oldest_queued is not None and cancel_at is None
        age = max(0.0, self.db.clock() - parse_iso(oldest_queued)) if runnable else None
        return record(
            BatchView,
            row,
            total=total,
            state=state,
            counts=counts,
            updated_at=updated,
            finished_at=(self.db.scalar(sql.LAST_ITEM_EVENT_AT, (batch_id,)) or created) if terminal else None,
            queue_age_seconds=age,
            failures=tuple(self._failures(batch_id)) if with_failures else (),
            smaller_than_target=self._flagged(batch_id, "source_smaller_than_target") if with_failures else 0,
            replaced=self._flagged(batch_id, "name_replaced") if with_failures else 0,
            overwritten=self._flagged(batch_id, "name_overwritten") if with_failures else 0,
            replaced_names=self._flagged_names(batch_id, "name_replaced") if with_failures else (),
        )

    def state_counts(self, batch_id: str) -> dict[ItemState, int]:
        counts: dict[ItemState, int] = dict.fromkeys(ITEM_STATES, 0)
        for row in self.db.execute(sql.STATE_COUNTS, (batch_id,)).fetchall():
            counts[row["state"]] = row["n"]
        return counts

    def oldest_runnable(self, batch_id: str, at: str) -> str | None:
        row = self.db.execute(sql.OLDEST_RUNNABLE, (batch_id, at)).fetchone()
        return row["queued_at"] if row else None

    def _failures(self, batch_id: str) -> Iterator[FailureView]:
        for row in self.db.execute(sql.FAILURES, (batch_id,)).fetchall():
            yield record(FailureView, row)

    def _flagged(self, batch_id: str, flag: str) -> int:
        """Succeeded items of the batch whose ``result`` carries ``flag``."""
        return len(self._flagged_names(batch_id, flag))

    def _flagged_names(self, batch_id: str, flag: str) -> tuple[str, ...]:
        """The names of the succeeded items of the batch whose ``result`` carries ``flag``: the results
        that mention it, parsed here (a result that does not parse carries no flag; listings mark it)."""
        patterns = (f'%"{flag}": true%', f'%"{flag}":true%')
        rows = self.db.execute(damage_sql.FLAG_CANDIDATES, (batch_id, *patterns)).fetchall()
        return tuple(r["friendly_path"] for r in rows if (loose_object(r["result"]) or {}).get(flag) is True)

    def owned_friendly_names(self, batch_id: str) -> list[tuple[str, str]]:
        rows = self.db.execute(sql.OWNED_NAMES, (batch_id,)).fetchall()
        return [(r["object_path"], r["friendly_path"]) for r in rows]

    def publishes_at(self, friendly_path: str) -> list[tuple[str, str | None]]:
        rows = self.db.execute(sql.PUBLISHES_AT, (friendly_path,)).fetchall()
        return [(r["object_path"], r["name_version"]) for r in rows]

    def released_at(self, friendly_path: str) -> str | None:
        return self.db.scalar(sql.RELEASED_AT, (friendly_path,))

    def failed_since(self, at: str, batch_id: str | None) -> int:
        scope = [batch_id] if batch_id else []
        return int(self.db.scalar(sql.FAILED_SINCE, [at, *scope], scope=len(scope)))

    def finished_by_host(self, host: str, at: str, batch_id: str | None) -> dict[ItemState, int]:
        scope = [batch_id] if batch_id else []
        prefix = f"{host}:"
        rows = self.db.execute(sql.FINISHED_BY_HOST, [at, len(prefix), prefix, *scope], scope=len(scope)).fetchall()
        found = {ItemState(row["to_state"]): int(row["n"]) for row in rows}
        return {state: found.get(state, 0) for state in (ItemState.SUCCEEDED, ItemState.FAILED, ItemState.CANCELLED)}

    def batches_touched_since(self, at: str) -> list[str]:
        rows = self.db.execute(sql.BATCHES_TOUCHED_SINCE, (at,)).fetchall()
        return [r["batch_id"] for r in rows]

    def items(self, batch_id: str, *, state: str | None = None) -> list[ItemView]:
        params = self._items_params(batch_id, state)
        rows = self.db.execute(sql.ITEMS, params, scope=len(params) - 1).fetchall()
        return [item_view(row, params[0]) for row in rows]

    @direct  # the listing is read by the caller's block
    @contextmanager
    def streamed_items(self, batch_id: str, *, state: str | None = None) -> Iterator[Iterator[ItemView]]:
        with self.db.reading():
            params = self._items_params(batch_id, state)
            with self.db.stream(sql.ITEMS, params, scope=len(params) - 1) as rows:
                yield (item_view(row, params[0]) for row in rows)

    def _items_params(self, batch_id: str, state: str | None) -> list[object]:
        return [self.resolve_batch_id(batch_id), *([state] if state is not None else [])]

    def events(self, batch_id: str, *, item_id: str | None = None) -> list[EventView]:
        params = self._events_params(batch_id, item_id)
        return [_event_view(row) for row in self.db.execute(sql.EVENTS, params, scope=len(params) - 1).fetchall()]

    def events_after(self, batch_id: str, seq: int, *, item_id: str | None = None) -> list[EventView]:
        batch_id, *item = self._events_params(batch_id, item_id)
        params = [batch_id, seq, *item]
        return [_event_view(r) for r in self.db.execute(sql.EVENTS_AFTER, params, scope=len(item)).fetchall()]

    @direct  # the listing is read by the caller's block
    @contextmanager
    def streamed_events(self, batch_id: str, *, item_id: str | None = None) -> Iterator[Iterator[EventView]]:
        with self.db.reading():
            params = self._events_params(batch_id, item_id)
            with self.db.stream(sql.EVENTS, params, scope=len(params) - 1) as rows:
                yield map(_event_view, rows)

    def _events_params(self, batch_id: str, item_id: str | None) -> list[object]:
        batch_id = self.resolve_batch_id(batch_id)
        if item_id is None:
            return [batch_id]
        self._check_item(batch_id, item_id)
        return [batch_id, item_id]

    def _check_item(self, batch_id: str, item_id: str) -> None:
        if self.db.execute(sql.ITEM_EXISTS, (batch_id, item_id)).fetchone() is None:
            raise ItemNotFound(f"batch {batch_id} has no item {item_id!r} (see `thumbctl status {batch_id} --items`)")

    def source_sizes(self, batch_id: str) -> dict[str, tuple[int, int]]:
        batch_id = self.resolve_batch_id(batch_id)
        rows = self.db.execute(sql.SOURCE_SIZES, (batch_id,)).fetchall()
        sound = [r for r in rows if is_number(r["source_width"]) and is_number(r["source_height"])]
        return {r["item_id"]: (r["source_width"], r["source_height"]) for r in sound}

    def workers(self, batch_id: str | None) -> list[WorkerActivity]:
        scope = [batch_id] if batch_id is not None else []
        rows = self.db.execute(sql.WORKERS, scope, scope=len(scope)).fetchall()
        return [
            WorkerActivity(r["lease_owner"], r["item_id"], tuple(dict.fromkeys(r["ratios"].split(" "))), r["since"])
            for r in rows
        ]


def _event_view(row: Row) -> EventView:
    return record(EventView, row, dedup=bool(row["dedup"]))


def _batch_prefixes(text: str) -> list[str]:
    """What ``text`` may be the start of: itself, and for bare hex (``9450``) ``b_9450`` too."""
    bare = text.lower()
    if not text.startswith("b_") and bare and all(c in "0123456789abcdef" for c in bare):
        return [text, f"b_{bare}"]
    return [text]
