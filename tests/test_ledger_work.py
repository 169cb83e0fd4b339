"""Claims, leases, heartbeats, publish, failure and rescue — at the ledger, with a movable clock."""

from __future__ import annotations

import multiprocessing
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from thumbctl import Ledger, Limits
from thumbctl.errors import LedgerBusy
from thumbctl.ledger.work import CLAIM_SHARED_ITEMS
from thumbctl.models import NewBatch, NewItem

from support import Clock, check_invariants, request


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def led(tmp_path: Path, clock: Clock):
    with Ledger(tmp_path / "l.db", clock=clock) as ledger:
        yield ledger
        check_invariants(ledger, outputs=False)


def no_delay(attempt: int) -> float:
    return 0.0


def test_a_claim_takes_every_ratio_of_one_source_under_one_lease(led: Ledger, clock: Clock) -> None:
    batch = led.accept_batch(request(), Limits())
    claim = led.claim("w1", lease_seconds=30)
    assert claim is not None and claim.source == "/src/img0.jpg"
    assert [i.ratio for i in claim.items] == ["1:1", "4:3"] and all(i.attempt == 1 for i in claim.items)
    other = led.claim("w2")
    assert other is not None and other.source == "/src/img1.jpg" and other.token != claim.token
    assert led.claim("w3") is None
    assert led.batch(batch.batch_id).counts["running"] == 4
    events = [e for e in led.events(batch.batch_id) if e.to_state == "running"]
    assert {(e.worker, e.attempt) for e in events} == {("w1", 1), ("w2", 1)}


def test_claims_skip_batches_with_a_cancel_request(led: Ledger) -> None:
    """The claim itself checks the flag: only the flag is set here (no sweep of the queued items),
    so a claim that relied on ``cancel`` sweeping them would take the flagged batch's items."""
    flagged = led.accept_batch(request("flagged"), Limits())
    other = led.accept_batch(request("other"), Limits())
    with sqlite3.connect(led.path) as raw:
        raw.execute(
            "UPDATE batches SET cancel_requested_at = '2000-01-01T00:00:00Z' WHERE batch_id = ?", (flagged.batch_id,)
        )
    assert led.batch(flagged.batch_id).counts["queued"] == 4
    assert led.claim("w1", batch_id=flagged.batch_id) is None
    taken = [led.claim(f"w{n}") for n in range(3)]
    assert [c.batch_id if c else None for c in taken] == [other.batch_id, other.batch_id, None]
    assert led.batch(flagged.batch_id).counts["queued"] == 4


def test_a_cancel_recorded_while_no_worker_runs_means_nothing_renders(led: Ledger) -> None:
    batch = led.accept_batch(request(sources=3), Limits())
    view = led.request_cancel(batch.batch_id)
    assert view.state == "cancelled" and view.counts["cancelled"] == 6
    assert led.claim("late-worker") is None
    assert not [e for e in led.events(batch.batch_id) if e.to_state in ("running", "succeeded")]


def one_photo(skus: int, ratios: tuple[str, ...] = ("1:1", "4:3"), focuses: int = 1) -> NewBatch:
    """``skus`` item ids that all point at one photo (one derivative key per ratio and focus)."""
    items = tuple(
        NewItem(
            f"sku{n}",
            ratio,
            "/src/photo.jpg",
            "queued",
            source_digest="0" * 64,
            source_format="jpeg",
            source_width=40,
            source_height=30,
            focus=(n % focuses / focuses, 0.5),
            derivative_key=f"{ratio}@{n % focuses}",
            object_path=f"/out/o{ratio}@{n % focuses}",
            friendly_path=f"/out/sku{n}.{ratio}",
        )
        for n in range(skus)
        for ratio in ratios
    )
    return NewBatch(f"one-photo-{skus}-{focuses}", "digest", "/src", "/out", {"size": 64}, items)


@pytest.mark.parametrize(("skus", "focuses", "claims"), [(300, 1, 10), (100, 80, 1)])
def test_items_sharing_a_source_are_claimed_by_distinct_key_plus_a_bounded_slice(
    led: Ledger, skus: int, focuses: int, claims: int
) -> None:
    """Every claim takes each distinct derivative key still queued (so the source is decoded once
    for all of them) and at most CLAIM_SHARED_ITEMS more items sharing those keys; the rest stay
    queued for the next claimer."""
    batch = led.accept_batch(one_photo(skus, focuses=focuses), Limits())
    queued = {(i.item_id, i.ratio): i.derivative_key for i in led.items(batch.batch_id)}
    taken = []
    while (claim := led.claim(f"w{len(taken)}")) is not None:
        keys = set(queued.values())
        assert {i.derivative_key for i in claim.items} == keys
        assert len(claim.items) == min(len(queued), len(keys) + CLAIM_SHARED_ITEMS)
        for item in claim.items:
            del queued[item.item_id, item.ratio]
        taken.append(claim)
    assert not queued and len(taken) == claims


