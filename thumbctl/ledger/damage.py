"""Damaged rows: a stored value thumbctl parses that does not parse (a JSON document cut short or
garbled, a ratio that is no ``W:H``) or parses without what thumbctl needs (a profile without
``upscale``, a size that is text: SQLite stores any type), while the rest of the ledger is sound.

The values parsed are :data:`PARSED_COLUMNS`. A command that needs such a value raises
:class:`~thumbctl.core.errors.RowDamaged` (``ledger_corrupt``, exit 74) naming the table, row and
column; a listing shows the other rows and marks the damaged one (:class:`DamagedItemView`); and
``reconcile`` reports each as a ``damaged_row`` finding, which ``--repair`` settles for an item:
failed with ``ledger_corrupt`` and its result cleared, logged, so ``retry`` renders it again. A
batch's own documents cannot be rebuilt from anything else: that is reported, never repaired.
(Text that is not UTF-8 fails SQLite's fetch of the whole row, before any of this: see
:func:`~thumbctl.ledger.connection.ledger_fault`.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from ..core.errors import RowDamaged
from ..core.models import ItemState, ItemView, PublishedItem
from ..core.profile import SettingError, parse_ratio
from .backend import Backend, Row
from .backend import record as from_row
from .sql import damage as sql
from .timefmt import iso, stored_seconds
from .transitions import Transitions

#: (table, column) of every stored value thumbctl parses: JSON objects, ratios and the locations of
#: output folders and objects (an absolute path or an ``s3://`` URL).
PARSED_COLUMNS = (
    ("batches", "profile"),
    ("batches", "limits"),
    ("batches", "out_dir"),
    ("items", "result"),
    ("items", "ratio"),
    ("items", "object_path"),
)
#: What a batch's profile must hold, and of which type, for a worker to render its items and for
#: reconcile to know their sizes: a profile without one is damaged, never read with a guessed default
#: (a guess could make ``--repair`` replace sound thumbnails).
PROFILE_NEEDS: dict[str, type] = {"upscale": bool, "crop": str, "background": str}
#: An item's whole numbers that reconcile's check of its object needs (SQLite stores any type).
ITEM_NUMBERS = ("size", "source_width", "source_height")
#: An item's stored times that decide when it is taken up again: one that does not parse counts as
#: passed (:func:`~thumbctl.ledger.timefmt.has_passed`), so it holds no item for ever.
ITEM_TIMES = ("not_before", "lease_expires_at")
#: What repairs a batch's own document: nothing in the ledger holds it again.
BATCH_WAY_OUT = "restore a backup of the ledger, or submit its photos again as a new batch"


@dataclass(frozen=True)
class Damage:
    """One stored value that does not parse: where it is and why."""

    table: str
    row: str
    column: str
    detail: str
    batch_id: str
    #: The item's id, for a row of ``items``.
    item_id: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"table": self.table, "row": self.row, "column": self.column, "detail": self.detail}

    def describe(self) -> str:
        return f"the ledger's {self.table} row {self.row} has a damaged {self.column} ({self.detail})"


@dataclass(frozen=True)
class DamagedItemView(ItemView):
    """An item listed although a value of its row does not parse: what could be read, marked."""

    damage: Damage | None = None

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), "damaged": self.damage.to_json() if self.damage else None}


def is_location(text: str | None) -> bool:
    """Whether ``text`` can be where thumbctl put something: an absolute path or an ``s3://`` URL."""
    return text is not None and (text.startswith("/") or text.startswith("s3://"))


def is_object_path(text: str | None) -> bool:
    """Whether ``text`` can name an object of a store (or its preview): ``<store>/objects/<xx>/<name>``."""
    parts = (text or "").split("/")
    return is_location(text) and len(parts) >= 4 and parts[-3] == "objects"


def needed_location(table: str, row: object, column: str, text: str) -> str:
    """A stored location the command cannot do without: RowDamaged when it is none."""
    if not is_location(text):
        raise RowDamaged(table, row, column, f"{text!r} is no absolute path or s3:// URL", BATCH_WAY_OUT)
    return text


def json_object(text: str | None) -> dict[str, object] | None:
    """The JSON object stored as ``text`` (None when nothing is stored); ValueError saying why not."""
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"a JSON {type(doc).__name__}, not an object")
    return doc


