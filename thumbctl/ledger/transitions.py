"""The one transition primitive: move items between states and log one event per move.

Every state change of an item, made by any part of the ledger, goes through :meth:`Transitions.move`:
a conditional change (only rows still in ``from_state``, still under a lease token when given), read
under a row lock where the backend runs writers side by side, with its events queued for the end of
the transaction (:meth:`~.backend.Backend.flush_events`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from ..core.errors import is_transient
from ..core.faults import Faults
from ..core.models import ItemState
from ..core.redact import redacted_text
from .backend import Backend, Row
from .sql import Query
from .sql import queue as sql
from .states import QUEUED
from .timefmt import iso

DelayFor = Callable[[int], float]
#: Rows per statement of a transition over many rows.
CHUNK = 500


def chunks(values: Sequence[int], size: int = CHUNK) -> Iterator[Sequence[int]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class Transitions:
    """Item moves and batch events, inside a write transaction the caller holds."""

    def __init__(self, db: Backend) -> None:
        self.db = db
        #: The fault-injection rules of this process (tests): a rescue pauses or dies at ``after_rescue``.
        self.faults = Faults()

    def move(
        self,
        at: str,
        rows: Sequence[int],
        from_state: str,
        to_state: str,
        *,
        token: str | None = None,
        error_code: str | None = None,
        detail: str | None = None,
        not_before: str | None = None,
        worker: str | None = None,
    ) -> list[int]:
        """Move ``rows`` from ``from_state`` to ``to_state`` (only those still there, and still
        under ``token`` when given) and log one event each. Returns the moved rows."""
        moved: list[int] = []
        detail = _recorded(detail)
        for chunk in chunks(rows):
            moved += self._move(at, chunk, from_state, to_state, token, error_code, detail, not_before, worker)
        return moved

    def _move(
        self,
        at: str,
        rows: Sequence[int],
        from_state: str,
        to_state: str,
        token: str | None,
        error_code: str | None,
        detail: str | None,
        not_before: str | None,
        worker: str | None,
    ) -> list[int]:
        guard = [token] if token is not None else []
        found = [
            r["id"] for r in self.db.execute(sql.MOVABLE, [*rows, from_state, *guard], ids=len(rows), guard=len(guard))
        ]
        if not found:
            return []
        queued_at = at if to_state == ItemState.QUEUED else None
        changed = self.db.execute(
            sql.MOVE,
            [to_state, at, error_code, detail, not_before, queued_at, *found],
            ids=len(found),
            lease=int(to_state != ItemState.RUNNING),
        ).fetchall()
        for row in sorted(changed, key=lambda r: r["id"]):
            self.db.append_event(
                _event(at, row["batch_id"], row["id"], from_state, to_state, row["attempt"], worker, error_code, detail)
            )
        return found

    def take(self, at: str, rows: Sequence[int], owner: str, token: str, expires: str) -> list[Row]:
        """``queued -> running`` under the lease ``token`` of ``owner`` until ``expires``, counting an
        attempt (a claim; only rows still queued move); one event each. Returns the moved rows with
        what a claim holds of them, by id."""
        taken: list[Row] = []
        for chunk in chunks(rows):
            params = [at, owner, token, expires, at, *chunk]
            taken += self.db.execute(sql.TAKE, params, ids=len(chunk)).fetchall()
        taken.sort(key=lambda r: r["id"])
        for row in taken:
            self.db.append_event(
                _event(
                    at,
                    row["batch_id"],
                    row["id"],
                    ItemState.QUEUED,
                    ItemState.RUNNING,
                    row["attempt"],
                    owner,
                    None,
                    None,
                )
            )
        return taken

    def published(
        self,
        at: str,
        row: int,
        batch_id: str,
        attempt: int,
        token: str,
        worker: str,
        *,
        note: str | None,
        version: str | None,
        result: str | None,
    ) -> None:
        """``running -> succeeded`` of ``row``, which the caller holds locked under ``token`` (so the
        move cannot miss it): deferred to the end of the transaction with the version published at its
        name and the render's ``result``; its event carries ``note``."""
        self.db.defer(sql.PUBLISHED, (at, version, result, row, token))
        self.db.append_event(
            _event(at, batch_id, row, ItemState.RUNNING, ItemState.SUCCEEDED, attempt, worker, None, note)
        )

    def event(
        self,
        at: str,
        batch_id: str,
        item_row: int | None,
        from_state: str | None,
        attempt: int | None,
        to_state: str,
        *,
        error_code: str | None = None,
        detail: str | None = None,
    ) -> None:
        """An event that moves no item: a batch's cancel request, expiry, a relink, a removal."""
        event = _event(at, batch_id, item_row, from_state, to_state, attempt, None, error_code, _recorded(detail))
        self.db.append_event(event)

    def settle(
        self,
        now: float,
        row: int,
        code: str,
        detail: str,
        token: str | None,
        worker: str | None,
        delay_for: DelayFor,
    ) -> str:
        """Settle one running item that failed with ``code``: back to ``queued`` with a persisted
        ``not_before`` while attempts and the deadline allow, else ``failed``; ``cancelled`` when its
        batch's cancel was requested. Returns the new state (the row is locked first, so a
        concurrent settle of the same row moves nothing)."""
        at = iso(now)
        found = self.db.execute(sql.SETTLEABLE, (row,)).fetchone()
        if found is None:
            return "unchanged"
        common = {"token": token, "worker": worker}
        attempt, max_attempts, deadline = found["attempt"], found["max_attempts"], found["deadline_at"]
        if found["cancel_requested_at"] is not None:
            self.move(at, [row], ItemState.RUNNING, ItemState.CANCELLED, **common)
            return ItemState.CANCELLED
        if is_transient(code) and attempt < max_attempts:
            not_before = iso(now + delay_for(attempt))
            if deadline is None or not_before < deadline:
                self.move(
                    at,
                    [row],
                    ItemState.RUNNING,
                    ItemState.QUEUED,
                    error_code=code,
                    detail=detail,
                    not_before=not_before,
                    **common,
                )
                return ItemState.QUEUED
            code, detail = "deadline_exceeded", f"the next attempt would start after the deadline ({detail})"
        elif is_transient(code):
            if code != "worker_crashed":
                detail = f"{code}: {detail}"
                code = "attempts_exhausted"
            detail = f"{detail} (attempt {attempt} of {max_attempts})"
        self.move(at, [row], ItemState.RUNNING, ItemState.FAILED, error_code=code, detail=detail, **common)
        return ItemState.FAILED

    def set_attempts(self, rows: Sequence[int], update: Query) -> None:
        """Run ``update`` (``FRESH_ATTEMPTS``, ``UNCOUNTED_ATTEMPTS``, … of :mod:`.sql.queue`) on ``rows``."""
        for chunk in chunks(rows):
            self.db.execute(update, list(chunk), ids=len(chunk))


def _recorded(detail: str | None) -> str | None:
    """A detail as the ledger records it: a URL in it without credentials or signed-query secrets
    (details are shown by ``status``, ``events`` and the sheet; see :mod:`thumbctl.core.redact`)."""
    return redacted_text(detail) if detail else detail


def _event(
    at: str,
    batch_id: str,
    item_row: int | None,
    from_state: str | None,
    to_state: str,
    attempt: int | None,
    worker: str | None,
    error_code: str | None,
    detail: str | None,
) -> dict[str, object]:
    return {
        "at": at,
        "batch_id": batch_id,
        "item_row": item_row,
        "from_state": from_state,
        "to_state": to_state,
        "attempt": attempt,
        "worker": worker,
        "error_code": error_code,
        "detail": detail,
        "dedup": 0,
    }


__all__ = ["CHUNK", "QUEUED", "Transitions", "chunks"]
