"""Real processes: Ctrl-C, cancel races at each checkpoint, crashes and kill -9, with fault injection.

Workers pause or die at named checkpoints (THUMBCTL_FAULT); a paused worker
announces itself with a marker file and waits for a release file, so every
race here is staged, not hoped for.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from thumbctl import Ledger

from harness import Thumbctl, all_gone, until
from support import check_invariants, make_image

pytestmark = pytest.mark.timeout(120)


class Env(Thumbctl):
    """A SQLite ledger in ``tmp_path`` with its default store, three photos and a faults folder."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path / "ledger.db", faults=tmp_path / "faults", timeout=90)
        self.tmp = tmp_path
        self.out = tmp_path / "out"
        self.store = tmp_path / "ledger.store"
        self.photos = tmp_path / "photos"
        for n, size in enumerate([(300, 200), (200, 300), (256, 256)]):
            make_image(self.photos / f"p{n}.jpg", size, "JPEG", seed=n)

    def batch(self) -> dict:
        doc = self.json("status", codes=None)
        assert len(doc["batches"]) == 1
        return self.json("status", doc["batches"][0]["batch_id"], codes=None)

    def events(self, batch_id: str) -> list[dict]:
        return self.json("events", batch_id, codes=None)["events"]

    def check(self) -> None:
        with Ledger(self.db) as ledger:
            check_invariants(ledger)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_ctrl_c_records_the_cancel_and_exits_130(env: Env) -> None:
    proc = env.start("submit", str(env.photos), "--out", str(env.out), "-w", "1", fault="pause:before_encode")
    err = proc.follow_stderr()
    env.paused("before_encode", process=proc)
    proc.interrupt()
    err.wait_for("Cancel recorded")
    env.release()
    assert proc.wait(timeout=60) == 130
    text = err.rest()
    assert "Traceback" not in text
    batch = env.batch()
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"error [interrupted] batch {batch['batch_id']} is cancelled, its cancel is recorded"), text
    assert batch["state"] == "cancelled" and batch["cancel_requested_at"] is not None
    assert batch["counts"]["succeeded"] == 0
    assert [e["to_state"] for e in env.events(batch["batch_id"]) if e["item_id"] is None] == ["cancel_requested"]
    env.check()


def test_a_second_ctrl_c_quits_at_once_and_the_next_work_finishes(env: Env) -> None:
    proc = env.start("submit", str(env.photos), "--out", str(env.out), "-w", "1", fault="pause:before_publish")
    err = proc.follow_stderr()
    [worker] = env.paused("before_publish", process=proc)
    proc.interrupt()
    err.wait_for("Cancel recorded")
    proc.interrupt()
    assert proc.wait(timeout=10) == 130
    assert all_gone([worker], timeout=10) == []
    assert "Traceback" not in err.rest()
    assert env.batch()["state"] == "cancel_requested"  # the dead worker's lease is still there
    result = env.run("work", "--until-idle", "-w", "1")
    assert result.returncode == 0
    batch = env.batch()
    assert batch["state"] == "cancelled" and batch["counts"]["running"] == 0
    env.check()


@pytest.mark.parametrize("checkpoint", ["before_decode", "before_encode", "before_publish"])
def test_cancel_from_another_shell_at_each_checkpoint(env: Env, checkpoint: str) -> None:
    proc = env.start("submit", str(env.photos), "--out", str(env.out), "-w", "1", fault=f"pause:{checkpoint}")
    env.paused(checkpoint, process=proc)
    batch_id = env.json("status")["batches"][0]["batch_id"]
    assert env.run("cancel", batch_id).returncode == 0
    env.release()
    assert proc.wait(timeout=60) == 4
    batch = env.batch()
    assert batch["state"] == "cancelled" and batch["counts"]["succeeded"] == 0
    assert not list(env.out.rglob("*.jpg"))  # nothing was published
    repeat = env.json("cancel", batch_id, codes=None)
    assert (repeat["state"], repeat["counts"]) == (batch["state"], batch["counts"])
    env.check()


