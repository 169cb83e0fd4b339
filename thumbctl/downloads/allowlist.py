"""The ``--allow-url`` rule: a URL is admitted when it is under an allowed prefix as the server will
read it.

A server maps a request's path to a resource after percent-decoding it and removing its
dot-segments, so the path is compared in that form (:func:`resource_path`), the prefix's too:
``/public/%2e%2e/private/x.jpg`` is ``/private/x.jpg``, under no ``/public/`` prefix. Escapes are
decoded again while any is left (``%252e`` is no way out either), a backslash counts as a slash
(servers on Windows read it so), runs of slashes count as one (many servers merge them), and a
segment that is ``.`` or ``..`` once its ``;parameters``
are cut (``..;``, which some servers read as ``..``) is a dot-segment. Scheme, host and port
must be the prefix's exactly (the port its scheme's default when the URL names none). The URL
itself is requested as it was given: only the comparison uses this form.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from ..records import record

DEFAULT_PORTS = {"http": 80, "https": 443}


def remove_dot_segments(path: str) -> str:
    """``path`` without its ``.`` and ``..`` segments (RFC 3986 §5.2.4, segment by segment; a
    ``..`` at the root stays at the root, and a path that ends in a dot-segment ends in a slash)."""
    segments = path.split("/")
    kept: list[str] = []
    for n, segment in enumerate(segments):
        bare = segment.split(";", 1)[0]
        last = n == len(segments) - 1
        if bare == "..":
            if len(kept) > 1 or (kept and kept[0] != ""):
                kept.pop()
        elif bare != ".":
            kept.append(segment)
            continue
        if last:
            kept.append("")
    return "/".join(kept)


def resource_path(path: str) -> str:
    """A URL's path as a server reads it (see the module's docstring)."""
    while "%" in path and (decoded := unquote(path)) != path:
        path = decoded
    path = re.sub("/+", "/", "/" + path.replace("\\", "/"))
    return remove_dot_segments(path)


@record
class Place:
    """A URL taken apart for the comparison: scheme, host and port as given, path as a server reads it."""

    scheme: str
    host: str
    port: int
    path: str

    def under(self, prefix: Place) -> bool:
        return (self.scheme, self.host, self.port) == (
            prefix.scheme,
            prefix.host,
            prefix.port,
        ) and self.path.startswith(prefix.path)


def place_of(scheme: str, host: str, port: int | None, path: str) -> Place:
    scheme = scheme.lower()
    return Place(scheme, host.lower().strip("[]"), port or DEFAULT_PORTS.get(scheme, 0), resource_path(path or "/"))


def prefix_place(prefix: str) -> Place | None:
    """An ``--allow-url`` prefix taken apart (None: it names no usable place)."""
    try:
        parts = urlsplit(prefix)
        return place_of(parts.scheme, parts.hostname or "", parts.port, parts.path)
    except ValueError:
        return None


def is_allowed(place: Place, prefixes: tuple[str, ...]) -> bool:
    """Whether ``place`` is under one of ``prefixes`` (no prefixes: every URL is)."""
    if not prefixes:
        return True
    return any(p is not None and place.under(p) for p in map(prefix_place, prefixes))
