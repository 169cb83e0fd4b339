"""The ``thumbctl`` command: parse, call the library, render. No SQL, no pixels."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from . import __version__
from .config import (
    default_text,
    environment_help,
    resolve_ledger_path,
    resolve_settings,
    setting_key,
)
from .errors import (
    EXIT_CODE_MEANINGS,
    ITEM_ERROR_CODES,
    ExitCode,
    Interrupted,
    LedgerMissing,
    StorageError,
    ThumbctlError,
    UsageError,
)
from .ledger import Ledger
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

#: Every command's help ends with the environment variables and the exit codes.
COMMAND_EPILOG = (
    environment_help() + "\n\n\b\nExit codes:\n" + "\n".join(f"  {int(c):<5}{m}" for c, m in EXIT_CODE_MEANINGS.items())
)

app = typer.Typer(
    name="thumbctl",
    cls=PlainGroup,  # plain values skip Typer's pydantic conversion: see thumbctl.plainparams
    help=(
        "Smart-cropped thumbnails in several aspect ratios, through a durable ledger: a SQLite file, or "
        "PostgreSQL for workers on many machines.\n\n"
        "Every command takes --db PATH, or --db postgresql://user@host/dbname (needs pip install "
        "'thumbctl[postgres]'; env THUMBCTL_DB). Shell completion: --install-completion."
    ),
    epilog=COMMAND_EPILOG,
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"thumbctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Smart-cropped thumbnails in several aspect ratios, through a durable SQLite or PostgreSQL ledger."""


def default_db_path() -> Path | str:
    """The ledger when --db is not given: THUMBCTL_DB, else the config file's db, else the app folder's."""
    return resolve_ledger_path(None)


def _setting(*names: str, help: str, **kwargs: Any) -> Any:
    """An option resolved through thumbctl.config: its env var and default are shown from there."""
    key = setting_key(names[0])
    return typer.Option(*names, help=f"{help} Env {key.env}. Default: {default_text(key.name)}.", **kwargs)


OutOption = Annotated[str | None, _setting("--out", "-o", metavar="DIR", help="Output folder.")]
RatioOption = Annotated[
    list[str] | None, _setting("--ratio", "-r", metavar="W:H", help="Aspect ratio W:H; repeat for several.")
]
SizeOption = Annotated[
    str | None,
    _setting("--size", metavar="PX[,PX...]", help="Longest side of each thumbnail, px; several: 320,640,1280."),
]
FormatOption = Annotated[
    str | None, _setting("--format", metavar="FMT[,FMT...]", help="jpeg, webp, avif or png; several: webp,jpeg.")
]
QualityOption = Annotated[int | None, _setting("--quality", help="Encoder quality 1-100.")]
CropOption = Annotated[str | None, _setting("--crop", help="Crop policy: smart, entropy or center.")]
UpscaleOption = Annotated[
    bool, _setting("--upscale/--no-upscale", help="Allow outputs larger than the source crop.", show_default=False)
]
SheetOption = Annotated[
    bool,
    _setting(
        "--sheet/--no-sheet",
        help="Write the contact sheet (OUT/batches/<batch_id>.html) when the run ends.",
        show_default=False,
    ),
]
BackgroundOption = Annotated[str | None, _setting("--background", help="Colour to flatten transparency onto, #rrggbb.")]
NameOption = Annotated[
    str | None,
    _setting(
        "--name",
        metavar="TEMPLATE",
        help="Thumbnail names in OUT, from the fields {path} {stem} {ratio} {size} {width} {height} {ext}.",
    ),
]
OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace a file at a thumbnail's name that thumbctl did not publish (else the item fails name_taken).",
    ),
]
AttemptsOption = Annotated[
    int | None, _setting("--attempts", min=1, max=100, help="Attempts per item before it fails.")
]
DeadlineOption = Annotated[str | None, _setting("--deadline", help="Batch deadline, e.g. 30m or 2h; 0: none.")]
MaxPixelsOption = Annotated[str | None, _setting("--max-pixels", help="Pixel limit per source.")]
MaxBytesOption = Annotated[str | None, _setting("--max-bytes", help="Byte limit per source.")]
MaxItemsOption = Annotated[int | None, _setting("--max-items", help="Item limit per batch.")]
MaxRunnableOption = Annotated[
    int | None, _setting("--max-runnable", help="Admission: runnable items the ledger may hold.")
]
QueueAgeOption = Annotated[
    str | None,
    _setting("--queue-age-objective", help="Admission: refuse while the oldest runnable item is older (0 = off)."),
]

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="PATH|URL",
        help="Ledger: a file, or postgresql://user@host/dbname for workers on many machines (needs pip install "
        "'thumbctl[postgres]'; the password is shown masked). Env THUMBCTL_DB, config key db. Default: ledger.db "
        "in the per-user app folder.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout, nothing else.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Print errors only.")]
VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", help="More detail: every failure as it happens and in the summary.")
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
ItemTimeoutOption = Annotated[
    str | None,
    _setting(
        "--item-timeout",
        help="Time limit for each stage: decoding a source, and each render; over it, that stage's items fail "
        "`timeout`. 0: none.",
    ),
]
WorkersOption = Annotated[int | None, _setting("--workers", "-w", min=0, help="Worker processes (0: one per CPU).")]
ProfileOption = Annotated[
    str | None,
    typer.Option("--profile", metavar="NAME", help="Use [profiles.NAME] of the config file (env THUMBCTL_PROFILE)."),
]


def _reporter(json_mode: bool, quiet: bool = False, verbose: bool = False, interval: float = 5.0) -> Reporter:
    from .reporter import PipeSafeConsole, Reporter

    no_color = bool(os.environ.get("NO_COLOR"))
    width = None if sys.stderr.isatty() else 200
    return Reporter(
        json_mode=json_mode,
        quiet=quiet,
        verbose=verbose,
        progress_interval=interval,
        console=PipeSafeConsole(stderr=True, highlight=False, no_color=no_color, soft_wrap=True, width=width),
    )


def _progress(reporter: Reporter, batch_id: str | None) -> RunProgress:
    """The live view (terminal) or plain lines (elsewhere) for a run, as the reporter's flags say."""
    from .progress import RunProgress

    return RunProgress(
        reporter.console,
        batch_id=batch_id,
        enabled=not (reporter.quiet or reporter.json_mode),
        interval=reporter.progress_interval,
        verbose=reporter.verbose,
    )


@contextmanager
def _handled(reporter: Reporter) -> Iterator[None]:
    """The one place where errors become exit codes."""
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


