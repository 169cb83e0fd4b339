"""The embedded ledger backend: one SQLite file in WAL mode.

Every write is ``BEGIN IMMEDIATE``: SQLite lets one writer at a time, so a write transaction
excludes every other and needs no row locks; a busy write lock is waited out by the busy policy
(:class:`~thumbctl.core.retries.BusyPolicy`). SQLite errors about the file become stable thumbctl
errors in :mod:`.connection`; every write first checks the file is still the one opened.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.errors import LedgerBusy, LedgerError, LedgerFault, LedgerUnavailable
from ..core.retries import BusyPolicy
from .backend import Backend, Clock, Params
from .connection import (
    FileIdentity,
    LedgerConnection,
    LedgerCursor,
    checked_rows,
    connect,
    fault_for,
    file_identity,
    gone_error,
)
from .schema import MIGRATIONS, NEWEST, SCHEMA_VERSION
from .sql import SQLITE, Query


class SqliteBackend(Backend):
    """A connection to one ledger file."""

    kind = SQLITE

    def __init__(self, path: Path, *, clock: Clock, busy: BusyPolicy, read_only: bool = False) -> None:
        super().__init__()
        self.path = Path(path)
        self.name = str(self.path)
        self.clock = clock
        self.busy = busy
        self.read_only = read_only
        self._identity: FileIdentity | None = None
        self.conn = self._open_connection()
        self._synchronous: str | None = None
        self._migrate()

    def _open_connection(self) -> LedgerConnection:
        """The connection to the file, and the identity of the file it opened."""
        conn = self._connect_file()
        self._identity = file_identity(self.path)
        return conn

    def _connect_file(self) -> LedgerConnection:
        conn = connect(self.path, self.busy.timeout, read_only=self.read_only)
        conn.row_factory = checked_rows(self.path)
        if not self.read_only or _schema_version(conn) >= SCHEMA_VERSION:
            return conn
        conn.close()
        try:
            conn = connect(self.path, self.busy.timeout)
        except LedgerUnavailable as exc:
            raise LedgerError(
                f"{self.path} needs a schema upgrade (to version {SCHEMA_VERSION}) and cannot be written here "
                f"({exc.code}): run any thumbctl command once where it is writable",
                code="ledger_read_only",
            ) from exc
        conn.row_factory = checked_rows(self.path)
        return conn

    # -- statements ----------------------------------------------------------------------------

    def execute(self, query: Query, params: Params = (), **counts: int) -> LedgerCursor:
        return self.conn.execute(query.text(SQLITE, **counts), params)

    def executemany(self, query: Query, rows: Iterable[Params]) -> None:
        self.conn.executemany(query.text(SQLITE), rows)

    @staticmethod
    def first_value(row: Any) -> Any:
        return row[0]

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def write(self, *, durable: bool = False) -> Iterator[float]:
        """``BEGIN IMMEDIATE`` on the file still at :attr:`path`; the events come last."""
        synchronous = "FULL" if durable else "NORMAL"
        if synchronous != self._synchronous:  # a setting of the connection: set when it changes
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            self._synchronous = synchronous
        self._begin()
        try:
            self.check_file()
            yield self.clock()
            self.flush_events()
            self.conn.execute("COMMIT")
        except BaseException:
            self.discard_events()
            if self.conn.in_transaction:
                with contextlib.suppress(LedgerFault):  # the first fault is the one to report
                    self.conn.execute("ROLLBACK")
            raise

    def _begin(self) -> None:
        """``BEGIN IMMEDIATE``, retried by the busy policy: the one place a busy ledger is waited out."""
        for attempt in self.busy.retrying(LedgerBusy):
            with attempt:
                self.conn.execute("BEGIN IMMEDIATE")

    @contextmanager
    def reading(self) -> Iterator[None]:
        """WAL: writers carry on while a reader keeps its snapshot. Inside a transaction already
        open, that one is the snapshot."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:
                with contextlib.suppress(LedgerFault):  # a read has nothing to keep; the first fault is the one
                    self.conn.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    # -- lifecycle -----------------------------------------------------------------------------

    def check_file(self) -> None:
        """Raise :class:`LedgerGone` if the file at :attr:`path` is no longer the one this
        connection opened (deleted, its folder deleted, or replaced): every write checks."""
        now = file_identity(self.path)
        if now != self._identity:
            raise gone_error(self.path, now)
        if self._shm_unwritable():
            shm = os.path.basename(f"{self.path}-shm")
            raise self.fault("ledger_io_error", f"its shared-memory file {shm} cannot be written")

    def _shm_unwritable(self) -> bool:
        """Whether the ledger's -shm file cannot be written while the ledger can (made immutable):
        SQLite maps it, and the next page it touches kills this process with SIGBUS."""
        shm = f"{self.path}-shm"
        return os.access(self.path, os.W_OK) and os.path.exists(shm) and not os.access(shm, os.W_OK)

    def fault(self, code: str, detail: str) -> LedgerFault:
        return fault_for(code, self.path, detail)

    def close(self) -> None:
        if self._shm_unwritable():
            _abandon(self.conn)
            return
        self.conn.close()

    def reconnect(self) -> None:
        """A file connection is never lost."""

    def _migrate(self) -> None:
        version = _schema_version(self.conn)
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"{self.path} has schema version {version}; this thumbctl knows up to {SCHEMA_VERSION}: "
                "upgrade thumbctl"
            )
        with self.write(durable=True):
            version = _schema_version(self.conn)  # again: another process may have created or upgraded it
            if version == 0:
                self._create()
            elif version < SCHEMA_VERSION:
                self._upgrade(version)

    def _create(self) -> None:
        """A new ledger: the newest schema at once, not every migration replayed."""
        for statement in NEWEST:
            self.conn.execute(statement)
        self.conn.execute(f"PRAGMA user_version={int(SCHEMA_VERSION)}")

    def _upgrade(self, version: int) -> None:
        """A ledger of an earlier schema: the migrations it lacks, in order."""
        import sqlite_utils  # only here: creating a ledger or opening an up-to-date one stays light

        db = sqlite_utils.Database(self.conn)
        for target, migrate in MIGRATIONS:
            if target > version:
                migrate(db)
                self.conn.execute(f"PRAGMA user_version={int(target)}")


def _abandon(conn: LedgerConnection) -> None:
    """Never close ``conn``, not even when the interpreter ends: the last connection to close checkpoints
    through the -shm file, and with that file unwritable the touch kills the process by SIGBUS
    before its exit status says why. The operating system releases its file and locks."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))


def _schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])
