"""One worker process: its claim loop. Claim a source's items under a lease (kept alive by a
heartbeat thread, :mod:`thumbctl.engine.lease`), process the claim (:mod:`thumbctl.engine.claimrun`:
decode once, render once per derivative key, publish each item exactly once), and claim again until
idle, stopped, or the coordinator is gone; between empty claims the worker waits a little longer
each time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from ..config.s3location import S3Options
from ..core.faults import Faults
from ..core.proc import owner_id
from ..core.retries import Backoff
from ..storage.locations import use_options
from .claimrun import ClaimRun
from .heap import release_freed_memory
from .lease import Heartbeat, open_ledger, take_claim
from .rendering import Renderer


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker process of a pool is told (picklable, for spawn)."""

    db_path: str
    batch_id: str | None = None
    until_idle: bool = True
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 10.0
    #: The longest wait between two empty claims (see :func:`idle_waits`).
    poll_seconds: float = 0.25
    backoff: Backoff = field(default_factory=Backoff)
    #: Time limit in seconds for each stage of a claim: the source's decode, and each render
    #: (with the publishes of its items); 0 for none.
    item_timeout: float = 300.0
    #: The S3 settings the stores and targets of ``s3://`` locations are opened with.
    s3: S3Options = field(default_factory=S3Options)


class Coordinator:
    """A worker's end of the pipe its coordinator (the pool's process) holds the other end of.

    The coordinator writes nothing to it after the configuration of a worker forked ahead
    of its batch (read before this is made), so the end reading ready means end-of-file:
    the coordinator is gone (even if it died before this process began to run), whoever
    the parent process is now. The worker writes one byte after its first claim, so the
    coordinator can tell a worker that died at work from one that never started.
    """

    def __init__(self, link: Connection | None = None) -> None:
        self.link = link
        self._reported = False

    def gone(self) -> bool:
        return self.link is not None and self.link.poll(0)

    def took_work(self) -> None:
        if self.link is not None and not self._reported:
            self._reported = True
            with contextlib.suppress(OSError):  # the coordinator died meanwhile; gone() says so next
                self.link.send_bytes(b"c")


def run_worker(
    config: WorkerConfig,
    stop: threading.Event,
    faults: Faults | None = None,
    coordinator: Coordinator | None = None,
    renderer: Renderer | None = None,
) -> int:
    """Claim and process until idle (``until_idle``), ``stop`` is set or the coordinator is gone;
    returns claims processed. An orphaned worker finishes the source in hand, then exits."""
    faults = faults or Faults()
    faults.hit("worker_start")
    use_options(config.s3)
    coordinator = coordinator or Coordinator()
    owner = owner_id()
    processed = 0
    waits = idle_waits(config.poll_seconds)
    rested = True
    with (
        open_ledger(config.db_path) as ledger,
        Heartbeat(config.db_path, config.lease_seconds, config.heartbeat_seconds) as heartbeat,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="temp-writer") as writer,
    ):
        while not stop.is_set() and not coordinator.gone():
            claim, idle = take_claim(
                ledger,
                owner,
                batch_id=config.batch_id,
                lease_seconds=config.lease_seconds,
                delay_for=config.backoff.delay_for,
                until_idle=config.until_idle,
            )
            if claim is None:
                if idle:
                    break
                if not rested:  # the heap kept for the next source is not needed while there is none
                    release_freed_memory()
                    rested = True
                faults.hit("ran_dry")
                stop.wait(next(waits))
                continue
            waits = idle_waits(config.poll_seconds)
            rested = False
            coordinator.took_work()
            with heartbeat.tracking(claim.token) as lost:
                ClaimRun(ledger, claim, faults, config.backoff.delay_for, lost, writer, renderer).run()
            processed += 1
    return processed


#: The first wait of a worker whose claim came back empty.
FIRST_IDLE_WAIT = 0.02


def idle_waits(longest: float) -> Iterator[float]:
    """The waits between a worker's empty claims: 20 ms, doubling up to ``longest``. At the end
    of a batch a worker runs dry while another finishes the last source; the batch is done
    only when both have stopped, and with a fixed ``longest`` wait the idle one would notice
    up to that long after the last publish. Doubling, it notices within about as long
    again as it waited, and a worker left idle soon asks at the ``longest`` pace."""
    wait = min(FIRST_IDLE_WAIT, longest)
    while True:
        yield wait
        wait = min(wait * 2, longest)
