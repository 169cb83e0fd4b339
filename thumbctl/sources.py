"""Finding sources: directory scans and safe path resolution under a root.

Nothing here opens a file. A source outside the root is refused from its
path alone (lexically, then after resolving symlinks with ``lstat``/``readlink``),
so it is never read.
"""

from __future__ import annotations

import errno
import fnmatch
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ItemFailure
from .names import unsafe_name_id
from .store import UnsafeItemId, check_item_id

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".gif", ".tif", ".tiff", ".bmp", ".avif", ".heic", ".heif"}
)


@dataclass(frozen=True)
class ScanRules:
    """Which files of a directory are candidates. Content decides the rest.

    A file is a candidate when its name ends in a common image extension or
    matches an ``include`` glob, and matches no ``exclude`` glob. Globs are
    matched against the path relative to the root and against the file name.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def is_candidate(self, rel_path: str, name: str) -> bool:
        if any(_glob_match(g, rel_path, name) for g in self.exclude):
            return False
        if os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
            return True
        return any(_glob_match(g, rel_path, name) for g in self.include)


def _glob_match(pattern: str, rel_path: str, name: str) -> bool:
    return fnmatch.fnmatchcase(rel_path, pattern) or fnmatch.fnmatchcase(name, pattern)


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


@dataclass
class ScanResult:
    candidates: list[Candidate] = field(default_factory=list)
    ignored: int = 0
    #: Sub-folders left out because ``skip`` said so (output folders), relative to the root.
    skipped: list[str] = field(default_factory=list)


def scan_directory(root: Path, rules: ScanRules, skip: Callable[[str], bool] = lambda path: False) -> ScanResult:
    """Candidates under ``root``, recursively, sorted by id.

    Hidden entries are skipped, directory symlinks are not followed, and every
    sub-folder for which ``skip(path)`` is true (an output folder inside the
    root) is left out and named in ``skipped``. Non-candidate files are counted
    in ``ignored``.
    """
    result = ScanResult()
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            result.ignored += 1
            continue
        for entry in entries:
            _visit(entry, prefix, rules, skip, pending, result)
    result.candidates.sort(key=lambda c: c.item_id)
    result.skipped.sort()
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
    except OSError:
        is_dir = False
    if is_dir:
        if skip(entry.path):
            result.skipped.append(rel)
        else:
            pending.append((Path(entry.path), rel + "/"))
        return
    try:
        is_link = entry.is_symlink()
        plausible = is_link or entry.is_file(follow_symlinks=False)
    except OSError:
        is_link = plausible = False
    if plausible and rules.is_candidate(rel, entry.name):
        result.candidates.append(_candidate(rel, entry.path, is_link))
    else:
        result.ignored += 1


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
