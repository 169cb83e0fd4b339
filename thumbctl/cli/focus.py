"""``thumbctl focus``: show, set and clear the crop fixes remembered for a photo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..config.s3location import is_s3
from ..sources.downloads import is_url
from .resolution import settings_from_context
from .session import handled, open_ledger, reporter_for


def focus_command(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            metavar="PHOTO",
            help="The photo: a file, or the URL or s3:// key of one a batch has read (its content is what the fix "
            "is remembered for).",
        ),
    ],
    ratio: Annotated[
        str | None,
        typer.Option(
            "--ratio",
            metavar="RATIOS",
            help="The ratios to show, set or clear, e.g. 4:3 or 1:1,4:3 (default: every ratio; --at needs it).",
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at", metavar="X,Y", help="Centre the crops on this point, 0..1 from the top-left of the upright photo."
        ),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Forget the fix: the crop policy frames the photo again.")
    ] = False,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Show, set (--at) or clear (--clear) a photo's remembered crop fixes. Every later submit that renders
    the same content at that ratio, from a folder or a manifest, centres the crop there."""
    from ..intake.focus import apply_focus, focus_request, read_photo, recorded_photo

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        request = focus_request(ratio, at, clear)
        settings = settings_from_context(ctx)
        remote = is_s3(source) or is_url(source)
        photo = None if remote else read_photo(Path(source), settings.limits())
        changing = request.point is not None or request.clear
        with open_ledger(settings.ledger_path, existing=remote or not changing, read_only=not changing) as ledger:
            shown = apply_focus(ledger, photo or recorded_photo(ledger, source), request)
        reporter.focus_points(shown)
