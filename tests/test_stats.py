"""Stats from a ledger whose every event time is known: exact figures, JSON and Prometheus text."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from thumbctl import Ledger, Limits
from thumbctl.cli import app
from thumbctl.ledger import RenderFacts, StatsFacts
from thumbctl.report.reporter import Reporter
from thumbctl.review.stats import build_report, percentile, prometheus_text

from support import Clock, request

T0 = 1_000_000.0


def result(source_bytes: int, output_bytes: int, **timings: float) -> dict[str, object]:
    return {"width": 64, "height": 64, "source_bytes": source_bytes, "output_bytes": output_bytes, "timings": timings}


def publish_all(led: Ledger, claim, results: list[dict[str, object]]) -> list[str]:
    return [
        led.queue.publish(claim, item, lambda: None, result=r) for item, r in zip(claim.items, results, strict=True)
    ]


def build_history(led: Ledger, clock: Clock) -> None:
    """Five batches with known times (seconds after T0 in brackets):

    A [0]: img0 claimed [10], published [12]; img1 claimed [15], io_error retried [16],
    claimed again [20], published [22]. B [30]: cancelled while queued [31].
    C [40]: claimed [41], cancel [42], seen at publish [45]. D [46]: one reused output.
    E [48]: one queued item. Stats are taken at [50].
    """
    led.intake.accept_batch(request("A"), Limits())
    clock.now = T0 + 10
    first = led.queue.claim("w1")
    clock.now = T0 + 12
    publish_all(
        led,
        first,
        [
            result(1000, 100, decode_ms=10, crop_ms=2, encode_ms=5, publish_ms=1),
            result(1000, 200, decode_ms=10, crop_ms=2, encode_ms=7, publish_ms=3),
        ],
    )
    clock.now = T0 + 15
    second = led.queue.claim("w2")
    clock.now = T0 + 16
    led.queue.fail(second, [i.row for i in second.items], "io_error", "disk hiccup", lambda attempt: 0.0)
    clock.now = T0 + 20
    third = led.queue.claim("w3")
    clock.now = T0 + 22
    publish_all(
        led,
        third,
        [
            result(3000, 300, decode_ms=30, crop_ms=4, encode_ms=9, publish_ms=2),
            result(3000, 400, decode_ms=30, crop_ms=4, encode_ms=11, publish_ms=4),
        ],
    )
    clock.now = T0 + 30
    b = led.intake.accept_batch(request("B", sources=1), Limits())
    clock.now = T0 + 31
    led.intake.request_cancel(b.batch_id)
    clock.now = T0 + 40
    c = led.intake.accept_batch(request("C", sources=1), Limits())
    clock.now = T0 + 41
    running = led.queue.claim("w4")
    clock.now = T0 + 42
    led.intake.request_cancel(c.batch_id)
    clock.now = T0 + 45
    assert publish_all(led, running, [result(1, 1), result(1, 1)]) == ["cancelled", "cancelled"]
    clock.now = T0 + 46
    reused = request("D", sources=1, ratios=("1:1",))
    led.intake.accept_batch(replace(reused, items=(replace(reused.items[0], state="succeeded", dedup=True),)), Limits())
    clock.now = T0 + 48
    led.intake.accept_batch(request("E", sources=1, ratios=("1:1",)), Limits())
    clock.now = T0 + 50


@pytest.fixture
def history(tmp_path: Path) -> Ledger:
    clock = Clock(T0)
    with Ledger(tmp_path / "l.db", clock=clock) as led:
        build_history(led, clock)
        yield led


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [([], 50, None), ([7.0], 95, 7.0), ([1, 2, 3, 4], 50, 2), ([4, 1, 3, 2], 95, 4), ([1, 2, 3, 4, 5], 50, 3)],
)
def test_percentiles_use_the_nearest_rank(values: list[float], p: float, expected: float | None) -> None:
    assert percentile(values, p) == expected


def test_every_figure_of_a_known_history(history: Ledger) -> None:
    batches = {b.idempotency_key: b.batch_id for b in history.views.batches()}
    doc = build_report(history.views.stats_facts(T0 - 3600)).to_json()
    assert doc["window_seconds"] == 3650.0
    assert doc["queue"] == {"runnable": 1, "delayed": 0, "running": 0, "oldest_runnable_age_seconds": 2.0}
    assert doc["counts"] == {
        "batches_admitted": 5,
        "admitted": 10,  # creation events: A 4, B 2, C 2, D 1, E 1
        "claimed": 8,
        "completed": 6,
        "completed_succeeded": 4,
        "completed_failed": 0,
        "completed_cancelled": 2,
    }
    assert doc["rates_per_second"] == {
        "admitted": round(10 / 3650, 4),
        "claimed": round(8 / 3650, 4),
        "completed": round(6 / 3650, 4),
    }
    assert doc["retries"] == {batches["A"]: 2}
    assert doc["cancellations"] == [
        {
            "batch_id": batches["B"],
            "requested_at": "1970-01-12T13:47:11.000000Z",
            "observed_seconds": 0.0,
            "finalized_seconds": 0.0,
        },
        {
            "batch_id": batches["C"],
            "requested_at": "1970-01-12T13:47:22.000000Z",
            "observed_seconds": 3.0,
            "finalized_seconds": 3.0,
        },
    ]
    assert (doc["bytes_read"], doc["bytes_written"], doc["dedup_hits"]) == (4000, 1000, 1)
    assert doc["per_ratio"] == {
        "1:1": {"items": 2, "source_bytes": 4000, "output_bytes": 400},
        "4:3": {"items": 2, "source_bytes": 4000, "output_bytes": 600},
    }
    assert doc["timings_ms"] == {
        "decode": {"count": 2, "p50": 10.0, "p95": 30.0},  # once per source render
        "crop": {"count": 2, "p50": 2.0, "p95": 4.0},
        "encode": {"count": 4, "p50": 7.0, "p95": 11.0},
        "publish": {"count": 4, "p50": 2.0, "p95": 4.0},
    }


def test_the_window_leaves_out_what_happened_before_it(history: Ledger) -> None:
    doc = build_report(history.views.stats_facts(T0 + 35)).to_json()
    assert doc["counts"]["batches_admitted"] == 3  # C, D, E
    assert (doc["counts"]["claimed"], doc["counts"]["completed_succeeded"]) == (2, 0)
    assert doc["retries"] == {} and [c["observed_seconds"] for c in doc["cancellations"]] == [3.0]
    assert doc["timings_ms"]["decode"] == {"count": 0, "p50": None, "p95": None}


def test_one_batch_only(history: Ledger) -> None:
    a = next(b.batch_id for b in history.views.batches() if b.idempotency_key == "A")
    doc = build_report(history.views.stats_facts(T0 - 3600, a), a).to_json()
    assert doc["batch_id"] == a
    assert doc["counts"]["admitted"] == 4 and doc["counts"]["completed"] == 4 and doc["queue"]["runnable"] == 0


PROMETHEUS_AT_T0_PLUS_35 = """\
# HELP thumbctl_queue_items Live items by queue state.
# TYPE thumbctl_queue_items gauge
thumbctl_queue_items{state="runnable"} 1
thumbctl_queue_items{state="delayed"} 0
thumbctl_queue_items{state="running"} 0
# HELP thumbctl_queue_oldest_runnable_age_seconds Age of the oldest runnable item.
# TYPE thumbctl_queue_oldest_runnable_age_seconds gauge
thumbctl_queue_oldest_runnable_age_seconds 2
# HELP thumbctl_batches_admitted_total Batches admitted.
# TYPE thumbctl_batches_admitted_total counter
thumbctl_batches_admitted_total 5
# HELP thumbctl_items_admitted_total Items admitted.
# TYPE thumbctl_items_admitted_total counter
thumbctl_items_admitted_total 10
# HELP thumbctl_items_claimed_total Items claimed by a worker (a retry claims again).
# TYPE thumbctl_items_claimed_total counter
thumbctl_items_claimed_total 8
# HELP thumbctl_items_completed_total Items that reached a final state, by state.
# TYPE thumbctl_items_completed_total counter
thumbctl_items_completed_total{state="succeeded"} 4
thumbctl_items_completed_total{state="failed"} 0
thumbctl_items_completed_total{state="cancelled"} 2
# HELP thumbctl_item_retries_total Items sent back to the queue to be tried again.
# TYPE thumbctl_item_retries_total counter
thumbctl_item_retries_total 2
# HELP thumbctl_source_read_bytes_total Source bytes read by renders (once per source render).
# TYPE thumbctl_source_read_bytes_total counter
thumbctl_source_read_bytes_total 4000
# HELP thumbctl_output_written_bytes_total Output bytes published, by ratio.
# TYPE thumbctl_output_written_bytes_total counter
thumbctl_output_written_bytes_total{ratio="1:1"} 400
thumbctl_output_written_bytes_total{ratio="4:3"} 600
# HELP thumbctl_dedup_hits_total Items satisfied by an existing object.
# TYPE thumbctl_dedup_hits_total counter
thumbctl_dedup_hits_total 1
# HELP thumbctl_stage_duration_seconds Time of the decode, crop, encode and publish stages: quantiles over the stats window.
# TYPE thumbctl_stage_duration_seconds summary
thumbctl_stage_duration_seconds_sum{stage="decode"} 0.04
thumbctl_stage_duration_seconds_count{stage="decode"} 2
thumbctl_stage_duration_seconds_sum{stage="crop"} 0.006
thumbctl_stage_duration_seconds_count{stage="crop"} 2
thumbctl_stage_duration_seconds_sum{stage="encode"} 0.032
thumbctl_stage_duration_seconds_count{stage="encode"} 4
thumbctl_stage_duration_seconds_sum{stage="publish"} 0.01
thumbctl_stage_duration_seconds_count{stage="publish"} 4
# HELP thumbctl_cancel_lag_seconds Cancellation lag, request to observed and to finalized: quantiles over the stats window.
# TYPE thumbctl_cancel_lag_seconds summary
thumbctl_cancel_lag_seconds{phase="observed",quantile="0.5"} 3
thumbctl_cancel_lag_seconds{phase="observed",quantile="0.95"} 3
thumbctl_cancel_lag_seconds_sum{phase="observed"} 3
thumbctl_cancel_lag_seconds_count{phase="observed"} 2
thumbctl_cancel_lag_seconds{phase="finalized",quantile="0.5"} 3
thumbctl_cancel_lag_seconds{phase="finalized",quantile="0.95"} 3
thumbctl_cancel_lag_seconds_sum{phase="finalized"} 3
thumbctl_cancel_lag_seconds_count{phase="finalized"} 2
"""  # noqa: E501 (the file as written, line for line)


def test_prometheus_text_follows_the_naming_conventions_with_exact_samples(history: Ledger) -> None:
    """Counters over the whole ledger (``_total``), gauges for the queue, summaries in seconds whose
    quantiles cover the window (T0+35 on: only C's cancel, none of A's renders) and whose ``_sum``
    and ``_count`` cover the ledger: decode 10 + 30 ms, encode 5 + 7 + 9 + 11 ms; B's cancel lag 0 s
    and C's 3 s. The HELP texts carry no window length."""
    window = build_report(history.views.stats_facts(T0 + 35))
    totals = build_report(history.views.stats_facts(0.0))
    assert prometheus_text(window, totals) == PROMETHEUS_AT_T0_PLUS_35


