"""The output directory: where thumbnails and batch manifests live, and the folder primitives the
object store (:mod:`thumbctl.objectstore`) shares.

Layout of OUT (nothing else is ever written there)::

    OUT/<name from the template>         thumbnails: each its own file (a reflink or a copy of its object)
    OUT/batches/<batch_id>.json          per-batch manifest
    OUT/batches/<batch_id>.html          contact sheet (``thumbctl sheet``, default place)
    OUT/.tmp/                            temp files of writers, only while files are being written

The objects themselves live in the store (``STORE/objects/<k[:2]>/<k>.<ext>``, see
:mod:`thumbctl.objectstore`); an output folder of the earlier layout may still hold
``OUT/objects/``, whose objects keep working where the ledger records them.

Every write, link, rename and delete under OUT or STORE goes through folder descriptors: the folders
from ``/`` down to the root (resolved at submit) and below it are opened one by one, relative
to the one above, without following a symlink (:func:`open_folder`), and the file is created,
linked, renamed or removed relative to the last one (``dir_fd``/``src_dir_fd``/``dst_dir_fd``).
So no item id, swapped-in link, symlinked ``objects``/``.tmp``/``batches`` folder or folder
above the root swapped for a symlink can make it land outside, even when the folder is swapped
between a check and the act. A symlink at the final name is only ever
replaced by a rename, never written through. A write that fails (``ENOSPC``) removes its
temp file.

An object already at its name (:func:`publish_object`) is kept when it holds the same bytes,
and also when it holds other bytes that the caller's verifier accepts (it decodes as the
right format and size: another host's codec); it is replaced atomically when it fails
verification or is not a regular file. A thumbnail is thumbctl's own when it holds exactly
the bytes of an object the ledger says was published at its name: an edited thumbnail is not.
This module never looks at pixels itself.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import ItemFailure
from .markup import picture_sets
from .models import BatchView, ItemView
from .naming import relative_path_problem
from .proc import host_id, start_ticks
from .settings import Ratio

RESERVED_TOP_LEVEL = {".tmp"}


#: The longest segment (bytes of UTF-8) an item id may have: a friendly name adds a ratio
#: and an extension to it and must stay under the usual 255-byte file name limit.
MAX_SEGMENT_BYTES = 200


class UnsafeItemId(ValueError):
    """An item id that could not be a safe relative path inside OUT; ``reason`` says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class OutsideOutput(OSError):
    """A write, link, rename or delete under OUT would go through a symlink, which could lead
    out of the output folder; an OSError, so callers that report filesystem refusals report it."""

    def __init__(self, path: str, root: str) -> None:
        super().__init__(
            f"{path} is a symlink, which could lead out of the output folder {root}; "
            "nothing is written or removed through it"
        )
        self.path = path


