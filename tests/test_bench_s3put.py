"""bench/s3put.py runs its smoke case against its own weed mini and prints its table (figures unchecked)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from s3 import s3_env_or_skip


def test_the_s3_put_benchmark_smoke_case_runs_and_prints_its_rows() -> None:
    s3_env_or_skip()
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "s3put.py"), "--smoke"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for label in ("plain obstore put", "obstore create + headers", "thumbctl S3ObjectStore.put"):
        for threads in (1, 16):
            assert f"| {label} | {threads} | " in done.stdout
    assert "- 1 thread(s): thumbctl / plain = " in done.stdout
    assert "- 16 thread(s): thumbctl / plain = " in done.stdout
