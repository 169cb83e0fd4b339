"""Output for people and programs: Rich on a terminal, plain lines elsewhere, JSON on demand.

The library never prints; the CLI hands views to a :class:`Reporter`, the one place that
decides which stream a line goes to (DESIGN section 2). It holds two consoles, each
checking for itself whether its stream is a terminal:

- ``results`` on stdout: what the command was asked for (tables, listings, the summary at
  the end of a run, the code list, the settings, findings, the sheet's path), so
  ``thumbctl codes | grep timeout`` and ``thumbctl status 2>/dev/null`` work;
- ``diagnostics`` on stderr: progress, warnings, hints, notices and errors.

Off a terminal either one writes plain text: no colour, no cursor moves. The long listings
(``events``, ``status --items``) are written row by row as the ledger yields them, never
built whole in memory. With ``--json`` exactly one JSON document goes to stdout and nothing
else does.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .config import Settings, display_value
from .errors import EXIT_CODE_MEANINGS, ITEM_ERROR_CODES, ExitCode, ThumbctlError, UnavailableError
from .models import (
    ITEM_STATES,
    BatchState,
    BatchView,
    EventView,
    Finding,
    GcReport,
    ItemState,
    ItemView,
    ReconcileReport,
)
from .proc import owner_label

if TYPE_CHECKING:  # the commands that print these import them; reading commands stay light
    from .intake import IntakeReport
    from .migrate import MigrationReport
    from .pool import Supervision
    from .progress import RunProgress
    from .sheet import SheetSummary
    from .stats import StatsReport

STATE_STYLES: dict[str, str] = {
    ItemState.QUEUED: "cyan",
    ItemState.RUNNING: "yellow",
    ItemState.SUCCEEDED: "green",
    ItemState.FAILED: "red",
    ItemState.CANCELLED: "magenta",
    BatchState.CANCEL_REQUESTED: "magenta",
    BatchState.PARTIAL: "yellow",
}


#: Width of a console whose stream is not a terminal: tables there are not cut to 80 columns.
PIPE_WIDTH = 200
#: A streamed listing sizes its columns on its first rows; a longer cell further down widens only its own line.
WIDTH_SAMPLE = 200
#: Lines (or JSON elements) a streamed listing writes at a time.
WRITE_ROWS = 500
ITEM_COLUMNS = ("item", "ratio", "state", "attempt", "error", "crop", "output")
EVENT_COLUMNS = ("seq", "at", "item", "ratio", "transition", "attempt", "worker", "error")
#: A cell of a streamed listing: its text, and the Rich style it has on a terminal.
Cell = tuple[str, str | None]
_ELEMENT_ENCODER = json.JSONEncoder(ensure_ascii=False)
#: Control characters a name or a message may hold, shown as ``?`` (line breaks and tabs as a
#: space) so a listing stays one line per row and writes no control codes.
_UNPRINTABLE = {c: "?" for c in (*range(32), *range(127, 160))} | {ord("\n"): " ", ord("\r"): " ", ord("\t"): " "}


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


def plural(n: int, noun: str) -> str:
    """``1 batch``, ``2 batches``, ``0 findings``."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{n} {noun}s"


def format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _objects_line(report: ReconcileReport) -> str:
    return (
        f"{plural(report.objects_checked, 'object')} checked: {report.objects_decoded} decoded, "
        f"{report.objects_unchanged} unchanged since they last decoded (--deep decodes all)"
    )


def crop_text(result: dict[str, object] | None) -> str:
    """``smart 0.81 @ 310,0 1200x1200``: the policy, its score and the window it chose; then
    ``, smaller than asked: 427x427`` (the output size) when the source was too small for
    ``--size`` and the output was not enlarged."""
    result = result or {}
    crop = result.get("crop")
    if not isinstance(crop, dict):
        return ""
    left, top, right, bottom = crop["box"]
    text = f"{crop['policy']} {crop['score']:.2f} @ {left},{top} {right - left}x{bottom - top}"
    if result.get("source_smaller_than_target"):
        text += f", smaller than asked: {result['width']}x{result['height']}"
    return text


