"""Followers of a batch (or of every batch): counts kept up from the transition log equal a full
recount of the rows, and a read costs what changed since the last one, not what the batch holds."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from thumbctl import Ledger, Limits
from thumbctl.core.errors import ThumbctlError
from thumbctl.core.models import ITEM_STATES, NewBatch
from thumbctl.ledger import Follower, iso, parse_iso

from support import Clock, queued_items, request, vm_steps

WINDOW = 30.0
FAILURES = 4


# -- the reference: every figure recounted from the whole of the rows and the log ------------------


def recount(raw: sqlite3.Connection, batch_id: str | None, now: float) -> dict[str, object]:
    """What a live view shows, by full scans (the projection as it was before followers)."""
    at, start = iso(now), iso(now - WINDOW)
    scope, params = (" AND i.batch_id = ?", [batch_id]) if batch_id else ("", [])
    runnable, delayed, running, oldest = raw.execute(
        "SELECT count(CASE WHEN i.state = 'queued' AND (i.not_before IS NULL OR i.not_before <= ?1) THEN 1 END), "
        "count(CASE WHEN i.state = 'queued' AND i.not_before > ?1 THEN 1 END), "
        "count(CASE WHEN i.state = 'running' THEN 1 END), "
        "min(CASE WHEN i.state = 'queued' AND (i.not_before IS NULL OR i.not_before <= ?1) THEN i.queued_at END) "
        "FROM items i JOIN batches b USING (batch_id) WHERE i.state IN ('queued', 'running') "
        f"AND (b.cancel_requested_at IS NULL OR i.state = 'running'){scope}",
        [at, *params],
    ).fetchone()
    escope = scope.replace("i.", "e.")
    done, first = raw.execute(
        "SELECT count(CASE WHEN e.to_state IN ('succeeded', 'failed', 'cancelled') AND e.from_state = 'running' "
        "THEN 1 END), min(CASE WHEN e.to_state = 'running' OR (e.to_state IN ('succeeded', 'failed', 'cancelled') "
        f"AND e.from_state = 'running') THEN e.at END) FROM events e WHERE e.at >= ?{escope}",
        [start, *params],
    ).fetchone()
    failures = raw.execute(
        "SELECT e.at, i.item_id, i.ratio, e.error_code, e.detail, e.to_state = 'queued' "
        "FROM events e JOIN items i ON i.id = e.item_row "
        f"WHERE e.error_code IS NOT NULL AND e.to_state IN ('failed', 'queued'){escope} "
        "ORDER BY e.seq DESC LIMIT ?",
        [*params, FAILURES],
    ).fetchall()
    figures: dict[str, object] = {
        "runnable": runnable,
        "delayed": delayed,
        "running": running,
        "queue_age": max(0.0, now - parse_iso(oldest)) if oldest else None,
        "completed": done,
        "window": max(WINDOW if first is None else min(WINDOW, now - parse_iso(first)), 1.0),
        "failures": [tuple(row[:5]) + (bool(row[5]),) for row in failures],
    }
    if batch_id is not None:
        counts = dict.fromkeys(ITEM_STATES, 0)
        counts.update(raw.execute("SELECT state, count(*) FROM items WHERE batch_id = ? GROUP BY state", [batch_id]))
        figures["counts"] = counts
    return figures


def followed(follower: Follower) -> dict[str, object]:
    view, activity = follower.read()
    figures: dict[str, object] = {
        "runnable": activity.runnable,
        "delayed": activity.delayed,
        "running": activity.running,
        "queue_age": activity.queue_age_seconds,
        "completed": activity.completed_recently,
        "window": activity.window_seconds,
        "failures": [(f.at, f.item_id, f.ratio, f.error_code, f.detail, f.retrying) for f in activity.recent_failures],
    }
    if view is not None:
        figures["counts"] = view.counts
    return figures


class FollowerMachine(RuleBasedStateMachine):
    """Random runs (submits, claims, publishes, retried and final failures, releases, rescues,
    cancels, ``retry``, deadlines, time passing), with followers of each batch and of every batch
    started at random moments and read at random moments: each read equals the full recount."""

    @initialize()
    def open_ledger(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = Clock()
        self.led = Ledger(Path(self.tmp.name) / "l.db", clock=self.clock)
        self.raw = sqlite3.connect(self.led.path)
        self.batches: list[str] = []
        self.claims: list = []
        self.followers: list[Follower] = [self.led.views.follow(None, window=WINDOW, failures=FAILURES)]

    def teardown(self) -> None:
        self.raw.close()
        self.led.close()
        self.tmp.cleanup()

    @rule(sources=st.integers(1, 3), deadline=st.sampled_from([None, 15.0]))
    def submit(self, sources: int, deadline: float | None) -> None:
        new = request(f"k{len(self.batches)}", sources=sources, deadline_seconds=deadline)
        self.batches.append(self.led.intake.accept_batch(new, Limits()).batch_id)
        self.followers.append(self.led.views.follow(self.batches[-1], window=WINDOW, failures=FAILURES))

    @rule(data=st.data())
    def follow(self, data) -> None:
        if self.batches:
            batch_id = data.draw(st.sampled_from([*self.batches, None]))
            self.followers.append(self.led.views.follow(batch_id, window=WINDOW, failures=FAILURES))

    @rule(worker=st.sampled_from(["w1", "w2"]))
    def claim(self, worker: str) -> None:
        claim = self.led.queue.claim(worker, lease_seconds=30, delay_for=lambda attempt: 5.0)
        if claim is not None:
            self.claims.append(claim)

    @rule(data=st.data())
    def publish(self, data) -> None:
        if self.claims:
            claim = data.draw(st.sampled_from(self.claims[-3:]))
            self.led.queue.publish(claim, data.draw(st.sampled_from(claim.items)), lambda: None)

    @rule(data=st.data(), code=st.sampled_from(["io_error", "corrupt_image"]))
    def fail(self, data, code: str) -> None:
        if self.claims:
            claim = data.draw(st.sampled_from(self.claims[-3:]))
            self.led.queue.fail(claim, [i.row for i in claim.items], code, f"failed {code}", lambda attempt: 5.0)

    @rule(data=st.data())
    def release(self, data) -> None:
        if self.claims:
            self.led.queue.release(data.draw(st.sampled_from(self.claims[-3:])), "stopping")

    @rule(seconds=st.sampled_from([1.0, 6.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def rescue(self) -> None:
        self.led.queue.rescue_leases(lambda owner: owner == "w2", lambda attempt: 5.0)

    @rule(data=st.data())
    def cancel(self, data) -> None:
        if self.batches:
            self.led.intake.request_cancel(data.draw(st.sampled_from(self.batches)))

    @rule(data=st.data())
    def retry(self, data) -> None:
        if self.batches:
            with contextlib.suppress(ThumbctlError):  # nothing to retry, or the batch was cancelled
                self.led.queue.retry_failed(data.draw(st.sampled_from(self.batches)))

    @rule()
    def relink(self) -> None:
        """``reconcile --repair`` logs a ``relinked`` event on a succeeded item: not a change of state."""
        row = self.raw.execute(
            "SELECT id, object_path, friendly_path FROM items WHERE state = 'succeeded' ORDER BY random() LIMIT 1"
        ).fetchone()
        if row is not None:
            self.led.upkeep.relink_published(*row, "friendly_link_wrong", "relinked", lambda: None)

    @rule(data=st.data())
    def check(self, data) -> None:
        """A follower read now and then: it catches up over several steps at once."""
        follower = data.draw(st.sampled_from(self.followers))
        assert followed(follower) == recount(self.raw, follower.batch_id, self.clock.now)

    @invariant()
    def followers_read_after_every_step(self) -> None:
        """The follower of every batch and the newest follower are read after every step."""
        if hasattr(self, "led"):
            for follower in {id(f): f for f in (self.followers[0], self.followers[-1])}.values():
                assert followed(follower) == recount(self.raw, follower.batch_id, self.clock.now)


TestFollowerMachine = FollowerMachine.TestCase
TestFollowerMachine.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# -- cost: SQLite VM steps per read at 10,000 and 100,000 items -------------------------------------


def big_batch(items: int) -> NewBatch:
    """``items`` items, three ratios of each source, each its own derivative key."""
    return NewBatch(f"big{items}", "digest", "/src", "/out", {"size": 64}, queued_items(items, "img"))


def some_work(led: Ledger, clock: Clock, n: int) -> None:
    """``n`` claims: most published, one retried later, one failed for good, one left running."""
    for k in range(n):
        clock.now += 0.5
        claim = led.queue.claim(f"w{k % 2}", delay_for=lambda attempt: 60.0)
        assert claim is not None
        if k % 5 == 1:
            led.queue.fail(claim, [i.row for i in claim.items], "io_error", "retry", lambda attempt: 60.0)
        elif k % 5 == 2:
            led.queue.fail(claim, [i.row for i in claim.items], "corrupt_image", "final", lambda attempt: 60.0)
        elif k < n - 1:
            for item in claim.items:
                led.queue.publish(claim, item, lambda: None)


SIZES = (10_000, 100_000)


def build_big_ledgers(folder: Path) -> dict[int, tuple[Path, str]]:
    """Per size: a ledger holding one big batch of that many queued items, and the batch's id."""
    built = {}
    for items in SIZES:
        path = folder / f"{items}.db"
        with Ledger(path, clock=Clock()) as led:
            built[items] = (path, led.intake.accept_batch(big_batch(items), Limits(max_items=items)).batch_id)
    return built


