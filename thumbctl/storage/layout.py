"""The layout a store and an output location share, whatever holds them (a folder or a bucket
prefix): paths are text under the location's ``root``, so a path the ledger recorded means the
same to every implementation. Mixed into :class:`~.objects.LocalObjectStore`,
:class:`~.outputs.LocalOutputTarget` and their S3 counterparts."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.profile import Ratio


def object_path_in(store: str, key: str, extension: str) -> str:
    """Where the ledger records an object of ``store`` (a folder or ``s3://bucket/prefix``)."""
    return f"{store}/objects/{key[:2]}/{key}.{extension}"


def preview_path_of(object_path: str) -> str:
    """Where the contact sheet's preview of a source is kept: ``<key>.preview.jpg`` beside its object."""
    head, _, name = object_path.rpartition("/")
    return f"{head}/{name.split('.', 1)[0]}.preview.jpg"


class StoreLayout:
    """``<root>/objects/<k[:2]>/<k>.<ext>``, and each source's preview beside its first object."""

    root: str

    def object_path(self, key: str, extension: str) -> str:
        return object_path_in(self.root, key, extension)

    def path_of(self, name: str) -> str:
        """The path of the object ``name`` (``<key>.<ext>``)."""
        return f"{self.root}/objects/{name[:2]}/{name}"

    @staticmethod
    def preview_path(object_path: str) -> str:
        """The contact sheet's small preview of a source, beside the first object rendered from it
        (``<key>.preview.jpg``: not an object's name, so reconcile and gc never take it for one)."""
        return preview_path_of(object_path)

    @property
    def objects_dir(self) -> str:
        return f"{self.root}/objects"


class OutLayout:
    """``<root>/<name>`` for thumbnails, ``<root>/batches/<batch_id>.{json,html}`` for documents."""

    root: str

    def friendly_path(self, stem: str, ratio: Ratio, extension: str, size: int | None = None) -> str:
        """``OUT/<stem>.<ratio>.<ext>``; with ``size`` (the size asked for, given when a batch asks
        for several sizes) ``OUT/<stem>.<ratio>.<size>.<ext>``."""
        sized = f".{size}" if size is not None else ""
        return f"{self.root}/{stem}.{ratio.slug}{sized}.{extension}"

    def batch_manifest_path(self, batch_id: str) -> str:
        return f"{self.root}/batches/{batch_id}.json"

    def batch_sheet_path(self, batch_id: str) -> str:
        return f"{self.root}/batches/{batch_id}.html"

    @property
    def batches_dir(self) -> str:
        return f"{self.root}/batches"
