"""What the reading commands show: batches, their items and events, stats, the contact sheet
written, the error and exit codes, and the resolved settings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..config.resolve import Settings, display_value
from ..core.errors import EXIT_CODE_MEANINGS, ITEM_ERROR_CODES
from ..core.models import BatchView, EventView, ItemState, ItemView
from ..core.redact import shown_source
from ..ledger.damage import Damage, noting_damage
from .listing import EVENT_COLUMNS, ITEM_COLUMNS, event_cells, item_cells
from .output import Output
from .styles import bare_table, escape, format_age, format_bytes, format_ms, printable, styled

if TYPE_CHECKING:  # the commands that print these import them; reading commands stay light
    from ..intake.fixwrite import FileWrite
    from ..intake.focus import SourceFocus
    from ..review.sheet import SheetSummary
    from ..review.stats import StatsReport


class ViewReports(Output):
    """The reports of ``status``, ``events``, ``cancel``, ``stats``, ``sheet``, ``codes`` and ``config``."""

    def batch_detail(self, batch: BatchView) -> None:
        if self.json_mode:
            self.emit_json(batch.to_json())
            return
        done_pct = 100.0 * batch.done / batch.total if batch.total else 100.0
        self.say(f"[bold]{batch.batch_id}[/]  {styled(batch.state)}  {batch.done}/{batch.total} done ({done_pct:.0f}%)")
        self.counts_line(batch)
        self.say(f"  created {batch.created_at}   updated {batch.updated_at}")
        if batch.queue_age_seconds is not None:
            self.say(f"  queue age {format_age(batch.queue_age_seconds)} (oldest queued item)")
        if batch.cancel_requested_at:
            self.say(f"  cancel requested at {batch.cancel_requested_at}")
        if batch.finished_at:
            self.say(f"  finished at {batch.finished_at}")
        if batch.expired_at:
            self.say(f"  [dim]expired at {batch.expired_at} by gc (final; its published thumbnails are kept)[/]")
        self.say(f"  source {escape(batch.source_root)}  ->  out {escape(batch.out_dir)}")
        self.failure_summary(batch)

    def batch_list(self, batches: list[BatchView]) -> None:
        if self.json_mode:
            self.emit_json({"batches": [b.to_json(with_failures=False) for b in batches]})
            return
        if not batches:  # an empty result: stdout stays empty, the hint is a diagnostic
            self.note("No batches yet. Start one with: thumbctl submit FOLDER --out thumbs")
            return
        table = bare_table()
        for column in ("batch", "state", "done", "failed", "created", "source", "out"):
            table.add_column(column)
        for b in batches:
            table.add_row(
                b.batch_id,
                styled(b.state) + (" (expired)" if b.expired_at else ""),
                f"{b.done}/{b.total}",
                str(b.counts[ItemState.FAILED]),
                b.created_at[:19].replace("T", " "),
                escape(b.source_root),
                escape(b.out_dir),
            )
        self.table(table)

    def items(self, batch_id: str, items: Iterable[ItemView]) -> None:
        """``status BATCH --items``: streamed to stdout, as JSON or as lines; each item whose row is
        damaged is marked there and warned about on stderr once the listing is written."""
        damaged: list[Damage] = []
        items = noting_damage(items, damaged)
        try:
            self._items(batch_id, items)
        finally:
            self.damaged_rows(damaged)

    def damaged_rows(self, damaged: Iterable[Damage]) -> None:
        """A warning on stderr (even with --json) for each damaged row a listing marked."""
        for damage in damaged:
            self.notice(f"warning: {damage.describe()}; `thumbctl reconcile` reports it, `--repair` settles it")

    def _items(self, batch_id: str, items: Iterable[ItemView]) -> None:
        if self.json_mode:
            # a URL source is recorded with its signed query (the worker needs it), never shown with it
            shown = (i.to_json() | {"source": shown_source(i.source)} for i in items)
            self.emit_json_list({"batch_id": batch_id}, "items", shown)
        elif not self.quiet:
            self.listing(ITEM_COLUMNS, (item_cells(i) for i in items))

    def events(self, events: Iterable[EventView]) -> None:
        """``events BATCH``: streamed to stdout, as JSON (one document, or JSON Lines) or as lines."""
        if self.json_lines:
            self.emit_json_lines(e.to_json() for e in events)
        elif self.json_mode:
            self.emit_json_list({}, "events", (e.to_json() for e in events))
        elif not self.quiet:
            self.listing(EVENT_COLUMNS, (event_cells(e) for e in events))

    def followed_events(self, pages: Iterable[list[EventView]]) -> None:
        """``events BATCH --follow``: each page as it comes; with --json or --jsonl as JSON Lines
        (one growing document could not be read before its end)."""
        if self.json_mode:
            for page in pages:
                self.emit_json_lines(e.to_json() for e in page)
        elif self.quiet:
            for _ in pages:  # -q: wait for the batch to be final, print nothing
                pass
        else:
            self.listing_pages(EVENT_COLUMNS, ([event_cells(e) for e in page] for page in pages))

    def cancelled(self, batch: BatchView) -> None:
        if self.json_mode:
            self.emit_json(batch.to_json())
            return
        self.say(f"Batch [bold]{batch.batch_id}[/] is {styled(batch.state)}")
        self.counts_line(batch)

    def stats(self, report: StatsReport, prometheus_file: str | None = None) -> None:
        if self.json_mode:
            self.emit_json(report.to_json())
            return
        scope = f"batch {report.batch_id}" if report.batch_id else "all batches"
        self.say(f"[bold]Stats[/] for {scope}, window {format_age(report.window_seconds)} (since {report.since})")
        queue = report.queue
        age = queue["oldest_runnable_age_seconds"]
        self.say(
            f"  queue: runnable {queue['runnable']}, delayed {queue['delayed']}, running {queue['running']}; "
            f"oldest runnable {format_age(age if isinstance(age, float | int) else None)}"
        )
        counts = report.counts
        self.say(
            f"  rates: admitted {counts['admitted']} ({report.rate('admitted'):.2f}/s), "
            f"claimed {counts['claimed']} ({report.rate('claimed'):.2f}/s), "
            f"completed {counts['completed']} ({report.rate('completed'):.2f}/s: "
            f"{counts['completed_succeeded']} succeeded, {counts['completed_failed']} failed, "
            f"{counts['completed_cancelled']} cancelled)"
        )
        self.say(
            f"  bytes: read {format_bytes(report.bytes_read)}, written {format_bytes(report.bytes_written)}; "
            f"dedup hits {report.dedup_hits}"
        )
        self.stats_tables(report)
        if prometheus_file:
            self.say(f"  Prometheus metrics written to {escape(prometheus_file)}")

    def stats_tables(self, report: StatsReport) -> None:
        stages = bare_table(title_justify="left")
        for column in ("stage", "count", "p50 ms", "p95 ms"):
            stages.add_column(column, justify="left" if column == "stage" else "right")
        for stage, dist in report.timings_ms.items():
            stages.add_row(stage, str(dist.count), format_ms(dist.p50), format_ms(dist.p95))
        self.table(stages)
        if report.per_ratio:
            ratios = bare_table()
            for column in ("ratio", "items", "sources read", "output bytes"):
                ratios.add_column(column, justify="left" if column == "ratio" else "right")
            for ratio, figures in report.per_ratio.items():
                ratios.add_row(
                    ratio, str(figures.items), format_bytes(figures.source_bytes), format_bytes(figures.output_bytes)
                )
            self.table(ratios)
            self.say("  a source is read once for all its ratios, sizes and formats; `read` above counts it once")
        for batch_id, n in report.retries.items():
            self.say(f"  retries: {batch_id} {n}")
        for lag in report.cancellations:
            observed = "-" if lag.observed_seconds is None else f"{lag.observed_seconds:.1f}s"
            final = "not yet" if lag.finalized_seconds is None else f"{lag.finalized_seconds:.1f}s"
            self.say(f"  cancel {lag.batch_id}: requested {lag.requested_at}, observed +{observed}, final {final}")

    def codes(self) -> None:
        """``thumbctl codes``: the item error codes, then the exit codes."""
        if self.json_mode:
            self.emit_json(
                {
                    "item_error_codes": {c: {"transient": t, "meaning": m} for c, (t, m) in ITEM_ERROR_CODES.items()},
                    "exit_codes": {str(int(c)): m for c, m in EXIT_CODE_MEANINGS.items()},
                }
            )
            return
        for code, (transient, meaning) in ITEM_ERROR_CODES.items():
            self.say(escape(f"{code:20} {'transient' if transient else 'permanent':9}  {meaning}"))
        self.say("")
        for exit_code, meaning in EXIT_CODE_MEANINGS.items():
            self.say(escape(f"exit {int(exit_code):<3}  {meaning}"))

    def settings(self, settings: Settings) -> None:
        """``thumbctl config``: every resolved setting with its value and its source."""
        if self.json_mode:
            self.emit_json(settings.to_json())
            return
        self.say(f"config file: {escape(str(settings.config_file or 'none found'))}")
        chosen = f"{settings.profile} ({settings.profile_source})" if settings.profile else "none"
        self.say(f"profile: {escape(chosen)}")
        table = bare_table()
        for column in ("setting", "value", "source"):
            table.add_column(column)
        for name, setting in settings.values.items():
            table.add_row(name, escape(display_value(name, setting.value, setting.source)), escape(setting.source))
        self.table(table)

    def sheet_written(self, summary: SheetSummary) -> None:
        self.damaged_rows(summary.damaged)
        if self.json_mode:
            self.emit_json(summary.to_json())
            return
        self.say(f"Contact sheet of [bold]{summary.batch_id}[/] ({styled(summary.state)}): {escape(summary.path)}")
        sizes = f"{summary.sources} sources, {summary.items} items"
        self.say(f"  {sizes}: {summary.succeeded} succeeded, {summary.failed} failed")
        if summary.missing:
            self.note(
                f"[yellow]warning[/] [red]{summary.missing} outputs are missing[/] "
                "(shown as placeholders; see thumbctl reconcile)"
            )

    def focus_points(self, shown: SourceFocus) -> None:
        """``thumbctl focus``: what it changed, where it wrote it, then the fixes remembered for the
        photo's content."""
        if self.json_mode:
            self.emit_json(shown.to_json())
            return
        source = escape(printable(shown.source))
        if shown.set:
            self.say(f"remembered for {', '.join(shown.set)}; the next submit of {source} renders it")
        if shown.cleared:
            self.say(f"forgot the fix for {', '.join(shown.cleared)}; the next submit frames it by the crop policy")
        if shown.file is not None:
            self.fix_file_written(shown.file)
        if not shown.points:
            self.say(f"no crop fix remembered for {source}")
            return
        self.say(f"crop fixes remembered for {source} (content {shown.source_digest[:12]}):")
        for point in shown.points:
            by = f"batch {point.batch_id}" if point.batch_id else "thumbctl focus"
            x, y = point.focus
            self.say(f"  {point.ratio:<6} --at {x:g},{y:g}   set {point.set_at} by {by}")

    def fix_file_written(self, write: FileWrite) -> None:
        """Where the fix file was written (commit it), or the warning of why it was not."""
        if write.problem:
            warning = escape(printable(write.problem))
            self.diagnostics.print(f"[yellow]warning[/] [dim]\\[focus_file_unwritten][/] {warning}")
        elif write.where:
            self.say(f"written to {escape(printable(write.where))} (commit it with the photos)")
        elif write.note:
            self.note(escape(printable(write.note)))

    def fixes_moved(self, moved: FileWrite, how: str) -> None:
        """``focus --export`` / ``--import``: how many photos' fixes went where."""
        if self.json_mode:
            self.emit_json(moved.to_json())
            return
        if moved.problem:
            self.fix_file_written(moved)
            return
        if moved.where is None:
            self.say("nothing to export: no live photo of the root has a crop fix remembered for its content")
        elif how == "export":
            self.say(f"exported the fixes of {moved.photos} photos to {escape(printable(moved.where or ''))}")
        else:
            where = escape(printable(moved.where or ""))
            self.say(f"imported the fixes of {moved.photos} photos from {where} into the ledger")
