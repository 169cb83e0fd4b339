"""The object store (STORE): where rendered derivatives live, outside the output folder.

Layout of STORE::

    STORE/ledger-id                          the one ledger the store belongs to (its id, then where it was)
    STORE/objects/<k[:2]>/<k>.<ext>          one object per derivative key
    STORE/objects/<k[:2]>/<k>.preview.jpg    the contact sheet's preview of a source, beside its first object
    STORE/.tmp/                              temp files of writers (objects being staged)

OUT holds only the thumbnails (each its own file: a reflink or a copy of its object), the batch
manifests and the contact sheets, so copying OUT copies each thumbnail once. Every file under
STORE is reached as under OUT: folder by folder from ``/`` through descriptors, never through a
symlink (:func:`thumbctl.store.open_folder`), with the STORE folder as the root.

The store is beside a SQLite ledger by default (``ledger.db`` -> ``ledger.store/``); a PostgreSQL
ledger has no "beside", so ``--store`` is required there. A store belongs to one ledger: gc removes
the objects no batch of *its* ledger references, which would be unsafe for the objects of another.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import StoreRequired, StoreTaken, UsageError
from .store import open_folder, read_small_file, store_root_of, write_new_name

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .ledger import Ledger

#: The file in STORE naming the ledger the store belongs to.
LEDGER_ID_FILE = "ledger-id"
#: A ledger id as both backends make it (16 random bytes in hex); anything else in the file is not one.
_LEDGER_ID = re.compile(r"[0-9a-f]{32}")
#: How much of the recorded place of the owning ledger a message shows.
_PLACE_CHARS = 300


@dataclass(frozen=True)
class StoreLayout:
    """Path arithmetic for one store (no I/O). Paths are absolute strings."""

    root: str

    def object_path(self, key: str, extension: str) -> str:
        return f"{self.root}/objects/{key[:2]}/{key}.{extension}"

    @staticmethod
    def preview_path(object_path: str) -> str:
        """The contact sheet's small preview of a source, beside the first object rendered from it
        (``<key>.preview.jpg``: not an object's name, so reconcile and gc never take it for one)."""
        return f"{os.path.splitext(object_path)[0]}.preview.jpg"

    @property
    def objects_dir(self) -> str:
        return f"{self.root}/objects"

    @property
    def tmp_dir(self) -> str:
        return f"{self.root}/.tmp"

    @classmethod
    def of_object(cls, object_path: str) -> StoreLayout:
        """The store an object path lies in (``<root>/objects/<xx>/<name>``); an object of an output
        folder of the earlier layout (``OUT/objects/...``) has OUT as its store."""
        return cls(store_root_of(object_path))


def default_store_for(ledger_target: Path | str) -> Path | None:
    """The store beside a SQLite ledger (``ledger.db`` -> ``ledger.store``; a ledger already named
    ``*.store`` gets ``.store`` appended); None for a PostgreSQL ledger, which has no "beside"."""
    from .ledger.backend import is_server_url  # light: no driver is imported

    if isinstance(ledger_target, str) and is_server_url(ledger_target):
        return None
    path = Path(ledger_target)
    store = path.with_suffix(".store")
    return store if store != path else path.with_name(f"{path.name}.store")


def resolve_store(store: Path | None, ledger_target: Path | str) -> Path:
    """The store to use: ``store`` as given (``--store``, THUMBCTL_STORE, config key store), else the
    default beside the ledger; absolute and symlink-resolved. Raises StoreRequired for a PostgreSQL
    ledger without one, UsageError for a path that is not a folder."""
    chosen = store if store is not None else default_store_for(ledger_target)
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
    store: Path, out_dir: Path, source_folder: Path | None, earlier_outs: Iterable[Path] = ()
) -> None:
    """Refuse (UsageError ``bad_store``) a store that is OUT, lies inside OUT or holds OUT (OUT must
    hold only what is published, and gc must never walk thumbnails) — this batch's OUT or that of an
    earlier batch of the ledger (``earlier_outs``) — or a source folder that is the store or lies inside
    it (its objects would be scanned as photos). All paths are resolved."""
    for folder in (out_dir, *earlier_outs):
        if _within(store, folder) or _within(folder, store):
            relation = "is" if store == folder else "lies inside" if _within(store, folder) else "holds"
            raise UsageError(
                f"the store {store} {relation} the output folder {folder}: keep the store (--store) apart "
                "from every OUT, which holds only the published thumbnails",
                code="bad_store",
            )
    if source_folder is not None and _within(source_folder, store):
        raise UsageError(
            f"the source folder {source_folder} is the store {store} or lies inside it; pick a store elsewhere",
            code="bad_store",
        )


