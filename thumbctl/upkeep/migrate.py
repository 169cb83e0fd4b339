"""Before a command writes: the store settled with the ledger, and the one-time move of output folders
still in the old layout (``OUT/objects``, :mod:`.legacy_layout`) when a cheap check finds one.

The check costs a writing command one read of the ledger's ``meta`` row ``layout``: the ledger
records it (``store``) the first time no output folder it knows holds ``objects/``. Until then,
on a ledger an older thumbctl wrote, each writing command lists the ledger's output folders and
looks for ``objects`` in each (a query over every batch, then one ``lstat`` per folder), as it
always did: a move that was refused (``objects`` a symlink or a file) is tried and reported again
by every writing command until the folder is fixed. Output folders written since the store moved
out of OUT never get ``objects/``, so the row stays true once it is written.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..config.s3location import is_s3
from ..core.errors import StoreRequired, UsageError
from ..publishing.stores import Location, bind_store, chosen_store, store_for_ledger

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .legacy_layout import MigrationReport


def needs_migration(ledger: Ledger) -> bool:
    """Whether an output folder the ledger knows still has ``objects/`` (one ``lstat`` per folder)."""
    return any(os.path.lexists(os.path.join(out, "objects")) for out, _ in ledger.upkeep.output_folders())


def old_layout_left(ledger: Ledger) -> bool:
    """Whether the ledger may still know an output folder in the old layout: False at once when the
    ledger recorded that none is left, else :func:`needs_migration`, recording its "none" once."""
    if ledger.upkeep.layout_settled():
        return False
    if needs_migration(ledger):
        return True
    if not ledger.read_only:
        ledger.upkeep.record_layout_settled()
    return False


def settle_store(ledger: Ledger, store: Location | None) -> MigrationReport | None:
    """Before a command writes: a store given (``store``) must be this ledger's (``store_taken``
    otherwise), and output folders still in the old layout (``OUT/objects``) are moved into the
    ledger's store first, once (:mod:`thumbctl.upkeep.legacy_layout`); returns what the move did
    (None when there was nothing to move). A PostgreSQL ledger has no default store: with old output
    folders and no store named, StoreRequired."""
    if not old_layout_left(ledger):
        if store is not None:
            store_for_ledger(ledger, store, move=False)
        return None
    if store is None and ledger.backend != "sqlite":
        raise StoreRequired(
            "output folders of this ledger still hold objects/ (the old layout): a PostgreSQL ledger needs "
            "--store DIR (or THUMBCTL_STORE, config key store) to move them into, once"
        )
    where = chosen_store(ledger, store)
    bind_store(ledger, where, move=False)  # another ledger's: refused before any move
    if isinstance(where, str) and is_s3(where):
        raise UsageError(
            "output folders of this ledger still hold objects/ (the old layout): they move once into a local "
            "--store folder; give one for that first command, then --store s3://...",
            code="bad_store",
        )
    from .legacy_layout import migrate_legacy_layout

    return migrate_legacy_layout(ledger, where)
