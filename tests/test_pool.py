"""The supervising loop with a real pool of worker processes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from thumbctl import Ledger, SubmitOptions, prepare_submission, submit
from thumbctl.pool import Pool, Standby, supervise
from thumbctl.worker import WorkerConfig

from support import check_invariants, make_image


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


def test_standby_workers_render_the_batch_they_are_handed(tmp_path: Path) -> None:
    """Workers forked before the ledger is opened wait for their configuration, then claim and
    render the batch accepted meanwhile; the pool starts no other worker."""
    for n in range(3):
        make_image(tmp_path / "photos" / f"p{n}.jpg", (64, 48), "JPEG", seed=n)
    with Standby(2) as standby:
        assert len(standby.waiting) == 2
        with Ledger(tmp_path / "l.db") as ledger:
            options = SubmitOptions(out_dir=tmp_path / "out")
            batch = submit(ledger, prepare_submission(tmp_path / "photos", options, ledger), options.limits)
            pool = Pool(WorkerConfig(db_path=str(ledger.path), batch_id=batch.batch_id), 2, standby=standby)
            standby_pids = {child.pid for child, _ in standby.waiting}
            supervise(ledger, pool, interrupts=lambda: 0, on_first_interrupt=lambda: None, on_tick=lambda: None)
            assert ledger.views.batch(batch.batch_id).counts["succeeded"] == 9
            check_invariants(ledger)
            claimers = {e.worker for e in ledger.views.events(batch.batch_id) if e.to_state == "running"}
    assert standby.waiting == [] and pool.alive == 0
    assert claimers and {int(owner.split(":")[-2]) for owner in claimers} <= standby_pids


@pytest.mark.parametrize("closed", [0, 1])
def test_a_standby_worker_exits_once_its_link_is_closed_whichever_was_forked_later(closed: int) -> None:
    """Each standby worker closes its copies of the coordinator's ends, its own and the earlier
    workers', so it reads end-of-file as soon as the coordinator closes (or loses) its end: the
    first worker must not be kept waiting by the second one's copy."""
    standby = Standby(2)
    children = [child for child, _ in standby.waiting]
    child, link = standby.waiting.pop(closed)
    try:
        link.close()
        child.join(timeout=30)
        assert child.exitcode == 0
    finally:
        for each in children:
            each.terminate()
        standby.close()


def test_standby_workers_never_handed_over_exit_when_closed() -> None:
    standby = Standby(2)
    children = [child for child, _ in standby.waiting]
    standby.close()
    assert [child.exitcode for child in children] == [0, 0]


def test_no_standby_worker_is_forked_while_another_thread_runs() -> None:
    """Forking copies only the calling thread; a lock another thread held would stay held in the
    child, so then the pool starts its workers from the fork server instead."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert Standby(2).waiting == []
    finally:
        release.set()
        thread.join()


def test_a_standby_worker_stopped_before_its_batch_exits() -> None:
    """SIGTERM (the pool's graceful stop) ends a worker still waiting for its configuration."""
    standby = Standby(1)
    child, _ = standby.waiting[0]
    child.terminate()
    child.join(timeout=30)
    standby.close()
    assert child.exitcode == 0
