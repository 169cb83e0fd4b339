"""A pool of worker processes and the supervising loop that acts on Ctrl-C flags.

A foreground ``submit`` forks its workers from itself before it opens any ledger
connection (:class:`Standby`): they wait for their configuration while the command
reads the sources, and cost neither a new interpreter nor a second import of
Pillow. Other workers (``work``, replacements of dead workers) are forked by a
``forkserver`` that has imported the worker's modules once, so a worker starts in
milliseconds, not as a new interpreter. They start with SIGINT blocked, then ignore it: a terminal's
Ctrl-C reaches the whole process group, and only the parent decides what it
means. A pool stops the fork server and resource tracker it started when it
closes, so no process outlives the command. The parent never holds a write
transaction while it waits on children; when a child dies it rescues the
dead child's leases at once and starts a replacement (unless the child never
took any work, several times in a row: then start-up itself is broken).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from ..core.errors import ExitCode, LedgerBusy, ThumbctlError
from ..core.proc import owner_id, owner_is_dead
from ..ledger import Ledger
from .worker import WorkerConfig
from .workerproc import LEDGER_FAULT_EXITS, worker_main


@dataclass(frozen=True)
class WorkerDeath:
    """A worker process that exited abnormally, and whether it had taken work first."""

    pid: int
    exitcode: int
    took_work: bool

    @property
    def how(self) -> str:
        """``killed by SIGKILL`` or ``exit status 137``."""
        if self.exitcode < 0:
            try:
                return f"killed by {signal.Signals(-self.exitcode).name}"
            except ValueError:
                return f"killed by signal {-self.exitcode}"
        return f"exit status {self.exitcode}"


class Pool:
    """``size`` worker processes. Stopping is by signal, so no shared semaphore can leak
    when the parent is killed.

    Each child gets one end of a pipe whose other end only this process holds: the child
    reads end-of-file there once its coordinator is gone (however early that happens), and
    writes a byte there after its first claim, which tells a worker that died at work (to
    be restarted) from one that died before taking any (a broken start-up).
    """

    def __init__(
        self, config: WorkerConfig, size: int, context: str = "forkserver", standby: Standby | None = None
    ) -> None:
        self.config = config
        self.size = max(1, size)
        self.context = context
        self.standby = standby
        self.stopping = False
        self.children: list[BaseProcess] = []
        self.crashes = 0
        #: Codes of the ledger faults that stopped workers (``ledger_full``, …): not crashes.
        self.ledger_faults: list[str] = []
        self._links: dict[BaseProcess, Connection] = {}
        self._open = False

    def start(self) -> None:
        global _open_pools
        if not self._open:
            self._open = True
            _open_pools += 1
        adopted = self.standby.hand_over(self.config, self.size) if self.standby is not None else []
        for child, link in adopted:
            self.children.append(child)
            self._links[child] = link
        for _ in range(self.size - len(adopted)):
            self._spawn()

    def close(self) -> None:
        """Kill any worker still running; the last pool to close stops the fork server and resource
        tracker launched for the pools (each would otherwise outlive the command for a while)."""
        global _open_pools
        self.kill()
        if self._open:
            self._open = False
            _open_pools -= 1
            if _open_pools == 0:
                stop_helpers()

    def wait(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, waking as soon as a worker exits."""
        sentinels = [child.sentinel for child in self.children]
        if sentinels:
            multiprocessing.connection.wait(sentinels, timeout)
        else:
            time.sleep(timeout)

    def _context(self) -> multiprocessing.context.BaseContext:
        """The start method's context, set up on the first spawn: a pool whose workers all came
        from :class:`Standby` never loads the fork server."""
        ctx = multiprocessing.get_context(self.context)
        if self.context == "forkserver":
            ctx.set_forkserver_preload(WORKER_PRELOAD)  # type: ignore[attr-defined]
        return ctx

    def _spawn(self) -> None:
        ctx = self._context()
        ours, theirs = ctx.Pipe()
        # Signals blocked: the fork server (if this start launches it) and every worker inherit
        # the mask; a worker unblocks once it ignores SIGINT (worker_main).
        child = _start_worker(ctx, (self.config, theirs), ours, theirs)
        self.children.append(child)
        self._links[child] = ours

    def _forget(self, child: BaseProcess) -> None:
        self.children.remove(child)
        link = self._links.pop(child, None)
        if link is not None:
            link.close()

    def _took_work(self, child: BaseProcess) -> bool:
        link = self._links.get(child)
        try:
            return link is not None and link.poll(0) and link.recv_bytes() == b"c"
        except (EOFError, OSError):
            return False

    def request_stop(self) -> None:
        """Workers finish the claim in hand, then exit (SIGTERM)."""
        self.stopping = True
        for child in self.children:
            child.terminate()

    def reap(self) -> list[WorkerDeath]:
        """Forget exited children; returns those that died abnormally."""
        deaths = []
        for child in [c for c in self.children if c.exitcode is not None]:
            child.join()
            if child.exitcode in _FAULT_OF_EXIT:
                self.ledger_faults.append(_FAULT_OF_EXIT[child.exitcode])
            elif child.exitcode != 0 and child.pid is not None:
                deaths.append(WorkerDeath(child.pid, child.exitcode, self._took_work(child)))
            self._forget(child)
        self.crashes += len(deaths)
        return deaths

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
        self._forget(child)

    def replace(self, count: int) -> None:
        if not self.stopping:
            for _ in range(count):
                self._spawn()

    def kill(self) -> None:
        """Terminate every worker now (second Ctrl-C); their leases are rescued later."""
        for child in self.children:
            child.kill()
        for child in list(self.children):
            child.join(timeout=5)
            self._forget(child)

    @property
    def alive(self) -> int:
        return len(self.children)


