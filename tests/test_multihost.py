"""Several hosts sharing one PostgreSQL ledger and one OUT; one of them dies whole.

Each "host" is a ``thumbctl work`` process group with its own host identity
(``THUMBCTL_HOST_ID``, test only) on this machine. The victim host's workers pause at
``before_publish`` (THUMBCTL_FAULT), so it certainly holds leases when it is killed with
``kill -9`` of its whole process group; the other hosts cannot see its processes, so they take
its items back only when its leases expire (``THUMBCTL_LEASE_SECONDS``, test only, shortens
them), and finish the batch. One round cancels the batch while the dead host's items are still
held. A dead worker of the *same* host identity is rescued at once, lease or not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.config.options import LEASE_ENV
from thumbctl.core.proc import HOST_ID_ENV, owner_is_dead

from conftest import SAMPLE_IMAGES
from harness import Background, Thumbctl, all_gone, until
from support import make_image, objects_in

pytestmark = pytest.mark.timeout(300)

#: The lease of every host's workers in these runs (seconds): a dead host's items wait this long.
#: Live workers beat every second (a third of it), so only a stall of two seconds would lose one.
LEASE = 3
HOSTS = ("host-a", "host-b", "host-c")
TERMINAL = {"succeeded", "failed", "cancelled"}


@dataclass
class Host:
    """One host: a ``thumbctl work`` process group with its own host identity and faults folder."""

    name: str
    cli: Thumbctl
    proc: Background

    def paused(self, checkpoint: str, count: int) -> list[int]:
        """The pids of ``count`` of this host's workers paused at ``checkpoint``, once they are."""
        return self.cli.paused(checkpoint, count, process=self.proc, timeout=120)

    def release(self) -> None:
        self.cli.release()

    def kill(self) -> None:
        """kill -9 of the whole host: its supervisor, workers and fork server at once."""
        self.proc.kill()

    def finish(self) -> tuple[int, str]:
        return self.proc.finish(timeout=240)


