"""The catalogue port of the ledger: the live names of an OUT, one record each, whichever batch
published them (:class:`~thumbctl.core.catalogue.CatalogueEntry`).

:class:`CataloguePort` is the protocol its readers (``thumbctl catalogue``, the sheet, the site
manifest) are typed against, documented there once; :class:`Catalogue` implements it over SQL for
every backend. It only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from ..core.catalogue import CatalogueEntry
from .backend import Backend, Row
from .damage import loose_object
from .sql import catalogue as sql

#: The fields of a render's result that make a name's placeholder.
_PLACEHOLDER_FIELDS = ("dominant_colour", "lqip")


class CataloguePort(Protocol):
    """The catalogue port: what is live in an OUT now, and what made it."""

    def entries(self, out_dir: str) -> list[CatalogueEntry]:
        """Every live name of ``out_dir`` (as recorded: an absolute folder or an ``s3://`` prefix),
        in name order: none that was released to the user or removed."""

    def outs(self) -> list[tuple[str, int]]:
        """Each OUT holding live names, with how many, in order."""


class Catalogue:
    """:class:`CataloguePort` over SQL."""

    def __init__(self, db: Backend) -> None:
        self.db = db

    def entries(self, out_dir: str) -> list[CatalogueEntry]:
        return list(_entries(self.db.execute(sql.ENTRIES, (out_dir,)).fetchall()))

    def outs(self) -> list[tuple[str, int]]:
        return [(row["out_dir"], int(row["names"])) for row in self.db.execute(sql.OUTS).fetchall()]


def _entries(rows: list[Row]) -> Iterator[CatalogueEntry]:
    for row in rows:
        item = loose_object(row["item_result"]) or {}
        render = loose_object(row["render"]) or {}
        recorded = render if "crop" in render else item  # a reused output's own result has no window
        crop = recorded.get("crop")
        focus = None if row["focus_x"] is None else (float(row["focus_x"]), float(row["focus_y"]))
        yield CatalogueEntry(
            name=row["friendly_path"],
            out_dir=row["out_dir"],
            source=row["source"],
            source_root=row["source_root"],
            source_digest=row["source_digest"],
            ratio=row["ratio"],
            size=int(row["size"]),
            format=row["format"],
            fit=row["fit"] or "cover",
            crop=crop if isinstance(crop, dict) else None,
            focus=focus,
            placeholder={name: str(recorded[name]) for name in _PLACEHOLDER_FIELDS if name in recorded},
            width=_whole(item.get("width", recorded.get("width"))),
            height=_whole(item.get("height", recorded.get("height"))),
            alt=row["alt"] or "",
            version=row["name_version"],
            changed_at=row["changed_at"],
            batch_id=row["batch_id"],
        )


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
