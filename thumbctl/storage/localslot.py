"""A name of a local output folder held open for one publish: what the name rules
(:mod:`.publishing`) ask of a name, answered through the descriptor of the name's folder, so no
symlink is ever followed and every look and write in one publish meets the same folder.

What only a local folder has lives here: a file's inode and links (a hard link of the earlier
layout is given a copy of its own: ``relinked``), a thumbnail placed as a reflink or a copy of the
object's very file (never its bytes written again), and a copy made ahead of the publish
(:class:`StagedThumbnail`), so the ledger's publish transaction only places it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence

from . import fsafe
from .objects import Source
from .versions import Recorded, StaleVersion, is_ours, version_at


class StagedThumbnail:
    """A thumbnail's own file made ahead of its publish: a copy (or reflink) of the object's staged
    bytes in OUT's temp folder, fsynced and its version known, made outside the ledger's publish
    transaction, so the transaction only places it (a ``link()`` or a rename). It holds the bytes
    of the object the render stages; used once, else dropped (:meth:`drop`)."""

    def __init__(self, root: str, tmp_dir: str, src: int, size: int) -> None:
        self._file = fsafe.copy_to_temp(root, tmp_dir, src, size)
        try:
            self.version = version_at(self._file.folder, self._file.name)
        except BaseException:
            self._file.drop()
            raise

    @property
    def usable(self) -> bool:
        return self._file.held and self.version is not None

    def place(self, put: Callable[[int, str], None]) -> str | None:
        """Place the copy with ``put(folder, name)``; its version. Raises what ``put`` raises (the
        copy then stays for another try)."""
        put(self._file.folder, self._file.name)
        self._file.drop()
        return self.version

    def drop(self) -> None:
        self._file.drop()


class LocalSlot:
    """One name in a local output folder (``base`` in the open folder ``dest``; ``dest`` None when
    the folder does not exist: the name is free). What is seen at the name is its ``lstat``."""

    def __init__(self, root: str, tmp_dir: str, dest: int | None, base: str) -> None:
        self.root, self.tmp_dir, self.dest, self.base = root, tmp_dir, dest, base

    def look(self) -> os.stat_result | None:
        if self.dest is None:
            return None
        try:
            return os.stat(self.base, dir_fd=self.dest, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def same(self, seen: os.stat_result, earlier: object) -> bool:
        return isinstance(earlier, os.stat_result) and fsafe.same_inode(seen, earlier)

    def links_to(self, seen: os.stat_result, source: Source) -> bool:
        """A hard link to the object's own file (the earlier layout)."""
        return source.info is not None and fsafe.same_inode(seen, source.info)

    def holds(self, seen: os.stat_result, content: Callable[[], bytes]) -> bool:
        """A regular file holding exactly ``content()``."""
        if not stat.S_ISREG(seen.st_mode):
            return False
        expected = content()
        if seen.st_size != len(expected):
            return False
        fd = fsafe.open_regular_file(self._dest, self.base)
        if fd is None:
            return False
        try:
            return os.fstat(fd).st_size == len(expected) and os.pread(fd, len(expected) + 1, 0) == expected
        finally:
            os.close(fd)

    def version(self, seen: os.stat_result) -> str | None:
        return version_at(self._dest, self.base)

    def shared(self, seen: os.stat_result) -> bool:
        """A file with other names (a hard link): it is given a copy of its own."""
        return seen.st_nlink != 1

    def copy_of(self, seen: os.stat_result, object_paths: Sequence[str]) -> bool:
        """A file holding the bytes of one of the item's own objects (a damaged one about to be
        rendered again): thumbctl's copy, given a fresh one."""
        return is_ours(self._dest, self.base, seen, [Recorded(None, path) for path in object_paths if path])

    def ours(self, seen: os.stat_result, recorded: Sequence[Recorded]) -> bool:
        return stat.S_ISREG(seen.st_mode) and is_ours(self._dest, self.base, seen, recorded)

    def place(self, source: Source, seen: os.stat_result | None) -> str:
        """A copy of the source at the name: the copy made ahead when there is one, else a reflink
        or copy of the object's file, else its bytes, written to OUT's temp folder first; then a
        ``link()`` at a free name, or a rename over the file judged while it is still there."""

        def put(folder: int, staging: str) -> None:
            self._put(folder, staging, seen)

        ahead = source.ahead
        if isinstance(ahead, StagedThumbnail) and ahead.usable:
            placed = ahead.place(put)
            if placed is not None:
                return placed
        if source.fd is not None and source.info is not None:
            return fsafe.staged_copy(
                self.root, self.tmp_dir, source.fd, source.info.st_size, lambda tmp, staging: _placed(tmp, staging, put)
            )
        return _staged_bytes(self.root, self.tmp_dir, source.content(), put)

    def _put(self, folder: int, staging: str, seen: os.stat_result | None) -> None:
        if seen is None:
            try:
                os.link(staging, self.base, src_dir_fd=folder, dst_dir_fd=self._dest, follow_symlinks=False)
            except FileExistsError:
                raise FileExistsError(
                    errno.EEXIST, "a file appeared at the thumbnail's name; it is left as it is", self.base
                ) from None
            return
        now = self.look()
        if now is None or not _unchanged(now, seen):
            raise StaleVersion(errno.EEXIST, "the name no longer holds the file judged", self.base)
        os.replace(staging, self.base, src_dir_fd=folder, dst_dir_fd=self._dest)

    @property
    def _dest(self) -> int:
        if self.dest is None:
            raise FileNotFoundError(errno.ENOENT, "the name's folder does not exist", self.base)
        return self.dest


def _unchanged(now: os.stat_result, seen: os.stat_result) -> bool:
    """Whether the file at a name is still the one judged: the same inode, size and modification time."""
    return fsafe.same_inode(now, seen) and (now.st_size, now.st_mtime_ns) == (seen.st_size, seen.st_mtime_ns)


def _placed(tmp: int, staging: str, put: Callable[[int, str], None]) -> str:
    """The version of the temp file ``staging``, once ``put`` placed it."""
    version = version_at(tmp, staging)
    assert version is not None
    put(tmp, staging)
    return version


def _staged_bytes(root: str, tmp_dir: str, data: bytes, put: Callable[[int, str], None]) -> str:
    """Write ``data`` to a temp file in ``tmp_dir``, place it with ``put`` and return its version."""
    for _ in range(3):
        with fsafe.fresh_tmp(root, tmp_dir) as tmp:
            staging = fsafe.temp_basename("name")
            try:
                fsafe.write_new(tmp, staging, data)
            except FileNotFoundError:
                continue
            try:
                return _placed(tmp, staging, put)
            finally:
                fsafe.unlink_quietly(tmp, staging)
    raise FileNotFoundError(errno.ENOENT, "the temp folder kept vanishing", tmp_dir)