def is_plain_file(path: str) -> bool:
    """Whether ``path`` is a regular file itself, not a symlink to one: only such a file in OUT
    may count as an output (a symlink could make an output depend on a file outside OUT)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def check_item_id(item_id: str) -> str:
    """Return ``item_id`` if it is a safe relative path inside OUT, else raise.

    Refused: empty ids, text that is not valid UTF-8 (lone surrogates, such as the
    undecodable bytes of a file name), absolute paths, ``.``/``..`` or empty segments,
    backslashes, control characters, segments over 200 bytes and the reserved ``.tmp``
    folder.
    """
    if not item_id:
        raise UnsafeItemId("item id is empty", "is empty")
    reason = _id_problem(item_id)
    if reason is not None:
        raise UnsafeItemId(f"item id {item_id!r} {reason}", reason)
    return item_id


def _id_problem(item_id: str) -> str | None:
    problem = relative_path_problem(item_id)
    if problem is not None:
        return problem
    parts = item_id.split("/")
    if parts[0] in RESERVED_TOP_LEVEL:
        return f"uses the reserved folder {parts[0]!r}"
    if any(len(part.encode()) > MAX_SEGMENT_BYTES for part in parts):
        return f"has a segment over {MAX_SEGMENT_BYTES} bytes"
    return None


def friendly_stems(item_ids: list[str]) -> dict[str, str]:
    """Map each id to the stem of its friendly names.

    The stem is the id without its extension; when two ids share a stem
    (``a.jpg`` and ``a.png``), the later one in sorted order keeps its
    extension (``a.png``), so no two items of a batch share a friendly name.
    """
    stems: dict[str, str] = {}
    taken: set[str] = set()
    for item_id in sorted(item_ids):
        stem = _without_extension(item_id)
        if stem in taken:
            stem = item_id
        taken.add(stem)
        stems[item_id] = stem
    return stems


def _without_extension(item_id: str) -> str:
    """``rooms/sofa.jpg`` -> ``rooms/sofa``; names like ``.hidden`` or ``x.`` stay whole."""
    head, sep, name = item_id.rpartition("/")
    dot = name.rfind(".")
    return f"{head}{sep}{name[:dot]}" if 0 < dot < len(name) - 1 else item_id


@dataclass(frozen=True)
class OutputLayout:
    """Path arithmetic for one output directory (no I/O). Paths are absolute strings."""

    root: str

    @staticmethod
    def preview_path(object_path: str) -> str:
        """The contact sheet's small preview of a source, beside the first object rendered from it
        (``<key>.preview.jpg``: not an object's name, so reconcile and gc never take it for one)."""
        return f"{os.path.splitext(object_path)[0]}.preview.jpg"

    def friendly_path(self, stem: str, ratio: Ratio, extension: str, size: int | None = None) -> str:
        """``OUT/<stem>.<ratio>.<ext>``; with ``size`` (the size asked for, given when a batch asks
        for several sizes) ``OUT/<stem>.<ratio>.<size>.<ext>``."""
        sized = f".{size}" if size is not None else ""
        return f"{self.root}/{stem}.{ratio.slug}{sized}.{extension}"

    def batch_manifest_path(self, batch_id: str) -> str:
        return f"{self.root}/batches/{batch_id}.json"

    def batch_sheet_path(self, batch_id: str) -> str:
        return f"{self.root}/batches/{batch_id}.html"

    @property
    def tmp_dir(self) -> str:
        return f"{self.root}/.tmp"


def resolve_out_dir(out: Path) -> Path:
    """Absolute, symlink-resolved output directory; it need not exist yet."""
    resolved = Path(os.path.realpath(out))
    if resolved.exists() and not resolved.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a directory")
    return resolved


#: Folders of OUT that are never a thumbnail's: ``objects/`` is the store of the earlier layout.
_RESERVED_FOLDERS = ("objects", "batches", ".tmp")


def looks_like_output_folder(path: str) -> bool:
    """Whether ``path`` is an output folder thumbctl wrote (``batches/`` with a batch manifest in it,
    or the earlier layout's ``objects/``, ``batches/`` and ``.tmp/``), so a folder scan never takes
    thumbnails for sources."""
    if all(os.path.isdir(os.path.join(path, name)) for name in _RESERVED_FOLDERS):
        return True
    batches = os.path.join(path, "batches")
    with contextlib.suppress(OSError):
        return any(re.fullmatch(r"b_[0-9A-Za-z_-]+\.json", name) for name in os.listdir(batches))
    return False


def store_root_of(object_path: str) -> str:
    """The root of the store an object (or its preview) lies in: ``<root>/objects/<xx>/<name>``."""
    shard = os.path.dirname(os.path.abspath(object_path))
    objects = os.path.dirname(shard)
    if os.path.basename(objects) != "objects":
        raise ValueError(f"{object_path} is not an object of a store (<store>/objects/<xx>/<name>)")
    return os.path.dirname(objects)


# -- folders under OUT: opened from the root down, never through a symlink --------------------------

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: a FIFO swapped in at a file's name cannot block the open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextlib.contextmanager
def open_folder(root: str, folder: str, *, create: bool = False) -> Iterator[int]:
    """An open descriptor of ``folder`` (``root`` or a folder below it), closed on exit.

    ``root`` was resolved when the batch was submitted, so no folder on its path was a symlink
    then: it is reached the way it was checked, from ``/`` one folder at a time, and so is each
    folder below it, each opened relative to its parent's descriptor with ``O_NOFOLLOW``; with
    ``create`` the missing ones are made. So neither a folder under OUT nor one above it
    swapped for a symlink can redirect what is done through the descriptor.
    Raises :class:`OutsideOutput` at the first symlink, :class:`NotADirectoryError` at another
    kind of file and :class:`FileNotFoundError` at a missing folder (without ``create``).
    Works from any root: nothing here knows the layout of OUT.
    """
    root = os.path.normpath(os.path.abspath(root))
    fd = os.open("/", _FOLDER_FLAGS)
    try:
        current = ""
        for part in [*filter(None, root.split("/")), *_parts_below(root, folder)]:
            current = f"{current}/{part}"
            child = _open_child(fd, part, current, root, create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_child(parent: int, name: str, path: str, root: str, create: bool) -> int:
    try:
        return _open_dir(name, parent, path, root)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # another writer made it meanwhile: opened as any other below
        os.mkdir(name, dir_fd=parent)
    return _open_dir(name, parent, path, root)


def _open_dir(name: str, parent: int, path: str, root: str) -> int:
    """Open one folder without following a symlink at its name; a symlink raises OutsideOutput."""
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, parent)):
            raise OutsideOutput(path, root) from None
        if exc.errno == errno.ENOTDIR:
            raise NotADirectoryError(errno.ENOTDIR, f"{path} is not a folder", path) from None
        raise


