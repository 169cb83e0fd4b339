"""Which ledger a store belongs to: ``STORE/ledger-id`` (the ledger's id, then where it was).

A store belongs to one ledger: gc removes the objects no batch of *its* ledger references, which
would be unsafe for the objects of another. The file is created once (create-if-absent) and never
replaced: a local store links it in, an S3 store puts it with ``If-None-Match: *`` (any store, through
:class:`RootFiles`). Binding a ledger to its store, which needs the ledger, is :mod:`thumbctl.publishing.stores`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from typing import Protocol

#: The file in STORE naming the ledger the store belongs to.
LEDGER_ID_FILE = "ledger-id"
#: A ledger id as both backends make it (16 random bytes in hex); anything else in the file is not one.
_LEDGER_ID = re.compile(r"[0-9a-f]{32}")
#: How much of the recorded place of the owning ledger a message shows.
_PLACE_CHARS = 300


class RootFiles(Protocol):
    """A store's own small files at its root (:class:`~.objects.ObjectStore` has them)."""

    def read_root_file(self, name: str, limit: int) -> bytes | None: ...

    def create_root_file(self, name: str, data: bytes) -> bool: ...


def store_owner(store: RootFiles) -> tuple[str, str] | None:
    """(ledger id, where that ledger was) recorded in the store, or None when none is yet. A first line that
    is not a ledger id gives an empty id; the place is cut short and shown without control characters."""
    data = store.read_root_file(LEDGER_ID_FILE, 4096)
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines:
        return None
    ledger_id = lines[0].strip()
    place = "".join(c if c.isprintable() else "?" for c in lines[1].strip()[:_PLACE_CHARS]) if len(lines) > 1 else ""
    return (ledger_id if _LEDGER_ID.fullmatch(ledger_id) else "", place)


def claimed_owner(store: RootFiles, own_id: str, where: str) -> tuple[str, str]:
    """The store's owner, recording ``own_id`` first when it has none (a create-if-absent link:
    of two ledgers claiming one new store at once, one wins and the other reads its id)."""
    for _ in range(3):
        found = store_owner(store)
        if found is not None and found[0]:
            return found
        store.create_root_file(LEDGER_ID_FILE, f"{own_id}\n{where}\n".encode())
    raise OSError(errno.EEXIST, f"{getattr(store, 'root', 'the store')}/{LEDGER_ID_FILE} is not a readable ledger id")


def is_store_folder(path: str) -> bool:
    """Whether ``path`` is a store (it holds the ledger-id file), so a folder scan leaves it out."""
    with contextlib.suppress(OSError):
        return stat.S_ISREG(os.lstat(os.path.join(path, LEDGER_ID_FILE)).st_mode)
    return False
