"""Benchmark: peak memory (RSS) of ``thumbctl submit`` -- the supervisor plus its workers.

Cases (sources generated from the corpus' ``large/`` photos, seeded, cached in a temporary
folder, never committed):

* ``jpeg24`` -- 24 MP JPEGs (6000 x 4000, q90): each ``large/`` photo cropped at a seeded place
  and upscaled (bicubic) to 24 MP.
* ``png100`` -- 100 MP PNGs (12000 x 8333, just under the default 100 MP pixel limit), RGB,
  made the same way from the photo at half size (smoother, so each file stays under the default
  100 MiB byte limit).

Each run is the real command, ``python -m thumbctl submit FOLDER --out OUT --db LEDGER -w N -q``
with the default profile, into a fresh ledger, store and OUT. While it runs, every process of its
tree (the supervisor and every descendant: workers, fork server, resource tracker) is sampled
every ``--interval`` seconds from ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``) and
``/proc/<pid>/smaps_rollup`` (``Pss``). Reported, in MB (10^6 bytes):

* ``sum of peaks`` -- the sum over processes of each one's own peak (``VmHWM``): the bound if
  every process peaked at once;
* ``peak RSS sum`` -- the largest sum of ``VmRSS`` over the tree seen in one sample;
* ``peak PSS sum`` -- the same with ``Pss`` (pages shared after the fork counted once): closest
  to what the machine actually had to hold;
* ``supervisor`` and ``largest worker`` -- their own peaks.

(The kernel's ``ru_maxrss`` of the tree is no cross-check here: it counts the benchmark's own
pages, which the submit's process held between ``fork`` and ``exec``.)

Each (checkout, case, workers) runs ``--repeat`` times, checkouts alternated; the table gives
medians. ``--checkout NAME=DIR`` (repeatable) runs the thumbctl of another checkout (for a
before/after comparison); the default is this repository.

Run it from the repository root, with the interpreter that has thumbctl installed::

    python bench/memory.py [--corpus ../shared/corpus] [--cases jpeg24,png100] [--workers 1,8]
        [--sources 8] [--repeat 3] [--checkout before=../before]

``--smoke`` makes two small sources per case (1 MP), runs 2 workers once: it checks the script only.

``--decode FILE`` instead decodes one PNG for a 512 px output in a fresh process, whole and in
bands alternately (``--repeat`` times each), and prints the CPU seconds and the peak RSS each took.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from imaging import DEFAULT_CORPUS, REPO, command_line, shown_path
from PIL import Image
from throughput import cli_env

#: (width, height, JPEG or PNG) of each case's sources, all RGB.
CASES: dict[str, tuple[int, int, str]] = {
    "jpeg24": (6000, 4000, "JPEG"),
    "png100": (12000, 8333, "PNG"),
}
SMOKE_SIZE = (1200, 900)
MB = 1_000_000
MAX_BYTES = 100 * 1024 * 1024


@dataclass
class Sample:
    """What the sampler saw of one run's process tree."""

    hwm: dict[int, int] = field(default_factory=dict)  # pid -> largest VmHWM seen (kB)
    peak_rss_sum: int = 0  # kB
    peak_pss_sum: int = 0  # kB


@dataclass(frozen=True)
class RunResult:
    wall: float
    sum_of_peaks: float
    peak_rss_sum: float
    peak_pss_sum: float
    supervisor: float
    largest_worker: float
    processes: int


