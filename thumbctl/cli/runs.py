"""The commands that render or stop rendering: ``submit``, ``work``, ``retry`` and ``cancel``."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from ..config.resolve import default_ledger_path
from ..core.display import shown
from ..core.errors import ExitCode, Interrupted, UsageError
from ..core.models import BatchState, ItemState
from ..core.profile import URL_NOT_SUPPORTED, SettingError, parse_duration, refuse_url
from ..core.scanrules import ScanRules
from .options import BatchAlias, StatsIntervalOption, batch_argument, one_batch
from .resolution import ledger_target, settings_from_context
from .session import (
    Interrupts,
    clean_up,
    crash_cleared,
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
    from ..config.options import RunOptions, SubmitOptions
    from ..config.resolve import Settings
    from ..core.errors import UnavailableError
    from ..core.models import BatchView
    from ..engine.runner import RunObserver, RunResult
    from ..engine.session import Admission, Mirror, Outcome, SubmitSession
    from ..intake.prepared import IntakeReport
    from ..report.reporter import Reporter
    from ..review.sitemanifest import SiteManifestWrite
    from ..sources.scan import ScanError
    from ..upkeep.leftovers import CleanUp
    from ..upkeep.legacy_layout import MigrationReport
    from ..upkeep.mirror import MirrorReport

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


def rendered_exit_code(outcome: Outcome, max_failures: int) -> ExitCode:
    """Exit code of a session that rendered its batch here; 1 also when a ``thumbctl.json`` that
    thumbctl did not write kept the site manifest from being written."""
    code = outcome_exit_code(outcome.batch, outcome.interrupted, max_failures, outcome.report.scan_errors)
    return ExitCode.PARTIAL if code == ExitCode.OK and site_taken(outcome.site_manifests) else code


def site_taken(written: Sequence[SiteManifestWrite]) -> bool:
    """Whether a ``thumbctl.json`` thumbctl did not write stood in the way of a site manifest."""
    return any(site.taken for site in written)


class SessionReporter:
    """A submit session (:class:`thumbctl.engine.session.SubmitSession`) as the command line says it:
    through the reporter, with Ctrl-C counted from the submission on."""

    def __init__(self, reporter: Reporter, max_failures: int = 0, db_flag: str = "") -> None:
        self.reporter = reporter
        self.max_failures = max_failures
        #: `` --db LEDGER`` when the ledger is not the default one, for the commands it suggests.
        self.db_flag = db_flag

    def layout_migrated(self, report: MigrationReport) -> None:
        self.reporter.layout_migrated(report)

    def crash_cleared(self, done: CleanUp) -> None:
        crash_cleared(self.reporter, done)

    @contextmanager
    def reading_sources(self) -> Iterator[None]:
        try:
            yield
        except KeyboardInterrupt:
            from ..engine.session import SOURCES_INTERRUPTED

            raise Interrupted(SOURCES_INTERRUPTED) from None

    @contextmanager
    def counting_interrupts(self) -> Iterator[Callable[[], int]]:
        with Interrupts().on_sigint() as interrupts:
            yield interrupts.count

    def admission_retry(self, error: UnavailableError, delay: float) -> None:
        self.reporter.admission_retry(error, delay)

    def ledger_created(self, where: Path | str) -> None:
        self.reporter.notice(f"created ledger {shown(where) if isinstance(where, Path) else where}")

    def submitted(self, batch: BatchView, report: IntakeReport, *, final: bool) -> None:
        self.reporter.submitted(batch, report, final=final)
        if final and not batch.is_terminal:  # --detach: say what renders it
            self.reporter.next_step(f"thumbctl work {batch.batch_id} --until-idle{self.db_flag}", "render it with")

    def requeued(self, batch_id: str, count: int, *, final: bool) -> None:
        self.reporter.requeued(batch_id, count, final=final)

    def run_progress(self, batch_id: str) -> AbstractContextManager[RunObserver]:
        return self.reporter.run_progress(batch_id)

    def rendered(self, outcome: Outcome, run: RunResult) -> None:
        """The end of a run: manifests and the contact sheet, the summary, the exit line."""
        budget, scan_errors = self.max_failures, outcome.report.scan_errors
        final = replace(outcome.batch, replayed=outcome.submitted.replayed)
        self.reporter.manifest_errors(run.manifest_errors)
        self.reporter.manifest_errors(outcome.site_errors, "manifest")
        self.reporter.site_manifests_kept(outcome.site_manifests)
        self.reporter.sheet_error(run.sheet_error)
        self.reporter.finished(
            final,
            crashes=run.supervision.crashes,
            sheet=run.sheet_path,
            max_failures=budget,
            manifest_written=not run.manifest_errors,
            mirrored=outcome.mirrored,
            scan_errors=scan_errors,
        )
        self.reporter.exit_summary(final, rendered_exit_code(outcome, budget), budget, len(scan_errors))


def submit_session(
    settings: Settings,
    reporter: Reporter,
    db: Path | str,
    options: SubmitOptions,
    run_options: RunOptions,
    **choices: Any,
) -> SubmitSession:
    """The session a command runs, told through ``reporter``."""
    from ..engine.session import SubmitSession

    db_flag = "" if db == default_ledger_path() else f" --db {shlex.quote(str(db))}"
    observer = SessionReporter(reporter, settings.max_failures, db_flag)
    return SubmitSession(db, options, run_options, observer, **choices)


def mirror_wanted(
    delete: bool,
    delete_dropped: bool,
    dry_run: bool,
    delete_excluded: bool = False,
    *,
    source: Path | str | None = None,
    detach: bool = False,
) -> Mirror | None:
    """The mirror the flags ask for (None: no ``--delete``); with ``source``, checked against submit's SOURCE."""
    if dry_run and not (delete or delete_dropped):
        raise UsageError("--dry-run lists what --delete would remove: give it with --delete or --delete-dropped")
    if delete_excluded and not (delete or delete_dropped):
        raise UsageError("--delete-excluded widens what --delete removes: give it with --delete or --delete-dropped")
    if not (delete or delete_dropped):
        return None
    if source is not None:
        from ..upkeep.mirror import check_mirrorable

        check_mirrorable(source, detach=detach)
    from ..engine.session import Mirror

    return Mirror(dropped=delete_dropped, excluded=delete_excluded)


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
        mirror = mirror_wanted(delete, delete_dropped, dry_run, delete_excluded, source=source_path, detach=detach)
        rules = ScanRules(include=tuple(include or ()), exclude=tuple(exclude or ()))
        options = settings.submit_options(key=key, rules=rules, overwrite=overwrite)
        run_options = settings.run_options()
        admission = admission_wanted(retry_admission, admission_wait)
        db = settled(settings.ledger_path)
        session = submit_session(
            settings,
            reporter,
            db,
            options,
            run_options,
            admission=admission,
            mirror=mirror,
            standby=True,  # forked as the ledger opens for a run (not for --dry-run or --detach)
            finish_terminal=True,
        )
        freeze_loaded()  # the session's modules: intake's, the ledger's, the run's
        if dry_run:
            report_plan(reporter, *session.plan(source_path))
        submit_exit(session.run(source_path, detach=detach), settings.max_failures)


