"""What the mirror mode (``submit --delete``) says: the names it removed, or would remove, and those it left."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .output import Output
from .styles import escape, plural

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..sources.scan import ScanError
    from ..upkeep.mirror import MirrorReport

#: How the names kept for a reason that is not one folder's read in a run's summary.
_KEPT = {
    "excluded": "of photos left out by --include/--exclude (--delete-excluded removes them)",
    "present": "of photos still there but not submitted (hidden, not regular files, or new since the scan)",
}


class MirrorReports(Output):
    """The mirror's report: alone for ``submit --delete --dry-run``, else after the run's summary."""

    def scan_errors(self, errors: Sequence[ScanError]) -> None:
        """Shown even with -q or --json (on stderr): the folders the scan could not read, so their
        photos are not in the batch and the mirror removes nothing under them (exit 1)."""
        for error in errors:
            self.diagnostics.print(
                f"[yellow]warning[/] [dim]\\[scan_error {error.code}][/] could not read {escape(error.path)}: "
                f"{escape(error.detail)}; its photos are not in this batch and --delete removes none of their "
                "thumbnails"
            )

    def mirrored(self, report: MirrorReport, *, scan_errors: Sequence[ScanError] = ()) -> None:
        """``scan_errors``: with ``--dry-run``, the folders the scan could not read (the report is
        the command's result, so they are part of it)."""
        for error in report.errors:  # shown even with -q or --json (on stderr): the name is still there
            self.diagnostics.print(f"[yellow]warning[/] [dim]\\[io_error][/] mirror could not remove {escape(error)}")
        if self.json_mode:
            if report.dry_run:
                self.emit_json({"mirrored": report.to_json(), "scan_errors": [e.to_json() for e in scan_errors]})
            return
        if report.dry_run:
            self.scan_errors(scan_errors)
        if report.skipped:
            self.say(f"  mirror: nothing removed, {escape(report.skipped)}")
            return
        if report.dry_run:
            self.say(f"submit (--dry-run) would render {plural(len(report.rendered), 'thumbnail')}")
            for path in report.rendered:
                self.say(f"  would render {escape(path)}")
            self.say(f"mirror (--dry-run) would remove {plural(len(report.removed), 'thumbnail')}")
            for path in report.removed:
                self.say(f"  would remove {escape(path)}")
            for kept in report.kept:
                self.say(f"  would keep {escape(kept.path)}: {escape(kept.detail)}")
        else:
            self.say(f"  mirror: removed {plural(len(report.removed), 'thumbnail')} no longer published")
            if self.verbose:
                for path in report.removed:
                    self.say(f"    removed {escape(path)}")
        if not report.dry_run:
            self.kept_lines(report)
        for path in report.kept_edited:
            self.say(f"  kept {escape(path)}: it changed since thumbctl published it (edited?)")
        if report.kept_dropped:
            what = plural(len(report.kept_dropped), "thumbnail")
            self.say(
                f"  kept {what} of photos still there in a size, format or ratio no longer asked for "
                "(--delete-dropped removes them)"
            )

    def kept_lines(self, report: MirrorReport) -> None:
        """After a run: one line per folder not read or not scanned, and per other reason, for the
        names kept because their photo is not known to be gone (each name with -v)."""
        lines: dict[str, int] = {}
        for kept in report.kept:
            if self.verbose:
                self.say(f"    kept {escape(kept.path)}: {escape(kept.detail)}")
            line = _KEPT.get(kept.reason) or f"whose folder {escape(kept.detail)}"  # the detail names the folder
            lines[line] = lines.get(line, 0) + 1
        for line, count in lines.items():
            self.say(f"  mirror: kept {plural(count, 'thumbnail')} {line}")