def test_a_success_committed_before_the_cancel_stays(env: Env) -> None:
    proc = env.start("submit", str(env.photos), "--out", str(env.out), "-w", "1", fault="pause:after_commit")
    env.paused("after_commit", process=proc)
    batch_id = env.json("status")["batches"][0]["batch_id"]
    assert env.run("cancel", batch_id).returncode == 0
    env.release()
    assert proc.wait(timeout=60) == 4
    batch = env.batch()
    assert batch["state"] == "cancelled" and batch["counts"]["succeeded"] == 1
    events = env.events(batch_id)
    cancel_seq = next(e["seq"] for e in events if e["to_state"] == "cancel_requested")
    assert [e["seq"] < cancel_seq for e in events if e["to_state"] == "succeeded"] == [True]
    env.check()


@pytest.mark.parametrize("checkpoint", ["before_publish", "after_link", "after_commit"])
def test_a_worker_dying_at_each_crash_point_loses_and_duplicates_nothing(env: Env, checkpoint: str) -> None:
    result = env.run(
        "submit", str(env.photos), "--out", str(env.out), "-w", "1", "--json", fault=f"crash:{checkpoint}:once"
    )
    assert result.returncode == 0, result.stderr
    batch = json.loads(result.stdout)
    assert batch["state"] == "succeeded" and batch["counts"]["succeeded"] == 9
    rescued = [e for e in env.events(batch["batch_id"]) if e["error_code"] == "worker_crashed"]
    assert rescued and all(e["to_state"] == "queued" for e in rescued)
    objects = [p for p in (env.store / "objects").rglob("*.jpg") if not p.name.endswith(".preview.jpg")]
    assert len(objects) == 9
    env.check()


def test_sigkill_of_real_workers_is_rescued_by_their_supervisor(env: Env) -> None:
    assert env.run("submit", str(env.photos), "--out", str(env.out), "--detach").returncode == 0
    proc = env.start("work", "--until-idle", "-w", "2", fault="pause:before_publish")
    first = env.paused("before_publish", count=2, process=proc)
    for pid in first:
        os.kill(pid, signal.SIGKILL)
    env.paused("before_publish", count=1, exclude=first, process=proc)  # a replacement took the work up
    env.release()
    assert proc.wait(timeout=60) == 0
    batch = env.batch()
    assert batch["state"] == "succeeded"
    crashed = {e["worker"].split(":")[1] for e in env.events(batch["batch_id"]) if e["error_code"] == "worker_crashed"}
    assert crashed == {str(pid) for pid in first}
    env.check()


def test_kill_9_of_the_whole_process_group_then_work_again(env: Env) -> None:
    assert env.run("submit", str(env.photos), "--out", str(env.out), "--detach").returncode == 0
    proc = env.start("work", "-w", "2", fault="pause:before_publish")
    env.paused("before_publish", count=2, process=proc)
    proc.kill()
    assert env.batch()["counts"]["running"] > 0
    result = env.run("work", "--until-idle", "-w", "2")
    assert result.returncode == 0, result.stderr
    batch = env.batch()
    assert batch["state"] == "succeeded" and batch["counts"]["succeeded"] == 9
    assert not [
        p for p in env.out.rglob("*") if p.is_file() and ".tmp" not in p.parts and p.suffix not in (".jpg", ".json")
    ]
    env.check()


def test_a_source_that_kills_its_worker_every_time_ends_failed(env: Env) -> None:
    result = env.run(
        "submit",
        str(env.photos),
        "--out",
        str(env.out),
        "-w",
        "1",
        "--attempts",
        "2",
        "-r",
        "1:1",
        "--json",
        fault="crash:before_decode",
    )
    assert result.returncode == 1
    batch = json.loads(result.stdout)
    assert batch["state"] == "failed"
    assert {f["error_code"] for f in batch["failures"]} == {"worker_crashed"}
    env.check()


