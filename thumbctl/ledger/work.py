"""The work queue half of the ledger: claims, leases, heartbeats, publish, failure, rescue.

Every method is one ``BEGIN IMMEDIATE`` transaction. Every commit made on
behalf of a worker is conditional on its lease token, so a worker whose
lease was rescued can no longer change anything.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import UsageError
from ..models import ItemState
from .backend import Backend, Row
from .states import FAILED, LIVE, QUEUED, RUNNING, runnable
from .timefmt import iso
from .transitions import Transitions, marks

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
_NOT_CANCELLED = " AND batch_id NOT IN (SELECT batch_id FROM batches WHERE cancel_requested_at IS NOT NULL)"


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
    limits: dict[str, int]
    items: tuple[ClaimedItem, ...]


def _claimed_item(r: Row) -> ClaimedItem:
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


class WorkQueue:
    """The worker-facing transitions of one ledger."""

    def __init__(self, db: Backend, log: Transitions) -> None:
        self.db = db
        self.log = log

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
        """Claim runnable items of the next source, or return None: one of each distinct
        derivative key (so the source is decoded once for all of them) and at most
        :data:`CLAIM_SHARED_ITEMS` more that share those keys. Batches with a cancel
        request are never claimed from.

        The claimer first rescues expired or dead leases and fails queued items
        whose batch deadline has passed, so no separate janitor is needed. The claim
        starts the decode stage: its items are timed from now (``stage_started_at``).
        """
        with self.db.write() as now:
            at = iso(now)
            if self.db.try_exclusive("rescue"):  # one claimer rescues at a time; the others claim
                self._rescue(now, is_dead, delay_for)
                self._expire_deadlines(at)
            rows = self._next_claimable(at, batch_id)
            if not rows:
                return None
            token = secrets.token_hex(12)
            self.db.execute(
                "UPDATE items SET attempt = attempt + 1, lease_owner = ?, lease_token = ?, lease_expires_at = ?, "
                f"stage_started_at = ? WHERE id IN ({marks(rows)})",
                [owner, token, iso(now + lease_seconds), at, *rows],
            )
            self.log.move(at, rows, ItemState.QUEUED, ItemState.RUNNING, worker=owner)
            return self._load_claim(token, owner, rows)

    def _next_claimable(self, at: str, batch_id: str | None) -> list[int]:
        """The rows of the next source no other claimer is taking: the source is held exclusively
        until this claim commits, so two claimers running side by side never split one source
        between them (each would decode it); a source another claimer holds is passed over."""
        passed: list[tuple[str, str]] = []
        while (pick := self._next_source(at, batch_id, passed)) is not None:
            if self.db.try_exclusive(f"source:{pick[0]}/{pick[1]}"):
                rows = self._claimable_rows(at, *pick)
                if rows:
                    return rows
            passed.append(pick)
        return []

    def _next_source(self, at: str, batch_id: str | None, passed: list[tuple[str, str]]) -> tuple[str, str] | None:
        """The source of the next runnable item of a batch without a cancel request (other than the
        ``passed`` ones): retries that are due first, then the oldest fresh item. Both queries walk
        an index of queued items without sorting: the ledger's (``items_runnable``) or, for one
        batch, the batch's own (``items_queued_by_batch``), so a claim scoped to a batch never steps
        over the queued items of the others. Nothing is locked here: :meth:`_claimable_rows` locks
        the rows it takes, once the source is held."""
        if batch_id:
            index, scope, extra = "items_queued_by_batch", " AND batch_id = ?", [batch_id]
        else:
            index, scope, extra = "items_runnable", "", []
        scope += " AND NOT (batch_id = ? AND source = ?)" * len(passed)
        extra += [value for pick in passed for value in pick]
        for sql, params in (
            (f"WHERE state = {QUEUED} AND not_before <= ?{scope}{_NOT_CANCELLED} ORDER BY not_before", [at, *extra]),
            (f"WHERE state = {QUEUED} AND not_before IS NULL{scope}{_NOT_CANCELLED} ORDER BY id", extra),
        ):
            sql = f"SELECT batch_id, source FROM items INDEXED BY {index} {sql} LIMIT 1"
            row = self.db.execute(sql, params).fetchone()
            if row is not None:
                return row["batch_id"], row["source"]
        return None

    def _claimable_rows(self, at: str, batch_id: str, source: str) -> list[int]:
        """The first runnable item of each distinct derivative key of the source, then up to
        :data:`CLAIM_SHARED_ITEMS` more of those keys. Keys are stepped through on the partial
        index of queued items (a few seeks per key), so a claim never reads every queued item
        of a source: about 3 ms with 100,000 items queued on two sources. Items another claimer
        holds are skipped."""
        where = f"batch_id = ? AND source = ? AND state = {QUEUED}"
        lock = self.db.lock(skip_locked=True)
        firsts: list[int] = []
        shared: list[int] = []
        key = ""
        while True:
            key = self.db.scalar(
                f"SELECT min(derivative_key) FROM items WHERE {where} AND derivative_key > ?", (batch_id, source, key)
            )
            if key is None:
                return firsts + shared
            rows = [
                r["id"]
                for r in self.db.execute(
                    f"SELECT id FROM items WHERE {where} AND derivative_key = ? "
                    f"AND (not_before IS NULL OR not_before <= ?) ORDER BY id LIMIT ?{lock}",
                    (batch_id, source, key, at, 1 + CLAIM_SHARED_ITEMS - len(shared)),
                ).fetchall()
            ]
            firsts += rows[:1]
            shared += rows[1:]

    def _load_claim(self, token: str, owner: str, rows: list[int]) -> Claim:
        items = self.db.execute(
            "SELECT id, item_id, ratio, size, format, attempt, derivative_key, object_path, friendly_path, "
            "focus_x, focus_y, "
            f"batch_id, source, source_digest, source_format, source_width, source_height FROM items "
            f"WHERE id IN ({marks(rows)}) ORDER BY id",
            rows,
        ).fetchall()
        first = items[0]
        batch = self.db.execute(
            "SELECT profile, limits, out_dir, source_root FROM batches WHERE batch_id = ?", (first["batch_id"],)
        ).fetchone()
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
            profile=json.loads(batch["profile"]),
            limits=json.loads(batch["limits"] or "{}"),
            items=tuple(_claimed_item(r) for r in items),
        )

    def heartbeat(self, token: str, lease_seconds: float = 30.0) -> int:
        """Extend a lease; returns how many of its items it still holds (0: lost)."""
        with self.db.write() as now:
            return self.db.execute(
                f"UPDATE items SET lease_expires_at = ? WHERE lease_token = ? AND state = {RUNNING}",
                (iso(now + lease_seconds), token),
            ).rowcount

    def start_stage(self, claim: Claim, rows: list[int]) -> None:
        """From now on only ``rows`` of the claim (the items of one render) are timed by
        ``--item-timeout``; its other running items wait untimed. ``[]``: between stages."""
        with self.db.write() as now:
            self.db.execute(
                f"UPDATE items SET stage_started_at = NULL WHERE lease_token = ? AND state = {RUNNING} "
                "AND stage_started_at IS NOT NULL",
                (claim.token,),
            )
            if rows:
                self.db.execute(
                    f"UPDATE items SET stage_started_at = ? WHERE id IN ({marks(rows)}) "
                    f"AND lease_token = ? AND +state = {RUNNING}",
                    [iso(now), *rows, claim.token],
                )

    def _stage_progressed(self, at: str, token: str) -> None:
        """A publish is progress: the items still waiting in the current stage are timed afresh."""
        self.db.execute(
            f"UPDATE items SET stage_started_at = ? WHERE lease_token = ? AND state = {RUNNING} "
            "AND stage_started_at IS NOT NULL",
            (at, token),
        )

    # -- outcomes -----------------------------------------------------------------------

    def cancel_if_requested(self, claim: Claim) -> bool:
        """At a checkpoint: if the batch has a cancel request, end the claim's items
        ``cancelled`` and return True."""
        if not self._cancel_requested(claim.batch_id):
            return False
        with self.db.write() as now:
            rows = self._held_rows(claim)
            self.log.move(iso(now), rows, ItemState.RUNNING, ItemState.CANCELLED, token=claim.token, worker=claim.owner)
        return True

    def _cancel_requested(self, batch_id: str) -> bool:
        row = self.db.execute("SELECT cancel_requested_at FROM batches WHERE batch_id = ?", (batch_id,)).fetchone()
        return row is not None and row["cancel_requested_at"] is not None

    def _held_rows(self, claim: Claim) -> list[int]:
        """The rows the claim still holds, locked."""
        sql = f"SELECT id FROM items WHERE lease_token = ? AND state = {RUNNING} ORDER BY id{self.db.lock()}"
        return [r["id"] for r in self.db.execute(sql, (claim.token,)).fetchall()]

    def release(self, claim: Claim, reason: str) -> int:
        """Give the claim back without counting an attempt: its held items return to ``queued``
        with the attempt number they had before it (the worker could not reach the ledger, not a
        render that failed). Returns how many items were released."""
        with self.db.write() as now:
            rows = self._held_rows(claim)
            self.log.set_attempts(rows, "CASE WHEN attempt > 0 THEN attempt - 1 ELSE 0 END")
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
        """The race rule: check the cancel flag and the lease, run ``effect`` (link the
        object and the friendly name) and mark ``succeeded``, all in one write transaction.
        ``effect`` may return a :class:`Publication`: its note (``object_mismatch: …``) goes into the
        ``succeeded`` event's detail (the item itself carries no error detail), its version is
        recorded with the item.

        Returns ``succeeded``, ``cancelled`` (the cancel committed first), ``late`` (the
        batch deadline passed: the item failed ``deadline_exceeded``) or ``lost`` (the lease
        was rescued; nothing was published).
        """
        with self.db.write() as now:
            at = iso(now)
            row = self.db.execute(  # the item, and its batch kept from a cancel until this commits
                "SELECT i.state, i.lease_token, b.cancel_requested_at, b.deadline_at FROM items i "
                f"JOIN batches b USING (batch_id) WHERE i.id = ?{self.db.lock('i')}{self.db.lock('b', share=True)}",
                (item.row,),
            ).fetchone()
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
            self.log.move(
                at,
                [item.row],
                ItemState.RUNNING,
                ItemState.SUCCEEDED,
                token=claim.token,
                worker=claim.owner,
                detail=note,
            )
            if note is not None:
                self.db.execute("UPDATE items SET error_detail = NULL WHERE id = ?", (item.row,))
            self.db.execute("UPDATE items SET name_version = ? WHERE id = ?", (version, item.row))
            self._stage_progressed(at, claim.token)
            if result is not None:
                self.db.execute("UPDATE items SET result = ? WHERE id = ?", (json.dumps(result), item.row))
            return ItemState.SUCCEEDED

    def fail(
        self,
        claim: Claim,
        rows: list[int],
        code: str,
        detail: str,
        delay_for: DelayFor,
    ) -> dict[int, str]:
        """Settle failed items: transient ones go back to ``queued`` with a persisted
        ``not_before`` while attempts and the deadline allow; the rest end ``failed``.
        Returns the new state of each row the claim still held.
        """
        with self.db.write() as now:
            held = set(self._held_rows(claim))
            outcome: dict[int, str] = {}
            for row in [r for r in rows if r in held]:
                outcome[row] = self.log.settle(now, row, code, detail, claim.token, claim.owner, delay_for)
            return outcome

    # -- explicit retry -------------------------------------------------------------------

    def retry_failed(self, batch_id: str) -> int:
        """Put a batch's failed items back to ``queued`` with a fresh attempt budget.

        The one non-monotonic transition, logged like any other. Items that failed at
        admission (nothing was ever accepted to render: unreadable, outside the root, not an
        image) are left as they are; submitting again is the way to retry those. Returns how
        many items were requeued.
        """
        with self.db.write(durable=True) as now:
            at = iso(now)
            batch = self.db.execute(
                "SELECT cancel_requested_at, deadline_at, expired_at FROM batches WHERE batch_id = ?", (batch_id,)
            ).fetchone()
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
            rows = [
                r["id"]
                for r in self.db.execute(
                    f"SELECT id FROM items WHERE batch_id = ? AND state = {FAILED} AND derivative_key IS NOT NULL "
                    "ORDER BY id",
                    (batch_id,),
                ).fetchall()
            ]
            moved = self.log.move(at, rows, ItemState.FAILED, ItemState.QUEUED, detail="retry requested")
            self.log.set_attempts(moved, "0")
            return len(moved)

    # -- rescue and deadlines -----------------------------------------------------------

    def rescue_leases(self, is_dead: Callable[[str], bool], delay_for: DelayFor) -> int:
        """Requeue (or fail, when the attempts are spent) items whose lease expired or
        whose owner process is gone; returns how many were rescued."""
        with self.db.write() as now:
            return self._rescue(now, is_dead, delay_for)

    def _rescue(self, now: float, is_dead: Callable[[str], bool], delay_for: DelayFor) -> int:
        at = iso(now)
        running = self.db.execute(
            f"SELECT id, lease_owner, lease_expires_at FROM items WHERE state = {RUNNING} ORDER BY id"
        ).fetchall()
        dead = {owner for owner in {r["lease_owner"] for r in running} if owner and is_dead(owner)}
        victims = [
            (r["id"], r["lease_owner"])
            for r in running
            if r["lease_owner"] in dead or (r["lease_expires_at"] is not None and r["lease_expires_at"] <= at)
        ]
        rescued = 0
        for row, owner in victims:
            why = "its worker process is gone" if owner in dead else "its lease expired"
            rescued += self.log.settle(now, row, "worker_crashed", why, None, owner, delay_for) != "unchanged"
        return rescued

    def _expire_deadlines(self, at: str) -> None:
        late = [
            r["batch_id"]
            for r in self.db.execute(
                "SELECT batch_id FROM batches WHERE deadline_at IS NOT NULL AND deadline_at <= ?", (at,)
            ).fetchall()
        ]
        for batch_id in late:
            rows = [
                r["id"]
                for r in self.db.execute(
                    f"SELECT id FROM items WHERE batch_id = ? AND state = {QUEUED} ORDER BY id", (batch_id,)
                ).fetchall()
            ]
            self.log.move(
                at,
                rows,
                ItemState.QUEUED,
                ItemState.FAILED,
                error_code="deadline_exceeded",
                detail="the batch deadline passed",
            )

    # -- reading the queue ----------------------------------------------------------------

    def queue_state(self, batch_id: str | None = None) -> QueueState:
        """Live items in scope: runnable now, delayed by backoff, running."""
        at = iso(self.db.clock())
        scope = " AND i.batch_id = ?" if batch_id else ""
        row = self.db.execute(
            f"SELECT count(CASE WHEN {runnable('i')} THEN 1 END) AS runnable, "
            f"count(CASE WHEN i.state = {QUEUED} AND i.not_before > ? THEN 1 END) AS delayed, "
            f"count(CASE WHEN i.state = {RUNNING} THEN 1 END) AS running, "
            f"min(CASE WHEN i.state = {QUEUED} AND i.not_before > ? THEN i.not_before END) AS next_not_before "
            f"FROM items i JOIN batches b USING (batch_id) WHERE i.state IN {LIVE} "
            f"AND (b.cancel_requested_at IS NULL OR i.state = {RUNNING}){scope}",
            [at, at, at, *([batch_id] if batch_id else [])],
        ).fetchone()
        return QueueState(row["runnable"], row["delayed"], row["running"], row["next_not_before"])

    def queue_idle(self, batch_id: str | None = None) -> bool:
        """No live item in scope (what :attr:`QueueState.idle` says), found without counting:
        each query stops at the first live item, so a worker whose claim came back empty asks
        this at the same cost whatever the length of the queue."""
        scope = " AND batch_id = ?" if batch_id else ""
        extra = [batch_id] if batch_id else []
        live = self.db.scalar(
            f"SELECT EXISTS (SELECT 1 FROM items WHERE state = {RUNNING}{scope}) "
            f"OR EXISTS (SELECT 1 FROM items WHERE state = {QUEUED}{scope}{_NOT_CANCELLED})",
            [*extra, *extra],
        )
        return not live

    def overdue_owners(self, seconds: float) -> list[str]:
        """Lease owners with a running item whose stage (the decode of its source, or its render
        and publish) started more than ``seconds`` ago."""
        cutoff = iso(self.db.clock() - seconds)
        rows = self.db.execute(
            f"SELECT DISTINCT lease_owner FROM items WHERE state = {RUNNING} AND lease_owner IS NOT NULL "
            "AND stage_started_at < ?",
            (cutoff,),
        ).fetchall()
        return [r["lease_owner"] for r in rows]

    def stop_overdue(self, owner: str, seconds: float, code: str, detail: str) -> int:
        """End ``owner``'s items whose stage has run over ``seconds`` ``failed`` with ``code`` (a
        permanent verdict) and put its other running items back to ``queued`` without spending an
        attempt (their render never started), all before the worker is stopped. Returns how many
        failed: 0 when the stage ended meanwhile (then the worker must be left alone)."""
        with self.db.write() as now:
            at = iso(now)
            running = self.db.execute(
                "SELECT id, CASE WHEN stage_started_at < ? THEN 1 ELSE 0 END AS late FROM items "
                f"WHERE state = {RUNNING} AND lease_owner = ? ORDER BY id{self.db.lock()}",
                (iso(now - seconds), owner),
            ).fetchall()
            overdue = [r["id"] for r in running if r["late"]]
            if not overdue:
                return 0
            waiting = [r["id"] for r in running if not r["late"]]
            self.log.move(
                at, overdue, ItemState.RUNNING, ItemState.FAILED, error_code=code, detail=detail, worker=owner
            )
            why = f"its worker was stopped ({detail}) before this item's render; the attempt is not counted"
            moved = self.log.move(at, waiting, ItemState.RUNNING, ItemState.QUEUED, detail=why, worker=owner)
            self.log.set_attempts(moved, "attempt - 1")
            return len(overdue)
