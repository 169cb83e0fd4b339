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
        """The full batch id for ``text``: an id, or an unambiguous prefix of one of at least 4
        characters, with or without its ``b_`` (``9450`` as a git short id: ``b_9450…``)."""
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
        """The current view of one batch, counts derived from its item rows."""
        return self.batch_view(self.batch_row(self.resolve_batch_id(batch_id)), with_failures)

    def batch_settled(self, batch_id: str) -> bool:
        """No item of the batch is queued or running, i.e. the batch is terminal (see
        :func:`~thumbctl.core.models.batch_state`): a seek on the ``(batch_id, state)`` index, for
        waiting on a batch without counting its items on every poll."""
        return self.db.execute(sql.BATCH_LIVE_ITEM, (batch_id,)).fetchone() is None

    def batch_row(self, batch_id: str) -> Row:
        return self.db.execute(sql.BATCH_ROW, (batch_id,)).fetchone()

    def batches(self, limit: int = 20) -> list[BatchView]:
        """The most recent batches, newest first."""
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
            finished_at=updated if terminal else None,
            queue_age_seconds=age,
            failures=tuple(self._failures(batch_id)) if with_failures else (),
            smaller_than_target=self._flagged(batch_id, "source_smaller_than_target") if with_failures else 0,
            replaced=self._flagged(batch_id, "name_replaced") if with_failures else 0,
            overwritten=self._flagged(batch_id, "name_overwritten") if with_failures else 0,
            replaced_names=self._flagged_names(batch_id, "name_replaced") if with_failures else (),
        )

    def state_counts(self, batch_id: str) -> dict[ItemState, int]:
        """Items of the batch by state, counted on the ``(batch_id, state)`` index."""
        counts: dict[ItemState, int] = dict.fromkeys(ITEM_STATES, 0)
        for row in self.db.execute(sql.STATE_COUNTS, (batch_id,)).fetchall():
            counts[row["state"]] = row["n"]
        return counts

    def oldest_runnable(self, batch_id: str, at: str) -> str | None:
        """When the batch's longest-waiting runnable item was queued (not waiting out a backoff at
        ``at``): the first such row of the queued-age index, past only the delayed ones before it."""
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
        """(object path, friendly path) of the batch's succeeded items that own their friendly
        name: no succeeded item of a batch that has not expired claimed it later (the rule
        ``reconcile`` checks names by). Empty for an expired batch."""
        rows = self.db.execute(sql.OWNED_NAMES, (batch_id,)).fetchall()
        return [(r["object_path"], r["friendly_path"]) for r in rows]

    def publishes_at(self, friendly_path: str) -> list[tuple[str, str | None]]:
        """(object path, name version) of what thumbctl published last at ``friendly_path``, from the
        name's record (whatever became of the batch that published it since): empty when thumbctl
        has published nothing there. The version is None for a publish recorded before versions were."""
        rows = self.db.execute(sql.PUBLISHES_AT, (friendly_path,)).fetchall()
        return [(r["object_path"], r["name_version"]) for r in rows]

    def released_at(self, friendly_path: str) -> str | None:
        """When ``thumbctl release`` gave ``friendly_path`` to the user; None while it is thumbctl's
        (or was never published)."""
        return self.db.scalar(sql.RELEASED_AT, (friendly_path,))

    def failed_since(self, at: str, batch_id: str | None) -> int:
        """How many items (of one batch, or of any) moved to ``failed`` at or after ``at``."""
        scope = [batch_id] if batch_id else []
        return int(self.db.scalar(sql.FAILED_SINCE, [at, *scope], scope=len(scope)))

    def batches_touched_since(self, at: str) -> list[str]:
        """Ids of batches with an event at or after ``at``."""
        rows = self.db.execute(sql.BATCHES_TOUCHED_SINCE, (at,)).fetchall()
        return [r["batch_id"] for r in rows]

    def items(self, batch_id: str, *, state: str | None = None) -> list[ItemView]:
        """The items of a batch (or those in ``state``), in the order they were recorded."""
        params = self._items_params(batch_id, state)
        rows = self.db.execute(sql.ITEMS, params, scope=len(params) - 1).fetchall()
        return [item_view(row, params[0]) for row in rows]

    @direct  # the listing is read by the caller's block
    @contextmanager
    def streamed_items(self, batch_id: str, *, state: str | None = None) -> Iterator[Iterator[ItemView]]:
        """:meth:`items` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot."""
        with self.db.reading():
            params = self._items_params(batch_id, state)
            with self.db.stream(sql.ITEMS, params, scope=len(params) - 1) as rows:
                yield (item_view(row, params[0]) for row in rows)

    def _items_params(self, batch_id: str, state: str | None) -> list[object]:
        return [self.resolve_batch_id(batch_id), *([state] if state is not None else [])]

    def events(self, batch_id: str, *, item_id: str | None = None) -> list[EventView]:
        """The transition log of a batch (or of one item of it), in commit order."""
        params = self._events_params(batch_id, item_id)
        return [_event_view(row) for row in self.db.execute(sql.EVENTS, params, scope=len(params) - 1).fetchall()]

    def events_after(self, batch_id: str, seq: int, *, item_id: str | None = None) -> list[EventView]:
        """The next events (at most 500) of a batch (or one item of it) after event ``seq``."""
        batch_id, *item = self._events_params(batch_id, item_id)
        params = [batch_id, seq, *item]
        return [_event_view(r) for r in self.db.execute(sql.EVENTS_AFTER, params, scope=len(item)).fetchall()]

    @direct  # the listing is read by the caller's block
    @contextmanager
    def streamed_events(self, batch_id: str, *, item_id: str | None = None) -> Iterator[Iterator[EventView]]:
        """:meth:`events` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot. An unknown
        batch or item raises on entering, before anything is listed."""
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
        """Item id -> upright (width, height) of its source, for items whose header was read at submit
        (a size that is no whole number, a damaged row reconcile reports, is left out: the page does without)."""
        batch_id = self.resolve_batch_id(batch_id)
        rows = self.db.execute(sql.SOURCE_SIZES, (batch_id,)).fetchall()
        sound = [r for r in rows if is_number(r["source_width"]) and is_number(r["source_height"])]
        return {r["item_id"]: (r["source_width"], r["source_height"]) for r in sound}

    def workers(self, batch_id: str | None) -> list[WorkerActivity]:
        """Each live lease: its owner, first item, its ratios (each once, whatever the sizes and
        formats of its derivatives) and since when."""
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
