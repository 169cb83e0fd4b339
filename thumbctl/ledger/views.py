"""The views port of the ledger: batch views, listings, and the read-only projections for live
views and statistics: what is running, how fast, what failed.

:class:`ViewsPort` is the protocol its readers are typed against, documented there once;
:class:`Views` implements it over SQL, for every backend (the batch views and listings in
:mod:`.batchviews`). Every figure is derived from item rows and the event log, never from counters
kept elsewhere, so any process reading the ledger sees the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from ..core.models import Activity, BatchView, EventView, ItemState, ItemView, WorkerActivity
from .batchviews import BatchViews
from .damage import Damage, json_object
from .follow import Follower
from .retry import restartable
from .sql import Query
from .sql import views as sql
from .timefmt import iso


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
    """Raw figures of a window ``[since, now]``; :mod:`thumbctl.review.stats` turns them into a report."""

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
    #: Succeeded items of the window whose stored result does not parse: counted, not measured.
    damaged: list[Damage] = field(default_factory=list)


class ViewsPort(Protocol):
    """The views port: batch views and listings, and the live projections of progress and stats,
    for status, events, the sheet, markup, progress, stats, the runner and the api. It only reads;
    every count is derived from item rows. Implemented over SQL by :class:`Views`."""

    def resolve_batch_id(self, text: str) -> str:
        """The full batch id for ``text``: an id, or an unambiguous prefix of one of at least 4
        characters, with or without its ``b_`` (``9450`` as a git short id: ``b_9450…``)."""

    def batch(self, batch_id: str, *, with_failures: bool = True) -> BatchView:
        """The current view of one batch, counts derived from its item rows."""

    def batch_settled(self, batch_id: str) -> bool:
        """No item of the batch is queued or running, i.e. the batch is terminal (see
        :func:`~thumbctl.core.models.batch_state`): a seek on the ``(batch_id, state)`` index, for
        waiting on a batch without counting its items on every poll."""

    def batches(self, limit: int = 20) -> list[BatchView]:
        """The most recent batches, newest first."""

    def state_counts(self, batch_id: str) -> dict[ItemState, int]:
        """Items of the batch by state, counted on the ``(batch_id, state)`` index."""

    def items(self, batch_id: str, *, state: str | None = None) -> list[ItemView]:
        """The items of a batch (or those in ``state``), in the order they were recorded."""

    def streamed_items(self, batch_id: str, *, state: str | None = None) -> AbstractContextManager[Iterator[ItemView]]:
        """:meth:`items` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot."""

    def events(self, batch_id: str, *, item_id: str | None = None) -> list[EventView]:
        """The transition log of a batch (or of one item of it), in commit order."""

    def streamed_events(
        self, batch_id: str, *, item_id: str | None = None
    ) -> AbstractContextManager[Iterator[EventView]]:
        """:meth:`events` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot. An unknown
        batch or item raises on entering, before anything is listed."""

    def events_after(self, batch_id: str, seq: int, *, item_id: str | None = None) -> list[EventView]:
        """The next events (at most 500) of a batch (or one item of it) after event ``seq``."""

    def source_sizes(self, batch_id: str) -> dict[str, tuple[int, int]]:
        """Item id -> upright (width, height) of its source, for items whose header was read at submit
        (a size that is no whole number, a damaged row reconcile reports, is left out: the page does without)."""

    def owned_friendly_names(self, batch_id: str) -> list[tuple[str, str]]:
        """(object path, friendly path) of the batch's succeeded items that own their friendly
        name: no succeeded item of a batch that has not expired claimed it later (the rule
        ``reconcile`` checks names by). Empty for an expired batch."""

    def publishes_at(self, friendly_path: str) -> list[tuple[str, str | None]]:
        """(object path, name version) of what thumbctl published last at ``friendly_path``, from the
        name's record (whatever became of the batch that published it since): empty when thumbctl
        has published nothing there. The version is None for a publish recorded before versions were."""

    def released_at(self, friendly_path: str) -> str | None:
        """When ``thumbctl release`` gave ``friendly_path`` to the user; None while it is thumbctl's
        (or was never published)."""

    def batches_touched_since(self, at: str) -> list[str]:
        """Ids of batches with an event at or after ``at``."""

    def failed_since(self, at: str, batch_id: str | None) -> int:
        """How many items (of one batch, or of any) moved to ``failed`` at or after ``at``."""

    def finished_by_host(self, host: str, at: str, batch_id: str | None) -> dict[ItemState, int]:
        """How many items (of one batch, or of any) the workers of ``host`` (a host identity, see
        :func:`thumbctl.core.proc.host_id`) moved to each final state at or after ``at``."""

    def oldest_runnable(self, batch_id: str, at: str) -> str | None:
        """When the batch's longest-waiting runnable item was queued (not waiting out a backoff at
        ``at``): the first such row of the queued-age index, past only the delayed ones before it."""

    def workers(self, batch_id: str | None) -> list[WorkerActivity]:
        """Each live lease: its owner, first item, its ratios (each once, whatever the sizes and
        formats of its derivatives) and since when."""

    def follow(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Follower:
        """A :class:`~thumbctl.ledger.follow.Follower` of one batch (or of every batch) for a live
        view: each of its reads costs what changed since the last, not what the batch holds."""

    def activity(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Activity:
        """Queue, throughput over the last ``window`` seconds, workers and recent failures, read once."""

    def stats_facts(self, since: float, batch_id: str | None = None) -> StatsFacts:
        """The raw figures of the window from ``since`` to now, for one batch or all."""


class Views(BatchViews):
    """The views port over SQL (:class:`ViewsPort`), on any backend."""

    @restartable
    def follow(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Follower:
        return Follower(self.db, self, batch_id, window=window, failures=failures)

    def activity(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Activity:
        return self.follow(batch_id, window=window, failures=failures).read()[1]

    def _queue_figures(self, batch_id: str | None, at: str) -> tuple[int, int, int, str | None]:
        """Runnable, delayed (backoff) and running items, and when the oldest runnable one was queued."""
        scope = _scope(batch_id)
        row = self.db.execute(sql.QUEUE_FIGURES, [at, at, at, *scope], scope=len(scope)).fetchone()
        return row["runnable"], row["delayed"], row["running"], row["oldest"]

    def stats_facts(self, since: float, batch_id: str | None = None) -> StatsFacts:
        now = self.db.clock()
        runnable, delayed, running, oldest = self._queue_figures(batch_id, iso(now))
        start = iso(since)
        damaged: list[Damage] = []
        return StatsFacts(
            now=now,
            since=since,
            runnable=runnable,
            delayed=delayed,
            running=running,
            oldest_runnable_at=oldest,
            batches_admitted=self._count(sql.BATCHES_ADMITTED, start, batch_id),
            admitted=self._count(sql.ADMITTED, start, batch_id),
            claimed=self._count(sql.CLAIMED, start, batch_id),
            completed={
                state: self._count(sql.COMPLETED, start, batch_id, state.value)
                for state in (ItemState.SUCCEEDED, ItemState.FAILED, ItemState.CANCELLED)
            },
            retries=self._retries(start, batch_id),
            cancels=self._cancel_times(start, batch_id),
            renders=self._renders(start, batch_id, damaged),
            damaged=damaged,
        )

    def _count(self, query: Query, start: str, batch_id: str | None, *values: object) -> int:
        scope = _scope(batch_id)
        return self.db.scalar(query, [start, *values, *scope], scope=len(scope))

    def _retries(self, start: str, batch_id: str | None) -> dict[str, int]:
        """Per batch: items sent back to the queue after a failed attempt (automatic retries,
        rescued leases and ``thumbctl retry``)."""
        scope = _scope(batch_id)
        rows = self.db.execute(sql.RETRIES, [start, *scope], scope=len(scope)).fetchall()
        return {r["batch_id"]: r["n"] for r in rows}

    def _cancel_times(self, start: str, batch_id: str | None) -> list[CancelTimes]:
        """Observed: the first running item that stopped after the request (queued items are
        cancelled in the request's own transaction, so they say nothing about workers); when
        nothing was running, the request itself. Finalized: the last item transition into a
        terminal state once no item is live."""
        scope = _scope(batch_id)
        rows = self.db.execute(sql.CANCEL_TIMES, [start, *scope], scope=len(scope)).fetchall()
        return [
            _cancel_times(r["batch_id"], r["cancel_requested_at"], r["first_stop"], r["live"], r["last_terminal"])
            for r in rows
        ]

    def _renders(self, start: str, batch_id: str | None, damaged: list[Damage]) -> list[RenderFacts]:
        """The window's succeeded items with their results; one whose result does not parse is
        added to ``damaged`` and kept without a result (as a reused output is)."""
        scope = _scope(batch_id)
        rows = self.db.execute(sql.RENDERS, [start, *scope], scope=len(scope)).fetchall()
        renders = []
        for r in rows:
            try:
                result = json_object(r["result"])
            except ValueError as exc:
                damaged.append(Damage("items", str(r["id"]), "result", str(exc), r["batch_id"], r["item_id"]))
                result = None
            renders.append(RenderFacts(r["batch_id"], r["source"], r["ratio"], r["attempt"], bool(r["dedup"]), result))
        return renders


def _cancel_times(
    batch_id: str, requested: str, first_stop: str | None, live: int, last_terminal: str | None
) -> CancelTimes:
    finalized = None if live else max(requested, last_terminal or requested)
    observed = first_stop or (None if live else requested)
    return CancelTimes(batch_id, requested, observed, finalized)


def _scope(batch_id: str | None) -> list[object]:
    """The parameter of the condition on one batch (none for the whole ledger)."""
    return [] if batch_id is None else [batch_id]
