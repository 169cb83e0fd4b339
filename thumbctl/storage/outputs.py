"""The output target: the names a seller publishes, and each batch's documents.

:class:`OutputTarget` is the interface every caller uses; :class:`LocalOutputTarget` is the local
output folder (OUT) behind it. Layout of OUT (nothing else is ever written there)::

    OUT/<name from the template>         thumbnails: each its own file (a reflink or a copy of its object)
    OUT/batches/<batch_id>.json          per-batch manifest
    OUT/batches/<batch_id>.html          contact sheet (``thumbctl sheet``, default place)
    OUT/.tmp/                            temp files of writers, only while files are being written

Publishing returns an opaque version, which the ledger records with the name (locally the content
digest and the inode: ``<sha256>:<inode>``). A name is thumbctl's ("ours") while it still holds a
version the ledger recorded there; a name recorded before versions existed is ours while it holds
exactly the bytes of the object published there. Replacing and removing are conditional on the
version: a user's file is never overwritten or removed through them. The name rules of a publish
in full (created, unchanged, relinked, replaced, overwritten) are in :mod:`.naming`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from ..core.errors import ItemFailure
from . import fsafe
from .layout import OutLayout
from .objects import object_holds


class NameState(StrEnum):
    """Whose a name is: nobody's (``free``), thumbctl's (``ours``) or someone else's (``taken``)."""

    FREE = "free"
    OURS = "ours"
    TAKEN = "taken"


@dataclass(frozen=True)
class Recorded:
    """One publish the ledger recorded at a name: the version publishing returned (None for a
    publish recorded before versions existed) and the object published (judged by its bytes
    when no version was recorded)."""

    version: str | None
    object_path: str | None = None


def put_back(version: str | None, recorded: Sequence[Recorded]) -> bool:
    """Whether a name holding the very bytes thumbctl publishes there is still someone else's file:
    the ledger recorded a version at the name and this is not it (the user, or a sync tool, put a
    copy back). Such a file is never adopted by a publish that cannot have left it there itself."""
    versions = {r.version for r in recorded if r.version}
    return bool(versions) and version not in versions


def put_back_taken(shown: str) -> ItemFailure:
    """The failure of publishing at a name a copy was put back at (see :func:`put_back`)."""
    return ItemFailure(
        "name_taken",
        f"{shown} holds the same bytes, but is not the file thumbctl published there (a copy put back); "
        "it is left as it is and stays yours (--overwrite replaces it)",
    )


class StaleVersion(FileExistsError):
    """The name no longer holds the version a replace or remove was conditional on."""


class OutputTarget(Protocol):
    """Names (relative, ``/``-separated) in one output target, and the batch documents beside them.

    No operation ever writes through or removes a file that is not thumbctl's: publishing is
    create-if-absent, and replacing or removing is conditional on the version thumbctl recorded.
    """

    def name_state(self, name: str, recorded: Sequence[Recorded]) -> NameState:
        """Whether ``name`` is free, ours (it holds one of the ``recorded`` publishes) or taken."""
        ...

    def version_of(self, name: str) -> str | None:
        """The version of what is at ``name`` now, None when nothing (or no regular file) is."""
        ...

    def publish(self, name: str, data: bytes) -> str:
        """Create ``name`` holding ``data`` if it is free, atomically; returns its version.
        FileExistsError when anything is at the name (it is left as it is)."""
        ...

    def replace(self, name: str, data: bytes, *, version: str) -> str:
        """Replace ``name`` with ``data`` atomically while it holds ``version``; returns the new
        version. StaleVersion when it holds anything else (left as it is), FileNotFoundError when
        it is gone."""
        ...

    def remove(self, name: str, *, version: str) -> bool:
        """Remove ``name`` while it holds ``version``; False (and nothing removed) otherwise."""
        ...

    def read(self, name: str, limit: int) -> bytes | None:
        """The bytes at ``name`` when it is a regular file of at most ``limit`` bytes, else None."""
        ...

    def names(self, prefix: str = "") -> Iterator[str]:
        """The published-looking names starting with ``prefix`` (never documents or temp files), sorted."""
        ...

    def write_document(self, name: str, data: bytes) -> None:
        """Write a batch document (``batches/<id>.json``, ``batches/<id>.html``) atomically: a
        reader sees the old document or the new one, never part of one."""
        ...

    def read_document(self, name: str, limit: int) -> bytes | None:
        """A batch document's bytes (see :meth:`read`)."""
        ...

    def document_size(self, name: str) -> int | None:
        """The size of a batch document as a reader sees it, None when there is none."""
        ...

    def remove_document(self, name: str) -> int:
        """Remove a batch document (gc, for an expired batch); returns the bytes freed (0 when it
        was already gone). Raises OSError when it cannot be reached safely."""
        ...

    @property
    def root(self) -> str:
        """The output location (a folder's absolute path, or ``s3://bucket/prefix``)."""
        ...

    def temp_files(self) -> list[fsafe.StoredFile]:
        """thumbctl's temp files of writers here (OUT/.tmp); none in a bucket, where a write appears
        whole or not at all."""
        ...

    def remove_temp(self, path: str) -> int:
        """Remove one of :meth:`temp_files`; returns the bytes freed."""
        ...

    def remove_empty_tmp(self) -> bool:
        """Remove the temp folder once it is empty (it exists only while files are being written)."""
        ...


