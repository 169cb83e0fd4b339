"""How states look and how figures are written: shared by the reporter and the live view."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.models import BatchState, ItemState

if TYPE_CHECKING:
    from rich.table import Table

STATE_STYLES = {
    ItemState.QUEUED: "cyan",
    ItemState.RUNNING: "yellow",
    ItemState.SUCCEEDED: "green",
    ItemState.FAILED: "red",
    ItemState.CANCELLED: "magenta",
    BatchState.CANCEL_REQUESTED: "magenta",
    BatchState.PARTIAL: "yellow",
}

#: Control characters a name or a message may hold, shown as ``?`` (line breaks and tabs as a
#: space) so a listing stays one line per row and writes no control codes.
UNPRINTABLE = {c: "?" for c in (*range(32), *range(127, 160))} | {ord("\n"): " ", ord("\r"): " ", ord("\t"): " "}


def styled(state: str) -> str:
    return f"[{STATE_STYLES.get(state, 'white')}]{state}[/]"


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def format_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def plural(n: int, noun: str) -> str:
    """``1 batch``, ``2 batches``, ``0 findings``."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{n} {noun}s"


def printable(text: str) -> str:
    """``text`` on one line without control characters."""
    return text if text.isprintable() else text.translate(UNPRINTABLE)


def escape(text: str) -> str:
    """``text`` safe inside Rich markup. Rich is imported here, when a line is about to be
    printed, not with the reporter: a command that prints nothing (``-q``, ``--json``) never
    loads it (:mod:`.consoles`)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def bare_table(**options: Any) -> Table:
    """A Rich table without borders or edge padding, the form every result table takes."""
    from rich.table import Table

    return Table(box=None, pad_edge=False, **options)


def page_link(page: str) -> str:
    """A page thumbctl wrote, as a link to open: ``file://`` for a file, the ``s3://`` location of one in a bucket."""
    from pathlib import Path

    return page if page.startswith("s3://") else Path(page).as_uri()
