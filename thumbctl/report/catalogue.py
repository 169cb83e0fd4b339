"""What ``thumbctl catalogue`` shows: the live names of an OUT, one line (or JSON object) each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.catalogue import CatalogueEntry
from ..core.display import score_text
from ..core.redact import shown_source
from .listing import Cell
from .output import Output
from .styles import escape, page_link, plural, printable

if TYPE_CHECKING:
    from ..core.models import BatchView
    from ..review.cataloguesheet import CatalogueSheetSummary

CATALOGUE_COLUMNS = ("name", "ratio", "size", "format", "crop", "fix", "changed", "source")


def window_text(entry: CatalogueEntry) -> str:
    """``smart 0.81 @ 310,0 1200x1200``, ``contain`` for a contained output, ``unknown`` when no
    render recorded its window."""
    crop = entry.crop
    if entry.fit == "contain":
        return "contain"
    if crop is None or entry.score is None:
        return "unknown"
    left, top, right, bottom = crop["box"]  # type: ignore[misc]
    return f"{crop.get('policy', 'smart')} {score_text(entry.score)} @ {left},{top} {right - left}x{bottom - top}"


def catalogue_cells(entry: CatalogueEntry) -> Sequence[Cell]:
    fix = f"{entry.focus[0]:.3f},{entry.focus[1]:.3f}" if entry.focus else ""
    low = entry.score is not None and entry.score < 0.5
    return (
        (printable(entry.relative_name), None),
        (entry.ratio, None),
        (str(entry.size), None),
        (entry.format, None),
        (window_text(entry), "yellow" if low or entry.crop is None else None),
        (fix, "cyan" if fix else None),
        (entry.changed_at[:19].replace("T", " "), None),
        (printable(shown_source(entry.source)), None),
    )


class CatalogueReports(Output):
    """The reports of ``catalogue`` and of ``sheet`` without a batch."""

    def catalogue_sheet_written(self, summary: CatalogueSheetSummary) -> None:
        if self.json_mode:
            self.emit_json(summary.to_json())
            return
        self.say(f"Contact sheet of the catalogue of [bold]{escape(summary.out)}[/]: {escape(summary.path)}")
        unknown = f", {summary.unknown} with no crop window recorded" if summary.unknown else ""
        self.say(f"  {summary.sources} photos, {summary.names} thumbnails{unknown}")
        if summary.missing:
            self.note(
                f"[yellow]warning[/] [red]{summary.missing} thumbnails are missing[/] "
                "(shown as placeholders; see thumbctl reconcile)"
            )

    def catalogue(self, out_dir: str, entries: list[CatalogueEntry]) -> None:
        if self.json_lines:
            self.emit_json_lines(entry.to_json() for entry in entries)
        elif self.json_mode:
            self.emit_json_list({"out": out_dir}, "entries", (entry.to_json() for entry in entries))
        elif self.quiet:
            return
        elif not entries:
            self.note(f"No live thumbnails in {out_dir} (nothing matched).")
        else:
            self.listing(CATALOGUE_COLUMNS, (catalogue_cells(entry) for entry in entries))
            unknown = sum(entry.crop is None and entry.fit != "contain" for entry in entries)
            fixed = sum(entry.focus is not None for entry in entries)
            self.note(
                f"{plural(len(entries), 'live thumbnail')} in {escape(out_dir)}; {fixed} with a crop fix"
                + (f"; {unknown} whose crop window no render recorded (unknown)" if unknown else "")
            )

    def review_ready(self, url: str, out_dir: str, *, opened: bool) -> None:
        if self.json_mode:
            self.emit_json({"url": url, "out": out_dir, "browser": opened})
            return
        self.say(f"Review of [bold]{escape(out_dir)}[/]: {escape(url)}")
        where = "opened in your browser" if opened else "open it in a browser on this machine"
        self.note(f"  {where}; Ctrl-C stops it")

    def review_stopped(self, pending: list[BatchView], applied: bool, sheet: str | None) -> None:
        """Ctrl-C: the review stopped; Apply batches not finished stay queued in the ledger; the
        catalogue sheet written again after its Applies."""
        if pending:
            queued = sum(batch.total - batch.done for batch in pending)
            self.note(
                f"[yellow]stopped[/]: {plural(len(pending), 'Apply batch')} not finished "
                f"({plural(queued, 'render')} left) stay queued in the ledger: thumbctl work --until-idle renders them"
            )
        elif applied:
            self.note("stopped: every Apply was rendered")
        else:
            self.note("stopped: nothing was applied")
        if sheet is not None:
            self.note(f"  contact sheet {escape(page_link(sheet))}")
