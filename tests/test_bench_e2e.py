"""bench/e2e.py's smoke case: the benchmark runs end to end and prints its tables (figures unchecked)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support import make_image, run_bench


def test_the_end_to_end_benchmark_smoke_case_runs_and_prints_its_tables(tmp_path: Path):
    photos = tmp_path / "corpus" / "photos"
    photos.mkdir(parents=True)
    make_image(photos / "a.jpg", (640, 480), "JPEG", seed=1)
    make_image(photos / "b.jpg", (480, 640), "JPEG", seed=2)
    make_image(photos / "c.jpg", (900, 700), "JPEG", seed=3)  # the largest: left out by --smoke
    core = str(min(os.sched_getaffinity(0)))
    done = run_bench("e2e.py", "--smoke", "--corpus", str(tmp_path / "corpus"), "--core", core)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| `")]
    assert len(rows) == 2 and all("/photos/` | " in row for row in rows) and "/photos/` | 2 (6) | after |" in rows[0]
    assert "| after |" in rows[1] and "<= 15% | smoke run, no verdict |" in rows[1]
    if shutil.which("vipsthumbnail"):
        assert "smoke run, no verdict" in rows[0]
    else:
        assert "| skipped |" in rows[0]
