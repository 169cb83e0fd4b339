"""The object store: one object per derivative key, plus each source's preview for the contact sheet.

:class:`ObjectStore` is the interface every caller uses; :class:`LocalObjectStore` is the local
folder (STORE) behind it::

    STORE/ledger-id                          the one ledger the store belongs to (its id, then where it was)
    STORE/objects/<k[:2]>/<k>.<ext>          one object per derivative key
    STORE/objects/<k[:2]>/<k>.preview.jpg    the contact sheet's preview of a source, beside its first object
    STORE/.tmp/                              temp files of writers (objects being staged)

An output folder of the earlier layout (``OUT/objects/...``) is a local store rooted at OUT for
the objects it still holds. Every file is reached through folder descriptors opened without
following a symlink (:mod:`.fsafe`), with the store's folder as the root.

An object already at its name is kept when it holds the same bytes, and also when it holds other
bytes that the caller's verifier accepts (it decodes as the right format and size: another host's
codec); it is replaced atomically when it fails verification or is not a regular file. This
module never looks at pixels itself.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import BinaryIO, Protocol

from ..core.models import ObjectStamp
from . import fsafe
from .fsafe import OutsideOutput, StoredFile
from .layout import StoreLayout
from .staging import STAGED

#: Verifies an existing object read from the open file: None when it is sound, else what is wrong.
Verifier = Callable[[BinaryIO], "str | None"]

_OBJECT_NAME = re.compile(r"[0-9a-f]{64}\.[a-z]+")
_PREVIEW_LIMIT = 1 << 20


class Outcome(StrEnum):
    """What putting an object did (see :class:`Published`)."""

    CREATED = "created"
    DUPLICATE = "duplicate"
    KEPT = "kept"
    REPLACED = "replaced"


@dataclass(frozen=True)
class Published:
    """What :meth:`ObjectStore.put` did: ``created`` the object, found a ``duplicate`` (the same
    bytes), ``kept`` an existing object with other bytes that verifies, or ``replaced`` one that
    did not verify or was no regular file (``reason`` says why)."""

    outcome: str
    reason: str | None = None

    @property
    def note(self) -> str | None:
        """The note for the item's event: ``object_mismatch`` or ``object_replaced``, with why."""
        if self.outcome == Outcome.KEPT:
            return "object_mismatch: an object with other bytes that verifies was already there; kept"
        if self.outcome == Outcome.REPLACED:
            return f"object_replaced: the existing object {self.reason}; replaced"
        return None


class ObjectTooLarge(ValueError):
    """A bounded read met an object larger than its limit."""


@dataclass(frozen=True)
class ObjectInfo:
    """What :meth:`ObjectStore.stat` knows of an object: its size, an opaque version, and the sha256
    of its bytes as the store knows it without reading them again (None when it does not: an S3
    object put by someone else, without thumbctl's checksum in its metadata)."""

    size: int
    version: str
    checksum: str | None = None


#: The most bytes read back from a store to publish an object at a name (thumbnails are far smaller).
OBJECT_READ_LIMIT = 64 << 20


@dataclass(frozen=True)
class Source:
    """What a name is published from: its bytes (``content()``, read when asked) and, for an object in
    a local folder, its open file and status, so a local output folder places a reflink or a copy of
    that very file (and knows a hard link to it) instead of writing the bytes again. ``ahead`` is a
    copy an output target made of those bytes before the publish (:meth:`.outputs.OutputTarget.copy_ahead`)."""

    content: Callable[[], bytes]
    fd: int | None = None
    info: os.stat_result | None = None
    ahead: object | None = None


@dataclass(frozen=True)
class ObjectPeek:
    """What a store knows of an object without reading it: its size, whether it is a plain object (a
    local folder may hold a symlink or another kind of file at its name), and either the stamp of a
    local file (its identity and times: the object changed only if they did) or the sha256 kept
    with it (a bucket's)."""

    size: int
    plain: bool = True
    stamp: ObjectStamp | None = None
    checksum: str | None = None


