"""The commands that render or stop rendering: ``submit``, ``work``, ``retry`` and ``cancel``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from ..core.errors import ExitCode, Interrupted, UsageError
from ..core.models import BatchState, ItemState
from ..core.profile import URL_NOT_SUPPORTED, SettingError, parse_duration, refuse_url
from ..core.scanrules import ScanRules
from ..ledger.home import shown
from .options import BatchAlias, StatsIntervalOption, batch_argument, one_batch
from .resolution import ledger_target, settings_from_context
from .session import (
    Interrupts,
    clean_up,
    existing_ledger,
    freeze_loaded,
    handled,
    open_ledger,
    parsed,
    reporter_for,
    settle_store,
    settled,
)

if TYPE_CHECKING:
    from ..config.options import RunOptions
    from ..core.models import BatchView
    from ..engine.pool import Standby
    from ..intake.submission import IntakeReport
    from ..report.reporter import Reporter
    from ..sources.scan import ScanError
    from ..upkeep.mirror import FolderView

OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace a file at a thumbnail's name that thumbctl did not publish (else the item fails name_taken).",
        rich_help_panel="Output",
    ),
]
IncludeOption = Annotated[list[str] | None, typer.Option(metavar="GLOB", help="Also take files matching this glob.")]
ExcludeOption = Annotated[list[str] | None, typer.Option(metavar="GLOB", help="Skip files matching this glob.")]
DeleteOption = Annotated[
    bool,
    typer.Option(
        "--delete",
        help="Mirror: remove thumbnails of photos gone from SOURCE.",
        rich_help_panel="Output",
    ),
]
DeleteDroppedOption = Annotated[
    bool,
    typer.Option(
        "--delete-dropped",
        help="--delete, and sizes/formats/ratios not asked for now.",
        rich_help_panel="Output",
    ),
]
DeleteExcludedOption = Annotated[
    bool,
    typer.Option(
        "--delete-excluded",
        help="With --delete: also what --include/--exclude skip.",
        rich_help_panel="Output",
    ),
]


def outcome_exit_code(
    batch: BatchView, interrupted: bool, max_failures: int = 0, scan_errors: Sequence[ScanError] = ()
) -> ExitCode:
    """Exit code of a command that ran a batch until it ended: a partial or failed batch exits 1
    only when more than ``max_failures`` of its items failed; a scan that could not read some
    folder (``scan_errors``) exits 1 whatever the batch's state."""
    if interrupted:
        return ExitCode.INTERRUPTED
    if scan_errors and batch.state != BatchState.CANCELLED:
        return ExitCode.PARTIAL
    if batch.state in (BatchState.PARTIAL, BatchState.FAILED) and batch.counts[ItemState.FAILED] <= max_failures:
        return ExitCode.OK
    return {
        BatchState.SUCCEEDED: ExitCode.OK,
        BatchState.PARTIAL: ExitCode.PARTIAL,
        BatchState.FAILED: ExitCode.PARTIAL,
        BatchState.CANCELLED: ExitCode.CANCELLED,
    }.get(batch.state, ExitCode.PARTIAL)


def render_in_foreground(
    reporter: Reporter,
    db_path: Path | str,
    batch_id: str,
    options: RunOptions,
    interrupts: Interrupts,
    *,
    replayed: bool,
    max_failures: int = 0,
    standby: Standby | None = None,
    mirror: Mirror | None = None,
    scan_errors: Sequence[ScanError] = (),
) -> NoReturn:
    """Run a batch until it is terminal with live progress, report it, exit by its outcome
    (``scan_errors``: the folders its scan could not read); then (``mirror``) remove what the batch
    no longer publishes."""
    from ..engine.runner import run_batch

    with reporter.run_progress(batch_id) as bar:
        result = run_batch(db_path, batch_id, options, interrupts=interrupts.count, observer=bar, standby=standby)
    final = replace(result.batch, replayed=replayed)
    interrupted = result.supervision.interrupted
    mirrored = None
    if mirror is not None and mirror.folder is not None and not interrupted:
        from ..upkeep.mirror import mirror_batch

        with open_ledger(db_path) as ledger:
            mirrored = mirror_batch(
                ledger, final.batch_id, mirror.folder, dropped=mirror.dropped, excluded=mirror.excluded
            )
    reporter.manifest_errors(result.manifest_errors)
    reporter.sheet_error(result.sheet_error)
    reporter.finished(
        final,
        crashes=result.supervision.crashes,
        sheet=result.sheet_path,
        max_failures=max_failures,
        manifest_written=not result.manifest_errors,
        mirrored=mirrored,
        scan_errors=scan_errors,
    )
    code = outcome_exit_code(final, interrupted, max_failures, scan_errors)
    reporter.exit_summary(final, code, max_failures, len(scan_errors))
    raise typer.Exit(int(code))