def _is_link(name: str, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def checked_folder(layout: OutputLayout, folder: str, *, create: bool) -> bool:
    """Prove that OUT's root and every folder below it down to ``folder`` is a real directory
    (see :func:`open_folder`); with ``create`` the missing ones are made. Returns whether
    ``folder`` exists (always True with ``create``)."""
    try:
        with open_folder(layout.root, folder, create=create):
            return True
    except FileNotFoundError:
        return False


def probe_writable(layout: OutputLayout) -> None:
    """Prove a file can be written in OUT/.tmp, so a batch is never accepted for an output
    folder no worker could publish into; the folders this made are removed again, so a
    submission still writes nothing to OUT. Raises OSError."""
    made_tmp = not os.path.lexists(layout.tmp_dir)
    made = []
    folder = layout.root
    while not os.path.lexists(folder) and folder != os.path.dirname(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    try:
        discard(write_temp(layout, b"", "probe"), strict=True)
    finally:
        if made_tmp:
            with contextlib.suppress(OSError), open_folder(layout.root, layout.root) as root:
                os.rmdir(".tmp", dir_fd=root)
        for folder in made:  # innermost first; OUT and the folders above it, outside the content of OUT
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def symlinked_folder(layout: OutputLayout, folder: str) -> str | None:
    """The first symlink between OUT's root and ``folder`` (inclusive), or None; creates nothing."""
    try:
        checked_folder(layout, folder, create=False)
    except OutsideOutput as exc:
        return exc.path
    except NotADirectoryError:
        return None
    return None


def _parts_below(root: str, folder: str) -> list[str]:
    """The names of the folders from ``root`` (excluded) down to ``folder``."""
    folder = os.path.normpath(folder)
    if folder == root:
        return []
    prefix = root if root.endswith("/") else f"{root}/"
    if not folder.startswith(prefix):
        raise ValueError(f"{folder} is not inside the output folder {root}")
    return folder[len(prefix) :].split("/")


def _listable(layout: OutputLayout, folder: str) -> bool:
    """Whether ``folder`` exists as a real folder under OUT (listing never follows a symlink out)."""
    try:
        return checked_folder(layout, folder, create=False)
    except (OutsideOutput, NotADirectoryError):
        return False


# -- files in an open folder -----------------------------------------------------------------


def _write_new(folder: int, name: str, data: bytes) -> None:
    """Create ``name`` in ``folder`` holding ``data``, durably; on any failure (a full disk,
    an I/O error) the partial file is removed again, so no temp file is left behind."""
    fd = os.open(name, _NEW_FILE_FLAGS, 0o644, dir_fd=folder)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quietly(folder, name)
        raise


def _stage_and_rename(tmp: int, folder: int, name: str, data: bytes, extension: str) -> None:
    """Write ``data`` to a new temp file in ``tmp``, then rename it over ``name`` in ``folder``."""
    staging = _temp_basename(extension)
    _write_new(tmp, staging, data)
    try:
        os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=folder)
    finally:
        _unlink_quietly(tmp, staging)


def _unlink_quietly(folder: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


def _open_file(folder: int, name: str) -> int | None:
    """A read descriptor of ``name`` if it is a regular file (not a symlink, FIFO, folder …), else None."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_small_file(folder: int, name: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``name`` in ``folder`` if it holds at most ``limit``, else None
    (also for a symlink or another kind of file); FileNotFoundError when it is missing."""
    fd = _open_file(folder, name)
    if fd is None:
        return None
    try:
        data = os.pread(fd, limit + 1, 0)
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def write_new_name(layout: OutputLayout, folder: str, name: str, data: bytes) -> None:
    """Create ``name`` in ``folder`` (under ``layout.root``) holding ``data``, written whole and fsynced
    in the layout's temp folder first and then linked in: FileExistsError when a file is there (it is
    never replaced), so of two writers one wins and the other reads what the winner wrote."""
    with open_folder(layout.root, layout.tmp_dir, create=True) as tmp, open_folder(layout.root, folder) as dest:
        staging = _temp_basename("new")
        _write_new(tmp, staging, data)
        try:
            os.link(staging, name, src_dir_fd=tmp, dst_dir_fd=dest, follow_symlinks=False)
        finally:
            _unlink_quietly(tmp, staging)


def _same_bytes(a: int, b: int) -> bool:
    """Whether two open files hold the same bytes (size first, then block by block with
    ``pread``, which leaves both files' offsets where they were)."""
    size = os.fstat(a).st_size
    if os.fstat(b).st_size != size:
        return False
    block = 1 << 20
    return all(os.pread(a, block, at) == os.pread(b, block, at) for at in range(0, size, block))


# -- publishing -------------------------------------------------------------------------


def _temp_basename(extension: str) -> str:
    """A fresh temp file name for OUT/.tmp, naming its writer (see :func:`temp_writer`).

    ``<pid>-<start ticks>-<host tag>-<random>.<ext>``: reconcile removes the
    temp files of writers that are gone at once, and others only after a grace period.
    """
    return f"{_writer_prefix(os.getpid())}-{secrets.token_hex(6)}.{extension}"


@functools.lru_cache(maxsize=1)
def _writer_prefix(pid: int) -> str:
    """``<pid>-<start ticks>-<host tag>`` of this process: constant for its life, so /proc is read
    once per process, not once per temp file (forgotten in a forked child, see below)."""
    ticks = start_ticks(pid).replace("?", "x")
    return f"{pid}-{ticks}-{host_tag()}"


os.register_at_fork(after_in_child=_writer_prefix.cache_clear)


def host_tag(host: str | None = None) -> str:
    """A short, filename-safe tag of a host identity (hosts may share an output folder)."""
    return hashlib.sha256((host or host_id()).encode()).hexdigest()[:8]


_TEMP_NAME = re.compile(r"^(\d+)-(\d+|x)-([0-9a-f]{8})-[0-9a-f]{12}\.")


def temp_writer(name: str) -> str | None:
    """The lease-style owner id (``host-id:pid:ticks``) of the process that wrote temp file
    ``name``, when the name says and the writer ran on this host; else None (unknown).

    Names of the older ``<pid>-<random>`` scheme carry no start time or host: unknown.
    """
    match = _TEMP_NAME.match(name)
    if match is None or match.group(3) != host_tag():
        return None
    ticks = match.group(2).replace("x", "?")
    return f"{host_id()}:{match.group(1)}:{ticks}"


def write_temp(layout: OutputLayout, data: bytes, extension: str) -> str:
    """Write ``data`` durably to a new temp file in OUT/.tmp and return its path.

    A write or fsync that fails (``ENOSPC``) removes the temp file before raising."""
    name = _temp_basename(extension)
    with open_folder(layout.root, layout.tmp_dir, create=True) as tmp:
        _write_new(tmp, name, data)
    return f"{layout.tmp_dir}/{name}"


def write_preview(layout: OutputLayout, path: str, make: Callable[[], bytes]) -> None:
    """Write a preview at ``path`` (a name in the store) from the bytes ``make`` returns, through
    OUT/.tmp and a rename, unless one is there already (then ``make`` is not called). Not fsynced:
    it is a review aid, and the contact sheet checks it is a whole JPEG before using it."""
    folder, name = os.path.split(path)
    with open_folder(layout.root, folder, create=True) as dest:
        with contextlib.suppress(FileNotFoundError):
            os.stat(name, dir_fd=dest, follow_symlinks=False)
            return
        with open_folder(layout.root, layout.tmp_dir, create=True) as tmp:
            staging = _temp_basename("jpg")
            fd = os.open(staging, _NEW_FILE_FLAGS, 0o644, dir_fd=tmp)
            try:
                with os.fdopen(fd, "wb") as stream:
                    stream.write(make())
                os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=dest)
            finally:
                _unlink_quietly(tmp, staging)


def read_preview(layout: OutputLayout, path: str, limit: int = 1 << 20) -> bytes | None:
    """A preview's bytes if ``path`` is a whole JPEG file of at most ``limit`` bytes inside OUT, else None."""
    if not _inside(layout.root, path):
        return None
    folder, name = os.path.split(os.path.abspath(path))
    try:
        with open_folder(layout.root, folder) as parent:
            fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return None
        data = stream.read(limit + 1)
    whole = len(data) <= limit and data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
    return data if whole else None


def discard(path: str | None, *, strict: bool = False) -> None:
    """Remove a temp file of OUT/.tmp (``<root>/.tmp/<name>``) if it is there.

    Best effort unless ``strict``: a temp file that cannot be reached (its folder swapped for
    a symlink) stays, and ``reconcile`` removes it later."""
    if not path:
        return
    tmp_dir, name = os.path.split(path)
    if os.path.basename(tmp_dir) != ".tmp":
        raise ValueError(f"{path} is not a temp file of an output folder")
    try:
        with open_folder(os.path.dirname(tmp_dir), tmp_dir) as tmp:
            _unlink_quietly(tmp, name)
    except FileNotFoundError:
        return
    except OSError:
        if strict:
            raise


#: Verifies an existing object read from the open file: None when it is sound, else what is wrong.
Verifier = Callable[[BinaryIO], "str | None"]


@dataclass(frozen=True)
class Published:
    """What :func:`publish_object` did: ``created`` the object, found a ``duplicate`` (the same
    bytes), ``kept`` an existing object with other bytes that verifies, or ``replaced`` one that
    did not verify or was no regular file (``reason`` says why)."""

    outcome: str
    reason: str | None = None

    @property
    def note(self) -> str | None:
        """The note for the item's event: ``object_mismatch`` or ``object_replaced``, with why."""
        if self.outcome == "kept":
            return "object_mismatch: an object with other bytes that verifies was already there; kept"
        if self.outcome == "replaced":
            return f"object_replaced: the existing object {self.reason}; replaced"
        return None


def publish_object(layout: OutputLayout, temp_path: str, object_path: str, *, verify: Verifier) -> Published:
    """Create ``object_path`` from a verified temp file if absent (``link``), never writing
    through a symlink at any folder or at the name.

    An existing object with the same bytes is success (duplicate delivery). One with other
    bytes that ``verify`` accepts is kept (another host's codec may encode the same derivative
    differently). One that ``verify`` rejects, or anything that is not a regular file (a symlink,
    a FIFO), is replaced atomically by a rename. The temp file is gone afterwards.
    """
    tmp_dir, temp = os.path.split(temp_path)
    shard_dir, name = os.path.split(object_path)
    with open_folder(layout.root, tmp_dir) as tmp:
        try:
            with open_folder(layout.root, shard_dir, create=True) as shard:
                return _publish_in(tmp, temp, shard, name, verify)
        finally:
            _unlink_quietly(tmp, temp)


def _publish_in(tmp: int, temp: str, shard: int, name: str, verify: Verifier) -> Published:
    for _ in range(3):  # an existing object removed meanwhile (gc) is linked again
        try:
            os.link(temp, name, src_dir_fd=tmp, dst_dir_fd=shard, follow_symlinks=False)
            return Published("created")
        except FileExistsError:
            pass
        try:
            existing = _open_file(shard, name)
        except FileNotFoundError:
            continue
        if existing is None:
            reason = "was not a regular file"
        else:
            with os.fdopen(existing, "rb") as stream:
                reason = _existing_problem(tmp, temp, stream, verify)
            if reason in ("duplicate", "kept"):
                return Published(reason)
        os.replace(temp, name, src_dir_fd=tmp, dst_dir_fd=shard)
        return Published("replaced", reason)
    raise FileExistsError(errno.EEXIST, "the object kept appearing and vanishing", name)


def _existing_problem(tmp: int, temp: str, existing: BinaryIO, verify: Verifier) -> str:
    """``duplicate``, ``kept`` or why the existing object must be replaced."""
    fd = _open_file(tmp, temp)
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, "the temp file is gone", temp)
    try:
        if _same_bytes(fd, existing.fileno()):
            return "duplicate"
    finally:
        os.close(fd)
    problem = verify(existing)
    return "kept" if problem is None else problem


