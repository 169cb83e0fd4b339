"""The same command resumes after a cancel, on both ledger backends.

A submit whose derived key names a cancelled batch records the next batch of the key's chain
(``resumed_from``), reusing every finished output; the key moves to it. Two such submits at once end
in one batch; an explicit ``--key`` keeps strict replay (exit 4); ``retry`` of a cancelled batch
resumes it the same way.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from thumbctl import Ledger, Limits

from harness import Thumbctl
from inprocess import json_here, render_here, submit_here
from support import check_invariants, raw_rows, request

RESUMING = "resuming cancelled batch"


# -- the ledger: accept_batch(resume=True) ---------------------------------------------------------


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    with Ledger(ledger_url) as led:
        yield led
        check_invariants(led, outputs=False)


def test_a_resume_records_the_next_batch_of_the_chain_and_moves_the_key(ledger: Ledger) -> None:
    first = ledger.intake.accept_batch(request("k"), Limits())
    ledger.intake.request_cancel(first.batch_id)
    resumed = ledger.intake.accept_batch(request("k"), Limits(), resume=True)
    assert not resumed.replayed and resumed.batch_id != first.batch_id
    assert (resumed.resumed_from, resumed.idempotency_key, resumed.counts["queued"]) == (first.batch_id, "k", 4)
    assert ledger.intake.batch_for_key("k").batch_id == resumed.batch_id
    old = ledger.views.batch(first.batch_id)
    assert (old.state, old.idempotency_key) == ("cancelled", f"k#resumed:{resumed.batch_id}")
    assert old.to_json()["resumed_from"] is None and resumed.to_json()["resumed_from"] == first.batch_id
    again = ledger.intake.accept_batch(request("k"), Limits(), resume=True)
    assert (again.batch_id, again.replayed) == (resumed.batch_id, True)
    assert ledger.intake.newest_of_chain(first.batch_id) == resumed.batch_id


def test_a_resumed_request_keeps_each_item_s_alt(ledger: Ledger) -> None:
    """The manifest's alt is recorded with each item, so ``retry`` of a cancelled batch keeps it."""
    new = request("k")
    new = replace(new, items=tuple(replace(item, alt=f'"{item.item_id}" <{item.ratio}>') for item in new.items))
    first = ledger.intake.accept_batch(new, Limits())
    ledger.intake.request_cancel(first.batch_id)
    recorded = ledger.intake.recorded_request(first.batch_id)
    assert [item.alt for item in recorded.items] == [item.alt for item in new.items]
    resumed = ledger.intake.accept_batch(recorded, Limits(), resume=True)
    assert [item.alt for item in ledger.views.items(resumed.batch_id)] == [item.alt for item in new.items]


def test_without_resume_a_cancelled_batch_is_replayed(ledger: Ledger) -> None:
    first = ledger.intake.accept_batch(request("k"), Limits())
    ledger.intake.request_cancel(first.batch_id)
    again = ledger.intake.accept_batch(request("k"), Limits())
    assert (again.batch_id, again.replayed, again.state) == (first.batch_id, True, "cancelled")
    assert len(ledger.views.batches()) == 1


def test_a_cancelled_resume_is_resumed_in_turn_a_chain(ledger: Ledger) -> None:
    ids = [ledger.intake.accept_batch(request("k"), Limits()).batch_id]
    for _ in range(2):
        ledger.intake.request_cancel(ids[-1])
        ids.append(ledger.intake.accept_batch(request("k"), Limits(), resume=True).batch_id)
    chain = {b.batch_id: b.resumed_from for b in ledger.views.batches()}
    assert chain == {ids[0]: None, ids[1]: ids[0], ids[2]: ids[1]}
    assert ledger.intake.newest_of_chain(ids[0]) == ids[2]
    recorded = ledger.intake.recorded_request(ids[0])
    assert (recorded.idempotency_key, recorded.request_digest) == (f"k#resumed:{ids[1]}", "digest-k")


def test_a_resume_of_another_request_under_the_key_is_a_conflict(ledger: Ledger) -> None:
    first = ledger.intake.accept_batch(request("k"), Limits())
    ledger.intake.request_cancel(first.batch_id)
    with pytest.raises(Exception, match="for a different request") as caught:
        ledger.intake.accept_batch(replace(request("k"), request_digest="other"), Limits(), resume=True)
    assert caught.value.code == "idempotency_conflict"
    assert len(ledger.views.batches()) == 1


# -- the command line --------------------------------------------------------------------------------


@pytest.fixture
def env(ledger_url: str, tmp_path: Path) -> Thumbctl:
    return Thumbctl(ledger_url, store=tmp_path / "store", faults=tmp_path / "faults")


def submit_args(photos: Path, out_dir: Path, *more: object) -> list[object]:
    return ["submit", *request_args(photos, out_dir, *more)]


def request_args(photos: Path, out_dir: Path, *more: object) -> list[object]:
    """The arguments of ``submit`` (for :func:`inprocess.submit_here`)."""
    return [photos, "--out", out_dir, "-r", "1:1", "-w", "1", *more]


def batches(env: Thumbctl) -> dict[str, dict]:
    """Every batch of the ledger by id, as ``status BATCH --json`` shows it."""
    listing = env.json("status", codes=None)["batches"]
    return {b["batch_id"]: env.json("status", b["batch_id"], codes=None) for b in listing}


def rendered_successes(env: Thumbctl) -> Counter[str]:
    """Per derivative key: how many rendered (not reused) ``succeeded`` transitions, across batches."""
    with Ledger(env.db) as ledger:
        rows = raw_rows(
            ledger,
            "SELECT i.derivative_key FROM events e JOIN items i ON i.id = e.item_row "
            "WHERE e.to_state = 'succeeded' AND e.from_state = 'running' AND e.dedup = 0",
        )
        keys = raw_rows(ledger, "SELECT DISTINCT derivative_key FROM items")
    counted = Counter(key for (key,) in rows)
    return Counter({key: counted[key] for (key,) in keys})


