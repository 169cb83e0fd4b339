"""The output directory: where objects, friendly names and batch manifests live.

Layout of OUT (nothing else is ever written there)::

    OUT/objects/<k[:2]>/<k>.<ext>        one object per derivative key
    OUT/<item path without ext>.<W>x<H>.<ext>   friendly names (links)
    OUT/batches/<batch_id>.json          per-batch manifest
    OUT/.tmp/                            temp files of writers
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from .settings import Ratio

RESERVED_TOP_LEVEL = {".tmp"}


class UnsafeItemId(ValueError):
    """An item id that could not be a safe relative path inside OUT."""


def check_item_id(item_id: str) -> str:
    """Return ``item_id`` if it is a safe relative path inside OUT, else raise.

    Refused: empty ids, absolute paths, ``.``/``..`` or empty segments,
    backslashes, control characters, and the reserved ``.tmp`` folder.
    """
    if not item_id:
        raise UnsafeItemId("item id is empty")
    if any(unicodedata.category(ch) == "Cc" for ch in item_id):
        raise UnsafeItemId(f"item id {item_id!r} contains control characters")
    if "\\" in item_id:
        raise UnsafeItemId(f"item id {item_id!r} contains a backslash")
    if item_id.startswith("/"):
        raise UnsafeItemId(f"item id {item_id!r} is an absolute path")
    parts = item_id.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafeItemId(f"item id {item_id!r} has an empty, '.' or '..' segment")
    if parts[0] in RESERVED_TOP_LEVEL:
        raise UnsafeItemId(f"item id {item_id!r} uses the reserved folder {parts[0]!r}")
    if any(len(part.encode()) > 200 for part in parts):
        raise UnsafeItemId(f"item id {item_id!r} has a segment over 200 bytes")
    return item_id


def friendly_stems(item_ids: list[str]) -> dict[str, str]:
    """Map each id to the stem of its friendly names.

    The stem is the id without its extension; when two ids share a stem
    (``a.jpg`` and ``a.png``), the later one in sorted order keeps its
    extension (``a.png``), so no two items of a batch share a friendly name.
    """
    stems: dict[str, str] = {}
    taken: set[str] = set()
    for item_id in sorted(item_ids):
        stem = _without_extension(item_id)
        if stem in taken:
            stem = item_id
        taken.add(stem)
        stems[item_id] = stem
    return stems


def _without_extension(item_id: str) -> str:
    """``rooms/sofa.jpg`` -> ``rooms/sofa``; names like ``.hidden`` or ``x.`` stay whole."""
    head, sep, name = item_id.rpartition("/")
    dot = name.rfind(".")
    return f"{head}{sep}{name[:dot]}" if 0 < dot < len(name) - 1 else item_id


@dataclass(frozen=True)
class OutputLayout:
    """Path arithmetic for one output directory (no I/O). Paths are absolute strings."""

    root: str

    def object_path(self, key: str, extension: str) -> str:
        return f"{self.root}/objects/{key[:2]}/{key}.{extension}"

    def friendly_path(self, stem: str, ratio: Ratio, extension: str) -> str:
        return f"{self.root}/{stem}.{ratio.slug}.{extension}"

    def batch_manifest_path(self, batch_id: str) -> str:
        return f"{self.root}/batches/{batch_id}.json"

    @property
    def tmp_dir(self) -> str:
        return f"{self.root}/.tmp"


def resolve_out_dir(out: Path) -> Path:
    """Absolute, symlink-resolved output directory; it need not exist yet."""
    resolved = Path(os.path.realpath(out))
    if resolved.exists() and not resolved.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a directory")
    return resolved
