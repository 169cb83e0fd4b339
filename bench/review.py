"""Benchmark: the review page's time to the first screen over a large catalogue.

A ledger of ``--photos`` (5,000) photos at one ratio (5,000 catalogue entries) is built without
rendering: real tiny JPEG sources, submitted with ``--detach``, then claimed and published by real
workers whose render is the stand-in of :mod:`queue_scale` (a pre-encoded JPEG of the right size;
no preview is kept, so the page draws the windows on an outline). Each timed round starts
``thumbctl review OUT --no-browser`` as a process, waits for its address, opens it in the system's
Chromium (Playwright, ``executable_path``; the browser is started once, before the rounds) and stops
the clock when the first photo's crop windows are drawn. It reports the median, and its two parts:
from the command's start to its address, and from there to the first screen. Target: <= 1 s.

Run from the repository root::

    python bench/review.py [--photos 5000] [--repeat 5]
    python bench/review.py --smoke      # 50 photos, one round: checks the benchmark works
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from PIL import Image  # noqa: E402
from queue_scale import noop_render  # noqa: E402

from thumbctl import Ledger, SubmitOptions, prepare_submission, submit  # noqa: E402
from thumbctl.core.profile import Limits, Profile, parse_ratios  # noqa: E402
from thumbctl.engine.worker import WorkerConfig, run_worker  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def make_photos(folder: Path, count: int) -> None:
    """``count`` distinct tiny JPEGs in 50 folders (each with its number drawn in black and white
    squares, so each has a digest of its own)."""
    for n in range(count):
        where = folder / f"d{n % 50:02d}"
        where.mkdir(parents=True, exist_ok=True)
        image = Image.new("RGB", (64, 48), (n % 256, 128, 200))
        for bit in range(16):
            square = Image.new("RGB", (8, 8), (255, 255, 255) if n >> bit & 1 else (0, 0, 0))
            image.paste(square, (8 * (bit % 8), 8 * (bit // 8)))
        image.save(where / f"p{n:05d}.jpg", "JPEG", quality=90)


def worker(db: str, batch_id: str) -> None:
    run_worker(WorkerConfig(db, batch_id=batch_id, item_timeout=0), threading.Event(), renderer=noop_render)


def build(work: Path, photos: int) -> tuple[str, Path]:
    """The ledger and OUT of ``photos`` photos, rendered by the stand-in; returns (ledger, OUT)."""
    folder, out, db = work / "photos", work / "thumbs", str(work / "ledger.db")
    make_photos(folder, photos)
    options = SubmitOptions(out_dir=out, profile=Profile(ratios=parse_ratios("1:1")))
    with Ledger(db) as ledger:
        prepared = prepare_submission(folder, options, ledger)
        limits = Limits(max_items=photos * 2, max_runnable=photos * 2)
        batch_id = submit(ledger, prepared, limits).batch_id
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=worker, args=(db, batch_id)) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    with Ledger(db) as ledger:
        names = ledger.catalogue.entries(str(out.resolve()))
    distinct = len({entry.source_digest for entry in names})
    assert len(names) == distinct == photos, f"{len(names)} catalogue entries of {distinct} photos, wanted {photos}"
    return db, out


def one_round(db: str, out: Path, chromium: object) -> tuple[float, float]:
    """(command start -> address, address -> first screen), in seconds."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "thumbctl", "--db", db, "review", str(out), "--no-browser"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line[line.index("http://") :].split()[0]
        addressed = time.perf_counter()
        page = chromium.new_page()  # type: ignore[attr-defined]
        page.goto(url)
        page.wait_for_selector("#windows .window")
        shown = time.perf_counter()
        page.close()
        return addressed - started, shown - addressed
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="50 photos, one round")
    args = parser.parse_args()
    if args.smoke:
        args.photos, args.repeat = 50, 1
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        sys.exit("chromium is needed: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="thumbctl-review-") as temp:
        work = Path(temp)
        began = time.perf_counter()
        db, out = build(work, args.photos)
        print(f"ledger of {args.photos} catalogue entries built in {time.perf_counter() - began:.1f} s")
        os.environ["HOME"] = temp  # Chromium's crash folders go there
        with sync_playwright() as driver:
            chromium = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            rounds = [one_round(db, out, chromium) for _ in range(args.repeat)]
            chromium.close()
    starts, screens = [r[0] for r in rounds], [r[1] for r in rounds]
    totals = [a + b for a, b in rounds]
    print(f"rounds: {args.repeat}; medians:")
    print(f"  command start -> address      {statistics.median(starts):.3f} s")
    print(f"  address -> first screen       {statistics.median(screens):.3f} s")
    print(f"  time to the first screen      {statistics.median(totals):.3f} s (target <= 1 s)")


if __name__ == "__main__":
    main()
