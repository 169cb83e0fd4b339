"""The contact sheet of an OUT: every live photo of the catalogue with its current crop windows,
scores and fix lines, whichever batch made each name (a reused output's window is its render's).

It is the batch sheet's page (:func:`.sheet.render_page`) over the catalogue's entries, written to
``OUT/batches/catalogue.html`` unless ``-o`` names a file; its header says which OUT, how many
photos and names, how many carry a crop fix, and since when the page lists changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from html import escape
from pathlib import Path

from ..config.options import DEFAULT_MARKUP, SiteMarkup
from ..core.catalogue import CatalogueEntry
from ..core.errors import CannotWrite
from ..core.models import BatchView
from ..ledger import Ledger
from ..storage.locations import output_target_at
from .catalogue import changed_since, item_of, source_id
from .crops import FixLines, paste_base, paste_note
from .sheet import (
    fix_notes,
    item_key,
    linked_output,
    named_folder,
    previews,
    public_links,
    render_page,
    timestamp,
)

#: The page's name in OUT/batches/ (a batch sheet is ``<batch_id>.html``; no batch id is this), and
#: that of a page narrowed by ``--changed``, so it never replaces the whole catalogue's.
CATALOGUE_PAGE = "catalogue"
CHANGED_PAGE = "catalogue-changed"


@dataclass(frozen=True)
class CatalogueSheetSummary:
    """What ``thumbctl sheet`` (without a batch) wrote."""

    out: str
    path: str
    sources: int
    names: int
    #: Names whose output file is gone (shown as placeholders).
    missing: int
    #: Names whose render recorded no crop window (shown without one).
    unknown: int

    def to_json(self) -> dict[str, object]:
        return {
            "out": self.out,
            "path": self.path,
            "sources": self.sources,
            "names": self.names,
            "missing": self.missing,
            "unknown": self.unknown,
        }


def write_catalogue_sheet(
    out_dir: str,
    entries: list[CatalogueEntry],
    path: Path | None = None,
    *,
    sort: str = "ledger",
    since: str | None = None,
    ledger: str = "",
    notes: dict[str, str] | None = None,
    first: frozenset[str] = frozenset(),
    markup: SiteMarkup = DEFAULT_MARKUP,
) -> CatalogueSheetSummary:
    """Write the contact sheet of ``entries``, the live names of ``out_dir`` (all, or those changed
    after ``since``), to ``path`` (default ``OUT/batches/catalogue.html``, ``catalogue-changed.html``
    with ``since``; its folder must exist).
    ``sort``: ``ledger`` (by name) or ``score`` (the lowest crop score first); ``ledger``: the ledger
    the fix lines name (:class:`.sheet.FixLines`); ``notes``: :func:`.sheet.fix_notes`;
    ``first``: the names whose photos come first (a submit's changes); ``markup``: OUT's, for where
    its documents go (``--documents``) and its public URLs."""
    out = output_target_at(out_dir)
    pages = out if path is not None or not markup.documents else output_target_at(markup.documents)
    target = pages.page_path(CATALOGUE_PAGE if since is None else CHANGED_PAGE, path)
    items = [item_of(entry) for entry in entries]
    linked = {item_key(item): link for item in items if (link := linked_output(item, out))}
    linked = public_links(out_dir, pages.root, markup.base_url, linked)
    sizes = {item.item_id: entry.source_size for item, entry in zip(items, entries, strict=True) if entry.source_size}
    page_dir = os.path.dirname(target)

    leading = frozenset(item.item_id for item in items if item.friendly_path in first)

    def header(sources: int, ratios: list[str], colours: dict[str, str]) -> str:
        return catalogue_header(out_dir, entries, sources, ratios, colours, since, len(leading))

    title = "Catalogue · " + named_folder(out_dir)
    photos = previews(items)
    bases = {source_id(entry): paste_base(entry.source_root) for entry in entries}
    fixes = FixLines(ledger, bases)
    page = render_page(
        title, header, items, sizes, linked, page_dir, photos, sort=sort, fixes=fixes, notes=notes, first=leading
    )
    try:
        pages.write_page(target, page, create_folder=path is None)
    except OSError as exc:
        raise CannotWrite(f"cannot write the contact sheet to {target}: {exc.strerror or exc}") from exc
    return CatalogueSheetSummary(
        out=out_dir,
        path=target,
        sources=len({item.item_id for item in items}),
        names=len(items),
        missing=sum(1 for item in items if item_key(item) not in linked),
        unknown=sum(1 for entry in entries if entry.crop is None and entry.fit == "cover"),
    )


def catalogue_header(
    out_dir: str,
    entries: list[CatalogueEntry],
    sources: int,
    ratios: list[str],
    colours: dict[str, str],
    since: str | None,
    changed: int = 0,
) -> str:
    """The page's header; ``changed``: the photos a submit just changed, shown first."""
    fixed = sum(1 for entry in entries if entry.focus is not None)
    unknown = sum(1 for entry in entries if entry.crop is None and entry.fit == "cover")
    counts = [(sources, "photos"), (len(entries), "thumbnails"), (fixed, "thumbnails with a crop fix")]
    if changed:
        counts.insert(0, (changed, "changed by this run, shown first"))
    if unknown:
        counts.append((unknown, "crop window unknown"))
    listed = "".join(f'<li class="count"><b>{n}</b> {escape(what)}</li>' for n, what in counts)
    legend = "".join(f'<li><i style="--c:{colours[r]}"></i>{escape(r)}</li>' for r in ratios)
    newest = max((entry.changed_at for entry in entries), default=None)
    facts = [("out", escape(named_folder(out_dir))), ("last change", timestamp(newest))]
    if since is not None:
        facts.append(("changed after", timestamp(since)))
    if (where := paste_note(entry.source_root for entry in entries)) is not None:
        facts.append(("fix lines", escape(where)))
    dl = "".join(f"<div><dt>{escape(k)}</dt><dd>{v}</dd></div>" for k, v in facts)
    return (
        '<header class="batch">\n'
        '<div class="title"><h1>Catalogue</h1>'
        f'<code class="batch-id">{escape(named_folder(out_dir))}</code></div>\n'
        f'<ul class="counts">{listed}</ul>\n'
        f'<dl class="facts">{dl}</dl>\n'
        f'<ul class="legend" aria-label="crop windows">{legend}</ul>\n'
        "</header>"
    )


def write_ledger_catalogue_sheet(
    ledger: Ledger,
    out_dir: str,
    path: Path | None = None,
    *,
    sort: str = "ledger",
    since: str | None = None,
    changed_by: BatchView | None = None,
) -> CatalogueSheetSummary:
    """The catalogue sheet of ``out_dir`` as the ledger holds it now (see :func:`write_catalogue_sheet`):
    every live name, or those changed after ``since``; with ``changed_by`` (a submit's batch), the
    photos whose names changed since it began come first."""
    entries = ledger.catalogue.entries(out_dir)
    if since is not None:
        entries = changed_since(entries, since)
    first = frozenset(e.name for e in entries if changed_by is not None and e.changed_at >= changed_by.created_at)
    notes = fix_notes(ledger, ((source_id(e), e.source_root, e.source) for e in entries))
    markup = ledger.catalogue.markup(out_dir)
    return write_catalogue_sheet(
        out_dir, entries, path, sort=sort, since=since, ledger=str(ledger.path), notes=notes, first=first, markup=markup
    )