_FAULT_OF_EXIT = {status: code for code, status in LEDGER_FAULT_EXITS.items()}

#: Imported once by the fork server (or a submit, :class:`Standby`), before it forks any worker: the
#: worker loop, the file ledger and the retry it opens, and Pillow with the codecs it uses, including
#: those ``Image.open`` loads on first use (BMP, GIF, PPM), so a worker imports nothing once its batch
#: arrives. A name that cannot be imported (an optional plugin) is skipped.
WORKER_PRELOAD = [
    "thumbctl.engine.workerproc",
    "thumbctl.ledger.sqlite",
    "tenacity",
    "PIL.Image",
    "PIL.BmpImagePlugin",
    "PIL.GifImagePlugin",
    "PIL.JpegImagePlugin",
    "PIL.PpmImagePlugin",
    "PIL.PngImagePlugin",
    "PIL.WebPImagePlugin",
]


class Standby:
    """Worker processes forked from this process, waiting for their configuration.

    Forked before this process opens any ledger connection and while it runs no other
    thread (SQLite connections and held locks must not cross a fork), after it imported
    :data:`WORKER_PRELOAD`: a worker costs a fork, not an interpreter that imports Pillow
    again, and is ready before the batch is recorded. :meth:`hand_over` gives them to a
    pool; :meth:`close` ends those never handed over (each reads end-of-file and exits).
    With another thread running, none are forked and the pool starts its own.

    ``freeze``, for a process that ends with the command: everything allocated so far (the
    modules above all) is moved out of the collector's sight before the fork. The supervisor's
    full collections and those of its exit then no longer walk it (a tenth of a second of CPU
    at exit, measured, while one core idles), nor do the workers', whose copies of those pages
    stay shared. What it holds is never collected, so a long-lived process must not ask for it.
    """

    def __init__(self, count: int, *, freeze: bool = False) -> None:
        self.waiting: list[tuple[BaseProcess, Connection]] = []
        if count < 1 or threading.active_count() > 1:
            return
        for name in WORKER_PRELOAD:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        if freeze:
            gc.freeze()
        ctx = multiprocessing.get_context("fork")
        for _ in range(count):
            self._fork(ctx)

    def _fork(self, ctx: multiprocessing.context.BaseContext) -> None:
        ours, theirs = ctx.Pipe()
        # The child closes its copies of every end this process keeps (its own and the earlier
        # workers'), so each worker reads end-of-file once this process is gone.
        inherited = tuple(link for _, link in self.waiting) + (ours,)
        child = _start_worker(ctx, (None, theirs, inherited), ours, theirs)
        self.waiting.append((child, ours))

    def hand_over(self, config: WorkerConfig, count: int) -> list[tuple[BaseProcess, Connection]]:
        """Send ``config`` to up to ``count`` waiting workers and return them (child, link);
        any others are ended. A worker that died meanwhile is returned all the same: the pool
        reaps it like any other."""
        taken, self.waiting = self.waiting[:count], self.waiting[count:]
        for _, link in taken:
            with contextlib.suppress(OSError):
                link.send(config)
        self.close()
        return taken

    def close(self) -> None:
        """End the workers never handed over: their link closes, they exit; killed if they do not."""
        waiting, self.waiting = self.waiting, []
        for _, link in waiting:
            link.close()
        for child, _ in waiting:
            child.join(timeout=5)
            if child.exitcode is None:
                child.kill()
                child.join()

    def __enter__(self) -> Standby:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The helper processes multiprocessing launched for pools of this process ("server": the fork
#: server, "tracker": the resource tracker), by pid; stopped when the last pool closes.
_LAUNCHED: dict[str, int] = {}
_open_pools = 0


def _helpers() -> dict[str, object]:
    """multiprocessing's fork server and resource tracker objects of this process (private to
    multiprocessing: every use below falls back to doing nothing where a Python lacks them).
    Neither exists while its module is not imported (a submit whose workers are forked from it)."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    return {
        "server": getattr(forkserver, "_forkserver", None),
        "tracker": getattr(tracker, "_resource_tracker", None),
    }


def _helper_pids() -> dict[str, int | None]:
    """The pids of the fork server and resource tracker that this process launched (None: none)."""
    attribute = {"server": "_forkserver_pid", "tracker": "_pid"}
    return {name: getattr(helper, attribute[name], None) for name, helper in _helpers().items()}


def _start_worker(
    ctx: multiprocessing.context.BaseContext, args: tuple[object, ...], ours: Connection, theirs: Connection
) -> BaseProcess:
    """Start a worker process on ``args`` with signals blocked. The child has its own copy of
    ``theirs`` once started (forkserver: passed to it as a file descriptor, never inherited), so
    only it holds that end and only this process holds ``ours``; ``ours`` is closed if it fails."""
    try:
        with _launching(), _main_module_hidden():
            child = ctx.Process(target=worker_main, args=args, name="thumbctl-worker")
            child.start()
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return child


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """A fork-server child re-runs the parent's ``__main__`` (a script, or ``<stdin>``) before its
    target, unless it cannot find one: a program calling :func:`thumbctl.render` without an
    ``if __name__ == "__main__"`` guard would run again in every worker. A worker needs nothing
    from it (its target is :func:`~thumbctl.engine.workerproc.worker_main`), so while it starts, ``__main__``
    is an empty module."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


@contextlib.contextmanager
def _launching() -> Iterator[None]:
    """Signals blocked (whatever starts inside inherits the mask), and any helper process
    launched inside noted as ours to stop."""
    before = _helper_pids()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        for name, pid in _helper_pids().items():
            if pid is not None and pid != before[name]:
                _LAUNCHED[name] = pid


def stop_helpers() -> None:
    """Stop the fork server and resource tracker launched here (no others). Each exits once every
    process holding its pipe has closed it, so this waits for any worker still alive."""
    running = _helper_pids()
    ours = {name for name, pid in _LAUNCHED.items() if running[name] == pid}
    _LAUNCHED.clear()
    for name, helper in _helpers().items():
        stop = getattr(helper, "_stop", None)
        if name in ours and stop is not None:
            with contextlib.suppress(OSError):  # it died already and was reaped
                stop()


atexit.register(stop_helpers)  # a fork server started early for a run that never came


#: Workers that died before taking any work (a broken start-up, not a bad photo) tolerated in a row.
MAX_START_FAILURES = 3


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
    for owner in ledger.queue.overdue_owners(limit):
        child = pool.child_for(owner)
        if child is None:
            continue
        # Settle first: once the lease is gone nobody can rescue the items as a crash, and the
        # worker can no longer publish them. 0: the stage ended meanwhile; the worker goes on.
        detail = f"the decode or render took longer than {limit:g}s and was stopped"
        if ledger.queue.stop_overdue(owner, limit, "timeout", detail):
            pool.kill_child(child)
            pool.replace(1)


def _time_check_period(limit: float) -> float:
    """How often the time limit is checked: every second, or four times per limit when it is
    shorter, so a stage is stopped at most a quarter of its limit late (plus a tick)."""
    return min(1.0, limit / 4) if limit else 1.0


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
    on_worker_died: Callable[[WorkerDeath, bool], None] = lambda death, restarted: None,
    tick: float = 0.2,
) -> Supervision:
    """Run ``pool`` until its workers are idle and gone, acting on Ctrl-C presses.

    ``interrupts()`` is how many times the user pressed Ctrl-C (counted by a
    signal handler that does nothing else). The first press calls
    ``on_first_interrupt``; the second kills the workers and returns at once (two presses
    seen at one tick do both, in that order, so the cancel is recorded either way).
    A worker that dies is replaced (``on_worker_died`` hears of each death and whether
    it was); see :func:`_after_deaths` for why that cannot go on forever.
    """
    pool.start()
    handled = False
    start_failures = 0
    next_time_check = 0.0
    try:
        while True:
            ledger.check_file()  # before the ledger is touched: a -shm file made unwritable would kill this process
            presses = interrupts()
            if presses and not handled:  # also when both presses came within one tick
                handled = True
                on_first_interrupt()
            if presses >= 2:
                pool.kill()
                return Supervision(interrupted=True, killed=True, crashes=pool.crashes)
            if time.monotonic() >= next_time_check:
                next_time_check = time.monotonic() + _time_check_period(pool.config.item_timeout)
                with contextlib.suppress(LedgerBusy):  # past the busy policy's bound: again next check
                    _enforce_time_limit(ledger, pool)
            deaths = _without_bus_errors(ledger, pool, pool.reap())
            _stop_on_ledger_fault(ledger, pool)
            if deaths:
                start_failures = _after_deaths(ledger, pool, deaths, start_failures, on_worker_died)
            if pool.alive == 0:
                _raise_ledger_fault(ledger, pool)
                return Supervision(interrupted=handled, crashes=pool.crashes)
            on_tick()
            pool.wait(tick)
    except BaseException:
        pool.kill()
        raise
    finally:
        pool.close()


