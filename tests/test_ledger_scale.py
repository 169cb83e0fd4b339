"""The worker-facing statements do the same work whatever the length of the queue.

Each hot operation runs once against a ledger with 10,000 queued items and once against one with
100,000, and the SQLite VM steps it takes are counted (``set_progress_handler`` every step). A plan
check cannot catch a statement that walks every queued row: that plan is itself a ``SEARCH … USING
COVERING INDEX``. Counting the steps does: such a statement takes ten times the steps at 100,000.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from thumbctl import Ledger, Limits
from thumbctl.core.models import NewBatch, NewItem
from thumbctl.ledger import Claim

from support import Clock, queued_items, raw_write, vm_steps

REPO = Path(__file__).resolve().parent.parent
SIZES = (10_000, 100_000)
#: The work at 100,000 queued items may be at most this many times the work at 10,000.
FLAT = 1.5
RATIOS = ("1:1", "4:3", "16:9")
START = 1_000_000.0


def new_batch(key: str, items: tuple[NewItem, ...], **kwargs: object) -> NewBatch:
    return NewBatch(key, f"digest-{key}", "/src", "/out", {"size": 64}, items, **kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Built:
    path: Path
    bulk: str
    later: str
    timed: str


@pytest.fixture(scope="module")
def built(built_once: Callable[[str, Callable[[Path], dict[int, Built]]], dict[int, Built]]) -> dict[int, Built]:
    """Per size: a ledger holding a bulk batch of that many queued items, then a small batch
    (``later``, 30 items) and a small batch with a 60 s deadline (``timed``, 30 items); built once
    for the run, each test works on a copy."""
    return built_once("ledger-scale", build_ledgers)


def build_ledgers(folder: Path) -> dict[int, Built]:
    ledgers = {}
    for size in SIZES:
        path = folder / f"scale{size}.db"
        with Ledger(path, clock=Clock(START)) as led:
            bulk = led.intake.accept_batch(new_batch("bulk", queued_items(size, "b")), Limits()).batch_id
            later = led.intake.accept_batch(new_batch("later", queued_items(30, "l")), Limits()).batch_id
            timed = led.intake.accept_batch(
                new_batch("timed", queued_items(30, "t"), deadline_seconds=60), Limits()
            ).batch_id
        ledgers[size] = Built(path, bulk, later, timed)
    return ledgers


def no_delay(attempt: int) -> float:
    return 0.0


def held(led: Ledger, owner: str = "w0", **kwargs: object) -> Claim:
    claim = led.queue.claim(owner, **kwargs)  # type: ignore[arg-type]
    assert claim is not None
    return claim


# Each scenario prepares the ledger (a few claims by other workers, a moved clock) and returns the
# one operation whose work is counted; the operation checks it did what the scenario means.
Scenario = Callable[[Ledger, Clock, Built], Callable[[], object]]


def claim_next(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    for n in range(3):
        held(led, f"w{n}")
    return lambda: held(led, "w")


def claim_a_due_retry(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    first = held(led)
    led.queue.fail(first, [first.items[0].row], "worker_crashed", "gone", lambda attempt: 5.0)
    clock.now += 10

    def claim() -> None:
        assert held(led, "w").items[0].row == first.items[0].row

    return claim


def claim_while_retries_wait(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    first = held(led)
    led.queue.fail(first, [i.row for i in first.items], "worker_crashed", "gone", lambda attempt: 1000.0)
    return lambda: held(led, "w")


def claim_in_a_later_batch(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led)

    def claim() -> None:
        assert held(led, "w", batch_id=b.later).batch_id == b.later

    return claim


def claim_in_a_drained_batch(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    while led.queue.claim("w0", batch_id=b.later) is not None:
        pass

    def claim() -> None:
        assert led.queue.claim("w", batch_id=b.later) is None

    return claim


def claim_after_a_deadline(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led)
    clock.now += 120

    def claim() -> None:
        held(led, "w")
        assert led.views.batch(b.timed).counts["failed"] == 30

    return claim


def heartbeat(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    claim = held(led)

    def beat() -> None:
        assert led.queue.heartbeat(claim.token, 30) == len(claim.items)

    return beat


def start_stage(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    claim = held(led)
    return lambda: led.queue.start_stage(claim, [claim.items[0].row])


def end_stage(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    claim = held(led)
    return lambda: led.queue.start_stage(claim, [])


def publish(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    claim = held(led)
    led.queue.start_stage(claim, [claim.items[0].row])

    def publish() -> None:
        assert led.queue.publish(claim, claim.items[0], lambda: None, result={"width": 64}) == "succeeded"

    return publish


def fail(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    claim = held(led)

    def fail() -> None:
        assert led.queue.fail(claim, [claim.items[0].row], "worker_crashed", "gone", no_delay) == {
            claim.items[0].row: "queued"
        }

    return fail


def release(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    claim = held(led)

    def release() -> None:
        assert led.queue.release(claim, "ledger_busy") == len(claim.items)

    return release


def cancel_check(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    claim = held(led)

    def check() -> None:
        assert led.queue.cancel_if_requested(claim) is False

    return check


def rescue(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1", lease_seconds=300)
    claim = held(led, lease_seconds=30)
    clock.now += 60

    def rescue() -> None:
        assert led.queue.rescue_leases(lambda owner: False, no_delay) == len(claim.items)

    return rescue


def overdue_owners(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    clock.now += 20
    held(led)

    def overdue() -> None:
        assert led.queue.overdue_owners(10) == ["w1"]

    return overdue


def stop_overdue(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    claim = held(led, "w1")
    led.queue.start_stage(claim, [claim.items[0].row])
    clock.now += 20
    held(led)

    def stop() -> None:
        assert led.queue.stop_overdue("w1", 10, "timeout", "slow") == 1

    return stop


def idle_check(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led)

    def check() -> None:
        assert led.queue.queue_idle() is False and led.queue.queue_idle(b.later) is False

    return check


def idle_check_of_a_finished_batch(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    while (claim := led.queue.claim("w0", batch_id=b.later)) is not None:
        led.queue.fail(claim, [i.row for i in claim.items], "not_an_image", "no", no_delay)

    def check() -> None:
        assert led.queue.queue_idle(b.later) is True

    return check


def stalled_candidates(led: Ledger, clock: Clock, b: Built) -> Callable[[], object]:
    held(led, "w1")
    held(led, batch_id=b.later)
    # the flag alone: the later batch's queued items are candidates too
    raw_write(led, "UPDATE batches SET cancel_requested_at = '2000-01-01' WHERE batch_id = ?", [b.later])

    def read() -> None:
        assert {(item.state, item.batch_id) for item in led.upkeep.stalled_candidates()} == {
            ("running", b.bulk),
            ("running", b.later),
            ("queued", b.later),
        }

    return read


SCENARIOS: list[Scenario] = [
    claim_next,
    claim_a_due_retry,
    claim_while_retries_wait,
    claim_in_a_later_batch,
    claim_in_a_drained_batch,
    claim_after_a_deadline,
    heartbeat,
    start_stage,
    end_stage,
    publish,
    fail,
    release,
    cancel_check,
    rescue,
    overdue_owners,
    stop_overdue,
    idle_check,
    idle_check_of_a_finished_batch,
    stalled_candidates,
]


def steps_at(built: Built, copy: Path, scenario: Scenario) -> int:
    shutil.copy(built.path, copy)
    clock = Clock(START)
    with Ledger(copy, clock=clock) as led:
        operation = scenario(led, clock, built)
        return vm_steps(led, operation)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_the_work_of_a_hot_statement_stays_flat_as_the_queue_grows(
    built: dict[int, Built], tmp_path: Path, scenario: Scenario
) -> None:
    steps = {size: steps_at(built[size], tmp_path / f"{size}.db", scenario) for size in SIZES}
    assert steps[SIZES[1]] <= FLAT * steps[SIZES[0]], f"VM steps by queued items: {steps}"


def test_the_idle_check_agrees_with_the_queue_counts(tmp_path: Path) -> None:
    """``queue_idle`` (what a worker asks when a claim comes back empty) says what
    ``queue_state().idle`` says, for the ledger and for each batch: running items and queued ones,
    due or waiting out a backoff, are live; queued items of a batch with a cancel request are not."""
    clock = Clock(START)
    with Ledger(tmp_path / "l.db", clock=clock) as led:
        one = led.intake.accept_batch(new_batch("one", queued_items(3, "a")), Limits()).batch_id
        two = led.intake.accept_batch(new_batch("two", queued_items(3, "b")), Limits()).batch_id

        def agree() -> list[bool]:
            scopes = (None, one, two)
            assert [led.queue.queue_idle(s) for s in scopes] == [led.queue.queue_state(s).idle for s in scopes]
            return [led.queue.queue_idle(s) for s in scopes]

        assert agree() == [False, False, False]
        claim = held(led, batch_id=one)
        assert agree() == [False, False, False]
        led.queue.fail(claim, [i.row for i in claim.items], "worker_crashed", "gone", lambda attempt: 100.0)
        assert agree() == [False, False, False]  # waiting out a backoff is live
        # the flag alone, as a cancel that has not swept the queued items yet
        raw_write(led, "UPDATE batches SET cancel_requested_at = '2000-01-01' WHERE batch_id = ?", [one])
        assert agree() == [False, True, False]
        led.intake.request_cancel(two)
        assert agree() == [True, True, True]


def test_the_queue_scale_benchmark_runs_its_smoke_case() -> None:
    """CI keeps ``bench/queue_scale.py`` working: its tiny case renders every item and prints the table."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "queue_scale.py"), "--smoke"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    cases = [tuple(cell.strip() for cell in row.split("|")[1:3]) for row in rows]
    assert cases == [("1", "300"), ("1", "3,000"), ("2", "300"), ("2", "3,000")]
    assert "Target: rate at 3,000 queued within 1.25x of the rate at 300" in done.stdout
