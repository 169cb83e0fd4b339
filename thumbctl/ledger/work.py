"""The work queue half of the ledger: claims, leases, heartbeats, publish, failure, rescue.

Every method is one ``BEGIN IMMEDIATE`` transaction. Every commit made on
behalf of a worker is conditional on its lease token, so a worker whose
lease was rescued can no longer change anything.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from ..errors import UsageError, is_transient
from .timefmt import iso

DelayFor = Callable[[int], float]
_CHUNK = 500
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
    """Mixin for :class:`~thumbctl.ledger.core.Ledger`: the worker-facing transitions."""

    _conn: sqlite3.Connection
    _write: Callable[..., AbstractContextManager[float]]

    # -- the one transition primitive -------------------------------------------------

    def _transition(
        self,
        at: str,
        rows: list[int],
        from_state: str,
        to_state: str,
        *,
        token: str | None = None,
        error_code: str | None = None,
        detail: str | None = None,
        not_before: str | None = None,
        worker: str | None = None,
    ) -> list[int]:
        """Move ``rows`` from ``from_state`` to ``to_state`` (only those still there,
        and still under ``token`` when given) and log one event each. Returns the moved rows.
        """
        if len(rows) > _CHUNK:
            moved: list[int] = []
            for start in range(0, len(rows), _CHUNK):
                moved += self._transition(
                    at,
                    rows[start : start + _CHUNK],
                    from_state,
                    to_state,
                    token=token,
                    error_code=error_code,
                    detail=detail,
                    not_before=not_before,
                    worker=worker,
                )
            return moved
        if not rows:
            return []
        marks = ",".join("?" * len(rows))
        guard = " AND lease_token = ?" if token is not None else ""
        moved = [
            r[0]
            for r in self._conn.execute(
                f"SELECT id FROM items WHERE id IN ({marks}) AND +state = ?{guard}",  # by primary key
                [*rows, from_state, *([token] if token is not None else [])],
            )
        ]
        if not moved:
            return []
        marks = ",".join("?" * len(moved))
        keep_lease = to_state == "running"
        self._conn.execute(
            f"""UPDATE items SET state = ?, updated_at = ?, error_code = ?, error_detail = ?,
                not_before = ?, queued_at = CASE WHEN ? = 'queued' THEN ? ELSE queued_at END,
                lease_owner = CASE WHEN ? THEN lease_owner END,
                lease_token = CASE WHEN ? THEN lease_token END,
                lease_expires_at = CASE WHEN ? THEN lease_expires_at END,
                stage_started_at = CASE WHEN ? THEN stage_started_at END
                WHERE id IN ({marks})""",
            [to_state, at, error_code, detail, not_before, to_state, at, *[keep_lease] * 4, *moved],
        )
        self._conn.execute(
            f"""INSERT INTO events (at, batch_id, item_row, from_state, to_state, attempt, worker,
                error_code, detail) SELECT ?, batch_id, id, ?, ?, attempt, ?, ?, ? FROM items
                WHERE id IN ({marks}) ORDER BY id""",
            [at, from_state, to_state, worker, error_code, detail, *moved],
        )
        return moved

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
        with self._write() as now:
            at = iso(now)
            self._rescue(now, is_dead, delay_for)
            self._expire_deadlines(at)
            pick = self._next_source(at, batch_id)
            if pick is None:
                return None
            token = secrets.token_hex(12)
            rows = self._claimable_rows(at, *pick)
            marks = ",".join("?" * len(rows))
            self._conn.execute(
                "UPDATE items SET attempt = attempt + 1, lease_owner = ?, lease_token = ?, lease_expires_at = ?, "
                f"stage_started_at = ? WHERE id IN ({marks})",
                [owner, token, iso(now + lease_seconds), at, *rows],
            )
            self._transition(at, rows, "queued", "running", worker=owner)
            return self._load_claim(token, owner, rows)

    def _next_source(self, at: str, batch_id: str | None) -> tuple[str, str] | None:
        """The source of the next runnable item of a batch without a cancel request: retries
        that are due first, then the oldest fresh item. Both queries walk an index of queued items
        without sorting: the ledger's (``items_runnable``) or, for one batch, the batch's own
        (``items_queued_by_batch``), so a claim scoped to a batch never steps over the queued items
        of the others."""
        if batch_id:
            index, scope, extra = "items_queued_by_batch", " AND batch_id = ?", [batch_id]
        else:
            index, scope, extra = "items_runnable", "", []
        for sql, params in (
            (f"WHERE state = 'queued' AND not_before <= ?{scope}{_NOT_CANCELLED} ORDER BY not_before", [at, *extra]),
            (f"WHERE state = 'queued' AND not_before IS NULL{scope}{_NOT_CANCELLED} ORDER BY id", extra),
        ):
            row = self._conn.execute(
                f"SELECT batch_id, source FROM items INDEXED BY {index} {sql} LIMIT 1", params
            ).fetchone()
            if row is not None:
                return row[0], row[1]
        return None

    def _claimable_rows(self, at: str, batch_id: str, source: str) -> list[int]:
        """The first runnable item of each distinct derivative key of the source, then up to
        :data:`CLAIM_SHARED_ITEMS` more of those keys. Keys are stepped through on the partial
        index of queued items (a few seeks per key), so a claim never reads every queued item
        of a source: about 3 ms with 100,000 items queued on two sources."""
        where = "batch_id = ? AND source = ? AND state = 'queued'"
        firsts: list[int] = []
        shared: list[int] = []
        key = ""
        while True:
            key = self._conn.execute(
                f"SELECT min(derivative_key) FROM items WHERE {where} AND derivative_key > ?", (batch_id, source, key)
            ).fetchone()[0]
            if key is None:
                return firsts + shared
            rows = [
                r[0]
                for r in self._conn.execute(
                    f"SELECT id FROM items WHERE {where} AND derivative_key = ? "
                    "AND (not_before IS NULL OR not_before <= ?) ORDER BY id LIMIT ?",
                    (batch_id, source, key, at, 1 + CLAIM_SHARED_ITEMS - len(shared)),
                )
            ]
            firsts += rows[:1]
            shared += rows[1:]

    def _load_claim(self, token: str, owner: str, rows: list[int]) -> Claim:
        marks = ",".join("?" * len(rows))
        items = self._conn.execute(
            "SELECT id, item_id, ratio, attempt, derivative_key, object_path, friendly_path, focus_x, focus_y, "
            f"batch_id, source, source_digest, source_format, source_width, source_height FROM items "
            f"WHERE id IN ({marks}) ORDER BY id",
            rows,
        ).fetchall()
        first = items[0]
        profile, limits, out_dir, source_root = self._conn.execute(
            "SELECT profile, limits, out_dir, source_root FROM batches WHERE batch_id = ?", (first[9],)
        ).fetchone()
        return Claim(
            token=token,
            owner=owner,
            batch_id=first[9],
            out_dir=out_dir,
            source_root=source_root,
            source=first[10],
            source_digest=first[11],
            source_format=first[12],
            source_width=first[13],
            source_height=first[14],
            profile=json.loads(profile),
            limits=json.loads(limits or "{}"),
            items=tuple(
                ClaimedItem(r[0], r[1], r[2], r[3], r[4], r[5], r[6], (r[7], r[8]) if r[7] is not None else None)
                for r in items
            ),
        )

    def heartbeat(self, token: str, lease_seconds: float = 30.0) -> int:
        """Extend a lease; returns how many of its items it still holds (0: lost)."""
        with self._write() as now:
            return self._conn.execute(
                "UPDATE items SET lease_expires_at = ? WHERE lease_token = ? AND state = 'running'",
                (iso(now + lease_seconds), token),
            ).rowcount

    def start_stage(self, claim: Claim, rows: list[int]) -> None:
        """From now on only ``rows`` of the claim (the items of one render) are timed by
        ``--item-timeout``; its other running items wait untimed. ``[]``: between stages."""
        with self._write() as now:
            self._conn.execute(
                "UPDATE items SET stage_started_at = NULL WHERE lease_token = ? AND state = 'running' "
                "AND stage_started_at IS NOT NULL",
                (claim.token,),
            )
            if rows:
                self._conn.execute(
                    f"UPDATE items SET stage_started_at = ? WHERE id IN ({','.join('?' * len(rows))}) "
                    "AND lease_token = ? AND +state = 'running'",
                    [iso(now), *rows, claim.token],
                )

    def _stage_progressed(self, at: str, token: str) -> None:
        """A publish is progress: the items still waiting in the current stage are timed afresh."""
        self._conn.execute(
            "UPDATE items SET stage_started_at = ? WHERE lease_token = ? AND state = 'running' "
            "AND stage_started_at IS NOT NULL",
            (at, token),
        )

    # -- outcomes -----------------------------------------------------------------------

    def cancel_if_requested(self, claim: Claim) -> bool:
        """At a checkpoint: if the batch has a cancel request, end the claim's items
        ``cancelled`` and return True."""
        if not self._cancel_requested(claim.batch_id):
            return False
        with self._write() as now:
            rows = self._held_rows(claim)
            self._transition(iso(now), rows, "running", "cancelled", token=claim.token, worker=claim.owner)
        return True

    def _cancel_requested(self, batch_id: str) -> bool:
        row = self._conn.execute("SELECT cancel_requested_at FROM batches WHERE batch_id = ?", (batch_id,)).fetchone()
        return row is not None and row[0] is not None

    def _held_rows(self, claim: Claim) -> list[int]:
        return [
            r[0]
            for r in self._conn.execute(
                "SELECT id FROM items WHERE lease_token = ? AND state = 'running'", (claim.token,)
            )
        ]

    def release(self, claim: Claim, reason: str) -> int:
        """Give the claim back without counting an attempt: its held items return to ``queued``
        with the attempt number they had before it (the worker could not reach the ledger, not a
        render that failed). Returns how many items were released."""
        with self._write() as now:
            rows = self._held_rows(claim)
            for start in range(0, len(rows), _CHUNK):
                chunk = rows[start : start + _CHUNK]
                self._conn.execute(
                    f"UPDATE items SET attempt = max(attempt - 1, 0) WHERE id IN ({','.join('?' * len(chunk))})", chunk
                )
            moved = self._transition(
                iso(now), rows, "running", "queued", token=claim.token, worker=claim.owner, detail=reason
            )
            return len(moved)

    def publish(
        self,
        claim: Claim,
        item: ClaimedItem,
        effect: Callable[[], str | None],
        *,
        result: dict[str, object] | None = None,
    ) -> str:
        """The race rule: check the cancel flag and the lease, run ``effect`` (link the
        object and the friendly name) and mark ``succeeded``, all in one write transaction.
        A note ``effect`` returns (``object_mismatch: …``) goes into the ``succeeded`` event's
        detail; the item itself carries no error detail.

        Returns ``succeeded``, ``cancelled`` (the cancel committed first), ``late`` (the
        batch deadline passed: the item failed ``deadline_exceeded``) or ``lost`` (the lease
        was rescued; nothing was published).
        """
        with self._write() as now:
            at = iso(now)
            row = self._conn.execute(
                "SELECT i.state, i.lease_token, b.cancel_requested_at, b.deadline_at FROM items i "
                "JOIN batches b USING (batch_id) WHERE i.id = ?",
                (item.row,),
            ).fetchone()
            if row is None or row[0] != "running" or row[1] != claim.token:
                return "lost"
            if row[2] is not None:
                self._transition(at, [item.row], "running", "cancelled", token=claim.token, worker=claim.owner)
                return "cancelled"
            if row[3] is not None and row[3] <= at:
                self._transition(
                    at,
                    [item.row],
                    "running",
                    "failed",
                    token=claim.token,
                    worker=claim.owner,
                    error_code="deadline_exceeded",
                    detail="the batch deadline passed before it could be published",
                )
                return "late"
            note = effect()
            self._transition(at, [item.row], "running", "succeeded", token=claim.token, worker=claim.owner, detail=note)
            if note is not None:
                self._conn.execute("UPDATE items SET error_detail = NULL WHERE id = ?", (item.row,))
            self._stage_progressed(at, claim.token)
            if result is not None:
                self._conn.execute("UPDATE items SET result = ? WHERE id = ?", (json.dumps(result), item.row))
            return "succeeded"

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
        with self._write() as now:
            at = iso(now)
            held = set(self._held_rows(claim))
            outcome: dict[int, str] = {}
            for row in [r for r in rows if r in held]:
                outcome[row] = self._settle_one(now, at, row, code, detail, claim.token, claim.owner, delay_for)
            return outcome

    def _settle_one(
        self,
        now: float,
        at: str,
        row: int,
        code: str,
        detail: str,
        token: str | None,
        worker: str | None,
        delay_for: DelayFor,
    ) -> str:
        attempt, max_attempts, deadline, cancel_at = self._conn.execute(
            "SELECT i.attempt, b.max_attempts, b.deadline_at, b.cancel_requested_at FROM items i "
            "JOIN batches b USING (batch_id) WHERE i.id = ?",
            (row,),
        ).fetchone()
        common = {"token": token, "worker": worker}
        if cancel_at is not None:
            self._transition(at, [row], "running", "cancelled", **common)
            return "cancelled"
        if is_transient(code) and attempt < max_attempts:
            not_before = iso(now + delay_for(attempt))
            if deadline is None or not_before < deadline:
                self._transition(
                    at, [row], "running", "queued", error_code=code, detail=detail, not_before=not_before, **common
                )
                return "queued"
            code, detail = "deadline_exceeded", f"the next attempt would start after the deadline ({detail})"
        elif is_transient(code):
            if code != "worker_crashed":
                detail = f"{code}: {detail}"
                code = "attempts_exhausted"
            detail = f"{detail} (attempt {attempt} of {max_attempts})"
        self._transition(at, [row], "running", "failed", error_code=code, detail=detail, **common)
        return "failed"

    # -- explicit retry -------------------------------------------------------------------

    def retry_failed(self, batch_id: str) -> int:
        """Put a batch's failed items back to ``queued`` with a fresh attempt budget.

        The one non-monotonic transition, logged like any other. Items that failed at
        admission (nothing was ever accepted to render: unreadable, outside the root, not an
        image) are left as they are; submitting again is the way to retry those. Returns how
        many items were requeued.
        """
        with self._write(durable=True) as now:
            at = iso(now)
            cancel_at, deadline, expired_at = self._conn.execute(
                "SELECT cancel_requested_at, deadline_at, expired_at FROM batches WHERE batch_id = ?", (batch_id,)
            ).fetchone()
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
                r[0]
                for r in self._conn.execute(
                    "SELECT id FROM items WHERE batch_id = ? AND state = 'failed' AND derivative_key IS NOT NULL",
                    (batch_id,),
                )
            ]
            moved = self._transition(at, rows, "failed", "queued", detail="retry requested")
            for start in range(0, len(moved), _CHUNK):
                chunk = moved[start : start + _CHUNK]
                self._conn.execute(f"UPDATE items SET attempt = 0 WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            return len(moved)

    # -- rescue and deadlines -----------------------------------------------------------

    def rescue_leases(self, is_dead: Callable[[str], bool], delay_for: DelayFor) -> int:
        """Requeue (or fail, when the attempts are spent) items whose lease expired or
        whose owner process is gone; returns how many were rescued."""
        with self._write() as now:
            return self._rescue(now, is_dead, delay_for)

    def _rescue(self, now: float, is_dead: Callable[[str], bool], delay_for: DelayFor) -> int:
        at = iso(now)
        running = self._conn.execute(
            "SELECT id, lease_owner, lease_expires_at FROM items WHERE state = 'running'"
        ).fetchall()
        dead = {owner for owner in {r[1] for r in running} if owner and is_dead(owner)}
        victims = [(r[0], r[1]) for r in running if r[1] in dead or (r[2] is not None and r[2] <= at)]
        for row, owner in victims:
            why = "its worker process is gone" if owner in dead else "its lease expired"
            self._settle_one(now, at, row, "worker_crashed", why, None, owner, delay_for)
        return len(victims)

    def _expire_deadlines(self, at: str) -> None:
        late = [
            r[0]
            for r in self._conn.execute(
                "SELECT batch_id FROM batches WHERE deadline_at IS NOT NULL AND deadline_at <= ?", (at,)
            )
        ]
        for batch_id in late:
            rows = [
                r[0]
                for r in self._conn.execute("SELECT id FROM items WHERE batch_id = ? AND state = 'queued'", (batch_id,))
            ]
            self._transition(
                at, rows, "queued", "failed", error_code="deadline_exceeded", detail="the batch deadline passed"
            )

    # -- reading the queue ----------------------------------------------------------------

    def queue_state(self, batch_id: str | None = None) -> QueueState:
        """Live items in scope: runnable now, delayed by backoff, running."""
        at = iso(self.clock())  # type: ignore[attr-defined]
        scope = " AND i.batch_id = ?" if batch_id else ""
        params: list[object] = [at, at, at, *([batch_id] if batch_id else [])]
        row = self._conn.execute(
            "SELECT sum(i.state = 'queued' AND (i.not_before IS NULL OR i.not_before <= ?)), "
            "sum(i.state = 'queued' AND i.not_before > ?), sum(i.state = 'running'), "
            "min(CASE WHEN i.state = 'queued' AND i.not_before > ? THEN i.not_before END) "
            "FROM items i JOIN batches b USING (batch_id) WHERE i.state IN ('queued', 'running') "
            f"AND (b.cancel_requested_at IS NULL OR i.state = 'running'){scope}",
            params,
        ).fetchone()
        return QueueState(row[0] or 0, row[1] or 0, row[2] or 0, row[3])

    def queue_idle(self, batch_id: str | None = None) -> bool:
        """No live item in scope (what :attr:`QueueState.idle` says), found without counting:
        each query stops at the first live item, so a worker whose claim came back empty asks
        this at the same cost whatever the length of the queue."""
        scope = " AND batch_id = ?" if batch_id else ""
        extra = [batch_id] if batch_id else []
        live = self._conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM items WHERE state = 'running'{scope}) "
            f"OR EXISTS (SELECT 1 FROM items WHERE state = 'queued'{scope}{_NOT_CANCELLED})",
            [*extra, *extra],
        ).fetchone()[0]
        return not live

    def overdue_owners(self, seconds: float) -> list[str]:
        """Lease owners with a running item whose stage (the decode of its source, or its render
        and publish) started more than ``seconds`` ago."""
        cutoff = iso(self.clock() - seconds)  # type: ignore[attr-defined]
        rows = self._conn.execute(
            "SELECT DISTINCT lease_owner FROM items WHERE state = 'running' AND lease_owner IS NOT NULL "
            "AND stage_started_at < ?",
            (cutoff,),
        ).fetchall()
        return [r[0] for r in rows]

    def stop_overdue(self, owner: str, seconds: float, code: str, detail: str) -> int:
        """End ``owner``'s items whose stage has run over ``seconds`` ``failed`` with ``code`` (a
        permanent verdict) and put its other running items back to ``queued`` without spending an
        attempt (their render never started), all before the worker is stopped. Returns how many
        failed: 0 when the stage ended meanwhile (then the worker must be left alone)."""
        with self._write() as now:
            at = iso(now)
            running = self._conn.execute(
                "SELECT id, coalesce(stage_started_at < ?, 0) FROM items WHERE state = 'running' AND lease_owner = ?",
                (iso(now - seconds), owner),
            ).fetchall()
            overdue = [row for row, late in running if late]
            if not overdue:
                return 0
            waiting = [row for row, late in running if not late]
            self._transition(at, overdue, "running", "failed", error_code=code, detail=detail, worker=owner)
            why = f"its worker was stopped ({detail}) before this item's render; the attempt is not counted"
            self._transition(at, waiting, "running", "queued", detail=why, worker=owner)
            for start in range(0, len(waiting), _CHUNK):
                chunk = waiting[start : start + _CHUNK]
                self._conn.execute(
                    f"UPDATE items SET attempt = attempt - 1 WHERE id IN ({','.join('?' * len(chunk))})", chunk
                )
            return len(overdue)
