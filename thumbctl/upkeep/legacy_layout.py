"""The one-time migration of output folders written before the store moved out of OUT.

Before, every output folder held its own content-addressed store, ``OUT/objects/<k[:2]>/<k>.<ext>``
(with each source's ``<k>.preview.jpg`` beside an object), and every thumbnail was a hard link to
its object. Now the store is one folder, STORE, with the same names below ``STORE/objects``, and
every thumbnail is its own file. For each output folder the ledger knows that still has
``objects/``, :func:`migrate_legacy_layout`:

1. places each object and preview in STORE: a hard link when STORE is on the same filesystem,
   else a copy written to ``STORE/.tmp`` and fsynced, then linked into place (create-if-absent,
   so nothing in STORE is ever replaced). When STORE already holds that name with the same
   bytes (the same derivative stored in two output folders) the old one is a duplicate, dropped
   in step 4. With other bytes it is a *conflict*: the store's object stays the derivative's
   object, the old one is set aside as ``STORE/conflicts/<tag>/<shard>/<name>`` (``<tag>`` names
   the output folder) and reported, and its thumbnails keep the old bytes (reconcile reports them
   as modified; ``--repair`` makes them copies of the store's object). A preview with other bytes
   is simply dropped: it is a review aid;
2. rewrites, in one ledger transaction, every item's object path (and the ``preview`` of its
   result) from OUT/objects to STORE, whether its object moved or not (an object that was missing
   or not a regular file is rendered again into STORE by ``reconcile --repair``), and forgets the
   object checks of the old paths; then writes the manifest (``OUT/batches/<id>.json``) of each
   batch into OUT again, so it names the new paths. So no item names a path in OUT/objects after it;
3. replaces each thumbnail name the ledger records in OUT that is still a hard link to an old
   object by its own copy (written to ``OUT/.tmp``, same modification time, renamed over the
   name only while the name still is that link): a file at the name that is not such a link is
   the user's and is never touched;
4. removes the old objects and previews, then the empty ``OUT/objects`` tree and an empty ``OUT/.tmp``.

Every step can be repeated: until step 4 the old names stay, so the path the ledger records
always exists, and a run interrupted anywhere completes on the next run (fault checkpoints
``migrate_*`` of :mod:`thumbctl.core.faults`). Everything is reached through folder descriptors
without following a symlink (:func:`thumbctl.storage.fsafe.open_folder`): an output folder whose
``objects`` is a symlink (or a file) is refused, never followed: its items' object paths still move
to STORE (their objects are rendered again there), its files stay. Copies are reflinks where the
filesystem supports them (:func:`thumbctl.storage.fsafe.clone_file`). Nothing here prints.

Nothing imports this module until :func:`thumbctl.upkeep.migrate.settle_store` finds an output folder in the
old layout: a writing command on a ledger without one does not load it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.faults import Faults
from ..review.markup import write_batch_manifest
from ..storage.fsafe import OutsideOutput, open_folder, open_regular_file, same_bytes, staged_copy

if TYPE_CHECKING:
    from ..ledger import Ledger

_OBJECT = re.compile(r"[0-9a-f]{64}\.[a-z0-9]+")
_PREVIEW = re.compile(r"[0-9a-f]{64}\.preview\.jpg")


@dataclass
class MigrationReport:
    """What one migration run did (all zero and empty when there was nothing to migrate)."""

    store: str
    folders: list[str] = field(default_factory=list)
    objects_moved: int = 0
    duplicates_dropped: int = 0
    thumbnails_copied: int = 0
    items_relocated: int = 0
    #: Old objects with other bytes than STORE's for the same derivative, set aside under STORE/conflicts.
    conflicts: list[str] = field(default_factory=list)
    #: Other files left in OUT/objects (not named like an object, or not a regular file).
    left: list[str] = field(default_factory=list)
    #: Output folders whose ``objects`` is a symlink (or not a folder): refused, no file touched there.
    refused: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.folders or self.conflicts or self.left or self.refused)

    def to_json(self) -> dict[str, object]:
        return {
            "store": self.store,
            "folders": self.folders,
            "objects_moved": self.objects_moved,
            "duplicates_dropped": self.duplicates_dropped,
            "thumbnails_copied": self.thumbnails_copied,
            "items_relocated": self.items_relocated,
            "conflicts": self.conflicts,
            "left": self.left,
            "refused": self.refused,
        }


def migrate_legacy_layout(
    ledger: Ledger, store_dir: str | os.PathLike[str], *, faults: Faults | None = None
) -> MigrationReport:
    """Move the objects of every output folder the ledger knows into ``store_dir`` (see the module's
    docstring); a no-op on a ledger with nothing to migrate. Raises OSError on a filesystem failure
    (a later run goes on from where this one stopped)."""
    store = os.path.realpath(store_dir)
    report = MigrationReport(store)
    faults = faults or Faults()
    for out, _ in ledger.upkeep.output_folders():
        if os.path.lexists(os.path.join(out, "objects")):
            _migrate_folder(ledger, out, store, report, faults)
    return report


@dataclass
class _Folder:
    """The state of one output folder's migration."""

    out: str
    store: str
    moved: dict[str, str] = field(default_factory=dict)  # old path -> path in STORE
    inodes: set[tuple[int, int]] = field(default_factory=set)  # of the old objects that moved

    @property
    def objects(self) -> str:
        return f"{self.out}/objects"

    def in_store(self, old: str) -> str:
        return f"{self.store}/objects/{old[len(self.objects) + 1 :]}"

    @property
    def conflicts(self) -> str:
        """Where this folder's conflicting objects are set aside (a name that is the same at every run)."""
        return f"{self.store}/conflicts/{hashlib.sha256(self.out.encode()).hexdigest()[:12]}"


