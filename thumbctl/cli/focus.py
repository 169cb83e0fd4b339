"""``thumbctl focus``: show, set and clear the crop fixes remembered for a photo, and move a root's
fixes between the ledger and its fix file (``thumbctl-focus.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..config.s3location import is_s3
from ..core.errors import ExitCode, UsageError
from ..sources.downloads import is_url
from .resolution import settings_from_context
from .session import handled, open_ledger, reporter_for

if TYPE_CHECKING:
    from ..report import Reporter


def focus_command(
    ctx: typer.Context,
    source: Annotated[
        str | None,
        typer.Argument(
            metavar="PHOTO",
            help="The photo: a file, or the URL or s3:// key of one a batch has read (its content is what the fix "
            "is remembered for). Not with --export or --import.",
        ),
    ] = None,
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
    root: Annotated[
        str | None,
        typer.Option(
            "--root",
            metavar="ROOT",
            help="The fix file's root: a source folder, a manifest (its folder) or an s3:// prefix "
            "(default: that of the newest batch that read the photo).",
        ),
    ] = None,
    export: Annotated[
        bool, typer.Option("--export", help="Write every fix the ledger holds for ROOT's live photos to its fix file.")
    ] = False,
    import_: Annotated[
        bool, typer.Option("--import", help="Remember every fix of ROOT's fix file in the ledger.")
    ] = False,
    json_out: bool = False,
    quiet: bool = False,
) -> None:
    """Show, set (--at) or clear (--clear) a photo's remembered crop fixes. A change is written to the
    ledger and to thumbctl-focus.json at the photo's source root (commit it with the photos): every
    later submit that renders the same content at that ratio centres the crop there."""
    from ..intake.fixwrite import given_root, root_of
    from ..intake.focus import apply_focus, focus_request, read_photo, recorded_photo

    reporter = reporter_for(json_out, quiet)
    with handled(reporter):
        request = focus_request(ratio, at, clear)
        settings = settings_from_context(ctx)
        chosen_root = given_root(root) if root is not None else None
        if export or import_:
            _move_fixes(ctx, reporter, source, chosen_root, export=export, import_=import_)
            return
        if source is None:
            raise UsageError("give the PHOTO whose fixes to show, set or clear (or --export / --import)")
        remote = is_s3(source) or is_url(source)
        photo = None if remote else read_photo(Path(source), settings.limits())
        changing = request.point is not None or request.clear
        with open_ledger(settings.ledger_path, existing=remote or not changing, read_only=not changing) as ledger:
            photo = photo or recorded_photo(ledger, source)
            shown = apply_focus(ledger, photo, request, root_of(ledger, photo.path, chosen_root) if changing else None)
        reporter.focus_points(shown)
        if shown.file is not None and shown.file.problem:
            raise typer.Exit(int(ExitCode.PARTIAL))


def _move_fixes(
    ctx: typer.Context, reporter: Reporter, source: str | None, root: str | None, *, export: bool, import_: bool
) -> None:
    """``--export`` / ``--import``: every fix of ``root`` (else the newest batch's root)."""
    from ..intake.fixwrite import export_fixes, import_fixes, newest_root
    from ..intake.focus import described_photo

    if export and import_:
        raise UsageError("--export writes the file from the ledger and --import the ledger from the file: give one")
    if source is not None:
        raise UsageError("--export and --import move every fix of a root: give --root ROOT, not a PHOTO")
    settings = settings_from_context(ctx)
    with open_ledger(settings.ledger_path, existing=True, read_only=False) as ledger:
        root = root or newest_root(ledger)
        if export:
            moved = export_fixes(ledger, root, lambda path, digest: described_photo(path, digest, settings.limits()))
        else:
            moved = import_fixes(ledger, root)
    reporter.fixes_moved(moved, "export" if export else "import")
    if moved.problem:
        raise typer.Exit(int(ExitCode.PARTIAL))
