"""The submit session (thumbctl.engine.session): the one flow behind ``submit``, ``retry``, ``watch``
rounds and ``thumbctl.render``, told through its observer in order. The flows that render nothing
run on an in-memory ledger in this process; one case renders for real."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from thumbctl import Profile, SubmitOptions
from thumbctl.config.options import RunOptions
from thumbctl.core.errors import Interrupted
from thumbctl.core.profile import Ratio
from thumbctl.engine.runner import SilentObserver
from thumbctl.engine.session import Mirror, Outcome, SilentSession, SubmitSession
from thumbctl.ledger.memory import InMemory
from thumbctl.testing import InMemoryLedger

from support import make_image

SQUARE = Profile(ratios=(Ratio(1, 1),), size=64)


class Recorder(SilentSession):
    """A session observer that keeps what it is told, by event name; ``presses``: Ctrl-C counted so far."""

    def __init__(self, presses: int = 0) -> None:
        self.events: list[tuple] = []
        self.presses = presses

    def counting_interrupts(self) -> contextlib.AbstractContextManager[Callable[[], int]]:
        self.events.append(("counting",))
        return contextlib.nullcontext(lambda: self.presses)

    def ledger_created(self, where: Path | str) -> None:
        self.events.append(("ledger_created",))

    def submitted(self, batch, report, *, final: bool) -> None:  # noqa: ANN001
        self.events.append(("submitted", batch.batch_id, batch.replayed, final))

    def requeued(self, batch_id: str, count: int, *, final: bool) -> None:
        self.events.append(("requeued", batch_id, count, final))

    def run_progress(self, batch_id: str) -> contextlib.AbstractContextManager[SilentObserver]:
        self.events.append(("run", batch_id))
        return contextlib.nullcontext(SilentObserver())

    def rendered(self, outcome: Outcome, run) -> None:  # noqa: ANN001
        self.events.append(("rendered", outcome.batch.state, outcome.mirrored is not None))

    def names(self) -> list[str]:
        return [event[0] for event in self.events]


@pytest.fixture
def memory() -> Iterator[InMemoryLedger]:
    """An in-memory ledger held open for the test: each session opens its own connection to it."""
    with InMemoryLedger() as ledger:
        yield ledger


@pytest.fixture
def two_photos(tmp_path: Path) -> Path:
    make_image(tmp_path / "photos" / "a.png", (200, 100), "PNG", seed=1)
    make_image(tmp_path / "photos" / "b.jpg", (120, 160), "JPEG", seed=2)
    return tmp_path / "photos"


def session_on(ledger: InMemoryLedger, tmp_path: Path, observer: Recorder, **choices: object) -> SubmitSession:
    options = SubmitOptions(out_dir=tmp_path / "out", store_dir=tmp_path / "store", profile=SQUARE)
    return SubmitSession(InMemory(ledger.name), options, RunOptions(workers=1), observer, **choices)  # type: ignore[arg-type]


def test_a_detached_session_records_the_batch_and_renders_nothing(
    memory: InMemoryLedger, tmp_path: Path, two_photos: Path
) -> None:
    recorder = Recorder()
    outcome = session_on(memory, tmp_path, recorder).run(two_photos, detach=True)
    assert outcome.run is None and outcome.mirrored is None and outcome.report.sources == 2
    assert outcome.batch == outcome.submitted and outcome.batch.counts["queued"] == 2
    assert recorder.events == [("counting",), ("ledger_created",), ("submitted", outcome.batch.batch_id, False, True)]
    again = Recorder()
    replay = session_on(memory, tmp_path, again).run(two_photos, detach=True)
    assert replay.batch.batch_id == outcome.batch.batch_id and replay.batch.replayed
    assert again.names() == ["counting", "submitted"]  # the ledger's first batch is said once


def test_a_press_counted_before_the_submission_records_nothing(
    memory: InMemoryLedger, tmp_path: Path, two_photos: Path
) -> None:
    """A watch counts Ctrl-C for its whole life: a press while a round read its sources ends the
    round before anything is recorded."""
    with pytest.raises(Interrupted, match="nothing was recorded"):
        session_on(memory, tmp_path, Recorder(presses=1)).run(two_photos)
    assert memory.views.batches(10) == []


def test_accept_is_the_submission_alone(memory: InMemoryLedger, tmp_path: Path, two_photos: Path) -> None:
    recorder = Recorder()
    batch = session_on(memory, tmp_path, recorder).accept(memory, two_photos)
    assert batch.total == 2 and batch.counts["queued"] == 2 and recorder.events == []


def test_retry_of_a_cancelled_batch_resumes_it_and_of_another_requeues_its_failed_items(
    memory: InMemoryLedger, tmp_path: Path, two_photos: Path
) -> None:
    first = session_on(memory, tmp_path, Recorder()).run(two_photos, detach=True).batch
    memory.intake.request_cancel(first.batch_id)
    recorder = Recorder()
    resumed = session_on(memory, tmp_path, recorder).retry(first.batch_id[:8], detach=True)
    assert resumed.requeued is None and resumed.report.from_ledger and resumed.report.sources == 2
    assert resumed.batch.resumed_from == first.batch_id and resumed.run is None
    assert recorder.events == [("counting",), ("submitted", resumed.batch.batch_id, False, True)]

    recorder = Recorder()
    requeued = session_on(memory, tmp_path, recorder).retry(resumed.batch.batch_id, detach=True)
    assert (requeued.requeued, requeued.run, requeued.batch.batch_id) == (0, None, resumed.batch.batch_id)
    assert recorder.events == [("requeued", resumed.batch.batch_id, 0, True)]


def test_a_dry_run_plans_the_mirror_and_records_nothing(
    memory: InMemoryLedger, tmp_path: Path, two_photos: Path
) -> None:
    report, plan = session_on(memory, tmp_path, Recorder(), mirror=Mirror()).plan(two_photos)
    assert report.sources == 2 and plan.dry_run and plan.removed == ()
    assert memory.views.batches(10) == []


def test_a_session_renders_then_mirrors_and_says_so_in_order(tmp_path: Path, two_photos: Path) -> None:
    """The one case that renders: worker processes, a ledger file, OUT mirrored after the run."""
    options = SubmitOptions(out_dir=tmp_path / "out", profile=SQUARE)
    recorder = Recorder()
    session = SubmitSession(
        tmp_path / "ledger.db", options, RunOptions(workers=1), recorder, mirror=Mirror(), finish_terminal=True
    )
    first = session.run(two_photos)
    assert first.batch.state == "succeeded" and first.run is not None and first.mirrored is not None
    batch_id = first.batch.batch_id
    assert recorder.events == [
        ("counting",),
        ("ledger_created",),
        ("submitted", batch_id, False, False),
        ("run", batch_id),
        ("rendered", "succeeded", True),
    ]
    (two_photos / "b.jpg").unlink()
    recorder.events.clear()
    second = session.run(two_photos)  # its one output there already: terminal at submit, run all the same
    assert second.batch.state == "succeeded" and second.mirrored is not None
    assert second.mirrored.removed == (str(tmp_path / "out" / "b.1x1.jpg"),)
    assert recorder.names() == ["counting", "submitted", "run", "rendered"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.jpg")) == ["a.1x1.jpg"]
