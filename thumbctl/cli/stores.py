"""Which object store a command binds to its ledger, and the one-time layout migration before a
command writes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import StoreRequired

if TYPE_CHECKING:
    from ..config import Settings
    from ..ledger import Ledger
    from ..objectstore import StoreLayout
    from ..report.reporter import Reporter


def bound_store(ledger: Ledger, settings: Settings) -> StoreLayout:
    """The ledger's object store (--store, THUMBCTL_STORE, config key store, else the one it recorded,
    else beside the SQLite ledger), bound to it for this run (only submit moves the ledger to another):
    exit 2 ``store_required`` for a PostgreSQL ledger without one, ``store_taken`` for a store of another
    ledger."""
    from ..objectstore import store_for_ledger

    return store_for_ledger(ledger, settings.store_path, move=False)


def settle_store(ledger: Ledger, reporter: Reporter, settings: Settings) -> None:
    """Before a command writes: a store given (--store, THUMBCTL_STORE, config key store) must be this
    ledger's (``store_taken`` otherwise), and output folders still in the old layout (``OUT/objects``)
    are moved into the ledger's store first, once (:mod:`thumbctl.migrate`). A PostgreSQL ledger
    has no default store: with old output folders and no store named, exit 2 ``store_required``."""
    from ..migrate import migrate_legacy_layout, needs_migration
    from ..objectstore import store_for_ledger

    if not needs_migration(ledger):
        if settings.store_path is not None:
            store_for_ledger(ledger, settings.store_path, move=False)
        return
    if settings.store_path is None and ledger.backend != "sqlite":
        raise StoreRequired(
            "output folders of this ledger still hold objects/ (the old layout): a PostgreSQL ledger needs "
            "--store DIR (or THUMBCTL_STORE, config key store) to move them into, once"
        )
    store = store_for_ledger(ledger, settings.store_path, move=False)  # another ledger's: refused before any move
    reporter.layout_migrated(migrate_legacy_layout(ledger, store.root))