def _silence_broken_pipe() -> None:
    """After a closed pipe, point stdout at /dev/null so the exit flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _open_ledger(db: str | None, *, existing: bool = True, read_only: bool = False) -> Ledger:
    """The ledger at ``db`` (or the configured path). Commands that only read or act on
    recorded batches need it to exist: a mistyped --db must not create a new, empty ledger.
    Commands that only read open it ``read_only``, so they work on a read-only mount too."""
    path = resolve_ledger_path(db) if db else default_db_path()
    return Ledger(_existing(path) if existing else path, read_only=read_only)


#: Whether commands that write run the one-time layout migration (:mod:`thumbctl.migrate`). Off while
#: renders still store objects in OUT/objects: a migrated folder would get them back, and the names
#: reused from a moved object would point outside OUT. On once the store lives outside OUT.
MIGRATE_LEGACY_LAYOUT = False


def _legacy_store(ledger: Ledger) -> Path | None:
    """Where the old layout's objects move: beside a SQLite ledger (``<ledger>.store``); None for a
    PostgreSQL ledger, whose store must be named (``--store``)."""
    return Path(ledger.path).with_suffix(".store") if ledger.backend == "sqlite" else None


def _migrate_layout(ledger: Ledger, reporter: Reporter, store: Path | None = None) -> None:
    """Run the one-time layout migration (:mod:`thumbctl.migrate`) when an output folder the ledger
    knows still holds ``objects/``; commands that open the ledger for writing call this first."""
    from .migrate import migrate_legacy_layout, needs_migration

    if not MIGRATE_LEGACY_LAYOUT or not needs_migration(ledger):
        return
    target = store or _legacy_store(ledger)
    if target is None:
        reporter.say("output folders of this ledger still hold objects/ (the old layout): --store DIR moves them")
        return
    reporter.layout_migrated(migrate_legacy_layout(ledger, target))


def _existing(path: Path | str) -> Path | str:
    """``path`` if a ledger is there; a mistyped --db (or THUMBCTL_DB) is an error, not a new ledger.
    A server ledger is checked by connecting to it."""
    if isinstance(path, str):
        return path
    if not path.exists():
        raise LedgerMissing(f"no ledger at {path}: nothing was submitted with this --db (or THUMBCTL_DB)")
    return path


def _source_name(ctx: typer.Context, name: str) -> str | None:
    source = ctx.get_parameter_source(name)
    return None if source is None else source.name


def _settings(ctx: typer.Context) -> Settings:
    """Resolve the settings from the options typed on this command line (not their defaults).

    Click's ParameterSource is compared by name: recent Typer releases carry their own copy of Click.
    """
    typed = {name: value for name, value in ctx.params.items() if _source_name(ctx, name) == "COMMANDLINE"}
    return resolve_settings(typed)


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


def outcome_exit_code(batch: BatchView, interrupted: bool) -> ExitCode:
    """Exit code of a command that ran a batch until it ended."""
    if interrupted:
        return ExitCode.INTERRUPTED
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
    standby: Standby | None = None,
) -> NoReturn:
    """Run a batch until it is terminal with live progress, report it, exit by its outcome."""
    with _progress(reporter, batch_id) as bar:
        result = run_batch(db_path, batch_id, options, interrupts=interrupts.count, observer=bar, standby=standby)
    final = replace(result.batch, replayed=replayed)
    reporter.manifest_errors(result.manifest_errors)
    reporter.sheet_error(result.sheet_error)
    reporter.finished(
        final, interrupted=result.supervision.interrupted, crashes=result.supervision.crashes, sheet=result.sheet_path
    )
    raise typer.Exit(int(outcome_exit_code(final, result.supervision.interrupted)))


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


@app.command("submit", epilog=COMMAND_EPILOG)
def submit_command(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(metavar="SOURCE", help="A folder (scanned recursively) or a manifest: .json, .jsonl, .csv."),
    ],
    out: OutOption = None,
    ratio: RatioOption = None,
    size: SizeOption = None,
    fmt: FormatOption = None,
    quality: QualityOption = None,
    crop: CropOption = None,
    upscale: UpscaleOption = False,
    background: BackgroundOption = None,
    name: NameOption = None,
    overwrite: OverwriteOption = False,
    profile: ProfileOption = None,
    key: Annotated[str | None, typer.Option(help="Idempotency key. Default: derived from the request digest.")] = None,
    include: Annotated[
        list[str] | None, typer.Option(metavar="GLOB", help="Also take files matching this glob.")
    ] = None,
    exclude: Annotated[list[str] | None, typer.Option(metavar="GLOB", help="Skip files matching this glob.")] = None,
    attempts: AttemptsOption = None,
    deadline: DeadlineOption = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="Record the batch and return at once; `thumbctl work` renders it.")
    ] = False,
    workers: WorkersOption = None,
    item_timeout: ItemTimeoutOption = None,
    sheet: SheetOption = True,
    retry_admission: Annotated[
        bool, typer.Option("--retry-admission", help="When refused (exit 75), retry with backoff and jitter.")
    ] = False,
    admission_wait: Annotated[str, typer.Option(help="How long --retry-admission keeps trying.")] = "10m",
    max_pixels: MaxPixelsOption = None,
    max_bytes: MaxBytesOption = None,
    max_items: MaxItemsOption = None,
    max_runnable: MaxRunnableOption = None,
    queue_age_objective: QueueAgeOption = None,
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    stats_interval: StatsIntervalOption = 5.0,
) -> None:
    """Validate SOURCE, record a batch durably, then render it here until it is done (--detach: record only).

    Idempotent: the same request replays (and resumes) the same batch. Exit 0 when every item
    succeeded, 1 when some failed (`thumbctl status BATCH` says why), 4 when it was cancelled
    from elsewhere, 130 on Ctrl-C (the cancel is recorded).
    """
    reporter = _reporter(json_out, quiet, verbose, stats_interval)
    with _handled(reporter):
        settings = _settings(ctx)
        source_path = _source_path(source)
        rules = ScanRules(include=tuple(include or ()), exclude=tuple(exclude or ()))
        options = settings.submit_options(key=key, rules=rules, overwrite=overwrite)
        run_options = settings.run_options()
        wait = _parsed(parse_duration, admission_wait, "--admission-wait")
        db_path = settings.ledger_path
        # The workers fork now, before the ledger is opened, and wait while this process reads the sources.
        with prepare_workers(0 if detach else run_options.workers) as standby, _open_ledger(
            db_path, existing=False
        ) as ledger:
            from .intake import prepare_submission, submit  # Pillow: only the commands that read images import it

            _migrate_layout(ledger, reporter)

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
                if detach:
                    reporter.submitted(batch, prepared.report)
                    return
                reporter.submitted(batch, prepared.report, final=False)
                _render_in_foreground(
                    reporter, db_path, batch.batch_id, run_options, interrupts, replayed=batch.replayed, standby=standby
                )


@app.command(epilog=COMMAND_EPILOG)
def work(
    ctx: typer.Context,
    batch: Annotated[str | None, typer.Option("--batch", help="Only this batch (id or unique prefix).")] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit when no item is queued or running; else run until Ctrl-C.")
    ] = False,
    workers: WorkersOption = None,
    item_timeout: ItemTimeoutOption = None,
    profile: ProfileOption = None,
    db: DbOption = None,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    stats_interval: StatsIntervalOption = 5.0,
) -> None:
    """Run the worker pool over queued items of every batch (or --batch), for detached batches and cron."""
    reporter = _reporter(False, quiet, verbose, stats_interval)
    with _handled(reporter), Interrupts().on_sigint() as interrupts:
        settings = _settings(ctx)
        if MIGRATE_LEGACY_LAYOUT:  # the pool opens its own connections; this one only migrates
            with Ledger(_existing(settings.ledger_path)) as ledger:
                _migrate_layout(ledger, reporter)
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


@app.command(epilog=COMMAND_EPILOG)
def status(
    batch: Annotated[
        str | None,
        typer.Argument(metavar="[BATCH]", help="Batch id (or a unique prefix). Omit to list recent batches."),
    ] = None,
    items: Annotated[bool, typer.Option("--items", help="List the batch's items.")] = False,
    state: Annotated[str | None, typer.Option(help="List only the items in this state (implies --items).")] = None,
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
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    stats_interval: StatsIntervalOption = 5.0,
) -> None:
    """Show recent batches, or one batch: state, fixed total, counts per state, failures by code."""
    reporter = _reporter(json_out, quiet, verbose, stats_interval)
    with _handled(reporter):
        if html and (batch is None or items or watch or json_out):
            raise UsageError("--html prints one batch's markup: give a BATCH and no --items, --state, --watch, --json")
        if state is not None and state not in ITEM_STATES:
            raise typer.BadParameter(f"choose one of {', '.join(ITEM_STATES)}", param_hint="--state")
        items = items or state is not None  # `status B --state failed` means the failed items
        if (items or state or watch) and batch is None:
            raise UsageError("--items, --state and --watch need a BATCH")
        if items and watch:
            raise UsageError("--watch follows a batch's progress; it does not combine with --items or --state")
        target = resolve_ledger_path(db) if db else default_db_path()
        if batch is None and isinstance(target, Path) and not target.exists():
            reporter.batch_list([])  # nothing submitted yet: say so without creating a ledger
            return
        with _open_ledger(db, read_only=True) as ledger:
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


@app.command(epilog=COMMAND_EPILOG)
def events(
    batch: Annotated[str, typer.Argument(metavar="BATCH", help="Batch id (or a unique prefix).")],
    item: Annotated[str | None, typer.Option("--item", help="Only the events of this item id.")] = None,
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """The transition log of a batch: every state change with time, attempt, worker, error code."""
    reporter = _reporter(json_out, quiet)
    with (
        _handled(reporter),
        _open_ledger(db, read_only=True) as ledger,
        ledger.streamed_events(batch, item_id=item) as listed,
    ):
        reporter.events(listed)


@app.command(epilog=COMMAND_EPILOG)
def retry(
    ctx: typer.Context,
    batch: Annotated[str, typer.Argument(metavar="BATCH", help="Batch id (or a unique prefix).")],
    detach: Annotated[bool, typer.Option("--detach", help="Requeue and return; `thumbctl work` renders them.")] = False,
    workers: WorkersOption = None,
    item_timeout: ItemTimeoutOption = None,
    sheet: SheetOption = True,
    profile: ProfileOption = None,
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    stats_interval: StatsIntervalOption = 5.0,
) -> None:
    """Put a batch's failed items back to queued with a fresh attempt budget, then render them.

    Completed work is never redone; items refused at submit (not an image, outside the
    root, unreadable) need a new submit. Exit codes as for submit.
    """
    reporter = _reporter(json_out, quiet, verbose, stats_interval)
    with _handled(reporter):
        settings = _settings(ctx)
        run_options = settings.run_options()
        db_path = settings.ledger_path
        with _open_ledger(db_path) as ledger:
            _migrate_layout(ledger, reporter)
            batch_id = ledger.resolve_batch_id(batch)
            requeued = ledger.retry_failed(batch_id)
            reporter.say(f"Requeued {requeued} failed items of {batch_id}")
            view = ledger.batch(batch_id)
        if detach or not requeued:
            reporter.finished(view, interrupted=False)
            raise typer.Exit(int(outcome_exit_code(view, False)) if view.is_terminal else 0)
        with Interrupts().on_sigint() as interrupts:
            _render_in_foreground(reporter, db_path, batch_id, run_options, interrupts, replayed=False)


@app.command(epilog=COMMAND_EPILOG)
def cancel(
    batch: Annotated[str, typer.Argument(metavar="BATCH", help="Batch id (or a unique prefix).")],
    wait: Annotated[bool, typer.Option("--wait", help="Block until the batch is terminal.")] = False,
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Record a cancel durably: queued items are cancelled at once, running ones at their next checkpoint.

    Repeating it converges on the same state; a finished batch stays as it is.
    """
    reporter = _reporter(json_out, quiet)
    with _handled(reporter), _open_ledger(db) as ledger, Interrupts().on_sigint() as interrupts:
        view = ledger.request_cancel(batch)
        if wait:
            view = wait_until_terminal(ledger, view.batch_id, should_stop=interrupts)
        reporter.cancelled(view)