@dataclass(frozen=True)
class Mirror:
    """``--delete``: after the batch, remove what it no longer publishes; ``dropped``: also the
    derivatives of sources still there that it no longer asks for (``--delete-dropped``);
    ``excluded``: also the names of sources ``--include``/``--exclude`` leave out
    (``--delete-excluded``). ``folder``: what the submit's scan saw, set once it has run."""

    dropped: bool = False
    excluded: bool = False
    folder: FolderView | None = None


def mirror_wanted(delete: bool, delete_dropped: bool, dry_run: bool, delete_excluded: bool = False) -> Mirror | None:
    if dry_run and not (delete or delete_dropped):
        raise UsageError("--dry-run lists what --delete would remove: give it with --delete or --delete-dropped")
    if delete_excluded and not (delete or delete_dropped):
        raise UsageError("--delete-excluded widens what --delete removes: give it with --delete or --delete-dropped")
    return Mirror(dropped=delete_dropped, excluded=delete_excluded) if delete or delete_dropped else None


def parse_source(text: str) -> Path | str:
    """SOURCE as typed (an ``s3://bucket/prefix`` as text); an empty one (an unset shell variable)
    must not mean the current folder."""
    if not text.strip():
        raise UsageError("SOURCE is empty: name a folder or a manifest (.json, .jsonl, .csv)")
    if text.strip().lower().startswith(("http://", "https://")):
        raise UsageError(
            f"SOURCE: {text.strip()!r} is a URL; list URL sources in a manifest (.json, .jsonl, .csv) and submit that",
            code=URL_NOT_SUPPORTED,
        )
    if text.strip()[:5].lower() == "s3://":  # a bucket prefix, scanned like a folder (checked by intake)
        return text.strip()
    try:
        refuse_url(text)
    except SettingError as exc:
        raise UsageError(f"SOURCE: {exc}", code=exc.code) from None
    return Path(text)


