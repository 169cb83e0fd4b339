"""bench/derivatives.py runs end to end on a tiny corpus and prints its tables (figures unchecked)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import make_image

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("vipsthumbnail") is None, reason="the benchmark compares against vipsthumbnail")
def test_the_derivative_set_benchmark_runs_and_prints_its_tables(tmp_path: Path):
    folder = tmp_path / "corpus" / "set"
    make_image(folder / "wide.jpg", (700, 500), "JPEG", seed=1)  # 1280 px asks more than it has: limited
    core = str(min(os.sched_getaffinity(0)))
    command = [sys.executable, "bench/derivatives.py", "--corpus", str(tmp_path / "corpus"), "--folder", "set"]
    command += ["--repeat", "1", "--e2e-repeat", "1", "--core", core]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("| vipsthumbnail once per derivative (18 runs) |") for line in lines) == 2
    assert any(line.startswith("| floor: decodes at the DCT scales + 18 encodes |") for line in lines)
    assert sum(line.startswith("| wide.jpg | 700x500 |") for line in lines) == 2  # wall and CPU
    assert sum(line.startswith("| `") and "| 1 | 18 |" in line for line in lines) == 2  # end to end, wall and CPU
