"""Where a store or an output folder lives: a local folder, or a prefix of an S3-compatible bucket.

A location is written the way a user types it: a path (``thumbs``, ``/srv/store``) or
``s3://bucket/prefix``. The ledger records it in that form (a local folder as its absolute path),
so every host reads the same text back. :func:`object_store_at` and :func:`output_target_at` are
the one place that turns a location into the implementation of its interface; the S3 one is
imported only when an ``s3://`` location is used, so the local tool needs no S3 client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.s3location import S3_SCHEME, BadLocation, S3Location, S3Options, is_s3, parse_s3
from .layout import object_path_in, preview_path_of

if TYPE_CHECKING:
    from .objects import ObjectStore
    from .outputs import OutputTarget

__all__ = [
    "S3_SCHEME",
    "BadLocation",
    "S3Location",
    "S3Options",
    "is_s3",
    "name_in",
    "object_name_of",
    "object_path_in",
    "object_store_at",
    "output_target_at",
    "parse_s3",
    "store_location_of",
    "use_options",
    "current_options",
    "object_store_of",
    "preview_path_of",
    "object_of_preview",
]


def object_store_at(location: str, options: S3Options | None = None) -> ObjectStore:
    """The object store at ``location`` (a local folder, or ``s3://bucket/prefix``)."""
    if is_s3(location):
        from .s3 import S3ObjectStore

        return S3ObjectStore(parse_s3(location), options or current_options())
    from .objects import LocalObjectStore

    return LocalObjectStore(location)


def output_target_at(location: str, options: S3Options | None = None) -> OutputTarget:
    """The output target at ``location`` (a local folder, or ``s3://bucket/prefix``)."""
    if is_s3(location):
        from .s3 import S3OutputTarget

        return S3OutputTarget(parse_s3(location), options or current_options())
    from .outputs import LocalOutputTarget

    return LocalOutputTarget(location)


#: The S3 settings of this process (thumbctl's settings, else the AWS defaults): set once by the
#: command line or a worker's configuration (:func:`use_options`), used when a caller gives none.
_OPTIONS = [S3Options()]


def use_options(options: S3Options) -> None:
    """Make ``options`` the S3 settings every store and target of this process is opened with."""
    _OPTIONS[0] = options


def current_options() -> S3Options:
    """The S3 settings this process uses (see :func:`use_options`)."""
    return _OPTIONS[0]


def store_location_of(object_path: str) -> str:
    """The store an object (or its preview) lies in, by the layout both kinds share:
    ``<store>/objects/<xx>/<name>`` -> ``<store>``. ValueError for a path of another shape."""
    parts = object_path.rsplit("/", 3)
    if len(parts) != 4 or parts[1] != "objects" or not parts[0]:
        raise ValueError(f"{object_path} is not an object of a store (<store>/objects/<xx>/<name>)")
    if is_s3(object_path):
        return parts[0]
    from .objects import store_root_of

    return store_root_of(object_path)


def object_name_of(object_path: str) -> str:
    """The object's name in its store (``<key>.<ext>``)."""
    return object_path.rsplit("/", 1)[-1]


def object_of_preview(preview_path: str) -> str:
    """An object path whose preview is ``preview_path`` (the extension does not matter to a preview)."""
    return preview_path.removesuffix(".preview.jpg") + ".jpg"


def name_in(location: str, path: str) -> str:
    """The name of ``path`` relative to the output location it lies in; ValueError outside it."""
    head = location.rstrip("/") + "/"
    if not path.startswith(head) or len(path) == len(head):
        raise ValueError(f"{path} is not inside {location}")
    return path[len(head) :]


def documents_of(manifest_path: str) -> str:
    """Where a batch's documents live (``--documents``, by default OUT), from its manifest's path
    ``<documents>/batches/<batch_id>.json``. ValueError for a path of another shape."""
    parts = manifest_path.rsplit("/", 2)
    if len(parts) != 3 or parts[1] != "batches" or not parts[0]:
        raise ValueError(f"{manifest_path} is not a batch document (<documents>/batches/<batch_id>.json)")
    return parts[0]


def object_store_of(object_path: str, options: S3Options | None = None) -> ObjectStore:
    """The store an object path lies in (see :func:`store_location_of`)."""
    return object_store_at(store_location_of(object_path), options)
