"""``thumbctl catalogue``: the live thumbnails of an OUT, whichever batch published them."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from ..config.settings import DEFAULT_SOURCE
from .options import COMMON
from .resolution import ledger_target, settings_from_context
from .session import handled, open_ledger, reporter_for

if TYPE_CHECKING:
    from ..core.catalogue import CatalogueEntry


class CatalogueSort(StrEnum):
    """``thumbctl catalogue --sort`` (see :class:`thumbctl.review.catalogue.CatalogueOrder`)."""

    name = "name"
    score = "score"


#: The OUT a command over the catalogue reads (``catalogue``, ``review``).
OutArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="OUT",
        help="The output folder or s3://bucket/prefix. Default: the configured out, else the only OUT "
        "this ledger publishes to.",
        show_default=False,
    ),
]


def catalogue_command(
    ctx: typer.Context,
    location: OutArgument = None,
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
            entries = ledger.catalogue.entries(out_dir)
            after = since.resolve(ledger) if since is not None else None
        if fill_windows(ctx, out_dir, entries):
            with open_ledger(ledger_target(ctx), read_only=True) as ledger:
                entries = ledger.catalogue.entries(out_dir)
        if after is not None:
            entries = changed_since(entries, after)
        reporter.catalogue(out_dir, ordered(entries, CatalogueOrder(sort.value)))


def fill_windows(ctx: typer.Context, out_dir: str, entries: list[CatalogueEntry]) -> bool:
    """Before a listing or a sheet of ``out_dir`` (its ``entries`` as just read): choose again the crop
    windows the catalogue does not know (see :mod:`thumbctl.engine.windows`), in the ledger opened
    for writing only when there are some; whether any was recorded."""
    from ..engine.windows import fill_unknown_windows, unknown_windows

    if not unknown_windows(entries):
        return False
    with open_ledger(ledger_target(ctx)) as ledger:
        return fill_unknown_windows(ledger, out_dir, ledger.catalogue.entries(out_dir)) > 0
