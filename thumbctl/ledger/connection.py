"""The ledger's SQLite connection: the one place where SQLite errors become thumbctl errors.

Every statement of the ledger package, read or write, in the CLI and in worker processes,
runs on a :class:`LedgerConnection`; any SQLite error it raises that is about the ledger
file itself (busy, full, unwritable, damaged) leaves as a :class:`~thumbctl.core.errors.LedgerFault`
with a stable code, so no command ends in a traceback. Other SQLite errors (a constraint,
a bug in a statement) pass through unchanged.

Also here: opening a ledger read-only (``status`` on a read-only mount) and the identity
(device, inode) of the file a connection opened, so a ledger deleted or replaced while in
use is noticed instead of written into the void.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from ..core.errors import (
    LedgerBusy,
    LedgerCorrupt,
    LedgerError,
    LedgerFault,
    LedgerFull,
    LedgerGone,
    LedgerIOError,
    LedgerUnavailable,
)

# SQLite primary result codes (https://sqlite.org/rescode.html).
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _PROTOCOL, _NOTADB = (
    3,
    5,
    6,
    8,
    10,
    11,
    13,
    14,
    15,
    26,
)
_UNWRITABLE = {_PERM, _READONLY, _IOERR, _CANTOPEN, _PROTOCOL}

FileIdentity = tuple[int, int]


def ledger_fault(exc: sqlite3.Error, path: Path) -> LedgerFault | None:
    """The thumbctl error for a SQLite error about the ledger file; None for any other error."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in (_BUSY, _LOCKED):
        return fault_for("ledger_busy", path, str(exc))
    if primary == _FULL:
        return fault_for("ledger_full", path, str(exc))
    if primary in _UNWRITABLE:
        return fault_for("ledger_full" if _nearly_full(path) else "ledger_io_error", path, str(exc))
    if primary in (_CORRUPT, _NOTADB) or _undecodable(exc):
        return fault_for("ledger_corrupt", path, str(exc))
    return None


def _undecodable(exc: sqlite3.Error) -> bool:
    """Text in the ledger's pages that is not UTF-8: Python's sqlite3 module raises this while
    fetching a row, with no SQLite result code; only damage (or a foreign writer) puts it there."""
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("Could not decode to UTF-8")


def checked_rows(path: Path) -> Callable[[sqlite3.Cursor, tuple[object, ...]], sqlite3.Row]:
    """The ledger's row factory: :class:`sqlite3.Row`, but a BLOB is ``ledger_corrupt`` as text that
    is not UTF-8 is (see :func:`_undecodable`). No column of the ledger holds bytes; SQLite keeps
    whatever storage class a value was written with, so only damage or a foreign writer (``SET
    result = x'ff'``) puts one there, and code reading text must never meet it."""

    def row(cursor: sqlite3.Cursor, values: tuple[object, ...]) -> sqlite3.Row:
        if bytes in map(type, values):
            column = next(d[0] for d, v in zip(cursor.description, values, strict=True) if isinstance(v, bytes))
            raise fault_for("ledger_corrupt", path, f"column {column} holds bytes (a BLOB), not text")
        return sqlite3.Row(cursor, values)

    return row


#: Free space under which an I/O error on the ledger is put down to a full disk: SQLite reports a
#: write that found no space in the WAL index or log as ``disk I/O error``, not ``database or disk is full``.
_NEARLY_FULL = 256 * 1024


def _nearly_full(path: Path) -> bool:
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return False
    free = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return free * st.f_frsize < _NEARLY_FULL


