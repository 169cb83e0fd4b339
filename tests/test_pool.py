"""The supervising loop with a real pool of worker processes."""

from __future__ import annotations

import functools
import os
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.engine.pool import Pool, Standby, supervise
from thumbctl.engine.worker import WorkerConfig

from support import accept, check_invariants, make_image


def in_a_one_thread_child(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test`` in a forked child of this test process, which has one thread (a fork copies
    only the caller's), as ``submit`` has when it forks standby workers. Other tests of the same
    process may have left threads running (the tests' HTTP server, an S3 client's runtime), and
    :class:`Standby` forks nothing while another thread runs."""

    @functools.wraps(test)
    def run(*args: object, **kwargs: object) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            report = b""
            try:
                test(*args, **kwargs)
            except BaseException:  # noqa: BLE001 - every failure goes back to the parent
                report = traceback.format_exc().encode()
            with os.fdopen(write, "wb") as pipe:
                pipe.write(report)
            os._exit(1 if report else 0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            report = pipe.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, report.decode(errors="replace")

    return run


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


@in_a_one_thread_child
def test_standby_workers_render_the_batch_they_are_handed(tmp_path: Path) -> None:
    """Workers forked before the ledger is opened wait for their configuration, then claim and
    render the batch accepted meanwhile; the pool starts no other worker."""
    for n in range(3):
        make_image(tmp_path / "photos" / f"p{n}.jpg", (64, 48), "JPEG", seed=n)
    with Standby(2) as standby:
        assert len(standby.waiting) == 2
        with Ledger(tmp_path / "l.db") as ledger:
            batch = accept(ledger, tmp_path / "photos", tmp_path / "out")
            pool = Pool(WorkerConfig(db_path=str(ledger.path), batch_id=batch.batch_id), 2, standby=standby)
            standby_pids = {child.pid for child, _ in standby.waiting}
            supervise(ledger, pool, interrupts=lambda: 0, on_first_interrupt=lambda: None, on_tick=lambda: None)
            assert ledger.views.batch(batch.batch_id).counts["succeeded"] == 9
            check_invariants(ledger)
            claimers = {e.worker for e in ledger.views.events(batch.batch_id) if e.to_state == "running"}
    assert standby.waiting == [] and pool.alive == 0
    assert claimers and {int(owner.split(":")[-2]) for owner in claimers} <= standby_pids


@pytest.mark.parametrize("closed", [0, 1])
@in_a_one_thread_child
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


@in_a_one_thread_child
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


@in_a_one_thread_child
def test_a_standby_worker_stopped_before_its_batch_exits() -> None:
    """SIGTERM (the pool's graceful stop) ends a worker still waiting for its configuration."""
    standby = Standby(1)
    child, _ = standby.waiting[0]
    child.terminate()
    child.join(timeout=30)
    standby.close()
    assert child.exitcode == 0