class Site:
    """One PostgreSQL ledger, one shared OUT, store and photos, and the hosts working on them."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp = tmp_path
        self.url = url
        self.out = tmp_path / "out"
        self.photos = tmp_path / "photos"
        for image in sorted(SAMPLE_IMAGES.glob("*/*")):
            if image.suffix in (".jpg", ".png"):
                (self.photos / image.parent.name).mkdir(parents=True, exist_ok=True)
                shutil.copy(image, self.photos / image.parent.name / image.name)

    def cli(self, host: str, lease: float | None = LEASE, faults: Path | None = None) -> Thumbctl:
        """``host``'s commands; ``lease`` None: the default lease (30 s)."""
        lease_env = None if lease is None else str(lease)
        return Thumbctl(
            self.url, store=self.tmp / "store", host=host, faults=faults, env={LEASE_ENV: lease_env}, timeout=120
        )

    def run(self, *args: str, host: str = "admin", lease: float | None = LEASE) -> subprocess.CompletedProcess:
        return self.cli(host, lease).run(*args)

    def json(self, *args: str) -> dict:
        return self.cli("admin").json(*args, codes=(0, 1, 4))

    def submit(self) -> str:
        done = self.run("submit", str(self.photos), "--out", str(self.out), "--size", "256", "--detach", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["batch_id"]

    def start(self, name: str, batch_id: str, fault: str | None = None, lease: float | None = LEASE) -> Host:
        cli = self.cli(name, lease, faults=self.tmp / f"faults-{name}")
        proc = cli.start("work", "--batch", batch_id, "--until-idle", "-w", "2", "-q", fault=fault)
        return Host(name, cli, proc)

    def succeeded(self, batch_id: str) -> int:
        return self.json("status", batch_id)["counts"]["succeeded"]


@pytest.fixture
def site(tmp_path: Path, pg_url: str) -> Site:
    return Site(tmp_path, pg_url)


def violations(site: Site, batch_id: str) -> list[str]:
    """Every broken rule of a finished multi-host run, as text (none: an empty list)."""
    found = []
    batch = site.json("status", batch_id)
    items = site.json("status", batch_id, "--items")["items"]
    events = site.json("events", batch_id)["events"]
    found += [f"{i['item_id']} {i['ratio']} ended {i['state']}" for i in items if i["state"] not in TERMINAL]
    if batch["counts"]["queued"] or batch["counts"]["running"]:
        found.append(f"batch {batch['state']} with counts {batch['counts']}")
    published = Counter((e["item_id"], e["ratio"]) for e in events if e["to_state"] == "succeeded")
    found += [f"{item} {ratio} succeeded {n} times" for (item, ratio), n in published.items() if n != 1]
    succeeded = [i for i in items if i["state"] == "succeeded"]
    found += [
        f"{i['item_id']} {i['ratio']} succeeded without its event"
        for i in succeeded
        if not published[(i["item_id"], i["ratio"])]
    ]
    found += _object_violations(site, succeeded)
    cancel = [e["seq"] for e in events if e["to_state"] == "cancel_requested"]
    if cancel:
        late = [e for e in events if e["to_state"] == "succeeded" and e["seq"] > cancel[0]]
        found += [f"{e['item_id']} {e['ratio']} published after the cancel (seq {e['seq']})" for e in late]
    reconcile = site.run("reconcile", "--json")
    if reconcile.returncode != 0:
        found.append(f"reconcile exit {reconcile.returncode}: {reconcile.stdout}{reconcile.stderr}")
    return found


def _object_violations(site: Site, succeeded: list[dict]) -> list[str]:
    """One object per derivative key of the succeeded items, and no other (nothing of a cancelled
    item was published, no duplicate, no temp file left by the survivors)."""
    keys = {i["derivative_key"] for i in succeeded}
    objects = sorted(objects_in(site.tmp / "store"))
    found = []
    if len(objects) != len(keys):
        found.append(f"{len(objects)} objects for {len(keys)} derivative keys")
    wanted = {
        str(site.out / i["object_path"]) if not os.path.isabs(i["object_path"]) else i["object_path"] for i in succeeded
    }
    found += [f"object {p} belongs to no succeeded item" for p in objects if str(p) not in wanted]
    return found


@pytest.mark.parametrize("round_", [0, 1, 2], ids=["kill-a", "kill-b", "kill-c-and-cancel"])
def test_a_host_killed_mid_run_is_finished_by_the_others_after_its_leases_expire(site: Site, round_: int) -> None:
    cancel = round_ == 2
    victim_name = HOSTS[round_]
    batch_id = site.submit()
    total = site.json("status", batch_id)["total"]
    victim = site.start(victim_name, batch_id, fault="pause:before_publish")
    held = victim.paused("before_publish", count=2)  # two sources' items, under the victim's leases
    # Cancel round: each worker of the others pauses after its first commit, holding the rest of
    # its claim, so the cancel lands while every host has claims in flight.
    others = [
        site.start(name, batch_id, fault="pause:after_commit" if cancel else None)
        for name in HOSTS
        if name != victim_name
    ]
    if cancel:
        for host in others:
            host.paused("after_commit", count=2)
    until(lambda: site.succeeded(batch_id) >= 3, "the other hosts to publish", timeout=120, every=0.1)
    victim.kill()
    killed_at = time.monotonic()
    assert all_gone(held, timeout=10) == [], "the victim's workers outlived kill -9 of its group"
    if cancel:
        view = site.json("cancel", batch_id)
        assert view["state"] == "cancel_requested" and view["counts"] == {**view["counts"], "succeeded": 4}
        assert view["counts"]["running"] >= 3 * 2  # mid-run: the victim's and the others' claims are all held
        for host in others:
            host.release()
    outcomes = [host.finish() for host in others]
    assert [code for code, _ in outcomes] == [0, 0], outcomes  # `work` exits 0 when it ran until idle
    assert not [err for _, err in outcomes if "Traceback" in err]
    events = site.json("events", batch_id)["events"]
    victims = [e for e in events if (e["worker"] or "").startswith(f"{victim_name}:")]
    claimed = [e for e in victims if e["to_state"] == "running"]
    taken_back = [e for e in victims if e["from_state"] == "running"]  # the victim itself published nothing
    assert claimed and len(taken_back) == len(claimed)
    if cancel:  # taken back into the cancel
        assert {e["to_state"] for e in taken_back} == {"cancelled"}
    else:
        assert {(e["to_state"], e["error_code"], e["detail"]) for e in taken_back} == {
            ("queued", "worker_crashed", "its lease expired")
        }
    # The others could not take them back before expiry: the victim's last heartbeat came at most one
    # heartbeat period (a third of a short lease, as the runner sets it) before the kill.
    assert time.monotonic() - killed_at >= LEASE - LEASE / 3 - 0.1
    state = site.json("status", batch_id)
    assert state["state"] == ("cancelled" if cancel else "succeeded")
    assert state["counts"]["succeeded"] == (4 if cancel else total)  # cancel: only what committed before it
    found = violations(site, batch_id)
    print(
        f"\nmulti-host round {round_}: items {total}, killed {victim_name} holding {len(taken_back)} items, "
        f"cancel {cancel}, succeeded {state['counts']['succeeded']}, violations {len(found)}"
    )
    assert found == []


def test_a_dead_worker_of_the_same_host_is_rescued_at_once_and_another_host_waits_for_its_lease(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_id = site.submit()
    first = site.start("host-a", batch_id, fault="pause:before_publish", lease=None)  # the default lease, 30 s
    dead = first.paused("before_publish", count=2)
    first.kill()
    started = time.monotonic()
    monkeypatch.setenv(HOST_ID_ENV, "host-b")
    with Ledger(site.url) as ledger:  # another host cannot tell its workers are dead: it waits for the lease
        assert ledger.queue.rescue_leases(owner_is_dead, lambda attempt: 0.0) == 0
    again = site.run("work", "--batch", batch_id, "--until-idle", "-w", "2", host="host-a", lease=None)
    took = time.monotonic() - started
    assert again.returncode == 0, again.stderr
    events = site.json("events", batch_id)["events"]
    rescued = [e for e in events if e["error_code"] == "worker_crashed"]
    assert rescued and {e["detail"] for e in rescued} == {"its worker process is gone"}
    assert {int(e["worker"].split(":")[1]) for e in rescued} == set(dead)
    assert site.json("status", batch_id)["state"] == "succeeded"
    assert took < 30  # the default lease: what another host would have waited
    assert violations(site, batch_id) == []


# -- one thumbnail name published by two hosts at once --------------------------------------------------------------


def _advisory_waiters(url: str) -> int:
    """Transactions of this test's database waiting for an advisory lock (a held name)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    return int(row[0]) if row else 0


def _blocked_or_done(site: Site, host: Host) -> str:
    """Wait until ``host`` waits for the held name (``blocked``) or has finished (``done``)."""

    def outcome() -> str | None:
        if not host.proc.running():
            return "done"
        return "blocked" if _advisory_waiters(site.url) else None

    return until(outcome, f"{host.name} to finish or wait for the name", timeout=120)  # type: ignore[return-value]


@pytest.mark.parametrize("checkpoint", ["after_link", "name_published"])
def test_two_hosts_publishing_one_name_at_once_are_serialized(site: Site, checkpoint: str) -> None:
    """Two batches whose items have one thumbnail name (same OUT, same item id, different photos).
    Host A pauses mid-publish: at ``after_link`` (its name checked, not yet linked) or at
    ``name_published`` (linked, not yet committed). Host B publishes the same name meanwhile. B must
    wait for A's commit, then find A's recorded thumbnail and replace it (a later batch takes over a
    name thumbctl published); without the hold, B either checks before A links (and the later link
    wins against the ledger's order) or finds A's link unrecorded and fails ``name_taken``."""
    batches = []
    for seed, name in ((1, "a"), (2, "b")):
        folder = site.tmp / f"src-{name}"
        folder.mkdir()
        make_image(folder / "photo.jpg", (320, 240), "JPEG", seed=seed)
        done = site.run(
            "submit", str(folder), "--out", str(site.out), "-r", "1:1", "--size", "96", "--detach", "--json"
        )
        assert done.returncode == 0, done.stderr
        batches.append(json.loads(done.stdout)["batch_id"])
    first, second = batches
    a = site.start("host-a", first, fault=f"pause:{checkpoint}", lease=None)
    a.paused(checkpoint, count=1)
    b = site.start("host-b", second, lease=None)
    _blocked_or_done(site, b)  # with the name held, B waits for it; the outcome below is what is judged
    a.release()
    assert a.finish()[0] == 0 and b.finish()[0] == 0
    views = [site.json("status", batch_id) for batch_id in batches]
    assert [(v["counts"]["succeeded"], v["replaced"], v["failures"]) for v in views] == [(1, 0, []), (1, 1, [])]
    items = [site.json("status", batch_id, "--items")["items"][0] for batch_id in batches]
    name = site.out / "photo.1x1.jpg"
    assert {i["friendly_path"] for i in items} == {str(name)}
    assert name.read_bytes() == Path(items[1]["object_path"]).read_bytes() != Path(items[0]["object_path"]).read_bytes()
    kept_apart = ("objects", "batches", ".tmp", "thumbctl.json")
    published = sorted(p.name for p in site.out.iterdir() if p.name not in kept_apart)
    assert published == ["photo.1x1.jpg"] and not (site.out / ".tmp").exists()
    assert len(objects_in(site.tmp / "store")) == 2
    reconcile = site.run("reconcile", "--json")
    assert reconcile.returncode == 0 and json.loads(reconcile.stdout)["clean"], reconcile.stdout
