"""The ledger contract: the same tests on every backend (``[sqlite]``, ``[postgres]`` and
``[memory]``, :class:`thumbctl.testing.InMemoryLedger`).

Every transition, idempotency, the cancel race rule, leases (expiry, heartbeats, rescue of a dead
owner on this host and of another host's owner at expiry), retry, deadlines and commit order of
events, through the :class:`~thumbctl.Ledger` API only. The tests that matter because PostgreSQL
runs writers side by side use two ``Ledger`` objects (two connections) on one ledger. What is
specific to one backend (SQLite's file, PRAGMAs, VM steps; PostgreSQL's server) is tested in the
backend's own modules. A case about other processes, or about a read beside another
connection's open write (a write-ahead log's), is marked ``cross_process`` or
``reads_beside_writes`` and skipped on ``[memory]``, saying why (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from thumbctl import IdempotencyConflict, Ledger, Limits
from thumbctl.core.errors import BatchNotFound, ItemNotFound, LedgerBusy, ThumbctlError, UsageError
from thumbctl.core.models import KeyedBatch, NewBatch, NewItem
from thumbctl.core.proc import HOST_ID_ENV, owner_id, owner_is_dead
from thumbctl.ledger import rescue
from thumbctl.ledger.queue import CLAIM_SHARED_ITEMS
from thumbctl.ledger.timefmt import iso

from harness import in_timed_sleep, until
from support import (
    Clock,
    check_invariants,
    failed_with_events_uncommitted,
    new_batch,
    open_ledger,
    raw_rows,
    raw_write,
    request,
)


@pytest.fixture
def ledger_url(contract_ledger_url: str) -> str:
    """Each backend of the contract: a SQLite file, PostgreSQL, and the in-memory ledger."""
    return contract_ledger_url


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(ledger_url: str, clock: Clock) -> Iterator[Ledger]:
    """A fresh ledger on the backend of the test's parameter, on a clock the test moves."""
    with open_ledger(ledger_url, clock=clock) as led:
        yield led
        check_invariants(led, outputs=False)


@pytest.fixture
def second(ledger: Ledger, ledger_url: str, clock: Clock) -> Iterator[Ledger]:
    """A second connection to the same ledger: another process's view of it."""
    with open_ledger(ledger_url, clock=clock) as led:
        yield led


def no_delay(attempt: int) -> float:
    return 0.0


def in_threads(*targets: Callable[[], object], timeout: float = 120) -> list[object]:
    """Run each target in its own thread at once; their results in order (an exception re-raised)."""
    results: list[object] = [None] * len(targets)
    errors: list[BaseException] = []
    start = threading.Barrier(len(targets))

    def run(n: int) -> None:
        try:
            start.wait()
            results[n] = targets[n]()
        except BaseException as exc:  # re-raised in the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def wait_until_blocked(ledger_url: str, thread: threading.Thread) -> None:
    """Return once ``thread`` waits for a lock another connection holds (asserting it does not end
    meanwhile): on PostgreSQL, a session of this database waiting for a lock; on SQLite, the
    thread seen in SQLite's busy wait for the write lock, which the holder keeps until it commits."""
    if not ledger_url.startswith("postgresql://"):

        def waiting() -> bool:
            assert thread.is_alive(), "the second writer did not wait for the first"
            return in_timed_sleep(os.getpid(), thread.native_id)

        until(waiting, "the second writer to wait for the first's write lock")
        return
    import psycopg

    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    with psycopg.connect(ledger_url, autocommit=True) as conn:
        for _ in range(3000):
            assert thread.is_alive(), "the second writer did not wait for the first"
            if conn.execute(sql).fetchone()[0]:
                return
            thread.join(0.01)
    pytest.fail("the second writer never waited for a lock")


# -- acceptance and idempotency -----------------------------------------------------------


def test_reopening_keeps_the_data(ledger: Ledger, ledger_url: str) -> None:
    batch_id = ledger.intake.accept_batch(new_batch("k", "d1"), Limits()).batch_id
    with open_ledger(ledger_url) as reopened:
        assert reopened.views.batch(batch_id).total == 3


def test_events_are_append_only(ledger: Ledger) -> None:
    ledger.intake.accept_batch(new_batch("k", "d1"), Limits())
    with pytest.raises(Exception, match="append-only"):
        raw_write(ledger, "UPDATE events SET to_state = 'succeeded'")


