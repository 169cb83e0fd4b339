"""Manifest parsers: JSON, JSONL and CSV into one list of entries.

Parsing is strict: anything malformed, an unknown field or a bad ratio or
focal point raises :class:`ManifestError` naming where it is. Path safety
is not judged here (that needs the root); ids are checked by intake.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.profile import Ratio, SettingError, check_fit, parse_ratios

MANIFEST_SUFFIXES = (".json", ".jsonl", ".csv")
_ITEM_FIELDS = {"id", "source", "ratios", "focus", "fit", "alt"}
_CSV_FIELDS = {"id", "source", "ratios", "focus_x", "focus_y", "fit", "alt"}
#: The longest ``alt`` text an item may give, in characters (a description, not an article).
MAX_ALT = 1000
#: A manifest nests lists and objects 4 levels deep at most (``{"items": [{"focus": [x, y]}]}``);
#: deeper ones are refused before anything walks them (the JSON parser itself gives up near 1,000).
MAX_DEPTH = 8


class ManifestError(ValueError):
    """The manifest cannot be read as a whole; the message names the place."""


@dataclass(frozen=True)
class ManifestEntry:
    """One source as a manifest lists it (paths as written, not yet resolved)."""

    source: str
    id: str | None = None
    ratios: tuple[Ratio, ...] | None = None
    focus: tuple[float, float] | None = None
    #: ``cover`` or ``contain`` for this source alone (None: the batch's ``--fit``).
    fit: str | None = None
    #: ``"focus": null``: forget the crop fix remembered for the item's ratios.
    clear_focus: bool = False
    #: The text of the markup's ``alt`` (empty when not given).
    alt: str = ""


@dataclass(frozen=True)
class Manifest:
    entries: tuple[ManifestEntry, ...]
    ratios: tuple[Ratio, ...] | None = None


def is_manifest_path(path: Path) -> bool:
    return path.suffix.lower() in MANIFEST_SUFFIXES


def parse_manifest_text(text: str, suffix: str) -> Manifest:
    """Parse a manifest's text; ``suffix`` (``.json``/``.jsonl``/``.csv``) picks the format."""
    suffix = suffix.lower()
    if suffix == ".json":
        return _parse_json(text)
    if suffix == ".jsonl":
        return _parse_jsonl(text)
    if suffix == ".csv":
        return _parse_csv(text)
    raise ManifestError(f"unknown manifest type {suffix!r}: use .json, .jsonl or .csv")


def _not_utf8(raw: bytes, at: int) -> str:
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "it is UTF-16 text; save it as UTF-8"
    return f"it is not UTF-8 text (byte {at}); save it as UTF-8"


def read_manifest(path: Path) -> Manifest:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ManifestError(_not_utf8(raw, exc.start)) from exc
    return parse_manifest_text(text, path.suffix)


def _parse_json(text: str) -> Manifest:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise ManifestError(_too_deep("the JSON")) from exc
    except ValueError as exc:  # an integer with more digits than Python converts
        raise ManifestError(_too_long("the JSON")) from exc
    ratios = None
    if isinstance(doc, dict):
        _check_text({k: v for k, v in doc.items() if k != "items"}, "top level")
        unknown = set(doc) - {"items", "ratios"}
        if unknown:
            raise ManifestError(f"unknown top-level field(s): {', '.join(sorted(unknown))}")
        if "items" not in doc:
            raise ManifestError('a JSON manifest object needs an "items" list')
        if "ratios" in doc:
            ratios = _ratios(doc["ratios"], "top-level ratios")
        doc = doc["items"]
    if not isinstance(doc, list):
        raise ManifestError('a JSON manifest is a list of items or {"items": [...]}')
    entries = tuple(_entry_from_object(obj, f"item {i + 1}") for i, obj in enumerate(doc))
    return Manifest(entries, ratios)


def _parse_jsonl(text: str) -> Manifest:
    entries = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ManifestError(f"line {lineno}: invalid JSON: {exc.msg}") from exc
        except RecursionError as exc:
            raise ManifestError(_too_deep(f"line {lineno}")) from exc
        except ValueError as exc:
            raise ManifestError(_too_long(f"line {lineno}")) from exc
        entries.append(_entry_from_object(obj, f"line {lineno}"))
    return Manifest(tuple(entries))


def _entry_from_object(obj: object, where: str) -> ManifestEntry:
    if not isinstance(obj, dict):
        raise ManifestError(f'{where}: an item must be an object with a "source"')
    _check_text(obj, where)
    unknown = set(obj) - _ITEM_FIELDS
    if unknown:
        raise ManifestError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    source = obj.get("source")
    if not isinstance(source, str) or not source:
        raise ManifestError(f'{where}: "source" must be a non-empty string')
    _check_path_text(source, where)
    item_id = obj.get("id")
    if item_id is not None and not isinstance(item_id, str):
        raise ManifestError(f'{where}: "id" must be a string')
    ratios = _ratios(obj["ratios"], f"{where}: ratios") if "ratios" in obj else None
    focus = _focus(obj["focus"], where) if obj.get("focus") is not None else None
    clear = "focus" in obj and obj["focus"] is None
    fit = _fit(obj["fit"], where) if obj.get("fit") is not None else None
    alt = _alt(obj.get("alt", ""), where)
    return ManifestEntry(source=source, id=item_id, ratios=ratios, focus=focus, fit=fit, clear_focus=clear, alt=alt)


