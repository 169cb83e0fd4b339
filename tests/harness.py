"""thumbctl in real processes: the one harness of every test that runs ``python -m thumbctl``.

:class:`Thumbctl` runs commands against one ledger (``THUMBCTL_DB``), optionally one store, host
identity and fault-injection folder (``THUMBCTL_FAULT_DIR``, see :mod:`thumbctl.core.faults`), and
captures their output. :meth:`Thumbctl.start` starts a command in the background in a process
group of its own (a supervisor, its workers and fork server: one ``killpg`` ends them all); any
still running when the test ends are killed by the ``leftover_processes`` fixture.

Waits are on observable events only: a checkpoint's marker file (:meth:`Thumbctl.paused`), a line
on a stream (:class:`Lines`), a process gone (:func:`all_gone`), or any condition (:func:`until`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

from thumbctl.core.proc import HOST_ID_ENV

#: Every background process started by a harness in this test process, for the cleanup fixture.
_STARTED: list[subprocess.Popen[str]] = []

POLL = 0.02

#: Commands :meth:`Thumbctl.json` runs in this process: they only read the ledger and print one
#: document, so a process of their own would add only its start-up (the state they read is made
#: by other, real processes).
READS_IN_PROCESS = frozenset({"status", "events"})


def until(condition: Callable[[], object], what: str, timeout: float = 60, *, every: float = POLL) -> object:
    """Wait until ``condition()`` is truthy (a state another process reaches) and return it;
    fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def all_gone(pids: Iterable[int], timeout: float = 20) -> list[int]:
    """Wait until none of ``pids`` is alive; return those still alive at the deadline."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(POLL)
    return left


def in_timed_sleep(pid: int, thread: int | None = None) -> bool:
    """Whether a thread of process ``pid`` (or its thread ``thread``, a native id) sleeps on a timer
    (``nanosleep``): SQLite's busy handler and the busy policy's pauses between tries do; a
    worker's heartbeat waits on an event instead."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    if thread is not None:
        tasks = [task for task in tasks if task.name == str(thread)]
    for task in tasks:
        try:
            if "nanosleep" in (task / "wchan").read_text():
                return True
        except OSError:
            continue
    return False


def sockets_of(pid: int) -> set[str]:
    """The sockets process ``pid`` holds open (``socket:[inode]``): a new one is a new connection."""
    found = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


class Lines:
    """Reads a pipe on a thread so a test can wait for a line without blocking forever."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} never appeared in: {''.join(self.seen)}")

    def rest(self) -> str:
        """Everything read so far and until the stream has been quiet for half a second."""
        while True:
            try:
                self.seen.append(self.lines.get(timeout=0.5))
            except queue.Empty:
                return "".join(self.seen)


class Background:
    """A thumbctl command running in the background, the leader of its own process group."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def communicate(self, timeout: float = 120) -> tuple[str, str]:
        """Wait for the command to end; its whole stdout and stderr."""
        return self.proc.communicate(timeout=timeout)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        """Wait for the command to end; its exit code and stderr."""
        _, stderr = self.communicate(timeout)
        return self.proc.returncode, stderr

    def follow_stderr(self) -> Lines:
        return Lines(self.proc.stderr)  # type: ignore[arg-type]

    def interrupt(self) -> None:
        """Ctrl-C in its terminal: SIGINT to the whole group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def kill(self, timeout: float = 10) -> None:
        """kill -9 of the whole group (supervisor, workers, fork server) at once."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=timeout)

    def kill_leader(self, timeout: float = 10) -> None:
        """kill -9 of the leader only: its workers live on, orphaned."""
        self.proc.kill()
        self.proc.wait(timeout=timeout)

    def describe(self) -> str:
        """Its output once it has ended (for a failure message)."""
        out, err = self.proc.communicate(timeout=10)
        return f"exit {self.proc.returncode}\nstdout: {out}\nstderr: {err}"


