"""The queue port of the ledger: claims, leases, heartbeats, publish, failure, rescue.

:class:`QueuePort` is the protocol the workers and the pool are typed against, documented there
once; :class:`Queue` implements it over SQL, for every backend (the rescue a claimer runs first is
in :mod:`.rescue`, the per-name hold in :mod:`.namelocks`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..core.errors import UsageError
from ..core.models import ItemState
from .backend import Backend, Row
from .damage import needed_batch_document
from .namelocks import NameLocks, record_name
from .rescue import LeaseRescue
from .sql import queue as sql
from .timefmt import iso
from .transitions import Transitions

DelayFor = Callable[[int], float]


class Publication(NamedTuple):
    """What a publish effect did: a note for the ``succeeded`` event (``object_mismatch: …``) and
    the version the name was published at, recorded with the item (None: none known)."""

    note: str | None = None
    version: str | None = None


#: Items a claim takes beyond one per distinct derivative key of its source. Items sharing a key
#: are rendered once per claim and published each; the rest stay queued for the next claimer,
#: so one photo behind thousands of item ids is spread over the workers in slices.
CLAIM_SHARED_ITEMS = 64
#: Claimable items of a source read in one statement; a source with more is stepped through key by key.
CLAIM_PEEK = 2 * (1 + CLAIM_SHARED_ITEMS)
#: Batches whose claim settings a queue keeps read.
BATCHES_KEPT = 64


@dataclass(frozen=True)
class ClaimedItem:
    row: int
    item_id: str
    ratio: str
    attempt: int
    derivative_key: str
    object_path: str
    friendly_path: str
    focus: tuple[float, float] | None
    size: int = 512
    format: str = "jpeg"
    #: ``cover`` or ``contain`` (see :mod:`thumbctl.imaging.fit`).
    fit: str = "cover"


@dataclass(frozen=True)
class Claim:
    """Claimed items of one source of one batch, under one lease: one of each distinct
    derivative key, plus at most :data:`CLAIM_SHARED_ITEMS` more sharing those keys."""

    token: str
    owner: str
    batch_id: str
    out_dir: str
    #: The batch's source folder (its real path); the source is opened only below it.
    source_root: str
    source: str
    source_digest: str
    source_format: str
    source_width: int
    source_height: int
    profile: dict[str, object]
    limits: dict[str, Any]
    items: tuple[ClaimedItem, ...]


def claimed_item(r: Row) -> ClaimedItem:
    """A claimed item from its row (the items' columns a claim reads)."""
    focus = (r["focus_x"], r["focus_y"]) if r["focus_x"] is not None else None
    return ClaimedItem(
        r["id"],
        r["item_id"],
        r["ratio"],
        r["attempt"],
        r["derivative_key"],
        r["object_path"],
        r["friendly_path"],
        focus,
        r["size"],
        r["format"],
        r["fit"] or "cover",
    )


@dataclass(frozen=True)
class QueueState:
    """Live items in a scope (one batch or the whole ledger)."""

    runnable: int
    delayed: int
    running: int
    next_not_before: str | None

    @property
    def idle(self) -> bool:
        return self.runnable == 0 and self.delayed == 0 and self.running == 0


class QueuePort(Protocol):
    """The queue port: the worker-facing transitions of one ledger, for the workers and the pool.

    Every method is one write transaction of the ledger (or one read). Every commit made on behalf
    of a worker is conditional on its lease token, so a worker whose lease was rescued can no
    longer change anything. Implemented over SQL by :class:`Queue`, for every backend.
    """

    def claim(
        self,
        owner: str,
        *,
        batch_id: str | None = None,
        lease_seconds: float = 30.0,
        is_dead: Callable[[str], bool] = ...,
        delay_for: DelayFor = ...,
    ) -> Claim | None:
        """Claim runnable items of the next source, or return None: one of each distinct
        derivative key (so the source is decoded once for all of them) and at most
        :data:`CLAIM_SHARED_ITEMS` more that share those keys. Batches with a cancel
        request are never claimed from.

        The claimer first rescues expired leases and those of owners ``is_dead`` finds gone
        (``delay_for`` an attempt gives the backoff of a transient failure; by default no owner is
        taken for dead and no retry waits), fails queued items whose batch deadline has passed and
        cancels queued items of batches with a cancel request, so no separate janitor is needed;
        whether there is any to rescue is read before the transaction, so a claim that finds none
        does no rescue work. The claim starts the decode stage: its items are timed from now
        (``stage_started_at``).
        """

    def heartbeat(self, token: str, lease_seconds: float = 30.0) -> int:
        """Extend a lease; returns how many of its items it still holds (0: lost)."""

    def start_stage(self, claim: Claim, rows: list[int]) -> None:
        """From now on only ``rows`` of the claim (the items of one render) are timed by
        ``--item-timeout``; its other running items wait untimed. ``[]``: between stages.
        One statement, deferred: nothing is read, so a server ledger takes one round trip."""

    def cancel_if_requested(self, claim: Claim) -> bool:
        """At a checkpoint: if the batch has a cancel request, end the claim's items
        ``cancelled`` and return True."""

    def release(self, claim: Claim, reason: str) -> int:
        """Give the claim back without counting an attempt: its held items return to ``queued``
        with the attempt number they had before it (the worker could not reach the ledger, not a
        render that failed), or end ``cancelled`` when the batch's cancel was requested (read under
        the batch row's share lock: see :data:`~.sql.queue.SETTLEABLE`). Returns how many items
        were released."""

    def publish(
        self,
        claim: Claim,
        item: ClaimedItem,
        effect: Callable[[], Publication | None],
        *,
        result: dict[str, object] | None = None,
    ) -> str:
        """The race rule: check the cancel flag and the lease, run ``effect`` (link the
        object and the friendly name) and mark ``succeeded`` (recording the name and ``result``),
        all in one write transaction.
        ``effect`` may return a :class:`Publication`: its note (``object_mismatch: …``) goes into the
        ``succeeded`` event's detail (the item itself carries no error detail), its version is
        recorded with the item.

        Returns ``succeeded``, ``cancelled`` (the cancel committed first), ``late`` (the
        batch deadline passed: the item failed ``deadline_exceeded``) or ``lost`` (the lease
        was rescued; nothing was published).
        """

    def fail(self, claim: Claim, rows: list[int], code: str, detail: str, delay_for: DelayFor) -> dict[int, str]:
        """Settle failed items: transient ones go back to ``queued`` with a persisted
        ``not_before`` while attempts and the deadline allow; the rest end ``failed``.
        Returns the new state of each row the claim still held.
        """

    def retry_failed(self, batch_id: str) -> int:
        """Put a batch's failed items back to ``queued`` with a fresh attempt budget.

        The one non-monotonic transition, logged like any other. Items that failed at
        admission (nothing was ever accepted to render: unreadable, outside the root, not an
        image) are left as they are; submitting again is the way to retry those. Returns how
        many items were requeued.
        """

    def rescue_leases(self, is_dead: Callable[[str], bool], delay_for: DelayFor) -> int:
        """Requeue (or fail, when the attempts are spent) items whose lease expired or
        whose owner process is gone; returns how many were rescued."""

    def queue_state(self, batch_id: str | None = None) -> QueueState:
        """Live items in scope: runnable now, delayed by backoff, running."""

    def queue_idle(self, batch_id: str | None = None) -> bool:
        """No live item in scope (what :attr:`QueueState.idle` says), found without counting:
        each query stops at the first live item, so a worker whose claim came back empty asks
        this at the same cost whatever the length of the queue."""

    def overdue_owners(self, seconds: float) -> list[str]:
        """Lease owners with a running item whose stage (the decode of its source, or its render
        and publish) started more than ``seconds`` ago."""

    def stop_overdue(self, owner: str, seconds: float, code: str, detail: str) -> int:
        """End ``owner``'s items whose stage has run over ``seconds`` ``failed`` with ``code`` (a
        permanent verdict) and put its other running items back to ``queued`` without spending an
        attempt (their render never started; ``cancelled`` when their batch's cancel was requested),
        all before the worker is stopped. Returns how many failed: 0 when the stage ended meanwhile
        (then the worker must be left alone)."""

    def publishing_name(self, friendly_path: str) -> AbstractContextManager[None]:
        """Hold the thumbnail name ``friendly_path`` (an absolute path: OUT and the name) against
        every other process publishing at it, from the name check through the link to the commit
        that records who published it: otherwise two items of different batches (workers on two
        hosts) can both find the name free, or one can find the other's link before that is
        recorded and take it for a file thumbctl did not publish.

        Inside a write transaction (a worker's publish) the hold lasts until that transaction
        ends, whatever this block does; outside one (a submit relinking its names) it is a write
        transaction of its own. PostgreSQL: a transaction advisory lock on the name. SQLite: the
        write transaction itself, as it excludes every other writer of the ledger."""

    def record_name_version(
        self, batch_id: str, friendly_path: str, version: str | None, outcome: str | None = None
    ) -> None:
        """Record the version publishing returned at ``friendly_path`` for the batch's succeeded item
        there, and the name's own record: inside the write transaction of :meth:`publishing_name`
        when one is open. An ``outcome`` of ``replaced`` or ``overwritten`` (an output reused at a
        name that showed other bytes) is flagged on the item as a render's is, so the batch counts it."""


class Queue(NameLocks, LeaseRescue):
    """The queue port over SQL (:class:`QueuePort`), on any backend."""

    def __init__(self, db: Backend, log: Transitions) -> None:
        self.db = db
        self.log = log
        self._batches: dict[str, Row] = {}
        self._alive: dict[Callable[[str], bool], dict[str, float]] = {}

    # -- claims and leases ------------------------------------------------------------

    def claim(
        self,
        owner: str,
        *,
        batch_id: str | None = None,
        lease_seconds: float = 30.0,
        is_dead: Callable[[str], bool] = lambda owner: False,
        delay_for: DelayFor = lambda attempt: 0.0,
    ) -> Claim | None:
        due = self._rescue_due(is_dead)
        with self.db.write() as now:
            at = iso(now)
            if due.needed(at) and self.db.try_exclusive("rescue"):  # one claimer rescues at a time
                self._rescue(now, due.dead, delay_for)
                self._expire_deadlines(at)
                self._finish_cancels(at)
            rows = self._next_claimable(at, batch_id)
            if not rows:
                return None
            token = secrets.token_hex(12)
            taken = self.log.take(at, rows, owner, token, iso(now + lease_seconds))
            return self._claim_of(token, owner, taken)

    def _next_claimable(self, at: str, batch_id: str | None) -> list[int]:
        """The rows of the next source no other claimer is taking: the source is held exclusively
        until this claim commits, so two claimers running side by side never split one source
        between them (each would decode it); a source another claimer holds is passed over."""
        passed: list[tuple[str, str]] = []
        while (pick := self._next_source(at, batch_id, passed)) is not None:
            rows = self._claimable_rows(at, *pick)
            if rows:
                return rows
            passed.append(pick)
        return []

    def _next_source(self, at: str, batch_id: str | None, passed: list[tuple[str, str]]) -> tuple[str, str] | None:
        """The source of the next runnable item of a batch without a cancel request (other than the
        ``passed`` ones), held for this transaction: retries that are due first, then the oldest
        fresh item, in one statement (see :data:`~.sql.queue.NEXT_SOURCE`). Nothing but the source
        is locked here: :meth:`_claimable_rows` locks the rows it takes."""
        passed_values = [value for pick in passed for value in pick]
        if batch_id:
            query, scope = sql.NEXT_SOURCE_OF_BATCH, [batch_id]
        else:
            query, scope = sql.NEXT_SOURCE, []
        params = [at, *scope, *passed_values, *scope, *passed_values]
        row = self.db.execute(query, params, passed=len(passed)).fetchone()
        return None if row is None else (row["batch_id"], row["source"])

    def _claimable_rows(self, at: str, batch_id: str, source: str) -> list[int]:
        """The first runnable item of each distinct derivative key of the source, then up to
        :data:`CLAIM_SHARED_ITEMS` more of those keys; items another claimer holds are skipped.
        A source of up to :data:`CLAIM_PEEK` claimable items is read in one statement; a larger
        one (one photo behind thousands of item ids) is stepped through key by key on the
        partial index of queued items (a few seeks per key), so a claim never reads every
        queued item of a source: about 3 ms with 100,000 items queued on two sources."""
        peeked = self.db.execute(sql.CLAIMABLE_OF_SOURCE, (batch_id, source, at, CLAIM_PEEK)).fetchall()
        if len(peeked) == CLAIM_PEEK:
            return self._claimable_rows_by_key(at, batch_id, source)
        firsts: list[int] = []
        shared: list[int] = []
        key = None
        for row in peeked:
            if row["derivative_key"] != key:
                key = row["derivative_key"]
                firsts.append(row["id"])
            elif len(shared) < CLAIM_SHARED_ITEMS:
                shared.append(row["id"])
        return firsts + shared

    def _claimable_rows_by_key(self, at: str, batch_id: str, source: str) -> list[int]:
        firsts: list[int] = []
        shared: list[int] = []
        key = ""
        while True:
            key = self.db.scalar(sql.NEXT_KEY, (batch_id, source, key))
            if key is None:
                return firsts + shared
            rows = [
                r["id"]
                for r in self.db.execute(
                    sql.CLAIMABLE_OF_KEY, (batch_id, source, key, at, 1 + CLAIM_SHARED_ITEMS - len(shared))
                ).fetchall()
            ]
            firsts += rows[:1]
            shared += rows[1:]

    def _claim_of(self, token: str, owner: str, items: list[Row]) -> Claim:
        first = items[0]
        batch = self._batch(first["batch_id"])
        return Claim(
            token=token,
            owner=owner,
            batch_id=first["batch_id"],
            out_dir=batch["out_dir"],
            source_root=batch["source_root"],
            source=first["source"],
            source_digest=first["source_digest"],
            source_format=first["source_format"],
            source_width=first["source_width"],
            source_height=first["source_height"],
            profile=needed_batch_document(first["batch_id"], "profile", batch["profile"]) or {},
            limits=needed_batch_document(first["batch_id"], "limits", batch["limits"]) or {},
            items=tuple(claimed_item(r) for r in items),
        )

    def _batch(self, batch_id: str) -> Row:
        """What a claim needs of its batch (never changed after acceptance), read once per batch."""
        batch = self._batches.get(batch_id)
        if batch is None:
            if len(self._batches) >= BATCHES_KEPT:
                self._batches.clear()
            batch = self._batches[batch_id] = self.db.execute(sql.CLAIMED_BATCH, (batch_id,)).fetchone()
        return batch

    def heartbeat(self, token: str, lease_seconds: float = 30.0) -> int:
        with self.db.write() as now:
            return self.db.execute(sql.HEARTBEAT, (iso(now + lease_seconds), token)).rowcount

    def start_stage(self, claim: Claim, rows: list[int]) -> None:
        with self.db.write() as now:
            if rows:
                self.db.defer(sql.STAGE_MOVED, [*rows, iso(now), claim.token, *rows], ids=len(rows))
            else:
                self.db.defer(sql.STAGE_ENDED, (claim.token,))

    # -- outcomes -----------------------------------------------------------------------

    def cancel_if_requested(self, claim: Claim) -> bool:
        if not self._cancel_requested(claim.batch_id):
            return False
        with self.db.write() as now:
            rows = self._held_rows(claim)
            self.log.move(iso(now), rows, ItemState.RUNNING, ItemState.CANCELLED, token=claim.token, worker=claim.owner)
        return True

    def _cancel_requested(self, batch_id: str) -> bool:
        row = self.db.execute(sql.CANCEL_FLAG, (batch_id,)).fetchone()
        return row is not None and row["cancel_requested_at"] is not None

    def _held_rows(self, claim: Claim) -> list[int]:
        """The rows the claim still holds, locked."""
        return [r["id"] for r in self.db.execute(sql.HELD_ROWS, (claim.token,)).fetchall()]

    def release(self, claim: Claim, reason: str) -> int:
        with self.db.write() as now:
            rows = self._held_rows(claim)
            if self.db.scalar(sql.CANCEL_FLAG_SHARED, (claim.batch_id,)) is not None:
                cancelled = self.log.move(
                    iso(now), rows, ItemState.RUNNING, ItemState.CANCELLED, token=claim.token, worker=claim.owner
                )
                return len(cancelled)
            self.log.set_attempts(rows, sql.RELEASED_ATTEMPTS)
            moved = self.log.move(
                iso(now),
                rows,
                ItemState.RUNNING,
                ItemState.QUEUED,
                token=claim.token,
                worker=claim.owner,
                detail=reason,
            )
            return len(moved)

    def publish(
        self,
        claim: Claim,
        item: ClaimedItem,
        effect: Callable[[], Publication | None],
        *,
        result: dict[str, object] | None = None,
    ) -> str:
        with self.db.write() as now:
            at = iso(now)
            row = self.db.execute(sql.PUBLISHABLE, (item.row,)).fetchone()
            if row is None or row["state"] != ItemState.RUNNING or row["lease_token"] != claim.token:
                return "lost"
            if row["cancel_requested_at"] is not None:
                self.log.move(
                    at, [item.row], ItemState.RUNNING, ItemState.CANCELLED, token=claim.token, worker=claim.owner
                )
                return ItemState.CANCELLED
            if row["deadline_at"] is not None and row["deadline_at"] <= at:
                self.log.move(
                    at,
                    [item.row],
                    ItemState.RUNNING,
                    ItemState.FAILED,
                    token=claim.token,
                    worker=claim.owner,
                    error_code="deadline_exceeded",
                    detail="the batch deadline passed before it could be published",
                )
                return "late"
            note, version = effect() or Publication()
            stored = None if result is None else json.dumps(result)
            self.log.published(
                at,
                item.row,
                claim.batch_id,
                item.attempt,
                claim.token,
                claim.owner,
                note=note,
                version=version,
                result=stored,
            )
            record_name(self.db, item.row, version, at, deferred=True)
            if result is not None and "crop" in result:  # rendered here, not reused
                self.db.defer(sql.RECORD_DERIVATIVE, (stored, at, item.row))
            self.db.defer(sql.STAGE_PROGRESSED, (at, claim.token))
            return ItemState.SUCCEEDED

    def fail(
        self,
        claim: Claim,
        rows: list[int],
        code: str,
        detail: str,
        delay_for: DelayFor,
    ) -> dict[int, str]:
        with self.db.write() as now:
            held = set(self._held_rows(claim))
            outcome: dict[int, str] = {}
            for row in [r for r in rows if r in held]:
                outcome[row] = self.log.settle(now, row, code, detail, claim.token, claim.owner, delay_for)
            return outcome

    # -- explicit retry -------------------------------------------------------------------

    def retry_failed(self, batch_id: str) -> int:
        with self.db.write(durable=True) as now:
            at = iso(now)
            batch = self.db.execute(sql.RETRY_BATCH, (batch_id,)).fetchone()
            cancel_at, deadline, expired_at = batch["cancel_requested_at"], batch["deadline_at"], batch["expired_at"]
            if expired_at is not None:
                raise UsageError(f"batch {batch_id} expired at {expired_at} (gc); submit again to redo its work")
            if cancel_at is not None:
                raise UsageError(
                    f"batch {batch_id} was cancelled at {cancel_at}; submit again with a new --key to redo its work"
                )
            if deadline is not None and deadline <= at:
                raise UsageError(
                    f"the deadline of batch {batch_id} passed at {deadline}; submit again with a new --key to redo it"
                )
            rows = [r["id"] for r in self.db.execute(sql.RETRYABLE, (batch_id,)).fetchall()]
            moved = self.log.move(at, rows, ItemState.FAILED, ItemState.QUEUED, detail="retry requested")
            self.log.set_attempts(moved, sql.FRESH_ATTEMPTS)
            return len(moved)

    # -- reading the queue ----------------------------------------------------------------

    def queue_state(self, batch_id: str | None = None) -> QueueState:
        at = iso(self.db.clock())
        scope = [batch_id] if batch_id else []
        row = self.db.execute(sql.QUEUE_STATE, [at, at, at, *scope], scope=len(scope)).fetchone()
        return QueueState(row["runnable"], row["delayed"], row["running"], row["next_not_before"])

    def queue_idle(self, batch_id: str | None = None) -> bool:
        scope = [batch_id] if batch_id else []
        live = self.db.scalar(sql.QUEUE_LIVE, [*scope, *scope], scope=len(scope))
        return not live

    def overdue_owners(self, seconds: float) -> list[str]:
        cutoff = iso(self.db.clock() - seconds)
        rows = self.db.execute(sql.OVERDUE_OWNERS, (cutoff,)).fetchall()
        return [r["lease_owner"] for r in rows]

    def stop_overdue(self, owner: str, seconds: float, code: str, detail: str) -> int:
        with self.db.write() as now:
            at = iso(now)
            running = self.db.execute(sql.OWNER_ITEMS, (iso(now - seconds), owner)).fetchall()
            overdue = [r["id"] for r in running if r["late"]]
            if not overdue:
                return 0
            waiting = [r for r in running if not r["late"]]
            self.log.move(
                at, overdue, ItemState.RUNNING, ItemState.FAILED, error_code=code, detail=detail, worker=owner
            )
            why = f"its worker was stopped ({detail}) before this item's render"
            cancelled = [r["id"] for r in waiting if r["cancel_requested_at"] is not None]
            self.log.move(at, cancelled, ItemState.RUNNING, ItemState.CANCELLED, detail=why, worker=owner)
            requeued = [r["id"] for r in waiting if r["cancel_requested_at"] is None]
            why += "; the attempt is not counted"
            moved = self.log.move(at, requeued, ItemState.RUNNING, ItemState.QUEUED, detail=why, worker=owner)
            self.log.set_attempts(moved, sql.UNCOUNTED_ATTEMPTS)
            return len(overdue)