class ObjectStore(Protocol):
    """Objects by name (``<derivative key>.<ext>``), created only if absent.

    Every operation is safe to run from many processes and hosts at once; none ever writes
    outside the store.
    """

    def stage(self, data: bytes, extension: str) -> str:
        """Write ``data`` durably where :meth:`put_staged` can take it from; returns a handle
        (:meth:`discard` drops one that is not used)."""
        ...

    def put_staged(self, staged: str, name: str, *, verify: Verifier) -> Published:
        """Create the object ``name`` from a staged handle if absent. An object already there with
        the same bytes is a duplicate; one with other bytes is kept when ``verify`` accepts it and
        replaced when it does not. The staged data is used up either way."""
        ...

    def put(self, name: str, data: bytes, *, verify: Verifier) -> Published:
        """:meth:`stage` and :meth:`put_staged` in one call."""
        ...

    def discard(self, staged: str | None) -> None:
        """Drop staged data that was not put (best effort)."""
        ...

    def read(self, name: str, limit: int) -> bytes:
        """The object's bytes; FileNotFoundError when it is absent, ObjectTooLarge when it holds
        more than ``limit`` bytes (nothing beyond ``limit + 1`` is read)."""
        ...

    def stat(self, name: str) -> ObjectInfo | None:
        """The object's size and version, None when it is absent."""
        ...

    def peek(self, name: str) -> ObjectPeek | None:
        """What the store knows of the object without reading it; None when it is absent."""
        ...

    def verify(self, name: str, check: Verifier) -> str | None:
        """``check`` run on the object's content: None when sound, else what is wrong
        (``is missing`` when it is absent)."""
        ...

    def names(self, prefix: str = "") -> Iterator[str]:
        """The names of the objects whose name starts with ``prefix``, sorted."""
        ...

    def remove(self, name: str) -> int:
        """Remove the object and its preview; returns the bytes freed (0 when it was absent)."""
        ...

    def write_preview(self, name: str, make: Callable[[], bytes]) -> None:
        """Store the preview of object ``name`` from ``make()`` unless one is there already."""
        ...

    def read_preview(self, name: str, limit: int = _PREVIEW_LIMIT) -> bytes | None:
        """The preview's bytes when it is a whole JPEG of at most ``limit`` bytes, else None."""
        ...

    @property
    def root(self) -> str:
        """The store's location (a folder's absolute path, or ``s3://bucket/prefix``)."""
        ...

    def source(self, name: str, data: bytes | None = None) -> contextlib.AbstractContextManager[Source]:
        """What publishing the object ``name`` at a name copies, open for the block: a local
        object's file; in a bucket, ``data`` (the verified bytes in hand) or else the object read
        back (at most :data:`OBJECT_READ_LIMIT` bytes)."""
        ...

    def read_root_file(self, name: str, limit: int) -> bytes | None:
        """The bytes of the store's own small file ``name`` (its ledger-id) when at most ``limit``, else None."""
        ...

    def create_root_file(self, name: str, data: bytes) -> bool:
        """Create the store's own file ``name`` if absent; False when something is there already."""
        ...

    def read_staged(self, staged: str) -> contextlib.AbstractContextManager[int | None]:
        """A read descriptor of a staged handle's file, for a copy made ahead of the publish; None
        where staged data is no file (a bucket's, held in memory)."""
        ...

    def listing(self) -> Iterator[tuple[str, int | None]]:
        """(name, size when the listing gives it) of every object, for gc and reconcile's orphans;
        a local folder lists a symlink named like an object too (as itself), so gc can remove it."""
        ...

    def freed_by_removing(self, name: str, listed: int | None) -> int:
        """What :meth:`remove` would free now (``listed``: the size the listing gave)."""
        ...

    def temp_files(self) -> list[StoredFile]:
        """thumbctl's temp files of writers here (STORE/.tmp); none in a bucket, where an object
        appears whole or not at all."""
        ...

    def remove_temp(self, path: str) -> int:
        """Remove one of :meth:`temp_files`; returns the bytes freed."""
        ...


