"""The ``thumbctl`` command: parse, call the library, render. No SQL, no pixels.

The options are declared once, in :mod:`thumbctl.cliopts` (the settings from the settings table); a
command names the settings it takes and has ``--db``, ``--json``, ``-q``, ``-v`` where they mean something.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from . import __version__
from .cliopts import (
    CONTEXT_SETTINGS,
    ClickException,
    ClickUsageError,
    DbOption,
    JsonOption,
    NoArgsIsHelpError,
    QuietOption,
    VerboseOption,
    batch_alias,
    batch_argument,
    choice_option,
    command,
    ledger_target,
    settings_from_context,
)
from .config import KEYS, default_ledger_path, environment_help, old_default_ledger_path
from .errors import (
    EXIT_CODE_MEANINGS,
    ExitCode,
    Interrupted,
    LedgerMissing,
    StorageError,
    ThumbctlError,
    UsageError,
)
from .ledger import Ledger
from .ledger.home import settle_default_ledger, shown
from .models import ITEM_STATES
from .options import DEFAULT_GRACE
from .plainparams import PlainGroup
from .runner import prepare_workers, run_batch, run_work, wait_until_terminal, watch_batch
from .settings import SettingError, parse_duration
from .sources import ScanRules

if TYPE_CHECKING:  # the rest is imported by the commands that use it, so `status` stays light
    from .config import Settings
    from .models import BatchView
    from .options import RunOptions
    from .pool import Standby
    from .progress import RunProgress
    from .reporter import Reporter
    from .storage.objects import LocalObjectStore

#: The root help ends with the environment variables and the exit codes (once: not in every command's help).
ROOT_EPILOG = (
    environment_help() + "\n\n\b\nExit codes:\n" + "\n".join(f"  {int(c):<5}{m}" for c, m in EXIT_CODE_MEANINGS.items())
)

app = typer.Typer(
    name="thumbctl",
    cls=PlainGroup,  # plain values skip Typer's pydantic conversion: see thumbctl.plainparams
    help=(
        "Smart-cropped thumbnails in several aspect ratios, through a durable ledger: a SQLite file, or "
        "PostgreSQL for workers on many machines.\n\n"
        "--db, --json, -q and -v go before or after the command name. Shell completion: --install-completion."
    ),
    epilog=ROOT_EPILOG,
    context_settings=CONTEXT_SETTINGS,
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

#: Every setting: what `submit` and `config` take.
ALL_SETTINGS = tuple(key.name for key in KEYS if key.name != "db")
#: The settings of a run: what `retry` takes (`work` takes them without the contact sheet).
RUN_SETTINGS = ("workers", "item_timeout", "sheet", "max_failures", "store")


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"thumbctl {__version__}")
        raise typer.Exit()


@app.callback()
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


OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace a file at a thumbnail's name that thumbctl did not publish (else the item fails name_taken).",
        rich_help_panel="Output",
    ),
]
StatsIntervalOption = Annotated[
    float,
    typer.Option(
        "--stats-interval",
        envvar="THUMBCTL_STATS_INTERVAL",
        min=0.5,
        metavar="SECONDS",
        help="Off a terminal (CI, pipes): seconds between plain progress lines.",
    ),
]


def _reporter(json_mode: bool, quiet: bool = False, verbose: bool = False, interval: float = 5.0) -> Reporter:
    """All output goes through this: results on stdout, progress, hints and errors on stderr."""
    from .reporter import Reporter

    return Reporter.for_streams(json_mode=json_mode, quiet=quiet, verbose=verbose, progress_interval=interval)


def _progress(reporter: Reporter, batch_id: str | None) -> RunProgress:
    """The live view (terminal) or plain lines (elsewhere) for a run, as the reporter's flags say."""
    return reporter.run_progress(batch_id)


@dataclass
class _Command:
    """The running command: its reporter, for the notes opening a ledger gives (said once)."""

    reporter: Reporter
    #: The default ledger as settled for this command (see :func:`_settled`).
    ledgers: dict[Path, Path] = field(default_factory=dict)


