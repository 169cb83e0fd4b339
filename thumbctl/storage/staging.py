"""The temp files a local store staged in this process, each reached through the folder it was
written in (held open until the file is used or removed)."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator

from . import fsafe


class StagedFolders:
    """The folder each temp file of this process was written in, held open from the write to its
    use or removal: a temp file is reached through the folder it was written in, never again by
    its path, so STORE/.tmp renamed or swapped for a symlink meanwhile leaves no temp file behind
    (and cannot lead a link out of the store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folders: dict[str, int] = {}

    def hold(self, path: str, folder: int) -> None:
        with self._lock:
            self._folders[path] = os.dup(folder)

    def _take(self, path: str) -> int | None:
        with self._lock:
            return self._folders.pop(path, None)

    def unlink(self, path: str) -> bool:
        """Remove the temp file at ``path`` through its folder; False when none is held for it."""
        folder = self._take(path)
        if folder is None:
            return False
        try:
            with contextlib.suppress(OSError):
                fsafe.unlink_quietly(folder, os.path.basename(path))
        finally:
            os.close(folder)
        return True

    @contextlib.contextmanager
    def reading(self, path: str, root: str) -> Iterator[int]:
        """A read descriptor of the temp file at ``path`` (through the folder held for it, which stays
        held), closed on exit; FileNotFoundError when it is gone."""
        with self._lock:
            held = self._folders.get(path)
            folder = None if held is None else os.dup(held)
        with contextlib.ExitStack() as stack:
            if folder is None:
                folder = stack.enter_context(fsafe.open_folder(root, os.path.dirname(path)))
            else:
                stack.callback(os.close, folder)
            fd = fsafe.open_regular_file(folder, os.path.basename(path))
        if fd is None:
            raise FileNotFoundError(errno.ENOENT, "the temp file is not a regular file", path)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def folder_of(self, path: str, root: str) -> Iterator[int]:
        """The folder held for the temp file at ``path`` (released on exit), else its folder opened by path."""
        folder = self._take(path)
        if folder is None:
            with fsafe.open_folder(root, os.path.dirname(path)) as opened:
                yield opened
            return
        try:
            yield folder
        finally:
            os.close(folder)


#: The temp files of this process's local stores, by path.
STAGED = StagedFolders()
os.register_at_fork(after_in_child=STAGED.__init__)
