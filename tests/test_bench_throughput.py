"""bench/throughput.py's smoke case: the benchmark runs end to end and prints its tables, with the
CPU time of each run split into its parts (figures unchecked, beyond being CPU seconds and a fraction)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_throughput_benchmark_smoke_case_prints_the_serial_fraction_and_its_bound(tmp_path: Path):
    command = [sys.executable, "bench/throughput.py", "--smoke", "--workers", "1", "--keep", str(tmp_path / "photos")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line.strip(" |").split(" | ") for line in done.stdout.splitlines() if line.startswith("| after |")]
    assert len(rows) == 2 and rows[0][:3] == ["after", "1", "1"]  # the timings, then the CPU by part
    parts = rows[1]
    cpu = [float(value) for value in parts[2:7]]
    fraction, bound = float(parts[7]), float(parts[8].rstrip("x"))
    assert all(value >= 0 for value in cpu) and cpu[4] > 0  # the worker rendered
    assert 0 < fraction < 1 and abs(bound - 1 / (fraction + (1 - fraction) / 2)) < 0.002
