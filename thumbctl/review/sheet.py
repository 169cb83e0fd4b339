"""The contact sheet of a batch: one self-contained HTML page to review its crops at a glance.

Each source is a card: its id and size, a small copy of the photo with every crop
window drawn on it, and its crops side by side at their true aspect ratios, one tile
per ratio with the ``thumbctl focus`` command that fixes it (its ``--at`` is the window's
centre; remembered for every later submit). The derivatives of a ratio (its sizes and formats)
share one window, scaled exactly, so a tile shows one of them (the largest, in the most widely shown format) and
its caption lists them all, with any that failed or are gone.
The small copy is the preview the worker saved from its crop analysis, embedded as a
``data:`` URI (read from the store, a folder or a bucket); the crops are relative links to the
outputs, so the page works from disk or from a bucket's website endpoint, with no JavaScript,
and no image waits to load lazily. A source with
nothing to show (failed, cancelled, unfinished) is one compact row with its state,
error code and detail; one with only some crops missing shows a labelled placeholder
for each of those.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path

from ..core.display import shown
from ..core.errors import CannotWrite
from ..core.models import ITEM_STATES, BatchState, BatchView, ItemState, ItemView
from ..ledger import Ledger
from ..ledger.damage import Damage, DamagedItemView, needed_location, shown_as_failure
from ..storage.locations import (
    is_s3,
    object_name_of,
    object_of_preview,
    object_store_of,
    output_target_at,
    store_location_of,
)
from ..storage.objects import LocalObjectStore, read_preview
from ..storage.outputs import OutputTarget
from .catalogue import fix_notes, public_links, ratio_colours
from .crops import (
    FixLines,
    crop_caption,
    crop_figure,
    crop_text,
    output_size,
    paste_base,
    paste_note,
    ratio_css,
    source_frame,
)
from .markup import FALLBACK_FORMATS, documents_root

#: Outline colours of the ratios, in the order the batch lists them.
#: Source orders of ``thumbctl sheet --sort``; sources with a crop missing come first in each.
SORT_ORDERS = ("ledger", "score")

ItemKey = tuple[str, str, int | None, str | None]  # (item id, ratio, size asked, format): one derivative
Outcome = tuple[ItemState, str, str]  # (state, error code, detail) of an item with no output to show


def item_key(item: ItemView) -> ItemKey:
    return item.item_id, item.ratio, item.size, item.format


@dataclass(frozen=True)
class SheetSummary:
    """What ``thumbctl sheet`` wrote."""

    batch_id: str
    state: BatchState
    path: str
    sources: int
    items: int
    succeeded: int
    failed: int
    #: Succeeded items whose output file is gone (shown as placeholders).
    missing: int
    #: Items whose row is damaged: shown as a failure row with what is damaged (``ledger_corrupt``).
    damaged: tuple[Damage, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "batch_id": self.batch_id,
            "state": self.state,
            "path": self.path,
            "sources": self.sources,
            "items": self.items,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "missing": self.missing,
            "damaged": [damage.to_json() for damage in self.damaged],
        }


def write_contact_sheet(
    ledger: Ledger,
    batch: str,
    path: Path | None = None,
    *,
    sort: str = "ledger",
    read: tuple[BatchView, list[ItemView]] | None = None,
) -> SheetSummary:
    """Write the contact sheet of ``batch`` to ``path`` (default OUT/batches/<batch_id>.html).

    The folder of an explicit ``path`` must exist; the default one is created. ``sort``:
    ``ledger`` (the order of submission) or ``score`` (the lowest crop score first). ``read``: the
    batch (with its failures) and its items as the caller just read them, so they are not read again.
    """
    view, items = read if read is not None else (ledger.views.batch(batch), None)
    items = ledger.views.items(view.batch_id) if items is None else items
    out_dir = needed_location("batches", view.batch_id, "out_dir", view.out_dir)
    out = output_target_at(out_dir)
    pages = out if path is not None else output_target_at(documents_root(view))
    target = pages.page_path(view.batch_id, path)
    listed = items
    damaged = tuple(i.damage for i in items if isinstance(i, DamagedItemView) and i.damage is not None)
    items = [shown_as_failure(i) for i in items] if damaged else items
    outputs = [(item, linked_output(item, out)) for item in items]
    base_url = ledger.catalogue.markup(out_dir).base_url
    shown = public_links(out_dir, pages.root, base_url, {item_key(i): p for i, p in outputs if p})
    sizes = ledger.views.source_sizes(view.batch_id)
    page_dir = os.path.dirname(target)
    fixes = FixLines(str(ledger.path), dict.fromkeys((i.item_id for i in items), paste_base(view.source_root)))
    notes = fix_notes(ledger, ((i.item_id, view.source_root, i.source) for i in items))
    page = render_sheet(view, items, sizes, shown, page_dir, previews(items), sort=sort, fixes=fixes, notes=notes)
    try:
        pages.write_page(target, page, create_folder=path is None)
    except OSError as exc:
        raise CannotWrite(f"cannot write the contact sheet to {target}: {exc.strerror or exc}") from exc
    succeeded = sum(1 for i in listed if i.state == ItemState.SUCCEEDED)
    return SheetSummary(
        batch_id=view.batch_id,
        state=view.state,
        path=target,
        sources=len({i.item_id for i in items}),
        items=len(items),
        succeeded=succeeded,
        failed=sum(1 for i in listed if i.state == ItemState.FAILED),
        missing=sum(1 for i, p in outputs if i.state == ItemState.SUCCEEDED and p is None),
        damaged=damaged,
    )


def shown_root(root: str, page_dir: str) -> str:
    """A source root as a page names it: beside a local page, relative to it; else :func:`named_folder`."""
    if is_s3(root) or is_s3(page_dir):
        return named_folder(root)
    return os.path.relpath(root, page_dir)


def named_folder(location: str) -> str:
    """A location as a page in OUT names it, never by a folder of the machine: an ``s3://`` location
    as it is, ``~/…`` under the home folder, else its own name."""
    if is_s3(location):
        return location
    named = shown(Path(location))
    return named if named.startswith("~") else Path(location).name


def linked_output(item: ItemView, out: OutputTarget) -> str | None:
    """The output a tile links to (see :meth:`~thumbctl.storage.outputs.OutputTarget.shown`)."""
    if item.state != ItemState.SUCCEEDED or not item.object_path or not item.friendly_path:
        return None
    return out.shown(item.object_path, item.friendly_path)


def previews(items: list[ItemView]) -> dict[str, bytes]:
    """Each source's preview (the worker's analysis copy), by item id, where one was saved and is whole.
    A preview lies beside its object, in the store (OUT for a batch of the earlier layout); it is
    embedded in the page, so the sheet needs no link into the store (which may be a bucket)."""
    found: dict[str, bytes] = {}
    for item in items:
        path = (item.result or {}).get("preview")
        if item.item_id not in found and isinstance(path, str) and (data := preview_at(path)):
            found[item.item_id] = data
    return found


def preview_at(path: str) -> bytes | None:
    """The preview kept at ``path`` (in a folder store or a bucket) when it is a whole JPEG, else None."""
    try:
        if is_s3(path):
            obj = object_of_preview(path)
            return object_store_of(obj).read_preview(object_name_of(obj))
        store = LocalObjectStore(store_location_of(path))
    except ValueError:
        return None
    return read_preview(store, path)


def render_sheet(
    batch: BatchView,
    items: list[ItemView],
    sizes: dict[str, tuple[int, int]],
    shown: dict[ItemKey, str],
    page_dir: str,
    photos: dict[str, bytes] | None = None,
    *,
    sort: str = "ledger",
    fixes: FixLines | None = None,
    notes: dict[str, str] | None = None,
) -> str:
    """The whole page of a batch.

    ``shown`` maps each derivative (:func:`item_key`) to its output file, where there is one to show;
    links are relative to ``page_dir``.
    ``photos`` maps item ids to their JPEG previews.
    """

    def header(sources: int, ratios: list[str], colours: dict[str, str]) -> str:
        return sheet_header(batch, sources, ratios, colours, page_dir)

    title = f"Contact sheet · {batch.batch_id}"
    return render_page(title, header, items, sizes, shown, page_dir, photos, sort=sort, fixes=fixes, notes=notes)


def render_page(
    title: str,
    header: Callable[[int, list[str], dict[str, str]], str],
    items: list[ItemView],
    sizes: dict[str, tuple[int, int]],
    shown: dict[ItemKey, str],
    page_dir: str,
    photos: dict[str, bytes] | None = None,
    *,
    sort: str = "ledger",
    fixes: FixLines | None = None,
    notes: dict[str, str] | None = None,
    first: frozenset[str] = frozenset(),
) -> str:
    """A contact sheet page: ``header`` (given the number of sources, the ratios and their colours)
    over one card per source (see :func:`render_sheet`); ``notes``: a line for some sources' cards,
    by item id (a crop fix not applied); ``first``: the sources whose cards come first."""
    ratios = list(dict.fromkeys(i.ratio for i in items))
    colours = ratio_colours(ratios)
    groups = group_by_source(items, shown, sort, first)
    card = SourceCard(shown, page_dir, colours, photos or {}, fixes or FixLines(), notes or {})
    cards = "\n".join(card.render(item_id, group, sizes.get(item_id)) for item_id, group in groups.items())
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"{header(len(groups), ratios, colours)}\n"
        f'<main class="sheet">\n{cards}\n</main>\n</body>\n</html>\n'
    )


def group_by_source(
    items: list[ItemView], shown: dict[ItemKey, str], sort: str = "ledger", first: frozenset[str] = frozenset()
) -> dict[str, list[ItemView]]:
    """Items by item id (one source each): the sources of ``first`` first (what a submit changed),
    then sources with an item not shown, then in ledger order or (``score``) by their lowest crop
    score, those with no score recorded last.

    On a sheet of thousands of sources, the ones that need attention must not hide at the bottom.
    """
    if sort not in SORT_ORDERS:
        raise ValueError(f"unknown sheet order {sort!r}: use {' or '.join(SORT_ORDERS)}")
    groups: dict[str, list[ItemView]] = {}
    for item in items:
        groups.setdefault(item.item_id, []).append(item)

    def key(pair: tuple[str, list[ItemView]]) -> tuple[bool, bool, float]:
        complete = all(item_key(i) in shown for i in pair[1])
        return pair[0] not in first, complete, lowest_score(pair[1]) if sort == "score" else 0.0

    return dict(sorted(groups.items(), key=key))


def lowest_score(items: list[ItemView]) -> float:
    """The lowest crop score recorded among ``items``; infinity when none is."""
    scores = [
        float(crop["score"])
        for item in items
        if isinstance(crop := (item.result or {}).get("crop"), dict) and isinstance(crop.get("score"), int | float)
    ]
    return min(scores, default=float("inf"))


def sheet_header(batch: BatchView, sources: int, ratios: list[str], colours: dict[str, str], page_dir: str) -> str:
    counts = "".join(
        f'<li class="count {state}"><b>{batch.counts[state]}</b> {state}</li>'
        for state in ITEM_STATES
        if batch.counts[state]
    )
    legend = "".join(f'<li><i style="--c:{colours[r]}"></i>{escape(r)}</li>' for r in ratios)
    facts = [("created", timestamp(batch.created_at)), ("finished", timestamp(batch.finished_at))]
    if batch.cancel_requested_at:
        facts.append(("cancel requested", timestamp(batch.cancel_requested_at)))
    facts.append(("source", escape(shown_root(batch.source_root, page_dir))))
    if (where := paste_note([batch.source_root])) is not None:
        facts.append(("fix lines", escape(where)))
    dl = "".join(f"<div><dt>{escape(k)}</dt><dd>{v}</dd></div>" for k, v in facts)
    return (
        '<header class="batch">\n'
        f'<div class="title"><h1>Contact sheet</h1><code class="batch-id">{escape(batch.batch_id)}</code>'
        f'<span class="pill {escape(batch.state)}">{escape(batch.state)}</span></div>\n'
        f'<ul class="counts"><li class="count"><b>{sources}</b> sources</li>'
        f'<li class="count"><b>{batch.total}</b> items</li>{counts}</ul>\n'
        f"{failure_summary(batch)}"
        f'<dl class="facts">{dl}</dl>\n'
        f'<ul class="legend" aria-label="crop windows">{legend}</ul>\n'
        "</header>"
    )


def timestamp(at: str | None) -> str:
    """``2026-01-02T03:04:05.123Z`` shown as ``2026-01-02 03:04:05 UTC``, in a <time> element."""
    if not at:
        return "not yet"
    shown = at[:19].replace("T", " ") + " UTC" if at.endswith("Z") else at
    return f'<time datetime="{escape(at)}">{escape(shown)}</time>'


def breakable(text: str) -> str:
    """Escaped text that may wrap after each ``/`` of a path."""
    return escape(text).replace("/", "/<wbr>")


def failure_summary(batch: BatchView) -> str:
    """One line per error code with how many items failed with it."""
    by_code = Counter(f.error_code for f in batch.failures)
    if not by_code:
        return ""
    parts = "".join(f"<li><code>{escape(code)}</code> ×{n}</li>" for code, n in by_code.most_common())
    return f'<ul class="failure-codes" aria-label="failures by code">{parts}</ul>\n'


class SourceCard:
    """Renders one source's card; what every card shares is held here."""

    def __init__(
        self,
        shown: dict[ItemKey, str],
        page_dir: str,
        colours: dict[str, str],
        photos: dict[str, bytes],
        fixes: FixLines,
        notes: dict[str, str] | None = None,
    ) -> None:
        self.shown = shown
        self.page_dir = page_dir
        self.colours = colours
        self.photos = photos
        self.fixes = fixes
        self.notes = notes or {}

    def render(self, item_id: str, items: list[ItemView], size: tuple[int, int] | None) -> str:
        """Its id, size and photo with the crop windows, then one tile per ratio; a compact row
        when it has nothing to show."""
        dimensions = f"{size[0]}×{size[1]} px" if size else "size unknown"
        if not any(item_key(i) in self.shown for i in items):
            return compact_row(item_id, items, dimensions)
        tiles = "".join(self.tile(derivatives, size) for derivatives in group_by_ratio(items).values())
        flagged = " has-problem" if any(item_key(i) not in self.shown for i in items) else ""
        frame = source_frame(size, items, self.colours, self.photos.get(item_id))
        note = f'<p class="fix-note">{escape(self.notes[item_id])}</p>' if item_id in self.notes else ""
        return (
            f'<section class="source{flagged}" data-item-id="{escape(item_id)}">\n'
            f'<div class="about"><h2>{breakable(item_id)}</h2><p class="dims">{dimensions}</p>{note}{frame}</div>\n'
            f'<div class="crops">{tiles}</div>\n</section>'
        )

    def tile(self, derivatives: list[ItemView], size: tuple[int, int] | None) -> str:
        """One ratio's tile: the derivative :func:`shown_derivative` picks, captioned with all of them."""
        colour = self.colours[derivatives[0].ratio]
        item = shown_derivative(derivatives, self.shown)
        if item is None:
            return placeholder_figure(derivatives, colour)
        path = self.shown[item_key(item)]
        caption = crop_caption(item) if len(derivatives) == 1 else derivatives_caption(item, derivatives, self.shown)
        return crop_figure(item, path, self.page_dir, colour, self.fixes.line(item, size), caption)