def fault_for(code: str, path: Path, detail: str) -> LedgerFault:
    """The error named ``code`` (a :class:`LedgerFault` code) for the ledger at ``path``, with its
    advice; ``detail`` says what SQLite (or a worker process) reported."""
    if code == "ledger_busy":
        return LedgerBusy(
            f"the ledger {path} stayed busy: another process held its write lock ({detail}); retry in a few seconds",
            retry_after=5,
        )
    if code == "ledger_full":
        return LedgerFull(
            f"the disk holding the ledger {path} is full ({detail}); what was recorded is kept: free space there, "
            "then run the command again (`thumbctl work` finishes a batch that was running)",
            retry_after=60,
        )
    if code == "ledger_io_error":
        return LedgerIOError(
            f"the ledger {path} cannot be written ({detail}): check the disk and that the file and its folder are "
            "writable (not a read-only mount), then run the command again (`thumbctl work` finishes a batch "
            "that was running)",
            retry_after=60,
        )
    if code == "ledger_gone":
        return LedgerGone(
            f"the ledger {path} was {detail} while thumbctl had it open; nothing more was recorded, and what was "
            "recorded since went with the old file: restore the ledger from a backup, or submit again"
        )
    return LedgerCorrupt(
        f"the ledger {path} is damaged ({detail}): recover what it holds with "
        f'`sqlite3 {path} ".recover" | sqlite3 {path}.recovered` and use that file as --db '
        "(then `thumbctl reconcile --repair`), or restore a backup of it"
    )


def _translated(exc: sqlite3.Error, path: Path) -> BaseException:
    return ledger_fault(exc, path) or exc


class LedgerCursor(sqlite3.Cursor):
    """A cursor whose statements and fetches raise :class:`LedgerFault` for ledger faults."""

    connection: LedgerConnection

    def execute(self, sql: str, parameters: object = (), /) -> LedgerCursor:
        try:
            return super().execute(sql, parameters)  # type: ignore[arg-type]
        except sqlite3.Error as exc:
            raise _translated(exc, self.connection.ledger_path) from exc

    def executemany(self, sql: str, seq_of_parameters: object, /) -> LedgerCursor:
        try:
            return super().executemany(sql, seq_of_parameters)  # type: ignore[arg-type]
        except sqlite3.Error as exc:
            raise _translated(exc, self.connection.ledger_path) from exc

    def fetchone(self) -> object:
        try:
            return super().fetchone()
        except sqlite3.Error as exc:
            raise _translated(exc, self.connection.ledger_path) from exc

    def fetchmany(self, size: int | None = None) -> list:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.Error as exc:
            raise _translated(exc, self.connection.ledger_path) from exc

    def fetchall(self) -> list:
        try:
            return super().fetchall()
        except sqlite3.Error as exc:
            raise _translated(exc, self.connection.ledger_path) from exc

    def __next__(self) -> object:
        try:
            return super().__next__()
        except sqlite3.Error as exc:
            raise _translated(exc, self.connection.ledger_path) from exc


class LedgerConnection(sqlite3.Connection):
    """A connection whose every statement runs on a :class:`LedgerCursor`."""

    ledger_path: Path

    def cursor(self, factory: type[sqlite3.Cursor] = LedgerCursor) -> LedgerCursor:  # type: ignore[override]
        return super().cursor(factory)  # type: ignore[return-value]

    def execute(self, sql: str, parameters: object = (), /) -> LedgerCursor:  # type: ignore[override]
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: object, /) -> LedgerCursor:  # type: ignore[override]
        return self.cursor().executemany(sql, parameters)

    def executescript(self, script: str, /) -> LedgerCursor:  # type: ignore[override]
        cursor = self.cursor()
        try:
            cursor.executescript(script)
        except sqlite3.Error as exc:
            raise _translated(exc, self.ledger_path) from exc
        return cursor


