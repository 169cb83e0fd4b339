"""The supervising loop with a real pool of worker processes."""

from __future__ import annotations

from pathlib import Path

from thumbctl import Ledger
from thumbctl.pool import Pool, supervise
from thumbctl.worker import WorkerConfig


def test_two_presses_seen_at_one_tick_still_run_the_first_press_action(ledger: Ledger) -> None:
    """Two quick Ctrl-C presses land between two ticks of the loop: the first press's action (a
    durable cancel, for submit) must still run, before the workers are killed."""
    calls: list[str] = []
    pool = Pool(WorkerConfig(db_path=str(Path(ledger.path))), 1)
    result = supervise(
        ledger,
        pool,
        interrupts=lambda: 2,
        on_first_interrupt=lambda: calls.append("first"),
        on_tick=lambda: None,
    )
    assert calls == ["first"]
    assert result.interrupted and result.killed
    assert pool.alive == 0
