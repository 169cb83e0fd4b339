"""Lease owner identity: host name plus machine id, and which owners this host may declare dead."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_ledger_contract import dead_owner as exited_thread_owner

from thumbctl.core.proc import HOST_ID_ENV, host_id, host_name_of, machine_id, owner_id, owner_is_dead, owner_label

OTHER_MACHINE = "ffffffffffff"


@pytest.fixture
def dead_owner() -> Iterator[str]:
    """The lease owner id of a real worker process that has since been killed and reaped."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    owner = owner_id(child.pid)
    child.kill()
    child.wait()
    yield owner


def with_host(owner: str, host: str) -> str:
    return ":".join([host, *owner.rsplit(":", 2)[1:]])


def test_the_host_identity_is_the_host_name_and_the_machine_id() -> None:
    assert host_id() == f"{socket.gethostname()}~{machine_id()}"
    assert owner_id() == f"{host_id()}:{os.getpid()}:{owner_id().rsplit(':', 1)[1]}"
    assert len(machine_id()) == 12 and int(machine_id(), 16) >= 0


@pytest.mark.skipif(not Path("/etc/machine-id").exists(), reason="this system has no /etc/machine-id")
def test_the_machine_id_comes_from_etc_machine_id() -> None:
    assert machine_id() == Path("/etc/machine-id").read_text().strip()[:12]


def test_a_dead_worker_of_this_host_is_dead(dead_owner: str) -> None:
    assert owner_is_dead(dead_owner)


@pytest.mark.parametrize(
    "host",
    [
        pytest.param(f"{socket.gethostname()}~{OTHER_MACHINE}", id="same-name-other-machine"),
        pytest.param(socket.gethostname(), id="name-only"),
        pytest.param(f"elsewhere~{OTHER_MACHINE}", id="other-host"),
    ],
)
def test_a_dead_pid_on_another_host_is_never_declared_dead(host: str) -> None:
    """A same-named machine's worker may be alive there: only its lease expiry frees its items."""
    gone = exited_thread_owner()  # dead here, by its task id
    assert owner_is_dead(gone)
    assert not owner_is_dead(with_host(gone, host))


def test_a_live_worker_is_alive_and_a_reused_pid_is_not_it() -> None:
    assert not owner_is_dead(owner_id())
    ticks = owner_id().rsplit(":", 1)[1]
    assert owner_is_dead(f"{host_id()}:{os.getpid()}:{int(ticks) + 1}")


def test_the_host_id_override_replaces_the_whole_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    real, gone = host_id(), exited_thread_owner()
    monkeypatch.setenv(HOST_ID_ENV, "host-b")
    assert host_id() == "host-b" and owner_id().startswith(f"host-b:{os.getpid()}:")
    assert owner_is_dead(with_host(gone, "host-b"))
    assert not owner_is_dead(with_host(gone, "host-a"))
    assert not owner_is_dead(with_host(gone, real))


def test_worker_processes_take_the_override_from_the_environment(dead_owner: str) -> None:
    """The way the multi-host tests run three "hosts" on one machine."""
    code = "import sys; from thumbctl.core.proc import owner_id as o, owner_is_dead as d; print(o(), d(sys.argv[1]))"
    env = {**os.environ, HOST_ID_ENV: "host-c"}
    for owner, dead in ((with_host(dead_owner, "host-c"), "True"), (dead_owner, "False")):
        done = subprocess.run([sys.executable, "-c", code, owner], env=env, capture_output=True, text=True, check=True)
        pid = done.stdout.split(":")[1]
        assert done.stdout.startswith(f"host-c:{pid}:") and done.stdout.split()[1] == dead


@pytest.mark.parametrize(
    ("owner", "label", "name"),
    [
        ("shop-1~0123456789ab:42:7", "shop-1:42:7", "shop-1"),
        ("host-b:42:7", "host-b:42:7", "host-b"),
        ("w1", "w1", "w1"),
    ],
)
def test_owners_are_shown_with_their_host_name(owner: str, label: str, name: str) -> None:
    assert owner_label(owner) == label and host_name_of(owner) == name
