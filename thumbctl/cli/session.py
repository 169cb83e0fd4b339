"""The running command: its reporter, the one place where errors become exit codes, the ledger it
opens and the store bound to it, and Ctrl-C counted rather than raised."""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..config.resolve import default_ledger_path, old_default_ledger_path
from ..core.errors import ExitCode, Interrupted, LedgerMissing, StorageError, ThumbctlError
from ..core.profile import SettingError

if TYPE_CHECKING:
    from ..config.resolve import Settings
    from ..ledger import Ledger
    from ..report.reporter import Reporter
    from ..upkeep.leftovers import CleanUp


def reporter_for(
    json_mode: bool, quiet: bool = False, verbose: bool = False, interval: float = 5.0, *, json_lines: bool = False
) -> Reporter:
    """All output goes through this: results on stdout, progress, hints and errors on stderr;
    ``json_lines`` (``--jsonl``) is JSON mode with one object a line."""
    from ..report.reporter import Reporter

    reporter = Reporter.for_streams(
        json_mode=json_mode or json_lines, quiet=quiet, verbose=verbose, progress_interval=interval
    )
    reporter.json_lines = json_lines
    return reporter


@dataclass
class RunningCommand:
    """The running command: its reporter, for the notes opening a ledger gives (said once)."""

    reporter: Reporter
    #: The default ledger as settled for this command (see :func:`settled`).
    ledgers: dict[Path, Path] = field(default_factory=dict)


#: Whether this process runs one command line and then ends (the console script, ``python -m thumbctl``).
_ONE_COMMAND: list[bool] = [False]


def runs_one_command() -> None:
    """Note that this process runs one command line and ends, and freeze what it has loaded."""
    _ONE_COMMAND[0] = True
    freeze_loaded()


def freeze_loaded() -> None:
    """In a process that runs one command and ends: move every object that exists now out of the
    cyclic collector's reach (``gc.freeze``). What is loaded by now lives as long as the process, so
    no collection, the one as the interpreter ends included, walks it again. In-process callers
    (``main(argv)``, tests) are left as they are."""
    if _ONE_COMMAND[0]:
        gc.freeze()


RUNNING: ContextVar[RunningCommand | None] = ContextVar("thumbctl_command", default=None)


@contextmanager
def handled(reporter: Reporter) -> Iterator[None]:
    """The one place where errors become exit codes."""
    token = RUNNING.set(RunningCommand(reporter))
    try:
        with interruptible():
            yield
    except ThumbctlError as err:
        reporter.error(err)
        raise typer.Exit(int(err.exit_code)) from None
    except KeyboardInterrupt:
        reporter.error(Interrupted("interrupted"))
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except BrokenPipeError:
        silence_broken_pipe()
        raise typer.Exit(int(ExitCode.OK)) from None
    except OSError as exc:  # a filesystem refusal the library did not expect: one line, not a traceback
        where = f" ({exc.filename})" if exc.filename else ""
        reporter.error(StorageError(f"{exc.strerror or exc}{where}"))
        raise typer.Exit(int(ExitCode.PARTIAL)) from None
    finally:
        RUNNING.reset(token)


@contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C acts in here: a press raises KeyboardInterrupt (or is counted, under
    :meth:`Interrupts.on_sigint`). The command's process holds Ctrl-C back from its first import on
    (``thumbctl/__init__.py``); a press held back until now is delivered here at once, and one after
    this ends is held for :func:`held_press`. In a process that does not hold it (a library caller,
    tests in process), Ctrl-C is left as it is."""
    if signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        yield
        return
    presses: list[int] = []

    def on_press(signum: int, frame: Any) -> None:
        """Note the press, then Python's own Ctrl-C (KeyboardInterrupt)."""
        presses.append(signum)
        signal.default_int_handler(signum, frame)

    unraisable = sys.unraisablehook

    def quiet_press(args: Any) -> None:
        """A press raised where Python cannot raise it is noted already: no "Exception ignored" text."""
        if not issubclass(args.exc_type, KeyboardInterrupt):
            unraisable(args)

    previous = signal.signal(signal.SIGINT, on_press)
    sys.unraisablehook = quiet_press
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        yield
    except typer.Exit:
        raise_if_swallowed(presses)
        raise
    except Exception as exc:
        if presses and caused_by_press(exc):
            raise KeyboardInterrupt from exc
        raise
    else:
        raise_if_swallowed(presses)
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = unraisable
        hold_ctrl_c()


def raise_if_swallowed(presses: list[int]) -> None:
    """A press whose KeyboardInterrupt Python swallowed (raised inside a weakref callback or a
    ``__del__``, such as an import lock's) still ends the command."""
    if presses:
        raise KeyboardInterrupt


