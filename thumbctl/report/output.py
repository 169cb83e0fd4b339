"""Where output goes: two consoles and the primitives every report is written with.

The library never prints; the CLI hands views to a reporter, the one place that decides which
stream a line goes to (DESIGN section 2). It holds two consoles, each checking for itself
whether its stream is a terminal:

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
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, islice
from typing import TYPE_CHECKING, Self, TextIO

from ..core.errors import ThumbctlError
from ..core.models import ITEM_STATES, BatchView
from .listing import WIDTH_SAMPLE, Cell, chunked, column_widths, markup_line, plain_line
from .styles import escape, printable, styled

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from .progress import RunProgress
    from .runnotes import QuietRun

ELEMENT_ENCODER = json.JSONEncoder(ensure_ascii=False)


class Output:
    """Results on stdout and diagnostics on stderr; ``json_mode`` sends one document to stdout
    instead of the results. What each command says is built on these primitives
    (:class:`thumbctl.report.reporter.Reporter`).

    ``stdout`` is a shorthand for a results console writing to that file. A console not given is
    made when first written to (:mod:`.consoles`).
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
        self._results = results
        self._diagnostics = diagnostics
        self._stdout = stdout
        #: Whether the consoles not given are the process's own streams' (:func:`.consoles.stream_console`).
        self._on_streams = False
        #: While a JSON listing is being written: what closes its list.
        self._open_list: str | None = None
        #: JSON Lines (``--jsonl``): every document, the error's too, on one line of its own.
        self.json_lines = False

    @classmethod
    def for_streams(
        cls, *, json_mode: bool = False, quiet: bool = False, verbose: bool = False, progress_interval: float = 5.0
    ) -> Self:
        """The command line's reporter: results on this process's stdout, diagnostics on its stderr."""
        output = cls(json_mode=json_mode, quiet=quiet, verbose=verbose, progress_interval=progress_interval)
        output._on_streams = True
        return output

    @property
    def results(self) -> Console:
        """Results: stdout."""
        if self._results is None:
            self._results = self._console(stderr=False)
        return self._results

    @property
    def diagnostics(self) -> Console:
        """Progress, warnings, hints, notices and errors: stderr."""
        if self._diagnostics is None:
            self._diagnostics = self._console(stderr=True)
        return self._diagnostics

    def _console(self, *, stderr: bool) -> Console:
        from .consoles import plain_console, stream_console

        if self._on_streams:
            return stream_console(stderr=stderr)
        return plain_console(stderr=stderr, file=None if stderr else self._stdout)

    @property
    def stdout(self) -> TextIO:
        """The results' stream (JSON and the streamed listings are written to it directly)."""
        if self._results is not None:
            return self._results.file
        return self._stdout or sys.stdout

    def run_progress(self, batch_id: str | None) -> RunProgress | QuietRun:
        """The live view (stderr a terminal) or plain lines (elsewhere) of a run, on stderr; with
        -q or --json, only the notes a run always gives (:mod:`.runnotes`)."""
        if self.quiet or self.json_mode:
            from .runnotes import QuietRun

            return QuietRun(lambda: self.diagnostics)
        from .progress import RunProgress

        return RunProgress(self.diagnostics, batch_id=batch_id, interval=self.progress_interval, verbose=self.verbose)

    # -- primitives -----------------------------------------------------------

    def emit_json(self, doc: object) -> None:
        indent = None if self.json_lines else 2
        self.stdout.write(json.dumps(doc, indent=indent, ensure_ascii=False) + "\n")
        self.stdout.flush()

    def emit_json_lines(self, elements: Iterable[object]) -> None:
        """Each element as one JSON object on a line of its own (JSON Lines), written as they
        come: ``| head -1`` gets a whole object, and ``jq -c`` or a log shipper reads each line."""
        for chunk in chunked(map(ELEMENT_ENCODER.encode, elements)):
            self.stdout.write("".join(line + "\n" for line in chunk))
            self.stdout.flush()

    def emit_json_list(self, head: dict[str, object], key: str, elements: Iterable[object]) -> None:
        """The document ``{**head, key: [elements]}`` written as the elements come, one element a
        line: memory stays flat however long the list, and the output is one JSON document.
        Nothing is written before the first elements are in hand, so a ledger fault met at once
        leaves only the error document; one met later closes this document with an ``error``
        member (:meth:`error`)."""
        chunks = chunked(map(ELEMENT_ENCODER.encode, elements))
        first = next(chunks, [])
        opening = json.dumps({**head, key: []}, indent=2, ensure_ascii=False)
        self.stdout.write(opening[: -len("[]\n}")] + ("[\n    " + ",\n    ".join(first) if first else "["))
        self._open_list = "\n  ]" if first else "]"
        for chunk in chunks:
            self.stdout.write(",\n    " + ",\n    ".join(chunk))
        self.stdout.write(self._open_list + "\n}\n")
        self._open_list = None
        self.stdout.flush()

    def listing_pages(self, columns: Sequence[str], pages: Iterable[Sequence[Sequence[Cell]]]) -> None:
        """:meth:`listing` for rows that come in pages over time (``--follow``): the columns are
        sized on the first page and each page is written (and flushed) as it comes."""
        widths: list[int] | None = None
        for page in pages:
            if widths is None:
                widths = column_widths(columns, page[:WIDTH_SAMPLE])
                page = [[(name, "bold") for name in columns], *page]
            if self.results.is_terminal:
                self.results.print("\n".join(markup_line(row, widths) for row in page), soft_wrap=True)
            else:
                self.stdout.write("".join(plain_line(row, widths) + "\n" for row in page))
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
            for chunk in chunked(chain([header], sample, rows)):
                self.results.print("\n".join(markup_line(row, widths) for row in chunk), soft_wrap=True)
            return
        for chunk in chunked(chain([header], sample, rows)):
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
        self.error_line(err)
        if self.json_mode and self.json_lines:  # a line of its own, after the elements written so far
            self.emit_json(err.to_json())
        elif self.json_mode and self._open_list is not None:  # a listing cut short: its document ends here
            member = json.dumps(err.to_json(), indent=2, ensure_ascii=False)[len("{\n") :]
            self.stdout.write(f"{self._open_list},\n{member}\n")
            self._open_list = None
            self.stdout.flush()
        elif self.json_mode:
            self.emit_json(err.to_json())

    def error_line(self, err: ThumbctlError) -> None:
        """The error's one line on stderr, always shown; no document on stdout."""
        self.diagnostics.print(f"[bold red]error[/] [dim]\\[{err.code}][/] {escape(printable(err.message))}")

    # -- pieces ---------------------------------------------------------------

    def table(self, table: Table) -> None:
        """A result table: on a terminal cut to its width; elsewhere as wide as its cells, so a pipe
        gets every path whole."""
        if self.quiet or self.json_mode:
            return
        console = self.results
        if console.is_terminal:
            console.print(table)
            return
        from rich.measure import Measurement

        kept = console.width
        console.width = max(kept, Measurement.get(console, console.options.update_width(1 << 16), table).maximum)
        try:
            console.print(table)
        finally:
            console.width = kept

    def counts_line(self, batch: BatchView, line: Callable[[str], None] | None = None) -> None:
        parts = [f"{styled(s)} {batch.counts[s]}" for s in ITEM_STATES if batch.counts[s]]
        (line or self.say)("  " + ", ".join(parts))

    def failure_summary(self, batch: BatchView, line: Callable[[str], None] | None = None) -> None:
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
