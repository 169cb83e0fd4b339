"""Where a store or an output folder lives: a local folder, or a prefix of an S3-compatible bucket.

A location is written the way a user types it: a path (``thumbs``, ``/srv/store``) or
``s3://bucket/prefix``. The ledger records it in that form (a local folder as its absolute path),
so every host reads the same text back. :func:`object_store_at` and :func:`output_target_at` are
the one place that turns a location into the implementation of its interface; the S3 one is
imported only when an ``s3://`` location is used, so the local tool needs no S3 client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .s3location import S3_SCHEME, BadLocation, S3Location, S3Options, is_s3, parse_s3

if TYPE_CHECKING:
    from .objects import ObjectStore
    from .outputs import OutputTarget

__all__ = [
    "S3_SCHEME",
    "BadLocation",
    "OpenedLocations",
    "S3Location",
    "S3Options",
    "is_s3",
    "name_within",
    "object_path_in",
    "object_place",
    "object_store_at",
    "output_target_at",
    "parse_s3",
]


def object_path_in(location: str, name: str) -> str:
    """The path the ledger records for the object ``name`` (``<key>.<ext>``) of the store at ``location``."""
    return f"{location}/objects/{name[:2]}/{name}"


def object_place(object_path: str) -> tuple[str, str]:
    """The store location and the object's name of a recorded object path
    (``<store>/objects/<k[:2]>/<k>.<ext>``, the same arithmetic for a folder and a bucket);
    ValueError for a path of another shape."""
    shard_path, _, name = object_path.rpartition("/")
    objects, _, shard = shard_path.rpartition("/")
    root, _, folder = objects.rpartition("/")
    if folder != "objects" or not root or not name or name[:2] != shard:
        raise ValueError(f"{object_path} is not an object of a store (<store>/objects/<xx>/<name>)")
    return root, name


def name_within(location: str, path: str) -> str | None:
    """The name of a recorded ``path`` (a thumbnail's, a batch document's) inside the output
    location ``location``, None when it lies outside it."""
    head = location.rstrip("/") + "/"
    return path[len(head) :] if path.startswith(head) and len(path) > len(head) else None


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


@dataclass
class OpenedLocations:
    """The stores and output targets at recorded locations, each made once (an S3 client is not
    free to set up) for a run that visits many objects and names."""

    options: S3Options | None = None
    stores: dict[str, ObjectStore] = field(default_factory=dict)
    targets: dict[str, OutputTarget] = field(default_factory=dict)

    def store(self, location: str) -> ObjectStore:
        if location not in self.stores:
            self.stores[location] = object_store_at(location, self.options)
        return self.stores[location]

    def target(self, location: str) -> OutputTarget:
        if location not in self.targets:
            self.targets[location] = output_target_at(location, self.options)
        return self.targets[location]
