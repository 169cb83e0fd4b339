"""Item ids: the rule every id must pass (:func:`check_item_id`), the stems of friendly names, and
ids for file names that cannot be item ids.

A folder may hold legal file names that no item id may carry (:func:`check_item_id`
decides): bytes that are not UTF-8, control characters, a backslash, a segment over
the length limit. Such a file still counts: it becomes a failed item (``unsafe_name``)
whose id spells its path with percent escapes under the ``.unsafe/`` prefix.

The escapes are ``%XX`` for every byte of an undecodable sequence, a control
character, a backslash or a ``%``, so an escaped name is plain, safe text and two
different names never share one (``urllib.parse.unquote_to_bytes`` of each segment
gives the name's bytes back). A folder scan never yields an id whose first segment
starts with a dot (hidden entries are skipped), so no escaped id can equal the id of
a usable file. A segment whose escaped form is over the length limit is cut and ends
in ``%~`` and 16 hex digits of the sha256 of its bytes, which no escape produces.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata

from ..core.naming import relative_path_problem

UNSAFE_PREFIX = ".unsafe"
#: Top-level folders of OUT no item id may use.
RESERVED_TOP_LEVEL = {".tmp"}
#: The longest segment (bytes of UTF-8) an item id may have: a friendly name adds a ratio
#: and an extension to it and must stay under the usual 255-byte file name limit.
MAX_SEGMENT_BYTES = 200
_DIGEST_CHARS = 16
_SHORTENED_MARK = "%~"


class UnsafeItemId(ValueError):
    """An item id that could not be a safe relative path inside OUT; ``reason`` says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_item_id(item_id: str) -> str:
    """Return ``item_id`` if it is a safe relative path inside OUT, else raise.

    Refused: empty ids, text that is not valid UTF-8 (lone surrogates, such as the
    undecodable bytes of a file name), absolute paths, ``.``/``..`` or empty segments,
    backslashes, control characters, segments over 200 bytes and the reserved ``.tmp``
    folder.
    """
    if not item_id:
        raise UnsafeItemId("item id is empty", "is empty")
    reason = _id_problem(item_id)
    if reason is not None:
        raise UnsafeItemId(f"item id {item_id!r} {reason}", reason)
    return item_id


def _id_problem(item_id: str) -> str | None:
    problem = relative_path_problem(item_id)
    if problem is not None:
        return problem
    parts = item_id.split("/")
    if parts[0] in RESERVED_TOP_LEVEL:
        return f"uses the reserved folder {parts[0]!r}"
    if any(len(part.encode()) > MAX_SEGMENT_BYTES for part in parts):
        return f"has a segment over {MAX_SEGMENT_BYTES} bytes"
    return None


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


def escaped_name(path: str) -> str:
    """``path`` (a ``str`` from the file system, undecodable bytes as surrogate escapes)
    with the bytes and characters an id may not hold written as ``%XX``."""
    return "".join(_escaped_tokens(path))


def unsafe_name_id(rel_path: str) -> str:
    """The item id of a scanned file whose relative path cannot be an id: the escaped
    path under ``.unsafe/``, each segment cut to the length limit. It passes
    :func:`check_item_id` (checked here, so nothing downstream sees an unsafe id)."""
    segments = [_escaped_segment(segment) for segment in rel_path.split("/")]
    return check_item_id("/".join([UNSAFE_PREFIX, *segments]))


def _escaped_segment(segment: str) -> str:
    if segment in ("", ".", ".."):  # not a file name, but never a path step either: spelled out
        return "%" if not segment else segment.replace(".", "%2E")
    tokens = _escaped_tokens(segment)
    escaped = "".join(tokens)
    if len(escaped.encode()) <= MAX_SEGMENT_BYTES:
        return escaped
    budget = MAX_SEGMENT_BYTES - len(_SHORTENED_MARK) - _DIGEST_CHARS
    kept: list[str] = []
    for token in tokens:
        budget -= len(token.encode())
        if budget < 0:
            break
        kept.append(token)
    digest = hashlib.sha256(os.fsencode(segment)).hexdigest()[:_DIGEST_CHARS]
    return f"{''.join(kept)}{_SHORTENED_MARK}{digest}"


def _escaped_tokens(text: str) -> list[str]:
    """One token per character of ``text``: the character itself, or its escape."""
    return [_escape_char(ch) for ch in os.fsencode(text).decode("utf-8", "surrogateescape")]


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as surrogateescape carries it
        return f"%{code - 0xDC00:02X}"
    if ch in "%\\" or unicodedata.category(ch) == "Cc":
        return "".join(f"%{byte:02X}" for byte in ch.encode())
    return ch
