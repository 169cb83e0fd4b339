"""The commands that read, besides ``status`` (:mod:`.status`): ``events``, ``stats``, ``sheet``, ``codes``
and ``config``."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..config.resolve import with_recorded_store, with_s3_endpoint
from ..config.settings import DEFAULT_SOURCE
from ..core.errors import UsageError
from ..core.profile import parse_duration
from .options import COMMON, BatchAlias, batch_argument, one_batch
from .resolution import ledger_target, settings_from_context
from .session import Interrupts, handled, open_ledger, parsed, reporter_for

if TYPE_CHECKING:
    from ..config.resolve import Settings
    from ..review.catalogue import Since
    from ..review.cataloguesheet import CatalogueSheetSummary


def events(
    ctx: typer.Context,
    batch: Annotated[str, batch_argument()],
    item: Annotated[str | None, typer.Option("--item", help="Only the events of this item id.")] = None,
    json_lines: Annotated[
        bool,
        typer.Option(
            "--jsonl",
            help="Each event as one JSON object a line (JSON Lines).",
            rich_help_panel=COMMON,
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Print events as they happen, until the batch is final.",
        ),
    ] = False,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """The transition log of a batch: state changes with time, attempt, worker, error."""
    reporter = reporter_for(json_out, quiet, json_lines=json_lines or (follow and json_out))
    with handled(reporter), open_ledger(ledger_target(ctx), read_only=True) as ledger:
        if follow:
            from ..engine.runner import follow_events

            with Interrupts().on_sigint() as interrupts:
                reporter.followed_events(follow_events(ledger, batch, item_id=item, should_stop=interrupts))
            return
        with ledger.views.streamed_events(batch, item_id=item) as listed:
            reporter.events(listed)


def stats(
    ctx: typer.Context,
    batch: Annotated[str | None, batch_argument("Only this batch (id or unique prefix). Omit: every batch.")] = None,
    batch_option: BatchAlias = None,
    window: Annotated[str, typer.Option(help="How far back rates, bytes and timings look, e.g. 15m, 1h, 7d.")] = "1h",
    prometheus: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Also write metrics in Prometheus text format, atomically: counters over the whole ledger, "
            "quantiles over --window.",
        ),
    ] = None,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Queue age, admission/claim/completion rates, retries, cancellation lag, bytes, dedup hits, stage timings."""
    from ..review.stats import build_report, write_prometheus_file

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        span = parsed(parse_duration, window, "--window")
        batch = one_batch(batch, batch_option)
        with open_ledger(ledger_target(ctx), read_only=True) as ledger:
            batch_id = ledger.views.resolve_batch_id(batch) if batch else None
            facts = ledger.views.stats_facts(ledger.clock() - span, batch_id)
            report = build_report(facts, batch_id)
            # the counters count over everything the ledger holds, not the window
            totals = build_report(ledger.views.stats_facts(0.0, batch_id), batch_id) if prometheus else None
        if prometheus is not None and totals is not None:
            write_prometheus_file(report, totals, prometheus)
        reporter.stats(report, str(prometheus) if prometheus else None)
        reporter.damaged_rows(facts.damaged)


def codes_command(json_out: bool = False, quiet: bool = False) -> None:
    """List the item error codes and the exit codes (--db is accepted, as everywhere, and unused)."""
    reporter_for(json_out, quiet).codes()


def config_command(ctx: typer.Context, json_out: bool = False, quiet: bool = False) -> None:
    """Show the resolved settings and where each came from: flag, THUMBCTL_* env, config file or default.

    Takes the same setting flags as submit, to show what a submit with them would use.
    """
    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        settings = settings_from_context(ctx)
        from ..publishing.stores import recorded_store_of

        shown = with_s3_endpoint(with_recorded_store(settings, recorded_store_of(settings.ledger_path)), os.environ)
        reporter.settings(shown)


class SheetOrder(StrEnum):
    """``thumbctl sheet --sort`` (see :data:`thumbctl.review.sheet.SORT_ORDERS`)."""

    ledger = "ledger"
    score = "score"


def sheet(
    ctx: typer.Context,
    batch: Annotated[
        str | None,
        batch_argument("Batch id (or a unique prefix). Omit: the live catalogue of OUT, whichever batch made it."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE.html",
            help="Where to write the page; its folder must exist. Default: OUT/batches/<batch_id>.html, "
            "or OUT/batches/catalogue.html without a batch (catalogue-changed.html with --changed).",
        ),
    ] = None,
    sort: Annotated[
        SheetOrder,
        typer.Option(
            "--sort",
            help="Source order: ledger (as submitted; by name without a batch) or score (lowest crop score "
            "first). Sources with a crop missing come first either way.",
        ),
    ] = SheetOrder.ledger,
    changed: Annotated[
        str | None,
        typer.Option(
            "--changed",
            metavar="SINCE",
            help="Without a batch: only names published after SINCE, a batch id, a duration (2h, 7d) or a "
            "date or time (UTC).",
        ),
    ] = None,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Write a contact sheet: every source with its crops drawn on a small copy of it, the crops
    side by side, each with the command that fixes it; failures as one row with their reason.

    Of a batch, or (without BATCH) of every live thumbnail of OUT (--out, else the configured out,
    else the only OUT the ledger publishes to), reused outputs with the window of their render.
    One self-contained HTML page (no network, no JavaScript) with relative links to the
    outputs; open it in a browser to review the crops. Exit 0 once written, whatever the batch's state.
    """
    from ..review.catalogue import Since

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        if batch is not None and changed is not None:
            raise UsageError("--changed narrows the catalogue's sheet: give it without a batch")
        since = None if changed is None else Since.parse(changed)
        settings = settings_from_context(ctx)  # the S3 settings, for an OUT or a store in a bucket
        if batch is not None:
            from ..review.sheet import write_contact_sheet

            with open_ledger(ledger_target(ctx), read_only=True) as ledger:
                reporter.sheet_written(write_contact_sheet(ledger, batch, output, sort=sort.value))
            return
        reporter.catalogue_sheet_written(catalogue_sheet(ctx, settings, output, sort.value, since))


def catalogue_sheet(
    ctx: typer.Context, settings: Settings, output: Path | None, sort: str, since: Since | None
) -> CatalogueSheetSummary:
    """``sheet`` without a batch: the catalogue's sheet of the OUT meant (configured, or the only one),
    its unknown windows chosen again first (see :func:`.catalogue.fill_windows`)."""
    from ..review.catalogue import chosen_out
    from ..review.cataloguesheet import write_ledger_catalogue_sheet
    from .catalogue import fill_windows

    configured = settings.values["out"]
    with open_ledger(ledger_target(ctx), read_only=True) as ledger:
        out_dir = chosen_out(ledger, None, None if configured.source == DEFAULT_SOURCE else configured.value)
        entries = ledger.catalogue.entries(out_dir)
    fill_windows(ctx, out_dir, entries)
    with open_ledger(ledger_target(ctx), read_only=True) as ledger:
        after = since.resolve(ledger) if since is not None else None
        return write_ledger_catalogue_sheet(ledger, out_dir, output, sort=sort, since=after)
