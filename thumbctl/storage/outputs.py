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
in full (created, unchanged, relinked, replaced, overwritten) are in :mod:`.publishing`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config.s3location import is_s3
from ..core.errors import CannotWrite
from . import fsafe
from .layout import OutLayout
from .localslot import LocalSlot, StagedThumbnail
from .objects import Source
from .thumbnails import shown_file, thumbnail_problem
from .versions import NameState, Recorded, StaleVersion, is_ours, version_at

#: What decides a swapped document's fate: the bytes there now (None: none) -> the bytes to write, or
#: why to keep those there (text).
Decide = Callable[[bytes | None], bytes | str]


class CopyAhead(Protocol):
    """A copy made ahead of a publish (:meth:`OutputTarget.copy_ahead`), dropped when not placed."""

    def drop(self) -> None: ...


class NameSlot(Protocol):
    """One name of an output target held open for one publish: what the name rules
    (:mod:`.publishing`) ask of it, and the write there. ``seen`` is what :meth:`look` found (a local
    file's status, a bucket's version), opaque to the rules. What differs between targets (a local
    file's inode and links, a copy of an object's file) is the slot's; the rules are the same."""

    def look(self) -> Any | None:
        """What is at the name now; None when it is free."""
        ...

    def same(self, seen: Any, earlier: object) -> bool:
        """Whether ``seen`` is the very thing seen ``earlier`` (a decision taken then still stands)."""
        ...

    def links_to(self, seen: Any, source: Source) -> bool:
        """Whether ``seen`` is the source's own file (a hard link of the earlier layout)."""
        ...

    def holds(self, seen: Any, content: Callable[[], bytes]) -> bool:
        """Whether ``seen`` holds exactly ``content()``."""
        ...

    def version(self, seen: Any) -> str | None:
        """The version of ``seen``, as the ledger records it."""
        ...

    def shared(self, seen: Any) -> bool:
        """Whether ``seen`` is shared with another name (a hard link): it is given a copy of its own."""
        ...

    def copy_of(self, seen: Any, object_paths: Sequence[str]) -> bool:
        """Whether ``seen`` is thumbctl's copy of one of the item's own objects, to be given a fresh one
        (a local file holding their bytes); a bucket's names are judged by their version alone."""
        ...

    def ours(self, seen: Any, recorded: Sequence[Recorded]) -> bool:
        """Whether ``seen`` holds one of the ``recorded`` publishes."""
        ...

    def place(self, source: Source, seen: Any | None) -> str:
        """Put a copy of ``source`` at the name, atomically: created only while it is free (``seen``
        None), else replacing ``seen`` only while it is still there; returns the version placed.
        FileExistsError (StaleVersion) when the name changed meanwhile: nothing is written."""
        ...


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

    def swap_document(self, name: str, decide: Decide, limit: int) -> str | None:
        """Replace the document ``name`` atomically with what ``decide`` makes of the bytes there now
        (read up to ``limit``; None when there are none), unless it says why to keep them. Two
        writers never both act on one stale read (a lock on the folder; ``If-Match``/``If-None-Match``
        in a bucket). Returns why it kept the document, else None."""
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

    def slot(self, name: str, *, create: bool) -> contextlib.AbstractContextManager[NameSlot]:
        """``name`` held open for one publish (see :class:`.publishing.NameSlot`); ``create`` makes
        its folder where a target has folders (without it, a missing folder is a free name)."""
        ...

    def thumbnail_problem(self, name: str, object_path: str, versions: Callable[[], set[str | None]]) -> str | None:
        """What is wrong with the thumbnail of the object ``object_path`` at ``name``: ``missing``,
        ``wrong`` (no regular file) or ``modified``; None while it is what thumbctl published
        there (a local file holding the object's bytes; a bucket's name at one of the ``versions()``
        the ledger recorded there for this object)."""
        ...

    def holds_object(self, name: str, object_path: str) -> bool:
        """Whether ``name`` holds exactly the bytes of the recorded object (both present)."""
        ...

    def page_path(self, batch_id: str, path: Path | None) -> str:
        """Where a batch's contact sheet goes: ``batches/<batch_id>.html`` here, or ``path`` (a file
        outside the thumbnails, for a local folder only: a page in a bucket links relative to its
        batches/ folder). Raises CannotWrite for a place the page may not go."""
        ...

    def write_page(self, path: str, text: str, *, create_folder: bool) -> None:
        """Write an HTML page at ``path`` (from :meth:`page_path`) whole; ``create_folder`` makes its folder."""
        ...

    def shown(self, object_path: str, friendly_path: str) -> str | None:
        """The file a contact sheet's tile links to for a published thumbnail: the thumbnail while it
        is there (a local one while it holds its object's bytes, else the object), None when gone."""
        ...

    def occupied(self, name: str) -> bool:
        """Whether anything is at ``name``, also what has no version (a symlink, a folder: only a
        local folder has them)."""
        ...

    def copy_ahead(self, staged: int | None, size: int) -> CopyAhead | None:
        """A copy of an object's staged file (the open ``staged``, ``size`` bytes) made here ahead of
        its publish, so the publish only places it: a local folder's; None where none is made."""
        ...