def test_acceptance_logs_one_creation_event_per_item(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(new_batch("k", "d1", queued=2, failed=1), Limits())
    events = ledger.views.events(batch.batch_id)
    assert [(e.item_id, e.from_state, e.to_state, e.error_code) for e in events] == [
        ("img0.jpg", None, "queued", None),
        ("img1.jpg", None, "queued", None),
        ("bad0.jpg", None, "failed", "unsupported_format"),
    ]
    assert [e.seq for e in events] == sorted(e.seq for e in events)


def test_a_replay_returns_the_batch_and_a_conflict_changes_nothing(ledger: Ledger) -> None:
    first = ledger.intake.accept_batch(new_batch("k", "d1"), Limits())
    again = ledger.intake.accept_batch(new_batch("k", "d1", queued=1), Limits())
    assert (again.batch_id, again.replayed, first.replayed) == (first.batch_id, True, False)
    before = raw_rows(ledger, "SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM events)")
    with pytest.raises(IdempotencyConflict) as raised:
        ledger.intake.accept_batch(new_batch("k", "d2"), Limits())
    assert raised.value.batch_id == first.batch_id
    assert raw_rows(ledger, "SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM events)") == before
    assert ledger.intake.batch_for_key("k") == KeyedBatch(first.batch_id, cancelled=False)
    assert ledger.intake.batch_for_key("other") is None


def test_batch_ids_resolve_from_unique_prefixes(ledger: Ledger) -> None:
    batch_id = ledger.intake.accept_batch(new_batch("k", "d1"), Limits()).batch_id
    assert ledger.views.resolve_batch_id(batch_id[:8]) == batch_id
    with pytest.raises(BatchNotFound):
        ledger.views.resolve_batch_id("b_")  # too short to be taken as a prefix
    with pytest.raises(BatchNotFound):
        ledger.views.batch("b_nope")


def test_source_sizes_are_read_for_items_whose_header_was_read(ledger: Ledger) -> None:
    sized = [
        NewItem(f"img{i}.jpg", "1:1", f"/src/img{i}.jpg", "queued", source_width=30 + i, source_height=20)
        for i in range(2)
    ]
    unread = NewItem("bad.jpg", "1:1", "/src/bad.jpg", "failed", error_code="unsupported_format")
    batch = replace(new_batch("k", "d1", queued=0), items=(*sized, unread))
    batch_id = ledger.intake.accept_batch(batch, Limits()).batch_id
    assert ledger.views.source_sizes(batch_id[:8]) == {"img0.jpg": (30, 20), "img1.jpg": (31, 20)}


def _accept_in_process(target: str, batch: NewBatch, results: multiprocessing.Queue) -> None:
    try:
        with Ledger(target) as led:
            view = led.intake.accept_batch(batch, Limits())
            results.put(("ok", view.batch_id, view.replayed))
    except IdempotencyConflict as exc:
        results.put(("conflict", exc.batch_id, None))
    except Exception as exc:  # reported to the test, which fails on it
        results.put(("error", repr(exc), None))


@pytest.mark.cross_process
@pytest.mark.parametrize("same_request", [True, False], ids=["same-request", "same-key-other-requests"])
def test_concurrent_submits_with_one_key_create_one_batch(ledger: Ledger, ledger_url: str, same_request: bool) -> None:
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = ctx.Queue()
    procs = [
        ctx.Process(
            target=_accept_in_process, args=(ledger_url, new_batch("K", "d" if same_request else f"d{i}"), results)
        )
        for i in range(4)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert not [o for o in outcomes if o[0] == "error"], outcomes
    assert len({o[1] for o in outcomes}) == 1
    created = [o for o in outcomes if o[0] == "ok" and o[2] is False]
    assert len(created) == 1
    if same_request:
        assert sum(1 for o in outcomes if o[2] is True) == 3
    else:
        assert sum(1 for o in outcomes if o[0] == "conflict") == 3
    assert len(ledger.views.batches()) == 1


def test_two_connections_submitting_one_key_at_once_make_one_batch(ledger: Ledger, second: Ledger) -> None:
    """Both transactions start together; the second waits for the first's key, then replays it."""
    views = in_threads(
        lambda: ledger.intake.accept_batch(new_batch("K", "d", queued=300), Limits()),
        lambda: second.intake.accept_batch(new_batch("K", "d", queued=300), Limits()),
    )
    assert views[0].batch_id == views[1].batch_id
    assert sorted(v.replayed for v in views) == [False, True]
    assert [b.batch_id for b in ledger.views.batches()] == [views[0].batch_id]
    assert raw_rows(ledger, "SELECT count(*) FROM items")[0][0] == 300
    assert len(ledger.views.events(views[0].batch_id)) == 300


# -- streamed listings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listing", "kwargs"),
    [("events", {}), ("events", {"item_id": "img1.jpg"}), ("items", {}), ("items", {"state": "failed"})],
)
def test_a_streamed_listing_yields_what_the_list_holds(ledger: Ledger, listing: str, kwargs: dict) -> None:
    batch_id = ledger.intake.accept_batch(new_batch("k", "d1", queued=1200, failed=3), Limits()).batch_id
    ledger.intake.request_cancel(batch_id)
    with getattr(ledger.views, f"streamed_{listing}")(batch_id[:8], **kwargs) as rows:
        streamed = list(rows)
    assert streamed == getattr(ledger.views, listing)(batch_id, **kwargs) and streamed


@pytest.mark.reads_beside_writes
def test_a_streamed_listing_is_one_snapshot_while_another_connection_writes(ledger: Ledger, second: Ledger) -> None:
    batch_id = ledger.intake.accept_batch(new_batch("k", "d1", queued=1200), Limits()).batch_id
    with ledger.views.streamed_items(batch_id) as items, ledger.views.streamed_events(batch_id) as events:
        first = next(items)
        second.intake.request_cancel(batch_id)  # commits while the listing is half read
        assert {first.state} | {i.state for i in items} == {"queued"}
        assert {e.to_state for e in events} == {"queued"}
    assert {i.state for i in ledger.views.items(batch_id)} == {"cancelled"}


def test_a_streamed_listing_left_early_ends_its_read(ledger: Ledger, second: Ledger) -> None:
    batch_id = ledger.intake.accept_batch(new_batch("k", "d1", queued=1200), Limits()).batch_id
    with ledger.views.streamed_events(batch_id) as events:
        next(events)
    second.intake.request_cancel(batch_id)
    ledger.intake.request_cancel(batch_id)  # a write on this connection: no read transaction is left open
    assert ledger.views.batch(batch_id).state == "cancelled"


@pytest.mark.parametrize("kwargs", [{"batch_id": "b_nope"}, {"item_id": "nope.jpg"}])
def test_a_streamed_listing_of_an_unknown_batch_or_item_fails_on_entering(ledger: Ledger, kwargs: dict) -> None:
    batch_id = ledger.intake.accept_batch(new_batch("k", "d1"), Limits()).batch_id
    with pytest.raises((BatchNotFound, ItemNotFound)), ledger.views.streamed_events(**{"batch_id": batch_id, **kwargs}):
        pytest.fail("entered")
    assert len(ledger.views.events(batch_id)) == 3  # and the connection is usable


# -- cancellation -----------------------------------------------------------------------------


def test_cancel_moves_queued_items_at_once_and_logs_a_batch_event(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(new_batch("k", "d1", queued=2, failed=1), Limits())
    view = ledger.intake.request_cancel(batch.batch_id)
    assert view.state == "cancelled" and view.cancel_requested_at is not None
    assert view.counts == {"queued": 0, "running": 0, "succeeded": 0, "failed": 1, "cancelled": 2}
    events = ledger.views.events(batch.batch_id)
    cancel_event = next(e for e in events if e.to_state == "cancel_requested")
    assert cancel_event.item_id is None and cancel_event.at == view.cancel_requested_at
    later = [e for e in events if e.seq > cancel_event.seq]
    assert [(e.from_state, e.to_state) for e in later] == [("queued", "cancelled")] * 2


def test_repeating_a_cancel_converges_and_logs_nothing_new(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(new_batch("k", "d1"), Limits())
    first = ledger.intake.request_cancel(batch.batch_id)
    count = len(ledger.views.events(batch.batch_id))
    second = ledger.intake.request_cancel(batch.batch_id)
    assert (second.state, second.counts, second.cancel_requested_at) == (
        first.state,
        first.counts,
        first.cancel_requested_at,
    )
    assert len(ledger.views.events(batch.batch_id)) == count


def test_cancelling_a_terminal_batch_changes_nothing(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(new_batch("k", "d1", queued=0, failed=2), Limits())
    assert batch.state == "failed"
    view = ledger.intake.request_cancel(batch.batch_id)
    assert view.state == "failed" and view.cancel_requested_at is None
    assert len(ledger.views.events(batch.batch_id)) == 2


def reused(key: str, **kwargs) -> NewBatch:
    """A batch whose items were all reused at acceptance, with the friendly names of ``request``."""
    new = request(key, **kwargs)
    return replace(new, items=tuple(replace(i, state="succeeded", dedup=True) for i in new.items))


def test_a_batch_owns_the_friendly_names_no_later_success_claimed(ledger: Ledger, clock: Clock) -> None:
    old = ledger.intake.accept_batch(reused("old", sources=2), Limits())
    clock.now += 5
    new = ledger.intake.accept_batch(reused("new", sources=1), Limits())
    clock.now += 5
    queued = ledger.intake.accept_batch(request("queued", sources=2), Limits())
    owned = {
        batch.batch_id: sorted(f for _, f in ledger.views.owned_friendly_names(batch.batch_id))
        for batch in (old, new, queued)
    }
    assert owned == {
        old.batch_id: ["/out/f11:1", "/out/f14:3"],
        new.batch_id: ["/out/f01:1", "/out/f04:3"],
        queued.batch_id: [],
    }
    assert ledger.views.owned_friendly_names(new.batch_id)[0] == ("/out/o01:1", "/out/f01:1")
    clock.now += 5
    assert ledger.upkeep.expire_batch(new.batch_id, iso(clock.now))
    assert sorted(f for _, f in ledger.views.owned_friendly_names(old.batch_id)) == [
        "/out/f01:1",
        "/out/f04:3",
        "/out/f11:1",
        "/out/f14:3",
    ]
    assert ledger.views.owned_friendly_names(new.batch_id) == []


# -- claims, leases, outcomes ------------------------------------------------------------------


def test_a_claim_takes_every_ratio_of_one_source_under_one_lease(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(request(), Limits())
    claim = ledger.queue.claim("w1", lease_seconds=30)
    assert claim is not None and claim.source == "/src/img0.jpg"
    assert [i.ratio for i in claim.items] == ["1:1", "4:3"] and all(i.attempt == 1 for i in claim.items)
    other = ledger.queue.claim("w2")
    assert other is not None and other.source == "/src/img1.jpg" and other.token != claim.token
    assert ledger.queue.claim("w3") is None
    assert ledger.views.batch(batch.batch_id).counts["running"] == 4
    events = [e for e in ledger.views.events(batch.batch_id) if e.to_state == "running"]
    assert {(e.worker, e.attempt) for e in events} == {("w1", 1), ("w2", 1)}


def test_claims_skip_batches_with_a_cancel_request(ledger: Ledger) -> None:
    """The claim itself checks the flag: only the flag is set here (no sweep of the queued items),
    so a claim that relied on ``cancel`` sweeping them would take the flagged batch's items."""
    flagged = ledger.intake.accept_batch(request("flagged"), Limits())
    other = ledger.intake.accept_batch(request("other"), Limits())
    flag = "UPDATE batches SET cancel_requested_at = '2000-01-01T00:00:00Z' WHERE batch_id = ?"
    raw_write(ledger, flag, (flagged.batch_id,))
    assert ledger.views.batch(flagged.batch_id).counts["queued"] == 4
    assert ledger.queue.claim("w1", batch_id=flagged.batch_id) is None
    taken = [ledger.queue.claim(f"w{n}") for n in range(3)]
    assert [c.batch_id if c else None for c in taken] == [other.batch_id, other.batch_id, None]
    counts = ledger.views.batch(flagged.batch_id).counts  # never taken: the first claim cancelled them
    assert (counts["queued"], counts["running"], counts["cancelled"]) == (0, 0, 4)


def test_a_cancel_recorded_while_no_worker_runs_means_nothing_renders(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(request(sources=3), Limits())
    view = ledger.intake.request_cancel(batch.batch_id)
    assert view.state == "cancelled" and view.counts["cancelled"] == 6
    assert ledger.queue.claim("late-worker") is None
    assert not [e for e in ledger.views.events(batch.batch_id) if e.to_state in ("running", "succeeded")]


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
    ledger: Ledger, skus: int, focuses: int, claims: int
) -> None:
    """Every claim takes each distinct derivative key still queued (so the source is decoded once
    for all of them) and at most CLAIM_SHARED_ITEMS more items sharing those keys; the rest stay
    queued for the next claimer."""
    batch = ledger.intake.accept_batch(one_photo(skus, focuses=focuses), Limits())
    queued = {(i.item_id, i.ratio): i.derivative_key for i in ledger.views.items(batch.batch_id)}
    taken = []
    while (claim := ledger.queue.claim(f"w{len(taken)}")) is not None:
        keys = set(queued.values())
        assert {i.derivative_key for i in claim.items} == keys
        assert len(claim.items) == min(len(queued), len(keys) + CLAIM_SHARED_ITEMS)
        for item in claim.items:
            del queued[item.item_id, item.ratio]
        taken.append(claim)
    assert not queued and len(taken) == claims


def test_the_item_timeout_times_each_stage_of_a_claim_not_the_whole_claim(ledger: Ledger, clock: Clock) -> None:
    """The decode is timed from the claim; then only the items of the render in hand are timed,
    afresh after each publish; between stages nothing is. Past the limit, the stage's items fail
    ``timeout`` and the claim's other items go back to the queue with the attempt not counted."""
    batch = ledger.intake.accept_batch(one_photo(3), Limits())
    claim = ledger.queue.claim("w1")
    clock.now += 9
    assert ledger.queue.overdue_owners(10) == []
    clock.now += 2
    assert ledger.queue.overdue_owners(10) == ["w1"]  # the decode stage
    ledger.queue.start_stage(claim, [])
    clock.now += 100
    assert ledger.queue.overdue_owners(10) == []  # between stages
    square = [i for i in claim.items if i.ratio == "1:1"]
    ledger.queue.start_stage(claim, [i.row for i in square])
    for item in square[:2]:
        clock.now += 9
        assert ledger.queue.overdue_owners(10) == []
        assert ledger.queue.publish(claim, item, lambda: None) == "succeeded"
    clock.now += 9
    assert ledger.queue.stop_overdue("w1", 10, "timeout", "slow") == 0 and ledger.queue.overdue_owners(10) == []
    clock.now += 2
    assert ledger.queue.overdue_owners(10) == ["w1"]
    assert ledger.queue.stop_overdue("w1", 10, "timeout", "slow") == 1
    items = {(i.item_id, i.ratio): i for i in ledger.views.items(batch.batch_id)}
    assert (items["sku2", "1:1"].state, items["sku2", "1:1"].error_code) == ("failed", "timeout")
    waiting = [items[f"sku{n}", "4:3"] for n in range(3)]
    assert [(i.state, i.attempt) for i in waiting] == [("queued", 0)] * 3
    again = ledger.queue.claim("w2")
    assert again is not None and sorted((i.item_id, i.attempt) for i in again.items) == [
        ("sku0", 1),
        ("sku1", 1),
        ("sku2", 1),
    ]


def test_heartbeats_keep_a_long_item_from_being_claimed_twice(ledger: Ledger, clock: Clock) -> None:
    ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1", lease_seconds=30)
    for _ in range(10):  # five minutes of work, a heartbeat every 10 s
        clock.now += 10
        assert ledger.queue.heartbeat(claim.token, 30) == 2
        assert ledger.queue.claim("w2", lease_seconds=30, delay_for=no_delay) is None


def test_an_expired_lease_is_rescued_with_the_attempt_counted(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    stale = ledger.queue.claim("w1", lease_seconds=30)
    clock.now += 31
    fresh = ledger.queue.claim("w2", lease_seconds=30, delay_for=no_delay)
    assert fresh is not None and fresh.token != stale.token
    assert [i.attempt for i in fresh.items] == [2, 2]
    rescued = [e for e in ledger.views.events(batch.batch_id) if e.error_code == "worker_crashed"]
    assert [(e.from_state, e.to_state, e.worker) for e in rescued] == [("running", "queued", "w1")] * 2


def test_a_stale_workers_completion_after_rescue_is_rejected(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    stale = ledger.queue.claim("w1", lease_seconds=30)
    clock.now += 31
    fresh = ledger.queue.claim("w2", lease_seconds=30, delay_for=no_delay)
    published: list[str] = []
    assert ledger.queue.publish(stale, stale.items[0], lambda: published.append("stale")) == "lost"
    assert ledger.queue.heartbeat(stale.token) == 0
    assert ledger.queue.fail(stale, [stale.items[1].row], "io_error", "late", no_delay) == {}
    assert published == []
    assert ledger.queue.publish(fresh, fresh.items[0], lambda: published.append("fresh")) == "succeeded"
    assert published == ["fresh"]
    counts = ledger.views.batch(batch.batch_id).counts
    assert counts == {"queued": 0, "running": 1, "succeeded": 1, "failed": 0, "cancelled": 0}


def test_a_dead_owner_on_this_host_is_rescued_at_once(ledger: Ledger) -> None:
    ledger.intake.accept_batch(request(sources=1), Limits())
    ledger.queue.claim("host:1:dead", lease_seconds=3600)
    fresh = ledger.queue.claim("w2", is_dead=lambda owner: owner == "host:1:dead", delay_for=no_delay)
    assert fresh is not None and [i.attempt for i in fresh.items] == [2, 2]


def test_an_owner_found_alive_is_looked_at_again_only_after_the_recheck_time(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims beside many workers do not read every owner's process each time: one found alive is
    taken to be alive for ALIVE_RECHECK seconds; when it has died meanwhile, the first claim after
    that time rescues its items."""
    ledger.intake.accept_batch(request(sources=2), Limits())
    ledger.queue.claim("host:1:w1", lease_seconds=3600)
    looked: list[str] = []
    dead: set[str] = set()

    def is_dead(owner: str) -> bool:
        looked.append(owner)
        return owner in dead

    monotonic = [1000.0]
    monkeypatch.setattr(rescue.time, "monotonic", lambda: monotonic[0])
    assert ledger.queue.claim("w2", lease_seconds=3600, is_dead=is_dead, delay_for=no_delay) is not None
    assert looked.count("host:1:w1") == 1
    dead.add("host:1:w1")
    monotonic[0] += rescue.ALIVE_RECHECK / 2
    assert ledger.queue.claim("w3", is_dead=is_dead, delay_for=no_delay) is None
    assert looked.count("host:1:w1") == 1  # not looked at again yet: its items wait
    monotonic[0] += rescue.ALIVE_RECHECK
    rescued = ledger.queue.claim("w3", is_dead=is_dead, delay_for=no_delay)
    assert looked.count("host:1:w1") == 2
    assert rescued is not None and [i.attempt for i in rescued.items] == [2, 2]


def test_transient_failures_back_off_with_a_persisted_not_before(ledger: Ledger, clock: Clock, ledger_url: str) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    outcome = ledger.queue.fail(claim, [i.row for i in claim.items], "io_error", "disk hiccup", lambda attempt: 20.0)
    assert set(outcome.values()) == {"queued"}
    assert ledger.queue.claim("w2") is None  # not before its time
    state = ledger.queue.queue_state(batch.batch_id)
    assert (state.runnable, state.delayed) == (0, 2)
    with open_ledger(ledger_url, clock=clock) as restarted:  # a restart keeps the schedule
        assert restarted.queue.claim("w3") is None
        clock.now += 20
        again = restarted.queue.claim("w3")
    assert again is not None and [i.attempt for i in again.items] == [2, 2]
    events = [e for e in ledger.views.events(batch.batch_id) if e.to_state == "queued" and e.from_state == "running"]
    assert {e.error_code for e in events} == {"io_error"}


def test_a_delayed_retry_is_claimed_exactly_once_after_its_time(ledger: Ledger, clock: Clock) -> None:
    ledger.intake.accept_batch(request(sources=1, ratios=("1:1",)), Limits())
    claim = ledger.queue.claim("w1")
    ledger.queue.fail(claim, [claim.items[0].row], "io_error", "x", lambda attempt: 5.0)
    clock.now += 4.9
    assert ledger.queue.claim("w2") is None
    clock.now += 0.2
    claims = [ledger.queue.claim(f"w{n}") for n in range(3, 7)]
    assert sum(c is not None for c in claims) == 1


def test_permanent_failures_are_never_retried(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    outcome = ledger.queue.fail(claim, [i.row for i in claim.items], "corrupt_image", "bad data", lambda a: 0.0)
    assert set(outcome.values()) == {"failed"}
    assert ledger.queue.claim("w2") is None
    assert ledger.views.batch(batch.batch_id).state == "failed"


def test_attempts_run_out(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(request(sources=1, ratios=("1:1",), max_attempts=3), Limits())
    for attempt in (1, 2, 3):
        claim = ledger.queue.claim("w")
        assert claim.items[0].attempt == attempt
        ledger.queue.fail(claim, [claim.items[0].row], "io_error", "flaky", no_delay)
    failure = ledger.views.batch(batch.batch_id).failures[0]
    assert failure.error_code == "attempts_exhausted" and "io_error" in failure.detail and "3 of 3" in failure.detail


def test_a_source_that_kills_its_worker_every_time_ends_worker_crashed(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(request(sources=1, ratios=("1:1",), max_attempts=2), Limits())
    for _ in range(2):
        assert ledger.queue.claim("w", lease_seconds=30, delay_for=no_delay) is not None
        clock.now += 31
    ledger.queue.rescue_leases(lambda owner: False, no_delay)
    assert ledger.queue.claim("w") is None
    view = ledger.views.batch(batch.batch_id)
    assert view.state == "failed" and view.failures[0].error_code == "worker_crashed"


def test_the_deadline_stops_retries_and_queued_work(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(request(sources=2, ratios=("1:1",), deadline_seconds=60), Limits())
    claim = ledger.queue.claim("w")
    outcome = ledger.queue.fail(claim, [claim.items[0].row], "io_error", "x", lambda attempt: 120.0)
    assert set(outcome.values()) == {"failed"}
    clock.now += 61
    assert ledger.queue.claim("w") is None
    view = ledger.views.batch(batch.batch_id)
    assert view.state == "failed" and {f.error_code for f in view.failures} == {"deadline_exceeded"}


def test_publish_after_the_cancel_is_refused_and_success_before_it_stays(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    assert ledger.queue.publish(claim, claim.items[0], lambda: None) == "succeeded"
    ledger.intake.request_cancel(batch.batch_id)
    published = []
    assert ledger.queue.publish(claim, claim.items[1], lambda: published.append(1)) == "cancelled"
    assert published == []
    view = ledger.views.batch(batch.batch_id)
    assert view.state == "cancelled" and view.counts["succeeded"] == 1 and view.counts["cancelled"] == 1


def test_a_failing_publish_effect_commits_nothing(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")

    def disk_full() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        ledger.queue.publish(claim, claim.items[0], disk_full)
    assert ledger.views.batch(batch.batch_id).counts["running"] == 2


def test_checkpoint_cancel_settles_every_held_item(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    assert not ledger.queue.cancel_if_requested(claim)
    ledger.intake.request_cancel(batch.batch_id)
    assert ledger.views.batch(batch.batch_id).state == "cancel_requested"
    assert ledger.queue.cancel_if_requested(claim)
    assert ledger.views.batch(batch.batch_id).state == "cancelled"


def _claim_many(target: str, name: str, results: multiprocessing.Queue) -> None:
    claimed, errors = [], []
    with Ledger(target, busy_timeout=30) as ledger:
        while True:
            try:
                claim = ledger.queue.claim(name)
            except LedgerBusy as exc:  # would surface to a user as 'database is locked'
                errors.append(str(exc))
                continue
            if claim is None:
                break
            claimed.extend(i.row for i in claim.items)
    results.put((claimed, errors))


@pytest.mark.cross_process
def test_four_processes_claiming_at_once_never_double_claim(ledger: Ledger, ledger_url: str) -> None:
    ledger.intake.accept_batch(request(sources=200), Limits())
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(ledger_url, f"w{n}", results)) for n in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    rows = [row for claimed, _ in outcomes for row in claimed]
    assert sorted(rows) == list(range(1, 401))
    assert [errors for _, errors in outcomes] == [[], [], [], []]
    assert raw_rows(ledger, "SELECT count(*) FROM events WHERE to_state = 'running'")[0][0] == 400


def test_a_running_item_past_the_deadline_is_not_published(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(request(sources=1, ratios=("1:1",), deadline_seconds=60), Limits())
    claim = ledger.queue.claim("w1")
    clock.now += 61
    published: list[int] = []
    assert ledger.queue.publish(claim, claim.items[0], lambda: published.append(1)) == "late"
    assert published == []
    failure = ledger.views.batch(batch.batch_id).failures[0]
    assert failure.error_code == "deadline_exceeded"


def test_cancel_wait_settles_the_items_of_dead_workers(ledger: Ledger) -> None:
    from thumbctl.core.proc import host_id
    from thumbctl.engine.runner import wait_until_terminal

    batch = ledger.intake.accept_batch(request(sources=2), Limits())
    ledger.queue.claim(f"{host_id()}:999999999:1", lease_seconds=3600)  # a worker killed by a second Ctrl-C
    assert ledger.intake.request_cancel(batch.batch_id).state == "cancel_requested"
    view = wait_until_terminal(ledger, batch.batch_id, should_stop=lambda: False)
    assert view.state == "cancelled" and view.counts["running"] == 0


# -- retry ------------------------------------------------------------------------------------


def test_retry_requeues_failed_items_with_a_fresh_budget_and_leaves_admission_failures(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(
        replace(request(sources=1), items=(*request(sources=1).items, *new_batch("x", "x", queued=0, failed=1).items)),
        Limits(),
    )
    claim = ledger.queue.claim("w1")
    ledger.queue.fail(claim, [i.row for i in claim.items], "corrupt_image", "bad data", no_delay)
    assert ledger.views.batch(batch.batch_id).counts["failed"] == 3
    assert ledger.queue.retry_failed(batch.batch_id) == 2
    queued = ledger.views.items(batch.batch_id, state="queued")
    assert sorted((i.ratio, i.attempt, i.error_code) for i in queued) == [("1:1", 0, None), ("4:3", 0, None)]
    assert [i.item_id for i in ledger.views.items(batch.batch_id, state="failed")] == ["bad0.jpg"]
    moved = [e for e in ledger.views.events(batch.batch_id) if e.detail == "retry requested"]
    assert [(e.from_state, e.to_state) for e in moved] == [("failed", "queued")] * 2
    again = ledger.queue.claim("w2")
    assert again is not None and [i.attempt for i in again.items] == [1, 1]
    assert ledger.queue.retry_failed(batch.batch_id) == 0


def test_retry_of_a_cancelled_or_late_batch_is_refused(ledger: Ledger, clock: Clock) -> None:
    cancelled = ledger.intake.accept_batch(request("c", sources=1), Limits())
    ledger.intake.request_cancel(cancelled.batch_id)
    with pytest.raises(UsageError, match="cancelled"):
        ledger.queue.retry_failed(cancelled.batch_id)
    late = ledger.intake.accept_batch(request("l", sources=1, deadline_seconds=10), Limits())
    clock.now += 11
    with pytest.raises(UsageError, match="deadline"):
        ledger.queue.retry_failed(late.batch_id)


def test_release_returns_a_claim_without_counting_the_attempt(ledger: Ledger) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    assert ledger.queue.release(claim, "stopping") == 2
    assert ledger.queue.release(claim, "stopping") == 0
    assert [(i.state, i.attempt) for i in ledger.views.items(batch.batch_id)] == [("queued", 0)] * 2
    again = ledger.queue.claim("w2")
    assert again is not None and [i.attempt for i in again.items] == [1, 1]


# -- gc expiry ----------------------------------------------------------------------------------


def test_only_a_terminal_batch_expires_and_its_key_is_then_free(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(reused("k", sources=1), Limits())
    live = ledger.intake.accept_batch(request("live", sources=1), Limits())
    clock.now += 60
    cutoff = iso(clock.now - 30)
    assert ledger.upkeep.expirable_batches(cutoff) == [batch.batch_id]
    assert ledger.upkeep.expire_batch(live.batch_id, cutoff) is False
    assert ledger.upkeep.referenced_object_paths() == {"/out/o01:1", "/out/o04:3"}
    assert ledger.upkeep.referenced_object_paths(also_expiring=[batch.batch_id, live.batch_id]) == set()
    assert ledger.upkeep.expire_batch(batch.batch_id, cutoff) is True
    assert ledger.upkeep.expire_batch(batch.batch_id, cutoff) is False
    assert ledger.views.batch(batch.batch_id).expired_at is not None
    assert [e.to_state for e in ledger.views.events(batch.batch_id)][-1] == "expired"
    manifest = ledger.views.batch(batch.batch_id).manifest_path
    assert ledger.upkeep.expired_manifests() == [("/out", batch.batch_id, manifest)]
    with pytest.raises(UsageError, match="expired"):
        ledger.queue.retry_failed(batch.batch_id)
    assert ledger.intake.accept_batch(reused("k", sources=1), Limits()).batch_id != batch.batch_id


# -- writers side by side: two connections on one ledger -----------------------------------------


def claim_all(ledger: Ledger, owner: str) -> list:
    claims = []
    while (claim := ledger.queue.claim(owner, lease_seconds=300)) is not None:
        claims.append(claim)
    return claims


def test_two_connections_claiming_side_by_side_never_share_an_item(ledger: Ledger, second: Ledger) -> None:
    """Every item is claimed once, under one lease, and each claim takes a whole source."""
    batch = ledger.intake.accept_batch(request(sources=150), Limits())
    first, other = in_threads(lambda: claim_all(ledger, "w1"), lambda: claim_all(second, "w2"))
    claims = first + other
    rows = [i.row for c in claims for i in c.items]
    assert len(rows) == len(set(rows)) == 300
    assert sorted(rows) == sorted(r for (r,) in raw_rows(ledger, "SELECT id FROM items"))
    assert len({c.source for c in claims}) == len(claims) == 150
    assert all([i.ratio for i in c.items] == ["1:1", "4:3"] for c in claims)
    assert ledger.views.batch(batch.batch_id).counts["running"] == 300
    tokens = {r: t for r, t in raw_rows(ledger, "SELECT id, lease_token FROM items")}
    assert all(tokens[i.row] == c.token for c in claims for i in c.items)
    events = [e for e in ledger.views.events(batch.batch_id) if e.to_state == "running"]
    assert len(events) == 300 and {e.attempt for e in events} == {1}


def test_a_publish_in_flight_commits_before_a_cancel_from_another_connection(
    ledger: Ledger, second: Ledger, ledger_url: str
) -> None:
    """The race rule with the publish mid-transaction: the cancel waits for it, so the success is
    committed before the cancel request, and every later publish sees the flag."""
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    inside, go = threading.Event(), threading.Event()
    outcomes: list[str] = []

    def effect() -> None:
        inside.set()
        assert go.wait(60)

    publisher = threading.Thread(target=lambda: outcomes.append(ledger.queue.publish(claim, claim.items[0], effect)))
    publisher.start()
    assert inside.wait(60)
    canceller = threading.Thread(target=lambda: outcomes.append(second.intake.request_cancel(batch.batch_id).state))
    canceller.start()
    try:
        wait_until_blocked(ledger_url, canceller)
    finally:
        go.set()
        publisher.join(60)
        canceller.join(60)
    assert outcomes == ["succeeded", "cancel_requested"]
    events = {e.to_state: e.seq for e in ledger.views.events(batch.batch_id) if e.to_state != "queued"}
    assert events["succeeded"] < events["cancel_requested"]
    published: list[int] = []
    assert ledger.queue.publish(claim, claim.items[1], lambda: published.append(1)) == "cancelled"
    assert published == []


def test_a_name_being_published_is_held_until_the_publish_commits(
    ledger: Ledger, second: Ledger, ledger_url: str
) -> None:
    """``publishing_name``: another connection publishing at the same name (another host's worker,
    or a submit relinking its names) waits for the publish transaction holding it to commit, and
    then finds that publish recorded; a different name is not held."""
    ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    item = claim.items[0]
    inside, go = threading.Event(), threading.Event()
    seen: list[list[str]] = []

    def effect() -> None:
        with ledger.queue.publishing_name(item.friendly_path):
            inside.set()
            assert go.wait(60)

    def publish_same_name() -> None:
        with second.queue.publishing_name(item.friendly_path):
            seen.append(second.views.publishes_at(item.friendly_path))

    publisher = threading.Thread(target=lambda: ledger.queue.publish(claim, item, effect))
    publisher.start()
    assert inside.wait(60)
    if ledger.backend == "postgresql":  # SQLite holds the whole ledger's write lock instead
        with second.queue.publishing_name(claim.items[1].friendly_path):
            seen.append(["another name is free"])
    rival = threading.Thread(target=publish_same_name)
    rival.start()
    try:
        wait_until_blocked(ledger_url, rival)
    finally:
        go.set()
        publisher.join(60)
        rival.join(60)
    assert seen[-1] == [(item.object_path, None)] and len(seen) == (2 if ledger.backend == "postgresql" else 1)


def test_a_publish_that_starts_after_a_cancel_committed_is_cancelled(ledger: Ledger, second: Ledger) -> None:
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1")
    second.intake.request_cancel(batch.batch_id)
    published: list[int] = []
    assert [ledger.queue.publish(claim, item, lambda: published.append(1)) for item in claim.items] == ["cancelled"] * 2
    assert published == [] and ledger.views.batch(batch.batch_id).state == "cancelled"


# -- a cancel always finishes ---------------------------------------------------------------------


def later(attempt: int) -> float:
    """A backoff that keeps a requeued item from being claimed again in the test's time."""
    return 600.0


def waiting_or_done(ledger_url: str, thread: threading.Thread) -> bool:
    """Whether ``thread`` has ended, or waits for a lock another connection holds (see :func:`wait_until_blocked`)."""
    if not thread.is_alive():
        return True
    if not ledger_url.startswith("postgresql://"):
        return in_timed_sleep(os.getpid(), thread.native_id)
    import psycopg

    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    with psycopg.connect(ledger_url, autocommit=True) as conn:
        return bool(conn.execute(sql).fetchone()[0])


@pytest.mark.parametrize("rescuer", ["claim", "work", "reconcile"])
def test_a_cancel_recorded_while_a_rescue_is_in_flight_ends_the_rescued_items_cancelled(
    ledger: Ledger,
    second: Ledger,
    ledger_url: str,
    clock: Clock,
    rescuer: str,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch a red-team run left ``cancel_requested`` for good: a rescue read the cancel flag, the
    cancel committed, then the rescue put the items back to ``queued``, where no claim takes them. The
    rescue (a claim's, ``work``'s supervisor's, reconcile's) pauses after reading the flag
    (``after_rescue``) while another connection records the cancel: the items end ``cancelled``."""
    monkeypatch.setenv("THUMBCTL_FAULT", "pause:after_rescue")
    monkeypatch.setenv("THUMBCTL_FAULT_DIR", str(tmp_path))
    batch = ledger.intake.accept_batch(request(sources=1), Limits())
    claim = ledger.queue.claim("w1", lease_seconds=30)
    clock.now += 31
    with open_ledger(ledger_url, clock=clock) as rescuing:
        rescues: dict[str, Callable[[], object]] = {
            "claim": lambda: rescuing.queue.claim("w2", delay_for=later),
            "work": lambda: rescuing.queue.rescue_leases(lambda owner: False, later),
            "reconcile": lambda: [
                rescuing.upkeep.rescue_stalled(i.row, claim.token, lambda owner: False, later) for i in claim.items
            ],
        }
        rescue = threading.Thread(target=rescues[rescuer])
        rescue.start()
        canceller = threading.Thread(target=lambda: second.intake.request_cancel(batch.batch_id))
        try:
            until(lambda: list(tmp_path.glob("paused-after_rescue-*")), "the rescue to pause after reading the flag")
            canceller.start()
            until(lambda: waiting_or_done(ledger_url, canceller), "the cancel to commit or wait for the rescue")
        finally:
            (tmp_path / "release").touch()
            rescue.join(60)
            if canceller.ident is not None:
                canceller.join(60)
    view = ledger.views.batch(batch.batch_id)
    assert (view.state, view.counts["cancelled"]) == ("cancelled", 2), view.counts
    assert ledger.queue.claim("w3", delay_for=later) is None


@pytest.mark.parametrize("rescuer", ["claim", "work", "reconcile"])
def test_a_lease_expiring_after_the_cancel_ends_its_items_cancelled(ledger: Ledger, clock: Clock, rescuer: str) -> None:
    batch = ledger.intake.accept_batch(request(sources=2), Limits())
    claim = ledger.queue.claim("w1", lease_seconds=30)
    assert ledger.intake.request_cancel(batch.batch_id).state == "cancel_requested"
    clock.now += 31
    if rescuer == "claim":
        assert ledger.queue.claim("w2", delay_for=no_delay) is None
    elif rescuer == "work":
        assert ledger.queue.rescue_leases(lambda owner: False, no_delay) == 2
    else:
        for item in claim.items:
            assert ledger.upkeep.rescue_stalled(item.row, claim.token, lambda owner: False, no_delay) == "cancelled"
    view = ledger.views.batch(batch.batch_id)
    assert (view.state, view.counts["cancelled"]) == ("cancelled", 4)


@pytest.mark.parametrize("finisher", ["claim", "work"])
def test_queued_items_left_under_a_cancel_are_cancelled_without_reconcile(ledger: Ledger, finisher: str) -> None:
    """A ledger an older thumbctl left with items put back to ``queued`` after the cancel committed
    (nothing running): the next claim of any ``work``, or its supervisor's rescue (and ``cancel
    --wait``'s), ends them ``cancelled``, and the batch with them."""
    batch = ledger.intake.accept_batch(request(sources=2), Limits())
    other = ledger.intake.accept_batch(request("other", sources=1), Limits())
    claim = ledger.queue.claim("w1", batch_id=batch.batch_id)
    ledger.intake.request_cancel(batch.batch_id)
    raw_write(
        ledger,
        "UPDATE items SET state = 'queued', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, "
        "stage_started_at = NULL WHERE lease_token = ?",
        (claim.token,),
    )
    assert ledger.views.batch(batch.batch_id).state == "cancel_requested"
    if finisher == "claim":
        taken = ledger.queue.claim("w2")
        assert taken is not None and taken.batch_id == other.batch_id
    else:
        ledger.queue.rescue_leases(lambda owner: False, no_delay)
    view = ledger.views.batch(batch.batch_id)
    assert (view.state, view.counts["cancelled"]) == ("cancelled", 4)


def test_the_time_limit_under_a_cancel_cancels_the_claims_waiting_items(ledger: Ledger, clock: Clock) -> None:
    batch = ledger.intake.accept_batch(one_photo(2), Limits())
    claim = ledger.queue.claim("w1")
    ledger.queue.start_stage(claim, [claim.items[0].row])
    ledger.intake.request_cancel(batch.batch_id)
    clock.now += 11
    assert ledger.queue.stop_overdue("w1", 10, "timeout", "slow") == 1
    view = ledger.views.batch(batch.batch_id)
    assert view.state == "cancelled" and (view.counts["failed"], view.counts["cancelled"]) == (1, 3)


@pytest.mark.reads_beside_writes
def test_a_follower_never_misses_an_event_committed_behind_a_later_one(
    ledger: Ledger, second: Ledger, ledger_url: str, clock: Clock
) -> None:
    """One connection has written its events but not committed; another's transaction must not
    commit events numbered after them meanwhile, or a reader between the two commits would skip
    the first one's events for good."""
    cancelled = ledger.intake.accept_batch(request("a", sources=1), Limits())
    claimed = ledger.intake.accept_batch(request("b", sources=1), Limits())
    rows = [r for (r,) in raw_rows(ledger, "SELECT id FROM items WHERE batch_id = ?", (cancelled.batch_id,))]
    with open_ledger(ledger_url, clock=clock) as watcher:
        followers = [watcher.views.follow(None), watcher.views.follow(cancelled.batch_id)]
        assert [f.read()[1].runnable for f in followers] == [4, 2]
        holding, go = threading.Event(), threading.Event()

        def numbered_then_held() -> None:
            with failed_with_events_uncommitted(ledger, rows):
                holding.set()
                assert go.wait(60)

        first = threading.Thread(target=numbered_then_held)
        first.start()
        assert holding.wait(60)
        claims: list = []
        later = threading.Thread(target=lambda: claims.append(second.queue.claim("w2", batch_id=claimed.batch_id)))
        later.start()
        try:
            wait_until_blocked(ledger_url, later)
            assert [f.read()[1].runnable for f in followers] == [4, 2]  # a read between the two
        finally:
            go.set()
            first.join(60)
            later.join(60)
        assert claims[0] is not None
        activity = followers[0].read()[1]
        assert (activity.runnable, activity.running) == (0, 2)
        view = followers[1].read()[0]
        assert view is not None and view.counts["failed"] == 2 and view.counts["queued"] == 0
        assert followers[0].read()[1] == watcher.views.follow(None).read()[1]


def dead_owner() -> str:
    """The owner id of a real task of this host that has exited: a thread of this process, whose id
    (its own entry in /proc, start time and all) is, to the liveness check, a pid no process has any more."""
    owners: list[str] = []
    thread = threading.Thread(target=lambda: owners.append(owner_id(threading.get_native_id())))
    thread.start()
    thread.join()
    gone = f"/proc/self/task/{owners[0].rsplit(':', 2)[1]}"
    until(lambda: not os.path.exists(gone), "the thread's task to be gone")  # join returns just before
    assert owners[0].rsplit(":", 1)[1] != "?"  # its start time was read while it ran
    return owners[0]


def test_a_dead_owner_of_this_host_is_rescued_at_once_another_hosts_only_at_expiry(
    ledger: Ledger, second: Ledger, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOST_ID_ENV, "shop-1~aaaaaaaaaaaa")
    batch = ledger.intake.accept_batch(request(sources=3), Limits())
    gone = dead_owner()
    twin = gone.replace("shop-1~aaaaaaaaaaaa", "shop-1~bbbbbbbbbbbb")  # same name and pid, another machine
    elsewhere = gone.replace("shop-1~aaaaaaaaaaaa", "shop-2~cccccccccccc")
    pairs = ((gone, ledger), (twin, second), (elsewhere, ledger))
    held = {owner: led.queue.claim(owner, lease_seconds=60) for owner, led in pairs}
    assert all(held.values())
    me = owner_id()
    fresh = second.queue.claim(me, lease_seconds=600, is_dead=owner_is_dead, delay_for=no_delay)
    assert fresh is not None and fresh.source == held[gone].source and [i.attempt for i in fresh.items] == [2, 2]
    assert ledger.queue.claim(me, is_dead=owner_is_dead, delay_for=no_delay) is None  # the other hosts' leases live
    clock.now += 59
    assert ledger.queue.claim(me, is_dead=owner_is_dead, delay_for=no_delay) is None
    clock.now += 2
    late = [ledger.queue.claim(me, lease_seconds=600, is_dead=owner_is_dead, delay_for=no_delay) for _ in range(3)]
    assert sorted(c.source for c in late if c) == sorted(held[o].source for o in (twin, elsewhere))
    rescued = [e for e in ledger.views.events(batch.batch_id) if e.error_code == "worker_crashed"]
    assert sorted((e.worker, e.detail) for e in rescued) == sorted(
        [(gone, "its worker process is gone")] * 2
        + [(twin, "its lease expired")] * 2
        + [(elsewhere, "its lease expired")] * 2
    )


# -- followers --------------------------------------------------------------------------------


def test_a_follower_sees_batches_submitted_and_cancelled_after_it_started(ledger: Ledger, clock: Clock) -> None:
    everything = ledger.views.follow(None)
    assert everything.read()[1].runnable == 0
    first = ledger.intake.accept_batch(request("a", sources=2), Limits()).batch_id
    second = ledger.intake.accept_batch(request("b", sources=3), Limits()).batch_id
    assert (everything.read()[1].runnable, everything.read()[1].queue_age_seconds) == (10, 0.0)
    clock.now += 7
    ledger.intake.request_cancel(first)
    activity = everything.read()[1]
    assert (activity.runnable, activity.queue_age_seconds) == (6, 7.0)
    view = ledger.views.follow(second).read()[0]
    assert view is not None and view.counts["queued"] == 6 and view.state == "queued"


def test_items_released_under_a_cancel_end_cancelled_not_queued(ledger: Ledger) -> None:
    """A worker that gives its claim back after the cancel (it lost the ledger for a while): its items
    end ``cancelled`` and the batch with them; put back to the queue, no claim would ever take them."""
    batch_id = ledger.intake.accept_batch(request("a", sources=2), Limits()).batch_id
    followers = [ledger.views.follow(batch_id), ledger.views.follow(None)]
    claim = ledger.queue.claim("w1")
    assert [f.read()[1].runnable for f in followers] == [2, 2]
    ledger.intake.request_cancel(batch_id)
    assert ledger.queue.release(claim, "stopping") == 2
    view = followers[0].read()[0]
    assert view is not None and view.counts["cancelled"] == 4 and view.state == "cancelled"
    for follower in followers:
        activity = follower.read()[1]
        assert (activity.runnable, activity.delayed, activity.running) == (0, 0, 0)
        assert activity.queue_age_seconds is None


def test_a_relinked_event_is_not_a_change_of_state(ledger: Ledger) -> None:
    batch_id = ledger.intake.accept_batch(request("a", sources=1), Limits()).batch_id
    follower = ledger.views.follow(batch_id)
    claim = ledger.queue.claim("w1")
    for item in claim.items:
        ledger.queue.publish(claim, item, lambda: None)
    follower.read()
    item = claim.items[0]
    paths = (item.object_path, item.friendly_path)
    assert ledger.upkeep.relink_published(item.row, *paths, "friendly_link_wrong", "relinked", lambda: None)
    view = follower.read()[0]
    assert view is not None and view.counts["succeeded"] == 2 and view.state == "succeeded"


# -- random runs ----------------------------------------------------------------------------------


class FreshLedgers:
    """A new, empty ledger for each example of a state machine: another file, or the test's
    database emptied."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opened = 0

    def open(self, clock: Clock) -> Ledger:
        self.opened += 1
        if not self.url.startswith("postgresql://"):
            return open_ledger(f"{self.url}.{self.opened}", clock=clock)
        ledger = open_ledger(self.url, clock=clock)
        raw_write(ledger, "TRUNCATE events, items, batches, stat_cache, object_checks RESTART IDENTITY")
        return ledger

    def examples(self, sqlite: int) -> int:
        """Fewer examples on a server, where each step is a round trip."""
        return sqlite if not self.url.startswith("postgresql://") else max(10, sqlite // 3)


class LedgerMachine(RuleBasedStateMachine):
    """Random sequences of submits, replays, conflicts and cancels keep invariants 1 and 4."""

    ledgers: FreshLedgers

    @initialize()
    def open_ledger(self) -> None:
        self.ledger = self.ledgers.open(Clock())
        self.key_to: dict[str, tuple[str, str]] = {}  # key -> (batch_id, digest)

    def teardown(self) -> None:
        if hasattr(self, "ledger"):
            self.ledger.close()

    @rule(
        key=st.sampled_from(["k1", "k2", "k3"]),
        digest=st.sampled_from(["dA", "dB"]),
        queued=st.integers(0, 3),
        failed=st.integers(0, 2),
    )
    def submit(self, key: str, digest: str, queued: int, failed: int) -> None:
        if queued + failed == 0:
            queued = 1
        new = new_batch(key, digest, queued=queued, failed=failed)
        known = self.key_to.get(key)
        if known and known[1] != digest:
            before = self._snapshot()
            with pytest.raises(IdempotencyConflict):
                self.ledger.intake.accept_batch(new, Limits())
            assert self._snapshot() == before
            return
        view = self.ledger.intake.accept_batch(new, Limits())
        if known:
            assert view.replayed and view.batch_id == known[0]
        else:
            assert not view.replayed
            self.key_to[key] = (view.batch_id, digest)

    @rule(key=st.sampled_from(["k1", "k2", "k3"]))
    def cancel(self, key: str) -> None:
        if key in self.key_to:
            view = self.ledger.intake.request_cancel(self.key_to[key][0])
            assert view.counts["queued"] == 0 and view.is_terminal

    def _snapshot(self) -> list:
        return [raw_rows(self.ledger, f"SELECT count(*) FROM {t}") for t in ("batches", "items", "events")]

    @invariant()
    def totals_match_item_rows(self) -> None:
        if hasattr(self, "ledger"):
            check_invariants(self.ledger)
            assert len(self.ledger.views.batches(limit=100)) == len(self.key_to)


class WorkQueueMachine(RuleBasedStateMachine):
    """Random interleavings of claims, publishes, failures, heartbeats, time, rescues and cancels.

    After every step: invariant 1 (total = sum of counts), invariant 3 (no success after the
    cancel in commit order), and no item is held by two claims or published twice.
    """

    ledgers: FreshLedgers

    @initialize()
    def open_ledger(self) -> None:
        self.clock = Clock()
        self.led = self.ledgers.open(self.clock)
        self.batches: list[str] = []
        self.claims: list = []
        self.published: list[int] = []

    def teardown(self) -> None:
        if hasattr(self, "led"):
            self.led.close()

    @rule(sources=st.integers(1, 3))
    def submit(self, sources: int) -> None:
        key = f"k{len(self.batches)}"
        self.batches.append(self.led.intake.accept_batch(request(key, sources=sources), Limits()).batch_id)

    @rule(worker=st.sampled_from(["w1", "w2", "w3"]))
    def claim(self, worker: str) -> None:
        claim = self.led.queue.claim(worker, lease_seconds=30, delay_for=lambda attempt: 5.0)
        if claim is not None:
            self.claims.append(claim)

    @rule(data=st.data())
    def publish(self, data) -> None:
        if self.claims:
            claim = data.draw(st.sampled_from(self.claims))
            item = data.draw(st.sampled_from(claim.items))
            self.led.queue.publish(claim, item, lambda: self.published.append(item.row))

    @rule(data=st.data(), code=st.sampled_from(["io_error", "corrupt_image", "worker_crashed"]))
    def fail(self, data, code: str) -> None:
        if self.claims:
            claim = data.draw(st.sampled_from(self.claims))
            self.led.queue.fail(claim, [i.row for i in claim.items], code, "test", lambda attempt: 5.0)

    @rule(data=st.data())
    def heartbeat(self, data) -> None:
        if self.claims:
            self.led.queue.heartbeat(data.draw(st.sampled_from(self.claims)).token, 30)

    @rule(seconds=st.sampled_from([1.0, 10.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def rescue(self) -> None:
        self.led.queue.rescue_leases(lambda owner: False, lambda attempt: 5.0)

    @rule(data=st.data())
    def cancel(self, data) -> None:
        if self.batches:
            self.led.intake.request_cancel(data.draw(st.sampled_from(self.batches)))

    @rule(data=st.data())
    def retry(self, data) -> None:
        if self.batches:
            with contextlib.suppress(ThumbctlError):  # cancelled, or past its deadline
                self.led.queue.retry_failed(data.draw(st.sampled_from(self.batches)))

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "led"):
            return
        check_invariants(self.led, outputs=False)
        assert len(self.published) == len(set(self.published)), "an item was published twice"
        sql = "SELECT count(*) FROM items WHERE (state = 'running') != (lease_token IS NOT NULL)"
        assert raw_rows(self.led, sql)[0][0] == 0, "a running item without a lease, or a lease on an idle item"


@pytest.mark.parametrize("machine", [LedgerMachine, WorkQueueMachine], ids=["submit-cancel", "work-queue"])
def test_random_runs_keep_the_invariants(ledger_url: str, machine: type[RuleBasedStateMachine]) -> None:
    ledgers = FreshLedgers(ledger_url)
    examples = ledgers.examples(40 if machine is LedgerMachine else 60)
    run_state_machine_as_test(
        type(machine.__name__, (machine,), {"ledgers": ledgers}),
        settings=settings(
            max_examples=examples,
            stateful_step_count=15 if machine is LedgerMachine else 30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
