"""Progress of a run, read from the ledger: a Rich bar on a terminal, plain lines elsewhere.

Every number comes from the ledger (item rows), never from counters kept in
memory, so any process watching a batch sees the same thing.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .ledger import Ledger
from .models import ITEM_STATES, BatchView


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{state} {counts[state]}" for state in ITEM_STATES if counts[state])


class RunProgress:
    """Observer of a foreground batch run (``submit``) or of ``work``."""

    def __init__(self, console: Console, *, batch_id: str | None, enabled: bool = True, interval: float = 5.0) -> None:
        self.console = console
        self.batch_id = batch_id
        self.enabled = enabled
        self.interval = interval
        self.live = enabled and console.is_terminal
        self._last_line = 0.0
        self._progress: Progress | None = None
        self._task: int | None = None

    def __enter__(self) -> RunProgress:
        if self.live:
            bar = (BarColumn(), MofNCompleteColumn()) if self.batch_id else ()
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                *bar,
                TextColumn("{task.fields[counts]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.batch_id or "work", total=None, counts="")
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()

    # -- RunObserver -------------------------------------------------------------------

    def tick(self, ledger: Ledger) -> None:
        if not self.enabled:
            return
        if self.batch_id is None:
            self._tick_queue(ledger)
            return
        view = ledger.batch(self.batch_id, with_failures=False)
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, total=view.total, completed=view.done, counts=counts_text(view.counts))
        elif self._due():
            self.console.print(
                f"{_now()} {view.batch_id} {view.state} {view.done}/{view.total} done ({counts_text(view.counts)})"
            )

    def _tick_queue(self, ledger: Ledger) -> None:
        state = ledger.queue_state()
        text = f"runnable {state.runnable}, delayed {state.delayed}, running {state.running}"
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, counts=text)
        elif self._due():
            self.console.print(f"{_now()} work: {text}")

    def _due(self) -> bool:
        now = time.monotonic()
        if now - self._last_line < self.interval:
            return False
        self._last_line = now
        return True

    def cancel_recorded(self, batch: BatchView) -> None:
        self.console.print(
            f"[magenta]Cancel recorded[/] for {batch.batch_id} at {batch.cancel_requested_at}; running items stop "
            "at their next checkpoint. Press Ctrl-C again to quit at once."
        )

    def stopping(self) -> None:
        self.console.print("Stopping after the sources in hand. Press Ctrl-C again to quit at once.")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
