"""``s3://bucket/key`` sources: read through the S3 client of the storage (the ``s3`` extra), with
the process's S3 settings (``THUMBCTL_S3_*`` and config keys, else the AWS variables and files),
under the byte limit.

The object's size and ETag (one HEAD) come first: when they are the ones the stat cache holds,
the body is not read; the size is checked against the limit before the body is read, and the
body is never read past it. Failures are the URL sources' item codes: a missing key or bucket is
``source_missing``, refused access ``source_http_error``, a server that cannot be reached
``source_unreachable`` (transient).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ...config.s3location import S3Location, S3Options, parse_s3
from ...core.errors import BucketForbidden, BucketMissing, ItemFailure, StorageUnreachable, UsageError
from ...storage.locations import current_options


@dataclass(frozen=True)
class ObjectRead:
    """What reading an object gave: its bytes (None when ``unchanged`` said its size and ETag match
    what is known, and the body was not read), its ETag and size."""

    data: bytes | None
    etag: str
    size: int


@contextmanager
def _as_item_failure(url: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        raise ItemFailure("source_missing", f"{url}: no such object") from None
    except BucketMissing as exc:
        raise ItemFailure("source_missing", exc.message) from None
    except BucketForbidden as exc:
        raise ItemFailure("source_http_error", exc.message) from None
    except StorageUnreachable as exc:
        raise ItemFailure("source_unreachable", exc.message) from None
    except OSError as exc:
        raise ItemFailure("io_error", f"{url}: {exc.strerror or exc}") from None


def read_object(
    url: str, max_bytes: int, unchanged: Callable[[int, str], bool] | None = None, options: S3Options | None = None
) -> ObjectRead:
    """The object ``url`` names, read under ``max_bytes``; see the module's docstring."""
    try:
        from ...storage import s3client
    except ImportError:
        message = "s3:// sources need obstore: pip install 'thumbctl[s3]'"
        raise UsageError(message, code="downloads_unavailable") from None
    try:
        location = parse_s3(url)
    except UsageError as exc:
        raise ItemFailure("source_http_error", exc.message) from None
    if not location.prefix:
        raise ItemFailure("source_http_error", f"{url} names a bucket, not an object")
    store = s3client.client(S3Location(location.bucket), options or current_options())
    key = location.prefix
    with _as_item_failure(url), s3client.translated(S3Location(location.bucket), key):
        found = s3client.head(store, key)
        if found is None:
            raise FileNotFoundError(2, "no such object", url)
        size, etag, _ = found
        if unchanged is not None and unchanged(size, etag):
            return ObjectRead(None, etag, size)
        if size > max_bytes:
            raise ItemFailure("too_large", f"{url}: {size / 1e6:.1f} MB is over the limit of {max_bytes / 1e6:g} MB")
        data = s3client.read_bounded(store, key, max_bytes)
    if data is None:
        raise ItemFailure("too_large", f"{url}: more than {max_bytes / 1e6:g} MB")
    return ObjectRead(data, etag, len(data))


def object_names(location: S3Location, options: S3Options | None = None) -> list[str]:
    """The names (keys relative to the prefix) of every object under ``location``, sorted: the
    scan of ``submit s3://bucket/prefix/``. A missing bucket, refused access or a server that
    cannot be reached ends the command with its coded error."""
    try:
        import obstore

        from ...storage import s3client
    except ImportError:
        message = "s3:// sources need obstore: pip install 'thumbctl[s3]'"
        raise UsageError(message, code="downloads_unavailable") from None
    bucket = S3Location(location.bucket)
    store = s3client.client(bucket, options or current_options())
    prefix = f"{location.prefix}/" if location.prefix else None
    names = []
    with s3client.translated(bucket, location.prefix or "/"):
        for batch in obstore.list(store, prefix=prefix, chunk_size=1000):
            names += [name for meta in batch if (name := location.name_of(meta["path"]))]
    return sorted(names)