def _parse_csv(text: str) -> Manifest:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise ManifestError(f"malformed CSV at line {reader.line_num}: {exc}") from exc
    if not rows:
        raise ManifestError("the CSV manifest is empty: it needs a header id,source[,ratios][,focus_x,focus_y][,fit]")
    _check_text(rows[0], "line 1 (header)")
    header = [name.strip() for name in rows[0]]
    _check_csv_header(header)
    entries = []
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ManifestError(f"line {lineno}: {len(row)} fields, the header has {len(header)}")
        cells = dict(zip(header, row, strict=True))
        _check_text(cells, f"line {lineno}")
        entries.append(_entry_from_csv_row(cells, f"line {lineno}"))
    return Manifest(tuple(entries))


def _check_csv_header(header: list[str]) -> None:
    unknown = set(header) - _CSV_FIELDS
    if unknown:
        raise ManifestError(f"CSV header has unknown column(s): {', '.join(sorted(unknown))}")
    if len(set(header)) != len(header):
        raise ManifestError("CSV header repeats a column")
    if "source" not in header:
        raise ManifestError('CSV header needs a "source" column')
    if ("focus_x" in header) != ("focus_y" in header):
        raise ManifestError("CSV header needs both focus_x and focus_y, or neither")


def _entry_from_csv_row(row: dict[str, str], where: str) -> ManifestEntry:
    source = row["source"].strip()
    if not source:
        raise ManifestError(f'{where}: "source" is empty')
    _check_path_text(source, where)
    item_id = row.get("id", "").strip() or None
    ratios_text = row.get("ratios", "").strip()
    ratios = _ratios(ratios_text, f"{where}: ratios") if ratios_text else None
    focus = None
    fx, fy = row.get("focus_x", "").strip(), row.get("focus_y", "").strip()
    if fx or fy:
        try:
            numbers = [float(fx), float(fy)]
        except ValueError as exc:
            raise ManifestError(f"{where}: focus_x and focus_y must both be numbers in 0..1") from exc
        focus = _focus(numbers, where)
    fit = _fit(row["fit"].strip(), where) if row.get("fit", "").strip() else None
    alt = _alt(row.get("alt", ""), where)
    return ManifestEntry(source=source, id=item_id, ratios=ratios, focus=focus, fit=fit, alt=alt)


def _alt(value: object, where: str) -> str:
    """An item's ``alt`` text: a string of at most :data:`MAX_ALT` characters, spaces trimmed."""
    if not isinstance(value, str):
        raise ManifestError(f'{where}: "alt" must be a string')
    if len(value) > MAX_ALT:
        raise ManifestError(f'{where}: "alt" is {len(value)} characters long; at most {MAX_ALT} are taken')
    if "\0" in value:
        raise ManifestError(f'{where}: "alt" contains a NUL character')
    return value.strip()


def _too_deep(where: str) -> str:
    return f"{where} is nested more than {MAX_DEPTH} levels deep (a manifest needs 4 at most)"


def _too_long(where: str) -> str:
    return f"{where} holds an integer of more than {sys.get_int_max_str_digits()} digits"


def _check_path_text(source: str, where: str) -> None:
    """A NUL character can be written in JSON (``\\u0000``) or CSV, but no file path holds one."""
    if "\0" in source:
        raise ManifestError(f'{where}: "source" contains a NUL character, which no path can hold: {source!r}')


def _check_text(value: object, where: str, field: str | None = None, depth: int = 1) -> None:
    """Refuse any string (a field name or value) that is not valid UTF-8 text: a JSON
    ``\\ud800`` escape decodes to a lone surrogate, which no id, path or digest can hold.
    Lists and objects nested more than :data:`MAX_DEPTH` levels are refused too."""
    if depth > MAX_DEPTH:
        raise ManifestError(_too_deep(where))
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            named = f" {json.dumps(field)}" if field is not None else " a field name"
            raise ManifestError(f"{where}:{named} is not valid UTF-8 text: {ascii(value)}") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where)
            _check_text(item, where, str(key), depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_text(item, where, field, depth + 1)


def _ratios(value: object, where: str) -> tuple[Ratio, ...]:
    try:
        return parse_ratios(value)
    except SettingError as exc:
        raise ManifestError(f"{where}: {exc}") from exc


def _fit(value: object, where: str) -> str:
    try:
        return check_fit(value)
    except SettingError as exc:
        raise ManifestError(f"{where}: {exc}") from exc


def _focus(value: object, where: str) -> tuple[float, float]:
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    )
    if ok:
        x, y = float(value[0]), float(value[1])  # type: ignore[index]
        if all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in (x, y)):
            return (x, y)
    raise ManifestError(f"{where}: focus must be [x, y] with both in 0..1, got {value!r}")
