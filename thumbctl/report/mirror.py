"""What the mirror mode (``submit --delete``) says: the names it removed, or would remove, and those it left."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .output import Output
from .styles import escape, plural

if TYPE_CHECKING:
    from ..mirror import MirrorReport


class MirrorReports(Output):
    """The mirror's report: alone for ``submit --delete --dry-run``, else after the run's summary."""

    def mirrored(self, report: MirrorReport) -> None:
        for error in report.errors:  # shown even with -q or --json (on stderr): the name is still there
            self.diagnostics.print(f"[yellow]warning[/] [dim]\\[io_error][/] mirror could not remove {escape(error)}")
        if self.json_mode:
            if report.dry_run:
                self.emit_json({"mirrored": report.to_json()})
            return
        if report.skipped:
            self.say(f"  mirror: nothing removed, {escape(report.skipped)}")
            return
        if report.dry_run:
            self.say(f"mirror (--dry-run) would remove {plural(len(report.removed), 'thumbnail')}")
            for path in report.removed:
                self.say(f"  would remove {escape(path)}")
        else:
            self.say(f"  mirror: removed {plural(len(report.removed), 'thumbnail')} no longer published")
            if self.verbose:
                for path in report.removed:
                    self.say(f"    removed {escape(path)}")
        for path in report.kept_edited:
            self.say(f"  kept {escape(path)}: it changed since thumbctl published it (edited?)")
        if report.kept_dropped:
            what = plural(len(report.kept_dropped), "thumbnail")
            self.say(
                f"  kept {what} of photos still there in a size, format or ratio no longer asked for "
                "(--delete-dropped removes them)"
            )
