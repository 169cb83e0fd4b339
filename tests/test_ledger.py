from __future__ import annotations

import multiprocessing
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from thumbctl import IdempotencyConflict, Ledger, Limits
from thumbctl.errors import BatchNotFound, ItemNotFound, LedgerError
from thumbctl.ledger.schema import SCHEMA_VERSION
from thumbctl.ledger.timefmt import iso
from thumbctl.models import ITEM_STATES, NewBatch, NewItem, batch_state

from support import Clock, check_invariants, request


def new_batch(key: str, digest: str, *, queued: int = 3, failed: int = 0) -> NewBatch:
    items = [NewItem(f"img{i}.jpg", "1:1", f"/src/img{i}.jpg", "queued", source_digest="d" * 64) for i in range(queued)]
    items += [
        NewItem(f"bad{i}.jpg", "1:1", f"/src/bad{i}.jpg", "failed", error_code="unsupported_format")
        for i in range(failed)
    ]
    return NewBatch(
        idempotency_key=key,
        request_digest=digest,
        source_root="/src",
        out_dir="/out",
        profile={"size": 512},
        items=tuple(items),
    )


# -- schema ---------------------------------------------------------------------


def test_a_new_ledger_is_migrated_and_in_wal_mode(tmp_path: Path) -> None:
    Ledger(tmp_path / "l.db").close()
    with sqlite3.connect(tmp_path / "l.db") as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"batches", "items", "events", "stat_cache"} <= tables
    assert {"items_runnable", "idx_items_batch_id_state"} <= indexes