#: Folders of OUT that are never a thumbnail's: ``objects/`` is the store of the earlier layout.
RESERVED_FOLDERS = ("objects", "batches", ".tmp")


@dataclass(frozen=True)
class LocalOutputTarget(OutLayout):
    """The local output folder: :class:`OutputTarget`, and OUT's layout (paths are absolute strings)."""

    root: str

    @property
    def tmp_dir(self) -> str:
        return f"{self.root}/.tmp"

    def path_of(self, name: str) -> str:
        return f"{self.root}/{name}"

    def name_of(self, path: str) -> str:
        """The name of a path inside OUT; ValueError for one outside."""
        if not fsafe.inside(self.root, path):
            raise ValueError(f"{path} is not inside the output folder {self.root}")
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.root))

    # -- the interface -------------------------------------------------------------------------

    def name_state(self, name: str, recorded: Sequence[Recorded]) -> NameState:
        folder, base = os.path.split(self.path_of(name))
        try:
            with fsafe.open_folder(self.root, folder) as dest:
                info = os.stat(base, dir_fd=dest, follow_symlinks=False)
                return NameState.OURS if is_ours(dest, base, info, recorded) else NameState.TAKEN
        except FileNotFoundError:
            return NameState.FREE
        except (fsafe.OutsideOutput, NotADirectoryError):
            return NameState.TAKEN

    def version_of(self, name: str) -> str | None:
        folder, base = os.path.split(self.path_of(name))
        try:
            with fsafe.open_folder(self.root, folder) as dest:
                return version_at(dest, base)
        except (FileNotFoundError, NotADirectoryError, fsafe.OutsideOutput):
            return None

    def publish(self, name: str, data: bytes) -> str:
        folder, base = os.path.split(self.path_of(name))
        with fsafe.open_folder(self.root, folder, create=True) as dest:
            return self._staged(data, lambda tmp, staging: _link_new(tmp, staging, dest, base))

    def replace(self, name: str, data: bytes, *, version: str) -> str:
        folder, base = os.path.split(self.path_of(name))
        with fsafe.open_folder(self.root, folder) as dest:

            def place(tmp: int, staging: str) -> None:
                os.stat(base, dir_fd=dest, follow_symlinks=False)  # FileNotFoundError when the name is gone
                if version_at(dest, base) != version:
                    raise StaleVersion(errno.EEXIST, "the name no longer holds the recorded version", name)
                os.replace(staging, base, src_dir_fd=tmp, dst_dir_fd=dest)

            return self._staged(data, place)

    def remove(self, name: str, *, version: str) -> bool:
        folder, base = os.path.split(self.path_of(name))
        try:
            with fsafe.open_folder(self.root, folder) as dest:
                if version_at(dest, base) != version:
                    return False
                os.unlink(base, dir_fd=dest)
        except (FileNotFoundError, NotADirectoryError, fsafe.OutsideOutput):
            return False
        remove_empty_friendly_folders(self, folder)
        return True

    def read(self, name: str, limit: int) -> bytes | None:
        folder, base = os.path.split(self.path_of(name))
        try:
            with fsafe.open_folder(self.root, folder) as dest:
                return fsafe.read_small_file(dest, base, limit)
        except (FileNotFoundError, NotADirectoryError, fsafe.OutsideOutput):
            return None

    def names(self, prefix: str = "") -> Iterator[str]:
        found = []
        for folder, dirs, files in os.walk(self.root):
            if folder == self.root:
                dirs[:] = [d for d in dirs if d not in RESERVED_FOLDERS]
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
            for file in files:
                name = os.path.relpath(os.path.join(folder, file), self.root)
                if name.startswith(prefix) and fsafe.is_plain_file(os.path.join(folder, file)):
                    found.append(name)
        yield from sorted(found)

    def write_document(self, name: str, data: bytes) -> None:
        folder, base = os.path.split(self.path_of(name))
        with fsafe.open_folder(self.root, folder, create=True) as dest:
            fsafe.stage_in_tmp(self.root, self.tmp_dir, dest, base, data, base.rsplit(".", 1)[-1])

    def read_document(self, name: str, limit: int) -> bytes | None:
        return self.read(name, limit)

    def document_size(self, name: str) -> int | None:
        path = self.path_of(name)
        return os.path.getsize(path) if os.path.isfile(path) else None

    def remove_document(self, name: str) -> int:
        return fsafe.remove_file(self.root, self.path_of(name))

    def temp_files(self) -> list[fsafe.StoredFile]:
        return fsafe.temp_files(self.root, self.tmp_dir)

    def remove_temp(self, path: str) -> int:
        return fsafe.remove_file(self.root, path)

    # -- local helpers ---------------------------------------------------------------------------

    def _staged(self, data: bytes, place: _Place) -> str:
        """Write ``data`` to a temp file in OUT/.tmp, ``place`` it, and return the placed file's version."""
        for _ in range(3):
            with fsafe.fresh_tmp(self.root, self.tmp_dir) as tmp:
                staging = fsafe.temp_basename("name")
                try:
                    fsafe.write_new(tmp, staging, data)
                except FileNotFoundError:
                    continue
                try:
                    version = version_at(tmp, staging)
                    place(tmp, staging)
                    assert version is not None
                    return version
                finally:
                    fsafe.unlink_quietly(tmp, staging)
        raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", self.tmp_dir)

    def remove_empty_tmp(self) -> bool:
        return fsafe.remove_empty_tmp(self.root, self.tmp_dir)


