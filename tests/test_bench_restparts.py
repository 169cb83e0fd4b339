"""bench/restparts.py's smoke case: the real submit runs with its parts timed and the table names them all."""

from __future__ import annotations

import os
from pathlib import Path

from support import make_image, run_bench


def test_the_parts_of_the_rest_benchmark_times_every_part_of_a_real_submit(tmp_path: Path):
    photos = tmp_path / "corpus" / "photos"
    photos.mkdir(parents=True)
    make_image(photos / "a.jpg", (640, 480), "JPEG", seed=1)
    make_image(photos / "b.png", (480, 640), "PNG", seed=2)
    core = str(min(os.sched_getaffinity(0)))
    done = run_bench("restparts.py", "--smoke", "--corpus", str(tmp_path / "corpus"), "--core", core)
    assert done.returncode == 0, done.stderr
    rows = {tuple(cell.strip() for cell in line.split("|")[1:4]) for line in done.stdout.splitlines()}
    # two sources, three default ratios each: every part ran as often as the batch needs
    assert ("worker", "decode (without the read and digest again)", "2") in rows
    assert ("worker", "verification", "6") in rows and ("worker", "publish", "6") in rows
    assert ("supervisor", "intake", "1") in rows and ("supervisor", "contact sheet", "1") in rows
    assert any(row[:2] == ("command", "the whole command") for row in rows)
