"""The review page's benchmark runs (its smoke case, 50 photos): never timed here, only that it works."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO
from reviewing import chromium_path


def test_the_review_benchmark_smoke_case_runs_and_prints_its_medians(tmp_path) -> None:
    chromium_path()  # required in CI, else skipped
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "review.py"), "--smoke"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ledger of 50 catalogue entries built" in done.stdout
    assert re.search(r"time to the first screen\s+\d+\.\d{3} s", done.stdout), done.stdout
