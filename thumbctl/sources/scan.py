"""Finding and opening sources: directory scans, safe path resolution and safe reads under a root.

A source outside the root is refused from its path alone (lexically, then after
resolving symlinks with ``lstat``/``readlink``), so it is never read. A source is
only ever opened by :func:`open_source`, which walks from the root with directory
descriptors and follows no symlink on the way, so a folder or file swapped for a
symlink after the path was checked cannot lead a read outside the root.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..core.errors import ItemFailure
from ..core.faults import Faults
from ..core.fixes import FIX_FILE
from ..core.scanrules import ScanRules
from .itemids import UnsafeItemId, check_item_id, unsafe_name_id


@dataclass(frozen=True)
class Candidate:
    """A file found by a scan: its id, its path, and whether that path is a symlink.

    Scans start from a resolved root and never follow directory symlinks, so
    the path of a candidate that is not itself a symlink is already real.
    A file whose relative path cannot be an item id (see :func:`check_item_id`)
    gets an escaped id (:func:`unsafe_name_id`) and ``unsafe`` says why.
    """

    item_id: str
    path: str
    is_link: bool
    unsafe: str | None = None


@dataclass(frozen=True)
class ScanError:
    """A folder (or an entry of one) the scan could not read: what is under it is unknown, not
    absent. ``code`` is ``source_missing`` for a folder that vanished during the scan, else
    ``io_error`` (permission denied, an I/O error); ``path`` is absolute."""

    path: str
    code: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "detail": self.detail}


def scan_error(path: str, exc: OSError) -> ScanError:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return ScanError(path, "source_missing", "it vanished during the scan")
    return ScanError(path, "io_error", exc.strerror or str(exc))


@dataclass
class ScanResult:
    candidates: list[Candidate] = field(default_factory=list)
    ignored: int = 0
    #: Sub-folders left out because ``skip`` said so (output folders), relative to the root.
    skipped: list[str] = field(default_factory=list)
    #: Folders and entries that could not be read: the scan is incomplete there.
    errors: list[ScanError] = field(default_factory=list)
    #: Sub-folders that are symlinks, relative to the root: never followed, so not scanned.
    symlinked: list[str] = field(default_factory=list)


def scan_directory(root: Path, rules: ScanRules, skip: Callable[[str], bool] = lambda path: False) -> ScanResult:
    """Candidates under ``root``, recursively, sorted by id.

    Hidden entries are skipped, directory symlinks are not followed (named in
    ``symlinked``), and every sub-folder for which ``skip(path)`` is true (an
    output folder inside the root) is left out and named in ``skipped``.
    Non-candidate files are counted in ``ignored``; a folder that cannot be
    listed (permission, an I/O error, vanished meanwhile) is in ``errors``.
    The ``scan_folder`` checkpoint is hit before each sub-folder is listed.
    """
    result = ScanResult()
    faults = Faults()
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        if prefix:
            faults.hit("scan_folder")
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            result.errors.append(scan_error(str(folder), exc))
            continue
        for entry in entries:
            _visit(entry, prefix, rules, skip, pending, result)
    result.candidates.sort(key=lambda c: c.item_id)
    result.skipped.sort()
    result.symlinked.sort()
    result.errors.sort(key=lambda e: e.path)
    return result


def _visit(
    entry: os.DirEntry[str],
    prefix: str,
    rules: ScanRules,
    skip: Callable[[str], bool],
    pending: list[tuple[Path, str]],
    result: ScanResult,
) -> None:
    if entry.name.startswith("."):
        return
    rel = f"{prefix}{entry.name}"
    try:
        is_dir = entry.is_dir(follow_symlinks=False)
        is_link = entry.is_symlink()
        plausible = is_link or entry.is_file(follow_symlinks=False)
    except OSError as exc:
        result.errors.append(scan_error(entry.path, exc))
        return
    if is_dir:
        if skip(entry.path):
            result.skipped.append(rel)
        else:
            pending.append((Path(entry.path), rel + "/"))
        return
    if is_link and _links_to_folder(entry):
        result.symlinked.append(rel)
        return
    if rel == FIX_FILE:  # the root's fix file is thumbctl's own, read by every submit: never a photo
        return
    if plausible and rules.is_candidate(rel, entry.name):
        result.candidates.append(_candidate(rel, entry.path, is_link))
    else:
        result.ignored += 1


def _links_to_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a loop, or a target nobody may look at: a file symlink as before
        return False


def _candidate(rel: str, path: str, is_link: bool) -> Candidate:
    try:
        return Candidate(check_item_id(rel), path, is_link)
    except UnsafeItemId as exc:
        return Candidate(unsafe_name_id(rel), path, is_link, unsafe=exc.reason)


def is_within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute, normalised)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class SourceRoot:
    """The folder every source must stay inside, in its lexical and its real form."""

    def __init__(self, root: Path) -> None:
        self.abs = os.path.abspath(root)
        self.real = os.path.realpath(root)

    def resolve(self, given: str | Path) -> Path:
        """The real path of a source named relative to the root, or an ItemFailure.

        ``path_outside_root`` when it escapes the root lexically or through a
        symlink; ``source_missing`` when it (or a symlink's target) does not
        exist; ``io_error`` for a symlink loop or an unreadable folder;
        ``unsupported_format`` when it is not a regular file.
        """
        lexical = os.path.normpath(os.path.join(self.abs, os.fspath(given)))
        if not (is_within(lexical, self.abs) or is_within(lexical, self.real)):
            raise ItemFailure("path_outside_root", f"{given} is outside {self.abs}")
        try:
            real = os.path.realpath(lexical, strict=True)
        except FileNotFoundError as exc:
            raise ItemFailure("source_missing", f"{given} does not exist") from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ItemFailure("io_error", f"{given} is a symlink loop") from exc
            raise ItemFailure("io_error", f"{given}: {exc.strerror}") from exc
        if not is_within(real, self.real):
            raise ItemFailure("path_outside_root", f"{given} resolves outside {self.abs}")
        if not os.path.isfile(real):
            raise ItemFailure("unsupported_format", f"{given} is not a regular file")
        return Path(real)


def resolve_source(root: Path, given: str | Path) -> Path:
    """:meth:`SourceRoot.resolve` for a one-off call."""
    return SourceRoot(root).resolve(given)


# -- opening sources -------------------------------------------------------------

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: opening a FIFO for reading must not wait for a writer (it is refused right after).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: What ``open`` with O_NOFOLLOW says about a symlink: ELOOP (a file), ENOTDIR (with O_DIRECTORY), EMLINK (BSD).
_MAYBE_SYMLINK = {errno.ELOOP, errno.ENOTDIR, errno.EMLINK}
_READ_CHUNK = 1 << 20


def open_source(root: str, path: str) -> BinaryIO:
    """Open the source ``path`` for reading, below the batch's source folder ``root``,
    without following a symlink on any component, and only if it is a regular file.

    Both paths are the real paths recorded at submit (``root`` resolved, ``path`` the
    resolved target of any file symlink), so neither held a symlink when it was checked.
    The rule for the root follows from that: it is opened by walking from ``/`` one
    folder at a time with ``O_NOFOLLOW``, exactly the way it was checked, then every
    folder below it and the file itself the same way (``dir_fd``). A component that is
    now a symlink, inside or above the root, fails ``path_outside_root`` (permanent) and
    nothing is read through it; a photo library moved away and linked back from its old
    place must be submitted again from where it now is. A source that is
    not a regular file (a FIFO, a device, a folder) fails ``unsupported_format``
    (permanent) as soon as it is opened; FIFOs are opened non-blocking, so no read waits.
    ``source_missing`` when a component is gone, ``io_error`` for any other OS error.
    """
    with SourceFolder(root) as folder:
        return folder.open(path)


class SourceFolder:
    """A batch's source folder opened once (see :func:`open_source` for the rule), to open
    many sources below it; a submit reads every source through one of these.

    The folder is opened on first use; if that fails, the source fails and the next one tries again.
    Sources may be opened from several threads at once.
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.normpath(root)
        self._fd: int | None = None
        self._opening = threading.Lock()

    def __enter__(self) -> SourceFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def open(self, path: str) -> BinaryIO:
        """The regular file ``path`` below the folder, reached without following a symlink."""
        parts = _parts_below(self.root, path)
        with self._opening:
            if self._fd is None:
                root_parts = [name for name in self.root.split(os.sep) if name]
                self._fd = _descend(os.open("/", _FOLDER_FLAGS), root_parts, path)
            folder = _descend(os.dup(self._fd), parts[:-1], path)
        try:
            fd = _open_at(folder, parts[-1], path, _FILE_FLAGS)
        finally:
            os.close(folder)
        try:
            _require_regular_file(os.fstat(fd), path)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb")


def read_source(root: str, path: str, max_bytes: int) -> bytes:
    """The bytes of a source opened with :func:`open_source`; ``too_large`` past ``max_bytes``.

    At most ``max_bytes + 1`` bytes are read, so a file that grows while it is read
    costs no more memory than the limit allows.
    """
    with open_source(root, path) as stream:
        check_size(os.fstat(stream.fileno()).st_size, max_bytes, path)
        data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ItemFailure("too_large", f"{path} grew over the limit of {max_bytes / 1e6:g} MB")
    return data


def digest_bounded(stream: BinaryIO, max_bytes: int, path: str) -> str:
    """sha256 (hex) of the rest of ``stream``, read in chunks; ``too_large`` past ``max_bytes``."""
    digest = hashlib.sha256()
    total = 0
    while chunk := stream.read(min(_READ_CHUNK, max_bytes + 1 - total)):
        total += len(chunk)
        if total > max_bytes:
            raise ItemFailure("too_large", f"{path} grew over the limit of {max_bytes / 1e6:g} MB")
        digest.update(chunk)
    return digest.hexdigest()


def check_size(size: int, max_bytes: int, path: str) -> None:
    if size > max_bytes:
        raise ItemFailure("too_large", f"{path}: {size / 1e6:.1f} MB is over the limit of {max_bytes / 1e6:g} MB")


def _parts_below(root: str, path: str) -> list[str]:
    """The components of ``path`` below ``root``; ``path_outside_root`` unless it is strictly below."""
    root, path = os.path.normpath(root), os.path.normpath(path)
    if not os.path.isabs(root) or path == root or not is_within(path, root):
        raise ItemFailure("path_outside_root", f"{path} is outside {root}")
    return os.path.relpath(path, root).split(os.sep)


def _descend(folder: int, names: list[str], path: str) -> int:
    """The folder reached from the descriptor ``folder`` through ``names``, following no
    symlink; ``folder`` is consumed (closed, or returned when ``names`` is empty)."""
    try:
        for name in names:
            inner = _open_at(folder, name, path, _FOLDER_FLAGS)
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder


def _open_at(folder: int, name: str, path: str, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        raise _open_failure(folder, name, path, exc) from exc


def _open_failure(folder: int, name: str, path: str, exc: OSError) -> ItemFailure:
    if exc.errno == errno.ENOENT:
        return ItemFailure("source_missing", f"{path} is gone ({name} does not exist)")
    if exc.errno in _MAYBE_SYMLINK:
        try:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):
            return ItemFailure("path_outside_root", f"{path}: {name} is now a symlink; nothing is read through it")
        if exc.errno == errno.ENOTDIR:
            return ItemFailure("source_missing", f"{path} is gone ({name} is no longer a folder)")
    return ItemFailure("io_error", f"cannot read {path}: {exc.strerror}")


def _require_regular_file(st: os.stat_result, path: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"))
        kind = next((name for test, name in kinds if test(st.st_mode)), "a device")
        raise ItemFailure("unsupported_format", f"{path} is not a regular file ({kind}); it is not read")