@pytest.fixture(scope="module")
def big_ledgers(built_once: Callable[[str, Callable[[Path], dict]], dict]) -> dict[int, tuple[Path, str]]:
    """The big ledgers, built once for the run; each test works on a copy."""
    return built_once("follow-big-batches", build_big_ledgers)


def steps_per_tick(tmp_path: Path, built: tuple[Path, str], scope: str) -> dict[str, int]:
    """VM steps of a steady read of a follower (20 claims settled since its last read), and of
    the other statements the supervisor and ``status --watch`` run every tick."""
    original, batch_id = built
    path = shutil.copy(original, tmp_path / original.name)
    clock = Clock()
    with Ledger(path, clock=clock) as led:
        some_work(led, clock, 20)
        follower = led.views.follow(batch_id if scope == "batch" else None, failures=30)
        follower.read()
        some_work(led, clock, 20)
        return {
            "follower read": vm_steps(led, follower.read),
            "batch settled": vm_steps(led, lambda: led.views.batch_settled(batch_id)),
            "overdue owners": vm_steps(led, lambda: led.queue.overdue_owners(300)),
        }


@pytest.mark.parametrize("scope", ["batch", "every batch"])
def test_each_tick_costs_the_same_at_10k_and_100k_items(
    tmp_path: Path, big_ledgers: dict[int, tuple[Path, str]], scope: str
) -> None:
    small, large = (steps_per_tick(tmp_path, big_ledgers[items], scope) for items in SIZES)
    for statement, steps in small.items():
        assert large[statement] <= steps * 1.1 + 20, (statement, small, large)
    assert 0 < large["follower read"] < 20_000, large  # a full count of 100,000 rows takes millions


def test_the_supervisor_benchmark_runs_its_smoke_case(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parent.parent / "bench" / "supervisor_cpu.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--smoke"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| submit ") or line.startswith("| watch ")]
    assert len(rows) == 2, done.stdout
