"""Where a store or an output folder lives: a local folder, or a prefix of an S3-compatible bucket.

A location is written the way a user types it: a path (``thumbs``, ``/srv/store``) or
``s3://bucket/prefix``. The ledger records it in that form (a local folder as its absolute path),
so every host reads the same text back. :func:`object_store_at` and :func:`output_target_at` are
the one place that turns a location into the implementation of its interface; the S3 one is
imported only when an ``s3://`` location is used, so the local tool needs no S3 client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .s3location import S3_SCHEME, BadLocation, S3Location, S3Options, is_s3, parse_s3

if TYPE_CHECKING:
    from .objects import ObjectStore
    from .outputs import OutputTarget

__all__ = [
    "S3_SCHEME",
    "BadLocation",
    "S3Location",
    "S3Options",
    "is_s3",
    "object_store_at",
    "output_target_at",
    "parse_s3",
]


def object_store_at(location: str, options: S3Options | None = None) -> ObjectStore:
    """The object store at ``location`` (a local folder, or ``s3://bucket/prefix``)."""
    if is_s3(location):
        from .s3 import S3ObjectStore

        return S3ObjectStore(parse_s3(location), options or S3Options())
    from .objects import LocalObjectStore

    return LocalObjectStore(location)


def output_target_at(location: str, options: S3Options | None = None) -> OutputTarget:
    """The output target at ``location`` (a local folder, or ``s3://bucket/prefix``)."""
    if is_s3(location):
        from .s3 import S3OutputTarget

        return S3OutputTarget(parse_s3(location), options or S3Options())
    from .outputs import LocalOutputTarget

    return LocalOutputTarget(location)
