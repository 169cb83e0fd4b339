"""The two Rich consoles a reporter writes through, made when first used: a command that
prints nothing (``-q``, ``--json``) never imports Rich, about a third of its start."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console

#: Width of a console whose stream is not a terminal: tables there are not cut to 80 columns.
PIPE_WIDTH = 200


class PipeSafeConsole(Console):
    """A console whose reader may go away (``thumbctl submit … | head``, ``… 2>&1 | head``).

    Rich's default answer to a closed pipe is to exit with status 1 at once, which would
    abandon a foreground run half-way with its workers stopped. Here the console falls
    silent instead (its file descriptor now points at the null device) and the command
    carries on, so its work and its exit code are what they would have been.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.file.fileno())
        finally:
            os.close(devnull)


def stream_console(*, stderr: bool) -> PipeSafeConsole:
    """A console on stdout or stderr that decides for itself whether it is on a terminal: there,
    colour (unless NO_COLOR) and the terminal's width; elsewhere plain text, :data:`PIPE_WIDTH` wide."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPE_WIDTH
    no_color = bool(os.environ.get("NO_COLOR"))
    return PipeSafeConsole(stderr=stderr, highlight=False, no_color=no_color, soft_wrap=True, width=width)


def plain_console(*, stderr: bool, file: TextIO | None = None) -> Console:
    """A console on ``file`` (or the process's stream), for a reporter made in a program or a test."""
    return Console(file=file, stderr=stderr, highlight=False, soft_wrap=True)
