"""The long listings (``events``, ``status --items``): rows of cells, written line by line as the
ledger yields them, never built whole in memory."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from ..core.display import score_text
from ..core.models import EventView, ItemState, ItemView
from ..core.proc import owner_label
from ..ledger.damage import DamagedItemView
from .styles import STATE_STYLES, printable

#: A streamed listing sizes its columns on its first rows; a longer cell further down widens only its own line.
WIDTH_SAMPLE = 200
#: Lines (or JSON elements) a streamed listing writes at a time.
WRITE_ROWS = 500
ITEM_COLUMNS = ("item", "ratio", "state", "attempt", "error", "crop", "output")
EVENT_COLUMNS = ("seq", "at", "item", "ratio", "size", "format", "transition", "attempt", "worker", "error")
#: A cell of a streamed listing: its text, and the Rich style it has on a terminal.
Cell = tuple[str, str | None]


def crop_text(result: dict[str, object] | None) -> str:
    """``smart 0.81 @ 310,0 1200x1200``: the policy, its score and the window it chose; then
    ``, smaller than asked: 427x427`` (the output size) when the source was too small for
    ``--size`` and the output was not enlarged."""
    result = result or {}
    crop = result.get("crop")
    if not isinstance(crop, dict):
        return ""
    left, top, right, bottom = crop["box"]
    text = f"{crop['policy']} {score_text(crop['score'])} @ {left},{top} {right - left}x{bottom - top}"
    if result.get("source_smaller_than_target"):
        placed = result.get("placed")  # contain: the photo on its canvas is what stayed small
        if isinstance(placed, list) and len(placed) == 4:
            text += f", smaller than asked: {placed[2] - placed[0]}x{placed[3] - placed[1]} on the canvas"
        else:
            text += f", smaller than asked: {result['width']}x{result['height']}"
    return text


def item_note(item: ItemView) -> str:
    """The last column of ``status --items``: where a succeeded (or pending) item's output is, or
    why a failed or cancelled one has none (its friendly name was never written)."""
    if item.state in (ItemState.FAILED, ItemState.CANCELLED):
        return item.error_detail or ""
    return item.friendly_path or item.error_detail or ""


def item_cells(item: ItemView) -> tuple[Cell, ...]:
    """A row of ``status BATCH --items``; an item whose row is damaged is marked ``damaged``, with what."""
    if isinstance(item, DamagedItemView) and item.damage is not None:
        return (
            (printable(item.item_id), None),
            (item.ratio, None),
            (item.state, STATE_STYLES.get(item.state)),
            (str(item.attempt), None),
            ("damaged", "red"),
            ("", None),
            (printable(item.damage.describe()), "red"),
        )
    return (
        (printable(item.item_id), None),
        (item.ratio, None),
        (item.state, STATE_STYLES.get(item.state)),
        (str(item.attempt), None),
        (item.error_code or "", "red"),
        (crop_text(item.result), None),
        (printable(item_note(item)), None),
    )


def event_cells(event: EventView) -> tuple[Cell, ...]:
    """A row of ``events BATCH``."""
    transition = f"{event.from_state or '∅'} → {event.to_state}" + (" (dedup)" if event.dedup else "")
    return (
        (str(event.seq), None),
        (event.at, None),
        (printable(event.item_id or "(batch)"), None),
        (event.ratio or "", None),
        ("" if event.size is None else str(event.size), None),
        (event.format or "", None),
        (transition, STATE_STYLES.get(event.to_state)),
        ("" if event.attempt is None else str(event.attempt), None),
        (printable(owner_label(event.worker or "")), None),
        (event.error_code or "", "red"),
    )


def cell_width(text: str) -> int:
    if text.isascii():
        return len(text)
    from rich.cells import cell_len  # wide characters only: a listing of plain names never loads Rich

    return cell_len(text)


def column_widths(columns: Sequence[str], rows: Iterable[Sequence[Cell]]) -> list[int]:
    """The width of each column: its widest cell in ``rows`` or its header."""
    widths = [len(name) for name in columns]
    for row in rows:
        for n, (text, _) in enumerate(row):
            widths[n] = max(widths[n], cell_width(text))
    return widths


def plain_line(row: Sequence[Cell], widths: Sequence[int]) -> str:
    """Cells padded to their column's width, two spaces apart (the last one unpadded)."""
    parts = [text + " " * (width - cell_width(text)) for (text, _), width in zip(row[:-1], widths, strict=False)]
    parts.append(row[-1][0])
    return "  ".join(parts).rstrip()


def markup_line(row: Sequence[Cell], widths: Sequence[int]) -> str:
    """:func:`plain_line` as Rich markup, each cell in its style."""
    from rich.markup import escape  # on a terminal only, where the console has loaded Rich anyway

    parts = []
    for n, (text, style) in enumerate(row):
        pad = " " * (widths[n] - cell_width(text)) if n < len(row) - 1 else ""
        parts.append((f"[{style}]{escape(text)}[/]" if style and text else escape(text)) + pad)
    return "  ".join(parts).rstrip()


def chunked(values: Iterable[object]) -> Iterator[list]:
    """``values`` in lists of :data:`WRITE_ROWS`."""
    values = iter(values)
    while chunk := list(islice(values, WRITE_ROWS)):
        yield chunk