def test_the_item_timeout_times_each_stage_of_a_claim_not_the_whole_claim(led: Ledger, clock: Clock) -> None:
    """The decode is timed from the claim; then only the items of the render in hand are timed,
    afresh after each publish; between stages nothing is. Past the limit, the stage's items fail
    ``timeout`` and the claim's other items go back to the queue with the attempt not counted."""
    batch = led.accept_batch(one_photo(3), Limits())
    claim = led.claim("w1")
    clock.now += 9
    assert led.overdue_owners(10) == []
    clock.now += 2
    assert led.overdue_owners(10) == ["w1"]  # the decode stage
    led.start_stage(claim, [])
    clock.now += 100
    assert led.overdue_owners(10) == []  # between stages
    square = [i for i in claim.items if i.ratio == "1:1"]
    led.start_stage(claim, [i.row for i in square])
    for item in square[:2]:
        clock.now += 9
        assert led.overdue_owners(10) == []
        assert led.publish(claim, item, lambda: None) == "succeeded"
    clock.now += 9
    assert led.stop_overdue("w1", 10, "timeout", "slow") == 0 and led.overdue_owners(10) == []
    clock.now += 2
    assert led.overdue_owners(10) == ["w1"]
    assert led.stop_overdue("w1", 10, "timeout", "slow") == 1
    items = {(i.item_id, i.ratio): i for i in led.items(batch.batch_id)}
    assert (items["sku2", "1:1"].state, items["sku2", "1:1"].error_code) == ("failed", "timeout")
    waiting = [items[f"sku{n}", "4:3"] for n in range(3)]
    assert [(i.state, i.attempt) for i in waiting] == [("queued", 0)] * 3
    again = led.claim("w2")
    assert again is not None and sorted((i.item_id, i.attempt) for i in again.items) == [
        ("sku0", 1),
        ("sku1", 1),
        ("sku2", 1),
    ]


def test_heartbeats_keep_a_long_item_from_being_claimed_twice(led: Ledger, clock: Clock) -> None:
    led.accept_batch(request(sources=1), Limits())
    claim = led.claim("w1", lease_seconds=30)
    for _ in range(10):  # five minutes of work, a heartbeat every 10 s
        clock.now += 10
        assert led.heartbeat(claim.token, 30) == 2
        assert led.claim("w2", lease_seconds=30, delay_for=no_delay) is None


def test_an_expired_lease_is_rescued_with_the_attempt_counted(led: Ledger, clock: Clock) -> None:
    batch = led.accept_batch(request(sources=1), Limits())
    stale = led.claim("w1", lease_seconds=30)
    clock.now += 31
    fresh = led.claim("w2", lease_seconds=30, delay_for=no_delay)
    assert fresh is not None and fresh.token != stale.token
    assert [i.attempt for i in fresh.items] == [2, 2]
    rescued = [e for e in led.events(batch.batch_id) if e.error_code == "worker_crashed"]
    assert [(e.from_state, e.to_state, e.worker) for e in rescued] == [("running", "queued", "w1")] * 2


def test_a_stale_workers_completion_after_rescue_is_rejected(led: Ledger, clock: Clock) -> None:
    batch = led.accept_batch(request(sources=1), Limits())
    stale = led.claim("w1", lease_seconds=30)
    clock.now += 31
    fresh = led.claim("w2", lease_seconds=30, delay_for=no_delay)
    published: list[str] = []
    assert led.publish(stale, stale.items[0], lambda: published.append("stale")) == "lost"
    assert led.heartbeat(stale.token) == 0
    assert led.fail(stale, [stale.items[1].row], "io_error", "late", no_delay) == {}
    assert published == []
    assert led.publish(fresh, fresh.items[0], lambda: published.append("fresh")) == "succeeded"
    assert published == ["fresh"]
    assert led.batch(batch.batch_id).counts == {"queued": 0, "running": 1, "succeeded": 1, "failed": 0, "cancelled": 0}


def test_a_dead_owner_on_this_host_is_rescued_at_once(led: Ledger) -> None:
    led.accept_batch(request(sources=1), Limits())
    led.claim("host:1:dead", lease_seconds=3600)
    fresh = led.claim("w2", is_dead=lambda owner: owner == "host:1:dead", delay_for=no_delay)
    assert fresh is not None and [i.attempt for i in fresh.items] == [2, 2]