def test_prometheus_quantiles_come_from_the_window_in_seconds(history: Ledger) -> None:
    window = build_report(history.views.stats_facts(T0 - 3600))
    lines = prometheus_text(window, build_report(history.views.stats_facts(0.0))).splitlines()
    assert 'thumbctl_stage_duration_seconds{stage="encode",quantile="0.95"} 0.011' in lines
    assert 'thumbctl_stage_duration_seconds{stage="decode",quantile="0.5"} 0.01' in lines
    assert 'thumbctl_cancel_lag_seconds{phase="observed",quantile="0.5"} 0' in lines


def test_stats_command_json_and_prometheus_file(history: Ledger, tmp_path: Path) -> None:
    db = str(tmp_path / "l.db")
    prom = tmp_path / "metrics" / "thumbctl.prom"
    prom.parent.mkdir()
    out = CliRunner().invoke(app, ["stats", "--db", db, "--window", "25000d", "--json", "--prometheus", str(prom)])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["counts"]["batches_admitted"] == 5 and doc["bytes_written"] == 1000
    assert "thumbctl_source_read_bytes_total 4000" in prom.read_text().splitlines()
    assert [p.name for p in prom.parent.iterdir()] == ["thumbctl.prom"]  # no temp file left behind


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--window", "soon"], 2, "--window"),
        (["--batch", "b_nope"], 2, "batch_not_found"),
        (["--prometheus", "/nonexistent-dir/x.prom"], 2, "cannot_write"),
    ],
)
def test_stats_command_errors_are_one_line(
    history: Ledger, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    out = CliRunner().invoke(app, ["stats", "--db", str(tmp_path / "l.db"), *args])
    assert out.exit_code == code
    assert message in out.output and "Traceback" not in out.output


def test_cancellation_lag_is_measured_on_the_running_items_not_the_queued_ones(tmp_path: Path) -> None:
    clock = Clock(T0)
    with Ledger(tmp_path / "l.db", clock=clock) as led:
        batch = led.intake.accept_batch(request("F", sources=2), Limits())  # img0 will run, img1 stays queued
        clock.now = T0 + 1
        running = led.queue.claim("w1")
        clock.now = T0 + 2
        led.intake.request_cancel(batch.batch_id)  # img1's items are cancelled in this transaction
        clock.now = T0 + 3
        pending = build_report(led.views.stats_facts(T0)).to_json()["cancellations"]
        assert [(c["observed_seconds"], c["finalized_seconds"]) for c in pending] == [(None, None)]
        clock.now = T0 + 7.5
        assert publish_all(led, running, [result(1, 1), result(1, 1)]) == ["cancelled", "cancelled"]
        clock.now = T0 + 9
        done = build_report(led.views.stats_facts(T0)).to_json()["cancellations"]
        assert [(c["observed_seconds"], c["finalized_seconds"]) for c in done] == [(5.5, 5.5)]


def test_per_ratio_source_bytes_count_each_source_once_whatever_its_sizes_and_formats() -> None:
    """One 1000-byte source rendered at 2 ratios x 2 sizes x 2 formats: read 1000 B; each ratio
    read it once (1000 B, not 4000), made 4 outputs, and the outputs add up to bytes written."""
    renders = [
        RenderFacts("b_1", "/src/a.jpg", ratio, 1, False, result(1000, size // 8 + (fmt == "webp")))
        for ratio in ("1:1", "4:3")
        for size in (256, 1024)
        for fmt in ("jpeg", "webp")
    ]
    counts = {"succeeded": 8, "failed": 0, "cancelled": 0}
    facts = StatsFacts(2000.0, 1000.0, 0, 0, 0, None, 1, 8, 8, counts, {}, renders=renders)
    report = build_report(facts)
    doc = report.to_json()
    assert (doc["bytes_read"], doc["bytes_written"]) == (1000, 2 * (32 + 33 + 128 + 129))
    assert doc["per_ratio"] == {
        "1:1": {"items": 4, "source_bytes": 1000, "output_bytes": 322},
        "4:3": {"items": 4, "source_bytes": 1000, "output_bytes": 322},
    }
    out = io.StringIO()
    Reporter(stdout=out, diagnostics=Console(file=io.StringIO())).stats(report)
    lines = [line.split() for line in out.getvalue().splitlines()]
    assert ["bytes:", "read", "1.0", "kB,", "written", "644", "B;", "dedup", "hits", "0"] in lines
    assert ["ratio", "items", "sources", "read", "output", "bytes"] in lines
    assert ["1:1", "4", "1.0", "kB", "322", "B"] in lines