def batch_profile(text: str | None) -> dict[str, object]:
    """A batch's stored profile: a JSON object with each of :data:`PROFILE_NEEDS`; ValueError saying why not."""
    doc = json_object(text)
    if doc is None:
        raise ValueError("none is stored")
    for key, kind in PROFILE_NEEDS.items():
        if not isinstance(doc.get(key), kind):
            held = "missing" if key not in doc else f"a {type(doc[key]).__name__}"
            raise ValueError(f"its {key!r} is {held}, not a {kind.__name__}")
    return doc


def is_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number_damage(row: Row) -> tuple[str, str] | None:
    """The first of an item row's :data:`ITEM_NUMBERS` that holds something else than a whole number
    (or nothing), and what it holds."""
    for column in ITEM_NUMBERS:
        if row[column] is not None and not is_number(row[column]):
            return column, f"{row[column]!r} is no whole number"
    return None


def needed_number(table: str, row: object, column: str, value: object, way_out: str) -> int:
    """A stored whole number the command cannot do without: RowDamaged when it is something else."""
    if not is_number(value):
        raise RowDamaged(table, row, column, f"{value!r} is no whole number", way_out)
    return value  # type: ignore[return-value] - is_number checked it


def item_way_out(batch_id: str) -> str:
    return (
        f"`thumbctl reconcile --repair` records the item failed (ledger_corrupt), then `thumbctl retry {batch_id}` "
        "renders it again"
    )


def needed_item_result(row: int, batch_id: str, text: str | None) -> dict[str, object] | None:
    """An item's stored result, which the command cannot do without: RowDamaged when it does not parse."""
    try:
        return json_object(text)
    except ValueError as exc:
        raise RowDamaged("items", row, "result", str(exc), item_way_out(batch_id)) from None


def needed_batch_document(batch_id: str, column: str, text: str | None) -> dict[str, object] | None:
    """A batch's stored ``profile`` or ``limits``: RowDamaged when it does not parse."""
    try:
        return json_object(text)
    except ValueError as exc:
        raise RowDamaged("batches", batch_id, column, str(exc), BATCH_WAY_OUT) from None


def loose_object(text: str | None) -> dict[str, object] | None:
    """A stored JSON object, or None when it does not parse (a value only a figure or a hint needs)."""
    try:
        return json_object(text)
    except ValueError:
        return None


def item_view(row: Row, batch_id: str) -> ItemView:
    """The listed view of an item row (selected with its ``id``): marked when its result does not parse."""
    state = ItemState(row["state"])
    try:
        result = json_object(row["result"])
    except ValueError as exc:
        damage = Damage("items", str(row["id"]), "result", str(exc), batch_id, row["item_id"])
        return from_row(DamagedItemView, row, state=state, result=None, damage=damage)
    return from_row(ItemView, row, state=state, result=result)


def shown_as_failure(item: ItemView) -> ItemView:
    """A page's view of an item: one whose row is damaged as a failure naming what is damaged
    (what it rendered is not known), any other as it is."""
    if not isinstance(item, DamagedItemView) or item.damage is None:
        return item
    return replace(item, state=ItemState.FAILED, error_code="ledger_corrupt", error_detail=item.damage.describe())


def noting_damage(items: Iterable[ItemView], damaged: list[Damage]) -> Iterator[ItemView]:
    """``items`` as they come, adding the damage of each marked one to ``damaged``."""
    for item in items:
        if isinstance(item, DamagedItemView) and item.damage is not None:
            damaged.append(item.damage)
        yield item


