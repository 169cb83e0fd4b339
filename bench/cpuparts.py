"""CPU time of a foreground ``thumbctl submit`` split into its parts, and the serial fraction.

Used by ``bench/throughput.py``. While the CLI runs, a sampler reads ``/proc`` every
``PERIOD`` seconds: the CPU time (user + system) of the CLI process itself and of its
workers (its children: live ones read directly, reaped ones from the CLI's ``cutime`` and
``cstime``). Once the CLI has exited it is read once more before it is reaped
(``waitid(WNOWAIT)``), so the totals are exact. The ledger's events then mark the phases:

* before the first claim -- start-up, intake (scan, read, digest, probe), acceptance,
  handing the batch to the workers;
* rendering -- from the first claim to the last item settled: the supervisor's ticks;
* after the last item settled -- the batch manifest, the contact sheet, exit.

CPU time, unlike wall time, barely moves with other load on the machine, so the serial
fraction is computed from it. In a 1-worker run on two cores the supervisor's CPU while
items render runs beside the worker and costs nothing; with two workers on two cores it
takes its share from them. So, with ``S`` the CPU before the first claim and after the last
item (CLI and workers), ``C`` the CLI's CPU while items render and ``P`` the workers' CPU
while items render, a 1-worker run takes ``S + P`` and a 2-worker run ``S + (P + C) / 2``:
the serial fraction that Amdahl's law needs is ``s = (S + C) / (S + P)``, and the bound on
the speed-up of 2 workers is ``1 / (s + (1 - s) / 2)``. Waits (fsyncs) are not counted:
they overlap between workers.
"""

from __future__ import annotations

import bisect
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

PERIOD = 0.02
TICK = 1 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Parts:
    """CPU seconds of one run, by part."""

    before_claims: float  # the CLI, before the first claim
    supervisor: float  # the CLI, while items render
    after_items: float  # the CLI, after the last item settled
    workers_outside: float  # the workers, before the first claim and after the last item
    workers: float  # the workers, while items render

    @property
    def serial(self) -> float:
        return self.before_claims + self.after_items + self.workers_outside

    @property
    def total(self) -> float:
        return self.serial + self.supervisor + self.workers

    @property
    def serial_fraction(self) -> float:
        return (self.serial + self.supervisor) / (self.serial + self.workers)


def amdahl_bound(serial_fraction: float, workers: int = 2) -> float:
    return 1 / (serial_fraction + (1 - serial_fraction) / workers)


def _stat(pid: int) -> tuple[float, float] | None:
    """(own CPU, reaped children's CPU) of ``pid`` in seconds, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    # After the ")": state is field 3 of stat(5), so utime (14) is index 11 here.
    utime, stime, cutime, cstime = (int(v) * TICK for v in fields[11:15])
    return utime + stime, cutime + cstime


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return kids


class Sampler:
    """Samples (time, CLI CPU, workers' CPU) of ``pid`` until :meth:`finish`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []
        self._live: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        own = _stat(self.pid)
        if own is None:
            return
        for kid in _children(self.pid):
            kid_stat = _stat(kid)
            if kid_stat is not None:
                self._live[kid] = kid_stat[0]
        # A reaped child's CPU is in the CLI's cutime; forget it from the live ones.
        children = set(_children(self.pid))
        self._live = {k: v for k, v in self._live.items() if k in children}
        self.samples.append((time.time(), own[0], own[1] + sum(self._live.values())))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(PERIOD)

    def finish(self) -> None:
        """The CLI has exited but is not reaped yet: one last, exact sample."""
        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        self._stop.set()
        self._thread.join()
        self._live = {}
        self._sample()

    def at(self, when: float) -> tuple[float, float]:
        """(CLI CPU, workers' CPU) at the last sample taken at or before ``when``."""
        times = [s[0] for s in self.samples]
        i = max(0, bisect.bisect_right(times, when) - 1)
        return self.samples[i][1], self.samples[i][2]


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def phase_bounds(ledger: Path) -> tuple[float, float]:
    """(first claim, last item settled) of the ledger's one batch, as epoch seconds."""
    with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True) as db:
        first, last = db.execute(
            "SELECT min(CASE WHEN to_state = 'running' THEN at END), max(at) FROM events WHERE item_row IS NOT NULL"
        ).fetchone()
    return _epoch(first), _epoch(last)


def parts_of(sampler: Sampler, ledger: Path) -> Parts:
    first, last = phase_bounds(ledger)
    cli_first, workers_first = sampler.at(first)
    cli_last, workers_last = sampler.at(last)
    _, cli_end, workers_end = sampler.samples[-1]
    return Parts(
        before_claims=cli_first,
        supervisor=cli_last - cli_first,
        after_items=cli_end - cli_last,
        workers_outside=workers_first + (workers_end - workers_last),
        workers=workers_last - workers_first,
    )
