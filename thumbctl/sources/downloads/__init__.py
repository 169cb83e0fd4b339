"""Sources by URL: which sources are URLs, their item ids, and their bounded, checked downloads.

This package imports nothing heavy: :mod:`.fetch` imports urllib3 (the ``s3`` extra) when a
download starts, and :mod:`.remote` reads the bytes a download gave as a folder's source is read.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from ..itemids import UnsafeItemId, check_item_id

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(source: str) -> bool:
    """Whether a source as named (in a manifest, or recorded) is a URL rather than a path."""
    return bool(_SCHEME.match(source))


def url_item_id(url: str) -> str | None:
    """The item id a URL source gets when its manifest entry names none: its host and path
    (``https://cdn.example.com/photos/a%20b.jpg`` -> ``cdn.example.com/photos/a b.jpg``), each
    segment decoded unless decoding would make it unsafe; query and fragment are left out. None
    when no safe id comes of it (the entry then needs an ``id``)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return None
    segments = [host] + [_segment(raw) for raw in parts.path.split("/") if raw not in ("", ".")]
    if ".." in segments:
        return None
    try:
        return check_item_id("/".join(segments))
    except UnsafeItemId:
        return None


def _segment(raw: str) -> str:
    decoded = unquote(raw)
    if "/" in decoded or decoded in (".", ".."):
        return raw
    try:
        return check_item_id(decoded)
    except UnsafeItemId:
        return raw
