"""Read-only projections for live views and statistics: what is running, how fast, what failed.

Every figure is derived from item rows and the event log, never from counters
kept elsewhere, so any process reading the ledger sees the same numbers.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from ..models import Activity, WorkerActivity
from .follow import Follower
from .timefmt import iso

_TERMINAL = "('succeeded', 'failed', 'cancelled')"


@dataclass(frozen=True)
class CancelTimes:
    """When a batch's cancel was requested, first observed by an item, and fully finalized."""

    batch_id: str
    requested_at: str
    observed_at: str | None
    finalized_at: str | None


@dataclass(frozen=True)
class RenderFacts:
    """One succeeded item's render record (the result the worker stored)."""

    batch_id: str
    source: str
    ratio: str
    attempt: int
    dedup: bool
    result: dict[str, object] | None


@dataclass(frozen=True)
class StatsFacts:
    """Raw figures of a window ``[since, now]``; :mod:`thumbctl.stats` turns them into a report."""

    now: float
    since: float
    runnable: int
    delayed: int
    running: int
    oldest_runnable_at: str | None
    batches_admitted: int
    admitted: int
    claimed: int
    completed: dict[str, int]
    retries: dict[str, int]
    cancels: list[CancelTimes] = field(default_factory=list)
    renders: list[RenderFacts] = field(default_factory=list)


