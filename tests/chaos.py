"""Several hosts with no shared disk, under faults: the scenario behind ``test_multihost_s3.py``
(short) and ``bench/chaos.py`` (long).

Each "host" is a ``thumbctl work`` process group with its own host identity, its own HOME and
TMPDIR and its own working folder; the hosts share only the PostgreSQL URL and the S3 bucket
(reached through :class:`~faultproxy.FaultProxy`, which answers a share of requests with 500 or
503, or slowly). The sources are objects in the bucket (``s3://`` in a manifest) and URLs of the
tests' own HTTP server; the store and OUT are ``s3://`` prefixes.

A round: an admin host submits the batch (``--detach``); the victim host starts first and pauses
two workers at ``before_publish`` (so it certainly holds leases); the other host starts; once a few
items are published the victim is killed with ``kill -9`` of its whole process group, and the S3
server is restarted while the survivor works. A cancel round cancels the batch mid-run instead of
letting it finish. :func:`violations` then counts what must be zero: items lost (not terminal, or
failed), duplicate publishes, publishes after the cancel, objects or names without a succeeded item
(or missing), and a reconcile that is not clean.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thumbctl.config.options import LEASE_ENV

from faultproxy import FaultMix, FaultProxy
from harness import Background, Thumbctl, all_gone, until
from httpserver import NETWORK, Answer, HttpServer
from inprocess import json_here
from s3 import BUCKET, WeedServer, keys, put_raw, raw_store

#: The lease of every host's workers (seconds): a dead host's items wait this long. Live workers
#: beat every second (a third of it), so only a stall of two seconds would lose one.
LEASE = 3
TERMINAL = {"succeeded", "failed", "cancelled"}
SAMPLES = Path(__file__).resolve().parent.parent / "sample_images"


@dataclass
class Host:
    """One host: a ``thumbctl work`` process group with its own identity, HOME, TMPDIR and faults."""

    name: str
    cli: Thumbctl
    proc: Background | None = None

    def start(self, batch_id: str, fault: str | None = None, workers: int = 2) -> None:
        self.proc = self.cli.start("work", "--batch", batch_id, "--until-idle", "-w", str(workers), "-q", fault=fault)

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        assert self.proc is not None
        return self.proc.finish(timeout=timeout)


@dataclass
class Counts:
    """What a round ended with; every field but ``items``, ``succeeded``, ``cancelled`` and the
    injected faults must be zero."""

    items: int = 0
    succeeded: int = 0
    cancelled: int = 0
    lost: int = 0
    duplicate_publishes: int = 0
    published_after_cancel: int = 0
    stray_objects: int = 0
    missing_objects: int = 0
    stray_names: int = 0
    missing_names: int = 0
    reconcile_findings: int = 0
    #: Items the killed host had claimed and the survivor took back when its leases expired.
    taken_back: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return (
            self.lost
            + self.duplicate_publishes
            + self.published_after_cancel
            + self.stray_objects
            + self.missing_objects
            + self.stray_names
            + self.missing_names
            + self.reconcile_findings
        )


class Site:
    """One PostgreSQL ledger, one bucket (behind a fault proxy) and one HTTP server of sources."""

    def __init__(self, tmp: Path, pg_url: str, weed: WeedServer, http: HttpServer, proxy: FaultProxy) -> None:
        self.tmp = tmp
        self.pg_url = pg_url
        self.weed = weed
        self.http = http
        self.proxy = proxy
        self.bucket = raw_store(weed)
        self.temps: dict[str, str] = {}
        self.renew()

    def close(self) -> None:
        """Remove the hosts' temp folders."""
        for folder in self.temps.values():
            shutil.rmtree(folder, ignore_errors=True)

    def renew(self) -> None:
        """A fresh prefix of the bucket for the next round: its sources, store and OUT."""
        self.prefix = f"chaos-{os.getpid()}-{time.monotonic_ns() % 10**12}"
        self.store = f"s3://{BUCKET}/{self.prefix}/store"
        self.out = f"s3://{BUCKET}/{self.prefix}/out"

    def env(self, host: str) -> dict[str, str]:
        """A host's whole environment: nothing of this process's but PATH and the language."""
        home = self.tmp / host
        home.mkdir(parents=True, exist_ok=True)
        # A short TMPDIR of its own: the fork server's socket lives there, and AF_UNIX paths are
        # limited to 107 bytes, which a test's deep temp folder can pass.
        temp = self.temps.setdefault(host, tempfile.mkdtemp(prefix=f"thumbctl-{host}-"))
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH")}
        return {
            **env,
            **self.weed.env(),
            "AWS_ENDPOINT_URL": self.proxy.endpoint,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "HOME": str(home),
            "TMPDIR": temp,
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"),
        }

    def host(self, name: str) -> Host:
        cli = Thumbctl(
            self.pg_url,
            store=self.store,  # type: ignore[arg-type]  # the harness passes it on as text
            host=name,
            faults=self.tmp / name / "faults",
            base=self.env(name),
            env={LEASE_ENV: str(LEASE)},
            timeout=240,
        )
        return Host(name, cli)

    def sources(self, count: int) -> list[dict[str, str]]:
        """``count`` manifest items: every other one an object in the bucket, the rest URLs."""
        photos = sorted(p for p in SAMPLES.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
        items = []
        for n in range(count):
            photo = photos[n % len(photos)]
            data = photo.read_bytes()
            stem = f"p{n:03d}{photo.suffix.lower()}"
            if n % 2 == 0:
                key = f"{self.prefix}/src/{stem}"
                put_raw(self.bucket, key, data)
                source = f"s3://{BUCKET}/{key}"
            else:
                source = self.http.route(f"{self.prefix}/{stem}", Answer(body=data))[0]
            items.append({"id": f"p{n:03d}", "source": source})
        return items

    def submit(self, count: int, ratios: str, sizes: str = "160") -> str:
        manifest = self.tmp / "manifest.json"
        manifest.write_text(json.dumps({"items": self.sources(count)}))
        recorded = json_here(
            self.host("admin").cli,
            "submit", manifest, "--out", self.out, "--ratio", ratios, "--size", sizes, "--allow-network", NETWORK,
            "--detach",
        )  # fmt: skip
        return recorded["batch_id"]

    def json(self, *args: str) -> Any:
        """The admin's ``--json`` document of a command that starts no worker, run in this process."""
        return json_here(self.host("admin").cli, *args, codes=(0, 1, 4))

    def succeeded(self, batch_id: str) -> int:
        return self.json("status", batch_id)["counts"]["succeeded"]

    def listed(self, folder: str) -> set[str]:
        """The keys under this round's ``folder`` (``store/objects`` or ``out``), relative to it."""
        head = f"{self.prefix}/{folder}/"
        return {key[len(head) :] for key in keys(self.bucket, head)}


def run_round(site: Site, *, sources: int, cancel: bool, faults: FaultMix, ratios: str = "1:1,4:3,16:9") -> Counts:
    """One round (see the module's docstring) of ``sources`` photos in ``ratios``; its :class:`Counts`."""
    site.renew()
    batch_id = site.submit(sources, ratios)
    site.proxy.set_faults(faults)
    victim, survivor = site.host("victim"), site.host("survivor")
    victim.start(batch_id, fault="pause:before_publish")
    held = victim.cli.paused("before_publish", 2, process=victim.proc, timeout=180)
    survivor.start(batch_id, fault="pause:after_commit" if cancel else None)
    if cancel:
        survivor.cli.paused("after_commit", 1, process=survivor.proc, timeout=180)
    else:
        until(lambda: site.succeeded(batch_id) >= 2, "the survivor to publish", timeout=180, every=0.2)
    assert victim.proc is not None
    victim.proc.kill()
    assert all_gone(held, timeout=10) == [], "the victim's workers outlived kill -9 of its group"
    site.weed.restart()
    if cancel:
        site.json("cancel", batch_id)
        survivor.cli.release()
    code, err = survivor.finish()
    counts = judge(site, batch_id)
    if code != 0 or "Traceback" in err:
        counts.problems.append(f"the survivor's work exited {code}: {err[-2000:]}")
    counts.faults = {k: v for k, v in site.proxy.counts.items() if k != "forward"}
    site.proxy.set_faults(FaultMix())
    return counts


def run_outage_cancel_round(site: Site, *, race: bool, store_down: bool = True) -> tuple[str, Counts]:
    """A cancel recorded while the store is down (or up), and the leases of a killed host expiring after it:
    the red-team's stuck batch. The victim holds every item (two sources, two workers paused at
    ``before_publish``); the survivor runs dry (one worker paused at ``ran_dry``, so it is past its
    start, which reads the store); the S3 server stops and the victim is killed. Without ``race``
    the cancel is recorded before the victim's leases expire; with it, while the survivor's rescue
    of them is paused after reading the cancel flag (``after_rescue``): the cancel waits for the
    rescue to commit, or commits first. Then the pauses are released, the store comes back and the
    survivor's ``work --until-idle`` ends. Returns the batch's state as it ended (read before
    :func:`judge`, whose reconcile would finish a stuck cancel) and the round's counts."""
    site.renew()
    site.proxy.set_faults(FaultMix())
    batch_id = site.submit(2, "1:1")
    victim, survivor, admin = site.host("victim"), site.host("survivor"), site.host("admin")
    victim.start(batch_id, fault="pause:before_publish")
    held = victim.cli.paused("before_publish", 2, process=victim.proc, timeout=180)
    rescue_pause = ",pause:after_rescue:once" if race else ""
    survivor.start(batch_id, fault=f"pause:ran_dry:once{rescue_pause}")
    survivor.cli.paused("ran_dry", 1, process=survivor.proc, timeout=180)
    if store_down:
        site.weed.stop_serving()
    if not race:
        assert admin.cli.invoke("cancel", batch_id).returncode == 0
    assert victim.proc is not None
    victim.proc.kill()  # its leases expire LEASE seconds later
    assert all_gone(held, timeout=10) == [], "the victim's workers outlived kill -9 of its group"
    if race:
        survivor.cli.paused("after_rescue", 1, process=survivor.proc, timeout=60)
        cancel = admin.cli.start("cancel", batch_id)
        until(lambda: not cancel.running() or waits_for_a_lock(site.pg_url), "the cancel to commit or to wait")
    survivor.cli.release()
    if race:
        code, err = cancel.finish(timeout=60)
        assert code == 0, err
    if store_down:
        site.weed.serve_again()
    code, err = survivor.finish()
    state = site.json("status", batch_id)["state"]
    counts = judge(site, batch_id)
    if code != 0 or "Traceback" in err:
        counts.problems.append(f"the survivor's work exited {code}: {err[-2000:]}")
    return state, counts


def waits_for_a_lock(pg_url: str) -> bool:
    """Whether a session of the ledger's database waits for a lock another one holds."""
    import psycopg

    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return bool(conn.execute(sql).fetchone()[0])


def judge(site: Site, batch_id: str) -> Counts:
    """Count what a finished round broke (see :class:`Counts`)."""
    site.proxy.set_faults(FaultMix())  # the judging itself goes unhindered
    batch = site.json("status", batch_id)
    items = site.json("status", batch_id, "--items")["items"]
    events = site.json("events", batch_id)["events"]
    counts = Counts(items=len(items), succeeded=batch["counts"]["succeeded"], cancelled=batch["counts"]["cancelled"])
    lost = [i for i in items if i["state"] not in TERMINAL or i["state"] == "failed"]
    counts.lost = len(lost)
    for item in lost:
        history = [
            f"{e['from_state']}->{e['to_state']} {e['error_code'] or ''} {e.get('detail') or ''} ({e['worker']})"
            for e in events
            if (e["item_id"], e["ratio"]) == (item["item_id"], item["ratio"])
        ]
        counts.problems.append(f"{item['item_id']} {item['ratio']} ended {item['state']}: " + "; ".join(history))
    published = Counter((e["item_id"], e["ratio"], e.get("size")) for e in events if e["to_state"] == "succeeded")
    counts.duplicate_publishes = sum(n - 1 for n in published.values() if n > 1)
    counts.taken_back = sum(
        1 for e in events if (e["worker"] or "").startswith("victim:") and e["from_state"] == "running"
    )
    cancel = [e["seq"] for e in events if e["to_state"] == "cancel_requested"]
    if cancel:
        counts.published_after_cancel = sum(1 for e in events if e["to_state"] == "succeeded" and e["seq"] > cancel[0])
    succeeded = [i for i in items if i["state"] == "succeeded"]
    wanted_objects = {i["object_path"].rsplit("/objects/", 1)[1] for i in succeeded}
    objects = {k for k in site.listed("store/objects") if not k.endswith(".preview.jpg")}
    counts.stray_objects = len(objects - wanted_objects)
    counts.missing_objects = len(wanted_objects - objects)
    out_head = f"{site.out}/"
    wanted_names = {i["friendly_path"][len(out_head) :] for i in succeeded}
    names = {k for k in site.listed("out") if not k.startswith("batches/") and k != "thumbctl.json"}
    counts.stray_names = len(names - wanted_names)
    counts.missing_names = len(wanted_names - names)
    reconcile = site.host("admin").cli.invoke("reconcile", "--json")
    if reconcile.returncode != 0:
        found = json.loads(reconcile.stdout or "{}").get("problems", [])
        counts.reconcile_findings = max(1, len(found))
        counts.problems.append(f"reconcile exit {reconcile.returncode}: {reconcile.stdout[-2000:]}{reconcile.stderr}")
    return counts
