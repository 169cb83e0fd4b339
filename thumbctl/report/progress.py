"""Progress of a run, read from the ledger: a Rich live view on a terminal, plain lines elsewhere.

Every number comes from the ledger (item rows and the event log), never from
counters kept in memory, so two shells watching the same batch see the same
thing, and a watcher attached to a batch started elsewhere works.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..core.models import ITEM_STATES, Activity, BatchView, ItemState, RecentFailure
from ..core.proc import owner_label
from ..ledger import Follower, Ledger, parse_iso
from .runnotes import RunNotes
from .styles import STATE_STYLES, format_age, styled

#: How often the ledger is read for the live view; the runner ticks more often than this.
LIVE_REFRESH_SECONDS = 0.5
#: Recent failures read for the views (the live view shows 3, or 8 with -v; the plain lines all new ones).
_FAILURES_READ = 30


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{state} {counts[state]}" for state in ITEM_STATES if counts[state])


def rate_text(activity: Activity) -> str:
    rate = activity.rate
    return "-" if rate is None else f"{rate:.1f}/s"


def eta_text(activity: Activity, remaining: int) -> str:
    eta = activity.eta_seconds(remaining)
    return "-" if eta is None else format_age(eta)


def remaining(view: BatchView | None, activity: Activity) -> int:
    """Items left: of the batch, or (for ``work``) every live item in the ledger."""
    if view is not None:
        return view.total - view.done
    return activity.runnable + activity.delayed + activity.running


def plain_line(view: BatchView | None, activity: Activity) -> str:
    """One timestamped line for logs: no colour, no control codes."""
    stamp = activity.at[:19] + "Z"
    age = format_age(activity.queue_age_seconds)
    if view is None:
        return (
            f"{stamp} work: runnable {activity.runnable}, delayed {activity.delayed}, running {activity.running}; "
            f"{rate_text(activity)}, eta {eta_text(activity, remaining(None, activity))}, queue age {age}"
        )
    return (
        f"{stamp} {view.batch_id} {view.state} {view.done}/{view.total} done ({counts_text(view.counts)}); "
        f"{rate_text(activity)}, eta {eta_text(activity, remaining(view, activity))}, queue age {age}"
    )


def failure_lines(activity: Activity) -> list[str]:
    """Plain lines for the recent failures (with -v off a terminal)."""
    return [
        f"{f.at[:19]}Z {'retrying' if f.retrying else 'failed'} {f.item_id} {f.ratio} "
        f"[{f.error_code}] {f.detail or ''}".rstrip()
        for f in reversed(activity.recent_failures)
    ]


def live_view(view: BatchView | None, activity: Activity, elapsed: float, failures: int = 3) -> RenderableType:
    """The live panel: overall bar, counts, rate/ETA/queue age, workers, the last ``failures``."""
    parts: list[RenderableType] = [_headline(view, activity, elapsed)]
    if activity.workers:
        parts.append(_FittedTable(lambda width: _workers_table(activity, width)))
    if activity.recent_failures and failures:
        parts.append(_FittedTable(lambda width: _failures_table(activity, failures, width)))
    return Group(*parts)


class _FittedTable:
    """A table built for the width it is drawn at, so its last flexible column is cut with an
    ellipsis instead of wrapping or being cropped (and it redraws to fit after a resize)."""

    def __init__(self, build: Callable[[int], Table]) -> None:
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.build(options.max_width)


def _room_left(width: int, fixed: list[int]) -> int:
    """Width left for the one flexible column beside ``fixed`` columns (two spaces between columns)."""
    return max(8, width - sum(fixed) - 2 * len(fixed))


def _headline(view: BatchView | None, activity: Activity, elapsed: float) -> RenderableType:
    """The bar on the first line; counts and figures each on a line of their own, cut (never
    wrapped) on a narrow terminal."""
    figures = _one_line(
        f"{rate_text(activity)}  eta {eta_text(activity, remaining(view, activity))}  "
        f"queue age {format_age(activity.queue_age_seconds)}  elapsed {format_age(elapsed)}",
        style="dim",
    )
    if view is None:
        queue = f"[bold]work[/] runnable {activity.runnable}, delayed {activity.delayed}, running {activity.running}"
        return Group(_one_line(Text.from_markup(queue)), figures)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_column(no_wrap=True)
    pct = 100.0 * view.done / view.total if view.total else 100.0
    grid.add_row(
        Text.from_markup(f"[bold]{view.batch_id}[/] {styled(view.state)}"),
        ProgressBar(total=max(view.total, 1), completed=view.done, width=None),
        Text(f"{view.done}/{view.total} {pct:3.0f}%"),
    )
    counts = "  ".join(f"{styled(state)} {view.counts[state]}" for state in ITEM_STATES if view.counts[state])
    return Group(grid, _one_line(Text.from_markup(counts)), figures)


def _one_line(text: Text | str, style: str = "") -> Text:
    line = Text(text, style=style) if isinstance(text, str) else text
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


def _cut_left(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, keeping its end (a file name) after an ellipsis."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def _workers_table(activity: Activity, width: int) -> Table:
    """Worker, ratios and time keep their width (a very long worker or ratio list is cut); the
    source takes the rest, cut at its start so its file name shows."""
    now = parse_iso(activity.at)
    rows = [
        (
            owner_label(worker.worker),
            worker.item_id,
            " ".join(sorted(worker.ratios, key=_ratio_order)),
            format_age(max(0.0, now - parse_iso(worker.since))),
        )
        for worker in activity.workers
    ]
    caps = (max(6, width // 4), None, max(6, width // 4), 5)
    fixed = [
        min(cap, max(len(head), *(len(row[n]) for row in rows)))
        for n, (head, cap) in enumerate(zip(("worker", "source", "ratios", "for"), caps, strict=True))
        if cap is not None
    ]
    source_width = _room_left(width, fixed)
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for head, column_width in zip(
        ("worker", "source", "ratios", "for"), (fixed[0], source_width, *fixed[1:]), strict=True
    ):
        table.add_column(
            head, no_wrap=True, overflow="ellipsis", min_width=min(column_width, len(head)), max_width=column_width
        )
    for worker, source, ratios, age in rows:
        table.add_row(escape(worker), escape(_cut_left(source, source_width)), ratios, age)
    return table


def grouped_failures(activity: Activity, limit: int) -> list[tuple[RecentFailure, list[str]]]:
    """Recent failures, newest first, with the ratios of one source that failed alike merged."""
    groups: dict[tuple[str, str | None, str | None, bool], tuple[RecentFailure, list[str]]] = {}
    for failure in activity.recent_failures:
        key = (failure.item_id, failure.error_code, failure.detail, failure.retrying)
        if key not in groups:
            if len(groups) == limit:
                break
            groups[key] = (failure, [])
        groups[key][1].append(failure.ratio)
    return list(groups.values())


def _failures_table(activity: Activity, limit: int, width: int) -> Table:
    """Time, item, ratios and code keep their width (an item id up to 40 characters); only the
    detail gives way, cut with an ellipsis, on a narrow terminal."""
    rows = []
    for failure, ratios in grouped_failures(activity, limit):
        code = (failure.error_code or "") + (" (retrying)" if failure.retrying else "")
        rows.append((failure, failure.at[11:19], failure.item_id, " ".join(sorted(ratios, key=_ratio_order)), code))
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    fixed = []
    for n, column in enumerate(("at", "item", "ratios", "error")):
        fixed.append(min(40, max(len(column), *(len(row[n + 1]) for row in rows))))
        table.add_column(column, no_wrap=True, overflow="ellipsis", min_width=fixed[-1], max_width=fixed[-1])
    table.add_column("detail", no_wrap=True, overflow="ellipsis", max_width=_room_left(width, fixed))
    for failure, at, item_id, ratios, code in rows:
        style = "yellow" if failure.retrying else STATE_STYLES[ItemState.FAILED]
        table.add_row(at, escape(item_id), ratios, f"[{style}]{escape(code)}[/]", escape(failure.detail or ""))
    return table


def _ratio_order(ratio: str) -> float:
    """Ratios listed by shape, widest last (1:1 4:3 16:9)."""
    width, _, height = ratio.partition(":")
    return int(width) / int(height) if width.isdigit() and height.isdigit() and int(height) else 0.0


class RunProgress(RunNotes):
    """Observer of a foreground batch run (``submit``, ``retry``, ``status --watch``) or of ``work``.

    On a terminal: a Rich live view redrawn from the ledger. Elsewhere: a plain
    line every ``interval`` seconds, and with ``verbose`` each new failure. ``console`` is the
    reporter's diagnostics console (stderr): progress is never a result.
    """

    def __init__(
        self,
        console: Console,
        *,
        batch_id: str | None,
        enabled: bool = True,
        interval: float = 5.0,
        verbose: bool = False,
    ) -> None:
        self.console = console
        self.batch_id = batch_id
        self.enabled = enabled
        self.interval = interval
        self.verbose = verbose
        self.live = enabled and console.is_terminal
        self._started = time.monotonic()
        self._last_read = float("-inf")
        self._last_line = float("-inf")
        self._seen_failures: set[tuple[str, str, str]] = set()
        self._live: Live | None = None
        self._failures_shown = 8 if verbose else 3
        self._last_body = ""
        self._follower: Follower | None = None
        self._followed: Ledger | None = None

    def __enter__(self) -> RunProgress:
        if self.live:
            # Drawn when read, not on a timer: the frame only changes when the ledger is read again.
            self._live = Live(console=self.console, auto_refresh=False, transient=False, redirect_stdout=False)
            self._live.start()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()

    # -- RunObserver -------------------------------------------------------------------

    def tick(self, ledger: Ledger) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._live is not None:
            if now - self._last_read >= LIVE_REFRESH_SECONDS:
                self._last_read = now
                view, activity = self._read(ledger)
                self._live.update(live_view(view, activity, now - self._started, self._failures_shown), refresh=True)
            return
        if now - self._last_line >= self.interval:
            self._last_line = now
            view, activity = self._read(ledger)
            self._print_plain(view, activity)

    def finish(self, ledger: Ledger) -> None:
        """A last frame or line, so the view ends on the final counts."""
        if self.enabled:
            view, activity = self._read(ledger)
            if self._live is not None:
                elapsed = time.monotonic() - self._started
                self._live.update(live_view(view, activity, elapsed, self._failures_shown), refresh=True)
            else:
                self._print_plain(view, activity, final=True)

    def _stderr(self) -> Console:
        return self.console

    def _read(self, ledger: Ledger) -> tuple[BatchView | None, Activity]:
        """The view and activity as of now, from a follower of the ledger: after its first read
        (which counts the item rows) each read costs only what changed since the last."""
        if self._follower is None or self._followed is not ledger:
            self._follower = ledger.views.follow(self.batch_id, failures=_FAILURES_READ)
            self._followed = ledger
        return self._follower.read()

    def _print_plain(self, view: BatchView | None, activity: Activity, *, final: bool = False) -> None:
        """The failures not shown yet (with ``verbose``), then the progress line; the final line
        is left out when it would only repeat the last one."""
        if self.verbose:
            for failure, line in zip(reversed(activity.recent_failures), failure_lines(activity), strict=True):
                key = (failure.at, failure.item_id, failure.ratio)
                if key not in self._seen_failures:
                    self._seen_failures.add(key)
                    self.console.print(line, markup=False, highlight=False)
        line = plain_line(view, activity)
        body = line.split(" ", 1)[1]  # without its timestamp
        if not (final and body == self._last_body):
            self.console.print(line, markup=False, highlight=False)
        self._last_body = body