def caused_by_press(exc: BaseException) -> bool:
    """Whether ``exc`` wraps a KeyboardInterrupt: Python turns a press raised while a class is made
    (``__set_name__``, such as a dataclass field's, during a lazy import) into a RuntimeError."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def hold_ctrl_c() -> None:
    """Hold Ctrl-C back again; a press that came just before (raised as the mask was set) is made
    pending again rather than lost."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except KeyboardInterrupt:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        signal.raise_signal(signal.SIGINT)


def held_press() -> bool:
    """Whether a Ctrl-C is held back, pending: pressed after the command's body ended (its output
    written, its transactions committed or rolled back), or in a command that never let it act."""
    return signal.SIGINT in signal.sigpending()


def silence_broken_pipe() -> None:
    """After a closed pipe, point stdout at /dev/null so the exit flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def settled(path: Path | str) -> Path | str:
    """The ledger to open for ``path``. For the default ledger, one left at the old default place
    (the config folder) is moved to the state folder first when that is safe, once per command,
    and the user is told once (see :func:`thumbctl.ledger.home.settle_default_ledger`)."""
    if not isinstance(path, Path) or path != default_ledger_path():
        return path
    command = RUNNING.get() or RunningCommand(reporter_for(False, quiet=True))
    if path not in command.ledgers:
        from ..ledger.home import settle_default_ledger  # the ledger package loads only for a command that opens one

        home = settle_default_ledger(path, old_default_ledger_path())
        command.ledgers[path] = home.path
        if home.note:
            command.reporter.notice(home.note)
    return command.ledgers[path]


def open_ledger(target: Path | str, *, existing: bool = True, read_only: bool = False) -> Ledger:
    """The ledger at ``target`` (see :func:`thumbctl.cli.resolution.ledger_target`). Commands that only read
    or act on recorded batches need it to exist: a mistyped --db must not create a new, empty ledger.
    Commands that only read open it ``read_only``, so they work on a read-only mount too."""
    from ..ledger import Ledger  # loaded here, not at start: --version and --help never open a ledger

    target = settled(target)
    return Ledger(existing_ledger(target) if existing else target, read_only=read_only)


def existing_ledger(path: Path | str) -> Path | str:
    """``path`` if a ledger is there; a mistyped --db (or THUMBCTL_DB) is an error, not a new ledger.
    A server ledger is checked by connecting to it."""
    if isinstance(path, str):
        return path
    path = settled(path)
    if not path.exists():
        raise LedgerMissing(f"no ledger at {path}: nothing was submitted with this --db (or THUMBCTL_DB)")
    return path


def settle_store(ledger: Ledger, reporter: Reporter, settings: Settings) -> None:
    """Before a command writes: the store settled with the ledger (see :func:`thumbctl.upkeep.migrate.settle_store`),
    and the one-time layout migration, if it ran, reported."""
    from ..upkeep import migrate

    migrated = migrate.settle_store(ledger, settings.store_path)
    if migrated is not None:
        reporter.layout_migrated(migrated)


def clean_up(ledger: Ledger, reporter: Reporter) -> None:
    """Before ``work``: what a crashed earlier run left in every OUT the ledger knows and in the store
    is cleared (see :func:`thumbctl.upkeep.leftovers.clean_up_after_crashes`), and said."""
    from ..upkeep.leftovers import clean_up_after_crashes

    crash_cleared(reporter, clean_up_after_crashes(ledger))


def crash_cleared(reporter: Reporter, done: CleanUp) -> None:
    """What clearing a crashed run's leftovers did, said when it did anything."""
    if done.temp_files or done.requeued:
        reporter.notice(
            f"cleared what a crashed run left: {done.temp_files} temp file(s) removed, "
            f"{done.requeued} thumbnail(s) queued to be recorded"
        )


def parsed(parse: Callable[[str], Any], value: str | None, flag: str) -> Any:
    """``value`` parsed; a bad one is a usage error naming ``flag``."""
    if value is None:
        return None
    try:
        return parse(value)
    except SettingError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from exc


class Interrupts:
    """Counts Ctrl-C presses. The signal handler only counts; the main loops act on it."""

    def __init__(self) -> None:
        self.presses = 0

    def __call__(self) -> bool:
        return self.presses > 0

    def count(self) -> int:
        return self.presses

    @contextmanager
    def on_sigint(self) -> Iterator[Interrupts]:
        """Count SIGINT (Ctrl-C) and SIGTERM (a service manager's stop) as presses."""

        def handler(signum: int, frame: Any) -> None:
            self.presses += 1

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