# -- thumbnails in OUT: each its own file, a reflink or a copy of its object -------------------------

#: ``ioctl(dst, FICLONE, src)``: share the source's blocks (copy on write) where the filesystem can.
FICLONE = 0x40049409
#: Errors that mean "this filesystem (or pair of files) cannot reflink": fall back to a copy.
_NO_REFLINK = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.ENOSYS, errno.EPERM}


def clone_file(src: int, dst: int, size: int) -> str:
    """Make the empty file ``dst`` hold the first ``size`` bytes of ``src`` (``size`` is ``src``'s
    whole length, from its fstat): a reflink where the filesystem supports it (``reflink``), else a
    copy in the kernel or, where that is refused, a bounded read and write (``copy``)."""
    try:
        fcntl.ioctl(dst, FICLONE, src)
        if os.fstat(dst).st_size == size:
            return "reflink"
        os.ftruncate(dst, 0)
    except OSError as exc:
        if exc.errno not in _NO_REFLINK:
            raise
    _copy_bytes(src, dst, size)
    return "copy"


def _copy_bytes(src: int, dst: int, size: int) -> None:
    done = 0
    try:
        while done < size:
            copied = os.copy_file_range(src, dst, size - done, done, done)
            if copied == 0:
                break
            done += copied
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    while done < size:
        block = os.pread(src, min(1 << 20, size - done), done)
        if not block:
            break
        view = memoryview(block)
        while view:
            written = os.pwrite(dst, view, done)
            done += written
            view = view[written:]
    if done != size or os.fstat(dst).st_size != size:
        raise OSError(errno.EIO, f"the copy holds {os.fstat(dst).st_size} bytes, the object {size}")