@dataclass(frozen=True)
class LocalObjectStore(StoreLayout):
    """The local folder implementation of :class:`ObjectStore`, and its path arithmetic."""

    root: str

    @property
    def tmp_dir(self) -> str:
        return f"{self.root}/.tmp"

    @classmethod
    def of_object(cls, object_path: str) -> LocalObjectStore:
        """The store an object path lies in (``<root>/objects/<xx>/<name>``); an object of an output
        folder of the earlier layout (``OUT/objects/...``) has OUT as its store."""
        return cls(store_root_of(object_path))

    # -- the interface -------------------------------------------------------------------------

    def stage(self, data: bytes, extension: str) -> str:
        name = fsafe.temp_basename(extension)
        with fsafe.open_folder(self.root, self.tmp_dir, create=True) as tmp:
            fsafe.write_new(tmp, name, data)
            path = f"{self.tmp_dir}/{name}"
            STAGED.hold(path, tmp)
        return path

    def put_staged(self, staged: str, name: str, *, verify: Verifier) -> Published:
        return put_object(self, staged, self.path_of(name), verify=verify)

    def put(self, name: str, data: bytes, *, verify: Verifier) -> Published:
        staged = self.stage(data, name.rsplit(".", 1)[-1])
        try:
            return self.put_staged(staged, name, verify=verify)
        finally:
            self.discard(staged)

    def discard(self, staged: str | None) -> None:
        if staged and not STAGED.unlink(staged):
            fsafe.discard(staged)

    @contextlib.contextmanager
    def read_staged(self, staged: str) -> Iterator[int | None]:
        """A read descriptor of a staged temp file (still staged afterwards), closed on exit."""
        with STAGED.reading(staged, self.root) as fd:
            yield fd

    @contextlib.contextmanager
    def source(self, name: str, data: bytes | None = None) -> Iterator[Source]:
        """The object's own file (``data`` is not needed: the file is what is copied)."""
        with open_object(self.path_of(name)) as (fd, info):
            yield Source(functools.partial(os.pread, fd, info.st_size + 1, 0), fd, info)

    def read(self, name: str, limit: int) -> bytes:
        with open_object(self.path_of(name)) as (fd, info):
            if info.st_size > limit:
                raise ObjectTooLarge(f"{name} holds {info.st_size} bytes, over the limit of {limit}")
            data = os.pread(fd, limit + 1, 0)
        if len(data) > limit:
            raise ObjectTooLarge(f"{name} holds over {limit} bytes")
        return data

    def stat(self, name: str) -> ObjectInfo | None:
        try:
            with open_object(self.path_of(name)) as (fd, info):
                digest = fsafe.file_digest(fd, info.st_size)
                return ObjectInfo(info.st_size, f"{digest}:{info.st_ino}", digest)
        except FileNotFoundError:
            return None

    def peek(self, name: str) -> ObjectPeek | None:
        """The file's ``lstat``: its stamp, and whether it is a regular file."""
        try:
            st = os.lstat(self.path_of(name))
        except (FileNotFoundError, NotADirectoryError):
            return None
        stamp = ObjectStamp(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        return ObjectPeek(st.st_size, stat.S_ISREG(st.st_mode), stamp)

    def verify(self, name: str, check: Verifier) -> str | None:
        try:
            with open_object(self.path_of(name)) as (fd, _), os.fdopen(os.dup(fd), "rb") as stream:
                return check(stream)
        except FileNotFoundError:
            return "is missing"
        except OutsideOutput:
            return "is not a plain file in the store (a symlink or another kind of file)"

    def names(self, prefix: str = "") -> Iterator[str]:
        for _key, found in object_files(self):
            if found.name.startswith(prefix):
                yield found.name

    def remove(self, name: str) -> int:
        return remove_object(self, self.path_of(name))

    def write_preview(self, name: str, make: Callable[[], bytes]) -> None:
        write_preview(self, self.preview_path(self.path_of(name)), make)

    def read_preview(self, name: str, limit: int = _PREVIEW_LIMIT) -> bytes | None:
        return read_preview(self, self.preview_path(self.path_of(name)), limit)

    def listing(self) -> Iterator[tuple[str, int | None]]:
        for _key, found in object_files(self):
            yield found.name, found.size

    def freed_by_removing(self, name: str, listed: int | None) -> int:
        """The object's bytes while this is their last link, and its preview's."""
        path = self.path_of(name)
        try:
            info = os.lstat(path)
        except OSError:
            return 0
        own = info.st_size if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 else 0
        return own + preview_bytes(path)

    def temp_files(self) -> list[StoredFile]:
        return fsafe.temp_files(self.root, self.tmp_dir)

    def read_root_file(self, name: str, limit: int) -> bytes | None:
        try:
            with fsafe.open_folder(self.root, self.root) as root:
                return fsafe.read_small_file(root, name, limit)
        except FileNotFoundError:
            return None

    def create_root_file(self, name: str, data: bytes) -> bool:
        try:
            fsafe.write_new_name(self.root, self.tmp_dir, self.root, name, data)
        except FileExistsError:
            return False
        return True

    def remove_temp(self, path: str) -> int:
        return fsafe.remove_file(self.root, path)


def store_root_of(object_path: str) -> str:
    """The root of the store an object (or its preview) lies in: ``<root>/objects/<xx>/<name>``."""
    shard = os.path.dirname(os.path.abspath(object_path))
    objects = os.path.dirname(shard)
    if os.path.basename(objects) != "objects":
        raise ValueError(f"{object_path} is not an object of a store (<store>/objects/<xx>/<name>)")
    return os.path.dirname(objects)


# -- putting an object ---------------------------------------------------------------------------


def put_object(store: LocalObjectStore, temp_path: str, object_path: str, *, verify: Verifier) -> Published:
    """Create ``object_path`` from a verified temp file if absent (``link``), never writing
    through a symlink at any folder or at the name.

    An existing object with the same bytes is success (duplicate delivery). One with other
    bytes that ``verify`` accepts is kept (another host's codec may encode the same derivative
    differently). One that ``verify`` rejects, or anything that is not a regular file (a symlink,
    a FIFO), is replaced atomically by a rename. The temp file is gone afterwards.
    """
    tmp_dir, temp = os.path.split(temp_path)
    shard_dir, name = os.path.split(object_path)
    with STAGED.folder_of(temp_path, store.root) as tmp:
        try:
            with fsafe.open_folder(store.root, shard_dir, create=True) as shard:
                return _publish_in(tmp, temp, shard, name, verify)
        finally:
            fsafe.unlink_quietly(tmp, temp)


def _publish_in(tmp: int, temp: str, shard: int, name: str, verify: Verifier) -> Published:
    for _ in range(3):  # an existing object removed meanwhile (gc) is linked again
        try:
            os.link(temp, name, src_dir_fd=tmp, dst_dir_fd=shard, follow_symlinks=False)
            return Published(Outcome.CREATED)
        except FileExistsError:
            pass
        try:
            existing = fsafe.open_regular_file(shard, name)
        except FileNotFoundError:
            continue
        if existing is None:
            reason = "was not a regular file"
        else:
            with os.fdopen(existing, "rb") as stream:
                reason = _existing_problem(tmp, temp, stream, verify)
            if reason in (Outcome.DUPLICATE, Outcome.KEPT):
                return Published(reason)
        os.replace(temp, name, src_dir_fd=tmp, dst_dir_fd=shard)
        return Published(Outcome.REPLACED, reason)
    raise FileExistsError(errno.EEXIST, "the object kept appearing and vanishing", name)


def _existing_problem(tmp: int, temp: str, existing: BinaryIO, verify: Verifier) -> str:
    """``duplicate``, ``kept`` or why the existing object must be replaced."""
    fd = fsafe.open_regular_file(tmp, temp)
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, "the temp file is gone", temp)
    try:
        if fsafe.same_bytes(fd, existing.fileno()):
            return Outcome.DUPLICATE
    finally:
        os.close(fd)
    problem = verify(existing)
    return Outcome.KEPT if problem is None else problem