def _rescue(ledger: Ledger, pool: Pool) -> int | None:
    """Rescue dead workers' leases now; None when the ledger stayed busy past the busy policy's
    bound (a busy ledger does not end the run: the next claim of any worker rescues them)."""
    try:
        return ledger.queue.rescue_leases(owner_is_dead, pool.config.backoff.delay_for)
    except LedgerBusy:
        return None


def _stop_on_ledger_fault(ledger: Ledger, pool: Pool) -> None:
    """A worker stopped because the ledger failed (full, unwritable, damaged, gone): the other
    workers finish the claim in hand and stop too, and the run ends with that fault. The file
    is checked at once, so a deleted ledger never reads as a finished batch."""
    if pool.ledger_faults and not pool.stopping:
        pool.request_stop()
    ledger.check_file()


#: What a worker killed by SIGBUS on a SQLite ledger is taken for (see :func:`_without_bus_errors`).
_BUS_ERROR = "bus_error"


def _without_bus_errors(ledger: Ledger, pool: Pool, deaths: list[WorkerDeath]) -> list[WorkerDeath]:
    """``deaths`` less the workers killed by SIGBUS on a SQLite ledger, which stop the run as a ledger
    fault: SQLite maps the ledger's shared-memory file (``-shm``), and a page of it the file system
    refuses to back (made immutable, a full or failing disk) kills the process that touches it.
    Retrying would only kill the next worker the same way."""
    if ledger.backend != "sqlite":
        return deaths
    bus = [death for death in deaths if death.exitcode == -signal.SIGBUS]
    if bus:
        pool.ledger_faults.append(_BUS_ERROR)
        pool.crashes -= len(bus)
    return [death for death in deaths if death not in bus]