def group_by_ratio(items: list[ItemView]) -> dict[str, list[ItemView]]:
    """One source's items by ratio (its derivatives: sizes and formats), in ledger order."""
    groups: dict[str, list[ItemView]] = {}
    for item in items:
        groups.setdefault(item.ratio, []).append(item)
    return groups


def shown_derivative(derivatives: list[ItemView], shown: dict[ItemKey, str]) -> ItemView | None:
    """The derivative a tile shows: the largest one with an output, in the most widely shown format
    among those of that size (the ``<img>`` fallback order of the markup: JPEG, PNG, WebP, AVIF)."""

    def rank(item: ItemView) -> tuple[int, int, int]:
        width, height = output_size(item)
        fmt = item.format or ""
        preference = FALLBACK_FORMATS.index(fmt) if fmt in FALLBACK_FORMATS else len(FALLBACK_FORMATS)
        return (width or 0) * (height or 0), item.size or 0, -preference

    candidates = [item for item in derivatives if item_key(item) in shown]
    return max(candidates, key=rank, default=None)


def derivative_label(item: ItemView) -> str:
    """``640 webp``: the size asked and the format of one derivative (what the batch recorded of them)."""
    return " ".join(str(part) for part in (item.size, item.format) if part is not None)


def derivatives_caption(item: ItemView, derivatives: list[ItemView], shown: dict[ItemKey, str]) -> str:
    """``1:1 320×320, 640×640 · webp, jpeg``, the crop of the one shown, then each derivative of
    the ratio with no output to show, by outcome."""
    done = sorted((i for i in derivatives if item_key(i) in shown), key=lambda i: (i.size or 0, output_size(i)[0] or 0))
    produced: dict[str, list[str]] = {}  # "640×640" -> the sizes asked that came out smaller
    for each in done:
        width, height = output_size(each)
        smaller = produced.setdefault(f"{width}×{height}" if width else f"{each.size or '?'} px", [])
        if (each.result or {}).get("source_smaller_than_target") and each.size is not None:
            smaller.append(str(each.size))
    sizes = ", ".join(
        f"{dims} ({', '.join(dict.fromkeys(asked))} asked, source smaller)" if asked else dims
        for dims, asked in produced.items()
    )
    formats = ", ".join(dict.fromkeys(i.format for i in done if i.format))
    first = f'<span class="ratio">{escape(item.ratio)}</span> {escape(sizes)}' + (
        f" · {escape(formats)}" if formats else ""
    )
    missing = [i for i in derivatives if item_key(i) not in shown]
    return f"{first}<br>{crop_text(item)}{problem_lines(missing)}"