def test_reopening_keeps_the_data(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as led:
        batch_id = led.accept_batch(new_batch("k", "d1"), Limits()).batch_id
    with Ledger(tmp_path / "l.db") as led:
        assert led.batch(batch_id).total == 3


def test_a_ledger_from_a_newer_thumbctl_is_refused(tmp_path: Path) -> None:
    Ledger(tmp_path / "l.db").close()
    with sqlite3.connect(tmp_path / "l.db") as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerError, match="upgrade thumbctl"):
        Ledger(tmp_path / "l.db")


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "l.db").write_text("this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="cannot use"):
        Ledger(tmp_path / "l.db")


def test_events_are_append_only(ledger: Ledger) -> None:
    ledger.accept_batch(new_batch("k", "d1"), Limits())
    with sqlite3.connect(ledger.path) as raw, pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE events SET to_state = 'succeeded'")


# -- acceptance -------------------------------------------------------------------


def test_acceptance_logs_one_creation_event_per_item(ledger: Ledger) -> None:
    batch = ledger.accept_batch(new_batch("k", "d1", queued=2, failed=1), Limits())
    events = ledger.events(batch.batch_id)
    assert [(e.item_id, e.from_state, e.to_state, e.error_code) for e in events] == [
        ("img0.jpg", None, "queued", None),
        ("img1.jpg", None, "queued", None),
        ("bad0.jpg", None, "failed", "unsupported_format"),
    ]
    assert [e.seq for e in events] == sorted(e.seq for e in events)


def test_batch_ids_resolve_from_unique_prefixes(ledger: Ledger) -> None:
    batch_id = ledger.accept_batch(new_batch("k", "d1"), Limits()).batch_id
    assert ledger.resolve_batch_id(batch_id[:8]) == batch_id
    with pytest.raises(BatchNotFound):
        ledger.resolve_batch_id("b_")  # too short to be taken as a prefix
    with pytest.raises(BatchNotFound):
        ledger.batch("b_nope")


def test_source_sizes_are_read_for_items_whose_header_was_read(ledger: Ledger) -> None:
    sized = [
        NewItem(f"img{i}.jpg", "1:1", f"/src/img{i}.jpg", "queued", source_width=30 + i, source_height=20)
        for i in range(2)
    ]
    unread = NewItem("bad.jpg", "1:1", "/src/bad.jpg", "failed", error_code="unsupported_format")
    batch = replace(new_batch("k", "d1", queued=0), items=(*sized, unread))
    batch_id = ledger.accept_batch(batch, Limits()).batch_id
    assert ledger.source_sizes(batch_id[:8]) == {"img0.jpg": (30, 20), "img1.jpg": (31, 20)}


def _accept_in_process(path: str, batch: NewBatch, results: multiprocessing.Queue) -> None:
    try:
        with Ledger(Path(path)) as led:
            view = led.accept_batch(batch, Limits())
            results.put(("ok", view.batch_id, view.replayed))
    except IdempotencyConflict as exc:
        results.put(("conflict", exc.batch_id, None))
    except Exception as exc:  # reported to the test, which fails on it
        results.put(("error", repr(exc), None))


@pytest.mark.parametrize("same_request", [True, False], ids=["same-request", "same-key-other-requests"])
def test_concurrent_submits_with_one_key_create_one_batch(tmp_path: Path, same_request: bool) -> None:
    path = str(tmp_path / "l.db")
    Ledger(Path(path)).close()
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = ctx.Queue()
    procs = [
        ctx.Process(target=_accept_in_process, args=(path, new_batch("K", "d" if same_request else f"d{i}"), results))
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
    with Ledger(Path(path)) as led:
        assert len(led.batches()) == 1
        check_invariants(led)


# -- streamed listings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listing", "kwargs"),
    [("events", {}), ("events", {"item_id": "img1.jpg"}), ("items", {}), ("items", {"state": "failed"})],
)
def test_a_streamed_listing_yields_what_the_list_holds(ledger: Ledger, listing: str, kwargs: dict) -> None:
    batch_id = ledger.accept_batch(new_batch("k", "d1", queued=1200, failed=3), Limits()).batch_id
    ledger.request_cancel(batch_id)
    with getattr(ledger, f"streamed_{listing}")(batch_id[:8], **kwargs) as rows:
        streamed = list(rows)
    assert streamed == getattr(ledger, listing)(batch_id, **kwargs) and streamed


def test_a_streamed_listing_is_one_snapshot_while_another_process_writes(ledger: Ledger) -> None:
    batch_id = ledger.accept_batch(new_batch("k", "d1", queued=1200), Limits()).batch_id
    with ledger.streamed_items(batch_id) as items, ledger.streamed_events(batch_id) as events:
        first = next(items)
        with Ledger(ledger.path) as other:
            other.request_cancel(batch_id)  # commits while the listing is half read
        assert {first.state} | {i.state for i in items} == {"queued"}
        assert {e.to_state for e in events} == {"queued"}
    assert {i.state for i in ledger.items(batch_id)} == {"cancelled"}


def test_a_streamed_listing_left_early_ends_its_read(ledger: Ledger) -> None:
    batch_id = ledger.accept_batch(new_batch("k", "d1", queued=1200), Limits()).batch_id
    with ledger.streamed_events(batch_id) as events:
        next(events)
    with Ledger(ledger.path) as other:
        other.request_cancel(batch_id)
        other._db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ledger.request_cancel(batch_id)  # a write on this connection: no read transaction is left open
    assert ledger.batch(batch_id).state == "cancelled"


@pytest.mark.parametrize("kwargs", [{"batch_id": "b_nope"}, {"item_id": "nope.jpg"}])
def test_a_streamed_listing_of_an_unknown_batch_or_item_fails_on_entering(ledger: Ledger, kwargs: dict) -> None:
    batch_id = ledger.accept_batch(new_batch("k", "d1"), Limits()).batch_id
    with pytest.raises((BatchNotFound, ItemNotFound)), ledger.streamed_events(**{"batch_id": batch_id, **kwargs}):
        pytest.fail("entered")
    assert len(ledger.events(batch_id)) == 3  # and the connection is usable


# -- cancellation -------------------------------------------------------------------


def test_cancel_moves_queued_items_at_once_and_logs_a_batch_event(ledger: Ledger) -> None:
    batch = ledger.accept_batch(new_batch("k", "d1", queued=2, failed=1), Limits())
    view = ledger.request_cancel(batch.batch_id)
    assert view.state == "cancelled" and view.cancel_requested_at is not None
    assert view.counts == {"queued": 0, "running": 0, "succeeded": 0, "failed": 1, "cancelled": 2}
    events = ledger.events(batch.batch_id)
    cancel_event = next(e for e in events if e.to_state == "cancel_requested")
    assert cancel_event.item_id is None and cancel_event.at == view.cancel_requested_at
    later = [e for e in events if e.seq > cancel_event.seq]
    assert [(e.from_state, e.to_state) for e in later] == [("queued", "cancelled")] * 2
    check_invariants(ledger)


def test_repeating_a_cancel_converges_and_logs_nothing_new(ledger: Ledger) -> None:
    batch = ledger.accept_batch(new_batch("k", "d1"), Limits())
    first = ledger.request_cancel(batch.batch_id)
    count = len(ledger.events(batch.batch_id))
    second = ledger.request_cancel(batch.batch_id)
    assert (second.state, second.counts, second.cancel_requested_at) == (
        first.state,
        first.counts,
        first.cancel_requested_at,
    )
    assert len(ledger.events(batch.batch_id)) == count


def test_cancelling_a_terminal_batch_changes_nothing(ledger: Ledger) -> None:
    batch = ledger.accept_batch(new_batch("k", "d1", queued=0, failed=2), Limits())
    assert batch.state == "failed"
    view = ledger.request_cancel(batch.batch_id)
    assert view.state == "failed" and view.cancel_requested_at is None
    assert len(ledger.events(batch.batch_id)) == 2


# -- batch state projection -----------------------------------------------------------


@given(st.dictionaries(st.sampled_from(ITEM_STATES), st.integers(0, 5)), st.booleans())
def test_batch_state_is_terminal_exactly_when_no_item_is_live(partial: dict[str, int], cancel: bool) -> None:
    counts = {s: partial.get(s, 0) for s in ITEM_STATES}
    total = sum(counts.values())
    if total == 0:
        return
    state = batch_state(counts, total, cancel)
    live = counts["queued"] + counts["running"]
    assert (state in {"succeeded", "partial", "failed", "cancelled"}) == (live == 0)
    if cancel:
        assert state in {"cancel_requested", "cancelled"}
    elif live == 0:
        expected = "succeeded" if counts["succeeded"] == total else "failed" if counts["failed"] == total else "partial"
        assert state == expected


# -- a state machine over submit, replay, conflict and cancel ----------------------------


class LedgerMachine(RuleBasedStateMachine):
    """Random sequences of submits, replays, conflicts and cancels keep invariants 1 and 4."""

    @initialize()
    def open_ledger(self) -> None:
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        self.ledger = Ledger(Path(self.tmp.name) / "l.db")
        self.key_to = {}  # key -> (batch_id, digest)

    def teardown(self) -> None:
        self.ledger.close()
        self.tmp.cleanup()

    @rule(
        key=st.sampled_from(["k1", "k2", "k3"]),
        digest=st.sampled_from(["dA", "dB"]),
        queued=st.integers(0, 3),
        failed=st.integers(0, 2),
    )
    def submit(self, key: str, digest: str, queued: int, failed: int) -> None:
        if queued + failed == 0:
            queued = 1
        request = new_batch(key, digest, queued=queued, failed=failed)
        known = self.key_to.get(key)
        if known and known[1] != digest:
            before = self._snapshot()
            with pytest.raises(IdempotencyConflict):
                self.ledger.accept_batch(request, Limits())
            assert self._snapshot() == before
            return
        view = self.ledger.accept_batch(request, Limits())
        if known:
            assert view.replayed and view.batch_id == known[0]
        else:
            assert not view.replayed
            self.key_to[key] = (view.batch_id, digest)

    @rule(key=st.sampled_from(["k1", "k2", "k3"]))
    def cancel(self, key: str) -> None:
        if key in self.key_to:
            view = self.ledger.request_cancel(self.key_to[key][0])
            assert view.counts["queued"] == 0 and view.is_terminal

    def _snapshot(self) -> list:
        with sqlite3.connect(self.ledger.path) as raw:
            return [raw.execute(f"SELECT count(*) FROM {t}").fetchone() for t in ("batches", "items", "events")]

    @invariant()
    def totals_match_item_rows(self) -> None:
        if hasattr(self, "ledger"):
            check_invariants(self.ledger)
            assert len(self.ledger.batches(limit=100)) == len(self.key_to)


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(
    max_examples=40, stateful_step_count=15, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# -- friendly names -------------------------------------------------------------


def reused(key: str, **kwargs) -> NewBatch:
    """A batch whose items were all reused at acceptance, with the friendly names of ``request``."""
    new = request(key, **kwargs)
    return replace(new, items=tuple(replace(i, state="succeeded", dedup=True) for i in new.items))


def test_a_batch_owns_the_friendly_names_no_later_success_claimed(tmp_path: Path) -> None:
    clock = Clock()
    with Ledger(tmp_path / "ledger.db", clock=clock) as ledger:
        old = ledger.accept_batch(reused("old", sources=2), Limits())
        clock.now += 5
        new = ledger.accept_batch(reused("new", sources=1), Limits())
        clock.now += 5
        queued = ledger.accept_batch(request("queued", sources=2), Limits())
        owned = {
            batch.batch_id: sorted(f for _, f in ledger.owned_friendly_names(batch.batch_id))
            for batch in (old, new, queued)
        }
        assert owned == {
            old.batch_id: ["/out/f11:1", "/out/f14:3"],
            new.batch_id: ["/out/f01:1", "/out/f04:3"],
            queued.batch_id: [],
        }
        assert ledger.owned_friendly_names(new.batch_id)[0] == ("/out/o01:1", "/out/f01:1")
        clock.now += 5
        assert ledger.expire_batch(new.batch_id, iso(clock.now))
        assert sorted(f for _, f in ledger.owned_friendly_names(old.batch_id)) == [
            "/out/f01:1",
            "/out/f04:3",
            "/out/f11:1",
            "/out/f14:3",
        ]
        assert ledger.owned_friendly_names(new.batch_id) == []
        check_invariants(ledger, outputs=False)
