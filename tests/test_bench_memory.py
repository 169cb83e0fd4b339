"""bench/memory.py's smoke case: the benchmark runs a real submit, samples its processes and prints
its table (figures unchecked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import make_image

REPO = Path(__file__).resolve().parent.parent


def test_the_memory_benchmark_smoke_case_runs_and_prints_its_table(tmp_path: Path):
    make_image(tmp_path / "corpus" / "large" / "a.jpg", (800, 600), "JPEG", seed=1)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "bench/memory.py", "--smoke", "--cases", "png100", "--corpus", str(tmp_path / "corpus")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| this | png100 |")]
    assert len(rows) == 1 and rows[0].startswith("| this | png100 | 2 | 2 |")
    processes = int(rows[0].split("|")[-3])
    assert processes >= 3  # the supervisor and two workers were seen
    assert "smoke run: figures unchecked" in done.stdout
