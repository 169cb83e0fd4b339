"""Which files of a folder a scan takes as candidates: image extensions, ``--include`` and ``--exclude``."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass

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