def _migrate_folder(ledger: Ledger, out: str, store: str, report: MigrationReport, faults: Faults) -> None:
    folder = _Folder(out, store)
    try:
        found = list(_legacy_files(folder))
    except (OutsideOutput, NotADirectoryError):  # a symlink (never followed) or a file named objects
        report.refused.append(out)
        _relocate_all(ledger, folder, report)
        return
    for count, (shard, name) in enumerate(found):
        _place_one(folder, shard, name, report)
        if count == 0:
            faults.hit("migrate_mid_move")
    faults.hit("migrate_after_move")
    _relocate_all(ledger, folder, report)
    faults.hit("migrate_after_ledger")
    for name in ledger.upkeep.names_in(out):
        if _own_copy(folder, name):
            report.thumbnails_copied += 1
            if report.thumbnails_copied == 1:
                faults.hit("migrate_after_copy")
    _remove_old(folder, faults)
    report.folders.append(out)


def _relocate_all(ledger: Ledger, folder: _Folder, report: MigrationReport) -> None:
    """Point every item whose object lies in OUT/objects at STORE, also those whose object did not
    move (missing, not a regular file, or in a refused folder: rendered again into STORE), and
    write the folder's manifests again."""
    targets = dict(folder.moved)
    for path in ledger.upkeep.object_paths_under(folder.objects):
        targets.setdefault(path, folder.in_store(path))
    report.items_relocated += ledger.upkeep.relocate_objects(folder.objects, targets)
    _rewrite_manifests(ledger, folder.out)


def _rewrite_manifests(ledger: Ledger, out: str) -> None:
    """Write again the manifests in OUT of the batches that have one, from the relocated rows."""
    for batch_id in ledger.upkeep.live_batches_in(out):
        batch = ledger.views.batch(batch_id, with_failures=False)
        if os.path.lexists(batch.manifest_path):
            write_batch_manifest(batch, ledger.views.items(batch_id), ledger.catalogue.markup(batch.out_dir))


def _legacy_files(folder: _Folder) -> Iterator[tuple[str, str]]:
    """(shard, name) of every entry in OUT/objects/<shard>/; raises OutsideOutput when ``objects``
    (or OUT) is a symlink. A shard that is a symlink or a file is skipped here (it stays, reported)."""
    with open_folder(folder.out, folder.objects) as objects:
        shards = sorted(os.listdir(objects))
    for shard in shards:
        try:
            with open_folder(folder.out, f"{folder.objects}/{shard}") as opened:
                names = sorted(os.listdir(opened))
        except (OutsideOutput, NotADirectoryError):
            yield shard, ""
            continue
        for name in names:
            yield shard, name


def _place_one(folder: _Folder, shard: str, name: str, report: MigrationReport) -> None:
    old = f"{folder.objects}/{shard}/{name}" if name else f"{folder.objects}/{shard}"
    is_object = bool(_OBJECT.fullmatch(name)) and name[:2] == shard
    is_preview = bool(_PREVIEW.fullmatch(name)) and name[:2] == shard
    if not (is_object or is_preview):
        report.left.append(old)
        return
    outcome, info = _place(folder, shard, name, f"{folder.store}/objects/{shard}")
    if outcome == "conflict" and is_object:
        outcome, info = _set_aside(folder, shard, name, report)
    if outcome == "left":
        report.left.append(old)
    else:  # a preview with other bytes than the store's: dropped like a duplicate
        folder.moved[old] = folder.in_store(old)
        if info is not None and is_object:
            folder.inodes.add((info.st_dev, info.st_ino))
        if is_object:
            report.objects_moved += outcome == "moved"
            report.duplicates_dropped += outcome == "duplicate"


def _set_aside(folder: _Folder, shard: str, name: str, report: MigrationReport) -> tuple[str, os.stat_result | None]:
    """Keep an old object whose bytes differ from the store's object of that name under
    STORE/conflicts (the store's stays the derivative's object); ``conflict`` once it is there,
    ``left`` when even that name holds other bytes (then it stays in OUT/objects)."""
    outcome, info = _place(folder, shard, name, f"{folder.conflicts}/{shard}")
    if outcome == "left" or outcome == "conflict":
        return "left", info
    report.conflicts.append(f"{folder.conflicts}/{shard}/{name}")
    return "conflict", info