def make_sources(corpus: Path, folder: Path, case: str, count: int, smoke: bool, seed: int = 0) -> list[Path]:
    """``count`` distinct sources of ``case``, made from ``corpus/large`` (kept if already there)."""
    width, height, fmt = CASES[case]
    if smoke:
        width, height = SMOKE_SIZE
    folder.mkdir(parents=True, exist_ok=True)
    photos = sorted((corpus / "large").glob("*.jpg"))
    if not photos:
        raise SystemExit(f"no JPEGs in {corpus / 'large'}")
    rng = random.Random(f"{seed}:{case}:{smoke}")
    made = []
    for index in range(count):
        path = folder / f"{case}-{index:02d}.{'png' if fmt == 'PNG' else 'jpg'}"
        made.append(path)
        choice, left, top, flip = rng.choice(photos), rng.random(), rng.random(), rng.random() < 0.5
        if path.exists():
            continue
        with Image.open(choice) as photo:
            photo = photo.convert("RGB")
        if fmt == "PNG":  # smoother, so that every PNG stays under the default byte limit (100 MiB)
            photo = photo.reduce(2)
        box_w, box_h = int(photo.width * 0.8), int(photo.height * 0.8)
        x, y = int((photo.width - box_w) * left), int((photo.height - box_h) * top)
        image = photo.crop((x, y, x + box_w, y + box_h)).resize((width, height), Image.Resampling.BICUBIC)
        del photo
        if flip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        partial = path.with_suffix(".partial")
        if fmt == "PNG":
            image.save(partial, "PNG", compress_level=1)
        else:
            image.save(partial, "JPEG", quality=90)
        if partial.stat().st_size > MAX_BYTES:
            raise SystemExit(f"{path.name} came out over the default byte limit: {partial.stat().st_size} bytes")
        partial.rename(path)
    return made


