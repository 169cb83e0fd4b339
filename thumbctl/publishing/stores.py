"""A ledger and its store: which store a command uses, binding the two, and the one-time move of
output folders of the earlier layout into the store (:mod:`thumbctl.upkeep.migrate`).

The store is beside a SQLite ledger by default (``ledger.db`` -> ``ledger.store/``); a PostgreSQL
ledger has no "beside", so ``--store`` is required there. A store belongs to one ledger (see
:mod:`thumbctl.storage.ownership`). The command line and :func:`thumbctl.api.render` both settle the
store here before they write (:func:`settle_store`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..config.ledgerurl import is_server_url, masked
from ..config.s3location import S3Options
from ..core.errors import StorageUnreachable, StoreRequired, StoreTaken, ThumbctlError, UsageError
from ..ledger import Ledger
from ..storage.locations import is_s3, object_store_at, parse_s3, use_options
from ..storage.objects import ObjectStore
from ..storage.ownership import claimed_owner

#: A store or OUT as a command gives it: a local folder, or an ``s3://bucket/prefix`` URL (text).
Location = Path | str


def location_text(location: Location) -> str:
    """A location as the ledger records it: a folder's absolute path, or ``s3://bucket/prefix``."""
    return parse_s3(location).url if isinstance(location, str) and is_s3(location) else str(location)


def use_s3_options(options: S3Options) -> None:
    """Open every ``s3://`` store and output of this process with ``options`` (a command's S3 settings)."""
    use_options(options)


def default_store_for(ledger_target: Path | str) -> Path | None:
    """The store beside a SQLite ledger (``ledger.db`` -> ``ledger.store``; a ledger already named
    ``*.store`` gets ``.store`` appended); None for a PostgreSQL ledger, which has no "beside"."""
    if isinstance(ledger_target, str) and is_server_url(ledger_target):
        return None
    path = Path(ledger_target)
    store = path.with_suffix(".store")
    return store if store != path else path.with_name(f"{path.name}.store")


def recorded_store_of(ledger_target: Path | str) -> str | None:
    """The store the ledger at ``ledger_target`` recorded, or None: also when there is no ledger
    yet or it cannot be read now (``thumbctl config`` shows settings, it does not need a ledger)."""
    if not (isinstance(ledger_target, str) and is_server_url(ledger_target)) and not Path(ledger_target).is_file():
        return None
    try:
        with Ledger(ledger_target, read_only=True) as ledger:
            return ledger.upkeep.recorded_store()
    except ThumbctlError:
        return None


def resolve_store(store: Location | None, ledger_target: Path | str) -> Location:
    """The store to use: ``store`` as given (``--store``, THUMBCTL_STORE, config key store), else the
    default beside the ledger; a folder absolute and symlink-resolved, an ``s3://`` URL normalized.
    Raises StoreRequired for a PostgreSQL ledger without one, UsageError for a path that is not a folder."""
    if isinstance(store, str) and is_s3(store):
        return parse_s3(store).url
    chosen = Path(store) if store is not None else default_store_for(ledger_target)
    if chosen is None:
        raise StoreRequired(
            "a PostgreSQL ledger needs --store DIR (or THUMBCTL_STORE, config key store): a folder on the "
            "filesystem every worker host shares, where the rendered objects are kept"
        )
    resolved = Path(os.path.realpath(chosen))
    if resolved.exists() and not resolved.is_dir():
        raise UsageError(f"--store {chosen} exists and is not a folder", code="bad_store")
    return resolved


def check_store_apart(
    store: Location, out_dir: Location, source_folder: Path | None, earlier_outs: Iterable[Location] = ()
) -> None:
    """Refuse (UsageError ``bad_store``) a store that is OUT, lies inside OUT or holds OUT (OUT must
    hold only what is published, and gc must never walk thumbnails) — this batch's OUT or that of an
    earlier batch of the ledger (``earlier_outs``) — or a source folder that is the store or lies inside
    it (its objects would be scanned as photos). All paths are resolved."""
    for folder in (out_dir, *earlier_outs):
        if isinstance(store, str) or isinstance(folder, str):
            _check_urls_apart(location_text(store), location_text(folder))
            continue
        if _within(store, folder) or _within(folder, store):
            relation = "is" if store == folder else "lies inside" if _within(store, folder) else "holds"
            raise UsageError(
                f"the store {store} {relation} the output folder {folder}: keep the store (--store) apart "
                "from every OUT, which holds only the published thumbnails",
                code="bad_store",
            )
    if source_folder is not None and isinstance(store, Path) and _within(source_folder, store):
        raise UsageError(
            f"the source folder {source_folder} is the store {store} or lies inside it; pick a store elsewhere",
            code="bad_store",
        )


def _check_urls_apart(store: str, out: str) -> None:
    """:func:`check_store_apart` where either is an ``s3://`` location: a prefix inside the other is refused."""
    if not (is_s3(store) and is_s3(out)):
        return
    if store == out or store.startswith(out + "/") or out.startswith(store + "/"):
        relation = "is" if store == out else "lies inside" if store.startswith(out + "/") else "holds"
        raise UsageError(
            f"the store {store} {relation} the output location {out}: keep the store (--store) apart from "
            "every OUT, which holds only the published thumbnails",
            code="bad_store",
        )


def _within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both resolved)."""
    return path == folder or folder in path.parents


def bind_store(ledger: Ledger, store: Location, *, move: bool = True) -> ObjectStore:
    """Make ``store`` this ledger's store: the first ledger to use a store records its id in it
    (``STORE/ledger-id``, created once and never replaced), and the ledger records the store's path
    (without ``move``, only when it has none yet: a store given to one maintenance run does not
    become the store later commands use). A store that belongs to another ledger is refused
    (StoreTaken), naming both."""
    layout = object_store_at(location_text(store))
    own_id = ledger.upkeep.ledger_id()
    where = _shown_ledger(ledger)
    try:
        owner = claimed_owner(layout, own_id, where)
    except StorageUnreachable:  # a server down now: transient (75), as for --out, not a setting to fix
        raise
    except OSError as exc:
        raise UsageError(f"--store {store} cannot be used: {exc.strerror or exc}", code="bad_store") from exc
    if owner[0] != own_id:
        raise StoreTaken(
            f"the store {store} belongs to ledger {owner[0]} ({owner[1] or 'recorded without a place'}), not to "
            f"this ledger {own_id} ({where}); give this ledger a store of its own with --store"
        )
    if not ledger.read_only and (move or ledger.upkeep.recorded_store() is None):
        ledger.upkeep.record_store(location_text(store))
    return layout


def store_for_ledger(ledger: Ledger, store: Location | None, *, move: bool = True) -> ObjectStore:
    """The store ``ledger`` uses (see :func:`chosen_store`), bound to the ledger (see :func:`bind_store`)."""
    return bind_store(ledger, chosen_store(ledger, store), move=move)


def chosen_store(ledger: Ledger, store: Location | None) -> Location:
    """``store`` as given, else the store the ledger recorded (so a command without ``--store`` finds
    the store an earlier ``--store`` named, instead of starting an empty one beside the ledger), else
    the default (see :func:`resolve_store`)."""
    recorded = ledger.upkeep.recorded_store() if store is None else None
    if recorded:
        return resolve_store(recorded if is_s3(recorded) else Path(recorded), ledger.path)
    return resolve_store(store, ledger.path)


def _shown_ledger(ledger: Ledger) -> str:
    name = str(ledger.path)
    return masked(name) if is_server_url(name) else os.path.realpath(name)