def test_a_decode_over_the_time_limit_fails_every_item_of_its_source_timeout(env: Env) -> None:
    result = env.run(
        "submit",
        str(env.photos),
        "--out",
        str(env.out),
        "-w",
        "1",
        "--item-timeout",
        "0.5s",  # every decode pauses for good: any limit is passed, a short one soon
        "--json",
        fault="pause:before_decode",
    )
    assert result.returncode == 1
    batch = json.loads(result.stdout)
    assert batch["state"] == "failed" and {f["error_code"] for f in batch["failures"]} == {"timeout"}
    timed_out = [e for e in env.events(batch["batch_id"]) if e["error_code"] == "timeout"]
    assert len(timed_out) == 9 and all(e["attempt"] == 1 for e in timed_out)  # permanent: not retried
    env.check()


@pytest.mark.parametrize(("checkpoint", "in_hand"), [("worker_start", 0), ("before_decode", 1)])
def test_workers_whose_submit_was_killed_finish_the_source_in_hand_and_exit(
    env: Env, checkpoint: str, in_hand: int
) -> None:
    for n in range(3, 12):
        make_image(env.photos / f"q{n}.jpg", (64, 48), "JPEG", seed=n)
    proc = env.start("submit", str(env.photos), "--out", str(env.out), "-w", "2", fault=f"pause:{checkpoint}")
    workers = env.paused(checkpoint, count=2, process=proc)
    proc.kill_leader()  # the coordinator only: its workers live on, orphaned
    env.release()
    assert all_gone(workers) == []  # stragglers die with the group when the test ends
    batch = env.batch()
    assert batch["counts"]["succeeded"] == 3 * in_hand * len(workers)  # 3 ratios of each source in hand
    assert batch["counts"]["queued"] == 36 - batch["counts"]["succeeded"]
    result = env.run("work", "--until-idle", "-w", "2")
    assert result.returncode == 0, result.stderr
    assert env.batch()["state"] == "succeeded"
    env.check()


@pytest.mark.parametrize("ratios", [(), ("-r", "1:1")])  # 1:1: every claim is one item, none held at the crash
def test_workers_dying_after_each_commit_are_restarted_and_the_batch_completes(env: Env, ratios: tuple) -> None:
    for n in range(3, 6):
        make_image(env.photos / f"q{n}.jpg", (64, 48), "JPEG", seed=n)
    result = env.run(
        "submit", str(env.photos), "--out", str(env.out), "-w", "1", *ratios, "--json", fault="crash:after_commit"
    )
    assert result.returncode == 0, result.stderr
    batch = json.loads(result.stdout)
    assert batch["state"] == "succeeded" and batch["counts"]["succeeded"] == batch["total"] == (6 if ratios else 18)
    deaths = result.stderr.count("died (exit status 137) after taking work")
    assert deaths == batch["total"]  # each commit, then its worker died
    assert deaths == result.stderr.count("started a replacement")
    assert "worker_start_failed" not in result.stderr
    env.check()


def test_a_worker_dying_before_every_decode_ends_its_items_failed_not_a_start_failure(env: Env) -> None:
    started = time.monotonic()
    result = env.run("submit", str(env.photos), "--out", str(env.out), "-w", "1", "--json", fault="crash:before_decode")
    assert time.monotonic() - started < 60
    assert result.returncode == 1, result.stderr
    batch = json.loads(result.stdout)
    assert batch["state"] == "failed" and batch["counts"]["failed"] == 9
    assert {f["error_code"] for f in batch["failures"]} == {"worker_crashed"}
    assert all("attempt 3 of 3" in f["detail"] for f in batch["failures"])
    assert "worker_start_failed" not in result.stderr and "after taking work" in result.stderr
    env.check()


def test_workers_dying_before_they_take_any_work_stop_the_run(env: Env) -> None:
    result = env.run("submit", str(env.photos), "--out", str(env.out), "-w", "1", "--json", fault="crash:worker_start")
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["code"] == "worker_start_failed"
    assert "before taking any work" in result.stderr
    assert env.batch()["counts"]["queued"] == 9


