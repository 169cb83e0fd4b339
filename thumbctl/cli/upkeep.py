"""The upkeep commands: ``reconcile`` (findings and audited repairs), ``gc`` (retention) and ``release``
(names handed over to the user)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..config.options import DEFAULT_GRACE
from ..core.errors import ExitCode
from ..core.profile import parse_duration
from .resolution import settings_from_context
from .session import handled, open_ledger, parsed, reporter_for, settle_store

GraceOption = Annotated[
    str,
    typer.Option(
        "--grace",
        help=f"Temp files whose writer may still be running are left this long ({DEFAULT_GRACE / 3600:.0f}h).",
    ),
]


def reconcile_command(
    ctx: typer.Context,
    repair: Annotated[
        bool, typer.Option("--repair", help="Apply the safe repairs, each logged with its reason.")
    ] = False,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Read and decode every object, also those a cheaper check finds sound (a file unchanged "
            "since it last decoded; in a bucket, the right size and checksum by HEAD): finds damage no write made.",
        ),
    ] = False,
    restore_modified: Annotated[
        bool,
        typer.Option(
            "--restore-modified",
            help="With --repair, also put thumbctl's copy back at names a user changed (other bytes, a symlink); "
            "without it they are only reported.",
        ),
    ] = False,
    grace: GraceOption = "1h",
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Check the ledger against the outputs (local folders or s3:// prefixes): stalled leases, unfinished
    cancels, objects, friendly names, orphans, temp files. Live work is never touched; a name a user
    changed is reported, never overwritten unless asked. Exit 0 when clean, 1 when findings remain (for cron)."""
    from ..upkeep.inventory import store_location
    from ..upkeep.reconcile import reconcile

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        grace_seconds = parsed(parse_duration, grace, "--grace")
        settings = settings_from_context(ctx)
        with open_ledger(settings.ledger_path) as ledger:
            settle_store(ledger, reporter, settings)
            store = store_location(ledger, settings.store_path)
            report = reconcile(
                ledger,
                repair=repair,
                deep=deep,
                grace=grace_seconds,
                store=store,
                restore_modified=repair and restore_modified,
            )
        reporter.reconciled(report, repair=repair)
    raise typer.Exit(int(ExitCode.OK if report.clean else ExitCode.PARTIAL))


def gc_command(
    ctx: typer.Context,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Expire terminal batches whose last change is older, e.g. 30d.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would go; change nothing.")] = False,
    grace: GraceOption = "1h",
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Retention: expire old terminal batches, then remove objects no remaining batch references (checked
    by derivative key), their expired friendly names, stale temp files and expired batch manifests."""
    from ..upkeep.gc import collect_garbage
    from ..upkeep.inventory import store_location

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        age = parsed(parse_duration, older_than, "--older-than")
        grace_seconds = parsed(parse_duration, grace, "--grace")
        settings = settings_from_context(ctx)
        with open_ledger(settings.ledger_path) as ledger:
            if not dry_run:  # a dry run changes nothing, the old layout included
                settle_store(ledger, reporter, settings)
            store = store_location(ledger, settings.store_path)
            report = collect_garbage(ledger, age, dry_run=dry_run, grace=grace_seconds, store=store)
        reporter.garbage_collected(report)
        if report.errors:
            raise typer.Exit(int(ExitCode.PARTIAL))


def release_command(
    ctx: typer.Context,
    names: Annotated[
        list[str], typer.Argument(metavar="NAME...", help="Thumbnail names: paths in OUT, or s3:// URLs.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be released; change nothing.")] = False,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Hand published names over to you: thumbctl never reports, restores, replaces or removes them again,
    and a submit to one fails that item name_taken (--overwrite takes it back). The files stay as they are.
    Exit 1 when a name is not one thumbctl published."""
    from ..upkeep.release import release_names

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        settings = settings_from_context(ctx)
        with open_ledger(settings.ledger_path) as ledger:
            report = release_names(ledger, names, dry_run=dry_run)
        reporter.released(report)
    raise typer.Exit(int(ExitCode.PARTIAL if report.unknown else ExitCode.OK))
