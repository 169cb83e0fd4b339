"""The ``--allow-url`` rule: a URL is admitted when it is under an allowed prefix as the server will
read it.

A server maps a request's path to a resource after percent-decoding it and removing its
dot-segments, so the path is compared in that form (:func:`readings`), the prefix's too:
``/public/%2e%2e/private/x.jpg`` is ``/private/x.jpg``, under no ``/public/`` prefix. Servers
differ, so the path must be under the prefix in every reading: escapes decoded
not at all, once, twice… until none is left (``%252e`` is no way out either), a backslash a slash
(servers on Windows read it so) or not, a segment that is ``..`` once its ``;parameters`` are cut
(``..;``, which some servers read as ``..``) a dot-segment or not; runs of slashes count as one
(many servers merge them). Scheme, host and port must be the prefix's exactly (the port its
scheme's default when the URL names none). The URL itself is requested as it was given: only the
comparison uses these forms.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def remove_dot_segments(path: str, *, parameters: bool = True) -> str:
    """``path`` without its ``.`` and ``..`` segments (RFC 3986 §5.2.4, segment by segment; a
    ``..`` at the root stays at the root, and a path that ends in a dot-segment ends in a slash);
    ``parameters``: a segment's ``;parameters`` are cut before it is compared (``..;`` is ``..``)."""
    segments = path.split("/")
    kept: list[str] = []
    for n, segment in enumerate(segments):
        bare = segment.split(";", 1)[0] if parameters else segment
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


def decodings(path: str) -> list[str]:
    """``path`` percent-decoded 0, 1, 2, … times, until decoding changes nothing (undecoded, its
    escapes upper-cased, so ``%2f`` and ``%2F`` compare equal)."""
    found = [re.sub("%[0-9a-fA-F]{2}", lambda escape: escape.group(0).upper(), path)]
    while "%" in path and (plain := unquote(path)) != path:
        found.append(path := plain)
    return found


def readings(path: str, depth: int) -> list[str]:
    """``path`` as servers read it: decoded 0 to ``depth - 1`` times (the last decoding repeated when
    it decodes to its end sooner), a backslash a slash or not, ``..;`` a dot-segment or not; each
    with runs of slashes merged and its dot-segments removed."""
    levels = decodings(path)
    found = []
    for level in range(depth):
        decoded = levels[min(level, len(levels) - 1)]
        for backslash, parameters in itertools.product((True, False), repeat=2):
            text = decoded.replace("\\", "/") if backslash else decoded
            found.append(remove_dot_segments(re.sub("/+", "/", "/" + text), parameters=parameters))
    return found


@dataclass(frozen=True)
class Place:
    """A URL taken apart for the comparison: scheme, host and port as given, the path as requested."""

    scheme: str
    host: str
    port: int
    path: str

    def under(self, prefix: Place) -> bool:
        """Whether this place is under ``prefix`` however a server reads the paths (every reading of
        the path under the prefix read the same way)."""
        if (self.scheme, self.host, self.port) != (prefix.scheme, prefix.host, prefix.port):
            return False
        depth = max(len(decodings(self.path)), len(decodings(prefix.path)))
        pairs = zip(readings(self.path, depth), readings(prefix.path, depth), strict=True)
        return all(path.startswith(top) for path, top in pairs)


def place_of(scheme: str, host: str, port: int | None, path: str) -> Place:
    scheme = scheme.lower()
    return Place(scheme, host.lower().strip("[]"), port or DEFAULT_PORTS.get(scheme, 0), path or "/")


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