def _raise_ledger_fault(ledger: Ledger, pool: Pool) -> None:
    if pool.ledger_faults:
        ledger.check_file()
        code = pool.ledger_faults[0]
        if code == _BUS_ERROR:
            shm = f"{os.path.basename(ledger.path)}-shm"
            detail = f"a worker process was killed by SIGBUS: its shared-memory file {shm} could not be written"
            raise ledger.fault("ledger_io_error", detail)
        if code == "ledger_corrupt" and (damaged := ledger.upkeep.batch_document_fault()) is not None:
            raise damaged
        raise ledger.fault(code, "deleted or replaced" if code == "ledger_gone" else "a worker process met it")


def _after_deaths(
    ledger: Ledger,
    pool: Pool,
    deaths: list[WorkerDeath],
    start_failures: int,
    on_worker_died: Callable[[WorkerDeath, bool], None],
) -> int:
    """Rescue the dead workers' leases and start replacements; returns the start failures in a row.

    A worker that died after taking work is always replaced: every claim spends an attempt
    of the items it takes and a rescued item counts its attempt, so a source that kills every
    worker ends ``failed`` ``worker_crashed`` and stops being claimed; the restarts end with
    the work. Only workers that die before claiming anything, more than
    :data:`MAX_START_FAILURES` in a row, stop the run (:class:`WorkerStartFailed`).
    """
    rescued = _rescue(ledger, pool)
    for death in deaths:
        start_failures = 0 if death.took_work or rescued is None or rescued else start_failures + 1
    if start_failures > MAX_START_FAILURES:
        raise WorkerStartFailed(
            f"{start_failures} worker processes in a row died before taking any work; see the errors above"
        )
    for death in deaths:
        on_worker_died(death, not pool.stopping)
    pool.replace(len(deaths))
    return start_failures