def interrupted_after_one_success(env: Thumbctl, photos: Path, out_dir: Path) -> str:
    """Ctrl-C a submit while its one worker waits after its first success; the cancelled batch's id."""
    proc = env.start(*submit_args(photos, out_dir), fault="pause:after_commit")
    err = proc.follow_stderr()
    env.paused("after_commit", process=proc)
    proc.interrupt()
    err.wait_for("Cancel recorded")
    env.release()
    assert proc.wait(timeout=60) == 130, err.rest()
    (env.faults / "release").unlink()
    [batch] = batches(env).values()
    assert (batch["state"], batch["counts"]["succeeded"], batch["counts"]["cancelled"]) == ("cancelled", 1, 3)
    return batch["batch_id"]


def test_ctrl_c_then_the_same_command_resumes_and_renders_each_derivative_once(
    env: Thumbctl, photos: Path, out_dir: Path
) -> None:
    cancelled = interrupted_after_one_success(env, photos, out_dir)
    again = env.invoke(*submit_args(photos, out_dir, "--detach", "--json"))
    assert again.returncode == 0, again.stderr
    render_here(env.db, json.loads(again.stdout)["batch_id"])  # what the same command renders in the foreground
    [line] = [line for line in again.stderr.splitlines() if RESUMING in line]
    found = batches(env)
    [resumed] = [b for b in found if b != cancelled]
    assert line == f"{RESUMING} {cancelled} as {resumed}: 1 reused, 3 to render"
    assert found[resumed]["resumed_from"] == cancelled and found[resumed]["state"] == "succeeded"
    assert found[cancelled]["state"] == "cancelled" and found[cancelled]["resumed_from"] is None
    assert found[cancelled]["idempotency_key"] == f"{found[resumed]['idempotency_key']}#resumed:{resumed}"
    assert set(rendered_successes(env).values()) == {1} and len(rendered_successes(env)) == 4
    replay = submit_here(env, *request_args(photos, out_dir))  # the key names the newest batch of its chain
    assert (replay["batch_id"], replay["replayed"], replay["resumed_from"]) == (resumed, True, cancelled)
    assert len(list(out_dir.glob("*.jpg")) + list(out_dir.rglob("*/*.jpg"))) == 4
    with Ledger(env.db) as ledger:
        check_invariants(ledger)


def test_two_resumes_at_once_end_in_one_batch(env: Thumbctl, photos: Path, out_dir: Path) -> None:
    cancelled = interrupted_after_one_success(env, photos, out_dir)
    procs = [env.start(*submit_args(photos, out_dir, "--json"), fault="pause:before_resume") for _ in range(2)]
    env.paused("before_resume", 2)  # both read the cancelled batch and found what to reuse
    env.release()
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        docs.append(json.loads(out))
    assert {d["batch_id"] for d in docs} | {cancelled} == set(batches(env))
    assert len({d["batch_id"] for d in docs}) == 1 and {d["resumed_from"] for d in docs} == {cancelled}
    assert set(rendered_successes(env).values()) == {1}


def test_an_explicit_key_keeps_strict_replay(env: Thumbctl, photos: Path, out_dir: Path) -> None:
    first = json_here(env, *submit_args(photos, out_dir, "--key", "mine", "--detach"))
    assert env.invoke("cancel", first["batch_id"], "-q").returncode == 0
    replay = env.run(*submit_args(photos, out_dir, "--key", "mine"))
    assert replay.returncode == 4 and RESUMING not in replay.stderr
    assert "this batch was cancelled at" in replay.stderr and "submit again with a new --key" in replay.stderr
    assert list(batches(env)) == [first["batch_id"]]


def test_retry_of_a_cancelled_batch_resumes_it(env: Thumbctl, photos: Path, out_dir: Path) -> None:
    cancelled = interrupted_after_one_success(env, photos, out_dir)
    done = env.invoke("retry", cancelled, "--detach", "--json")
    assert done.returncode == 0, done.stderr
    [resumed] = [b for b in batches(env) if b != cancelled]
    render_here(env.db, resumed)  # what the foreground retry renders
    assert f"{RESUMING} {cancelled} as {resumed}: 1 reused, 3 to render" in done.stderr
    assert set(rendered_successes(env).values()) == {1}
    again = json_here(env, "retry", cancelled, "--detach")  # resumed already: its resuming batch, replayed
    assert (again["batch_id"], again["replayed"], again["state"]) == (resumed, True, "succeeded")
    same = submit_here(env, *request_args(photos, out_dir))  # the submit's key moved with the resume
    assert (same["batch_id"], same["replayed"]) == (resumed, True)


def test_retry_of_a_cancelled_resume_resumes_the_chain(env: Thumbctl, photos: Path, out_dir: Path) -> None:
    first = json_here(env, *submit_args(photos, out_dir, "--key", "mine", "--detach"))["batch_id"]
    env.invoke("cancel", first, "-q")
    second = json_here(env, "retry", first, "--detach")
    assert (second["resumed_from"], second["counts"]["queued"], second["idempotency_key"]) == (first, 4, "mine")
    env.invoke("cancel", second["batch_id"], "-q")
    third = json_here(env, "retry", first, "--detach")  # by the first id: the newest of the chain is resumed
    assert third["resumed_from"] == second["batch_id"] and third["batch_id"] not in (first, second["batch_id"])
    replay = submit_here(env, *request_args(photos, out_dir, "--key", "mine"))
    assert replay["batch_id"] == third["batch_id"]
