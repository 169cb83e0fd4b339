"""What a run says on stderr however its progress is shown, even with ``-q`` or ``--json``: a
cancel recorded, a stop under way, a worker's death. :class:`QuietRun` is the observer of a run
that shows no progress; it makes the diagnostics console only if it has one of these to say."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ..core.models import BatchView
    from ..engine.pool import WorkerDeath
    from ..ledger import Ledger


class RunNotes:
    """The notes of a run (a :class:`thumbctl.engine.runner.RunObserver`'s), on the console
    :meth:`_stderr` gives."""

    def _stderr(self) -> Console:
        raise NotImplementedError

    def cancel_recorded(self, batch: BatchView) -> None:
        """A Ctrl-C's cancel; none is recorded when every item had already settled."""
        if batch.cancel_requested_at is None:
            self._stderr().print(f"Batch {batch.batch_id} had already ended ({batch.state}): nothing to cancel.")
            return
        self._stderr().print(
            f"[magenta]Cancel recorded[/] for {batch.batch_id} at {batch.cancel_requested_at}; running items stop "
            "at their next checkpoint. Press Ctrl-C again to quit at once."
        )

    def stopping(self) -> None:
        self._stderr().print("Stopping after the sources in hand. Press Ctrl-C again to quit at once.")

    def worker_died(self, death: WorkerDeath, restarted: bool) -> None:
        """Shown even with -q or --json (on stderr): a crash is news, and so is a restart."""
        what = (
            "after taking work; any items it still held go back to the queue (the attempt counts)"
            if death.took_work
            else "before taking any work"
        )
        then = "started a replacement" if restarted else "not replaced: the run is stopping"
        self._stderr().print(
            f"[yellow]warning[/] [dim]\\[worker_crashed][/] worker process {death.pid} died ({death.how}) "
            f"{what}; {then}"
        )


class QuietRun(RunNotes):
    """A run's observer with ``-q`` or ``--json``: no progress, only the notes."""

    def __init__(self, diagnostics: Callable[[], Console]) -> None:
        self._diagnostics = diagnostics

    def _stderr(self) -> Console:
        return self._diagnostics()

    def __enter__(self) -> QuietRun:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def tick(self, ledger: Ledger) -> None:
        return None

    def finish(self, ledger: Ledger) -> None:
        return None
