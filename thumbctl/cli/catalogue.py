"""``thumbctl catalogue``: the live thumbnails of an OUT, whichever batch published them."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from ..config.settings import DEFAULT_SOURCE
from .options import COMMON
from .resolution import ledger_target, settings_from_context
from .session import handled, open_ledger, reporter_for


class CatalogueSort(StrEnum):
    """``thumbctl catalogue --sort`` (see :class:`thumbctl.review.catalogue.CatalogueOrder`)."""

    name = "name"
    score = "score"


def catalogue_command(
    ctx: typer.Context,
    location: Annotated[
        str | None,
        typer.Argument(
            metavar="OUT",
            help="The output folder or s3://bucket/prefix. Default: the configured out, else the only OUT "
            "this ledger publishes to.",
            show_default=False,
        ),
    ] = None,
    sort: Annotated[
        CatalogueSort, typer.Option("--sort", help="name, or score: the worst crops first (unknown ones before all).")
    ] = CatalogueSort.name,
    changed: Annotated[
        str | None,
        typer.Option(
            "--changed",
            metavar="SINCE",
            help="Only names published after SINCE: a batch id, a duration (2h, 7d) or a date or time (UTC).",
        ),
    ] = None,
    json_lines: Annotated[
        bool, typer.Option("--jsonl", help="One JSON object a line (JSON Lines).", rich_help_panel=COMMON)
    ] = False,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """List every live thumbnail of an OUT, one line each, whichever batch made it: its source,
    ratio, size and format, the crop window with its score, the crop fix, and when it last changed."""
    from ..review.catalogue import CatalogueOrder, Since, changed_since, chosen_out, ordered

    reporter = reporter_for(json_out, quiet, json_lines=json_lines)
    with handled(reporter):
        since = None if changed is None else Since.parse(changed)
        with open_ledger(ledger_target(ctx), read_only=True) as ledger:
            configured = settings_from_context(ctx).values["out"]  # THUMBCTL_OUT or the file's out
            out_dir = chosen_out(ledger, location, None if configured.source == DEFAULT_SOURCE else configured.value)
        fill_windows(ctx, out_dir)
        with open_ledger(ledger_target(ctx), read_only=True) as ledger:
            entries = ledger.catalogue.entries(out_dir)
            if since is not None:
                entries = changed_since(entries, since.resolve(ledger))
        reporter.catalogue(out_dir, ordered(entries, CatalogueOrder(sort.value)))


def fill_windows(ctx: typer.Context, out_dir: str) -> None:
    """Before a listing or a sheet of ``out_dir``: choose again the crop windows the catalogue does not
    know (see :mod:`thumbctl.engine.windows`), in the ledger opened for writing only when there are some."""
    from ..engine.windows import fill_unknown_windows, unknown_windows

    with open_ledger(ledger_target(ctx), read_only=True) as ledger:
        if not unknown_windows(ledger.catalogue.entries(out_dir)):
            return
    with open_ledger(ledger_target(ctx)) as ledger:
        fill_unknown_windows(ledger, out_dir, ledger.catalogue.entries(out_dir))
