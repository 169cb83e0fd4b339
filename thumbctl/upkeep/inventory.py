"""What the ledger's stores hold, as ``reconcile`` and ``gc`` both see it: the store a maintenance
run checks, the stores whose objects the ledger accounts for, and their objects as listed through
the :class:`~thumbctl.storage.objects.ObjectStore` interface.

Imports no codec and no publisher, so ``thumbctl gc`` loads neither.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ..ledger import Ledger
from ..publishing.stores import store_for_ledger
from ..storage.locations import is_s3, object_path_in
from ..storage.objects import ObjectStore
from .leftovers import Scope


def store_location(ledger: Ledger, store: Path | None) -> str:
    """The location of the store a maintenance run checks: an ``s3://`` store the ledger recorded as
    it is, else the local store (``store``, else the recorded one) bound for this run only."""
    recorded = ledger.upkeep.recorded_store() if store is None else None
    if recorded is not None and is_s3(recorded):
        return recorded
    return store_for_ledger(ledger, store, move=False).root


def object_stores(ledger: Ledger, scope: Scope) -> list[tuple[str, ObjectStore]]:
    """(location, store) of the stores whose objects the ledger accounts for: the scope's store
    (default: the one the ledger recorded), and every local output folder of the earlier layout
    that still holds ``objects/``."""
    recorded = ledger.upkeep.recorded_store()
    roots = [scope.store] if scope.store is not None else [recorded] if recorded else []
    roots += [
        out_dir
        for out_dir, _ in ledger.upkeep.output_folders()
        if not is_s3(out_dir) and os.path.isdir(f"{out_dir}/objects")
    ]
    return [(root, scope.store_at(root)) for root in dict.fromkeys(roots)]


def listed_objects(location: str, store: ObjectStore) -> Iterator[tuple[str, str, int | None]]:
    """(name, recorded path, size when the listing gave it) of every object of the store at
    ``location`` (see :meth:`~thumbctl.storage.objects.ObjectStore.listing`)."""
    for name, size in store.listing():
        key, _, extension = name.partition(".")
        yield name, object_path_in(location, key, extension), size


def object_size(store: ObjectStore, name: str, listed: int | None) -> int:
    """An object's size: the listed one, else a HEAD's (0 when it is gone meanwhile)."""
    if listed is not None:
        return listed
    info = store.stat(name)
    return info.size if info is not None else 0