def item_damage(row: Row) -> Damage | None:
    """What does not parse in an item row (``id``, ``batch_id``, ``item_id``, ``ratio``, ``result``,
    ``object_path``, :data:`ITEM_NUMBERS` and :data:`ITEM_TIMES`)."""
    try:
        json_object(row["result"])
    except ValueError as exc:
        return Damage("items", str(row["id"]), "result", str(exc), row["batch_id"], row["item_id"])
    try:
        parse_ratio(row["ratio"])
    except SettingError as exc:
        return Damage("items", str(row["id"]), "ratio", str(exc), row["batch_id"], row["item_id"])
    if row["object_path"] is not None and not is_object_path(row["object_path"]):
        detail = f"{row['object_path']!r} is no object of a store (<store>/objects/<xx>/<name>)"
        return Damage("items", str(row["id"]), "object_path", detail, row["batch_id"], row["item_id"])
    number = number_damage(row)
    if number is not None:
        return Damage("items", str(row["id"]), number[0], number[1], row["batch_id"], row["item_id"])
    for column in ITEM_TIMES:
        if row[column] is not None and stored_seconds(row[column]) is None:
            detail = f"{row[column]!r} is no time"
            return Damage("items", str(row["id"]), column, detail, row["batch_id"], row["item_id"])
    return None


def published_item(row: Row) -> PublishedItem | None:
    """A published item as reconcile checks it, from a row with its batch's ``profile`` and its
    ``result`` (the recorded size and digest of its object); None when a value of its row does not
    parse (:meth:`DamagedRows.damaged_rows` reports it)."""
    try:
        profile = batch_profile(row["profile"])
        result = json_object(row["result"]) or {}
        parse_ratio(row["ratio"])
    except (ValueError, SettingError):
        return None
    if not all(is_number(row[column]) for column in ITEM_NUMBERS):
        return None
    if not (is_object_path(row["object_path"]) and is_location(row["out_dir"])):
        return None
    size, digest = result.get("output_bytes"), result.get("output_sha256")
    return from_row(
        PublishedItem,
        row,
        row=row["id"],
        profile=profile,
        fit=row["fit"] or "cover",
        owns_friendly_name=bool(row["owns"]),
        expired=bool(row["expired"]),
        output_bytes=size if isinstance(size, int) else None,
        output_sha256=digest if isinstance(digest, str) else None,
    )


def batch_damage(row: Row) -> list[Damage]:
    """What does not parse in a batch row (``batch_id``, ``profile``, ``limits``, ``out_dir``)."""
    found = []
    for column in ("profile", "limits"):
        try:
            batch_profile(row[column]) if column == "profile" else json_object(row[column])
        except ValueError as exc:
            found.append(Damage("batches", row["batch_id"], column, str(exc), row["batch_id"]))
    if not is_location(row["out_dir"]):
        detail = f"{row['out_dir']!r} is no absolute path or s3:// URL"
        found.append(Damage("batches", row["batch_id"], "out_dir", detail, row["batch_id"]))
    return found


class DamagedRows:
    """The upkeep port's half for damaged rows: finding them, and settling a damaged item."""

    db: Backend
    log: Transitions

    def damaged_rows(self) -> Iterator[Damage]:
        for batch in self.db.execute(sql.BATCH_VALUES).fetchall():
            yield from batch_damage(batch)
        with self.db.reading(), self.db.stream(sql.ITEM_VALUES, ()) as rows:
            found = [damage for damage in map(item_damage, rows) if damage is not None]
        yield from found

    def batch_document_fault(self) -> RowDamaged | None:
        for batch in self.db.execute(sql.BATCH_VALUES).fetchall():
            for damage in batch_damage(batch):
                return RowDamaged(damage.table, damage.row, damage.column, damage.detail, BATCH_WAY_OUT)
        return None

    def fail_damaged_item(self, row: int) -> str | None:
        with self.db.write() as now:
            found = self.db.execute(sql.ITEM_NOW, (row,)).fetchone()
            damage = None if found is None else item_damage({**_as_dict(found), "item_id": None})
            if found is None or damage is None or damage.column != "result":
                return None
            state = found["state"]
            detail = f"reconcile: {damage.describe()}; `thumbctl retry {found['batch_id']}` renders it again"
            self.db.execute(sql.CLEAR_RESULT, (row,))
            if state == ItemState.FAILED:
                self.log.event(
                    iso(now), found["batch_id"], row, state, None, state, error_code="ledger_corrupt", detail=detail
                )
                return state
            moved = self.log.move(iso(now), [row], state, ItemState.FAILED, error_code="ledger_corrupt", detail=detail)
            return ItemState.FAILED if moved else None


def _as_dict(row: Row) -> dict[str, object]:
    return {name: row[name] for name in row.keys()}  # noqa: SIM118 - a row has keys(), not iteration by name
