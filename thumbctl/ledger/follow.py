"""Following a batch (or every batch) live, at a cost per read that does not grow with the batch.

A live view reads the ledger twice a second. Counting item rows costs a walk over every item each
time (seconds at a million items), so a :class:`Follower` counts them once, in the same read
transaction as the transition log's last sequence number, and from then on reads only the events
after the last one it saw: each item event moves one item from its ``from_state`` to its
``to_state``. Every figure stays derived from the ledger, item rows first and then the log that
records every item change (DESIGN section 7): the counts equal a full recount of the rows at the
same sequence number, and a read costs O(changes since the last read), not O(items).

Claims and completions of the throughput window and the latest failures are kept the same way:
read once from the indexed log, then extended from the events after the last sequence number.
"""

from __future__ import annotations

from collections import deque

from ..core.models import Activity, BatchView, ItemState, RecentFailure
from .backend import Backend
from .batchviews import BatchViews
from .sql import Query
from .sql import views as sql
from .timefmt import iso, stored_seconds

#: States followed per batch when following every batch: only the live ones are shown.
_LIVE_STATES = (ItemState.QUEUED, ItemState.RUNNING)


class Follower:
    """Progress of one batch (``batch_id``) or of every batch (None), read again and again.

    Holds what it derived from the ledger so far (counts by batch and state, the last sequence
    number read, the window's claims and completions, the latest failures), never a figure of
    its own making. Not shared across processes: each watcher follows the file itself.
    """

    def __init__(
        self, db: Backend, views: BatchViews, batch_id: str | None, *, window: float = 30.0, failures: int = 3
    ) -> None:
        self.db = db
        self.views = views
        self.batch_id = batch_id
        self.window = window
        self.failures = failures
        self._seq: int | None = None
        self._counts: dict[str, dict[ItemState, int]] = {}
        self._cancelled: set[str] = set()
        #: (time, completions) of each commit time in the window with a claim or a completion.
        self._recent: deque[tuple[str, int]] = deque()
        self._failures: list[RecentFailure] = []

    def read(self) -> tuple[BatchView | None, Activity]:
        """The batch's view (None when following every batch) and its activity, as of now."""
        with self.db.reading():
            now = self.db.clock()
            upto = self.db.scalar(sql.LAST_SEQ)
            if self._seq is None:
                self._start(upto, iso(now - self.window))
            elif upto > self._seq:
                self._catch_up(self._seq, upto)
            self._seq = upto
            return self._view(), self._activity(now)

    # -- the first read: rows and the indexed log ----------------------------------------------

    def _start(self, upto: int, window_start: str) -> None:
        self._counts = self._row_counts()
        scope = self._scope()
        cancelled = self.db.execute(sql.CANCELLED_BATCHES, scope, scope=len(scope)).fetchall()
        self._cancelled = {r["batch_id"] for r in cancelled}
        self._recent.extend(
            (r["at"], r["n"])
            for r in self.db.execute(sql.WINDOW_START, [window_start, upto, *scope], scope=len(scope)).fetchall()
        )
        self._failures = self._failure_rows(sql.FAILURES_START, [upto, *scope])

    def _row_counts(self) -> dict[str, dict[ItemState, int]]:
        """Items by batch and state, counted from the rows: every state of the followed batch, or
        the live states of every batch (on the partial index of queued items, and the few running)."""
        if self.batch_id is not None:
            return {self.batch_id: self.views.state_counts(self.batch_id)}
        counts: dict[str, dict[ItemState, int]] = {}
        for state, query in ((ItemState.QUEUED, sql.QUEUED_BY_BATCH), (ItemState.RUNNING, sql.RUNNING_BY_BATCH)):
            for r in self.db.execute(query).fetchall():
                counts.setdefault(r["batch_id"], dict.fromkeys(_LIVE_STATES, 0))[state] = r["n"]
        return counts

    # -- later reads: only the events after the last one seen ---------------------------------

    def _catch_up(self, after: int, upto: int) -> None:
        scope = self._scope()
        bounds = [after, upto, *scope]
        for r in self.db.execute(sql.MOVES_SINCE, bounds, scope=len(scope)).fetchall():
            self._move(r["batch_id"], r["from_state"], r["to_state"], r["n"])
        self._cancelled.update(r["batch_id"] for r in self.db.execute(sql.CANCELS_SINCE, bounds, scope=len(scope)))
        self._recent.extend(
            (r["at"], r["n"]) for r in self.db.execute(sql.WINDOW_SINCE, bounds, scope=len(scope)).fetchall()
        )
        newer = self._failure_rows(sql.FAILURES_SINCE, bounds)
        self._failures = (newer + self._failures)[: self.failures]

    def _move(self, batch_id: str, from_state: str | None, to_state: str, n: int) -> None:
        counts = self._counts.get(batch_id)
        if counts is None:
            if self.batch_id is not None:
                return
            counts = self._counts[batch_id] = dict.fromkeys(_LIVE_STATES, 0)
        if from_state in counts:
            counts[from_state] -= n
        if to_state in counts:
            counts[to_state] += n

    def _failure_rows(self, query: Query, params: list[object]) -> list[RecentFailure]:
        rows = self.db.execute(query, [*params, self.failures], scope=len(self._scope())).fetchall()
        return [
            RecentFailure(r["at"], r["item_id"], r["ratio"], r["error_code"], r["detail"], bool(r["retry"]))
            for r in rows
        ]

    def _scope(self) -> list[object]:
        """The parameter of the condition on the followed batch (none when following every batch)."""
        return [] if self.batch_id is None else [self.batch_id]

    # -- projections ----------------------------------------------------------------------------

    def _view(self) -> BatchView | None:
        if self.batch_id is None:
            return None
        return self.views.batch_view(self.views.batch_row(self.batch_id), False, dict(self._counts[self.batch_id]))

    def _activity(self, now: float) -> Activity:
        at = iso(now)
        live = [b for b, counts in self._counts.items() if b not in self._cancelled]
        queued = sum(self._counts[b][ItemState.QUEUED] for b in live)
        delayed = self._delayed(at)
        oldest = min(
            (o for b in live if self._counts[b][ItemState.QUEUED] and (o := self.views.oldest_runnable(b, at))),
            default=None,
        )
        done, span = self._window(now)
        queued_at = stored_seconds(oldest) if oldest else None
        return Activity(
            at=at,
            runnable=queued - delayed,
            delayed=delayed,
            running=sum(counts[ItemState.RUNNING] for counts in self._counts.values()),
            queue_age_seconds=None if queued_at is None else max(0.0, now - queued_at),
            completed_recently=done,
            window_seconds=span,
            workers=tuple(self.views.workers(self.batch_id)),
            recent_failures=tuple(self._failures),
        )

    def _delayed(self, at: str) -> int:
        """Queued items waiting out a retry backoff, of batches without a cancel request: walked
        on an index of queued items by ``not_before`` (the batch's, or the runnable index), so
        only delayed items are read."""
        if self.batch_id is not None:
            if self.batch_id in self._cancelled:
                return 0
            return self.db.scalar(sql.DELAYED_OF_BATCH, (self.batch_id, at))
        return self.db.scalar(sql.DELAYED, (at,))

    def _window(self, now: float) -> tuple[int, float]:
        """Completions in the last ``window`` seconds and the span they count over: the window,
        or less when the first claim or completion in it came later (see ``Ledger.activity``)."""
        start = iso(now - self.window)
        while self._recent and self._recent[0][0] < start:
            self._recent.popleft()
        inside = [(at, n) for at, n in self._recent if at >= start]  # a clock set back: out of order
        done = sum(n for _, n in inside)
        times = (stored_seconds(at) for at, _ in inside)
        first = min((t for t in times if t is not None), default=None)  # a damaged time is left out
        span = self.window if first is None else min(self.window, now - first)
        return done, max(span, 1.0)
