"""Descriptor-safe file primitives: the one way thumbctl touches files in a store or an output folder.

A folder is reached from ``/`` one folder at a time, each opened relative to the one above
without following a symlink (:func:`open_folder`), and every file is created, linked, renamed,
read or removed relative to the last one (``dir_fd``/``src_dir_fd``/``dst_dir_fd``). So no name,
swapped-in link or folder swapped for a symlink between a check and the act can make a write land
outside its root. A symlink at a final name is only ever replaced by a rename, never written
through. Files are read only when they are regular files, never further than a bound. A write
that fails (``ENOSPC``) removes its temp file. Nothing here knows a layout: callers name the root,
its temp folder and the folder they act in.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..core.proc import host_id, start_ticks

T = TypeVar("T")

FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: a FIFO swapped in at a file's name cannot block the open.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class OutsideOutput(OSError):
    """A write, link, rename or delete would go through a symlink, which could lead out of its
    root folder; an OSError, so callers that report filesystem refusals report it."""

    def __init__(self, path: str, root: str) -> None:
        super().__init__(
            f"{path} is a symlink, which could lead out of the output folder {root}; "
            "nothing is written or removed through it"
        )
        self.path = path


# -- folders: opened from the root down, never through a symlink ---------------------------------


@contextlib.contextmanager
def open_folder(root: str, folder: str, *, create: bool = False) -> Iterator[int]:
    """An open descriptor of ``folder`` (``root`` or a folder below it), closed on exit.

    ``root`` was resolved when it was chosen, so no folder on its path was a symlink then: it is
    reached the way it was checked, from ``/`` one folder at a time, and so is each folder below
    it, each opened relative to its parent's descriptor with ``O_NOFOLLOW``; with ``create`` the
    missing ones are made. Raises :class:`OutsideOutput` at the first symlink,
    :class:`NotADirectoryError` at another kind of file and :class:`FileNotFoundError` at a
    missing folder (without ``create``).
    """
    root = os.path.normpath(os.path.abspath(root))
    fd = os.open("/", FOLDER_FLAGS)
    try:
        current = ""
        for part in [*filter(None, root.split("/")), *parts_below(root, folder)]:
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
    """Open one folder without following a symlink at its name; a symlink raises OutsideOutput.

    ``ENOTDIR`` says what the name was at the open; a name that is a folder when looked at again
    was swapped under us (a symlink put there and taken away), so it is opened again, and a name
    that keeps changing is treated as the symlink it was."""
    for _ in range(3):
        try:
            return os.open(name, FOLDER_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, parent)):
                raise OutsideOutput(path, root) from None
            if exc.errno != errno.ENOTDIR:
                raise
            if not _is_folder(name, parent):
                raise NotADirectoryError(errno.ENOTDIR, f"{path} is not a folder", path) from None
    raise OutsideOutput(path, root)


def _is_folder(name: str, parent: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _is_link(name: str, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def parts_below(root: str, folder: str) -> list[str]:
    """The names of the folders from ``root`` (excluded) down to ``folder``."""
    folder = os.path.normpath(folder)
    if folder == root:
        return []
    prefix = root if root.endswith("/") else f"{root}/"
    if not folder.startswith(prefix):
        raise ValueError(f"{folder} is not inside the output folder {root}")
    return folder[len(prefix) :].split("/")


def checked_folder(root: str, folder: str, *, create: bool) -> bool:
    """Prove that ``root`` and every folder below it down to ``folder`` is a real directory (see
    :func:`open_folder`); with ``create`` the missing ones are made. Returns whether ``folder``
    exists (always True with ``create``)."""
    try:
        with open_folder(root, folder, create=create):
            return True
    except FileNotFoundError:
        return False


def symlinked_folder(root: str, folder: str) -> str | None:
    """The first symlink between ``root`` and ``folder`` (inclusive), or None; creates nothing."""
    try:
        checked_folder(root, folder, create=False)
    except OutsideOutput as exc:
        return exc.path
    except NotADirectoryError:
        return None
    return None


def listable(root: str, folder: str) -> bool:
    """Whether ``folder`` exists as a real folder under ``root`` (listing never follows a symlink out)."""
    try:
        return checked_folder(root, folder, create=False)
    except (OutsideOutput, NotADirectoryError):
        return False


def within(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or below it, by name alone."""
    root, path = os.path.abspath(root), os.path.abspath(path)
    return os.path.commonpath([root, path]) == root