@app.command(epilog=COMMAND_EPILOG)
def stats(
    window: Annotated[str, typer.Option(help="How far back rates, bytes and timings look, e.g. 15m, 1h, 7d.")] = "1h",
    batch: Annotated[str | None, typer.Option("--batch", help="Only this batch (id or unique prefix).")] = None,
    prometheus: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Also write the metrics in Prometheus text format, atomically."),
    ] = None,
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Queue age, admission/claim/completion rates, retries, cancellation lag, bytes, dedup hits, stage timings."""
    from .stats import build_report, write_prometheus_file

    reporter = _reporter(json_out, quiet)
    with _handled(reporter):
        span = _parsed(parse_duration, window, "--window")
        with _open_ledger(db, read_only=True) as ledger:
            batch_id = ledger.resolve_batch_id(batch) if batch else None
            report = build_report(ledger.stats_facts(ledger.clock() - span, batch_id), batch_id)
        if prometheus is not None:
            write_prometheus_file(report, prometheus)
        reporter.stats(report, str(prometheus) if prometheus else None)


@app.command("codes", epilog=COMMAND_EPILOG)
def codes_command(json_out: JsonOption = False, db: DbOption = None) -> None:
    """List the item error codes and the exit codes (--db is accepted, as everywhere, and unused)."""
    reporter = _reporter(json_out)
    if json_out:
        reporter.emit_json(
            {
                "item_error_codes": {c: {"transient": t, "meaning": m} for c, (t, m) in ITEM_ERROR_CODES.items()},
                "exit_codes": {str(int(c)): m for c, m in EXIT_CODE_MEANINGS.items()},
            }
        )
        return
    for code, (transient, meaning) in ITEM_ERROR_CODES.items():
        reporter.say(f"{code:20} {'transient' if transient else 'permanent':9}  {meaning}")
    reporter.say("")
    for exit_code, meaning in EXIT_CODE_MEANINGS.items():
        reporter.say(f"exit {int(exit_code):<3}  {meaning}")


@app.command("config", epilog=COMMAND_EPILOG)
def config_command(
    ctx: typer.Context,
    profile: ProfileOption = None,
    out: OutOption = None,
    ratio: RatioOption = None,
    size: SizeOption = None,
    fmt: FormatOption = None,
    quality: QualityOption = None,
    crop: CropOption = None,
    upscale: UpscaleOption = False,
    background: BackgroundOption = None,
    name: NameOption = None,
    attempts: AttemptsOption = None,
    deadline: DeadlineOption = None,
    workers: WorkersOption = None,
    item_timeout: ItemTimeoutOption = None,
    max_pixels: MaxPixelsOption = None,
    max_bytes: MaxBytesOption = None,
    max_items: MaxItemsOption = None,
    max_runnable: MaxRunnableOption = None,
    queue_age_objective: QueueAgeOption = None,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show the resolved settings and where each came from: flag, THUMBCTL_* env, config file or default.

    Takes the same setting flags as submit, to show what a submit with them would use.
    """
    reporter = _reporter(json_out)
    with _handled(reporter):
        reporter.settings(_settings(ctx))