@contextlib.contextmanager
def open_object(object_path: str) -> Iterator[tuple[int, os.stat_result]]:
    """A read descriptor of an object and its fstat, reached from its store's root without following
    a symlink; a symlink or another kind of file at the object's name raises OutsideOutput (a copy of
    it could carry a file from anywhere into OUT); a missing one FileNotFoundError."""
    root = store_root_of(object_path)
    shard_dir, name = os.path.split(object_path)
    with open_folder(root, shard_dir) as shard:
        fd = _open_file(shard, name)
    if fd is None:
        raise OutsideOutput(object_path, root)
    try:
        yield fd, os.fstat(fd)
    finally:
        os.close(fd)


def _object_holds(object_path: str, fd: int, size: int) -> bool:
    """Whether the object at ``object_path`` holds exactly the bytes of the open file ``fd`` (``size``
    bytes): the read is bounded by the object's size; a missing or unreachable object holds nothing."""
    try:
        with open_object(object_path) as (obj, info):
            return info.st_size == size and _same_bytes(obj, fd)
    except (OSError, ValueError):
        return False


def _name_holds(dest: int, name: str, info: os.stat_result, objects: Iterable[str]) -> bool:
    """Whether the regular file ``name`` (status ``info``) holds exactly the bytes of one of ``objects``."""
    paths = [path for path in objects if path]
    if not paths or not stat.S_ISREG(info.st_mode):
        return False
    fd = _open_file(dest, name)
    if fd is None:
        return False
    try:
        return any(_object_holds(path, fd, info.st_size) for path in paths)
    finally:
        os.close(fd)


def _holds(folder: int, name: str, info: os.stat_result, content: Callable[[], bytes]) -> bool:
    """Whether the regular file ``name`` (status ``info``) holds exactly ``content()``."""
    expected = content()
    if info.st_size != len(expected):
        return False
    fd = _open_file(folder, name)
    if fd is None:
        return False
    try:
        return os.fstat(fd).st_size == len(expected) and os.pread(fd, len(expected) + 1, 0) == expected
    finally:
        os.close(fd)


def _same_inode_as(info: os.stat_result, target: os.stat_result) -> bool:
    return (info.st_dev, info.st_ino) == (target.st_dev, target.st_ino)


@contextlib.contextmanager
def _out_tmp(layout: OutputLayout) -> Iterator[int]:
    """OUT/.tmp, made if missing. It is removed when a run ends and it is empty, so another process
    may remove it between its opening and a file made in it: a folder found removed is made again."""
    for _ in range(3):
        with open_folder(layout.root, layout.tmp_dir, create=True) as tmp:
            if os.fstat(tmp).st_nlink > 0:
                yield tmp
                return
    raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", layout.tmp_dir)


def _staged_copy(layout: OutputLayout, src: int, size: int, place: Callable[[int, str], bool]) -> bool:
    """Copy the open object ``src`` into a new temp file in OUT/.tmp, fsync it, and ``place(tmp, staging)``
    it at its name; the temp file is gone afterwards. Returns what ``place`` returned."""
    for _ in range(3):
        with _out_tmp(layout) as tmp:
            staging = _temp_basename("copy")
            try:
                fd = os.open(staging, _NEW_FILE_FLAGS, 0o644, dir_fd=tmp)
            except FileNotFoundError:  # the temp folder was removed meanwhile: made again
                continue
            try:
                try:
                    clone_file(src, fd, size)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                return place(tmp, staging)
            finally:
                _unlink_quietly(tmp, staging)
    raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", layout.tmp_dir)


def restore_thumbnail(layout: OutputLayout, object_path: str, friendly_path: str) -> None:
    """Put a fresh copy of the object at ``friendly_path`` (an atomic rename over whatever is there:
    the thumbnail was found missing, edited or not a plain file)."""
    folder, name = os.path.split(friendly_path)
    with open_object(object_path) as (src, info), open_folder(layout.root, folder, create=True) as dest:

        def place(tmp: int, staging: str) -> bool:
            os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=dest)
            return True

        _staged_copy(layout, src, info.st_size, place)


#: The name reconcile's repair used when thumbnails were hard links; it now restores a copy.
link_friendly = restore_thumbnail

#: What :func:`publish_name` did at a thumbnail's name.
NAME_OUTCOMES = ("created", "unchanged", "relinked", "replaced", "overwritten")


