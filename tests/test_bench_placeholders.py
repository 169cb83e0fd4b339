"""bench/placeholders.py runs end to end on a tiny corpus and prints its tables (figures unchecked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import make_image

REPO = Path(__file__).resolve().parent.parent


def test_the_placeholders_benchmark_runs_and_prints_its_tables(tmp_path: Path) -> None:
    make_image(tmp_path / "corpus" / "set" / "wide.jpg", (400, 240), "JPEG", seed=1)
    core = str(min(os.sched_getaffinity(0)))
    command = [sys.executable, "bench/placeholders.py", "--corpus", str(tmp_path / "corpus"), "--folders", "set"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [*command, "--repeat", "1", "--core", core], cwd=REPO, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("| placeholders / render, median of per-source shares |") for line in lines)
    for candidate in ("thumbhash", "blurhash 4x3", "lqip-webp-16 (shipped)", "dominant colour", "lqip-jpeg-16"):
        assert sum(line.startswith(f"| {candidate} |") for line in lines) == 1
    assert "Largest share: wide.jpg" in done.stdout