class _Place(Protocol):
    def __call__(self, tmp: int, staging: str, /) -> object: ...


def _link_new(tmp: int, staging: str, dest: int, name: str) -> None:
    os.link(staging, name, src_dir_fd=tmp, dst_dir_fd=dest, follow_symlinks=False)


# -- versions and "ours" -----------------------------------------------------------------------------


def version_of_file(fd: int) -> str:
    """The local version of an open regular file: ``<sha256 of its bytes>:<inode>``."""
    info = os.fstat(fd)
    return f"{fsafe.file_digest(fd, info.st_size)}:{info.st_ino}"


def version_at(folder: int, name: str) -> str | None:
    """The version of the regular file ``name`` in ``folder``, None when it is missing or no regular file."""
    try:
        fd = fsafe.open_regular_file(folder, name)
    except FileNotFoundError:
        return None
    if fd is None:
        return None
    try:
        return version_of_file(fd)
    finally:
        os.close(fd)


def is_ours(dest: int, name: str, info: os.stat_result, recorded: Sequence[Recorded]) -> bool:
    """Whether the file ``name`` in ``dest`` (status ``info``) holds one of the ``recorded`` publishes:
    its version where one was recorded, else exactly the bytes of the object published."""
    if not recorded or not stat.S_ISREG(info.st_mode):
        return False
    fd = fsafe.open_regular_file(dest, name)
    if fd is None:
        return False
    try:
        versions = {r.version for r in recorded if r.version}
        if versions and version_of_file(fd) in versions:
            return True
        size = os.fstat(fd).st_size
        return any(object_holds(r.object_path, fd, size) for r in recorded if r.version is None and r.object_path)
    finally:
        os.close(fd)


# -- OUT as a whole ----------------------------------------------------------------------------------