class Observation:
    """Mixin for :class:`~thumbctl.ledger.core.Ledger`: projections for progress and stats."""

    _conn: sqlite3.Connection
    clock: Callable[[], float]

    def follow(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Follower:
        """A :class:`~thumbctl.ledger.follow.Follower` of one batch (or of every batch) for a live
        view: each of its reads costs what changed since the last, not what the batch holds."""
        return Follower(self, batch_id, window=window, failures=failures)  # type: ignore[arg-type]

    def activity(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Activity:
        """Queue, throughput over the last ``window`` seconds, workers and recent failures, read once."""
        return self.follow(batch_id, window=window, failures=failures).read()[1]

    def _queue_figures(self, batch_id: str | None, at: str) -> tuple[int, int, int, str | None]:
        """Runnable, delayed (backoff) and running items, and when the oldest runnable one was queued."""
        scope, params = _scope(batch_id, "i")
        return self._conn.execute(
            "SELECT count(CASE WHEN i.state = 'queued' AND (i.not_before IS NULL OR i.not_before <= ?1) THEN 1 END), "
            "count(CASE WHEN i.state = 'queued' AND i.not_before > ?1 THEN 1 END), "
            "count(CASE WHEN i.state = 'running' THEN 1 END), "
            "min(CASE WHEN i.state = 'queued' AND (i.not_before IS NULL OR i.not_before <= ?1) THEN i.queued_at END) "
            "FROM items i JOIN batches b USING (batch_id) WHERE i.state IN ('queued', 'running') "
            f"AND (b.cancel_requested_at IS NULL OR i.state = 'running'){scope}",
            [at, *params],
        ).fetchone()

    def _workers(self, batch_id: str | None) -> list[WorkerActivity]:
        scope, params = _scope(batch_id, "i")
        rows = self._conn.execute(
            "SELECT i.lease_owner, min(i.item_id), group_concat(i.ratio, ' '), min(i.updated_at) "
            f"FROM items i WHERE i.state = 'running' AND i.lease_owner IS NOT NULL{scope} "
            "GROUP BY i.lease_owner, i.lease_token ORDER BY min(i.updated_at), i.lease_owner",
            params,
        ).fetchall()
        return [
            WorkerActivity(owner, item_id, tuple(ratios.split(" ")), since) for owner, item_id, ratios, since in rows
        ]

    def stats_facts(self, since: float, batch_id: str | None = None) -> StatsFacts:
        """The raw figures of the window from ``since`` to now, for one batch or all."""
        now = self.clock()
        runnable, delayed, running, oldest = self._queue_figures(batch_id, iso(now))
        start = iso(since)
        return StatsFacts(
            now=now,
            since=since,
            runnable=runnable,
            delayed=delayed,
            running=running,
            oldest_runnable_at=oldest,
            batches_admitted=self._count(
                "SELECT count(*) FROM batches b WHERE b.created_at >= ?" + _scope(batch_id, "b")[0], start, batch_id
            ),
            admitted=self._count_events("e.from_state IS NULL", start, batch_id),
            claimed=self._count_events("e.to_state = 'running'", start, batch_id),
            completed={
                state: self._count_events(f"e.from_state = 'running' AND e.to_state = '{state}'", start, batch_id)
                for state in ("succeeded", "failed", "cancelled")
            },
            retries=self._retries(start, batch_id),
            cancels=self._cancel_times(start, batch_id),
            renders=self._renders(start, batch_id),
        )

    def _count(self, sql: str, start: str, batch_id: str | None) -> int:
        return self._conn.execute(sql, [start, *_scope(batch_id, "b")[1]]).fetchone()[0]

    def _count_events(self, condition: str, start: str, batch_id: str | None) -> int:
        scope, params = _scope(batch_id, "e")
        sql = f"SELECT count(*) FROM events e WHERE e.at >= ? AND e.item_row IS NOT NULL AND {condition}{scope}"
        return self._conn.execute(sql, [start, *params]).fetchone()[0]

    def _retries(self, start: str, batch_id: str | None) -> dict[str, int]:
        """Per batch: items sent back to the queue after a failed attempt (automatic retries,
        rescued leases and ``thumbctl retry``)."""
        scope, params = _scope(batch_id, "e")
        rows = self._conn.execute(
            "SELECT e.batch_id, count(*) FROM events e WHERE e.at >= ? AND e.to_state = 'queued' "
            f"AND e.from_state IN ('running', 'failed'){scope} GROUP BY e.batch_id ORDER BY e.batch_id",
            [start, *params],
        ).fetchall()
        return dict(rows)

    def _cancel_times(self, start: str, batch_id: str | None) -> list[CancelTimes]:
        """Observed: the first running item that stopped after the request (queued items are
        cancelled in the request's own transaction, so they say nothing about workers); when
        nothing was running, the request itself. Finalized: the last item transition into a
        terminal state once no item is live."""
        scope, params = _scope(batch_id, "b")
        rows = self._conn.execute(
            "SELECT b.batch_id, b.cancel_requested_at, "
            "(SELECT min(e.at) FROM events e WHERE e.batch_id = b.batch_id AND e.item_row IS NOT NULL "
            f"AND e.from_state = 'running' AND e.to_state IN {_TERMINAL} AND e.at >= b.cancel_requested_at), "
            "(SELECT count(*) FROM items i WHERE i.batch_id = b.batch_id AND i.state IN ('queued', 'running')), "
            "(SELECT max(e.at) FROM events e WHERE e.batch_id = b.batch_id AND e.item_row IS NOT NULL "
            f"AND e.to_state IN {_TERMINAL}) "
            f"FROM batches b WHERE b.cancel_requested_at >= ?{scope} ORDER BY b.cancel_requested_at",
            [start, *params],
        ).fetchall()
        return [_cancel_times(*row) for row in rows]

    def _renders(self, start: str, batch_id: str | None) -> list[RenderFacts]:
        scope, params = _scope(batch_id, "i")
        rows = self._conn.execute(
            "SELECT i.batch_id, i.source, i.ratio, i.attempt, i.dedup, i.result FROM items i "
            f"WHERE i.state = 'succeeded' AND i.updated_at >= ?{scope} ORDER BY i.id",
            [start, *params],
        ).fetchall()
        return [
            RenderFacts(bid, source, ratio, attempt, bool(dedup), json.loads(result) if result else None)
            for bid, source, ratio, attempt, dedup, result in rows
        ]


def _cancel_times(
    batch_id: str, requested: str, first_stop: str | None, live: int, last_terminal: str | None
) -> CancelTimes:
    finalized = None if live else max(requested, last_terminal or requested)
    observed = first_stop or (None if live else requested)
    return CancelTimes(batch_id, requested, observed, finalized)


def _scope(batch_id: str | None, alias: str) -> tuple[str, list[object]]:
    """An extra ``AND alias.batch_id = ?`` condition and its parameter, when scoped to a batch."""
    if batch_id is None:
        return "", []
    return f" AND {alias}.batch_id = ?", [batch_id]