def submit_command(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(metavar="SOURCE", help="A folder or s3://bucket/prefix/ (scanned recursively), or a manifest."),
    ],
    key: Annotated[str | None, typer.Option(help="Idempotency key. Default: derived from the request digest.")] = None,
    include: IncludeOption = None,
    exclude: ExcludeOption = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="Record the batch and return at once; `thumbctl work` renders it.")
    ] = False,
    overwrite: OverwriteOption = False,
    delete: DeleteOption = False,
    delete_dropped: DeleteDroppedOption = False,
    delete_excluded: DeleteExcludedOption = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="With --delete: list what goes or stays; no change.",
            rich_help_panel="Output",
        ),
    ] = False,
    retry_admission: Annotated[
        bool,
        typer.Option(
            "--retry-admission",
            help="When refused (exit 75), retry with backoff and jitter.",
            rich_help_panel="Admission",
        ),
    ] = False,
    admission_wait: Annotated[
        str,
        typer.Option(metavar="DURATION", help="How long --retry-admission keeps trying.", rich_help_panel="Admission"),
    ] = "10m",
    stats_interval: StatsIntervalOption = 5.0,
    json_out: bool = False,
    quiet: bool = False,
    verbose: bool = False,
) -> None:
    """Validate SOURCE, record a batch durably, then render it here until it is done (--detach: record only).

    The same request replays its batch, or resumes it after a cancel (--key: strict replay).
    Exit 0 when every item succeeded, 1 when some failed (`thumbctl status BATCH` says why),
    4 when it was cancelled from elsewhere, 130 on Ctrl-C (the cancel is recorded).
    """
    reporter = reporter_for(json_out, quiet, verbose, stats_interval)
    with handled(reporter):
        settings = settings_from_context(ctx)
        source_path = parse_source(source)
        mirror = mirror_wanted(delete, delete_dropped, dry_run, delete_excluded)
        if mirror is not None:
            from ..upkeep.mirror import check_mirrorable

            check_mirrorable(source_path, detach=detach)
        rules = ScanRules(include=tuple(include or ()), exclude=tuple(exclude or ()))
        options = settings.submit_options(key=key, rules=rules, overwrite=overwrite)
        run_options = settings.run_options()
        wait = parsed(parse_duration, admission_wait, "--admission-wait")
        db_path = settled(settings.ledger_path)
        from ..engine.runner import prepare_workers

        # The workers fork now, before the ledger is opened, and wait while this process reads the sources.
        with (
            prepare_workers(0 if detach or dry_run else run_options.workers) as standby,
            open_ledger(db_path, existing=False) as ledger,
        ):
            from ..intake.submission import prepare_submission, submit

            freeze_loaded()  # the workers' modules (imported to fork them), intake's and the ledger's

            first_batch = not ledger.views.batches(1)
            settle_store(ledger, reporter, settings)
            try:
                prepared = prepare_submission(source_path, options, ledger)
            except KeyboardInterrupt:
                raise Interrupted("interrupted while reading the sources; nothing was recorded") from None
            scan_errors = prepared.report.scan_errors
            if mirror is not None:
                from ..upkeep.mirror import FolderView, plan_mirror

                folder = FolderView.of(prepared.batch.source_root, prepared.report, rules)
                mirror = replace(mirror, folder=folder)
            if dry_run and mirror is not None:
                plan = plan_mirror(ledger, prepared.batch, folder, dropped=mirror.dropped, excluded=mirror.excluded)
                reporter.mirrored(plan, scan_errors=scan_errors)
                if scan_errors:
                    raise typer.Exit(int(ExitCode.PARTIAL))
                return
            clean_up(ledger, reporter, [prepared.batch.out_dir])
            with Interrupts().on_sigint() as interrupts:
                batch = submit(
                    ledger,
                    prepared,
                    options.limits,
                    retry_admission=retry_admission,
                    max_wait=wait,
                    should_stop=interrupts,
                    on_retry=reporter.admission_retry,
                )
                if first_batch:  # the ledger's first batch: say where the ledger is, once
                    reporter.notice(f"created ledger {shown(db_path) if isinstance(db_path, Path) else ledger.path}")
                if detach:
                    reporter.submitted(batch, prepared.report)
                    if scan_errors:
                        raise typer.Exit(int(ExitCode.PARTIAL))
                    return
                reporter.submitted(batch, prepared.report, final=False)
                render_in_foreground(
                    reporter,
                    db_path,
                    batch.batch_id,
                    run_options,
                    interrupts,
                    replayed=batch.replayed,
                    max_failures=settings.max_failures,
                    standby=standby,
                    mirror=mirror,
                    scan_errors=scan_errors,
                )


def work(
    ctx: typer.Context,
    batch: Annotated[str | None, batch_argument("Only this batch (id or unique prefix). Omit: every batch.")] = None,
    batch_option: BatchAlias = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit when no item is queued or running; else run until Ctrl-C.")
    ] = False,
    stats_interval: StatsIntervalOption = 5.0,
    json_out: bool = False,
    quiet: bool = False,
    verbose: bool = False,
) -> None:
    """Run the worker pool over queued items of every batch (or BATCH), for detached batches and cron.

    Exit 0 whatever items failed, unless --max-failures N is set: then 1 when more than N items
    failed while it ran."""
    reporter = reporter_for(json_out, quiet, verbose, stats_interval)
    with handled(reporter), Interrupts().on_sigint() as interrupts:
        batch = one_batch(batch, batch_option)
        settings = settings_from_context(ctx)
        with open_ledger(settings.ledger_path) as ledger:  # the pool opens its own connections
            settle_store(ledger, reporter, settings)
            clean_up(ledger, reporter)
        with reporter.run_progress(None) as progress:
            from ..engine.runner import run_work

            result = run_work(
                existing_ledger(settings.ledger_path),  # a cron line with a mistyped --db must not idle on a new ledger
                settings.run_options(),
                batch_id=batch,
                until_idle=until_idle,
                interrupts=interrupts.count,
                observer=progress,
            )
        reporter.manifest_errors(result.manifest_errors)
        reporter.work_done(result.supervision)
        budget = settings.work_max_failures
        if budget is not None and result.failed > budget:
            reporter.work_failures(result.failed, budget, batch)
            raise typer.Exit(int(ExitCode.PARTIAL))


