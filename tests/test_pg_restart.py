"""A PostgreSQL server restarted while a batch runs: waited out, never an item's fault.

The restart is staged: every worker pauses at a named checkpoint (THUMBCTL_FAULT) holding its
claim, the server (a throw-away cluster of the tests' own, see tests/pg.py) is restarted under it
(every open connection — the workers', their heartbeats' and the supervisor's — is closed by the
server), then the workers are released. The batch must finish as if nothing had happened: every
item succeeded on its first attempt, no ``worker_crashed``, no claim given back.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness import Background, Thumbctl, alive, in_timed_sleep, sockets_of, until
from pg import PgServer
from support import make_image, objects_in

pytestmark = pytest.mark.timeout(180)

#: The busy policy's bound for these runs (seconds): a restart must be waited out within it.
BUSY_WAIT = 20


class Run(Thumbctl):
    """``thumbctl`` commands against one PostgreSQL ledger, with four photos and fault injection."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        # a PostgreSQL ledger has no default store
        store = tmp_path / "store"
        super().__init__(url, store=store, faults=tmp_path / "faults", env={"THUMBCTL_BUSY_WAIT": str(BUSY_WAIT)})
        self.out = tmp_path / "out"
        self.photos = tmp_path / "photos"
        for n, size in enumerate([(300, 200), (200, 300), (256, 256), (320, 240)]):
            make_image(self.photos / f"p{n}.jpg", size, "JPEG", seed=n)


@pytest.fixture
def run(tmp_path: Path, pg_server: PgServer) -> Run:
    return Run(tmp_path, pg_server.url)


def start_batch(run: Run, command: str, checkpoint: str) -> Background:
    """A run of ``command`` (``submit`` in the foreground, or ``work`` on a detached batch) whose two
    workers both pause at ``checkpoint``; progress is read every half second, so the supervisor
    meets the closed connection too."""
    fault = f"pause:{checkpoint}"
    progress = ("--stats-interval", "0.5")
    if command == "submit":
        return run.start("submit", str(run.photos), "--out", str(run.out), "-w", "2", *progress, fault=fault)
    assert run.run("submit", str(run.photos), "--out", str(run.out), "--detach").returncode == 0
    return run.start("work", "--until-idle", "-w", "2", *progress, fault=fault)


def interrupt(
    pg_server: PgServer, run: Run, supervisor: Background, workers: list[int], checkpoint: str, how: str
) -> None:
    """``restart``: a fast restart; once the supervisor has met the closed connection and opened a
    new one, the workers go on. ``outage``: the server is stopped, the workers go on, and it comes
    back once every worker has been seen waiting for it (past its checkpoint, between tries)."""
    if how == "restart":
        before = sockets_of(supervisor.pid)
        assert before, "the supervisor holds no connection"
        pg_server.restart()

        def reconnected() -> bool:  # a connection closed by the restart, and a new one in its place
            now = sockets_of(supervisor.pid)
            return bool(before - now and now - before)

        until(reconnected, "the supervisor to reconnect after the restart")
        run.release()
    else:
        pg_server.stop()
        run.release()
        waiting = set()

        def all_waiting() -> bool:
            paused = set(run.paused_pids(checkpoint))
            for pid in workers:
                assert alive(pid), f"worker {pid} ended while the server was down"
                if pid not in paused and in_timed_sleep(pid):
                    waiting.add(pid)
            return waiting == set(workers)

        until(all_waiting, "every worker to wait for the stopped server")
        pg_server.start()


@pytest.mark.parametrize(
    ("command", "checkpoint", "how"),
    [
        ("submit", "before_publish", "restart"),  # between two transactions of a claim
        ("work", "before_publish", "restart"),
        ("submit", "after_link", "restart"),  # inside the publish transaction: its commit is lost
        ("work", "after_link", "outage"),
        ("work", "before_publish", "outage"),
        ("work", "worker_start", "outage"),  # the workers open their connections while the server is down
    ],
)
def test_a_server_restart_mid_run_is_waited_out_and_costs_no_attempt(
    run: Run, pg_server: PgServer, command: str, checkpoint: str, how: str
) -> None:
    proc = start_batch(run, command, checkpoint)
    # both workers are at the checkpoint (holding a claim, past worker_start)
    workers = run.paused(checkpoint, count=2, process=proc)
    began = time.monotonic()
    interrupt(pg_server, run, proc, workers, checkpoint, how)
    _, stderr = proc.communicate(timeout=120)
    took = time.monotonic() - began
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "worker_crashed" not in stderr
    assert took < BUSY_WAIT + 10, f"the run took {took:.1f}s after the server went away"
    [summary] = run.json("status")["batches"]
    batch = run.json("status", summary["batch_id"])
    assert batch["state"] == "succeeded" and batch["counts"]["succeeded"] == batch["total"] == 12
    items = run.json("status", summary["batch_id"], "--items")["items"]
    assert len(items) == 12 and {item["attempt"] for item in items} == {1}
    events = run.json("events", summary["batch_id"])["events"]
    assert [e for e in events if e["error_code"] or e["detail"]] == []  # no failure, no claim given back
    claims = [e for e in events if e["to_state"] == "running"]
    assert len(claims) == 12 and {e["attempt"] for e in claims} == {1}
    assert [e["from_state"] for e in events if e["to_state"] == "succeeded"] == ["running"] * 12
    objects = objects_in(run.store)
    assert len(objects) == 12 and not (run.out / ".tmp").exists()