def inside(root: str, path: str) -> bool:
    """Whether ``path`` lies below ``root`` (not ``root`` itself), by name alone."""
    return within(root, path) and os.path.abspath(path) != os.path.abspath(root)


# -- files in an open folder -----------------------------------------------------------------


def write_new(folder: int, name: str, data: bytes, *, durable: bool = True) -> None:
    """Create ``name`` in ``folder`` holding ``data``, durably (fsynced) unless ``durable`` is False;
    on any failure (a full disk, an I/O error) the partial file is removed again, so no temp file
    is left behind."""
    fd = os.open(name, NEW_FILE_FLAGS, 0o644, dir_fd=folder)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        unlink_quietly(folder, name)
        raise


def stage_and_rename(tmp: int, folder: int, name: str, data: bytes, extension: str) -> None:
    """Write ``data`` to a new temp file in ``tmp``, then rename it over ``name`` in ``folder``."""
    staging = temp_basename(extension)
    write_new(tmp, staging, data)
    try:
        os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=folder)
    finally:
        unlink_quietly(tmp, staging)


def unlink_quietly(folder: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


def open_regular_file(folder: int, name: str) -> int | None:
    """A read descriptor of ``name`` if it is a regular file (not a symlink, FIFO, folder …), else None;
    FileNotFoundError when it is missing."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=folder)
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
    fd = open_regular_file(folder, name)
    if fd is None:
        return None
    try:
        data = os.pread(fd, limit + 1, 0)
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def same_bytes(a: int, b: int) -> bool:
    """Whether two open files hold the same bytes (size first, then block by block with
    ``pread``, which leaves both files' offsets where they were)."""
    size = os.fstat(a).st_size
    if os.fstat(b).st_size != size:
        return False
    block = 1 << 20
    return all(os.pread(a, block, at) == os.pread(b, block, at) for at in range(0, size, block))


def file_digest(fd: int, size: int) -> str:
    """The sha256 of the first ``size`` bytes of the open file ``fd`` (read with ``pread``)."""
    digest = hashlib.sha256()
    block = 1 << 20
    for at in range(0, size, block):
        digest.update(os.pread(fd, min(block, size - at), at))
    return digest.hexdigest()


def same_inode(info: os.stat_result, other: os.stat_result) -> bool:
    return (info.st_dev, info.st_ino) == (other.st_dev, other.st_ino)


def is_plain_file(path: str) -> bool:
    """Whether ``path`` is a regular file itself, not a symlink to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


# -- temp files: named after their writer ---------------------------------------------------


def temp_basename(extension: str) -> str:
    """A fresh temp file name, naming its writer (see :func:`temp_writer`).

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
#: thumbctl's own temp file names: today's (see :func:`temp_basename`) and the older
#: ``<pid>-<12 hex>.<ext>``. Anything else in a temp folder is not thumbctl's and is never touched.
TEMP_NAME_PATTERN = re.compile(r"^\d+-(?:(?:\d+|x)-[0-9a-f]{8}-)?[0-9a-f]{12}\.[a-z0-9]+(?:\.[a-z0-9]+)?$")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is one thumbctl gives its temp files (:data:`TEMP_NAME_PATTERN`)."""
    return TEMP_NAME_PATTERN.match(name) is not None


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


def temp_prefix_of(owner: str) -> str:
    """The start of the temp file names the lease owner ``owner`` (``host-id:pid:ticks``) writes."""
    host, pid, ticks = owner.rsplit(":", 2)
    return f"{pid}-{ticks.replace('?', 'x')}-{host_tag(host)}-"


def write_temp(root: str, tmp_dir: str, data: bytes, extension: str, *, durable: bool = True) -> str:
    """Write ``data`` to a new temp file in ``tmp_dir`` (below ``root``), fsynced unless ``durable``
    is False, and return its path. A write or fsync that fails (``ENOSPC``) removes the temp file
    before raising."""
    name = temp_basename(extension)
    with open_folder(root, tmp_dir, create=True) as tmp:
        write_new(tmp, name, data, durable=durable)
    return f"{tmp_dir}/{name}"


def discard(path: str | None, *, strict: bool = False) -> None:
    """Remove a temp file (``<root>/.tmp/<name>``) if it is there.

    Best effort unless ``strict``: a temp file that cannot be reached (its folder swapped for
    a symlink) stays, and ``reconcile`` removes it later."""
    if not path:
        return
    tmp_dir, name = os.path.split(path)
    if os.path.basename(tmp_dir) != ".tmp":
        raise ValueError(f"{path} is not a temp file of an output folder")
    try:
        with open_folder(os.path.dirname(tmp_dir), tmp_dir) as tmp:
            unlink_quietly(tmp, name)
    except FileNotFoundError:
        return
    except OSError:
        if strict:
            raise


@contextlib.contextmanager
def fresh_tmp(root: str, tmp_dir: str) -> Iterator[int]:
    """``tmp_dir``, made if missing. It is removed when a run ends and it is empty, so another process
    may remove it between its opening and a file made in it: a folder found removed is made again."""
    for _ in range(3):
        with open_folder(root, tmp_dir, create=True) as tmp:
            if os.fstat(tmp).st_nlink > 0:
                yield tmp
                return
    raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", tmp_dir)


def remove_empty_tmp(root: str, tmp_dir: str) -> bool:
    """Remove ``tmp_dir`` (a folder directly below ``root``) once it is empty; returns whether it went."""
    try:
        with open_folder(root, root) as opened:
            os.rmdir(os.path.basename(tmp_dir), dir_fd=opened)
    except OSError:
        return False
    return True


def stage_in_tmp(root: str, tmp_dir: str, dest: int, name: str, data: bytes, extension: str) -> None:
    """Write ``data`` at ``name`` in ``dest`` through a temp file in ``tmp_dir``, then remove ``tmp_dir``
    if nothing else is being written there (a folder another writer removed meanwhile is made again)."""
    for _ in range(3):
        with fresh_tmp(root, tmp_dir) as tmp:
            try:
                stage_and_rename(tmp, dest, name, data, extension)
            except FileNotFoundError:
                if os.fstat(tmp).st_nlink > 0:
                    raise
                continue
        remove_empty_tmp(root, tmp_dir)
        return
    raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", tmp_dir)


def write_new_name(root: str, tmp_dir: str, folder: str, name: str, data: bytes) -> None:
    """Create ``name`` in ``folder`` (under ``root``) holding ``data``, written whole and fsynced in
    ``tmp_dir`` first and then linked in: FileExistsError when a file is there (it is never replaced),
    so of two writers one wins and the other reads what the winner wrote."""
    with open_folder(root, tmp_dir, create=True) as tmp, open_folder(root, folder) as dest:
        staging = temp_basename("new")
        write_new(tmp, staging, data)
        try:
            os.link(staging, name, src_dir_fd=tmp, dst_dir_fd=dest, follow_symlinks=False)
        finally:
            unlink_quietly(tmp, staging)


@dataclass
class HeldTemp:
    """A temp file written whole and fsynced, reached through its folder (held open) until it is
    placed at its name or dropped."""

    folder: int
    name: str

    def drop(self) -> None:
        """Remove the temp file if it is still there and let its folder go (again: nothing)."""
        if self.folder < 0:
            return
        try:
            unlink_quietly(self.folder, self.name)
        finally:
            os.close(self.folder)
            self.folder = -1

    @property
    def held(self) -> bool:
        return self.folder >= 0


def copy_to_temp(root: str, tmp_dir: str, src: int, size: int) -> HeldTemp:
    """Copy the open file ``src`` (``size`` bytes: a reflink where the filesystem can) into a new temp
    file in ``tmp_dir``, fsynced; a copy that fails leaves no temp file."""
    for _ in range(3):
        with fresh_tmp(root, tmp_dir) as tmp:
            staging = temp_basename("copy")
            try:
                fd = os.open(staging, NEW_FILE_FLAGS, 0o644, dir_fd=tmp)
            except FileNotFoundError:  # the temp folder was removed meanwhile: made again
                continue
            try:
                try:
                    clone_file(src, fd, size)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except BaseException:
                unlink_quietly(tmp, staging)
                raise
            return HeldTemp(os.dup(tmp), staging)
    raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", tmp_dir)


def staged_copy(root: str, tmp_dir: str, src: int, size: int, place: Callable[[int, str], T]) -> T:
    """Copy the open file ``src`` into a new temp file in ``tmp_dir``, fsync it, and ``place(tmp, staging)``
    it at its name; the temp file is gone afterwards. Returns what ``place`` returned."""
    copied = copy_to_temp(root, tmp_dir, src, size)
    try:
        return place(copied.folder, copied.name)
    finally:
        copied.drop()


def write_text_atomically(path: Path, text: str) -> None:
    """Write a file outside any store or OUT (a report, a metrics file) through a temp file beside it
    and an atomic rename, so a reader such as a metrics collector never sees half of it."""
    staging = str(path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"))
    try:
        with open(staging, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(staging, str(path))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)


# -- copies: a reflink where the filesystem can, else a copy --------------------------------------

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


# -- listing and removal ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredFile:
    """A regular file found in a folder: its path, size in bytes and modification time."""

    path: str
    size: int
    mtime: float

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def regular_files(folder: str, *, links: bool = False) -> Iterator[StoredFile]:
    """Regular files in ``folder`` (and, with ``links``, symlinks themselves, never followed)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) or (links and stat.S_ISLNK(info.st_mode)):
                    yield StoredFile(entry.path, info.st_size, info.st_mtime)


def temp_files(root: str, tmp_dir: str) -> list[StoredFile]:
    """thumbctl's temp files in ``tmp_dir``: the regular files named by :func:`temp_basename`'s
    pattern (none when it does not exist or is not a real folder). Another file there (a user's)
    is not listed, so nothing that cleans up temp files ever touches it."""
    if not listable(root, tmp_dir):
        return []
    return sorted((f for f in regular_files(tmp_dir) if is_temp_name(f.name)), key=lambda f: f.path)


def remove_file(root: str, path: str) -> int:
    """Remove one file below ``root`` (never a folder, never outside, never through a symlinked
    folder); returns the bytes it held when this was its last link, else 0. A file already gone
    counts 0."""
    if not inside(root, path):
        raise ValueError(f"{path} is not inside the output folder {root}")
    folder, name = os.path.split(os.path.abspath(path))
    try:
        with open_folder(root, folder) as parent:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not (stat.S_ISLNK(info.st_mode) or stat.S_ISREG(info.st_mode)):
                return 0
            os.unlink(name, dir_fd=parent)  # a symlink itself goes; its target, wherever it is, is untouched
    except FileNotFoundError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 else 0


def remove_empty_folder(root: str, folder: str) -> bool:
    """Remove ``folder`` (below ``root``) if it is an empty real folder; returns whether it went.
    A symlink at its name raises OutsideOutput and is left alone."""
    parent_path, name = os.path.split(os.path.normpath(folder))
    try:
        with open_folder(root, parent_path) as parent:
            os.rmdir(name, dir_fd=parent)
    except OSError as exc:
        if isinstance(exc, OutsideOutput):
            raise
        if exc.errno == errno.ENOTDIR and os.path.islink(folder):
            raise OutsideOutput(folder, root) from None
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
            return False
        raise
    return True
