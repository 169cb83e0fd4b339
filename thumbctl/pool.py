"""A pool of worker processes and the supervising loop that acts on Ctrl-C flags.

Workers are started from an explicit ``spawn`` context with SIGINT blocked,
then ignore it: a terminal's Ctrl-C reaches the whole process group, and
only the parent decides what it means. The parent never holds a write
transaction while it waits on children; when a child dies it rescues the
dead child's leases at once and starts a replacement.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from .errors import ExitCode, ThumbctlError
from .ledger import Ledger
from .proc import owner_id, owner_is_dead
from .worker import WorkerConfig, worker_main


class Pool:
    """``size`` worker processes. Stopping is by signal, so no shared semaphore can leak
    when the parent is killed."""

    def __init__(self, config: WorkerConfig, size: int, context: str = "spawn") -> None:
        self.config = config
        self.size = max(1, size)
        self.ctx = multiprocessing.get_context(context)
        self.stopping = False
        self.children: list[BaseProcess] = []
        self.crashes = 0

    def start(self) -> None:
        for _ in range(self.size):
            self._spawn()

    def _spawn(self) -> None:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            child = self.ctx.Process(target=worker_main, args=(self.config,), name="thumbctl-worker")
            child.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        self.children.append(child)

    def request_stop(self) -> None:
        """Workers finish the claim in hand, then exit (SIGTERM)."""
        self.stopping = True
        for child in self.children:
            child.terminate()

    def reap(self) -> int:
        """Forget exited children; returns how many of them died abnormally."""
        crashed = 0
        for child in [c for c in self.children if c.exitcode is not None]:
            child.join()
            self.children.remove(child)
            if child.exitcode != 0:
                crashed += 1
        self.crashes += crashed
        return crashed

    def child_for(self, owner: str) -> BaseProcess | None:
        """The live child whose lease owner id is ``owner``."""
        for child in self.children:
            if child.pid is not None and owner_id(child.pid) == owner:
                return child
        return None

    def kill_child(self, child: BaseProcess) -> None:
        """Kill one worker on purpose; it is not counted as a crash."""
        child.kill()
        child.join(timeout=5)
        self.children.remove(child)

    def replace(self, count: int) -> None:
        if not self.stopping:
            for _ in range(count):
                self._spawn()

    def kill(self) -> None:
        """Terminate every worker now (second Ctrl-C); their leases are rescued later."""
        for child in self.children:
            child.kill()
        for child in self.children:
            child.join(timeout=5)
        self.children.clear()

    @property
    def alive(self) -> int:
        return len(self.children)


#: Worker deaths with no lease held (a broken start-up, not a bad photo) tolerated in a row.
MAX_IDLE_CRASHES = 3


class WorkerStartFailed(ThumbctlError):
    """Worker processes keep dying before they take any work."""

    code = "worker_start_failed"
    exit_code = ExitCode.PARTIAL


def _enforce_time_limit(ledger: Ledger, pool: Pool) -> None:
    """Kill workers whose current stage (a source's decode, or one render) has run past the time
    limit; its items fail ``timeout`` and the rest of the claim goes back to the queue."""
    limit = pool.config.item_timeout
    if not limit:
        return
    for owner in ledger.overdue_owners(limit):
        child = pool.child_for(owner)
        if child is None:
            continue
        # Settle first: once the lease is gone nobody can rescue the items as a crash, and the
        # worker can no longer publish them. 0: the stage ended meanwhile; the worker goes on.
        detail = f"the decode or render took longer than {limit:g}s and was stopped"
        if ledger.stop_overdue(owner, limit, "timeout", detail):
            pool.kill_child(child)
            pool.replace(1)


@dataclass(frozen=True)
class Supervision:
    """How a supervised run ended."""

    interrupted: bool = False
    killed: bool = False
    crashes: int = 0


def supervise(
    ledger: Ledger,
    pool: Pool,
    *,
    interrupts: Callable[[], int],
    on_first_interrupt: Callable[[], None],
    on_tick: Callable[[], None],
    tick: float = 0.2,
) -> Supervision:
    """Run ``pool`` until its workers are idle and gone, acting on Ctrl-C presses.

    ``interrupts()`` is how many times the user pressed Ctrl-C (counted by a
    signal handler that does nothing else). The first press calls
    ``on_first_interrupt``; the second kills the workers and returns at once.
    """
    pool.start()
    handled = False
    idle_crashes = 0
    try:
        while True:
            presses = interrupts()
            if presses >= 2:
                pool.kill()
                return Supervision(interrupted=True, killed=True, crashes=pool.crashes)
            if presses == 1 and not handled:
                handled = True
                on_first_interrupt()
            _enforce_time_limit(ledger, pool)
            crashed = pool.reap()
            if crashed:
                rescued = ledger.rescue_leases(owner_is_dead, pool.config.backoff.delay_for)
                idle_crashes = 0 if rescued else idle_crashes + crashed
                if idle_crashes > MAX_IDLE_CRASHES:
                    raise WorkerStartFailed(
                        f"{idle_crashes} worker processes died without holding any work; see the errors above"
                    )
                pool.replace(crashed)
            if pool.alive == 0:
                return Supervision(interrupted=handled, crashes=pool.crashes)
            on_tick()
            time.sleep(tick)
    except BaseException:
        pool.kill()
        raise
