"""A PostgreSQL server restarted while a batch runs: waited out, never an item's fault.

The restart is staged: every worker pauses at a named checkpoint (THUMBCTL_FAULT) holding its
claim, the server is restarted under it (every open connection — the workers', their heartbeats'
and the supervisor's — is closed by the server), then the workers are released. The batch must
finish as if nothing had happened: every item succeeded on its first attempt, no
``worker_crashed``, no claim given back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pg import PgServer
from support import make_image, objects_in

pytestmark = pytest.mark.timeout(180)

#: The busy policy's bound for these runs (seconds): a restart must be waited out within it.
BUSY_WAIT = 20


class Run:
    """``thumbctl`` commands against one PostgreSQL ledger, with fault injection."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.url = url
        self.out = tmp_path / "out"
        self.store = tmp_path / "store"  # a PostgreSQL ledger has no default store
        self.faults = tmp_path / "faults"
        self.faults.mkdir()
        self.photos = tmp_path / "photos"
        for n, size in enumerate([(300, 200), (200, 300), (256, 256), (320, 240)]):
            make_image(self.photos / f"p{n}.jpg", size, "JPEG", seed=n)

    def env(self, fault: str | None = None) -> dict[str, str]:
        env = {
            **os.environ,
            "THUMBCTL_DB": self.url,
            "THUMBCTL_STORE": str(self.store),
            "THUMBCTL_FAULT_DIR": str(self.faults),
            "THUMBCTL_BUSY_WAIT": str(BUSY_WAIT),
        }
        env.pop("THUMBCTL_FAULT", None)
        if fault:
            env["THUMBCTL_FAULT"] = fault
        return env

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "thumbctl", *args]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), env=self.env(), capture_output=True, text=True, timeout=90)

    def start(self, *args: str, fault: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(*args),
            env=self.env(fault),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def paused(self, checkpoint: str, count: int) -> list[int]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = [int(p.name.rsplit("-", 1)[1]) for p in self.faults.glob(f"paused-{checkpoint}-*")]
            if len(pids) >= count:
                return pids
            time.sleep(0.02)
        raise AssertionError(f"no {count} workers paused at {checkpoint}")

    def release(self) -> None:
        (self.faults / "release").touch()

    def json(self, *args: str) -> dict:
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def run(tmp_path: Path, pg_server: PgServer) -> Run:
    return Run(tmp_path, pg_server.url)


#: How long the server stays down in the ``outage`` cases (seconds): well inside the bound.
OUTAGE = 4


def start_batch(run: Run, command: str, checkpoint: str) -> subprocess.Popen:
    """A run of ``command`` (``submit`` in the foreground, or ``work`` on a detached batch) whose two
    workers both pause at ``checkpoint``; progress is read every half second, so the supervisor
    meets the closed connection too."""
    fault = f"pause:{checkpoint}"
    progress = ("--stats-interval", "0.5")
    if command == "submit":
        return run.start("submit", str(run.photos), "--out", str(run.out), "-w", "2", *progress, fault=fault)
    assert run.run("submit", str(run.photos), "--out", str(run.out), "--detach").returncode == 0
    return run.start("work", "--until-idle", "-w", "2", *progress, fault=fault)


def interrupt(pg_server: PgServer, run: Run, how: str) -> None:
    """``restart``: a fast restart, then the workers go on. ``outage``: the server is stopped, the
    workers go on and meet it down, and it comes back ``OUTAGE`` seconds later."""
    if how == "restart":
        pg_server.restart()
        time.sleep(0.6)  # the supervisor reads progress every 0.5 s: it meets the closed connection first
        run.release()
    else:
        pg_server.stop()
        run.release()
        time.sleep(OUTAGE)
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
    run.paused(checkpoint, count=2)  # both workers are at the checkpoint (holding a claim, past worker_start)
    began = time.monotonic()
    interrupt(pg_server, run, how)
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
