"""Two hosts that share only a PostgreSQL ledger and an S3 bucket, under faults (tests/chaos.py).

The short version of ``bench/chaos.py``: one batch of ``s3://`` and ``http://`` sources rendered
into an S3 store and an S3 OUT by two hosts (separate process trees, HOME, TMPDIR and host ids).
One host is killed with ``kill -9`` while it holds leases, the S3 server is restarted while the
other works, and a fault proxy answers a share of S3 requests with 500 or 503, or slowly. Nothing
may be lost or published twice, nothing published after a cancel, and reconcile must be clean.
A cancel recorded while the S3 server is down, with a dead host's leases expiring after it (or in
the middle of their rescue), must end the batch ``cancelled`` without reconcile.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import Site, run_outage_cancel_round, run_round
from faultproxy import FaultMix, FaultProxy
from httpserver import HttpServer
from s3 import WeedServer, s3_env_or_skip, weed_binary

pytestmark = pytest.mark.timeout(480)

SOURCES = 8
FAULTS = FaultMix(error=0.05, busy=0.05, slow=0.05, delay=0.3)


@pytest.fixture
def site(tmp_path: Path, pg_url: str, http_server: HttpServer) -> Iterator[Site]:
    """A server of the test's own (it is restarted), behind a fault proxy."""
    s3_env_or_skip()
    server = WeedServer(weed_binary() or "weed")
    proxy = FaultProxy(server.endpoint, seed=22).start()
    site = Site(tmp_path, pg_url, server, http_server, proxy)
    try:
        yield site
    finally:
        site.close()
        proxy.stop()
        server.stop()


@pytest.mark.parametrize("cancel", [False, True], ids=["finish", "cancel"])
def test_two_hosts_sharing_only_the_ledger_and_the_bucket_lose_nothing_under_faults(site: Site, cancel: bool) -> None:
    counts = run_round(site, sources=SOURCES, cancel=cancel, faults=FAULTS, ratios="1:1")
    print(f"\nchaos ({'cancel' if cancel else 'finish'}): {counts}")
    assert counts.problems == [] and counts.violations == 0
    assert counts.items == SOURCES and counts.taken_back >= 2  # the victim held two items when it died
    assert sum(counts.faults.values()) > 0  # faults were injected
    if cancel:
        assert counts.cancelled > 0 and counts.succeeded + counts.cancelled == counts.items
    else:
        assert counts.succeeded == counts.items


@pytest.mark.parametrize(
    ("race", "store_down"),
    [(False, True), (True, True), (True, False)],
    ids=["cancel-then-expiry", "cancel-during-rescue", "cancel-during-rescue-store-up"],
)
def test_a_cancel_recorded_while_the_store_is_down_finishes_without_reconcile(
    site: Site, race: bool, store_down: bool
) -> None:
    """The red-team's stuck batch: the store down, a cancel recorded, a dead host's leases expiring
    (rescued after the cancel, or by a rescue the cancel commits in the middle of), the store back:
    the batch ends ``cancelled`` by the survivor's ``work`` alone; and the same with the store up."""
    state, counts = run_outage_cancel_round(site, race=race, store_down=store_down)
    assert state == "cancelled", counts.problems
    assert (counts.items, counts.cancelled) == (2, 2)
    assert counts.problems == [] and counts.violations == 0