_COMMAND: ContextVar[_Command | None] = ContextVar("thumbctl_command", default=None)


@contextmanager
def _handled(reporter: Reporter) -> Iterator[None]:
    """The one place where errors become exit codes."""
    token = _COMMAND.set(_Command(reporter))
    try:
        yield
    except ThumbctlError as err:
        reporter.error(err)
        raise typer.Exit(int(err.exit_code)) from None
    except KeyboardInterrupt:
        reporter.error(Interrupted("interrupted"))
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except BrokenPipeError:
        _silence_broken_pipe()
        raise typer.Exit(int(ExitCode.OK)) from None
    except OSError as exc:  # a filesystem refusal the library did not expect: one line, not a traceback
        where = f" ({exc.filename})" if exc.filename else ""
        reporter.error(StorageError(f"{exc.strerror or exc}{where}"))
        raise typer.Exit(int(ExitCode.PARTIAL)) from None
    finally:
        _COMMAND.reset(token)


def _settled(path: Path | str) -> Path | str:
    """The ledger to open for ``path``. For the default ledger, one left at the old default place
    (the config folder) is moved to the state folder first when that is safe, once per command,
    and the user is told once (see :func:`thumbctl.ledger.home.settle_default_ledger`)."""
    if not isinstance(path, Path) or path != default_ledger_path():
        return path
    command = _COMMAND.get() or _Command(_reporter(False, quiet=True))
    if path not in command.ledgers:
        settled = settle_default_ledger(path, old_default_ledger_path())
        command.ledgers[path] = settled.path
        if settled.note:
            command.reporter.notice(settled.note)
    return command.ledgers[path]