def test_transient_failures_back_off_with_a_persisted_not_before(led: Ledger, clock: Clock, tmp_path: Path) -> None:
    batch = led.accept_batch(request(sources=1), Limits())
    claim = led.claim("w1")
    outcome = led.fail(claim, [i.row for i in claim.items], "io_error", "disk hiccup", lambda attempt: 20.0)
    assert set(outcome.values()) == {"queued"}
    assert led.claim("w2") is None  # not before its time
    state = led.queue_state(batch.batch_id)
    assert (state.runnable, state.delayed) == (0, 2)
    with Ledger(tmp_path / "l.db", clock=clock) as restarted:  # a restart keeps the schedule
        assert restarted.claim("w3") is None
        clock.now += 20
        again = restarted.claim("w3")
    assert again is not None and [i.attempt for i in again.items] == [2, 2]
    events = [e for e in led.events(batch.batch_id) if e.to_state == "queued" and e.from_state == "running"]
    assert {e.error_code for e in events} == {"io_error"}


def test_a_delayed_retry_is_claimed_exactly_once_after_its_time(led: Ledger, clock: Clock) -> None:
    led.accept_batch(request(sources=1, ratios=("1:1",)), Limits())
    claim = led.claim("w1")
    led.fail(claim, [claim.items[0].row], "io_error", "x", lambda attempt: 5.0)
    clock.now += 4.9
    assert led.claim("w2") is None
    clock.now += 0.2
    claims = [led.claim(f"w{n}") for n in range(3, 7)]
    assert sum(c is not None for c in claims) == 1


def test_permanent_failures_are_never_retried(led: Ledger) -> None:
    batch = led.accept_batch(request(sources=1), Limits())
    claim = led.claim("w1")
    outcome = led.fail(claim, [i.row for i in claim.items], "corrupt_image", "bad data", lambda a: 0.0)
    assert set(outcome.values()) == {"failed"}
    assert led.claim("w2") is None
    assert led.batch(batch.batch_id).state == "failed"


def test_attempts_run_out(led: Ledger, clock: Clock) -> None:
    batch = led.accept_batch(request(sources=1, ratios=("1:1",), max_attempts=3), Limits())
    for attempt in (1, 2, 3):
        claim = led.claim("w")
        assert claim.items[0].attempt == attempt
        led.fail(claim, [claim.items[0].row], "io_error", "flaky", no_delay)
    failure = led.batch(batch.batch_id).failures[0]
    assert failure.error_code == "attempts_exhausted" and "io_error" in failure.detail and "3 of 3" in failure.detail


def test_a_source_that_kills_its_worker_every_time_ends_worker_crashed(led: Ledger, clock: Clock) -> None:
    batch = led.accept_batch(request(sources=1, ratios=("1:1",), max_attempts=2), Limits())
    for _ in range(2):
        assert led.claim("w", lease_seconds=30, delay_for=no_delay) is not None
        clock.now += 31
    led.rescue_leases(lambda owner: False, no_delay)
    assert led.claim("w") is None
    view = led.batch(batch.batch_id)
    assert view.state == "failed" and view.failures[0].error_code == "worker_crashed"


def test_the_deadline_stops_retries_and_queued_work(led: Ledger, clock: Clock) -> None:
    batch = led.accept_batch(request(sources=2, ratios=("1:1",), deadline_seconds=60), Limits())
    claim = led.claim("w")
    outcome = led.fail(claim, [claim.items[0].row], "io_error", "x", lambda attempt: 120.0)
    assert set(outcome.values()) == {"failed"}
    clock.now += 61
    assert led.claim("w") is None
    view = led.batch(batch.batch_id)
    assert view.state == "failed" and {f.error_code for f in view.failures} == {"deadline_exceeded"}


def test_publish_after_the_cancel_is_refused_and_success_before_it_stays(led: Ledger) -> None:
    batch = led.accept_batch(request(sources=1), Limits())
    claim = led.claim("w1")
    assert led.publish(claim, claim.items[0], lambda: None) == "succeeded"
    led.request_cancel(batch.batch_id)
    published = []
    assert led.publish(claim, claim.items[1], lambda: published.append(1)) == "cancelled"
    assert published == []
    view = led.batch(batch.batch_id)
    assert view.state == "cancelled" and view.counts["succeeded"] == 1 and view.counts["cancelled"] == 1


def test_a_failing_publish_effect_commits_nothing(led: Ledger) -> None:
    batch = led.accept_batch(request(sources=1), Limits())
    claim = led.claim("w1")

    def disk_full() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        led.publish(claim, claim.items[0], disk_full)
    assert led.batch(batch.batch_id).counts["running"] == 2


def test_checkpoint_cancel_settles_every_held_item(led: Ledger) -> None:
    batch = led.accept_batch(request(sources=1), Limits())
    claim = led.claim("w1")
    assert not led.cancel_if_requested(claim)
    led.request_cancel(batch.batch_id)
    assert led.batch(batch.batch_id).state == "cancel_requested"
    assert led.cancel_if_requested(claim)
    assert led.batch(batch.batch_id).state == "cancelled"