def admission_wanted(retry: bool, wait: str) -> Admission | None:
    """``--retry-admission`` for ``--admission-wait`` (checked even without ``--retry-admission``)."""
    from ..engine.session import Admission

    max_wait = parsed(parse_duration, wait, "--admission-wait")
    return Admission(max_wait) if retry else None


def submit_exit(outcome: Outcome, max_failures: int) -> NoReturn:
    """Exit as a submit's session ended (its run reported already): a scan that could not read some
    folder exits 1, also with ``--detach``."""
    if outcome.run is None:  # --detach (rendered by `thumbctl work`), or nothing to render
        taken = site_taken(outcome.site_manifests)
        raise typer.Exit(int(ExitCode.PARTIAL if outcome.report.scan_errors or taken else ExitCode.OK))
    raise typer.Exit(int(rendered_exit_code(outcome, max_failures)))


def report_plan(reporter: Reporter, report: IntakeReport, plan: MirrorReport) -> NoReturn:
    """``--dry-run``: what the mirror would remove; exit 1 when the scan could not read some folder."""
    reporter.mirrored(plan, scan_errors=report.scan_errors)
    raise typer.Exit(int(ExitCode.PARTIAL if report.scan_errors else ExitCode.OK))


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
        reporter.manifest_errors(result.site_errors, "site manifest")
        reporter.site_manifests_kept(result.site_manifests)
        reporter.work_done(result.supervision, result.finished)
        budget = settings.work_max_failures
        if budget is not None and result.failed > budget:
            reporter.work_failures(result.failed, budget, batch)
            raise typer.Exit(int(ExitCode.PARTIAL))
        if site_taken(result.site_manifests):
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
        db = existing_ledger(settled(settings.ledger_path))
        from ..config.options import SubmitOptions

        options = SubmitOptions(limits=settings.limits(), store_dir=settings.store_path)
        outcome = submit_session(settings, reporter, db, options, run_options).retry(batch, detach=detach)
        budget = settings.max_failures
        if outcome.run is not None:
            raise typer.Exit(int(rendered_exit_code(outcome, budget)))
        view = outcome.batch
        if outcome.requeued is not None:
            reporter.finished(view, max_failures=budget)
        code = outcome_exit_code(view, False, budget) if view.is_terminal else ExitCode.OK
        reporter.exit_summary(view, code, budget)
        raise typer.Exit(int(code))


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