def _silence_broken_pipe() -> None:
    """After a closed pipe, point stdout at /dev/null so the exit flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _open_ledger(target: Path | str, *, existing: bool = True, read_only: bool = False) -> Ledger:
    """The ledger at ``target`` (see :func:`thumbctl.cliopts.ledger_target`). Commands that only read or act
    on recorded batches need it to exist: a mistyped --db must not create a new, empty ledger.
    Commands that only read open it ``read_only``, so they work on a read-only mount too."""
    target = _settled(target)
    return Ledger(_existing(target) if existing else target, read_only=read_only)


def _existing(path: Path | str) -> Path | str:
    """``path`` if a ledger is there; a mistyped --db (or THUMBCTL_DB) is an error, not a new ledger.
    A server ledger is checked by connecting to it."""
    if isinstance(path, str):
        return path
    path = _settled(path)
    if not path.exists():
        raise LedgerMissing(f"no ledger at {path}: nothing was submitted with this --db (or THUMBCTL_DB)")
    return path


def _bound_store(ledger: Ledger, settings: Settings) -> LocalObjectStore:
    """The ledger's object store (--store, THUMBCTL_STORE, config key store, else the one it recorded,
    else beside the SQLite ledger), bound to it for this run (only submit moves the ledger to another):
    exit 2 ``store_required`` for a PostgreSQL ledger without one, ``store_taken`` for a store of another
    ledger."""
    from .stores import store_for_ledger

    return store_for_ledger(ledger, settings.store_path, move=False)


def _settle_store(ledger: Ledger, reporter: Reporter, settings: Settings) -> None:
    """Before a command writes: the store settled with the ledger (see :func:`thumbctl.stores.settle_store`)."""
    from .stores import settle_store

    migrated = settle_store(ledger, settings.store_path)
    if migrated is not None:
        reporter.layout_migrated(migrated)


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


def outcome_exit_code(batch: BatchView, interrupted: bool, max_failures: int = 0) -> ExitCode:
    """Exit code of a command that ran a batch until it ended: a partial or failed batch exits 1
    only when more than ``max_failures`` of its items failed."""
    if interrupted:
        return ExitCode.INTERRUPTED
    if batch.state in ("partial", "failed") and batch.counts["failed"] <= max_failures:
        return ExitCode.OK
    return {
        "succeeded": ExitCode.OK,
        "partial": ExitCode.PARTIAL,
        "failed": ExitCode.PARTIAL,
        "cancelled": ExitCode.CANCELLED,
    }.get(batch.state, ExitCode.PARTIAL)


def _render_in_foreground(
    reporter: Reporter,
    db_path: Path | str,
    batch_id: str,
    options: RunOptions,
    interrupts: Interrupts,
    *,
    replayed: bool,
    max_failures: int = 0,
    standby: Standby | None = None,
) -> NoReturn:
    """Run a batch until it is terminal with live progress, report it, exit by its outcome."""
    with _progress(reporter, batch_id) as bar:
        result = run_batch(db_path, batch_id, options, interrupts=interrupts.count, observer=bar, standby=standby)
    final = replace(result.batch, replayed=replayed)
    interrupted = result.supervision.interrupted
    reporter.manifest_errors(result.manifest_errors)
    reporter.sheet_error(result.sheet_error)
    reporter.finished(
        final,
        interrupted=interrupted,
        crashes=result.supervision.crashes,
        sheet=result.sheet_path,
        max_failures=max_failures,
    )
    code = outcome_exit_code(final, interrupted, max_failures)
    reporter.exit_summary(final, code, max_failures)
    raise typer.Exit(int(code))


def _source_path(text: str) -> Path:
    """SOURCE as typed; an empty one (an unset shell variable) must not mean the current folder."""
    if not text.strip():
        raise UsageError("SOURCE is empty: name a folder or a manifest (.json, .jsonl, .csv)")
    return Path(text)


def _parsed(parse: Callable[[str], Any], value: str | None, flag: str) -> Any:
    if value is None:
        return None
    try:
        return parse(value)
    except SettingError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from exc


@command(app, "submit", settings=ALL_SETTINGS)
def submit_command(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(metavar="SOURCE", help="A folder (scanned recursively) or a manifest: .json, .jsonl, .csv."),
    ],
    key: Annotated[str | None, typer.Option(help="Idempotency key. Default: derived from the request digest.")] = None,
    include: Annotated[
        list[str] | None, typer.Option(metavar="GLOB", help="Also take files matching this glob.")
    ] = None,
    exclude: Annotated[list[str] | None, typer.Option(metavar="GLOB", help="Skip files matching this glob.")] = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="Record the batch and return at once; `thumbctl work` renders it.")
    ] = False,
    overwrite: OverwriteOption = False,
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

    Idempotent: the same request replays (and resumes) the same batch. Exit 0 when every item
    succeeded, 1 when some failed (`thumbctl status BATCH` says why), 4 when it was cancelled
    from elsewhere, 130 on Ctrl-C (the cancel is recorded).
    """
    reporter = _reporter(json_out, quiet, verbose, stats_interval)
    with _handled(reporter):
        settings = settings_from_context(ctx)
        source_path = _source_path(source)
        rules = ScanRules(include=tuple(include or ()), exclude=tuple(exclude or ()))
        options = settings.submit_options(key=key, rules=rules, overwrite=overwrite)
        run_options = settings.run_options()
        wait = _parsed(parse_duration, admission_wait, "--admission-wait")
        db_path = _settled(settings.ledger_path)
        # The workers fork now, before the ledger is opened, and wait while this process reads the sources.
        with prepare_workers(0 if detach else run_options.workers) as standby, _open_ledger(
            db_path, existing=False
        ) as ledger:
            from .intake import prepare_submission, submit  # Pillow: only the commands that read images import it

            first_batch = not ledger.batches(1)
            _settle_store(ledger, reporter, settings)
            try:
                prepared = prepare_submission(source_path, options, ledger)
            except KeyboardInterrupt:
                raise Interrupted("interrupted while reading the sources; nothing was recorded") from None
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
                    return
                reporter.submitted(batch, prepared.report, final=False)
                _render_in_foreground(
                    reporter,
                    db_path,
                    batch.batch_id,
                    run_options,
                    interrupts,
                    replayed=batch.replayed,
                    max_failures=settings.max_failures,
                    standby=standby,
                )


