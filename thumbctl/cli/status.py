"""``thumbctl status``: recent batches, one batch's detail, its items, its markup, or the batch
followed live."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import UsageError
from ..core.models import ITEM_STATES
from .options import StatsIntervalOption, batch_argument, choice_option
from .resolution import ledger_target
from .session import Interrupts, handled, open_ledger, reporter_for, settled

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..report.reporter import Reporter


def status(
    ctx: typer.Context,
    batch: Annotated[str | None, batch_argument("Batch id (or a unique prefix). Omit to list recent batches.")] = None,
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
    reporter = reporter_for(json_out, quiet, verbose, stats_interval)
    with handled(reporter):
        items = items or state is not None  # `status B --state failed` means the failed items
        check_status_flags(batch, items=items, watch=watch, html=html, json_out=json_out)
        target = settled(ledger_target(ctx))
        if batch is None and isinstance(target, Path) and not target.exists():
            reporter.batch_list([])  # nothing submitted yet: say so without creating a ledger
            return
        with open_ledger(target, read_only=True) as ledger:
            if batch is None:
                reporter.batch_list(ledger.views.batches(limit))
            elif items:
                batch_id = ledger.views.resolve_batch_id(batch)
                with ledger.views.streamed_items(batch_id, state=state) as listed:
                    reporter.items(batch_id, listed)
            elif html:
                from ..review.markup import batch_snippets

                reporter.text(batch_snippets(ledger.views, batch, ledger.catalogue.markup))
            elif watch:
                watch_live(ledger, reporter, batch)
            else:
                reporter.batch_detail(ledger.views.batch(batch))


def check_status_flags(batch: str | None, *, items: bool, watch: bool, html: bool, json_out: bool) -> None:
    """The combinations of ``status`` flags that say nothing: a usage error each."""
    if html and (batch is None or items or watch or json_out):
        raise UsageError("--html prints one batch's markup: give a BATCH and no --items, --state, --watch, --json")
    if (items or watch) and batch is None:
        raise UsageError("--items, --state and --watch need a BATCH")
    if items and watch:
        raise UsageError("--watch follows a batch's progress; it does not combine with --items or --state")


def watch_live(ledger: Ledger, reporter: Reporter, batch: str) -> None:
    """``status BATCH --watch``: the batch followed until it is terminal or Ctrl-C, then its detail."""
    from ..engine.runner import watch_batch  # imported only here: status starts without the runner

    batch_id = ledger.views.resolve_batch_id(batch)
    with Interrupts().on_sigint() as interrupts, reporter.run_progress(batch_id) as bar:
        watch_batch(ledger, batch_id, observer=bar, should_stop=interrupts)
    reporter.batch_detail(ledger.views.batch(batch_id))
