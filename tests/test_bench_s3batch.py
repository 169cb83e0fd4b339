"""bench/s3batch.py runs its smoke case (a local batch and an S3 batch) and prints its table (figures unchecked)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO
from s3 import s3_env_or_skip


def test_the_s3_batch_benchmark_smoke_case_runs_both_batches_and_prints_its_rows() -> None:
    s3_env_or_skip()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "s3batch.py"), "--smoke"],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "outputs" not in line]
    expected = [["| local folders", "6"], ["| S3 (SeaweedFS on this machine)", "6"]]
    assert [row.split(" | ")[0:2] for row in rows] == expected
    assert "(smoke run, no verdict)" in done.stdout