def _within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both resolved)."""
    return path == folder or folder in path.parents


def bind_store(ledger: Ledger, store: Path, *, move: bool = True) -> StoreLayout:
    """Make ``store`` this ledger's store: the first ledger to use a store records its id in it
    (``STORE/ledger-id``, created once and never replaced), and the ledger records the store's path
    (without ``move``, only when it has none yet: a store given to one maintenance run does not
    become the store later commands use). A store that belongs to another ledger is refused
    (StoreTaken), naming both."""
    layout = StoreLayout(str(store))
    own_id = ledger.upkeep.ledger_id()
    where = _shown_ledger(ledger)
    try:
        owner = _claimed_owner(layout, own_id, where)
    except OSError as exc:
        raise UsageError(f"--store {store} cannot be used: {exc.strerror or exc}", code="bad_store") from exc
    if owner[0] != own_id:
        raise StoreTaken(
            f"the store {store} belongs to ledger {owner[0]} ({owner[1] or 'recorded without a place'}), not to "
            f"this ledger {own_id} ({where}); give this ledger a store of its own with --store"
        )
    if not ledger.read_only and (move or ledger.upkeep.recorded_store() is None):
        ledger.upkeep.record_store(str(store))
    return layout


def store_for_ledger(ledger: Ledger, store: Path | None, *, move: bool = True) -> StoreLayout:
    """The store ``ledger`` uses (see :func:`chosen_store`), bound to the ledger (see :func:`bind_store`)."""
    return bind_store(ledger, chosen_store(ledger, store), move=move)


def chosen_store(ledger: Ledger, store: Path | None) -> Path:
    """``store`` as given, else the store the ledger recorded (so a command without ``--store`` finds
    the store an earlier ``--store`` named, instead of starting an empty one beside the ledger), else
    the default (see :func:`resolve_store`)."""
    recorded = ledger.upkeep.recorded_store() if store is None else None
    return resolve_store(Path(recorded) if recorded else store, ledger.path)


def store_owner(layout: StoreLayout) -> tuple[str, str] | None:
    """(ledger id, where that ledger was) recorded in the store, or None when none is yet. A first line that
    is not a ledger id gives an empty id; the place is cut short and shown without control characters."""
    try:
        with open_folder(layout.root, layout.root) as root:
            data = read_small_file(root, LEDGER_ID_FILE, 4096)
    except FileNotFoundError:
        return None
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines:
        return None
    ledger_id = lines[0].strip()
    place = "".join(c if c.isprintable() else "?" for c in lines[1].strip()[:_PLACE_CHARS]) if len(lines) > 1 else ""
    return (ledger_id if _LEDGER_ID.fullmatch(ledger_id) else "", place)


def _claimed_owner(layout: StoreLayout, own_id: str, where: str) -> tuple[str, str]:
    """The store's owner, recording ``own_id`` first when it has none (a create-if-absent link:
    of two ledgers claiming one new store at once, one wins and the other reads its id)."""
    for _ in range(3):
        found = store_owner(layout)
        if found is not None and found[0]:
            return found
        text = f"{own_id}\n{where}\n".encode()
        with contextlib.suppress(FileExistsError):
            write_new_name(layout, layout.root, LEDGER_ID_FILE, text)
    raise OSError(errno.EEXIST, f"{layout.root}/{LEDGER_ID_FILE} is not a readable ledger id")


def _shown_ledger(ledger: Ledger) -> str:
    from .ledger.backend import is_server_url, masked

    name = str(ledger.path)
    return masked(name) if is_server_url(name) else os.path.realpath(name)


def is_store_folder(path: str) -> bool:
    """Whether ``path`` is a store (it holds the ledger-id file), so a folder scan leaves it out."""
    with contextlib.suppress(OSError):
        return stat.S_ISREG(os.lstat(os.path.join(path, LEDGER_ID_FILE)).st_mode)
    return False