@dataclass(frozen=True)
class InterfaceSlot:
    """A :class:`NameSlot` made of the target's own interface alone (a bucket's): what is seen at the
    name is its version; a name holding a version thumbctl did not record is judged by its bytes."""

    target: OutputTarget
    name: str

    def look(self) -> str | None:
        return self.target.version_of(self.name)

    def same(self, seen: str, earlier: object) -> bool:
        return seen == earlier

    def links_to(self, seen: str, source: Source) -> bool:
        return False

    def holds(self, seen: str, content: Callable[[], bytes]) -> bool:
        data = content()
        return self.target.read(self.name, len(data)) == data

    def version(self, seen: str) -> str | None:
        return seen

    def shared(self, seen: str) -> bool:
        return False

    def copy_of(self, seen: str, object_paths: Sequence[str]) -> bool:
        return False

    def ours(self, seen: str, recorded: Sequence[Recorded]) -> bool:
        """Its version is one the ledger recorded there; a record from before versions existed is
        judged by the target (the bytes of the object published)."""
        if seen in {r.version for r in recorded if r.version}:
            return True
        older = [r for r in recorded if r.version is None]
        return bool(older) and self.target.name_state(self.name, older) == NameState.OURS

    def place(self, source: Source, seen: str | None) -> str:
        data = source.content()
        if seen is None:
            return self.target.publish(self.name, data)
        try:
            return self.target.replace(self.name, data, version=seen)
        except FileNotFoundError:
            raise StaleVersion(errno.EEXIST, "the name no longer holds the version judged", self.name) from None


#: Folders of OUT that are never a thumbnail's: ``objects/`` is the store of the earlier layout.
RESERVED_FOLDERS = ("objects", "batches", ".tmp")


@contextlib.contextmanager
def _locked(folder: int) -> Iterator[None]:
    """An exclusive lock on an open folder (``flock``), held while the block runs: one writer of a
    swapped document at a time among this host's processes (a local OUT is one host's)."""
    fcntl.flock(folder, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(folder, fcntl.LOCK_UN)


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

    def swap_document(self, name: str, decide: Decide, limit: int) -> str | None:
        with fsafe.open_folder(self.root, self.root, create=True) as root, _locked(root):
            held = self.read(name, limit)
            if held is None and os.path.lexists(self.path_of(name)):
                held = b""  # there, but too large or no regular file: not ours
            made = decide(held)
            if isinstance(made, str):
                return made
            self.write_document(name, made)
            return None

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

    @contextlib.contextmanager
    def slot(self, name: str, *, create: bool) -> Iterator[LocalSlot]:
        folder, base = os.path.split(self.path_of(name))
        if not create and not fsafe.checked_folder(self.root, folder, create=False):
            yield LocalSlot(self.root, self.tmp_dir, None, base)
            return
        with fsafe.open_folder(self.root, folder, create=create) as dest:
            yield LocalSlot(self.root, self.tmp_dir, dest, base)

    def copy_ahead(self, staged: int | None, size: int) -> StagedThumbnail | None:
        return None if staged is None else StagedThumbnail(self.root, self.tmp_dir, staged, size)

    def thumbnail_problem(self, name: str, object_path: str, versions: Callable[[], set[str | None]]) -> str | None:
        return thumbnail_problem(object_path, self.path_of(name))

    def occupied(self, name: str) -> bool:
        return os.path.lexists(self.path_of(name))

    def page_path(self, batch_id: str, path: Path | None) -> str:
        """A ``path`` given has its folder resolved, so relative links are computed from the real place."""
        if path is None:
            return self.batch_sheet_path(batch_id)
        folder, name = os.path.split(os.path.abspath(path))
        target = os.path.join(os.path.realpath(folder), name)
        batches = os.path.dirname(self.batch_sheet_path(batch_id))
        inside = os.path.commonpath([self.root, target]) == self.root
        if inside and os.path.dirname(target) != batches:  # never over an object or a friendly name
            raise CannotWrite(f"inside the output folder a contact sheet may only go in {batches}, not {target}")
        return target

    def write_page(self, path: str, text: str, *, create_folder: bool) -> None:
        write_page(self, path, text, create_folder=create_folder)

    def shown(self, object_path: str, friendly_path: str) -> str | None:
        """With a store in a bucket, the thumbnail while it is a plain file (a link from OUT into a
        bucket could not be followed)."""
        if is_s3(object_path):
            return friendly_path if fsafe.is_plain_file(friendly_path) else None
        return shown_file(object_path, friendly_path)

    def holds_object(self, name: str, object_path: str) -> bool:
        path = self.path_of(name)
        return (
            fsafe.is_plain_file(object_path)
            and fsafe.is_plain_file(path)
            and thumbnail_problem(object_path, path) is None
        )


class _Place(Protocol):
    def __call__(self, tmp: int, staging: str, /) -> object: ...


def _link_new(tmp: int, staging: str, dest: int, name: str) -> None:
    os.link(staging, name, src_dir_fd=tmp, dst_dir_fd=dest, follow_symlinks=False)


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
