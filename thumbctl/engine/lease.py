"""A worker's hold on the queue: its ledger connection, taking a claim under a lease, and the
heartbeat thread that keeps the lease of the claim in hand alive."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..config.settings import busy_policy
from ..core.errors import LedgerBusy, LedgerFault, LedgerUnavailable, ThumbctlError
from ..core.proc import owner_is_dead
from ..ledger import Claim, Ledger, is_server_url


def open_ledger(target: str) -> Ledger:
    """The ledger of a worker process (or its heartbeat). A server that cannot be reached yet
    (restarting, or refusing connections for a moment) is waited for within the busy policy's
    bound, as a lost connection is later: the coordinator reached it already, so this is an
    outage, not a wrong URL. A file ledger opens at once (a full disk is reported, not waited out)."""
    if not is_server_url(target):
        return Ledger(target)
    for attempt in busy_policy().retrying(LedgerUnavailable):
        with attempt:
            return Ledger(target)
    raise AssertionError("unreachable")  # pragma: no cover - tenacity re-raises the last error


def take_claim(
    ledger: Ledger,
    owner: str,
    *,
    batch_id: str | None,
    lease_seconds: float,
    delay_for: Callable[[int], float],
    until_idle: bool,
) -> tuple[Claim | None, bool]:
    """A claim under a lease of ``lease_seconds`` (rescuing the items of dead owners), or None; and
    whether the worker may stop: nothing was claimed, ``until_idle`` and the queue is idle. A busy
    ledger (the busy policy's bound passed) takes nothing: None, to try again later."""
    try:
        claim = ledger.queue.claim(
            owner, batch_id=batch_id, lease_seconds=lease_seconds, is_dead=owner_is_dead, delay_for=delay_for
        )
        return claim, claim is None and until_idle and ledger.queue.queue_idle(batch_id)
    except LedgerBusy:
        return None, False


class Heartbeat:
    """Extends the lease of the claim in hand every ``every`` seconds by ``lease_seconds``.

    One thread and one connection per worker process, for all its claims;
    if the ledger says the lease is gone, ``lost`` is set for that claim.
    """

    def __init__(self, db_path: str, lease_seconds: float, every: float) -> None:
        self.db_path = db_path
        self.lease_seconds = lease_seconds
        self.every = every
        self.lost = threading.Event()
        self._token: str | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @contextmanager
    def tracking(self, token: str) -> Iterator[threading.Event]:
        with self._lock:
            self._token = token
            self.lost.clear()
        try:
            yield self.lost
        finally:
            with self._lock:
                self._token = None

    def _beat(self) -> None:
        try:
            ledger = open_ledger(self.db_path)
        except LedgerFault:  # the worker's own connection meets the same fault and stops the worker
            return
        with ledger:
            while not self._done.wait(self.every):
                with self._lock, contextlib.suppress(ThumbctlError, sqlite3.Error):  # try again next beat
                    if self._token is not None and ledger.queue.heartbeat(self._token, self.lease_seconds) == 0:
                        self.lost.set()
