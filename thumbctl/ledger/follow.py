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

from ..models import Activity, BatchView, ItemState, RecentFailure
from .backend import Backend
from .states import ALL, FAILED, QUEUED, RUNNING, TERMINAL
from .timefmt import iso, parse_iso
from .views import Views

#: The window's events: claims, and completions (a running item reaching a terminal state).
_CLAIM = f"e.to_state = {RUNNING}"
_COMPLETION = f"(e.from_state = {RUNNING} AND e.to_state IN {TERMINAL})"
_FAILURE = f"e.error_code IS NOT NULL AND e.to_state IN ({FAILED}, {QUEUED})"
#: States followed per batch when following every batch: only the live ones are shown.
_LIVE_STATES = (ItemState.QUEUED, ItemState.RUNNING)


class Follower:
    """Progress of one batch (``batch_id``) or of every batch (None), read again and again.

    Holds what it derived from the ledger so far (counts by batch and state, the last sequence
    number read, the window's claims and completions, the latest failures), never a figure of
    its own making. Not shared across processes: each watcher follows the file itself.
    """

    def __init__(
        self, db: Backend, views: Views, batch_id: str | None, *, window: float = 30.0, failures: int = 3
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
            upto = self.db.scalar("SELECT coalesce(max(seq), 0) FROM events")
            if self._seq is None:
                self._start(upto, iso(now - self.window))
            elif upto > self._seq:
                self._catch_up(self._seq, upto)
            self._seq = upto
            return self._view(), self._activity(now)

    # -- the first read: rows and the indexed log ----------------------------------------------

    def _start(self, upto: int, window_start: str) -> None:
        self._counts = self._row_counts()
        scope, params = self._scope("batch_id")
        sql = f"SELECT batch_id FROM batches WHERE cancel_requested_at IS NOT NULL{scope}"
        self._cancelled = {r["batch_id"] for r in self.db.execute(sql, params).fetchall()}
        scope, params = self._scope("+e.batch_id")  # not on the batch's index: that would walk all its events
        # On the time index: only the window's events, whatever the size of the batch.
        self._recent.extend(
            (r["at"], r["n"])
            for r in self.db.execute(
                f"SELECT e.at, count(CASE WHEN {_COMPLETION} THEN 1 END) AS n FROM events e INDEXED BY events_at "
                f"WHERE e.at >= ? AND e.seq <= ? AND ({_CLAIM} OR {_COMPLETION}){scope} "
                "GROUP BY e.at ORDER BY e.at",
                [window_start, upto, *params],
            ).fetchall()
        )
        # On the partial index of events with an error code: only failures are walked.
        self._failures = self._failure_rows(
            f"FROM events e INDEXED BY events_errors JOIN items i ON i.id = e.item_row "
            f"WHERE {_FAILURE} AND e.seq <= ?{scope}",
            [upto, *params],
        )

    def _row_counts(self) -> dict[str, dict[ItemState, int]]:
        """Items by batch and state, counted from the rows: every state of the followed batch, or
        the live states of every batch (on the partial index of queued items, and the few running)."""
        if self.batch_id is not None:
            return {self.batch_id: self.views.state_counts(self.batch_id)}
        counts: dict[str, dict[ItemState, int]] = {}
        for state, index in ((ItemState.QUEUED, "INDEXED BY items_queued_age"), (ItemState.RUNNING, "")):
            for r in self.db.execute(
                f"SELECT batch_id, count(*) AS n FROM items {index} WHERE state = '{state}' GROUP BY batch_id"
            ).fetchall():
                counts.setdefault(r["batch_id"], dict.fromkeys(_LIVE_STATES, 0))[state] = r["n"]
        return counts

    # -- later reads: only the events after the last one seen ---------------------------------

    def _catch_up(self, after: int, upto: int) -> None:
        scope, params = self._scope("e.batch_id")
        span = f"e.seq > ? AND e.seq <= ?{scope}"
        bounds = [after, upto, *params]
        for r in self.db.execute(
            f"SELECT e.batch_id, e.from_state, e.to_state, count(*) AS n FROM events e WHERE {span} "
            f"AND e.item_row IS NOT NULL AND e.to_state IN {ALL} GROUP BY 1, 2, 3",
            bounds,
        ).fetchall():
            self._move(r["batch_id"], r["from_state"], r["to_state"], r["n"])
        self._cancelled.update(
            r["batch_id"]
            for r in self.db.execute(
                f"SELECT DISTINCT e.batch_id FROM events e WHERE {span} AND e.item_row IS NULL "
                "AND e.to_state = 'cancel_requested'",
                bounds,
            ).fetchall()
        )
        self._recent.extend(
            (r["at"], r["n"])
            for r in self.db.execute(
                f"SELECT e.at, count(CASE WHEN {_COMPLETION} THEN 1 END) AS n FROM events e "
                f"WHERE {span} AND ({_CLAIM} OR {_COMPLETION}) GROUP BY e.at ORDER BY e.at",
                bounds,
            ).fetchall()
        )
        newer = self._failure_rows(
            f"FROM events e JOIN items i ON i.id = e.item_row WHERE {_FAILURE} AND {span}", bounds
        )
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

    def _failure_rows(self, source: str, params: list[object]) -> list[RecentFailure]:
        rows = self.db.execute(
            f"SELECT e.at, i.item_id, i.ratio, e.error_code, e.detail, e.to_state = {QUEUED} AS retry "
            f"{source} ORDER BY e.seq DESC LIMIT ?",
            [*params, self.failures],
        ).fetchall()
        return [
            RecentFailure(r["at"], r["item_id"], r["ratio"], r["error_code"], r["detail"], bool(r["retry"]))
            for r in rows
        ]

    def _scope(self, column: str) -> tuple[str, list[object]]:
        """An ``AND column = ?`` condition on the followed batch and its parameter (none for every batch)."""
        if self.batch_id is None:
            return "", []
        return f" AND {column} = ?", [self.batch_id]

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
        return Activity(
            at=at,
            runnable=queued - delayed,
            delayed=delayed,
            running=sum(counts[ItemState.RUNNING] for counts in self._counts.values()),
            queue_age_seconds=max(0.0, now - parse_iso(oldest)) if oldest else None,
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
            return self.db.scalar(
                "SELECT count(*) FROM items INDEXED BY items_queued_by_batch "
                f"WHERE batch_id = ? AND state = {QUEUED} AND not_before > ?",
                (self.batch_id, at),
            )
        return self.db.scalar(
            f"SELECT count(*) FROM items i INDEXED BY items_runnable WHERE i.state = {QUEUED} AND i.not_before > ? "
            "AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.batch_id = i.batch_id "
            "AND b.cancel_requested_at IS NOT NULL)",
            (at,),
        )

    def _window(self, now: float) -> tuple[int, float]:
        """Completions in the last ``window`` seconds and the span they count over: the window,
        or less when the first claim or completion in it came later (see ``Ledger.activity``)."""
        start = iso(now - self.window)
        while self._recent and self._recent[0][0] < start:
            self._recent.popleft()
        inside = [(at, n) for at, n in self._recent if at >= start]  # a clock set back: out of order
        done = sum(n for _, n in inside)
        span = self.window if not inside else min(self.window, now - parse_iso(min(at for at, _ in inside)))
        return done, max(span, 1.0)
