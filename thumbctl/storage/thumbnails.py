"""Thumbnails in a local output folder: each its own file, a reflink or a copy of its object.

The full rule of publishing at a name (:func:`publish_name`): a free name is created with a
create-if-absent ``link()``; a name holding the object's very bytes is left (``unchanged``) or,
when that file is shared (a hard link of the earlier layout) or holds the item's own object,
given a copy of its own (``relinked``); a name holding a publish the ledger recorded there is
``replaced``; anything else fails ``name_taken`` unless ``overwrite``. Each returns the version of
what is at the name afterwards, for the ledger to record.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from ..core.errors import ItemFailure
from ..core.models import ItemState, ItemView
from . import fsafe
from .objects import open_object
from .outputs import LocalOutputTarget, Recorded, is_ours, put_back, put_back_taken, version_at

#: What :func:`publish_name` did at a thumbnail's name.
NAME_OUTCOMES = ("created", "unchanged", "relinked", "replaced", "overwritten")

#: The publishes recorded at a name, asked only when a file there has to be judged.
RecordedAt = Callable[[], Sequence[Recorded]]


class NamePublished(NamedTuple):
    """What publishing at a name did, and the version of the file there afterwards."""

    outcome: str
    version: str | None


class StagedThumbnail:
    """A thumbnail's own file made ahead of its publish: a copy (or reflink) of the object's staged
    bytes in OUT's temp folder, fsynced and its version known, made outside the ledger's publish
    transaction, so the transaction only places it (a ``link()`` or a rename). It holds the bytes
    of the object the render stages; used once, else dropped (:meth:`drop`)."""

    def __init__(self, target: LocalOutputTarget, src: int, size: int) -> None:
        self._file = fsafe.copy_to_temp(target.root, target.tmp_dir, src, size)
        try:
            self.version = version_at(self._file.folder, self._file.name)
        except BaseException:
            self._file.drop()
            raise

    @property
    def usable(self) -> bool:
        return self._file.held and self.version is not None

    def place(self, dest: int, name: str, outcome: str) -> str | None:
        """Put the copy at ``name`` in ``dest`` (see :func:`_place`); its version, None when a file
        appeared at a free name meanwhile (the copy stays for another try)."""
        if outcome == "created":
            try:
                os.link(self._file.name, name, src_dir_fd=self._file.folder, dst_dir_fd=dest, follow_symlinks=False)
            except FileExistsError:
                return None
        else:
            os.replace(self._file.name, name, src_dir_fd=self._file.folder, dst_dir_fd=dest)
        self._file.drop()
        return self.version

    def drop(self) -> None:
        self._file.drop()


class Approval(NamedTuple):
    """A decision taken before the object was stored, and the file it judged: it stands while
    that very file is at the name."""

    outcome: str
    seen: os.stat_result


def publish_name(
    target: LocalOutputTarget,
    object_path: str,
    friendly_path: str,
    *,
    recorded: RecordedAt,
    overwrite: bool,
    approved: Approval | None = None,
    staged: StagedThumbnail | None = None,
    adopt: bool = True,
) -> NamePublished:
    """Publish the thumbnail at its name as its own file (a reflink or a copy of the object), never
    over a file thumbctl did not publish (see the module's docstring). ``approved`` is what
    :func:`name_outcome` decided before the object was stored; ``staged``, a copy of the object's
    bytes made beforehand (placed instead of copying the object now); without ``adopt``, a copy of
    the bytes put back at the name is the user's (see :func:`name_outcome`). Everything goes through
    folder descriptors; no symlink is followed."""
    folder, name = os.path.split(friendly_path)
    with open_object(object_path) as (src, info), fsafe.open_folder(target.root, folder, create=True) as dest:
        content = functools.partial(os.pread, src, info.st_size + 1, 0)
        for _ in range(3):
            outcome, _ = name_outcome(
                dest, name, friendly_path, info, recorded, overwrite, content, approved=approved, adopt=adopt
            )
            if outcome == "unchanged":
                return NamePublished(outcome, version_at(dest, name))
            if staged is not None and staged.usable:
                placed = staged.place(dest, name, outcome)
            else:
                placed = fsafe.staged_copy(
                    target.root, target.tmp_dir, src, info.st_size, functools.partial(_place, dest, name, outcome)
                )
            if placed is not None:
                return NamePublished(outcome, placed)
    raise FileExistsError(errno.EEXIST, "files kept appearing at the thumbnail's name", friendly_path)


def _place(dest: int, name: str, outcome: str, tmp: int, staging: str) -> str | None:
    """Put the staged copy at ``name``: a rename over what is there, or (``created``) a ``link()``
    that fails when a file appeared meanwhile; returns the placed file's version, None when it
    was not placed (the caller looks again)."""
    version = version_at(tmp, staging)
    if outcome != "created":
        os.replace(staging, name, src_dir_fd=tmp, dst_dir_fd=dest)
        return version
    try:
        os.link(staging, name, src_dir_fd=tmp, dst_dir_fd=dest, follow_symlinks=False)
    except FileExistsError:
        return None
    return version


def name_outcome(
    dest: int,
    name: str,
    friendly_path: str,
    target: os.stat_result | None,
    recorded: RecordedAt,
    overwrite: bool,
    content: Callable[[], bytes],
    own: Iterable[str] = (),
    approved: Approval | None = None,
    adopt: bool = True,
) -> tuple[str, os.stat_result | None]:
    """What publishing at ``name`` (in the folder ``dest``) would do (see :func:`publish_name`),
    and the status of the file it judged (None when the name is free). ``target`` is the
    object's status, None before it exists; ``content()`` its bytes; ``own`` the item's own
    object path (a file holding its bytes, such as the thumbnail of a damaged object about to be
    rendered again, is relinked, not counted); ``approved`` an earlier decision that stands while its
    file is there. ``adopt``: a file holding the bytes is thumbctl's even at a version the ledger did
    not record there (a worker's publish whose commit was lost left it); without it (a submit
    linking a succeeded item's name) such a file is a copy put back, the user's
    (:func:`.outputs.put_back`). Raises ItemFailure ``name_taken``."""
    try:
        existing = os.stat(name, dir_fd=dest, follow_symlinks=False)
    except FileNotFoundError:
        return "created", None
    if target is not None and fsafe.same_inode(existing, target):
        return "relinked", existing  # a hard link of the earlier layout: a copy of its own takes its place
    if approved is not None and fsafe.same_inode(existing, approved.seen):
        return approved.outcome, existing
    if stat.S_ISREG(existing.st_mode) and _holds(dest, name, existing, content):
        if adopt or not put_back(version_at(dest, name), recorded()):
            return ("unchanged" if existing.st_nlink == 1 else "relinked"), existing
        if overwrite:
            return "overwritten", existing
        raise put_back_taken(friendly_path)
    if is_ours(dest, name, existing, [Recorded(None, path) for path in own if path]):
        return "relinked", existing
    if stat.S_ISREG(existing.st_mode) and is_ours(dest, name, existing, recorded()):
        return "replaced", existing
    if overwrite:
        return "overwritten", existing
    raise ItemFailure(
        "name_taken",
        f"{friendly_path} is a file thumbctl did not publish; it is left as it is (--overwrite replaces it)",
    )


def check_name(
    target: LocalOutputTarget,
    friendly_path: str,
    data: bytes | Callable[[], bytes],
    recorded: RecordedAt,
    *,
    overwrite: bool,
    own: Iterable[str] = (),
    adopt: bool = True,
) -> Approval | None:
    """Decide, before the object is stored, what publishing at ``friendly_path`` will do: raise
    ItemFailure ``name_taken`` for a file thumbctl did not publish (without ``overwrite``);
    return the decision and the file it judged (None: a free name)."""
    folder, name = os.path.split(friendly_path)
    if not fsafe.checked_folder(target.root, folder, create=False):
        return None
    content = data if callable(data) else (lambda: data)
    with fsafe.open_folder(target.root, folder) as dest:
        outcome, seen = name_outcome(
            dest, name, friendly_path, None, recorded, overwrite, content, own=own, adopt=adopt
        )
    return None if seen is None else Approval(outcome, seen)


def _holds(folder: int, name: str, info: os.stat_result, content: Callable[[], bytes]) -> bool:
    """Whether the regular file ``name`` (status ``info``) holds exactly ``content()``."""
    expected = content()
    if info.st_size != len(expected):
        return False
    fd = fsafe.open_regular_file(folder, name)
    if fd is None:
        return False
    try:
        return os.fstat(fd).st_size == len(expected) and os.pread(fd, len(expected) + 1, 0) == expected
    finally:
        os.close(fd)


def restore_thumbnail(target: LocalOutputTarget, object_path: str, friendly_path: str, *, replace: bool) -> str:
    """Put a fresh copy of the object at ``friendly_path``; returns its version. A missing name
    (``replace`` False) is created only while it is free: a file that appeared there meanwhile
    is left, and FileExistsError raised. With ``replace`` it is an atomic rename over whatever is
    there (an edit restored on request, or an earlier version thumbctl published)."""
    folder, name = os.path.split(friendly_path)
    outcome = "replaced" if replace else "created"
    with open_object(object_path) as (src, info), fsafe.open_folder(target.root, folder, create=True) as dest:
        placed = fsafe.staged_copy(
            target.root, target.tmp_dir, src, info.st_size, functools.partial(_place, dest, name, outcome)
        )
    if placed is None:
        raise FileExistsError(errno.EEXIST, "a file appeared at the thumbnail's name; it is left as it is", name)
    return placed


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
        with open_object(object_path) as (obj, target):  # opened once: the comparison reads this descriptor
            return None if fsafe.same_inode(info, target) else _thumbnail_differs(obj, target.st_size, friendly_path)
    except (OSError, ValueError):
        return None


def _thumbnail_differs(obj: int, size: int, friendly_path: str) -> str | None:
    """``wrong`` when the thumbnail cannot be opened, ``modified`` when it does not hold exactly the
    ``size`` bytes of the open object ``obj`` (or cannot be read), else None."""
    try:
        fd = os.open(friendly_path, fsafe.READ_FLAGS)
    except OSError:
        return "wrong"
    try:
        return None if os.fstat(fd).st_size == size and fsafe.same_bytes(obj, fd) else "modified"
    except OSError:
        return "modified"
    finally:
        os.close(fd)


def shown_output(item: ItemView) -> str | None:
    """The file that shows a succeeded item's output now, or None if it is gone.

    The thumbnail, while it still holds the item's object's bytes (a later batch with other
    settings may have replaced it with another object's, or the user edited it); else the object.
    """
    if item.state != ItemState.SUCCEEDED or not item.object_path:
        return None
    if item.friendly_path and thumbnail_problem(item.object_path, item.friendly_path) is None:
        return item.friendly_path
    return item.object_path if fsafe.is_plain_file(item.object_path) else None