def item_note(item: ItemView) -> str:
    """The last column of ``status --items``: where a succeeded (or pending) item's output is, or
    why a failed or cancelled one has none (its friendly name was never written)."""
    if item.state in (ItemState.FAILED, ItemState.CANCELLED):
        return item.error_detail or ""
    return item.friendly_path or item.error_detail or ""


def printable(text: str) -> str:
    """``text`` on one line without control characters."""
    return text if text.isprintable() else text.translate(_UNPRINTABLE)


def item_cells(item: ItemView) -> tuple[Cell, ...]:
    """A row of ``status BATCH --items``."""
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
        (transition, STATE_STYLES.get(event.to_state)),
        ("" if event.attempt is None else str(event.attempt), None),
        (printable(owner_label(event.worker or "")), None),
        (event.error_code or "", "red"),
    )


def _cell_width(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def column_widths(columns: Sequence[str], rows: Iterable[Sequence[Cell]]) -> list[int]:
    """The width of each column: its widest cell in ``rows`` or its header."""
    widths = [len(name) for name in columns]
    for row in rows:
        for n, (text, _) in enumerate(row):
            widths[n] = max(widths[n], _cell_width(text))
    return widths


def plain_line(row: Sequence[Cell], widths: Sequence[int]) -> str:
    """Cells padded to their column's width, two spaces apart (the last one unpadded)."""
    parts = [text + " " * (width - _cell_width(text)) for (text, _), width in zip(row[:-1], widths, strict=False)]
    parts.append(row[-1][0])
    return "  ".join(parts).rstrip()


def markup_line(row: Sequence[Cell], widths: Sequence[int]) -> str:
    """:func:`plain_line` as Rich markup, each cell in its style."""
    parts = []
    for n, (text, style) in enumerate(row):
        pad = " " * (widths[n] - _cell_width(text)) if n < len(row) - 1 else ""
        parts.append((f"[{style}]{escape(text)}[/]" if style and text else escape(text)) + pad)
    return "  ".join(parts).rstrip()


class PipeSafeConsole(Console):
    """A console whose reader may go away (``thumbctl submit … | head``, ``… 2>&1 | head``).

    Rich's default answer to a closed pipe is to exit with status 1 at once, which would
    abandon a foreground run half-way with its workers stopped. Here the console falls
    silent instead (its file descriptor now points at the null device) and the command
    carries on, so its work and its exit code are what they would have been.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.file.fileno())
        finally:
            os.close(devnull)


def stream_console(*, stderr: bool) -> PipeSafeConsole:
    """A console on stdout or stderr that decides for itself whether it is on a terminal: there,
    colour (unless NO_COLOR) and the terminal's width; elsewhere plain text, :data:`PIPE_WIDTH` wide."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPE_WIDTH
    no_color = bool(os.environ.get("NO_COLOR"))
    return PipeSafeConsole(stderr=stderr, highlight=False, no_color=no_color, soft_wrap=True, width=width)


class Reporter:
    """Renders results on stdout and diagnostics on stderr; ``json_mode`` sends one document to
    stdout instead of the results.

    ``stdout`` is a shorthand for a results console writing to that file.
    """

    def __init__(
        self,
        *,
        json_mode: bool = False,
        quiet: bool = False,
        verbose: bool = False,
        progress_interval: float = 5.0,
        results: Console | None = None,
        diagnostics: Console | None = None,
        stdout: TextIO | None = None,
    ) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.verbose = verbose and not quiet
        #: Seconds between plain progress lines off a terminal.
        self.progress_interval = progress_interval
        #: Results: stdout.
        self.results = results or Console(file=stdout, highlight=False, soft_wrap=True)
        #: Progress, warnings, hints, notices and errors: stderr.
        self.diagnostics = diagnostics or Console(stderr=True, highlight=False, soft_wrap=True)
        #: While a JSON listing is being written: what closes its list.
        self._open_list: str | None = None

    @classmethod
    def for_streams(
        cls, *, json_mode: bool = False, quiet: bool = False, verbose: bool = False, progress_interval: float = 5.0
    ) -> Reporter:
        """The command line's reporter: results on this process's stdout, diagnostics on its stderr."""
        return cls(
            json_mode=json_mode,
            quiet=quiet,
            verbose=verbose,
            progress_interval=progress_interval,
            results=stream_console(stderr=False),
            diagnostics=stream_console(stderr=True),
        )

    @property
    def stdout(self) -> TextIO:
        """The results' stream (JSON and the streamed listings are written to it directly)."""
        return self.results.file

    def run_progress(self, batch_id: str | None) -> RunProgress:
        """The live view (stderr a terminal) or plain lines (elsewhere) of a run, on stderr; off
        with -q or --json."""
        from .progress import RunProgress

        return RunProgress(
            self.diagnostics,
            batch_id=batch_id,
            enabled=not (self.quiet or self.json_mode),
            interval=self.progress_interval,
            verbose=self.verbose,
        )

    # -- primitives -----------------------------------------------------------

    def emit_json(self, doc: object) -> None:
        self.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        self.stdout.flush()

    def emit_json_list(self, head: dict[str, object], key: str, elements: Iterable[object]) -> None:
        """The document ``{**head, key: [elements]}`` written as the elements come, one element a
        line: memory stays flat however long the list, and the output is one JSON document.
        Nothing is written before the first elements are in hand, so a ledger fault met at once
        leaves only the error document; one met later closes this document with an ``error``
        member (:meth:`error`)."""
        chunks = _chunked(map(_ELEMENT_ENCODER.encode, elements))
        first = next(chunks, [])
        opening = json.dumps({**head, key: []}, indent=2, ensure_ascii=False)
        self.stdout.write(opening[: -len("[]\n}")] + ("[\n    " + ",\n    ".join(first) if first else "["))
        self._open_list = "\n  ]" if first else "]"
        for chunk in chunks:
            self.stdout.write(",\n    " + ",\n    ".join(chunk))
        self.stdout.write(self._open_list + "\n}\n")
        self._open_list = None
        self.stdout.flush()

    def listing(self, columns: Sequence[str], rows: Iterable[Sequence[Cell]]) -> None:
        """A table written line by line to stdout as the rows come, so ``| grep`` and ``| head``
        see them at once; its columns are sized on the first :data:`WIDTH_SAMPLE` rows.
        Plain text off a terminal; on one, each cell in its style (unless NO_COLOR)."""
        rows = iter(rows)
        sample = list(islice(rows, WIDTH_SAMPLE))
        widths = column_widths(columns, sample)
        header = [(name, "bold") for name in columns]
        if self.results.is_terminal:
            for chunk in _chunked(chain([header], sample, rows)):
                self.results.print("\n".join(markup_line(row, widths) for row in chunk), soft_wrap=True)
            return
        for chunk in _chunked(chain([header], sample, rows)):
            self.stdout.write("".join(plain_line(row, widths) + "\n" for row in chunk))
        self.stdout.flush()

    def text(self, text: str) -> None:
        """Text for another program (markup to paste), written to stdout as it is."""
        self.stdout.write(text)
        self.stdout.flush()

    def say(self, markup: str) -> None:
        """A result line (Rich markup) on stdout, unless quiet or in JSON mode."""
        if not (self.quiet or self.json_mode):
            self.results.print(markup)

    def note(self, markup: str) -> None:
        """A progress line, hint or notice (Rich markup) on stderr, unless quiet or in JSON mode."""
        if not (self.quiet or self.json_mode):
            self.diagnostics.print(markup)

    def notice(self, text: str) -> None:
        """A note about the ledger itself (created, moved): on stderr even with --json, unless quiet."""
        if not self.quiet:
            self.diagnostics.print(escape(text))

    def error(self, err: ThumbctlError) -> None:
        """One line naming the stable code, always shown (even with -q or --json); with
        --json, also the error document on stdout."""
        self.diagnostics.print(f"[bold red]error[/] [dim]\\[{err.code}][/] {escape(err.message)}")
        if self.json_mode and self._open_list is not None:  # a listing cut short: its document ends here
            member = json.dumps(err.to_json(), indent=2, ensure_ascii=False)[len("{\n") :]
            self.stdout.write(f"{self._open_list},\n{member}\n")
            self._open_list = None
            self.stdout.flush()
        elif self.json_mode:
            self.emit_json(err.to_json())

    # -- commands -------------------------------------------------------------

    def submitted(self, batch: BatchView, report: IntakeReport, *, final: bool = True) -> None:
        """``final``: nothing is rendered after this (``--detach``), so this summary is the
        command's result (stdout); else the run follows and ends with its own summary, and this
        one is a notice on the way (stderr)."""
        if report.unlinked_names:
            self.unlinked_names(report.unlinked_names)
        if report.store_moved and not self.quiet:
            self.store_moved(*report.store_moved)
        self.replay_notes(batch, report, rendering=not final)
        if self.json_mode:
            if final:
                self.emit_json(batch.to_json())
            return
        line = self.say if final else self.note
        verb = "Replayed existing" if batch.replayed else "Accepted"
        sources = plural(report.sources, "source")
        line(f"{verb} batch [bold]{batch.batch_id}[/]: {plural(batch.total, 'item')} from {sources}")
        if report.ignored_files:
            why = "not image names, or excluded; see --include, --exclude"
            line(f"  {plural(report.ignored_files, 'other file')} ignored ({why})")
        if report.skipped_output_folders:
            folders = ", ".join(report.skipped_output_folders)
            line(f"  output folders left out (thumbnails are never sources): {folders}")
        line(f"  sources read {report.read}, unchanged (stat cache) {report.cached}")
        self._counts_line(batch, line)
        self._failure_summary(batch, line)
        line(f"  outputs: {escape(batch.out_dir)}")
        reused = batch.counts[ItemState.SUCCEEDED]
        if reused and not batch.replayed:
            line(f"  {plural(reused, 'output')} already existed and {'was' if reused == 1 else 'were'} reused")
        if batch.replayed and batch.state == BatchState.CANCELLED:
            line(
                f"  [magenta]this batch was cancelled[/] at {batch.cancel_requested_at}; a replay renders nothing. "
                "To render the rest, submit again with a new --key (finished outputs are reused)."
            )

    def store_moved(self, before: str, now: str) -> None:
        """Shown even with --json (on stderr), unless quiet: --store gave the ledger another store, so
        the objects of the one it used are no longer reused, checked or collected."""
        self.diagnostics.print(
            f"[yellow]store[/] this ledger used the store {escape(printable(before))} until now and uses "
            f"{escape(printable(now))} from "
            "here on (--store): the objects in the earlier one are no longer reused, checked or collected; "
            "give its path as --store to go back"
        )

    def requeued(self, batch_id: str, count: int, *, final: bool) -> None:
        """``retry``: how many failed items went back to the queue; the result when nothing is
        rendered after it (``final``), else a notice before the run."""
        (self.say if final else self.note)(f"Requeued {count} failed items of {batch_id}")

    def replay_notes(self, batch: BatchView, report: IntakeReport, *, rendering: bool) -> None:
        """Shown even with --json (on stderr), unless quiet: a replay found outputs gone or
        names taken, and the user would otherwise believe the outputs are where they were."""
        if self.quiet:
            return
        restored = report.restored_outputs
        if restored:
            then = "rendering them again" if rendering else "queued again: run `thumbctl work` to render them"
            were = "was" if restored == 1 else "were"
            what = f"{plural(restored, 'output')} of this batch {were} missing"
            self.diagnostics.print(f"[yellow]replay[/] {what}; {then}")
        taken = report.names_taken_by_newer
        if taken:
            self.diagnostics.print(
                f"[yellow]replay[/] {plural(taken, 'friendly name')} of this batch now show a newer batch's outputs "
                f"(it rendered the same names later); this batch's own files are its objects in the store, "
                f"listed in {escape(batch.manifest_path)}"
            )

    def unlinked_names(self, failures: list[str]) -> None:
        """One line, shown even with -q or --json (on stderr): these names do not show the
        batch's outputs yet."""
        first = failures[0]
        self.diagnostics.print(
            f"[yellow]warning[/] [dim]\\[friendly_link_failed][/] {plural(len(failures), 'friendly name')} "
            f"could not be pointed at the batch's outputs (first: {escape(first)}); "
            "`thumbctl reconcile --repair` relinks them (one whose object is gone is queued again instead: "
            "then run `thumbctl work`)"
        )

    def finished(
        self,
        batch: BatchView,
        *,
        interrupted: bool,
        crashes: int = 0,
        sheet: str | None = None,
        max_failures: int = 0,
    ) -> None:
        """The end of a run: the batch object, or a summary; ``sheet`` is the contact sheet a
        foreground run wrote (its JSON gets ``"sheet"``, its summary the ``file://`` link);
        ``max_failures`` the failed items allowed before the exit is 1 (in the JSON)."""
        if self.json_mode:
            self.emit_json(batch.to_json() | {"max_failures": max_failures} | ({"sheet": sheet} if sheet else {}))
            return
        if interrupted:
            self.say(f"Interrupted: batch {batch.batch_id} is {styled(batch.state)}; the cancel is recorded.")
        else:
            self.say(f"Batch [bold]{batch.batch_id}[/] {styled(batch.state)}")
        self._counts_line(batch)
        if crashes:
            self.say(f"  {_replaced(crashes)}; each death counted as an attempt of the items it held")
        self._smaller_than_target_line(batch)
        self._replaced_names_line(batch)
        self._failure_summary(batch)
        if batch.counts[ItemState.SUCCEEDED]:
            self.say(f"  thumbnails in {escape(batch.out_dir)}, manifest {escape(batch.manifest_path)}")
        if sheet:
            self.say(f"  contact sheet {escape(Path(sheet).as_uri())}")

    def sheet_error(self, error: str | None) -> None:
        """Shown even with -q or --json (on stderr), like a manifest not written."""
        if error:
            self.diagnostics.print(f"[yellow]warning[/] [dim]\\[cannot_write][/] {escape(error)}")

    def manifest_errors(self, errors: tuple[str, ...]) -> None:
        """Shown even with -q or --json (on stderr): an output the user expects is missing."""
        for error in errors:
            self.diagnostics.print(
                f"[yellow]warning[/] [dim]\\[io_error][/] batch manifest not written: {escape(error)}"
            )

    def exit_summary(self, batch: BatchView, code: int, max_failures: int = 0) -> None:
        """With -q, the one line a run ending with a non-zero exit prints (on stderr), so a quiet
        command is never silent about why it failed."""
        if not self.quiet or code == 0:
            return
        where = f"(exit {int(code)}); thumbctl status {batch.batch_id}"
        failed, total = batch.counts[ItemState.FAILED], batch.total
        if code == ExitCode.CANCELLED:
            line = f"batch cancelled: {batch.counts[ItemState.SUCCEEDED]} of {total} succeeded {where}"
        elif code == ExitCode.INTERRUPTED:
            line = f"interrupted: batch {batch.batch_id} is {batch.state}, its cancel is recorded {where}"
        else:
            over = f", more than --max-failures {max_failures}" if max_failures else ""
            line = f"{failed} of {total} failed{over} {where}"
        self.diagnostics.print(escape(line))

    def work_failures(self, failed: int, max_failures: int, batch_id: str | None) -> None:
        """``work --max-failures N`` went over N: one line, even with -q."""
        status = f"thumbctl status {batch_id}" if batch_id else "thumbctl status"
        over = f"more than --max-failures {max_failures}"
        self.diagnostics.print(escape(f"{plural(failed, 'item')} failed while it ran, {over} (exit 1); {status}"))

    def work_done(self, supervision: Supervision) -> None:
        if self.json_mode:
            self.emit_json({"interrupted": supervision.interrupted, "crashes": supervision.crashes})
            return
        note = " (stopped on request)" if supervision.interrupted else ""
        crashes = f", {_replaced(supervision.crashes)}" if supervision.crashes else ""
        self.say(f"Workers finished{note}{crashes}.")

    def admission_retry(self, error: UnavailableError, delay: float) -> None:
        """Shown even with --json (on stderr): the user is waiting and should know why."""
        if not self.quiet:
            self.diagnostics.print(
                f"[yellow]waiting[/] [dim]\\[{error.code}][/] {escape(error.message)}; retrying in {delay:.1f}s"
            )

    def layout_migrated(self, report: MigrationReport) -> None:
        """The one line of the one-time layout migration, on stderr (also with --json); what it
        had to set aside or leave is a warning, shown even with -q."""
        if report.folders and not self.quiet:
            sources = ", ".join(f"{folder}/objects" for folder in report.folders[:2])
            if len(report.folders) > 2:
                sources = f"OUT/objects of {len(report.folders)} output folders"
            extra = f"; {report.duplicates_dropped} duplicates dropped" if report.duplicates_dropped else ""
            self.diagnostics.print(
                f"moved {report.objects_moved} objects from {escape(sources)} to {escape(report.store)} "
                f"(one-time layout migration{extra}; {report.thumbnails_copied} thumbnails are now their own files)"
            )
        for path in report.conflicts:
            self.diagnostics.print(
                f"[yellow]warning[/] {escape(path)}: an old object with other bytes than the store's for that "
                "derivative, kept here; its thumbnails keep their bytes until `reconcile --repair` "
                "(see docs/operations.md, 'Moving from the old layout')"
            )
        for path in report.left:
            self.diagnostics.print(f"[yellow]warning[/] {escape(path)} is not an object; left in place")
        for folder in report.refused:
            self.diagnostics.print(f"[yellow]warning[/] {escape(folder)}/objects is a symlink or a file; not migrated")

    def batch_detail(self, batch: BatchView) -> None:
        if self.json_mode:
            self.emit_json(batch.to_json())
            return
        done_pct = 100.0 * batch.done / batch.total if batch.total else 100.0
        self.say(f"[bold]{batch.batch_id}[/]  {styled(batch.state)}  {batch.done}/{batch.total} done ({done_pct:.0f}%)")
        self._counts_line(batch)
        self.say(f"  created {batch.created_at}   updated {batch.updated_at}")
        if batch.queue_age_seconds is not None:
            self.say(f"  queue age {format_age(batch.queue_age_seconds)} (oldest queued item)")
        if batch.cancel_requested_at:
            self.say(f"  cancel requested at {batch.cancel_requested_at}")
        if batch.finished_at:
            self.say(f"  finished at {batch.finished_at}")
        if batch.expired_at:
            self.say(f"  [dim]expired at {batch.expired_at} by gc: its outputs may be gone[/]")
        self.say(f"  source {escape(batch.source_root)}  ->  out {escape(batch.out_dir)}")
        self._failure_summary(batch)

    def batch_list(self, batches: list[BatchView]) -> None:
        if self.json_mode:
            self.emit_json({"batches": [b.to_json(with_failures=False) for b in batches]})
            return
        if not batches:  # an empty result: stdout stays empty, the hint is a diagnostic
            self.note("No batches yet. Start one with: thumbctl submit FOLDER --out thumbs")
            return
        table = Table(box=None, pad_edge=False)
        for column in ("batch", "state", "done", "failed", "created", "source"):
            table.add_column(column)
        for b in batches:
            table.add_row(
                b.batch_id,
                styled(b.state) + (" (expired)" if b.expired_at else ""),
                f"{b.done}/{b.total}",
                str(b.counts[ItemState.FAILED]),
                b.created_at[:19].replace("T", " "),
                escape(b.source_root),
            )
        self._table(table)

    def items(self, batch_id: str, items: Iterable[ItemView]) -> None:
        """``status BATCH --items``: streamed to stdout, as JSON or as lines."""
        if self.json_mode:
            self.emit_json_list({"batch_id": batch_id}, "items", (i.to_json() for i in items))
        elif not self.quiet:
            self.listing(ITEM_COLUMNS, (item_cells(i) for i in items))

    def events(self, events: Iterable[EventView]) -> None:
        """``events BATCH``: streamed to stdout, as JSON or as lines."""
        if self.json_mode:
            self.emit_json_list({}, "events", (e.to_json() for e in events))
        elif not self.quiet:
            self.listing(EVENT_COLUMNS, (event_cells(e) for e in events))

    def cancelled(self, batch: BatchView) -> None:
        if self.json_mode:
            self.emit_json(batch.to_json())
            return
        self.say(f"Batch [bold]{batch.batch_id}[/] is {styled(batch.state)}")
        self._counts_line(batch)

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
        self._stats_tables(report)
        if prometheus_file:
            self.say(f"  Prometheus metrics written to {escape(prometheus_file)}")

    def _stats_tables(self, report: StatsReport) -> None:
        stages = Table(box=None, pad_edge=False, title_justify="left")
        for column in ("stage", "count", "p50 ms", "p95 ms"):
            stages.add_column(column, justify="left" if column == "stage" else "right")
        for stage, dist in report.timings_ms.items():
            stages.add_row(stage, str(dist.count), format_ms(dist.p50), format_ms(dist.p95))
        self._table(stages)
        if report.per_ratio:
            ratios = Table(box=None, pad_edge=False)
            for column in ("ratio", "items", "source bytes", "output bytes"):
                ratios.add_column(column, justify="left" if column == "ratio" else "right")
            for ratio, figures in report.per_ratio.items():
                ratios.add_row(
                    ratio, str(figures.items), format_bytes(figures.source_bytes), format_bytes(figures.output_bytes)
                )
            self._table(ratios)
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
        table = Table(box=None, pad_edge=False)
        for column in ("setting", "value", "source"):
            table.add_column(column)
        for name, setting in settings.values.items():
            table.add_row(name, escape(display_value(name, setting.value)), escape(setting.source))
        self._table(table)

    def sheet_written(self, summary: SheetSummary) -> None:
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

    def reconciled(self, report: ReconcileReport, *, repair: bool) -> None:
        """One line per finding (its kind first), then a summary by kind. Quiet: only the
        findings that remain, so cron mails only when something is left to do."""
        if self.json_mode:
            self.emit_json(report.to_json())
            return
        if self.quiet:
            for finding in report.remaining:
                self.results.print(_finding_line(finding))
            return
        for finding in report.findings:
            self.say(_finding_line(finding))
        self.say(_objects_line(report))
        if not report.findings:
            self.say("[green]clean[/]: no findings")
            return
        by_kind = Counter(f.kind for f in report.findings)
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
        repaired = len(report.findings) - len(report.remaining)
        tail = (
            f"; {repaired} repaired, {len(report.remaining)} remain"
            if repair
            else "; --repair applies the safe repairs, `thumbctl gc` removes orphan objects"
        )
        self.say(f"{plural(len(report.findings), 'finding')} ({kinds}){tail}")

    def garbage_collected(self, report: GcReport) -> None:
        if self.json_mode:
            self.emit_json(report.to_json())
            return
        verb = "would remove" if report.dry_run else "removed"
        expired = "would expire" if report.dry_run else "expired"
        batches = plural(len(report.expired_batches), "batch")
        self.say(f"{expired} {batches}: {' '.join(report.expired_batches) or '-'}")
        self.say(
            f"{verb} {plural(report.objects_removed, 'object')}, {plural(report.links_removed, 'friendly name')}, "
            f"{plural(report.temp_files_removed, 'temp file')}, {plural(report.manifests_removed, 'manifest')}, "
            f"{plural(report.sheets_removed, 'contact sheet')}"
        )
        self.say(f"{'reclaimable' if report.dry_run else 'reclaimed'}: {format_bytes(report.bytes_reclaimed)}")
        for error in report.errors:
            self.diagnostics.print(f"[bold red]error[/] [dim]\\[io_error][/] could not remove {escape(error)}")

    # -- pieces ---------------------------------------------------------------

    def _table(self, table: Table) -> None:
        if not (self.quiet or self.json_mode):
            self.results.print(table)

    def _counts_line(self, batch: BatchView, line: Callable[[str], None] | None = None) -> None:
        parts = [f"{styled(s)} {batch.counts[s]}" for s in ITEM_STATES if batch.counts[s]]
        (line or self.say)("  " + ", ".join(parts))

    def _smaller_than_target_line(self, batch: BatchView) -> None:
        """Outputs smaller than ``--size`` asked for are correct, but a person should not have to
        open each file to find out."""
        n = batch.smaller_than_target
        if n:
            verb = "is" if n == 1 else "are"
            hint = "(source smaller than --size; --upscale enlarges)"
            self.say(f"  {plural(n, 'output')} {verb} smaller than asked {hint}")

    def _replaced_names_line(self, batch: BatchView) -> None:
        """Names this batch took over: thumbnails of earlier batches, and (``--overwrite``) other files."""
        if batch.replaced:
            self.say(f"  replaced {plural(batch.replaced, 'thumbnail')} an earlier batch published under the same name")
        if batch.overwritten:
            self.say(f"  overwrote {plural(batch.overwritten, 'file')} thumbctl had not published (--overwrite)")

    def _failure_summary(self, batch: BatchView, line: Callable[[str], None] | None = None) -> None:
        if not batch.failures:
            return
        line = line or self.say
        if self.verbose:
            for f in batch.failures:
                line(f"  [red]{f.error_code}[/] {escape(f.item_id)} {f.ratio}: {escape(f.detail or '')}")
            return
        by_code = Counter(f.error_code for f in batch.failures)
        for code, n in by_code.most_common():
            example = next(f for f in batch.failures if f.error_code == code)
            line(f"  [red]{code}[/] x{n}: e.g. {escape(example.item_id)} ({escape(example.detail or '')})")


def _chunked(values: Iterable[object]) -> Iterator[list]:
    """``values`` in lists of :data:`WRITE_ROWS`."""
    values = iter(values)
    while chunk := list(islice(values, WRITE_ROWS)):
        yield chunk


def _replaced(n: int) -> str:
    """``2 worker processes died and were replaced``."""
    return f"{plural(n, 'worker process')} died and {'was' if n == 1 else 'were'} replaced"


def _finding_line(finding: Finding) -> str:
    where = " ".join(escape(part) for part in (finding.batch_id, finding.item_id, finding.ratio) if part)
    path = f" [dim]{escape(finding.path)}[/]" if finding.path else ""
    mark = " [green](repaired)[/]" if finding.repaired else ""
    head = f"[yellow]{finding.kind}[/]" + (f" {where}" if where else "")
    return f"{head}: {escape(finding.detail)}{path}{mark}"
