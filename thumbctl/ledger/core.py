"""The ledger: one connection, and the ports each role of thumbctl uses.

Opening a :class:`Ledger` opens its backend (a SQLite file, :mod:`.sqlite`, or a PostgreSQL
server, :mod:`.postgres`) and builds five ports on it, each the interface of one role:

* ``queue`` (:class:`~.queue.QueuePort`): the workers and the pool: claims, leases, outcomes, rescue;
* ``views`` (:class:`~.views.ViewsPort`): status, the sheet, progress, stats and the api: batch
  views, item and event listings, live following;
* ``upkeep`` (:class:`~.upkeep.UpkeepPort`): reconcile, gc, mirror, release and the layout migration;
* ``intake`` (:class:`~.intake.IntakePort`): submit, cancel and focus: acceptance, the stat cache;
* ``catalogue`` (:class:`~.catalogue.CataloguePort`): the live names of an OUT and what made them.

Each port is a :class:`typing.Protocol`, documented once in the module carrying its name, which
also holds its one implementation over SQL (``Queue``, ``Views``, ``Upkeep``, ``Intake``, ``Catalogue``) for
every backend: a SQLite file, a PostgreSQL server, or an in-memory SQLite database
(:class:`thumbctl.testing.InMemoryLedger`). Code using the ledger is typed against the protocols.

Rules kept by every port:

* Acceptance, cancellation and retry commit durably; every write is one transaction of its backend.
* A busy ledger is waited out by one policy (:class:`~thumbctl.core.retries.BusyPolicy`), and a
  connection lost to a server restart is reopened and the operation run again, within its bound:
  the retry wraps each port once (:mod:`.retry`); database errors about the ledger become stable
  thumbctl errors in the backends.
* Every state change is a conditional move on the current state (:mod:`.transitions`) that
  appends its event in the same transaction; events are numbered in commit order.
* Counts are always derived from item rows.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.ledgerurl import is_server_url
from ..config.settings import busy_policy
from ..core.errors import LedgerFault
from ..core.retries import BusyPolicy
from .backend import Backend, Clock
from .catalogue import Catalogue, CataloguePort
from .intake import Intake, IntakePort
from .queue import Queue, QueuePort
from .retry import Retrier, with_retry
from .transitions import Transitions
from .upkeep import Upkeep, UpkeepPort
from .views import Views, ViewsPort

if TYPE_CHECKING:
    from .memory import InMemory


def open_backend(target: Path | str | InMemory, *, clock: Clock, busy: BusyPolicy, read_only: bool) -> Backend:
    """The backend for ``target``: a ``postgresql://`` URL opens a server ledger, an
    :class:`~.memory.InMemory` target an in-memory one, any other text or path a file."""
    if not isinstance(target, str | Path):
        from .memory import MemoryBackend

        return MemoryBackend(target, clock=clock, busy=busy, read_only=read_only)
    if is_server_url(target):
        from .postgres import PostgresBackend

        return PostgresBackend(str(target), clock=clock, busy=busy, read_only=read_only)
    from .sqlite import SqliteBackend

    return SqliteBackend(Path(target), clock=clock, busy=busy, read_only=read_only)


class Ledger:
    """A connection to one ledger: a file (SQLite) or a server URL (PostgreSQL), and its ports
    (``queue``, ``views``, ``upkeep``, ``intake``, ``catalogue``). Not shared across processes or threads."""

    queue: QueuePort
    views: ViewsPort
    upkeep: UpkeepPort
    intake: IntakePort
    catalogue: CataloguePort

    def __init__(
        self,
        target: Path | str | InMemory,
        *,
        busy_timeout: float | None = None,
        clock: Clock = time.time,
        read_only: bool = False,
        busy: BusyPolicy | None = None,
    ) -> None:
        """Open the ledger at ``target``: a file path, a ``postgresql://`` URL, or an
        :class:`~.memory.InMemory` database (:class:`thumbctl.testing.InMemoryLedger`). ``read_only``
        never writes (for commands that only read; a ledger needing a schema upgrade is upgraded
        first where it is writable). ``busy`` is the busy policy (default:
        :func:`~thumbctl.config.settings.busy_policy`); ``busy_timeout`` overrides its timeout."""
        self.clock = clock
        self.read_only = read_only
        policy = busy or busy_policy()
        if busy_timeout is not None:
            policy = replace(policy, timeout=busy_timeout, bound=max(policy.bound, busy_timeout))
        self.busy = policy
        self._db = open_backend(target, clock=self._now, busy=policy, read_only=read_only)
        self.path = self._db.name
        self._log = Transitions(self._db)
        retrier = Retrier(self._db, policy)
        views = Views(self._db)
        self.queue = with_retry(Queue(self._db, self._log), retrier)
        self.views = with_retry(views, retrier)
        self.upkeep = with_retry(Upkeep(self._db, self._log), retrier)
        self.intake = with_retry(Intake(self._db, self._log, views, retrier), retrier)
        self.catalogue = with_retry(Catalogue(self._db), retrier)

    def _now(self) -> float:
        return self.clock()

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.kind

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_file(self) -> None:
        """Raise :class:`LedgerGone` if the ledger file is no longer the one opened (a file ledger)."""
        self._db.check_file()

    def fault(self, code: str, detail: str) -> LedgerFault:
        """The error ``code`` (``ledger_full``, ``ledger_corrupt``, …) for this ledger, with its advice."""
        return self._db.fault(code, detail)  # type: ignore[return-value]