def resolve_out_dir(out: Path) -> Path:
    """Absolute, symlink-resolved output directory; it need not exist yet."""
    resolved = Path(os.path.realpath(out))
    if resolved.exists() and not resolved.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a directory")
    return resolved


def looks_like_output_folder(path: str) -> bool:
    """Whether ``path`` is an output folder thumbctl wrote (``batches/`` with a batch manifest in it,
    or the earlier layout's ``objects/``, ``batches/`` and ``.tmp/``), so a folder scan never takes
    thumbnails for sources."""
    if all(os.path.isdir(os.path.join(path, name)) for name in RESERVED_FOLDERS):
        return True
    batches = os.path.join(path, "batches")
    with contextlib.suppress(OSError):
        return any(re.fullmatch(r"b_[0-9A-Za-z_-]+\.json", name) for name in os.listdir(batches))
    return False


def probe_writable(target: LocalOutputTarget) -> None:
    """Prove a file can be written in OUT/.tmp, so a batch is never accepted for an output
    folder no worker could publish into; the folders this made are removed again, so a
    submission still writes nothing to OUT. Raises OSError."""
    made_tmp = not os.path.lexists(target.tmp_dir)
    made = []
    folder = target.root
    while not os.path.lexists(folder) and folder != os.path.dirname(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    try:
        # not fsynced: an empty file removed at once keeps nothing a power cut could lose
        fsafe.discard(fsafe.write_temp(target.root, target.tmp_dir, b"", "probe", durable=False), strict=True)
    finally:
        if made_tmp:
            with contextlib.suppress(OSError), fsafe.open_folder(target.root, target.root) as root:
                os.rmdir(".tmp", dir_fd=root)
        for folder in made:  # innermost first; OUT and the folders above it, outside the content of OUT
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def write_json_atomically(target: LocalOutputTarget, path: str, doc: object) -> None:
    """Write a JSON document at ``path`` in OUT through a temp file and an atomic rename."""
    target.write_document(target.name_of(path), json_document(doc))


def json_document(doc: object) -> bytes:
    """A batch document's bytes: indented JSON, UTF-8, with a final newline."""
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def write_page(target: LocalOutputTarget, path: str, text: str, *, create_folder: bool = False) -> None:
    """Write an HTML page (UTF-8) to ``path`` through a temp file and an atomic rename.

    Inside OUT the temp file is staged in OUT/.tmp like every other writer's; elsewhere
    :func:`~.fsafe.write_text_atomically` stages it beside ``path``. The folder of ``path`` must
    exist unless ``create_folder``.
    """
    folder, name = os.path.split(os.path.abspath(path))
    if fsafe.within(target.root, folder):  # checked before anything follows a symlink in OUT
        _write_page_inside(target, folder, name, text, create_folder)
        return
    if create_folder:
        os.makedirs(folder, exist_ok=True)
    folder = os.path.realpath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "no such folder", folder)
    if fsafe.within(target.root, folder):  # a folder outside OUT that is a link into it
        _write_page_inside(target, folder, name, text, False)
        return
    fsafe.write_text_atomically(Path(f"{folder}/{name}"), text)


def _write_page_inside(target: LocalOutputTarget, folder: str, name: str, text: str, create_folder: bool) -> None:
    if not fsafe.checked_folder(target.root, folder, create=create_folder):
        raise FileNotFoundError(errno.ENOENT, "no such folder", folder)
    with fsafe.open_folder(target.root, folder) as dest:
        fsafe.stage_in_tmp(target.root, target.tmp_dir, dest, name, text.encode("utf-8"), "html")


def remove_empty_friendly_folders(target: LocalOutputTarget, folder: str) -> None:
    """Remove ``folder`` and its parents below OUT while they are empty (a friendly name's
    sub-folders, e.g. OUT/rooms, once gc took their last file). OUT itself and its
    objects/, batches/ and .tmp/ are never removed, nor anything through a symlink."""
    root = os.path.normpath(target.root)
    current = os.path.normpath(folder)
    while os.path.dirname(current) != current and current.startswith(root + os.sep):
        if os.path.dirname(current) == root and os.path.basename(current) in RESERVED_FOLDERS:
            return
        if not fsafe.remove_empty_folder(target.root, current):
            return
        current = os.path.dirname(current)