BatchAlias = Annotated[str | None, batch_alias()]


def _one_batch(batch: str | None, alias: str | None) -> str | None:
    """BATCH, or the same given as --batch (how `work` and `stats` took it before)."""
    if batch is not None and alias is not None and batch != alias:
        raise UsageError(f"BATCH {batch} and --batch {alias} name different batches: give one")
    return batch if batch is not None else alias


@command(app, settings=("workers", "item_timeout", "max_failures", "store"))
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
    reporter = _reporter(json_out, quiet, verbose, stats_interval)
    with _handled(reporter), Interrupts().on_sigint() as interrupts:
        batch = _one_batch(batch, batch_option)
        settings = settings_from_context(ctx)
        with _open_ledger(settings.ledger_path) as ledger:  # the pool opens its own connections
            _settle_store(ledger, reporter, settings)
        with _progress(reporter, None) as progress:
            result = run_work(
                _existing(settings.ledger_path),  # a cron line with a mistyped --db must not idle on a new ledger
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


@command(app)
def status(
    ctx: typer.Context,
    batch: Annotated[
        str | None, batch_argument("Batch id (or a unique prefix). Omit to list recent batches.")
    ] = None,
    items: Annotated[bool, typer.Option("--items", help="List the batch's items.")] = False,
    state: Annotated[
        str | None,
        choice_option("--state", choices=ITEM_STATES, help="List only the items in this state (implies --items)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many recent batches to list.")] = 20,
    watch: Annotated[
        bool, typer.Option("--watch", help="With BATCH: follow it live until it is terminal (Ctrl-C stops watching).")
    ] = False,
    html: Annotated[
        bool,
        typer.Option(
            "--html", help="With BATCH: print a <picture> snippet per source and ratio (URLs relative to OUT)."
        ),
    ] = False,
    stats_interval: StatsIntervalOption = 5.0,
    json_out: bool = False,
    quiet: bool = False,
    verbose: bool = False,
) -> None:
    """Show recent batches, or one batch: state, fixed total, counts per state, failures by code."""
    reporter = _reporter(json_out, quiet, verbose, stats_interval)
    with _handled(reporter):
        if html and (batch is None or items or watch or json_out):
            raise UsageError("--html prints one batch's markup: give a BATCH and no --items, --state, --watch, --json")
        items = items or state is not None  # `status B --state failed` means the failed items
        if (items or state or watch) and batch is None:
            raise UsageError("--items, --state and --watch need a BATCH")
        if items and watch:
            raise UsageError("--watch follows a batch's progress; it does not combine with --items or --state")
        target = _settled(ledger_target(ctx))
        if batch is None and isinstance(target, Path) and not target.exists():
            reporter.batch_list([])  # nothing submitted yet: say so without creating a ledger
            return
        with _open_ledger(target, read_only=True) as ledger:
            if batch is None:
                reporter.batch_list(ledger.batches(limit))
            elif items:
                batch_id = ledger.resolve_batch_id(batch)
                with ledger.streamed_items(batch_id, state=state) as listed:
                    reporter.items(batch_id, listed)
            elif html:
                from .markup import batch_snippets

                reporter.text(batch_snippets(ledger, batch))
            elif watch:
                batch_id = ledger.resolve_batch_id(batch)
                with (
                    Interrupts().on_sigint() as interrupts,
                    _progress(reporter, batch_id) as bar,
                ):
                    watch_batch(ledger, batch_id, observer=bar, should_stop=interrupts)
                reporter.batch_detail(ledger.batch(batch_id))
            else:
                reporter.batch_detail(ledger.batch(batch))


@command(app)
def events(
    ctx: typer.Context,
    batch: Annotated[str, batch_argument()],
    item: Annotated[str | None, typer.Option("--item", help="Only the events of this item id.")] = None,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """The transition log of a batch: every state change with time, attempt, worker, error code."""
    reporter = _reporter(json_out, quiet)
    with (
        _handled(reporter),
        _open_ledger(ledger_target(ctx), read_only=True) as ledger,
        ledger.streamed_events(batch, item_id=item) as listed,
    ):
        reporter.events(listed)


@command(app, settings=RUN_SETTINGS)
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
    root, unreadable) need a new submit. Exit codes as for submit.
    """
    reporter = _reporter(json_out, quiet, verbose, stats_interval)
    with _handled(reporter):
        settings = settings_from_context(ctx)
        run_options = settings.run_options()
        db_path = _settled(settings.ledger_path)
        with _open_ledger(db_path) as ledger:
            _settle_store(ledger, reporter, settings)
            batch_id = ledger.resolve_batch_id(batch)
            requeued = ledger.retry_failed(batch_id)
            view = ledger.batch(batch_id)
        reporter.requeued(batch_id, requeued, final=detach or not requeued)
        budget = settings.max_failures
        if detach or not requeued:
            reporter.finished(view, interrupted=False, max_failures=budget)
            code = outcome_exit_code(view, False, budget) if view.is_terminal else ExitCode.OK
            reporter.exit_summary(view, code, budget)
            raise typer.Exit(int(code))
        with Interrupts().on_sigint() as interrupts:
            _render_in_foreground(
                reporter, db_path, batch_id, run_options, interrupts, replayed=False, max_failures=budget
            )


@command(app)
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
    reporter = _reporter(json_out, quiet)
    with _handled(reporter), _open_ledger(ledger_target(ctx)) as ledger, Interrupts().on_sigint() as interrupts:
        view = ledger.request_cancel(batch)
        if wait:
            view = wait_until_terminal(ledger, view.batch_id, should_stop=interrupts)
        reporter.cancelled(view)


@command(app)
def stats(
    ctx: typer.Context,
    batch: Annotated[str | None, batch_argument("Only this batch (id or unique prefix). Omit: every batch.")] = None,
    batch_option: BatchAlias = None,
    window: Annotated[str, typer.Option(help="How far back rates, bytes and timings look, e.g. 15m, 1h, 7d.")] = "1h",
    prometheus: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Also write the metrics in Prometheus text format, atomically."),
    ] = None,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Queue age, admission/claim/completion rates, retries, cancellation lag, bytes, dedup hits, stage timings."""
    from .stats import build_report, write_prometheus_file

    reporter = _reporter(json_out, quiet)
    with _handled(reporter):
        span = _parsed(parse_duration, window, "--window")
        batch = _one_batch(batch, batch_option)
        with _open_ledger(ledger_target(ctx), read_only=True) as ledger:
            batch_id = ledger.resolve_batch_id(batch) if batch else None
            report = build_report(ledger.stats_facts(ledger.clock() - span, batch_id), batch_id)
        if prometheus is not None:
            write_prometheus_file(report, prometheus)
        reporter.stats(report, str(prometheus) if prometheus else None)


@command(app, "codes")
def codes_command(json_out: bool = False, quiet: bool = False) -> None:
    """List the item error codes and the exit codes (--db is accepted, as everywhere, and unused)."""
    _reporter(json_out, quiet).codes()


@command(app, "config", settings=ALL_SETTINGS)
def config_command(ctx: typer.Context, json_out: bool = False, quiet: bool = False) -> None:
    """Show the resolved settings and where each came from: flag, THUMBCTL_* env, config file or default.

    Takes the same setting flags as submit, to show what a submit with them would use.
    """
    reporter = _reporter(json_out, quiet)
    with _handled(reporter):
        reporter.settings(settings_from_context(ctx))


class SheetOrder(StrEnum):
    """``thumbctl sheet --sort`` (see :data:`thumbctl.sheet.SORT_ORDERS`)."""

    ledger = "ledger"
    score = "score"


@command(app)
def sheet(
    ctx: typer.Context,
    batch: Annotated[str, batch_argument()],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE.html",
            help="Where to write the page; its folder must exist. Default: OUT/batches/<batch_id>.html.",
        ),
    ] = None,
    sort: Annotated[
        SheetOrder,
        typer.Option(
            "--sort",
            help="Source order: ledger (as submitted) or score (lowest crop score first). "
            "Sources with a crop missing come first either way.",
        ),
    ] = SheetOrder.ledger,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Write a contact sheet: every source with its crops drawn on a small copy of it, the crops
    side by side, each with a manifest line to re-crop it; failures as one row with their reason.

    One self-contained HTML page (no network, no JavaScript) with relative links to the
    outputs; open it in a browser to review the crops. Exit 0 once written, whatever the batch's state.
    """
    from .sheet import write_contact_sheet

    reporter = _reporter(json_out, quiet)
    with _handled(reporter), _open_ledger(ledger_target(ctx), read_only=True) as ledger:
        reporter.sheet_written(write_contact_sheet(ledger, batch, output, sort=sort.value))


GraceOption = Annotated[
    str,
    typer.Option(
        "--grace",
        help=f"Temp files whose writer may still be running are left this long ({DEFAULT_GRACE / 3600:.0f}h).",
    ),
]


@command(app, "reconcile", settings=("store",))
def reconcile_command(
    ctx: typer.Context,
    repair: Annotated[
        bool, typer.Option("--repair", help="Apply the safe repairs, each logged with its reason.")
    ] = False,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Decode every object, also those unchanged since they last decoded without fault "
            "(finds damage no file operation made, e.g. a failing disk).",
        ),
    ] = False,
    grace: GraceOption = "1h",
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Check the ledger against the outputs: stalled leases, unfinished cancels, objects, friendly names,
    orphans, temp files. Live work is never touched. Exit 0 when clean, 1 when findings remain (for cron)."""
    from .reconcile import reconcile

    reporter = _reporter(json_out, quiet)
    with _handled(reporter):
        grace_seconds = _parsed(parse_duration, grace, "--grace")
        settings = settings_from_context(ctx)
        with _open_ledger(settings.ledger_path) as ledger:
            _settle_store(ledger, reporter, settings)
            bound = _bound_store(ledger, settings)
            report = reconcile(ledger, repair=repair, deep=deep, grace=grace_seconds, store=bound)
        reporter.reconciled(report, repair=repair)
    raise typer.Exit(int(ExitCode.OK if report.clean else ExitCode.PARTIAL))


