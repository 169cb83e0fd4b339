"""Operational statistics of the ledger over a time window, as a report and as Prometheus text.

The ledger supplies raw facts (:class:`~thumbctl.ledger.StatsFacts`); this module
only does arithmetic on them: rates, nearest-rank percentiles, cancellation lags
and byte totals. Stage timings come from the result each worker stores with a
published item: ``decode`` and ``crop`` once per source render (all ratios of a
source share one decode and one crop analysis), ``encode`` (resample + encode)
and ``publish`` (temp write, verification, links) per item.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CannotWrite
from .ledger import CancelTimes, RenderFacts, StatsFacts, iso, parse_iso
from .storage.fsafe import write_text_atomically

STAGES = ("decode", "crop", "encode", "publish")
_PER_SOURCE_STAGES = ("decode", "crop")


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (the smallest value with at least p% of values at or below it)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Distribution:
    count: int
    p50: float | None
    p95: float | None

    @classmethod
    def of(cls, values: list[float]) -> Distribution:
        return cls(len(values), percentile(values, 50), percentile(values, 95))

    def to_json(self) -> dict[str, object]:
        return {"count": self.count, "p50": self.p50, "p95": self.p95}


@dataclass(frozen=True)
class CancelLag:
    """Seconds from a cancel request to the first item that saw it, and to the batch being final."""

    batch_id: str
    requested_at: str
    observed_seconds: float | None
    finalized_seconds: float | None

    def to_json(self) -> dict[str, object]:
        return {
            "batch_id": self.batch_id,
            "requested_at": self.requested_at,
            "observed_seconds": self.observed_seconds,
            "finalized_seconds": self.finalized_seconds,
        }


@dataclass(frozen=True)
class RatioBytes:
    items: int = 0
    source_bytes: int = 0
    output_bytes: int = 0

    def to_json(self) -> dict[str, int]:
        return {"items": self.items, "source_bytes": self.source_bytes, "output_bytes": self.output_bytes}


@dataclass(frozen=True)
class StatsReport:
    at: str
    since: str
    window_seconds: float
    batch_id: str | None
    queue: dict[str, object]
    counts: dict[str, int]
    retries: dict[str, int]
    cancellations: list[CancelLag]
    bytes_read: int
    bytes_written: int
    per_ratio: dict[str, RatioBytes]
    dedup_hits: int
    timings_ms: dict[str, Distribution] = field(default_factory=dict)

    def rate(self, name: str) -> float:
        """Per-second rate of one of ``counts`` over the window."""
        return round(self.counts[name] / self.window_seconds, 4) if self.window_seconds > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "since": self.since,
            "window_seconds": self.window_seconds,
            "batch_id": self.batch_id,
            "queue": self.queue,
            "counts": self.counts,
            "rates_per_second": {name: self.rate(name) for name in ("admitted", "claimed", "completed")},
            "retries": self.retries,
            "cancellations": [lag.to_json() for lag in self.cancellations],
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "per_ratio": {ratio: figures.to_json() for ratio, figures in self.per_ratio.items()},
            "dedup_hits": self.dedup_hits,
            "timings_ms": {stage: dist.to_json() for stage, dist in self.timings_ms.items()},
        }


def build_report(facts: StatsFacts, batch_id: str | None = None) -> StatsReport:
    completed = sum(facts.completed.values())
    renders = [r for r in facts.renders if r.result is not None and not r.dedup]
    return StatsReport(
        at=iso(facts.now),
        since=iso(facts.since),
        window_seconds=round(facts.now - facts.since, 3),
        batch_id=batch_id,
        queue={
            "runnable": facts.runnable,
            "delayed": facts.delayed,
            "running": facts.running,
            "oldest_runnable_age_seconds": (
                round(facts.now - parse_iso(facts.oldest_runnable_at), 3) if facts.oldest_runnable_at else None
            ),
        },
        counts={
            "batches_admitted": facts.batches_admitted,
            "admitted": facts.admitted,
            "claimed": facts.claimed,
            "completed": completed,
            **{f"completed_{state}": n for state, n in facts.completed.items()},
        },
        retries=facts.retries,
        cancellations=[_cancel_lag(c) for c in facts.cancels],
        bytes_read=sum(_figure(r, "source_bytes") for r in _per_source(renders)),
        bytes_written=sum(_figure(r, "output_bytes") for r in renders),
        per_ratio=_per_ratio(renders),
        dedup_hits=sum(1 for r in facts.renders if r.dedup),
        timings_ms=_timings(renders),
    )


def _figure(render: RenderFacts, key: str) -> int:
    value = (render.result or {}).get(key)
    return int(value) if isinstance(value, int | float) else 0


def _stage_ms(render: RenderFacts, stage: str) -> float | None:
    timings = (render.result or {}).get("timings")
    value = timings.get(f"{stage}_ms") if isinstance(timings, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _cancel_lag(times: CancelTimes) -> CancelLag:
    requested = parse_iso(times.requested_at)

    def since_request(at: str | None) -> float | None:
        return None if at is None else round(max(0.0, parse_iso(at) - requested), 3)

    return CancelLag(
        times.batch_id, times.requested_at, since_request(times.observed_at), since_request(times.finalized_at)
    )


def _per_source(renders: Iterable[RenderFacts]) -> list[RenderFacts]:
    """One render record per source render (a source's ratios share one read and one decode)."""
    seen: dict[tuple[str, str, int], RenderFacts] = {}
    for render in renders:
        seen.setdefault((render.batch_id, render.source, render.attempt), render)
    return list(seen.values())


def _per_ratio(renders: list[RenderFacts]) -> dict[str, RatioBytes]:
    totals: dict[str, RatioBytes] = {}
    for render in renders:
        now = totals.get(render.ratio, RatioBytes())
        totals[render.ratio] = RatioBytes(
            now.items + 1,
            now.source_bytes + _figure(render, "source_bytes"),
            now.output_bytes + _figure(render, "output_bytes"),
        )
    return dict(sorted(totals.items()))


def _timings(renders: list[RenderFacts]) -> dict[str, Distribution]:
    per_source = _per_source(renders)
    timings = {}
    for stage in STAGES:
        records = per_source if stage in _PER_SOURCE_STAGES else renders
        values = [value for value in (_stage_ms(r, stage) for r in records) if value is not None]
        timings[stage] = Distribution.of(values)
    return timings


Samples = list[tuple[str, float | None]]


def prometheus_text(report: StatsReport) -> str:
    """The report in the Prometheus text exposition format (for node-exporter's textfile collector).
    Every metric is a gauge; a metric without samples is left out."""
    lines: list[str] = []
    for name, help_text, samples in _metrics(report):
        present = [(labels, value) for labels, value in samples if value is not None]
        if present:
            lines += [f"# HELP thumbctl_{name} {help_text}", f"# TYPE thumbctl_{name} gauge"]
            lines += [f"thumbctl_{name}{labels} {_number(value)}" for labels, value in present]
    return "\n".join(lines) + "\n"


def _metrics(report: StatsReport) -> list[tuple[str, str, Samples]]:
    """(name, help, samples) of every metric, samples as (labels, value)."""
    queue = report.queue
    return [
        ("queue_items", "Live items by queue state.",
         [(f'{{state="{state}"}}', _as_float(queue[state])) for state in ("runnable", "delayed", "running")]),
        ("queue_oldest_runnable_age_seconds", "Age of the oldest runnable item.",
         [("", _as_float(queue["oldest_runnable_age_seconds"]))]),
        ("window_items", f"Items admitted, claimed and completed in the last {_number(report.window_seconds)} s.",
         [(f'{{event="{name}"}}', float(n)) for name, n in report.counts.items()]),
        ("window_items_per_second", f"Item rates over the last {_number(report.window_seconds)} s.",
         [(f'{{event="{name}"}}', report.rate(name)) for name in ("admitted", "claimed", "completed")]),
        ("window_retries", "Items sent back to the queue in the window, per batch.",
         [(f'{{batch_id="{batch}"}}', float(n)) for batch, n in report.retries.items()]),
        ("window_bytes_written", "Output bytes published in the window, per ratio.",
         [(f'{{ratio="{ratio}"}}', float(figures.output_bytes)) for ratio, figures in report.per_ratio.items()]),
        ("window_bytes_read", "Source bytes read by renders in the window.", [("", float(report.bytes_read))]),
        ("window_dedup_hits", "Items satisfied by an existing object in the window.",
         [("", float(report.dedup_hits))]),
        ("stage_milliseconds", "Stage time percentiles in the window.",
         [(f'{{stage="{stage}",quantile="{q}"}}', value) for stage, dist in report.timings_ms.items()
          for q, value in (("0.5", dist.p50), ("0.95", dist.p95))]),
        ("cancel_lag_seconds", "Cancellation lag per batch: request to observed and to finalized.",
         [(f'{{batch_id="{lag.batch_id}",phase="{phase}"}}', value) for lag in report.cancellations
          for phase, value in (("observed", lag.observed_seconds), ("finalized", lag.finalized_seconds))]),
    ]  # fmt: skip


def write_prometheus_file(report: StatsReport, path: Path) -> None:
    """Write the metrics atomically (temp file + rename), as the textfile collector expects."""
    try:
        write_text_atomically(path, prometheus_text(report))
    except OSError as exc:
        raise CannotWrite(f"cannot write {path}: {exc.strerror or exc}") from exc


def _as_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(value, 6))
