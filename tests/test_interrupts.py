"""Ctrl-C at any moment of a command, in real processes: from thumbctl's first import on, one
``interrupted`` line and exit 130, never a traceback and never a half-recorded batch.

Before thumbctl is imported the interpreter is still starting: there, dying by SIGINT (or Python's
own failure to import its ``site`` or ``runpy`` module) is accepted, as long as no thumbctl module is
named. The
workers pause before their first decode, so every moment lands in a live command, never after it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.cli.session import interruptible

from harness import Thumbctl
from support import check_invariants, make_image

pytestmark = pytest.mark.timeout(300)

#: 20 moments from 0 to 0.5 s after exec: the interpreter starting, thumbctl's imports, Typer's
#: parsing, the ledger's opening and migration, the scan.
MOMENTS = tuple(n * 0.5 / 19 for n in range(20))
#: The two ways a user starts thumbctl.
ENTRY_POINTS = {
    "python-m": [sys.executable, "-m", "thumbctl"],
    "console-script": [str(Path(sys.executable).with_name("thumbctl"))],
}
#: How Python itself reports a SIGINT while it is still starting (before any thumbctl code runs).
INTERPRETER_STARTING = ("Fatal Python error: init_import_site", "Could not import runpy module")
#: Python swallowing the KeyboardInterrupt of a press while it starts (raised in an import lock's
#: weakref callback before any thumbctl code runs; in a command's body thumbctl notes such a press
#: and prints no such text): the interpreter then runs the command as if no key had been pressed.
SWALLOWED_WHILE_STARTING = "Exception ignored in: <function _get_module_lock"
#: A frame or line of thumbctl's own code in a traceback (not the editable install's finder).
THUMBCTL_CODE = re.compile(r"thumbctl[/.]")


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    for n, size in enumerate([(300, 200), (200, 300), (256, 256)]):
        make_image(tmp_path / "photos" / f"p{n}.jpg", size, "JPEG", seed=n)
    return tmp_path / "photos"


def interrupted_at(entry: list[str], moment: float, photos: Path, run: Path) -> subprocess.CompletedProcess[str]:
    """``submit`` started with ``entry``, Ctrl-C (SIGINT to its group) ``moment`` seconds after exec."""
    thumbctl = Thumbctl(run / "ledger.db", faults=run / "faults")
    proc = subprocess.Popen(
        [*entry, "submit", str(photos), "--out", str(run / "out"), "-w", "1"],
        env=thumbctl.environment("pause:before_decode"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(moment)
    os.killpg(proc.pid, signal.SIGINT)
    thumbctl.release()
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def check_outcome(done: subprocess.CompletedProcess[str], moment: float) -> None:
    """Exit 130 with one ``interrupted`` error line at the end (once the render has begun, after
    the run's own report of its cancel); or the interpreter still starting."""
    where = f"SIGINT at {moment:.3f}s: exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    if done.returncode == 130:
        assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, where
        lines = done.stderr.splitlines()
        assert [line for line in lines if line.startswith("error ")] == lines[-1:], where
        assert lines[-1].startswith("error [interrupted] "), where
        return
    if done.returncode == 0 and done.stderr.startswith(SWALLOWED_WHILE_STARTING):
        assert not THUMBCTL_CODE.search(done.stderr.split("KeyboardInterrupt", 1)[0]), where
        return
    starting = done.returncode == -signal.SIGINT or done.stderr.startswith(INTERPRETER_STARTING)
    assert starting and done.stdout == "", where
    assert not THUMBCTL_CODE.search(done.stderr), where


def check_ledger(db: Path) -> None:
    """No half-recorded batch: each batch in the ledger has all 9 items (3 photos, 3 ratios)."""
    if not db.exists():
        return
    with Ledger(db) as ledger:
        check_invariants(ledger, outputs=False)
        assert {batch.total for batch in ledger.views.batches()} <= {9}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS), ids=list(ENTRY_POINTS))
def test_ctrl_c_at_any_moment_of_submit_is_one_line_and_exit_130(entry: str, photos: Path, tmp_path: Path) -> None:
    codes = []
    for n, moment in enumerate(MOMENTS):
        run = tmp_path / f"run{n}"
        done = interrupted_at(ENTRY_POINTS[entry], moment, photos, run)
        check_outcome(done, moment)
        check_ledger(run / "ledger.db")
        codes.append(done.returncode)
    assert codes[-1] == 130, codes  # half a second after exec, thumbctl is running


class DroppedWithAPress:
    """An object whose finalizer gets a Ctrl-C, as an import lock's weakref callback can: Python
    swallows a KeyboardInterrupt raised there ("Exception ignored in …")."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)
        sum(range(1000))  # the handler runs here, inside the finalizer


def test_a_press_python_swallows_in_a_finalizer_still_ends_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    reached_the_end = False
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # as the command's process holds it
    try:
        with pytest.raises(KeyboardInterrupt), interruptible():
            DroppedWithAPress()
            reached_the_end = True
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    assert reached_the_end and unraisable == []  # ended interrupted, with no "Exception ignored" text
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sys.unraisablehook == unraisable.append


class PressedWhileNamed:
    """A class attribute whose ``__set_name__`` gets a Ctrl-C, as a dataclass field's can while a
    module is imported lazily in a command's body."""

    def __set_name__(self, owner: type, name: str) -> None:
        signal.raise_signal(signal.SIGINT)
        sum(range(1000))  # the handler runs here, inside __set_name__


def wrapped_press() -> None:
    """A press Python hands on wrapped in another exception (3.11 wraps a ``__set_name__`` error in a
    RuntimeError; the explicit wrap makes the case the same on every version)."""
    try:
        type("Named", (), {"field": PressedWhileNamed()})
    except KeyboardInterrupt as press:
        raise RuntimeError("made while a class was named") from press
    except RuntimeError as wrapped:
        assert isinstance(wrapped.__cause__, KeyboardInterrupt)
        raise


def test_a_press_python_wraps_in_another_error_still_ends_the_command_as_ctrl_c() -> None:
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with pytest.raises(KeyboardInterrupt), interruptible():
            wrapped_press()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    assert signal.SIGINT not in signal.sigpending()


def test_an_error_with_no_press_behind_it_is_left_as_it_is() -> None:
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with pytest.raises(RuntimeError, match="no press"), interruptible():
            raise RuntimeError("no press")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
