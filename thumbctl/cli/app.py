"""The ``thumbctl`` command: parse, call the library, render. No SQL, no pixels.

The options are declared once, in :mod:`thumbctl.cli.options` (the settings from the settings table); a
command names the settings it takes and has ``--db``, ``--json``, ``-q``, ``-v`` where they mean something.
The commands live with their concept (:mod:`.runs`, :mod:`.status`, :mod:`.views`, :mod:`.upkeep`); this module
lists them, in the order the help shows them, and is the entry point.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from ..config.resolve import KEYS, environment_help
from ..core.errors import EXIT_CODE_MEANINGS, ExitCode, Interrupted, UsageError
from ..core.version import __version__
from .catalogue import catalogue_command
from .focus import focus_command
from .options import CONTEXT_SETTINGS, DbOption, JsonOption, QuietOption, VerboseOption, command
from .params import ClickException, ClickUsageError, NoArgsIsHelpError, PlainGroup
from .review import review_command
from .runs import cancel, retry, submit_command, work
from .session import held_press, reporter_for, runs_one_command
from .status import status
from .upkeep import gc_command, reconcile_command, release_command
from .views import codes_command, config_command, events, sheet, stats
from .watch import watch_command

#: The root help ends with the environment variables and the exit codes (once: not in every command's help).
ROOT_EPILOG = (
    environment_help() + "\n\n\b\nExit codes:\n" + "\n".join(f"  {int(c):<5}{m}" for c, m in EXIT_CODE_MEANINGS.items())
)

#: The root group's settings, shared by the whole app and the one-command app of :func:`app_for`.
ROOT = {
    "name": "thumbctl",
    "cls": PlainGroup,  # plain values skip Typer's pydantic conversion: see thumbctl.cli.params
    "help": (
        "Smart-cropped thumbnails in several aspect ratios, through a durable ledger: a SQLite file, or "
        "PostgreSQL for workers on many machines.\n\n"
        "--db, --json, -q and -v go before or after the command name. Shell completion: --install-completion."
    ),
    "epilog": ROOT_EPILOG,
    "context_settings": CONTEXT_SETTINGS,
    "no_args_is_help": True,
    "add_completion": True,
    "rich_markup_mode": None,
    "pretty_exceptions_enable": False,
}

#: Every setting: what `submit` and `config` take.
ALL_SETTINGS = tuple(key.name for key in KEYS if key.name != "db" and key.flag)
#: The settings of a run: what `retry` takes.
RUN_SETTINGS = ("workers", "item_timeout", "sheet", "max_failures", "store")
#: What `work` takes: a run's settings without the contact sheet.
WORK_SETTINGS = ("workers", "item_timeout", "max_failures", "store")


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"thumbctl {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Smart-cropped thumbnails in several aspect ratios, through a durable SQLite or PostgreSQL ledger."""


#: The commands, in the order the help lists them, each with its name and the setting options it takes.
COMMANDS: tuple[tuple[Callable[..., None], str, tuple[str, ...]], ...] = (
    (submit_command, "submit", ALL_SETTINGS),
    (watch_command, "watch", ALL_SETTINGS),
    (work, "work", WORK_SETTINGS),
    (status, "status", ()),
    (events, "events", ()),
    (retry, "retry", RUN_SETTINGS),
    (cancel, "cancel", ()),
    (stats, "stats", ()),
    (codes_command, "codes", ()),
    (config_command, "config", ALL_SETTINGS),
    (sheet, "sheet", ("out",)),
    (catalogue_command, "catalogue", ()),
    (focus_command, "focus", ()),
    (review_command, "review", ("sheet", "store")),
    (reconcile_command, "reconcile", ("store",)),
    (gc_command, "gc", ("store",)),
    (release_command, "release", ()),
)


def _app(commands: tuple[tuple[Callable[..., None], str, tuple[str, ...]], ...]) -> typer.Typer:
    built = typer.Typer(**ROOT)  # type: ignore[arg-type]
    built.callback()(_root)
    for body, name, settings in commands:
        command(built, name, settings=settings)(body)
    return built


@functools.cache
def whole_app() -> typer.Typer:
    """The app with every command: built on first use (the root help, completion, ``--version``, an
    unknown command, and callers such as tests), not at import, since one command line runs one command."""
    return _app(COMMANDS)


def __getattr__(name: str) -> typer.Typer:
    """:data:`app`, the whole app (:func:`whole_app`), read as a module attribute."""
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Root options that take a value: the word after one is not a command name.
_ROOT_VALUED = ("--db",)
#: Root options that may come before the command name and still run one command.
_ROOT_FLAGS = ("--json", "--quiet", "-q", "--verbose", "-v")


def app_for(args: list[str]) -> typer.Typer:
    """The app that runs ``args``: built with only the command they name, when they name one. Typer
    builds the options of every command it holds before it runs one (``docs/architecture.md``,
    "Start-up"); the root help, completion, ``--version`` and unknown commands take
    the whole app (:func:`whole_app`), and a command's own help, parsing and errors are the same in both."""
    if "_THUMBCTL_COMPLETE" in os.environ:
        return whole_app()
    words = iter(args)
    for word in words:
        if word in _ROOT_VALUED:
            next(words, None)
        elif word.startswith(tuple(f"{option}=" for option in _ROOT_VALUED)) or word in _ROOT_FLAGS:
            continue
        else:
            named = [entry for entry in COMMANDS if entry[1] == word]
            return _app(tuple(named)) if named else whole_app()
    return whole_app()


def main(argv: list[str] | None = None) -> None:
    """The ``thumbctl`` entry point: Click's usage errors become one line with a stable code too, and
    a Ctrl-C at any moment one ``interrupted`` line and exit 130 (see :func:`.session.interruptible`)."""
    if argv is None:
        runs_one_command()
    args = sys.argv[1:] if argv is None else argv
    try:
        code = _run(args)
    except (KeyboardInterrupt, typer.Abort):  # a press that reached Click, outside a command's body
        code = _interrupted()
    sys.stdout.flush()
    if held_press():  # pressed as the command ended, or before a command that never let it act
        code = _interrupted()
    sys.exit(code)


def _run(args: list[str]) -> int:
    """Run the command line ``args``; its exit code."""
    try:
        code = app_for(args)(args=args, prog_name="thumbctl", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # bare `thumbctl`: the help, as Click shows it
        exc.show()
        return int(ExitCode.USAGE)
    except ClickException as exc:
        reporter = reporter_for("--json" in args)
        hint = exc.ctx.command_path if isinstance(exc, ClickUsageError) and exc.ctx is not None else "thumbctl"
        message = f"{exc.format_message()} (see {hint} --help)"
        reporter.error(UsageError(message))
        return int(ExitCode.USAGE)
    return code if isinstance(code, int) else 0


def _interrupted() -> int:
    """One ``interrupted`` line on stderr (not a second document on stdout: the command may have
    written its own); exit 130."""
    reporter_for(False).error(Interrupted("interrupted"))
    return int(ExitCode.INTERRUPTED)
