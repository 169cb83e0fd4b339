"""The worker process: its entry point, its signals, the configuration a worker forked ahead
of its batch waits for, and the exit statuses that carry a ledger fault to the supervisor.
"""

from __future__ import annotations

import signal
import sys
import threading
from multiprocessing.connection import Connection

from ..core.errors import LedgerFault
from .heap import keep_freed_memory
from .worker import Coordinator, WorkerConfig, run_worker


def worker_main(
    config: WorkerConfig | None, link: Connection | None = None, inherited: tuple[Connection, ...] = ()
) -> None:
    """Entry point of a worker process; ``link`` is its end of the pipe to the coordinator.

    Ctrl-C is the parent's to handle, so SIGINT is ignored. SIGTERM asks the
    worker to finish the claim in hand and exit; the handler only sets a flag.
    A worker forked ahead of its batch (``config`` None) first closes the coordinator's
    ends it ``inherited``, then waits for its configuration on ``link``; it exits if the
    coordinator closes the link instead. Its heap keeps freed memory for the next source
    (:mod:`thumbctl.engine.heap`).
    """
    stop = threading.Event()
    keep_freed_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    for end in inherited:
        end.close()
    if config is None:
        config = await_config(link, stop)
        if config is None:
            return
    try:
        run_worker(config, stop, coordinator=Coordinator(link))
    except LedgerFault as fault:  # the supervisor reports it, from the exit status: no traceback here
        sys.exit(LEDGER_FAULT_EXITS.get(fault.code, LEDGER_FAULT_EXITS["ledger_io_error"]))


def await_config(link: Connection | None, stop: threading.Event) -> WorkerConfig | None:
    """The configuration the coordinator sends a worker forked ahead of its batch; None when
    the coordinator closed the link (no batch to render) or is gone, or on SIGTERM (``stop``)."""
    try:
        while link is not None and not stop.is_set():
            if link.poll(0.1):
                return link.recv()
    except (EOFError, OSError):
        pass
    return None


#: Exit statuses of a worker that stopped because the ledger failed (not a crash: nothing is retried
#: as one); the supervisor turns them back into the error. Distinct from 1 and from signal deaths.
LEDGER_FAULT_EXITS: dict[str, int] = {
    "ledger_full": 90,
    "ledger_io_error": 91,
    "ledger_corrupt": 92,
    "ledger_gone": 93,
    "ledger_unavailable": 94,
}