@command(app, "gc", settings=("store",))
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
    from .reconcile import collect_garbage

    reporter = _reporter(json_out, quiet)
    with _handled(reporter):
        age = _parsed(parse_duration, older_than, "--older-than")
        grace_seconds = _parsed(parse_duration, grace, "--grace")
        settings = settings_from_context(ctx)
        with _open_ledger(settings.ledger_path) as ledger:
            if not dry_run:  # a dry run changes nothing, the old layout included
                _settle_store(ledger, reporter, settings)
            bound = _bound_store(ledger, settings)
            report = collect_garbage(ledger, age, dry_run=dry_run, grace=grace_seconds, store=bound)
        reporter.garbage_collected(report)
        if report.errors:
            raise typer.Exit(int(ExitCode.PARTIAL))


def main(argv: list[str] | None = None) -> None:
    """The ``thumbctl`` entry point: Click's usage errors become one line with a stable code too."""
    args = sys.argv[1:] if argv is None else argv
    try:
        code = app(args=args, prog_name="thumbctl", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # bare `thumbctl`: the help, as Click shows it
        exc.show()
        sys.exit(int(ExitCode.USAGE))
    except ClickException as exc:
        reporter = _reporter("--json" in args)
        hint = exc.ctx.command_path if isinstance(exc, ClickUsageError) and exc.ctx is not None else "thumbctl"
        message = f"{exc.format_message()} (see {hint} --help)"
        reporter.error(UsageError(message))
        sys.exit(int(ExitCode.USAGE))
    except typer.Abort:
        sys.exit(int(ExitCode.INTERRUPTED))
    sys.exit(code if isinstance(code, int) else 0)