# -- reading an object -----------------------------------------------------------------------------


@contextlib.contextmanager
def open_object(object_path: str) -> Iterator[tuple[int, os.stat_result]]:
    """A read descriptor of an object and its fstat, reached from its store's root without following
    a symlink; a symlink or another kind of file at the object's name raises OutsideOutput (a copy of
    it could carry a file from anywhere into OUT); a missing one FileNotFoundError."""
    root = store_root_of(object_path)
    shard_dir, name = os.path.split(object_path)
    with fsafe.open_folder(root, shard_dir) as shard:
        fd = fsafe.open_regular_file(shard, name)
    if fd is None:
        raise OutsideOutput(object_path, root)
    try:
        yield fd, os.fstat(fd)
    finally:
        os.close(fd)


def object_holds(object_path: str, fd: int, size: int) -> bool:
    """Whether the object at ``object_path`` holds exactly the bytes of the open file ``fd`` (``size``
    bytes): the read is bounded by the object's size; a missing or unreachable object holds nothing."""
    try:
        with open_object(object_path) as (obj, info):
            return info.st_size == size and fsafe.same_bytes(obj, fd)
    except (OSError, ValueError):
        return False


# -- listing and removal -----------------------------------------------------------------------------


def object_files(store: LocalObjectStore) -> Iterator[tuple[str, StoredFile]]:
    """(derivative key, file) of every object under STORE/objects/<k[:2]>/<k>.<ext>.

    Files whose name does not fit the layout are not objects and are never listed.
    """
    objects = store.objects_dir
    if not fsafe.listable(store.root, objects):
        return
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for shard in sorted(os.listdir(objects)):
            if not fsafe.listable(store.root, f"{objects}/{shard}"):
                continue
            # a symlink named like an object is listed too (as itself), so gc can remove it
            for found in sorted(fsafe.regular_files(f"{objects}/{shard}", links=True), key=lambda f: f.path):
                key = found.name.split(".", 1)[0]
                if key[:2] == shard and _OBJECT_NAME.fullmatch(found.name):
                    yield key, found


