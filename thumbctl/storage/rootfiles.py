"""The one file thumbctl may write at a source root (a folder, or an ``s3://`` prefix): the
portable fix file (:mod:`thumbctl.intake.fixfile`). Everything else at a root is only read.

A write is a swap, as for the site manifest: the bytes there now are read, ``decide`` makes the
new ones (or says why to keep the file), and they replace the old atomically. In a folder: under
a ``flock`` on the folder, through a temp file beside it (a dot name the scan never reads) and a
rename, never through a symlink; in a bucket: ``If-None-Match``/``If-Match``, retried on a race.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from . import fsafe
from .locations import is_s3, output_target_at
from .outputs import Decide


class RootFile(Protocol):
    """A file at a source root."""

    def read(self, limit: int) -> bytes | None:
        """Its bytes; None when there is none. ``b""`` when it is there but no regular file of at
        most ``limit`` bytes (so never one thumbctl wrote)."""
        ...

    def swap(self, decide: Decide, limit: int) -> str | None:
        """Replace it atomically with what ``decide`` makes of the bytes there now (see :meth:`read`),
        unless it returns why to keep them (returned). Raises OSError when the root cannot be written."""
        ...


def root_file_at(root: str, name: str) -> RootFile:
    """The file ``name`` at the source root ``root`` (an absolute folder or ``s3://bucket/prefix``)."""
    if is_s3(root):
        return _BucketFile(root, name)
    return _FolderFile(root, name)


@dataclass(frozen=True)
class _FolderFile:
    root: str
    name: str

    def read(self, limit: int) -> bytes | None:
        try:
            with fsafe.open_folder(self.root, self.root) as folder:
                return self._read_in(folder, limit)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def swap(self, decide: Decide, limit: int) -> str | None:
        with fsafe.open_folder(self.root, self.root) as folder, _locked(folder):
            made = decide(self._read_in(folder, limit))
            if isinstance(made, str):
                return made
            staging = f".{self.name}.{fsafe.temp_basename('tmp')}"
            fsafe.write_new(folder, staging, made)
            try:
                os.replace(staging, self.name, src_dir_fd=folder, dst_dir_fd=folder)
            finally:
                fsafe.unlink_quietly(folder, staging)
            os.fsync(folder)
            return None

    def _read_in(self, folder: int, limit: int) -> bytes | None:
        try:
            held = fsafe.read_small_file(folder, self.name, limit)
        except FileNotFoundError:
            return None
        return b"" if held is None else held


@contextlib.contextmanager
def _locked(folder: int) -> Iterator[None]:
    """One writer of the folder's file at a time among this host's processes."""
    fcntl.flock(folder, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(folder, fcntl.LOCK_UN)


@dataclass(frozen=True)
class _BucketFile:
    root: str
    name: str

    def read(self, limit: int) -> bytes | None:
        target = output_target_at(self.root)
        held = target.read(self.name, limit)
        if held is None and target.document_size(self.name) is not None:
            return b""
        return held

    def swap(self, decide: Decide, limit: int) -> str | None:
        return output_target_at(self.root).swap_document(self.name, decide, limit)