def one_photo_manifest(env: Env, skus: int) -> Path:
    """A manifest of ``skus`` item ids that all point at the same photo."""
    manifest = env.photos / "skus.jsonl"
    manifest.write_text("".join(json.dumps({"id": f"sku{n}", "source": "p0.jpg"}) + "\n" for n in range(skus)))
    return manifest


def test_only_the_render_over_the_time_limit_fails_timeout(env: Env) -> None:
    """One render stalls (once) before its first publish: that derivative's items fail ``timeout``;
    the other ratio's items, claimed with them, go back to the queue without spending an attempt,
    and a replacement worker renders them."""
    manifest = one_photo_manifest(env, 3)
    ratios = ("-r", "1:1", "-r", "16:9")
    args = ("submit", str(manifest), "--out", str(env.out), "-w", "1", *ratios, "--item-timeout", "1s", "--json")
    result = env.run(*args, fault="pause:before_publish:once")
    assert result.returncode == 1, result.stderr
    batch = json.loads(result.stdout)
    assert batch["counts"]["failed"] == 3 and batch["counts"]["succeeded"] == 3
    events = env.events(batch["batch_id"])
    timed_out = [e for e in events if e["error_code"] == "timeout"]
    assert len(timed_out) == 3 and all(e["attempt"] == 1 for e in timed_out)
    [slow_ratio] = {e["ratio"] for e in timed_out}
    others = [e for e in events if e["ratio"] != slow_ratio and e["from_state"] is not None]
    assert [(e["to_state"], e["attempt"]) for e in others] == [("running", 1)] * 3 + [("queued", 1)] * 3 + [
        ("running", 1)
    ] * 3 + [("succeeded", 1)] * 3
    assert all("attempt is not counted" in e["detail"] for e in others if e["to_state"] == "queued")
    env.check()


def claims_taken_longer_ago_than(env: Env, seconds: float) -> None:
    """Wait until every claim of the one batch was taken more than ``seconds`` ago, by the times
    the ledger recorded for them."""
    batch_id = env.json("status")["batches"][0]["batch_id"]

    def old_enough() -> bool:
        claims = [e["at"] for e in env.events(batch_id) if e["to_state"] == "running"]
        return bool(claims) and time.time() - max(datetime.fromisoformat(at).timestamp() for at in claims) > seconds

    until(old_enough, f"the claims to be {seconds:g}s old", every=0.2)


def test_one_photo_behind_100_item_ids_is_split_over_the_workers_and_each_stage_timed_alone(env: Env) -> None:
    """100 SKUs on one photo, two ratios, two workers, a 2 s limit. Both workers hold a claim of the
    photo and wait between stages (at ``before_encode``) well past the limit: a limit on the whole
    claim stops both; a limit on each stage does not. Every item succeeds, each claim encodes each of
    its keys once, and both workers did part of the work."""
    manifest = one_photo_manifest(env, 100)  # 200 items: more than one claim peeks, so it steps key by key
    ratios = ("-r", "1:1", "-r", "16:9")
    args = ("submit", str(manifest), "--out", str(env.out), "-w", "2", *ratios, "--item-timeout", "2s", "--json")
    proc = env.start(*args, fault="pause:before_encode")
    env.paused("before_encode", count=2, process=proc)
    # held until the ledger's claim times are past the limit and a time check (every 0.5 s here)
    # has followed: a limit on the whole claim would have fired by now
    claims_taken_longer_ago_than(env, 2 + 0.5 + 0.5)
    env.release()
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    batch = json.loads(out)
    assert batch["state"] == "succeeded" and batch["counts"]["succeeded"] == 200
    events = env.events(batch["batch_id"])
    running = [e for e in events if e["to_state"] == "running"]
    assert not [e for e in events if e["error_code"]]
    assert len({e["worker"] for e in running}) == 2
    claimed_keys = {(e["worker"], e["at"], e["ratio"]) for e in running}  # a claim's events share worker and time
    status = json.loads(env.run("status", batch["batch_id"], "--items", "--json").stdout)
    encoded = [i for i in status["items"] if not i["result"]["shared_render"]]
    assert len(encoded) == len(claimed_keys) < 30
    env.check()
