"""Versions at names, whatever holds them: what the ledger recorded at a name (:class:`Recorded`),
whose a name is (:class:`NameState`), a conditional write that met another version
(:class:`StaleVersion`), a copy put back (:func:`put_back`); and a local file's version
(``<sha256>:<inode>``) and whether a local file is thumbctl's (:func:`is_ours`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ..core.errors import ItemFailure
from . import fsafe
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