def _claim_many(path: str, name: str, results: multiprocessing.Queue) -> None:
    claimed, errors = [], []
    with Ledger(Path(path), busy_timeout=30) as ledger:
        while True:
            try:
                claim = ledger.claim(name)
            except LedgerBusy as exc:  # would surface to a user as 'database is locked'
                errors.append(str(exc))
                continue
            if claim is None:
                break
            claimed.extend(i.row for i in claim.items)
    results.put((claimed, errors))


def test_four_processes_claiming_at_once_never_double_claim(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger(path) as ledger:
        ledger.accept_batch(request(sources=200), Limits())
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(str(path), f"w{n}", results)) for n in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    rows = [row for claimed, _ in outcomes for row in claimed]
    assert sorted(rows) == list(range(1, 401))
    assert [errors for _, errors in outcomes] == [[], [], [], []]
    with sqlite3.connect(path) as raw:
        claims = raw.execute("SELECT count(*) FROM events WHERE to_state = 'running'").fetchone()[0]
    assert claims == 400


def test_a_running_item_past_the_deadline_is_not_published(led: Ledger, clock: Clock) -> None:
    batch = led.accept_batch(request(sources=1, ratios=("1:1",), deadline_seconds=60), Limits())
    claim = led.claim("w1")
    clock.now += 61
    published: list[int] = []
    assert led.publish(claim, claim.items[0], lambda: published.append(1)) == "late"
    assert published == []
    failure = led.batch(batch.batch_id).failures[0]
    assert failure.error_code == "deadline_exceeded"


def test_cancel_wait_settles_the_items_of_dead_workers(led: Ledger) -> None:
    from thumbctl.proc import host_id
    from thumbctl.runner import wait_until_terminal

    batch = led.accept_batch(request(sources=2), Limits())
    led.claim(f"{host_id()}:999999999:1", lease_seconds=3600)  # a worker killed by a second Ctrl-C
    assert led.request_cancel(batch.batch_id).state == "cancel_requested"
    view = wait_until_terminal(led, batch.batch_id, should_stop=lambda: False)
    assert view.state == "cancelled" and view.counts["running"] == 0


class WorkQueueMachine(RuleBasedStateMachine):
    """Random interleavings of claims, publishes, failures, heartbeats, time, rescues and cancels.

    After every step: invariant 1 (total = sum of counts), invariant 3 (no success after the
    cancel in commit order), and no item is held by two claims or published twice.
    """

    @initialize()
    def open_ledger(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = Clock()
        self.led = Ledger(Path(self.tmp.name) / "l.db", clock=self.clock)
        self.batches: list[str] = []
        self.claims: list = []
        self.published: list[int] = []

    def teardown(self) -> None:
        self.led.close()
        self.tmp.cleanup()

    @rule(sources=st.integers(1, 3))
    def submit(self, sources: int) -> None:
        key = f"k{len(self.batches)}"
        self.batches.append(self.led.accept_batch(request(key, sources=sources), Limits()).batch_id)

    @rule(worker=st.sampled_from(["w1", "w2", "w3"]))
    def claim(self, worker: str) -> None:
        claim = self.led.claim(worker, lease_seconds=30, delay_for=lambda attempt: 5.0)
        if claim is not None:
            self.claims.append(claim)

    @rule(data=st.data())
    def publish(self, data) -> None:
        if self.claims:
            claim = data.draw(st.sampled_from(self.claims))
            item = data.draw(st.sampled_from(claim.items))
            self.led.publish(claim, item, lambda: self.published.append(item.row))

    @rule(data=st.data(), code=st.sampled_from(["io_error", "corrupt_image", "worker_crashed"]))
    def fail(self, data, code: str) -> None:
        if self.claims:
            claim = data.draw(st.sampled_from(self.claims))
            self.led.fail(claim, [i.row for i in claim.items], code, "test", lambda attempt: 5.0)

    @rule(data=st.data())
    def heartbeat(self, data) -> None:
        if self.claims:
            self.led.heartbeat(data.draw(st.sampled_from(self.claims)).token, 30)

    @rule(seconds=st.sampled_from([1.0, 10.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def rescue(self) -> None:
        self.led.rescue_leases(lambda owner: False, lambda attempt: 5.0)

    @rule(data=st.data())
    def cancel(self, data) -> None:
        if self.batches:
            self.led.request_cancel(data.draw(st.sampled_from(self.batches)))

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "led"):
            return
        check_invariants(self.led, outputs=False)
        assert len(self.published) == len(set(self.published)), "an item was published twice"
        with sqlite3.connect(self.led.path) as raw:
            bad = raw.execute(
                "SELECT count(*) FROM items WHERE (state = 'running') != (lease_token IS NOT NULL)"
            ).fetchone()[0]
        assert bad == 0, "a running item without a lease, or a lease on an item that is not running"


TestWorkQueueMachine = WorkQueueMachine.TestCase
TestWorkQueueMachine.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