def preview_bytes(object_path: str) -> int:
    """The bytes of the preview beside an object (removed with the object), 0 when there is none."""
    try:
        info = os.lstat(LocalObjectStore.preview_path(object_path))
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 else 0


def remove_object(store: LocalObjectStore, object_path: str) -> int:
    """Remove an object and its preview, then its shard folder once empty; returns the bytes freed."""
    freed = fsafe.remove_file(store.root, object_path) + fsafe.remove_file(store.root, store.preview_path(object_path))
    remove_empty_shard(store, os.path.dirname(object_path))
    return freed


def remove_empty_shard(store: LocalObjectStore, shard: str) -> bool:
    """Remove a STORE/objects/<xx> folder once it holds nothing; returns whether it went.

    Only a real, empty shard folder directly under STORE/objects is ever removed.
    """
    if os.path.dirname(os.path.normpath(shard)) != os.path.normpath(store.objects_dir):
        raise ValueError(f"{shard} is not a shard folder of {store.objects_dir}")
    return fsafe.remove_empty_folder(store.root, shard)


# -- previews -------------------------------------------------------------------------------------------


def write_preview(store: LocalObjectStore, path: str, make: Callable[[], bytes]) -> None:
    """Write a preview at ``path`` (a name in the store) from the bytes ``make`` returns, through
    STORE/.tmp and a rename, unless one is there already (then ``make`` is not called). Not fsynced:
    it is a review aid, and the contact sheet checks it is a whole JPEG before using it."""
    folder, name = os.path.split(path)
    with fsafe.open_folder(store.root, folder, create=True) as dest:
        with contextlib.suppress(FileNotFoundError):
            os.stat(name, dir_fd=dest, follow_symlinks=False)
            return
        with fsafe.open_folder(store.root, store.tmp_dir, create=True) as tmp:
            staging = fsafe.temp_basename("jpg")
            fd = os.open(staging, fsafe.NEW_FILE_FLAGS, 0o644, dir_fd=tmp)
            try:
                with os.fdopen(fd, "wb") as stream:
                    stream.write(make())
                os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=dest)
            finally:
                fsafe.unlink_quietly(tmp, staging)


def read_preview(store: LocalObjectStore, path: str, limit: int = _PREVIEW_LIMIT) -> bytes | None:
    """A preview's bytes if ``path`` is a whole JPEG file of at most ``limit`` bytes inside the store, else None."""
    if not fsafe.inside(store.root, path):
        return None
    folder, name = os.path.split(os.path.abspath(path))
    try:
        with fsafe.open_folder(store.root, folder) as parent:
            fd = os.open(name, fsafe.READ_FLAGS, dir_fd=parent)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return None
        data = stream.read(limit + 1)
    whole = len(data) <= limit and data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
    return data if whole else None
