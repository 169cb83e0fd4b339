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

from ..core.errors import CannotWrite
from ..ledger import CancelTimes, RenderFacts, StatsFacts, iso, parse_iso, stored_seconds
from ..storage.fsafe import write_text_atomically

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
    #: The sum of the values (a Prometheus summary's ``_sum``); not in the JSON.
    total: float = 0.0

    @classmethod
    def of(cls, values: list[float]) -> Distribution:
        return cls(len(values), percentile(values, 50), percentile(values, 95), float(sum(values)))

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
        cancellations=[lag for lag in map(_cancel_lag, facts.cancels) if lag is not None],
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


def _cancel_lag(times: CancelTimes) -> CancelLag | None:
    """How long a cancel took to be seen and to finish; None when its request time does not parse
    (a damaged row: reconcile reports the ledger's damage, a figure does without it)."""
    requested = stored_seconds(times.requested_at)
    if requested is None:
        return None

    def since_request(at: str | None) -> float | None:
        seconds = None if at is None else stored_seconds(at)
        return None if seconds is None else round(max(0.0, seconds - requested), 3)

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
    """Items and output bytes per ratio; source bytes once per source render of the ratio,
    however many sizes and formats it made (so no ratio's figure exceeds ``bytes_read``)."""
    totals: dict[str, RatioBytes] = {}
    read: set[tuple[str, str, int, str]] = set()
    for render in renders:
        now = totals.get(render.ratio, RatioBytes())
        first = (render.batch_id, render.source, render.attempt, render.ratio) not in read
        read.add((render.batch_id, render.source, render.attempt, render.ratio))
        totals[render.ratio] = RatioBytes(
            now.items + 1,
            now.source_bytes + (_figure(render, "source_bytes") if first else 0),
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


#: (what follows the metric name: a suffix such as ``_sum`` and the labels, the value).
Samples = list[tuple[str, float | None]]
COMPLETED_STATES = ("succeeded", "failed", "cancelled")


def prometheus_text(window: StatsReport, totals: StatsReport) -> str:
    """The metrics in the Prometheus text format (for node-exporter's textfile collector), by its
    naming conventions: gauges for the queue now; counters (``_total``) over every batch the
    ledger holds (``totals``, a report since the epoch: gc of expired batches lowers them, which
    Prometheus takes as a counter reset); summaries (``_seconds``) with their quantiles over the
    stats window and their ``_sum`` and ``_count`` over the ledger. A metric without samples is
    left out."""
    lines: list[str] = []
    for name, kind, help_text, samples in _metrics(window, totals):
        present = [(tail, value) for tail, value in samples if value is not None]
        if present:
            lines += [f"# HELP thumbctl_{name} {help_text}", f"# TYPE thumbctl_{name} {kind}"]
            lines += [f"thumbctl_{name}{tail} {_number(value)}" for tail, value in present]
    return "\n".join(lines) + "\n"


def _metrics(window: StatsReport, totals: StatsReport) -> list[tuple[str, str, str, Samples]]:
    """(name, type, help, samples) of every metric."""
    queue, counts = window.queue, totals.counts
    return [
        ("queue_items", "gauge", "Live items by queue state.",
         [(f'{{state="{state}"}}', _as_float(queue[state])) for state in ("runnable", "delayed", "running")]),
        ("queue_oldest_runnable_age_seconds", "gauge", "Age of the oldest runnable item.",
         [("", _as_float(queue["oldest_runnable_age_seconds"]))]),
        ("batches_admitted_total", "counter", "Batches admitted.", [("", float(counts["batches_admitted"]))]),
        ("items_admitted_total", "counter", "Items admitted.", [("", float(counts["admitted"]))]),
        ("items_claimed_total", "counter", "Items claimed by a worker (a retry claims again).",
         [("", float(counts["claimed"]))]),
        ("items_completed_total", "counter", "Items that reached a final state, by state.",
         [(f'{{state="{state}"}}', float(counts[f"completed_{state}"])) for state in COMPLETED_STATES]),
        ("item_retries_total", "counter", "Items sent back to the queue to be tried again.",
         [("", float(sum(totals.retries.values())))]),
        ("source_read_bytes_total", "counter", "Source bytes read by renders (once per source render).",
         [("", float(totals.bytes_read))]),
        ("output_written_bytes_total", "counter", "Output bytes published, by ratio.",
         [(f'{{ratio="{ratio}"}}', float(figures.output_bytes)) for ratio, figures in totals.per_ratio.items()]),
        ("dedup_hits_total", "counter", "Items satisfied by an existing object.", [("", float(totals.dedup_hits))]),
        ("stage_duration_seconds", "summary",
         "Time of the decode, crop, encode and publish stages: quantiles over the stats window.",
         _stage_samples(window, totals)),
        ("cancel_lag_seconds", "summary",
         "Cancellation lag, request to observed and to finalized: quantiles over the stats window.",
         _cancel_samples(window, totals)),
    ]  # fmt: skip


def _stage_samples(window: StatsReport, totals: StatsReport) -> Samples:
    samples: Samples = []
    for stage, dist in window.timings_ms.items():
        label = f'stage="{stage}"'
        overall = totals.timings_ms[stage]
        samples += [(f'{{{label},quantile="{q}"}}', _seconds(v)) for q, v in (("0.5", dist.p50), ("0.95", dist.p95))]
        samples += [(f"_sum{{{label}}}", overall.total / 1000), (f"_count{{{label}}}", float(overall.count))]
    return samples


def _cancel_samples(window: StatsReport, totals: StatsReport) -> Samples:
    samples: Samples = []
    for phase in ("observed", "finalized"):
        recent = _lags(window.cancellations, phase)
        overall = _lags(totals.cancellations, phase)
        label = f'phase="{phase}"'
        samples += [(f'{{{label},quantile="{q}"}}', percentile(recent, p)) for q, p in (("0.5", 50), ("0.95", 95))]
        samples += [(f"_sum{{{label}}}", float(sum(overall))), (f"_count{{{label}}}", float(len(overall)))]
    return samples


def _lags(lags: list[CancelLag], phase: str) -> list[float]:
    values = (lag.observed_seconds if phase == "observed" else lag.finalized_seconds for lag in lags)
    return [value for value in values if value is not None]


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


def write_prometheus_file(window: StatsReport, totals: StatsReport, path: Path) -> None:
    """Write the metrics atomically (temp file + rename), as the textfile collector expects."""
    try:
        write_text_atomically(path, prometheus_text(window, totals))
    except OSError as exc:
        raise CannotWrite(f"cannot write {path}: {exc.strerror or exc}") from exc


def _as_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(value, 6))
