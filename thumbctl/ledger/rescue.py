"""Rescue, the part of the queue port a claimer runs before it claims: expired and dead leases,
batch deadlines, and cancels left unfinished (:class:`~.queue.Queue` keeps them with it, so no
separate janitor is needed). Whether there is any to do is read before the write transaction, and
no process is looked at while the ledger is locked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..core.models import ItemState
from .backend import Backend
from .sql import queue as sql
from .timefmt import has_passed, iso, stored_seconds
from .transitions import DelayFor, Transitions

#: Seconds a lease owner found alive is taken to be alive before its process is looked at again.
ALIVE_RECHECK = 1.0


@dataclass(frozen=True)
class RescueDue:
    """What a claimer read before its transaction: lease owners found dead, and each owner's earliest
    lease expiry (owner None: a batch past its deadline with queued items, at its deadline)."""

    dead: frozenset[str]
    expiries: list[tuple[str | None, str | None]]
    #: A queued item's ``not_before`` does not parse (:meth:`LeaseRescue._release_damaged_waits`).
    damaged_wait: bool = False

    def needed(self, at: str) -> bool:
        """Whether rescue or deadline work may be due at ``at``."""
        expired = any(owner is None or has_passed(e, at) for owner, e in self.expiries)
        return bool(self.dead) or self.damaged_wait or expired


class LeaseRescue:
    """Rescue of one ledger's leases, deadlines and unfinished cancels (a part of its queue)."""

    db: Backend
    log: Transitions
    #: Owners found alive, by the ``is_dead`` that looked, with when (:func:`time.monotonic`).
    _alive: dict[Callable[[str], bool], dict[str, float]]

    def rescue_leases(self, is_dead: Callable[[str], bool], delay_for: DelayFor) -> int:
        dead = self._dead_owners(is_dead)
        with self.db.write() as now:
            rescued = self._rescue(now, dead, delay_for)
            self._finish_cancels(iso(now))
            return rescued

    def _dead_owners(self, is_dead: Callable[[str], bool]) -> frozenset[str]:
        """Owners of running items whose process is gone, each one looked at now (see :meth:`_rescue_due`)."""
        return self._rescue_due(is_dead, recheck=0.0).dead

    def _rescue_due(self, is_dead: Callable[[str], bool], recheck: float = ALIVE_RECHECK) -> RescueDue:
        """What there may be to rescue, read before the write transaction: no process is looked at
        while the ledger is locked (an owner that starts meanwhile is live). In a claim, an owner
        found alive is looked at again after ``recheck`` seconds, not at every claim (a claimer beside
        dozens of workers would otherwise read /proc for each of them before each claim: its items
        wait that much longer at most; the pool rescues its own dead workers' items at once, through
        :meth:`rescue_leases`). An owner found dead stays so."""
        rows = self.db.execute(sql.RESCUE_DUE, (iso(self.db.clock()),)).fetchall()
        alive = self._alive.setdefault(is_dead, {})
        now = time.monotonic()
        dead: set[str] = set()
        for row in rows:
            owner = row["owner"]
            if owner is None or now - alive.get(owner, -recheck - 1) < recheck:
                continue
            if is_dead(owner):
                dead.add(owner)
            else:
                alive[owner] = now
        if len(alive) > 4 * len(rows) + 64:  # owners gone from the ledger are forgotten
            current = {row["owner"] for row in rows}
            for owner in [o for o in alive if o not in current]:
                del alive[owner]
        latest = self.db.scalar(sql.LATEST_NOT_BEFORE, ())
        damaged_wait = latest is not None and stored_seconds(latest) is None
        return RescueDue(frozenset(dead), [(row["owner"], row["expires"]) for row in rows], damaged_wait)

    def _rescue(self, now: float, dead: frozenset[str], delay_for: DelayFor) -> int:
        at = iso(now)
        running = self.db.execute(sql.LEASES).fetchall()
        victims = [
            (r["id"], r["lease_owner"])
            for r in running
            if r["lease_owner"] in dead or has_passed(r["lease_expires_at"], at)
        ]
        rescued = 0
        for row, owner in victims:
            why = "its worker process is gone" if owner in dead else "its lease expired"
            rescued += self.log.settle(now, row, "worker_crashed", why, None, owner, delay_for) != "unchanged"
        if rescued:
            self.log.faults.hit("after_rescue")
        self._release_damaged_waits(at)
        return rescued

    def _release_damaged_waits(self, at: str) -> None:
        """A queued item whose ``not_before`` does not parse (a damaged row) waits no longer: it is
        due now, as a lease expiry that does not parse counts as expired."""
        for row in self.db.execute(sql.WAITING, (at,)).fetchall():
            if stored_seconds(row["not_before"]) is None:
                self.db.execute(sql.RELEASE_WAIT, (at, row["id"]))

    def _expire_deadlines(self, at: str) -> None:
        late = [r["batch_id"] for r in self.db.execute(sql.LATE_BATCHES, (at,)).fetchall()]
        for batch_id in late:
            rows = [r["id"] for r in self.db.execute(sql.QUEUED_OF_BATCH, (batch_id,)).fetchall()]
            self.log.move(
                at,
                rows,
                ItemState.QUEUED,
                ItemState.FAILED,
                error_code="deadline_exceeded",
                detail="the batch deadline passed",
            )

    def _finish_cancels(self, at: str) -> None:
        """Cancel the queued items of batches whose cancel was requested: no claim takes them, so
        without this their batch would stay ``cancel_requested`` until reconcile. A cancel cancels
        its batch's queued items itself and every path that puts an item back reads the flag under
        the batch row's share lock; these are items a ledger written by an older thumbctl left."""
        for row in self.db.execute(sql.UNFINISHED_CANCELS).fetchall():
            queued = [r["id"] for r in self.db.execute(sql.QUEUED_OF_BATCH, (row["batch_id"],)).fetchall()]
            detail = f"the batch's cancel was requested at {row['cancel_requested_at']}"
            self.log.move(at, queued, ItemState.QUEUED, ItemState.CANCELLED, detail=detail)