def connect(path: Path, busy_timeout: float, *, read_only: bool = False) -> LedgerConnection:
    """Open the ledger at ``path``: WAL mode and ``busy_timeout``; read-only when asked and the
    file or its folder cannot be written (a read-only mount: the file is never created or changed
    then), or when the disk is too full for SQLite to make the -wal and -shm files a WAL ledger
    needs. Otherwise a reader opens it as usual, so the last connection to close still
    checkpoints the WAL and removes the -wal and -shm files."""
    try:
        if read_only and not _writable(path):
            return _prepared(_open_read_only(path), busy_timeout, wal=False)
        try:
            return _prepared(_open(path), busy_timeout, wal=True)
        except LedgerFull:
            if not read_only:
                raise
        return _prepared(_open_read_only(path), busy_timeout, wal=False)
    except LedgerCorrupt as exc:
        refusal = _not_a_ledger(path, exc)
        if refusal is None:
            raise
        raise refusal from exc


def _prepared(conn: LedgerConnection, busy_timeout: float, *, wal: bool) -> LedgerConnection:
    """``conn`` with its settings, proven readable; closed when that fails."""
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if wal:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def connect_memory(name: str, busy_timeout: float) -> LedgerConnection:
    """Open the in-memory database ``name`` of this process (:mod:`.memory`): every connection
    opening the same name shares one database, which goes when the last of them closes. SQLite's
    ``memdb`` VFS locks it as a file is locked (a busy write lock is ``SQLITE_BUSY``, waited out as
    a file's is), with a rollback journal in memory: no WAL, no -shm, no file."""
    return _prepared(_sqlite_connect(memory_path(name), memory_uri(name), uri=True), busy_timeout, wal=False)


def memory_uri(name: str) -> str:
    """The URI of the in-memory database ``name``: a name starting with ``/`` is shared by the
    connections of this process."""
    return f"file:/{quote(name, safe='')}?vfs=memdb"


def memory_path(name: str) -> Path:
    """How the in-memory database ``name`` is named in messages (it is no file)."""
    return Path(f"memory:{name}")


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _open(path: Path) -> LedgerConnection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LedgerError(f"cannot open ledger {path}: {exc.strerror}") from exc
    return _sqlite_connect(path, str(path), uri=False)


def _open_read_only(path: Path) -> LedgerConnection:
    """``mode=ro``; on a read-only folder or a full disk, where SQLite cannot create the WAL
    index (-shm), fall back to ``immutable=1`` — but only when there is no -wal file (or an
    empty one): then the main file holds every commit. With a -wal file left over, the
    commits in it cannot be read without writing the index, and the error says so."""
    uri = f"file:{quote(str(path.absolute()))}?mode=ro"
    conn = _sqlite_connect(path, uri, uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except LedgerUnavailable as exc:
        conn.close()
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            if isinstance(exc, LedgerFull):
                raise
            raise LedgerIOError(
                f"the ledger {path} is on a read-only file system and has a write-ahead log ({wal.name}) "
                "that cannot be read without write access to its folder: open it once where it is writable "
                "(any thumbctl command checkpoints it), or copy the folder somewhere writable"
            ) from None
    return _sqlite_connect(path, uri + "&immutable=1", uri=True)


def _sqlite_connect(path: Path, target: str, *, uri: bool) -> LedgerConnection:
    try:
        conn = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False, factory=LedgerConnection)
    except sqlite3.Error as exc:
        raise _translated(exc, path) from exc
    assert isinstance(conn, LedgerConnection)
    conn.ledger_path = path
    return conn


def _not_a_ledger(path: Path, exc: LedgerCorrupt) -> LedgerError | None:
    """A file that is no database at all was most likely named by mistake: a usage error (2)."""
    cause = exc.__cause__
    code = getattr(cause, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == _NOTADB:
        return LedgerError(
            f"cannot use {path} as a ledger: it is not a SQLite database ({cause}); "
            "if it was a thumbctl ledger, it is damaged: restore a backup of it"
        )
    return None


def file_identity(path: Path) -> FileIdentity | None:
    """(device, inode) of the file at ``path`` now; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def gone_error(path: Path, now: FileIdentity | None) -> LedgerFault:
    return fault_for("ledger_gone", path, "deleted (or its folder was)" if now is None else "replaced by another file")
