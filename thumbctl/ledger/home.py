"""Where the default ledger lives: moving one left at its old default place to the new one.

The default ledger used to sit in the per-user config folder; it now lives in the state
folder. A ledger found at the old place is moved when that is safe: no ledger at the new
place yet, and no process has the old one open (a running worker keeps using it where it
is; the next command after it stops moves it). The copy is made with SQLite's backup API
while an exclusive lock keeps every other connection out, so it holds every commit,
including those still in the write-ahead log; only then is the old file removed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..core.display import shown

#: Files that belong to a SQLite ledger beside its main file.
_COMPANIONS = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Settled:
    """The ledger file to use, and what to tell the user about it once (None: nothing)."""

    path: Path
    note: str | None = None


class LedgerInUse(Exception):
    """Another connection has the ledger open."""


def settle_default_ledger(new: Path, old: Path) -> Settled:
    """The default ledger ``new``, after moving a ledger found at the old default place ``old``
    there when it is safe. Both present: ``new`` is used and ``old`` ignored (with a note)."""
    if new == old or not old.is_file():
        return Settled(new)
    if new.exists():
        return Settled(
            new,
            f"a ledger at the old default place {shown(old)} is ignored: the default ledger is {shown(new)} "
            "(use --db to open the old one, or remove it)",
        )
    try:
        move_ledger_file(old, new)
    except LedgerInUse:
        return Settled(
            old,
            f"the ledger {shown(old)} is open in another process (a running worker?), so it is used where it is; "
            f"it moves to {shown(new)} once nothing has it open",
        )
    except (OSError, sqlite3.Error) as exc:
        why = f"the ledger {shown(old)} could not be moved to {shown(new)} ({exc})"
        return Settled(old, f"{why}; it is used where it is")
    return Settled(new, f"moved the ledger from {shown(old)} to {shown(new)}")


def move_ledger_file(old: Path, new: Path) -> None:
    """Copy the ledger ``old`` to ``new`` (which must not exist) and remove ``old`` with its
    ``-wal``/``-shm`` files, all under an exclusive lock on ``old``. Raises :class:`LedgerInUse`
    (nothing changed) when another connection has ``old`` open."""
    source = sqlite3.connect(old, timeout=0, isolation_level=None)
    try:
        _lock_exclusively(source, old)
        new.parent.mkdir(parents=True, exist_ok=True)
        partial = new.with_name(new.name + ".moving")
        partial.unlink(missing_ok=True)
        try:
            _copy(source, partial)
            os.replace(partial, new)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        _fsync_folder(new.parent)
        for path in (old, *(Path(f"{old}{suffix}") for suffix in _COMPANIONS)):
            path.unlink(missing_ok=True)
    finally:
        source.close()


def _lock_exclusively(conn: sqlite3.Connection, path: Path) -> None:
    """Hold ``path`` exclusively until ``conn`` closes. In WAL mode an idle connection holds no
    lock a plain transaction would meet, but it does keep this one from being granted."""
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        conn.execute("COMMIT")  # the exclusive locking mode keeps the lock after the commit
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED
            raise LedgerInUse(str(path)) from exc
        raise


def _copy(source: sqlite3.Connection, target: Path) -> None:
    copy = sqlite3.connect(target, isolation_level=None)
    try:
        source.backup(copy)
        if copy.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError(f"the copy at {target} failed its check")
    finally:
        copy.close()
    with open(target, "rb+") as handle:
        os.fsync(handle.fileno())


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
