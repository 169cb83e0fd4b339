"""The in-memory ledger backend: the SQLite backend on a database held in this process's memory.

It runs the same SQL, schema and migrations as a ledger file (:class:`~.sqlite.SqliteBackend`),
so it cannot drift from it; what belongs to a file is left out: WAL mode, the check that the file
is still the one opened, and the -shm crash guard. Every :class:`InMemory` target of one name
opens the same database (another ``Ledger`` on it is another connection, as another process's
would be); the database is gone when its last connection closes.

Durability does not apply (nothing reaches a disk), and other processes cannot open it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.retries import BusyPolicy
from .backend import Clock
from .connection import LedgerConnection, checked_rows, connect_memory, memory_path, memory_uri
from .sqlite import SqliteBackend


@dataclass(frozen=True)
class InMemory:
    """The target of an in-memory ledger: its name in this process. A ``--db`` text never names
    one: only code (tests, :class:`thumbctl.testing.InMemoryLedger`) opens it."""

    name: str

    def __str__(self) -> str:
        return str(memory_path(self.name))


class MemoryBackend(SqliteBackend):
    """A connection to the in-memory ledger ``target``."""

    def __init__(self, target: InMemory, *, clock: Clock, busy: BusyPolicy, read_only: bool = False) -> None:
        self.target = target
        super().__init__(memory_path(target.name), clock=clock, busy=busy, read_only=read_only)

    @property
    def uri(self) -> str:
        """What :func:`sqlite3.connect` (``uri=True``) opens to reach this database beside the ledger."""
        return memory_uri(self.target.name)

    def _open_connection(self) -> LedgerConnection:
        conn = connect_memory(self.target.name, self.busy.timeout)
        conn.row_factory = checked_rows(self.path)
        return conn

    def check_file(self) -> None:
        """No file to lose: the database lives as long as a connection to it."""

    def close(self) -> None:
        self.conn.close()
