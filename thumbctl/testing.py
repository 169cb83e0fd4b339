"""In-memory ports for unit tests of code that uses the ledger.

:class:`InMemoryLedger` is a :class:`~thumbctl.Ledger` whose ports (``queue``, ``views``,
``upkeep``, ``intake``: the protocols :class:`~thumbctl.ledger.Queue`,
:class:`~thumbctl.ledger.Views`, :class:`~thumbctl.ledger.Upkeep`,
:class:`~thumbctl.ledger.Intake`) keep their rows in this process's memory::

    from thumbctl.testing import InMemoryLedger

    with InMemoryLedger() as ledger:
        view = ledger.intake.accept_batch(new_batch, limits)
        claim = ledger.queue.claim("worker-1")

Decision: the in-memory ledger is the SQLite backend on a private in-memory database
(:mod:`thumbctl.ledger.memory`: SQLite's ``memdb`` VFS, named per ledger), not a second
implementation of the ports in Python. There is one set of SQL, schema and migrations, so it
cannot drift from the real ledger, and it passes the same contract suite
(``tests/test_ledger_contract.py``, ``[memory]``) as a SQLite file and PostgreSQL, except the
cases about durability (a commit that reaches the disk, a ledger reopened after its last
connection closed) and about other processes, which cannot apply to memory. It writes no file and
starts no process. Another ``InMemoryLedger`` of the same name is a second connection to the same
data (what another process would see); the data is gone when the last one closes.
"""

from __future__ import annotations

import time
import uuid

from .core.retries import BusyPolicy
from .ledger import Ledger
from .ledger.backend import Clock
from .ledger.memory import InMemory

__all__ = ["InMemoryLedger"]


class InMemoryLedger(Ledger):
    """A ledger in this process's memory, named ``name`` (a fresh name when none is given)."""

    def __init__(
        self,
        name: str | None = None,
        *,
        busy_timeout: float | None = None,
        clock: Clock = time.time,
        read_only: bool = False,
        busy: BusyPolicy | None = None,
    ) -> None:
        self.name = name or f"ledger-{uuid.uuid4().hex}"
        super().__init__(InMemory(self.name), busy_timeout=busy_timeout, clock=clock, read_only=read_only, busy=busy)

    def __enter__(self) -> InMemoryLedger:
        return self
