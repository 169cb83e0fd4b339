"""The live view and the plain CI lines, rendered from a ledger in a known state."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from thumbctl import Ledger, Limits
from thumbctl.core.models import ItemState, NewBatch, NewItem
from thumbctl.report.progress import RunProgress, live_view, plain_line

from support import Clock, request

T0 = 2_000_000.0  # 1970-01-24T03:33:20Z


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """Batch of 3 sources x 2 ratios at T0: img0 running on w1 since T0+10, img1 failed
    corrupt_image at T0+12, img2 queued since T0. The clock reads T0+20."""
    clock = Clock(T0)
    with Ledger(tmp_path / "l.db", clock=clock) as led:
        led.intake.accept_batch(request("A", sources=3), Limits())
        clock.now = T0 + 10
        led.queue.claim("w1")
        failing = led.queue.claim("w2")
        clock.now = T0 + 12
        led.queue.fail(
            failing, [i.row for i in failing.items], "corrupt_image", "jpeg data does not decode", lambda a: 0.0
        )
        clock.now = T0 + 20
        yield led


def batch_id(led: Ledger) -> str:
    return led.views.batches()[0].batch_id


def render(renderable, width: int = 100) -> str:
    console = Console(width=width, force_terminal=True, color_system=None, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_activity_is_read_from_rows_and_events(ledger: Ledger) -> None:
    activity = ledger.views.activity(batch_id(ledger))
    assert (activity.runnable, activity.delayed, activity.running) == (2, 0, 2)
    assert activity.queue_age_seconds == 20.0
    assert (activity.completed_recently, activity.window_seconds) == (2, 10.0)  # first claim 10 s ago
    assert activity.rate == 0.2 and activity.eta_seconds(4) == 20.0
    assert [(w.worker, w.item_id, w.ratios) for w in activity.workers] == [("w1", "img0.jpg", ("1:1", "4:3"))]
    assert [(f.item_id, f.ratio, f.error_code, f.retrying) for f in activity.recent_failures] == [
        ("img1.jpg", "4:3", "corrupt_image", False),
        ("img1.jpg", "1:1", "corrupt_image", False),
    ]


def test_the_live_view_shows_bar_counts_rate_eta_workers_and_failures(ledger: Ledger) -> None:
    bid = batch_id(ledger)
    text = render(live_view(ledger.views.batch(bid, with_failures=False), ledger.views.activity(bid), elapsed=20))
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[0].startswith(f"{bid} running ") and lines[0].endswith("2/6  33%")
    assert "queued 2  running 2  failed 2" in lines[1]
    assert "0.2/s  eta 20s  queue age 20s  elapsed 20s" in lines[2]
    assert lines[3].split() == ["worker", "source", "ratios", "for"]
    assert lines[4].split() == ["w1", "img0.jpg", "1:1", "4:3", "10s"]
    assert lines[5].split() == ["at", "item", "ratios", "error", "detail"]
    assert lines[6].split() == [
        "03:33:32",
        "img1.jpg",
        "1:1",
        "4:3",
        "corrupt_image",
        "jpeg",
        "data",
        "does",
        "not",
        "decode",
    ]
    assert len(lines) == 7


def test_a_narrow_terminal_truncates_instead_of_wrapping(ledger: Ledger) -> None:
    bid = batch_id(ledger)
    text = render(
        live_view(ledger.views.batch(bid, with_failures=False), ledger.views.activity(bid), elapsed=20), width=60
    )
    assert all(len(line.rstrip()) <= 60 for line in text.splitlines())
    assert "…" in text  # the failure detail is cut, not wrapped onto more lines


def test_the_plain_line_for_logs(ledger: Ledger) -> None:
    bid = batch_id(ledger)
    line = plain_line(ledger.views.batch(bid, with_failures=False), ledger.views.activity(bid))
    assert line == (
        f"1970-01-24T03:33:40Z {bid} running 2/6 done (queued 2, running 2, failed 2); 0.2/s, eta 20s, queue age 20s"
    )
    assert plain_line(None, ledger.views.activity()) == (
        "1970-01-24T03:33:40Z work: runnable 2, delayed 0, running 2; 0.2/s, eta 20s, queue age 20s"
    )


@pytest.mark.parametrize("verbose", [False, True])
def test_off_a_terminal_lines_are_plain_throttled_and_failures_shown_once_with_verbose(
    ledger: Ledger, verbose: bool
) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    bid = batch_id(ledger)
    with RunProgress(console, batch_id=bid, interval=3600, verbose=verbose) as progress:
        assert not progress.live
        progress.tick(ledger)
        progress.tick(ledger)  # within the interval: no second line
        progress.finish(ledger)  # nothing changed: the final line would only repeat it
        ledger.clock.now += 5  # type: ignore[attr-defined]
        progress.finish(ledger)  # the queue aged: the final line comes
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    progress_lines = [line for line in lines if f" {bid} running 2/6 done" in line]
    failure_lines = [line for line in lines if " failed img1.jpg " in line]
    assert [line.rsplit(" ", 1)[1] for line in progress_lines] == ["20s", "25s"]  # queue age
    assert failure_lines == (
        [
            "1970-01-24T03:33:32Z failed img1.jpg 1:1 [corrupt_image] jpeg data does not decode",
            "1970-01-24T03:33:32Z failed img1.jpg 4:3 [corrupt_image] jpeg data does not decode",
        ]
        if verbose
        else []
    )


def test_disabled_progress_prints_nothing(ledger: Ledger) -> None:
    out = io.StringIO()
    with RunProgress(Console(file=out), batch_id=batch_id(ledger), enabled=False) as progress:
        progress.tick(ledger)
        progress.finish(ledger)
    assert out.getvalue() == ""


def test_at_80_columns_each_row_is_one_line_ratios_show_once_and_the_file_name_stays(tmp_path: Path) -> None:
    """A source of 2 ratios x 2 sizes x 2 formats on a worker: the worker row lists 1:1 and 4:3 once
    each, keeps the end of a long source name, and the headline's figures stay on their line."""
    clock = Clock(T0)
    name = "shop/catalogue/2024/summer-collection/IMG_20240812_143055.jpg"
    items = tuple(
        NewItem(
            name,
            ratio,
            f"/src/{name}",
            ItemState.QUEUED,
            source_digest="0" * 64,
            derivative_key=f"{ratio}{size}{fmt}",
            object_path=f"/out/o{ratio}{size}{fmt}",
            friendly_path=f"/out/f{ratio}{size}{fmt}",
            size=size,
            format=fmt,
        )
        for ratio in ("1:1", "4:3")
        for size in (256, 1024)
        for fmt in ("jpeg", "webp")
    )
    with Ledger(tmp_path / "l.db", clock=clock) as led:
        led.intake.accept_batch(NewBatch("k", "d", "/src", "/out", {}, items), Limits())
        clock.now = T0 + 10
        led.queue.claim("build-host-01.example.internal:123456:987654321")
        clock.now = T0 + 3725
        bid = batch_id(led)
        for view in (led.views.batch(bid, with_failures=False), None):
            text = render(live_view(view, led.views.activity(bid), elapsed=3725), width=80)
            lines = [line.rstrip() for line in text.splitlines()]
            assert all(len(line) <= 80 for line in lines)
            assert sum("elapsed 62m" in line for line in lines) == 1
            assert lines[-2].split() == ["worker", "source", "ratios", "for"]
            row = lines[-1].split()
            assert row[-3:] == ["1:1", "4:3", "62m"]
            assert row[1].startswith("…") and row[1].endswith("/IMG_20240812_143055.jpg")
            assert len(lines) == (5 if view is not None else 4)