def retry(
    ctx: typer.Context,
    batch: Annotated[str, batch_argument()],
    detach: Annotated[bool, typer.Option("--detach", help="Requeue and return; `thumbctl work` renders them.")] = False,
    stats_interval: StatsIntervalOption = 5.0,
    json_out: bool = False,
    quiet: bool = False,
    verbose: bool = False,
) -> None:
    """Put a batch's failed items back to queued with a fresh attempt budget, then render them.

    Completed work is never redone; items refused at submit (not an image, outside the
    root, unreadable) need a new submit. A cancelled batch is resumed instead, as running its
    submit again does: a new batch of the same request, finished outputs reused. Exit codes as
    for submit.
    """
    reporter = reporter_for(json_out, quiet, verbose, stats_interval)
    with handled(reporter):
        settings = settings_from_context(ctx)
        run_options = settings.run_options()
        db_path = settled(settings.ledger_path)
        with open_ledger(db_path) as ledger:
            settle_store(ledger, reporter, settings)
            batch_id = ledger.views.resolve_batch_id(batch)
            clean_up(ledger, reporter, [ledger.views.batch(batch_id).out_dir])
            from ..engine.resume import resume_if_cancelled  # Pillow: only the commands that read images import it

            resumed = resume_if_cancelled(ledger, batch_id, settings.limits())
            if resumed is None:
                requeued = ledger.queue.retry_failed(batch_id)
                view = ledger.views.batch(batch_id)
        if resumed is not None:
            _render_resumed(reporter, db_path, *resumed, detach, settings.max_failures, run_options)
        reporter.requeued(batch_id, requeued, final=detach or not requeued)
        budget = settings.max_failures
        if detach or not requeued:
            reporter.finished(view, max_failures=budget)
            code = outcome_exit_code(view, False, budget) if view.is_terminal else ExitCode.OK
            reporter.exit_summary(view, code, budget)
            raise typer.Exit(int(code))
        with Interrupts().on_sigint() as interrupts:
            render_in_foreground(
                reporter, db_path, batch_id, run_options, interrupts, replayed=False, max_failures=budget
            )


def _render_resumed(
    reporter: Reporter,
    db_path: Path | str,
    batch: BatchView,
    report: IntakeReport,
    detach: bool,
    max_failures: int,
    run_options: RunOptions,
) -> NoReturn:
    """``retry`` of a cancelled batch: say which batch resumes it, then render that one as submit does."""
    if detach or batch.is_terminal:
        reporter.submitted(batch, report)
        code = outcome_exit_code(batch, False, max_failures) if batch.is_terminal else ExitCode.OK
        reporter.exit_summary(batch, code, max_failures)
        raise typer.Exit(int(code))
    reporter.submitted(batch, report, final=False)
    with Interrupts().on_sigint() as interrupts:
        render_in_foreground(
            reporter,
            db_path,
            batch.batch_id,
            run_options,
            interrupts,
            replayed=batch.replayed,
            max_failures=max_failures,
        )


def cancel(
    ctx: typer.Context,
    batch: Annotated[str, batch_argument()],
    wait: Annotated[bool, typer.Option("--wait", help="Block until the batch is terminal.")] = False,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Record a cancel durably: queued items are cancelled at once, running ones at their next checkpoint.

    Repeating it converges on the same state; a finished batch stays as it is.
    """
    reporter = reporter_for(json_out, quiet)
    with handled(reporter), open_ledger(ledger_target(ctx)) as ledger, Interrupts().on_sigint() as interrupts:
        view = ledger.intake.request_cancel(batch)
        if wait:
            from ..engine.runner import wait_until_terminal

            view = wait_until_terminal(ledger, view.batch_id, should_stop=interrupts)
        reporter.cancelled(view)
