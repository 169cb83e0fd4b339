"""The catalogue port of the ledger: the live names of an OUT, one record each, whichever batch
published them (:class:`~thumbctl.core.catalogue.CatalogueEntry`), and the generation of its site
manifest (``OUT/thumbctl.json``).

:class:`CataloguePort` is the protocol its readers (``thumbctl catalogue``, the sheet, the site
manifest) are typed against, documented there once; :class:`Catalogue` implements it over SQL for
every backend. It only reads, but for the generation it counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Protocol

from ..config.options import SiteMarkup
from ..core.catalogue import CatalogueEntry
from .backend import Backend, Row
from .damage import loose_object
from .intake import CARRIED_FIELDS
from .queue import Claim, claimed_item
from .sql import catalogue as sql
from .timefmt import iso
from .transitions import chunks


class CataloguePort(Protocol):
    """The catalogue port: what is live in an OUT now, and what made it."""

    def entries(self, out_dir: str) -> list[CatalogueEntry]:
        """Every live name of ``out_dir`` (as recorded: an absolute folder or an ``s3://`` prefix),
        in name order: none that was released to the user or removed."""

    def outs(self) -> list[tuple[str, int]]:
        """Each OUT holding live names, with how many, in order."""

    def snapshot(self, out_dir: str) -> tuple[int, list[CatalogueEntry]]:
        """The entries of ``out_dir`` with the next generation of its site manifest, taken in one
        write: a later generation never holds an older catalogue than an earlier one."""

    def markup(self, out_dir: str) -> SiteMarkup:
        """How the documents of ``out_dir`` refer to its thumbnails (the newest submit's ``--sizes``
        and ``--base-url``; the defaults before any)."""

    def record_markup(self, out_dir: str, markup: SiteMarkup) -> bool:
        """Record the markup of ``out_dir``'s documents; whether it differs from what was recorded."""

    def name_claims(self, out_dir: str, names: list[str]) -> list[Claim]:
        """The items that published ``names`` of ``out_dir``, as claims (one per batch and source;
        no lease): what choosing their windows again needs."""

    def names_in_flight(self, out_dir: str, names: list[str]) -> set[str]:
        """Those of ``names`` (of ``out_dir``) that an unfinished item of any batch, of any process,
        will publish: a render of them that has not ended."""

    def record_windows(self, renders: list[tuple[str, dict[str, object]]]) -> None:
        """Record each (derivative key, render result) in one transaction: a window chosen again."""

    def stamp(self, out_dir: str) -> str:
        """A short text that changes whenever the entries of ``out_dir``, a crop fix or an approval
        there changes (a cache of them is current while it is the same)."""

    def reviews(self, out_dir: str) -> dict[str, str]:
        """When each photo of ``out_dir`` was last approved in the review page, by content digest."""

    def record_review(self, out_dir: str, source_digest: str) -> str:
        """Record that the photo of ``source_digest`` in ``out_dir`` was approved now; returns when."""


class Catalogue:
    """:class:`CataloguePort` over SQL."""

    def __init__(self, db: Backend) -> None:
        self.db = db

    def entries(self, out_dir: str) -> list[CatalogueEntry]:
        return list(_entries(self.db.execute(sql.ENTRIES, (out_dir,)).fetchall()))

    def outs(self) -> list[tuple[str, int]]:
        return [(row["out_dir"], int(row["names"])) for row in self.db.execute(sql.OUTS).fetchall()]

    def markup(self, out_dir: str) -> SiteMarkup:
        return SiteMarkup.from_json(loose_value(self.db.scalar(sql.META_VALUE, (f"markup:{out_dir}",))))

    def record_markup(self, out_dir: str, markup: SiteMarkup) -> bool:
        name = f"markup:{out_dir}"
        with self.db.write():
            recorded = SiteMarkup.from_json(loose_value(self.db.scalar(sql.META_VALUE, (name,))))
            if recorded == markup:
                return False
            self.db.execute(sql.SET_META, (name, json.dumps(markup.to_json(), sort_keys=True)))
        return True

    def name_claims(self, out_dir: str, names: list[str]) -> list[Claim]:
        claims: dict[tuple[str, str], list[Row]] = {}
        for chunk in chunks(names):
            for row in self.db.execute(sql.NAME_CLAIMS, (out_dir, *chunk), names=len(chunk)).fetchall():
                claims.setdefault((row["batch_id"], row["source"]), []).append(row)
        return [_claim_of(rows) for rows in claims.values()]

    def names_in_flight(self, out_dir: str, names: list[str]) -> set[str]:
        found: set[str] = set()
        for chunk in chunks(names):
            rows = self.db.execute(sql.NAMES_IN_FLIGHT, (*chunk, out_dir), names=len(chunk)).fetchall()
            found.update(row["friendly_path"] for row in rows)
        return found

    def record_windows(self, renders: list[tuple[str, dict[str, object]]]) -> None:
        if not renders:
            return
        with self.db.write() as now:
            for key, result in renders:
                self.db.execute(sql.RECORD_WINDOW, (key, json.dumps(result, sort_keys=True), iso(now)))

    def stamp(self, out_dir: str) -> str:
        prefix = _review_prefix(out_dir)
        row = self.db.execute(sql.STAMP, (out_dir, out_dir, len(prefix), prefix, len(prefix), prefix)).fetchone()
        return "|".join(str(row[column]) for column in ("names", "changed", "fixes", "fixed", "reviews", "reviewed"))

    def reviews(self, out_dir: str) -> dict[str, str]:
        prefix = _review_prefix(out_dir)
        rows = self.db.execute(sql.REVIEWS, (len(prefix), prefix)).fetchall()
        found = {row["name"][len(prefix) :]: row["value"] for row in rows}
        return {digest: at for digest, at in found.items() if "|" not in digest}  # not another OUT's

    def record_review(self, out_dir: str, source_digest: str) -> str:
        with self.db.write() as now:
            at = iso(now)
            self.db.execute(sql.SET_META, (_review_prefix(out_dir) + source_digest, at))
        return at

    def snapshot(self, out_dir: str) -> tuple[int, list[CatalogueEntry]]:
        name = f"site_generation:{out_dir}"
        with self.db.write():
            self.db.execute(sql.NEXT_GENERATION, (name,))
            generation = int(self.db.scalar(sql.GENERATION, (name,)))
            entries = list(_entries(self.db.execute(sql.ENTRIES, (out_dir,)).fetchall()))
        return generation, entries


def _review_prefix(out_dir: str) -> str:
    return f"reviewed:{out_dir}|"


def loose_value(text: str | None) -> object:
    """A JSON value kept as text, or None when there is none or it does not parse."""
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


def _entries(rows: list[Row]) -> Iterator[CatalogueEntry]:
    for row in rows:
        item = loose_object(row["item_result"]) or {}
        render = loose_object(row["render"]) or {}
        carried = {name: render[name] for name in CARRIED_FIELDS if name in render}
        focus = None if row["focus_x"] is None else (float(row["focus_x"]), float(row["focus_y"]))
        rendered = None if row["rendered_x"] is None else (float(row["rendered_x"]), float(row["rendered_y"]))
        width, height = row["source_width"], row["source_height"]
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
            result=item | carried,  # a reused output's own result has no window: its render's has
            focus=focus,
            rendered_focus=rendered,
            object_path=row["object_path"],
            source_size=(int(width), int(height)) if width and height else None,
            alt=row["alt"] or "",
            version=row["name_version"],
            changed_at=row["changed_at"],
            batch_id=row["batch_id"],
        )


def _claim_of(rows: list[Row]) -> Claim:
    """One batch's items of one source as a claim without a lease."""
    first = rows[0]
    return Claim(
        token="",
        owner="catalogue",
        batch_id=first["batch_id"],
        out_dir=first["out_dir"],
        source_root=first["source_root"],
        source=first["source"],
        source_digest=first["source_digest"],
        source_format=first["source_format"],
        source_width=int(first["source_width"]),
        source_height=int(first["source_height"]),
        profile=loose_object(first["profile"]) or {},
        limits=loose_object(first["limits"]) or {},
        items=tuple(claimed_item(row) for row in rows),
    )