def publish_name(
    layout: OutputLayout,
    object_path: str,
    friendly_path: str,
    *,
    earlier_objects: Callable[[], Iterable[str]],
    overwrite: bool,
    approved: tuple[str, os.stat_result] | None = None,
) -> str:
    """Publish the thumbnail at its name as its own file (a reflink or a copy of the object), never
    over a file thumbctl did not publish.

    Returns ``created`` (nothing was there: the copy is linked in with a create-if-absent ``link()``,
    so a file that appears meanwhile is never replaced), ``unchanged`` (the name holds the object's
    very bytes, in a file of its own), ``relinked`` (the object's bytes in a file shared with another
    name, such as a hard link of the earlier layout, or the bytes of the item's own object: a copy
    takes its place), ``replaced`` (it holds the bytes of another object thumbctl published there:
    one of ``earlier_objects()``, the objects of the succeeded items that recorded this name, asked
    only then) or ``overwritten`` (anything else, with ``overwrite``). Without ``overwrite`` such a
    file (or symlink, or folder) — a thumbnail the user has edited since included — is left as it is
    and ItemFailure ``name_taken`` is raised. ``approved`` is what :func:`name_outcome` decided
    before the object was stored (an outcome and the file it saw): while that very file is at the
    name, the decision stands. Everything goes through folder descriptors; no symlink is followed.
    """
    folder, name = os.path.split(friendly_path)
    with open_object(object_path) as (src, target), open_folder(layout.root, folder, create=True) as dest:
        content = functools.partial(os.pread, src, target.st_size + 1, 0)
        for _ in range(3):
            outcome, _ = name_outcome(
                layout, dest, name, friendly_path, target, earlier_objects, overwrite, content, approved=approved
            )
            if outcome == "unchanged":
                return outcome
            if _staged_copy(layout, src, target.st_size, functools.partial(_place, dest, name, outcome)):
                return outcome
    raise FileExistsError(errno.EEXIST, "files kept appearing at the thumbnail's name", friendly_path)


def _place(dest: int, name: str, outcome: str, tmp: int, staging: str) -> bool:
    """Put the staged copy at ``name``: a rename over what is there, or (``created``) a ``link()``
    that fails when a file appeared meanwhile; returns False then, so the caller looks again."""
    if outcome != "created":
        os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=dest)
        return True
    try:
        os.link(staging, name, src_dir_fd=tmp, dst_dir_fd=dest, follow_symlinks=False)
    except FileExistsError:
        return False
    return True


def name_outcome(
    layout: OutputLayout,
    dest: int,
    name: str,
    friendly_path: str,
    target: os.stat_result | None,
    earlier_objects: Callable[[], Iterable[str]],
    overwrite: bool,
    content: Callable[[], bytes],
    own: Iterable[str] = (),
    approved: tuple[str, os.stat_result] | None = None,
) -> tuple[str, os.stat_result | None]:
    """What publishing at ``name`` (in the folder ``dest``) would do (see :func:`publish_name`),
    and the status of the file it judged (None when the name is free). ``target`` is the
    object's status, None before it exists; ``content()`` its bytes; ``own`` the item's own
    object path (a file holding its bytes, such as the thumbnail of a damaged object about to be
    rendered again, is relinked, not counted); ``approved`` an earlier decision that stands while its
    file is there. A file is thumbctl's when it holds exactly the bytes of an object the ledger says
    was published at that name (read up to the object's size). Raises ItemFailure ``name_taken``."""
    try:
        existing = os.stat(name, dir_fd=dest, follow_symlinks=False)
    except FileNotFoundError:
        return "created", None
    if target is not None and _same_inode_as(existing, target):
        return "relinked", existing  # a hard link of the earlier layout: a copy of its own takes its place
    if approved is not None and _same_inode_as(existing, approved[1]):
        return approved[0], existing
    if stat.S_ISREG(existing.st_mode) and _holds(dest, name, existing, content):
        return ("unchanged" if existing.st_nlink == 1 else "relinked"), existing
    if _name_holds(dest, name, existing, own):
        return "relinked", existing
    if _name_holds(dest, name, existing, earlier_objects() if stat.S_ISREG(existing.st_mode) else ()):
        return "replaced", existing
    if overwrite:
        return "overwritten", existing
    raise ItemFailure(
        "name_taken",
        f"{friendly_path} is a file thumbctl did not publish; it is left as it is (--overwrite replaces it)",
    )


def remove_empty_tmp(layout: OutputLayout) -> bool:
    """Remove OUT/.tmp once it is empty (it exists only while files are being written); returns
    whether it went. A writer that opened it meanwhile makes it again (see :func:`_out_tmp`)."""
    try:
        with open_folder(layout.root, layout.root) as root:
            os.rmdir(".tmp", dir_fd=root)
    except OSError:
        return False
    return True


def write_json_atomically(layout: OutputLayout, path: str, doc: object) -> None:
    """Write a JSON document through a temp file and an atomic rename."""
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    folder, name = os.path.split(path)
    with open_folder(layout.root, folder, create=True) as dest:
        _stage_in_out_tmp(layout, dest, name, data, "json")


def _stage_in_out_tmp(layout: OutputLayout, dest: int, name: str, data: bytes, extension: str) -> None:
    """Write ``data`` at ``name`` in ``dest`` through a temp file in OUT/.tmp, then remove OUT/.tmp
    if nothing else is being written there (a folder another writer removed meanwhile is made again)."""
    for _ in range(3):
        with _out_tmp(layout) as tmp:
            try:
                _stage_and_rename(tmp, dest, name, data, extension)
            except FileNotFoundError:
                if os.fstat(tmp).st_nlink > 0:
                    raise
                continue
        remove_empty_tmp(layout)
        return
    raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", layout.tmp_dir)