class Thumbctl:
    """``python -m thumbctl`` against one ledger, in real processes.

    ``db`` is the ledger (``THUMBCTL_DB``); ``store`` the object store (``THUMBCTL_STORE``, needed
    with PostgreSQL); ``host`` the host identity (``THUMBCTL_HOST_ID``); ``faults`` the folder of
    fault-injection markers (made when missing). ``base`` is the environment to start from (the
    test's own by default, read at each run); ``env`` adds or, with None, removes variables.
    """

    def __init__(
        self,
        db: str | Path,
        *,
        store: Path | None = None,
        host: str | None = None,
        faults: Path | None = None,
        base: Mapping[str, str] | None = None,
        env: Mapping[str, str | None] | None = None,
        timeout: float = 120,
    ) -> None:
        self.db = db
        self.store = store
        self.host = host
        self.faults = faults
        if faults is not None:
            faults.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.settings: dict[str, str | None] = {}
        if store is not None:
            self.settings["THUMBCTL_STORE"] = str(store)
        if host is not None:
            self.settings[HOST_ID_ENV] = host
        self.settings.update(env or {})
        self.timeout = timeout

    def environment(self, fault: str | None = None, **extra: str | None) -> dict[str, str]:
        """The environment of a command: ``fault`` is its ``THUMBCTL_FAULT`` rules (none by default)."""
        env = dict(os.environ if self.base is None else self.base)
        env["THUMBCTL_DB"] = str(self.db)
        if self.faults is not None:
            env["THUMBCTL_FAULT_DIR"] = str(self.faults)
        env.pop("THUMBCTL_FAULT", None)
        if fault:
            env["THUMBCTL_FAULT"] = fault
        for name, value in {**self.settings, **extra}.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    @staticmethod
    def command(*args: object) -> list[str]:
        return [sys.executable, "-m", "thumbctl", *(str(a) for a in args)]

    def run(
        self, *args: object, fault: str | None = None, timeout: float | None = None, **extra: str | None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command to its end, capturing stdout and stderr."""
        return subprocess.run(
            self.command(*args),
            env=self.environment(fault, **extra),
            capture_output=True,
            text=True,
            timeout=timeout or self.timeout,
        )

    def json(self, *args: object, codes: Iterable[int] | None = (0,), **extra: str | None) -> dict:
        """The ``--json`` document of a command that must exit with one of ``codes`` (None: any).

        A read of :data:`READS_IN_PROCESS` runs in this process (:meth:`invoke`) unless it waits
        (``--watch``, ``--follow``) or has settings of its own (``extra``, a fault rule, a ``base``
        environment: its own ``PYTHONPATH`` may hide a module)."""
        waits = {"--watch", "--follow"} & {str(a) for a in args}
        if str(args[0]) in READS_IN_PROCESS and not waits and not extra and self.base is None:
            done = self.invoke(*args, "--json")
        else:
            done = self.run(*args, "--json", **extra)
        assert codes is None or done.returncode in tuple(codes), (args, done.returncode, done.stderr)
        return json.loads(done.stdout)

    def invoke(self, *args: object) -> subprocess.CompletedProcess[str]:
        """Run a command in this process (Typer's test runner, as tests/test_cli.py does) in the
        environment :meth:`run` gives it, capturing stdout and stderr (and a traceback, if any)."""
        from typer.testing import CliRunner

        from thumbctl.cli.app import app

        env: dict[str, str | None] = {name: None for name in os.environ}
        env.update(self.environment())
        result = CliRunner().invoke(app, [str(a) for a in args], env=env, prog_name="thumbctl")
        stderr = result.stderr
        # exc_info is kept for every exit, an exit 0 included; an exception only for an error
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += "".join(traceback.format_exception(*result.exc_info))
        return subprocess.CompletedProcess(self.command(*args), result.exit_code, result.stdout, stderr)

    def start(self, *args: object, fault: str | None = None, **extra: str | None) -> Background:
        """Start a command in the background, in a process group of its own, stdout and stderr piped."""
        proc = subprocess.Popen(
            self.command(*args),
            env=self.environment(fault, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        _STARTED.append(proc)
        return Background(proc)

    # -- fault injection ----------------------------------------------------------------------

    def _faults(self) -> Path:
        assert self.faults is not None, "this harness was made without a faults folder"
        return self.faults

    def paused_pids(self, checkpoint: str) -> list[int]:
        """The processes paused at ``checkpoint`` now."""
        return [int(p.name.rsplit("-", 1)[1]) for p in self._faults().glob(f"paused-{checkpoint}-*")]

    def paused(
        self,
        checkpoint: str,
        count: int = 1,
        *,
        exclude: Iterable[int] = (),
        process: Background | None = None,
        timeout: float = 90,
    ) -> list[int]:
        """Wait until ``count`` processes (not in ``exclude``) are paused at ``checkpoint``; their
        pids. With ``process``, fail at once when that command ends first."""
        excluded = set(exclude)

        def enough() -> list[int] | None:
            pids = [pid for pid in self.paused_pids(checkpoint) if pid not in excluded]
            if len(pids) >= count:
                return pids
            if process is not None and not process.running():
                raise AssertionError(f"the command ended before {count} paused at {checkpoint}: {process.describe()}")
            return None

        return until(enough, f"{count} processes paused at {checkpoint}", timeout)  # type: ignore[return-value]

    def release(self) -> None:
        """Let every paused process go on (and any that reaches a pause later pass it)."""
        (self._faults() / "release").touch()

    def fired(self, checkpoint: str) -> bool:
        """Whether a ``:once`` rule at ``checkpoint`` has fired."""
        return (self._faults() / f"fired-{checkpoint}").exists()


def kill_leftovers() -> None:
    """Kill the process group of every background command of the test (a failed test leaves some
    running, or their orphaned workers); a group whose processes have all ended is skipped."""
    while _STARTED:
        proc = _STARTED.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