def children_of(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def tree_of(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += children_of(pid)
    return pids


def status_kb(pid: int) -> tuple[int, int] | None:
    """(VmHWM, VmRSS) in kB, or None for a process gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmHWM", "VmRSS")))
    except OSError:
        return None
    if "VmHWM" not in fields:
        return None
    return int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0])


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def sample_tree(root: int, sample: Sample, stop: threading.Event, interval: float) -> None:
    while not stop.is_set():
        rss_sum = pss_sum = 0
        for pid in tree_of(root):
            kb = status_kb(pid)
            if kb is None:
                continue
            sample.hwm[pid] = max(sample.hwm.get(pid, 0), kb[0])
            rss_sum += kb[1]
            pss_sum += pss_kb(pid)
        sample.peak_rss_sum = max(sample.peak_rss_sum, rss_sum)
        sample.peak_pss_sum = max(sample.peak_pss_sum, pss_sum)
        stop.wait(interval)


def run_submit(checkout: Path, folder: Path, workers: int, interval: float) -> RunResult:
    """One foreground submit into a fresh ledger, store and OUT, its process tree sampled."""
    with tempfile.TemporaryDirectory(prefix="thumbctl-memory-run-") as tmp:
        run_dir = Path(tmp)
        command = [sys.executable, "-m", "thumbctl", "submit", str(folder), "--out", str(run_dir / "out")]
        command += ["--db", str(run_dir / "ledger.db"), "-w", str(workers), "-q"]
        env = cli_env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), env.get("PYTHONPATH")]))
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env, cwd=checkout, stderr=subprocess.PIPE)
        sample, stop = Sample(), threading.Event()
        sampler = threading.Thread(target=sample_tree, args=(process.pid, sample, stop, interval))
        sampler.start()
        _, status, _ = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        stop.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        errors = process.stderr.read().decode(errors="replace") if process.stderr else ""
        if process.returncode != 0:
            raise SystemExit(f"submit exited {process.returncode}: {errors.strip()}")
    supervisor = sample.hwm.get(process.pid, 0)
    others = [kb for pid, kb in sample.hwm.items() if pid != process.pid]
    return RunResult(
        wall=wall,
        sum_of_peaks=sum(sample.hwm.values()) * 1024 / MB,
        peak_rss_sum=sample.peak_rss_sum * 1024 / MB,
        peak_pss_sum=sample.peak_pss_sum * 1024 / MB,
        supervisor=supervisor * 1024 / MB,
        largest_worker=max(others, default=0) * 1024 / MB,
        processes=len(sample.hwm),
    )


def median_result(runs: list[RunResult]) -> RunResult:
    def med(name: str) -> float:
        return statistics.median(getattr(r, name) for r in runs)

    return RunResult(
        *(med(n) for n in ("wall", "sum_of_peaks", "peak_rss_sum", "peak_pss_sum", "supervisor", "largest_worker")),
        processes=max(r.processes for r in runs),
    )


def table(rows: list[tuple[str, str, int, int, RunResult]]) -> str:
    lines = [
        "| checkout | case | sources | workers | sum of peaks MB | peak RSS sum MB | peak PSS sum MB "
        "| supervisor MB | largest worker MB | processes | wall s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, case, sources, workers, r in rows:
        lines.append(
            f"| {name} | {case} | {sources} | {workers} | {r.sum_of_peaks:.0f} | {r.peak_rss_sum:.0f} | "
            f"{r.peak_pss_sum:.0f} | {r.supervisor:.0f} | {r.largest_worker:.0f} | "
            f"{r.processes} | {r.wall:.2f} |"
        )
    return "\n".join(lines)


DECODE = """
import resource, sys, time
from thumbctl.imaging import SourceDecoder, decode_scale, pngstrips, probe
data = open(sys.argv[1], "rb").read()
pngstrips.MIN_PIXELS = 0 if sys.argv[2] == "bands" else 10**12
info = probe(__import__("io").BytesIO(data), data[:32], 100_000_000)
started = time.process_time()
SourceDecoder(data, "png", 100_000_000).decoded(decode_scale(info.width, info.height, 512))
print(time.process_time() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6)
"""


def bench_decode(path: Path, repeat: int) -> None:
    """CPU seconds and peak RSS of one whole and one banded decode, each in a fresh process."""
    runs: dict[str, list[tuple[float, float]]] = {"whole": [], "bands": []}
    for _ in range(repeat):
        for way in runs:
            done = subprocess.run([sys.executable, "-c", DECODE, str(path), way], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
            cpu, peak = map(float, done.stdout.split())
            runs[way].append((cpu, peak))
    print(f"`{command_line()}` (medians of {repeat})\n")
    print("| decode | CPU s | peak RSS MB |\n|---|---:|---:|")
    for way, values in runs.items():
        cpu = statistics.median(v[0] for v in values)
        print(f"| {way} | {cpu:.2f} | {statistics.median(v[1] for v in values):.0f} |")


def parse_checkouts(values: list[str]) -> dict[str, Path]:
    if not values:
        return {"this": REPO}
    checkouts = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--checkout takes NAME=DIR, not {value!r}")
        checkouts[name] = Path(path).resolve()
    return checkouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--cases", default="jpeg24,png100", help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--workers", default="1,8", help="comma-separated worker counts")
    parser.add_argument("--sources", type=int, default=8, help="sources per case (8: one per worker)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between samples")
    parser.add_argument("--checkout", action="append", default=[], help="NAME=DIR: a thumbctl checkout to run")
    parser.add_argument("--cache", type=Path, help="where the generated sources are kept (default: a temp folder)")
    parser.add_argument("--smoke", action="store_true", help="two 1 MP sources per case, 2 workers, one run")
    parser.add_argument("--decode", type=Path, help="PNG: CPU and peak of its whole and banded decode")
    args = parser.parse_args()
    if args.decode:
        bench_decode(args.decode, args.repeat)
        return
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)}")
    workers = [2] if args.smoke else [int(w) for w in args.workers.split(",")]
    count, repeat = (2, 1) if args.smoke else (args.sources, args.repeat)
    checkouts = parse_checkouts(args.checkout)
    own_cache = args.cache is None
    cache = args.cache or Path(tempfile.mkdtemp(prefix="thumbctl-memory-"))
    try:
        folders = {}
        for case in cases:
            folder = cache / (f"{case}-smoke" if args.smoke else case)
            make_sources(args.corpus, folder, case, count, args.smoke)
            folders[case] = folder
        results: dict[tuple[str, str, int], list[RunResult]] = {}
        for _ in range(repeat):
            for case in cases:
                for n in workers:
                    for name, checkout in checkouts.items():  # alternated: before, after, before, ...
                        results.setdefault((name, case, n), []).append(
                            run_submit(checkout, folders[case], n, args.interval)
                        )
    finally:
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
    rows = [(name, case, count, n, median_result(runs)) for (name, case, n), runs in results.items()]
    print(f"`{command_line()}` (corpus `{shown_path(args.corpus)}`; medians of {repeat} run(s); MB = 10^6 bytes)\n")
    print(table(rows))
    if args.smoke:
        print("\nsmoke run: figures unchecked")


if __name__ == "__main__":
    main()
