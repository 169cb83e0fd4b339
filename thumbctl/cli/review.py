"""``thumbctl review``: the browser page over an OUT's live crops."""

from __future__ import annotations

import webbrowser
from collections.abc import Callable
from typing import Annotated

import typer

from ..config.settings import DEFAULT_SOURCE
from ..core.errors import ExitCode, UsageError
from .catalogue import OutArgument, fill_windows
from .resolution import ledger_target, settings_from_context
from .session import Interrupts, handled, open_ledger, reporter_for

#: What a missing ``review`` extra is told.
REVIEW_EXTRA = (
    "thumbctl review needs its web server: pip install 'thumbctl[review]' "
    "(in a clone of thumbctl: pip install '.[review]')"
)


def review_command(
    ctx: typer.Context,
    location: OutArgument = None,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="The loopback port to listen on (0: a free one).")
    ] = 0,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the page's address only; do not open a browser.")
    ] = False,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Open a page in the browser over an OUT's live crops: click or drag to fix a crop, Apply to
    render its thumbnails again, Approve what is right. It listens on 127.0.0.1 only, behind a token
    in its address; Ctrl-C stops it."""
    from ..cropreview.renders import WorkProcesses
    from ..cropreview.session import ReviewSession
    from ..review.catalogue import chosen_out

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        serve = _server()
        settings = settings_from_context(ctx)
        with open_ledger(ledger_target(ctx), read_only=True) as ledger:
            configured = settings.values["out"]
            out_dir = chosen_out(ledger, location, None if configured.source == DEFAULT_SOURCE else configured.value)
        store = settings.store_path
        renders = WorkProcesses(settings.ledger_path, None if store is None else str(store))
        session = ReviewSession(settings.ledger_path, out_dir, settings.limits(), renders)
        session.warm_in_background(lambda entries: fill_windows(ctx, out_dir, entries))

        def ready(url: str) -> None:
            opened = not no_browser and _open(url)
            reporter.review_ready(url, out_dir, opened=opened)

        with Interrupts().on_sigint() as interrupts:  # uvicorn stops at Ctrl-C, then raises it again: counted here
            serve(session, port, ready, lambda: interrupts.count() > 0)
        sheet, sheet_error = session.write_catalogue_sheet() if settings["sheet"] else (None, None)
        reporter.sheet_error(sheet_error)
        reporter.review_stopped(session.pending(), bool(session.batches), sheet)
        if interrupts.count():
            raise typer.Exit(int(ExitCode.INTERRUPTED))


def _server() -> Callable[..., None]:
    """The server's entry point, or a one-line hint when the ``review`` extra is not installed."""
    try:
        from ..web.server import serve
    except ImportError:
        raise UsageError(REVIEW_EXTRA, code="review_unavailable") from None
    return serve


def _open(url: str) -> bool:
    """Whether a browser was opened on ``url`` (none on a machine without one)."""
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False