class SheetOrder(StrEnum):
    """``thumbctl sheet --sort`` (see :data:`thumbctl.sheet.SORT_ORDERS`)."""

    ledger = "ledger"
    score = "score"


@app.command(epilog=COMMAND_EPILOG)
def sheet(
    batch: Annotated[str, typer.Argument(metavar="BATCH", help="Batch id (or a unique prefix).")],
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
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Write a contact sheet: every source with its crops drawn on a small copy of it, the crops
    side by side, each with a manifest line to re-crop it; failures as one row with their reason.

    One self-contained HTML page (no network, no JavaScript) with relative links to the
    outputs; open it in a browser to review the crops. Exit 0 once written, whatever the batch's state.
    """
    from .sheet import write_contact_sheet

    reporter = _reporter(json_out, quiet)
    with _handled(reporter), _open_ledger(db, read_only=True) as ledger:
        reporter.sheet_written(write_contact_sheet(ledger, batch, output, sort=sort.value))


GraceOption = Annotated[
    str,
    typer.Option(
        "--grace",
        help=f"Temp files whose writer may still be running are left this long ({DEFAULT_GRACE / 3600:.0f}h).",
    ),
]


@app.command("reconcile", epilog=COMMAND_EPILOG)
def reconcile_command(
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
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Check the ledger against the outputs: stalled leases, unfinished cancels, objects, friendly names,
    orphans, temp files. Live work is never touched. Exit 0 when clean, 1 when findings remain (for cron)."""
    from .reconcile import reconcile

    reporter = _reporter(json_out, quiet)
    with _handled(reporter):
        grace_seconds = _parsed(parse_duration, grace, "--grace")
        with _open_ledger(db) as ledger:
            _migrate_layout(ledger, reporter)
            report = reconcile(ledger, repair=repair, deep=deep, grace=grace_seconds)
        reporter.reconciled(report, repair=repair)
    raise typer.Exit(int(ExitCode.OK if report.clean else ExitCode.PARTIAL))


@app.command("gc", epilog=COMMAND_EPILOG)
def gc_command(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Expire terminal batches whose last change is older, e.g. 30d.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would go; change nothing.")] = False,
    grace: GraceOption = "1h",
    db: DbOption = None,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Retention: expire old terminal batches, then remove objects no remaining batch references (checked
    by derivative key), their expired friendly names, stale temp files and expired batch manifests."""
    from .reconcile import collect_garbage

    reporter = _reporter(json_out, quiet)
    with _handled(reporter):
        age = _parsed(parse_duration, older_than, "--older-than")
        grace_seconds = _parsed(parse_duration, grace, "--grace")
        with _open_ledger(db) as ledger:
            _migrate_layout(ledger, reporter)
            report = collect_garbage(ledger, age, dry_run=dry_run, grace=grace_seconds)
        reporter.garbage_collected(report)
        if report.errors:
            raise typer.Exit(int(ExitCode.PARTIAL))


#: Click's base exception, found through a public class: recent Typer releases carry their own Click.
_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main(argv: list[str] | None = None) -> None:
    """The ``thumbctl`` entry point: Click's usage errors become one line with a stable code too."""
    args = sys.argv[1:] if argv is None else argv
    try:
        code = app(args=args, prog_name="thumbctl", standalone_mode=False)
    except _CLICK_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `thumbctl`: the help, as Click shows it
            exc.show()  # type: ignore[attr-defined]
            sys.exit(int(ExitCode.USAGE))
        reporter = _reporter("--json" in args)
        hint = exc.ctx.command_path if getattr(exc, "ctx", None) else "thumbctl"  # type: ignore[attr-defined]
        message = f"{exc.format_message()} (see {hint} --help)"  # type: ignore[attr-defined]
        reporter.error(UsageError(message))
        sys.exit(int(ExitCode.USAGE))
    except typer.Abort:
        sys.exit(int(ExitCode.INTERRUPTED))
    sys.exit(code if isinstance(code, int) else 0)