def problem_lines(items: list[ItemView]) -> str:
    """One line per distinct outcome of ``items`` (derivatives with no output), naming them."""
    outcomes: dict[Outcome, list[str]] = {}
    for item in items:
        outcomes.setdefault(outcome_of(item), []).append(derivative_label(item) or item.ratio)
    return "".join(
        f'<br><span class="problem {escape(state)}"><span class="state">{escape(label_of(state))}</span> '
        f"{escape(', '.join(labels))}"
        + (f' <code class="error-code">{escape(code)}</code>' if code else "")
        + (f' <span class="detail">{escape(detail)}</span>' if detail else "")
        + "</span>"
        for (state, code, detail), labels in outcomes.items()
    )


def compact_row(item_id: str, items: list[ItemView], dimensions: str) -> str:
    """A source with no crop to show: one row, one line per distinct (state, code, detail) with the
    ratios it covers (a ratio's derivatives are named only when they differ in outcome)."""
    outcomes: dict[Outcome, list[ItemView]] = {}
    for item in items:
        outcomes.setdefault(outcome_of(item), []).append(item)
    lines = "".join(outcome_line(*outcome, covered(group, items)) for outcome, group in outcomes.items())
    return (
        f'<section class="source compact has-problem" data-item-id="{escape(item_id)}">'
        f'<h2>{breakable(item_id)}</h2><span class="dims">{dimensions}</span>'
        f'<ul class="outcomes">{lines}</ul></section>'
    )


