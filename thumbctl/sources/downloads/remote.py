"""URL sources (http, https and ``s3://`` ones) read as a folder's sources are: digested and
probed at submit (through the stat cache), downloaded again and checked against that digest by the
worker.

The stat cache keeps a URL's validators in the fields a file's stat signature fills: ``size``
is the body's length, ``inode`` a number made from the ``ETag`` and ``mtime_ns`` the
``Last-Modified`` time (0 for what the answer did not give). A re-submit asks again, and when
the answer's ``ETag`` (or its ``Last-Modified`` and ``Content-Length``) is the one cached, the
body is not read: the cached digest and header stand.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from functools import partial

from ...config.s3location import is_s3
from ...core.errors import ItemFailure
from ...core.models import CachedSource
from ...core.profile import Limits, UrlRules
from ...imaging import SNIFF_BYTES, probe
from .fetch import Download, download, shown_url
from .objects import read_object


def validator_number(etag: str | None) -> int:
    """A positive 63-bit number standing for an ``ETag`` (0: none)."""
    if not etag:
        return 0
    return int.from_bytes(hashlib.sha256(etag.strip().encode()).digest()[:8], "big") >> 1 or 1


def modified_ns(text: str | None) -> int:
    """``Last-Modified`` as nanoseconds since the epoch (0: none or unreadable)."""
    if not text:
        return 0
    import email.utils  # only for URL sources (start-up time of every submit)

    try:
        return int(email.utils.parsedate_to_datetime(text).timestamp()) * 1_000_000_000
    except (TypeError, ValueError, OverflowError):
        return 0


def _unchanged(cached: CachedSource, headers: Mapping[str, str]) -> bool:
    length = headers.get("Content-Length")
    if length is not None and length.strip() != str(cached.size):
        return False
    etag = validator_number(headers.get("ETag"))
    if etag and cached.inode:
        return etag == cached.inode
    modified = modified_ns(headers.get("Last-Modified"))
    return bool(modified and length is not None and modified == cached.mtime_ns)


def inspect_url(url: str, cached: CachedSource | None, limits: Limits, rules: UrlRules) -> tuple[CachedSource, bool]:
    """Download, digest and probe one URL source, or reuse ``cached`` when the answer's
    validators match it; returns (what the source holds, whether it came from the cache)."""
    known = cached if cached is not None and cached.dev == 0 else None
    got = _fetched(url, rules, limits.max_bytes, known)
    if got.data is None and cached is not None:
        if cached.width * cached.height > limits.max_pixels:
            raise ItemFailure(
                "too_many_pixels", f"{cached.width}x{cached.height} is over the limit of {limits.max_pixels / 1e6:g} MP"
            )
        if cached.size > limits.max_bytes:
            raise ItemFailure("too_large", f"{shown_url(url)}: {cached.size / 1e6:.1f} MB is over the limit")
        return cached, True
    data = got.data or b""
    info = probe(io.BytesIO(data), data[:SNIFF_BYTES], limits.max_pixels)
    source = CachedSource(
        url,
        0,
        validator_number(got.etag),
        len(data),
        modified_ns(got.last_modified),
        0,
        hashlib.sha256(data).hexdigest(),
        info.format,
        info.width,
        info.height,
        info.orientation,
    )
    return source, False


def _fetched(url: str, rules: UrlRules, max_bytes: int, known: CachedSource | None) -> Download:
    """A download of an http(s) URL, or a read of an ``s3://`` object, as a :class:`Download`; its
    body is left unread when its validators match ``known``."""
    if not is_s3(url):
        return download(url, rules, max_bytes, partial(_unchanged, known) if known else None)

    def same(size: int, etag: str) -> bool:
        return known is not None and known.size == size and known.inode == validator_number(etag)

    got = read_object(url, max_bytes, same)
    return Download(got.data, url, got.etag, None, got.size)


def read_verified_url(url: str, digest: str, max_bytes: int, rules: UrlRules) -> bytes:
    """The bytes of a URL source, downloaded again, if they still are the ones accepted at submit."""
    data = _fetched(url, rules, max_bytes, None).data or b""
    if hashlib.sha256(data).hexdigest() != digest:
        raise ItemFailure("source_changed", f"{shown_url(url)} changed since it was submitted")
    return data