def _place(folder: _Folder, shard: str, name: str, into: str) -> tuple[str, os.stat_result | None]:
    """Put OUT/objects/<shard>/<name> in the store folder ``into`` without replacing anything there:
    ``moved`` (linked or copied now, or by an earlier run: the same inode), ``duplicate`` (it has the
    same bytes), ``conflict`` (other bytes) or ``left`` (not a regular file); with the old file's status."""
    with (
        open_folder(folder.out, f"{folder.objects}/{shard}") as src,
        open_folder(folder.store, into, create=True) as dst,
    ):
        fd = open_regular_file(src, name)
        if fd is None:
            return "left", None
        try:
            info = os.fstat(fd)
            if _link_or_copy(folder, src, fd, dst, name, info):
                os.fsync(dst)
                return "moved", info
            existing = open_regular_file(dst, name)
            if existing is None:
                return "conflict", info
            try:
                there = os.fstat(existing)
                if (there.st_dev, there.st_ino) == (info.st_dev, info.st_ino):
                    return "moved", info
                return ("duplicate" if same_bytes(fd, existing) else "conflict"), info
            finally:
                os.close(existing)
        finally:
            os.close(fd)


def _link_or_copy(folder: _Folder, src: int, fd: int, dst: int, name: str, info: os.stat_result) -> bool:
    """Create ``name`` in the store shard ``dst`` as a link of the open old file, or a copy of it
    across filesystems; False when the store has that name already."""
    try:
        os.link(name, name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        return _copy_into_store(folder, fd, dst, name)
    linked = os.stat(name, dir_fd=dst, follow_symlinks=False)
    if (linked.st_dev, linked.st_ino) != (info.st_dev, info.st_ino):  # the old name was swapped meanwhile
        os.unlink(name, dir_fd=dst)
        raise FileExistsError(errno.EEXIST, "the object changed while it was being moved", name)
    return True


def _copy_into_store(folder: _Folder, fd: int, dst: int, name: str) -> bool:
    """A copy (or reflink) of the open old file, staged and fsynced in STORE/.tmp, linked in as ``name``."""

    def place(tmp: int, staging: str) -> bool:
        try:
            os.link(staging, name, src_dir_fd=tmp, dst_dir_fd=dst, follow_symlinks=False)
        except FileExistsError:
            return False
        return True

    return staged_copy(folder.store, f"{folder.store}/.tmp", fd, os.fstat(fd).st_size, place)


def _own_copy(folder: _Folder, path: str) -> bool:
    """Replace the thumbnail at ``path`` by its own copy if it is still a hard link to an old object
    that moved; returns whether it did. Anything else at the name is left as it is."""
    parent, name = os.path.split(path)
    try:
        with open_folder(folder.out, parent) as dest:
            fd = open_regular_file(dest, name)
            if fd is None:
                return False
            try:
                info = os.fstat(fd)
                if (info.st_dev, info.st_ino) not in folder.inodes:
                    return False
                return staged_copy(folder.out, f"{folder.out}/.tmp", fd, info.st_size, _replacer(dest, name, info))
            finally:
                os.close(fd)
    except (FileNotFoundError, NotADirectoryError, OutsideOutput, ValueError):
        return False


def _replacer(dest: int, name: str, info: os.stat_result) -> Callable[[int, str], bool]:
    """Put the staged copy at ``name`` (with the link's times) only while ``name`` still is that link."""

    def place(tmp: int, staging: str) -> bool:
        os.utime(staging, ns=(info.st_atime_ns, info.st_mtime_ns), dir_fd=tmp)
        now = os.stat(name, dir_fd=dest, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return False
        os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=dest)
        os.fsync(dest)
        return True

    return place


def _remove_old(folder: _Folder, faults: Faults) -> None:
    """Remove the old objects and previews now in STORE, then the empty shards, ``objects`` and ``.tmp``."""
    removed = 0
    for old in sorted(folder.moved):
        shard_path, name = os.path.split(old)
        with contextlib.suppress(FileNotFoundError), open_folder(folder.out, shard_path) as shard:
            if os.path.lexists(folder.in_store(old)) and os.path.lexists(old):
                os.unlink(name, dir_fd=shard)
                removed += 1
                if removed == 1:
                    faults.hit("migrate_after_unlink")
    with open_folder(folder.out, folder.objects) as objects:
        for shard in sorted(os.listdir(objects)):
            _rmdir_quietly(objects, shard)
    with open_folder(folder.out, folder.out) as out:
        _rmdir_quietly(out, "objects")
        _rmdir_quietly(out, ".tmp")


def _rmdir_quietly(parent: int, name: str) -> None:
    """Remove the folder ``name`` if it is empty; anything else (not empty, a file, gone) stays as it is."""
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent)
