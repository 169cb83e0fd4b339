"""``thumbctl watch``: submit a folder again whenever its files settle (the loop is :mod:`thumbctl.engine.watch`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import ExitCode
from ..core.profile import parse_duration
from ..core.scanrules import ScanRules
from .options import StatsIntervalOption
from .resolution import settings_from_context
from .runs import (
    DeleteDroppedOption,
    DeleteExcludedOption,
    DeleteOption,
    ExcludeOption,
    IncludeOption,
    OverwriteOption,
    mirror_wanted,
    submit_session,
)
from .session import Interrupts, handled, parsed, reporter_for, settled

if TYPE_CHECKING:
    from ..engine.session import Mirror
    from ..engine.watch import WatchOptions

#: The shortest --poll-interval: a scan of the whole folder each time.
MIN_POLL_SECONDS = 0.1


def watch_command(
    ctx: typer.Context,
    directory: Annotated[
        str, typer.Argument(metavar="DIR", help="The folder to watch, scanned as submit scans a folder.")
    ],
    include: IncludeOption = None,
    exclude: ExcludeOption = None,
    overwrite: OverwriteOption = False,
    delete: DeleteOption = False,
    delete_dropped: DeleteDroppedOption = False,
    delete_excluded: DeleteExcludedOption = False,
    settle: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="How long every file's size and modification time must stay the same before a round reads the folder.",
        ),
    ] = "2s",
    poll: Annotated[
        bool,
        typer.Option(
            "--poll",
            help="Scan every --poll-interval instead of waiting for file events (network folders, where inotify "
            "sees nothing). Without watchfiles installed, it always polls.",
        ),
    ] = False,
    poll_interval: Annotated[str, typer.Option(metavar="DURATION", help="Time between scans when polling.")] = "1s",
    stats_interval: StatsIntervalOption = 5.0,
    json_out: bool = False,
    quiet: bool = False,
    verbose: bool = False,
) -> None:
    """Submit DIR as submit does, then again whenever its files have settled, until Ctrl-C.

    A round starts once no file in DIR has changed for --settle, so a file still being written is
    never read; unchanged files cost a stat (the stat cache). Each round prints one line (--json:
    one JSON object a line). Ctrl-C during a round cancels its batch durably, as submit's does
    (running the same watch again resumes it); it exits 130.
    """
    reporter = reporter_for(json_out, quiet, verbose, stats_interval)
    reporter.json_lines = json_out
    with handled(reporter):
        from ..engine.watch import Watcher, check_watchable  # only this command imports the watcher

        settings = settings_from_context(ctx)
        root = check_watchable(directory)
        mirror = mirror_wanted(delete, delete_dropped, False, delete_excluded)
        options = settings.submit_options(
            key=None, rules=ScanRules(include=tuple(include or ()), exclude=tuple(exclude or ())), overwrite=overwrite
        )
        watch_options = watch_options_of(settle, poll, poll_interval, mirror)
        db = settled(settings.ledger_path)
        session = submit_session(settings, reporter, db, options, settings.run_options())
        session.settle_store()  # once: the rounds' sessions leave the store as it is
        with Interrupts().on_sigint() as interrupts:
            watcher = Watcher(root, db, options, session.run_options, watch_options, reporter, interrupts.count)
            watcher.run()
        reporter.watch_stopped(watcher.rounds)
        raise typer.Exit(int(ExitCode.INTERRUPTED))


def watch_options_of(settle: str, poll: bool, poll_interval: str, mirror: Mirror | None) -> WatchOptions:
    """The loop's options from the flags: ``--poll-interval`` at least :data:`MIN_POLL_SECONDS`."""
    from ..engine.watch import WatchOptions

    every = parsed(parse_duration, poll_interval, "--poll-interval")
    if every < MIN_POLL_SECONDS:
        raise typer.BadParameter(f"at least {MIN_POLL_SECONDS:g}s", param_hint="--poll-interval")
    return WatchOptions(
        settle=parsed(parse_duration, settle, "--settle"),
        poll=poll,
        poll_seconds=every,
        mirror=mirror is not None,
        mirror_dropped=mirror is not None and mirror.dropped,
        mirror_excluded=mirror is not None and mirror.excluded,
    )