def covered(group: list[ItemView], items: list[ItemView]) -> list[str]:
    """``group``'s ratios, each once when it holds all of that ratio's derivatives, else as ``1:1 640 webp``."""
    labels: list[str] = []
    for ratio, derivatives in group_by_ratio(group).items():
        if len(derivatives) == sum(1 for i in items if i.ratio == ratio):
            labels.append(ratio)
        else:
            labels.extend(f"{ratio} {derivative_label(i)}".rstrip() for i in derivatives)
    return labels


def outcome_line(state: ItemState, code: str, detail: str, ratios: list[str]) -> str:
    code_html = f' <code class="error-code">{escape(code)}</code>' if code else ""
    detail_html = f' <span class="detail">{escape(detail)}</span>' if detail else ""
    return (
        f'<li class="{escape(state)}"><span class="state">{escape(label_of(state))}</span>{code_html}{detail_html}'
        f' <span class="ratios">{escape(", ".join(ratios))}</span></li>'
    )


def outcome_of(item: ItemView) -> Outcome:
    """(state, error code, detail) of an item with no output to show."""
    if item.state == ItemState.SUCCEEDED:
        return ItemState.SUCCEEDED, "", "the output file is gone; see thumbctl reconcile"
    return item.state, item.error_code or "", item.error_detail or ""


