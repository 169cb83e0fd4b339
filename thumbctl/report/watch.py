"""What ``thumbctl watch`` says: what it watches and how, files still settling, and one line per
round (with the run's live view in between, as for ``submit``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.models import ItemState
from .mirror import MirrorReports
from .styles import escape, format_age, page_link, plural, styled

if TYPE_CHECKING:
    from pathlib import Path

    from ..core.errors import ThumbctlError
    from ..core.models import BatchView
    from ..engine.watch import Round, Unsettled, WakeUp, WatchOptions
    from ..intake.prepared import IntakeReport

#: Files named in a "waiting" line; the rest are counted.
_NAMED = 3


class WatchReports(MirrorReports):
    """The reports of ``watch``: progress on stderr, each round's line on stdout (with ``--json``,
    one JSON object a line per round)."""

    def watching(self, root: Path, wake_up: WakeUp, why: str | None, options: WatchOptions) -> None:
        how = f"polling every {options.poll_seconds:g}s ({why})" if why else str(wake_up)
        mirror = "; --delete-dropped" if options.mirror_dropped else "; --delete" if options.mirror else ""
        self.progress_line(f"watching {escape(str(root))} ({how}; settle {options.settle:g}s{mirror}); Ctrl-C stops")

    def waiting(self, unsettled: Sequence[Unsettled]) -> None:
        named = ", ".join(f"{escape(u.path)} (changing for {format_age(u.changing_for)})" for u in unsettled[:_NAMED])
        more = f" and {len(unsettled) - _NAMED} more" if len(unsettled) > _NAMED else ""
        self.progress_line(f"waiting for {plural(len(unsettled), 'file')} to settle: {named}{more}")

    def progress_line(self, markup: str) -> None:
        """On stderr even with --json (stdout has the rounds' JSON), unless quiet: what the watch
        is doing between rounds."""
        if not self.quiet:
            self.diagnostics.print(markup)

    def round_submitted(self, number: int, batch: BatchView, report: IntakeReport) -> None:
        if report.unlinked_names:
            self.unlinked_names(report.unlinked_names)
        if report.manifest_error:
            self.manifest_errors((report.manifest_error,))
        self.scan_errors(report.scan_errors)
        queued = batch.counts[ItemState.QUEUED]
        items = plural(batch.total, "item")
        self.note(f"round {number}: recorded batch [bold]{batch.batch_id}[/], {items}, {queued} to render")

    def round_finished(self, done: Round) -> None:
        batch, report = done.batch, done.report
        failed = batch.counts[ItemState.FAILED]
        if self.json_mode:
            doc = {
                "round": done.number,
                "interrupted": done.interrupted,
                "sources": {"submitted": report.sources, "read": report.read, "unchanged": report.cached},
                "batch": batch.to_json(),
                "scan_errors": [error.to_json() for error in report.scan_errors],
            }
            if done.mirrored is not None:
                doc["mirrored"] = done.mirrored.to_json()
            if done.run is not None and done.run.sheet_path:
                doc["sheet"] = done.run.sheet_path
            self.emit_json(doc)
            return
        replayed = " (replayed)" if batch.replayed else ""
        self.say(
            f"round {done.number}: batch [bold]{batch.batch_id}[/]{replayed} {styled(batch.state)}: "
            f"{plural(report.sources, 'source')} submitted, {report.read} new or changed, "
            f"{report.cached} unchanged; {plural(failed, 'item')} failed"
        )
        if failed:
            self.failure_summary(batch)
        if done.run is not None and done.run.sheet_path:
            self.say(f"  contact sheet {escape(page_link(done.run.sheet_path))}")
        mirrored = done.mirrored
        said = mirrored is not None and (mirrored.removed or mirrored.kept_edited or mirrored.errors or mirrored.kept)
        if mirrored is not None and (said or mirrored.skipped):
            self.mirrored(mirrored)

    def round_refused(self, number: int, error: ThumbctlError) -> None:
        """Shown even with --json (on stderr): the watch goes on, and the user should know why
        nothing was rendered."""
        if not self.quiet:
            self.diagnostics.print(
                f"[yellow]warning[/] round {number} refused [dim]\\[{error.code}][/] {escape(error.message)}; "
                "trying again at the next change"
            )

    def watch_stopped(self, rounds: int) -> None:
        self.note(f"stopped after {plural(rounds, 'round')}")