def write_batch_manifest(batch: BatchView, items: list[ItemView]) -> str:
    """Write OUT/batches/<batch_id>.json: every item with its object and friendly path, and per
    source and ratio its published files with a ``srcset`` per format and a ``<picture>``."""
    entries = [
        {
            "item_id": item.item_id,
            "ratio": item.ratio,
            "size": item.size,
            "format": item.format,
            "state": item.state,
            "error_code": item.error_code,
            "derivative_key": item.derivative_key,
            "object_path": item.object_path if item.state == "succeeded" else None,
            "friendly_path": item.friendly_path if item.state == "succeeded" else None,
        }
        for item in items
    ]
    pictures = [group.to_json() for group in picture_sets(batch.out_dir, items)]
    doc = {**batch.to_json(with_failures=False), "items": entries, "pictures": pictures}
    doc.pop("replayed", None)
    doc.pop("queue_age_seconds", None)
    write_json_atomically(OutputLayout(batch.out_dir), batch.manifest_path, doc)
    return batch.manifest_path


def write_text_atomically(path: Path, text: str) -> None:
    """Write a file outside OUT (a report, a metrics file) through a temp file beside it and an
    atomic rename, so a reader such as a metrics collector never sees half of it."""
    _write_and_rename(str(path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")), str(path), text)


def _write_and_rename(staging: str, target: str, text: str) -> None:
    """Write ``text`` durably to the new file ``staging``, then rename it over ``target``."""
    try:
        with open(staging, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(staging, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)


def shown_output(item: ItemView) -> str | None:
    """The file that shows a succeeded item's output now, or None if it is gone.

    The thumbnail, while it still holds the item's object's bytes (a later batch with other
    settings may have replaced it with another object's, or the user edited it); else the object.
    """
    if item.state != "succeeded" or not item.object_path:
        return None
    if item.friendly_path and thumbnail_problem(item.object_path, item.friendly_path) is None:
        return item.friendly_path
    return item.object_path if is_plain_file(item.object_path) else None


def write_page(layout: OutputLayout, path: str, text: str, *, create_folder: bool = False) -> None:
    """Write an HTML page (UTF-8) to ``path`` through a temp file and an atomic rename.

    Inside OUT the temp file is staged in OUT/.tmp like every other writer's;
    elsewhere :func:`write_text_atomically` stages it beside ``path``. The
    folder of ``path`` must exist unless ``create_folder``.
    """
    folder, name = os.path.split(os.path.abspath(path))
    if _within(layout.root, folder):  # checked before anything follows a symlink in OUT
        _write_page_inside(layout, folder, name, text, create_folder)
        return
    if create_folder:
        os.makedirs(folder, exist_ok=True)
    folder = os.path.realpath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "no such folder", folder)
    if _within(layout.root, folder):  # a folder outside OUT that is a link into it
        _write_page_inside(layout, folder, name, text, False)
        return
    write_text_atomically(Path(f"{folder}/{name}"), text)


def _write_page_inside(layout: OutputLayout, folder: str, name: str, text: str, create_folder: bool) -> None:
    if not checked_folder(layout, folder, create=create_folder):
        raise FileNotFoundError(errno.ENOENT, "no such folder", folder)
    with open_folder(layout.root, folder) as dest:
        _stage_in_out_tmp(layout, dest, name, text.encode("utf-8"), "html")


# -- inspection and removal (reconcile and gc) --------------------------------------------


@dataclass(frozen=True)
class StoredFile:
    """A regular file found under OUT: its path, size in bytes and modification time."""

    path: str
    size: int
    mtime: float

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def temp_files(layout: OutputLayout) -> list[StoredFile]:
    """The regular files in OUT/.tmp (none when it does not exist or is not a real folder)."""
    if not _listable(layout, layout.tmp_dir):
        return []
    return sorted(_regular_files(layout.tmp_dir), key=lambda f: f.path)


def object_files(layout: OutputLayout) -> Iterator[tuple[str, StoredFile]]:
    """(derivative key, file) of every object under OUT/objects/<k[:2]>/<k>.<ext>.

    Files whose name does not fit the layout are not objects and are never listed.
    """
    objects = f"{layout.root}/objects"
    if not _listable(layout, objects):
        return
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for shard in sorted(os.listdir(objects)):
            if not _listable(layout, f"{objects}/{shard}"):
                continue
            # a symlink named like an object is listed too (as itself), so gc can remove it
            for found in sorted(_regular_files(f"{objects}/{shard}", links=True), key=lambda f: f.path):
                key = found.name.split(".", 1)[0]
                if key[:2] == shard and re.fullmatch(r"[0-9a-f]{64}\.[a-z]+", found.name):
                    yield key, found


def _regular_files(folder: str, *, links: bool = False) -> Iterator[StoredFile]:
    """Regular files in ``folder`` (and, with ``links``, symlinks themselves, never followed)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) or (links and stat.S_ISLNK(info.st_mode)):
                    yield StoredFile(entry.path, info.st_size, info.st_mtime)


def thumbnail_problem(object_path: str, friendly_path: str) -> str | None:
    """``missing`` when the thumbnail is absent, ``wrong`` when it is no regular file (a symlink, a
    folder), ``modified`` when it no longer holds exactly the object's bytes (read up to the object's
    size), None when it does (a copy, a reflink, or a hard link of the earlier layout). An object
    that cannot be read is the object's problem, not the thumbnail's: None."""
    try:
        info = os.lstat(friendly_path)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "wrong"
    if not stat.S_ISREG(info.st_mode):
        return "wrong"
    try:
        with open_object(object_path) as (_, target):
            if _same_inode_as(info, target):
                return None
    except (OSError, ValueError):
        return None
    try:
        fd = os.open(friendly_path, _READ_FLAGS)
    except OSError:
        return "wrong"
    try:
        return None if _object_holds(object_path, fd, os.fstat(fd).st_size) else "modified"
    finally:
        os.close(fd)


def remove_stored_file(layout: OutputLayout, path: str) -> int:
    """Remove one file under OUT (never a folder, never outside OUT, never through a symlinked
    folder); returns the bytes it held when this was its last link, else 0. A file already
    gone counts 0."""
    if not _inside(layout.root, path):
        raise ValueError(f"{path} is not inside the output folder {layout.root}")
    folder, name = os.path.split(os.path.abspath(path))
    try:
        with open_folder(layout.root, folder) as parent:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not (stat.S_ISLNK(info.st_mode) or stat.S_ISREG(info.st_mode)):
                return 0
            os.unlink(name, dir_fd=parent)  # a symlink itself goes; its target, wherever it is, is untouched
    except FileNotFoundError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 else 0


def reclaimable(object_path: str, friendly_paths: list[str]) -> tuple[list[str], int]:
    """Which of ``friendly_paths`` are thumbctl's files of the object (they hold its very bytes: copies,
    or hard links of the earlier layout), and the bytes removing the object and those would free."""
    try:
        info = os.lstat(object_path)
    except FileNotFoundError:
        return [], 0
    if not stat.S_ISREG(info.st_mode):
        return [], 0
    copies = [f for f in friendly_paths if thumbnail_problem(object_path, f) is None]
    links = [f for f in copies if _same_file(f, object_path)]
    freed = sum(os.lstat(f).st_size for f in copies if f not in links and os.lstat(f).st_nlink == 1)
    if info.st_nlink == 1 + len(links):
        freed += info.st_size + _preview_bytes(object_path)
    return copies, freed


def _preview_bytes(object_path: str) -> int:
    """The bytes of the preview beside an object (gc removes it with the object), 0 when there is none."""
    try:
        info = os.lstat(OutputLayout.preview_path(object_path))
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 else 0


def remove_object_and_links(
    store: OutputLayout, object_path: str, friendly_paths: list[tuple[OutputLayout, str]]
) -> tuple[int, int]:
    """Remove an object (with its preview) from ``store`` and those of ``friendly_paths`` (each with
    its output folder) that are thumbctl's files of it (they hold its very bytes).

    Returns (thumbnails removed, bytes reclaimed): the bytes count only when no other link to them
    is left.
    """
    owned, _ = reclaimable(object_path, [path for _, path in friendly_paths])
    freed = 0
    for layout, friendly in friendly_paths:
        if friendly in owned:
            freed += remove_stored_file(layout, friendly)
            remove_empty_friendly_folders(layout, os.path.dirname(friendly))
    freed += remove_stored_file(store, object_path) + remove_stored_file(store, store.preview_path(object_path))
    remove_empty_shard(store, os.path.dirname(object_path))
    return len(owned), freed


def remove_empty_friendly_folders(layout: OutputLayout, folder: str) -> None:
    """Remove ``folder`` and its parents below OUT while they are empty (a friendly name's
    sub-folders, e.g. OUT/rooms, once gc took their last file). OUT itself and its
    objects/, batches/ and .tmp/ are never removed, nor anything through a symlink."""
    root = os.path.normpath(layout.root)
    current = os.path.normpath(folder)
    while os.path.dirname(current) != current and current.startswith(root + os.sep):
        if os.path.dirname(current) == root and os.path.basename(current) in _RESERVED_FOLDERS:
            return
        if not _remove_empty_folder(layout, current):
            return
        current = os.path.dirname(current)


def remove_empty_shard(layout: OutputLayout, shard: str) -> bool:
    """Remove an OUT/objects/<xx> folder once it holds nothing; returns whether it went.

    Only a real, empty shard folder directly under OUT/objects is ever removed.
    """
    if os.path.dirname(os.path.normpath(shard)) != os.path.normpath(f"{layout.root}/objects"):
        raise ValueError(f"{shard} is not a shard folder of {layout.root}/objects")
    return _remove_empty_folder(layout, shard)


def _remove_empty_folder(layout: OutputLayout, folder: str) -> bool:
    """Remove ``folder`` (below OUT's root) if it is an empty real folder; returns whether it went.
    A symlink at its name raises OutsideOutput and is left alone."""
    parent_path, name = os.path.split(os.path.normpath(folder))
    try:
        with open_folder(layout.root, parent_path) as parent:
            os.rmdir(name, dir_fd=parent)
    except OSError as exc:
        if isinstance(exc, OutsideOutput):
            raise
        if exc.errno == errno.ENOTDIR and os.path.islink(folder):
            raise OutsideOutput(folder, layout.root) from None
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
            return False
        raise
    return True


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _within(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or below it, by name alone."""
    root, path = os.path.abspath(root), os.path.abspath(path)
    return os.path.commonpath([root, path]) == root


def _inside(root: str, path: str) -> bool:
    root = os.path.abspath(root)
    return os.path.commonpath([root, os.path.abspath(path)]) == root and os.path.abspath(path) != root