def label_of(state: ItemState) -> str:
    return "missing" if state == ItemState.SUCCEEDED else state


def placeholder_figure(derivatives: list[ItemView], colour: str) -> str:
    """A labelled box of the ratio's shape for a ratio with no output to show; with several
    derivatives, its caption names each by outcome."""
    item = derivatives[0]
    state, code, detail = outcome_of(item)
    label = label_of(state)
    code_html = f'<code class="error-code">{escape(code)}</code>' if code else ""
    detail_html = f'<p class="detail">{escape(detail)}</p>' if detail else ""
    if len(derivatives) > 1:
        detail_html = problem_lines(derivatives)
    return (
        f'<figure class="tile placeholder {escape(item.state)}" style="--c:{colour}">'
        f'<div class="box" style="aspect-ratio:{ratio_css(item.ratio)}">'
        f'<span class="state">{escape(label)}</span>{code_html}</div>'
        f'<figcaption><span class="ratio">{escape(item.ratio)}</span>{detail_html}</figcaption></figure>'
    )


CSP = "default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'"

STYLE = """
:root { color-scheme: light; --ink: #1c1917; --muted: #78716c; --line: #e7e5e4; --bad: #dc2626; }
* { box-sizing: border-box; }
body { margin: 0; background: #f5f5f4; color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
header.batch { background: #fff; border-bottom: 1px solid var(--line); padding: 20px 28px 16px; }
.title { display: flex; align-items: baseline; gap: 12px; flex-wrap: wrap; }
h1 { font-size: 20px; margin: 0; font-weight: 650; }
.batch-id { color: var(--muted); }
.pill { font-size: 12px; font-weight: 600; padding: 2px 10px; border-radius: 999px; background: #e7e5e4; }
.pill.succeeded { background: #dcfce7; color: #166534; } .pill.partial { background: #fef3c7; color: #92400e; }
.pill.failed, .pill.cancelled { background: #fee2e2; color: #991b1b; }
.pill.running, .pill.queued, .pill.cancel_requested { background: #e0f2fe; color: #075985; }
ul { list-style: none; margin: 0; padding: 0; }
.counts, .failure-codes, .legend { display: flex; flex-wrap: wrap; gap: 8px 18px; margin-top: 12px; }
.count b { font-size: 16px; } .count.succeeded b { color: #15803d; } .count.failed b { color: var(--bad); }
.count.cancelled b { color: #a21caf; }
.failure-codes li { background: #fef2f2; color: #991b1b; border-radius: 6px; padding: 2px 8px; }
.facts { display: flex; flex-wrap: wrap; gap: 4px 24px; margin: 12px 0 0; color: var(--muted); }
.facts div { display: flex; gap: 6px; } .facts dt::after { content: ":"; } .facts dd { margin: 0; color: var(--ink); }
.legend { color: var(--muted); font-size: 13px; }
.legend i { display: inline-block; width: 12px; height: 12px; border: 2px solid var(--c); border-radius: 2px;
  margin-right: 6px; vertical-align: -1px; }
.sheet { padding: 20px 28px 40px; display: grid; gap: 14px; }
.source { display: grid; grid-template-columns: 200px 1fr; gap: 20px; background: #fff; border: 1px solid var(--line);
  border-radius: 10px; padding: 14px 16px; box-shadow: 0 1px 2px rgb(0 0 0 / 4%); }
.source.has-problem { border-left: 4px solid var(--bad); }
.about h2 { font-size: 14px; font-weight: 600; margin: 0; overflow-wrap: break-word; }
.dims { margin: 2px 0 10px; color: var(--muted); font-size: 13px; }
.fix-note { margin: 0 0 10px; padding: 6px 8px; border-left: 3px solid #b45309; background: #fff7ed; font-size: 13px; }
.frame { position: relative; background: repeating-linear-gradient(45deg, #f5f5f4 0 6px, #ecebea 6px 12px);
  border: 1px solid #d6d3d1; }
.frame.photo { border-color: #a8a29e; background: #d6d3d1; }
.frame .photo { display: block; width: 100%; height: 100%; }
.window { position: absolute; border: 2px solid var(--c); border-radius: 1px;
  box-shadow: 0 0 0 1px rgb(255 255 255 / 75%), inset 0 0 0 1px rgb(255 255 255 / 75%); }
.crops { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; min-width: 0; }
.tile { margin: 0; min-width: 150px; max-width: 100%; }
.tile img, .tile .box { display: block; height: 196px; width: auto; max-width: 100%; object-fit: contain;
  border-radius: 3px; outline: 2px solid var(--c); outline-offset: 2px; }
.tile img { background: repeating-conic-gradient(#d4d4d4 0% 25%, #fff 0% 50%) 0 0 / 16px 16px; }
.tile a { display: block; margin: 4px; position: relative; width: fit-content; }
.window.contain { border-style: dashed; } .trimmed { position: absolute; border: 1px dotted var(--c); }
.placed { position: absolute; outline: 1px dashed var(--c); pointer-events: none; }
.tile figcaption { width: 0; min-width: calc(100% - 8px); margin: 8px 4px 0; font-size: 12px; color: var(--muted);
  line-height: 1.4; }
.tile .ratio { font-weight: 650; color: var(--ink); }
.tile { display: flex; flex-direction: column; } .tile .recrop { order: 1; }
.recrop { display: block; width: 0; min-width: calc(100% - 8px); margin: 6px 4px 0; padding: 3px 6px;
  background: #f5f5f4; border: 1px solid var(--line); border-radius: 4px; font-size: 10.5px; color: #57534e;
  white-space: pre-wrap; overflow-wrap: normal; overflow-x: auto; user-select: all; -webkit-user-select: all; }
.source.compact { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 14px; padding: 8px 16px; }
.compact h2 { font-size: 14px; font-weight: 600; margin: 0; overflow-wrap: anywhere; } .compact .dims { margin: 0; }
.outcomes { display: flex; flex-direction: column; gap: 2px; flex: 1 1 320px; font-size: 13px; }
.outcomes .state { font-weight: 650; text-transform: uppercase; font-size: 11px; letter-spacing: .06em; }
.outcomes .failed .state { color: #b91c1c; } .outcomes .detail { overflow-wrap: anywhere; }
.outcomes .ratios { color: var(--muted); }
.placeholder .box { margin: 4px; min-width: 142px; display: flex; flex-direction: column; align-items: center;
  justify-content: center; gap: 6px; background: #fafaf9; outline: 2px dashed #d6d3d1; }
.placeholder.failed .box { background: #fef2f2; outline-color: #fca5a5; }
.placeholder .state { font-weight: 650; text-transform: uppercase; font-size: 11px; letter-spacing: .06em; }
.placeholder.failed .state, .error-code { color: #b91c1c; }
.placeholder .detail { margin: 2px 0 0; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
@media (max-width: 720px) { .source { grid-template-columns: 1fr; } }
"""
