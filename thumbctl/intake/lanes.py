"""Names stay in their lane: two steps of intake that keep what thumbctl writes apart from what it reads.

* :func:`name_items` gives every item to render its thumbnail's name from the template. A name that
  is unsafe, or that two items would share, rejects the whole batch (65); a name out of its lane (in
  ``OUT/batches/``, where the batch documents live, or with an extension that is not an image's)
  fails only its own items ``bad_name``, whatever put it there: the template's fields or a source
  folder named ``batches``.
* :func:`without_outputs` leaves out of a submission's sources every file thumbctl wrote: a name the
  ledger records as published (into any OUT of this ledger) and the documents of every recorded OUT
  (``batches/<batch id>.json`` and ``.html``). It runs after the scan or the manifest, so it holds
  whatever the scan recognised as an output folder or not: a root that is itself an earlier OUT
  (``submit site --out site/out3`` after ``submit site/src --out site``), or one holding an OUT.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ..core.errors import RejectedError
from ..core.models import ItemState, NewItem
from ..core.naming import (
    DOCUMENTS_FOLDER,
    NamedItem,
    NameFields,
    NameTemplateError,
    assign_names,
    default_template,
    lane_problem,
)
from ..core.profile import Profile, parse_ratio
from ..ledger import Ledger
from ..sources.downloads import is_url
from ..sources.entries import SourceEntry
from .reuse import output_geometry_of

#: The extensions of a batch's documents in ``OUT/batches/``: its manifest and its contact sheet.
DOCUMENT_EXTENSIONS = (".json", ".html")
#: What a ``bad_name`` item is told to do instead.
NAME_HINT = "choose another --name, e.g. 'photos/{path}.{ratio}.{ext}'"


# -- naming ----------------------------------------------------------------------------------------


def name_items(
    items: list[NewItem],
    stems: dict[str, str],
    profile: Profile,
    out: str,
    template: str,
    one_profile: Callable[[int, str, str], Profile],
) -> list[NewItem]:
    """Give every item that will be rendered its thumbnail's name from ``template`` (see the module's
    docstring for the names refused, and how)."""
    to_name = [item for item in items if item.state == ItemState.QUEUED]
    named = [_named_item(item, stems[item.item_id], profile, template, one_profile) for item in to_name]
    try:
        names = assign_names(template, named)
    except NameTemplateError as exc:
        raise RejectedError(str(exc), code="bad_name") from None
    given = {id(item): _with_name(item, out, name) for item, name in zip(to_name, names, strict=True)}
    return [given.get(id(item), item) for item in items]


def _with_name(item: NewItem, out: str, name: str) -> NewItem:
    """``item`` with its name, or failed ``bad_name`` when the name is out of its lane: failed at
    admission (no derivative to render), so ``retry`` never sends it to a worker."""
    problem = lane_problem(name)
    if problem is None:
        return replace(item, friendly_path=f"{out}/{name}")
    detail = f"{name} {problem}: nothing is written there; {NAME_HINT}"
    return replace(
        item, state=ItemState.FAILED, error_code="bad_name", error_detail=detail, derivative_key=None, object_path=None
    )


def _named_item(
    item: NewItem, path: str, profile: Profile, template: str, one_profile: Callable[[int, str, str], Profile]
) -> NamedItem:
    """The name fields of a queued item: the size asked for, and the produced size as the worker
    computes it, from the upright size the source's header gave and the no-upscale rule."""
    ratio = parse_ratio(item.ratio)
    geometry = output_geometry_of(item, profile)
    extension = one_profile(item.size, item.format, item.fit).extension
    fields = NameFields(path, ratio.slug, item.size, geometry.out_w, geometry.out_h, extension, item.fit)
    several = len(profile.sizes) > 1 or len(profile.formats) > 1
    detail = f"{item.ratio}, {item.size} px, {item.format}" if several else item.ratio
    label = f"{item.item_id} ({detail}{', ' + item.fit if item.fit != 'cover' else ''})"
    own = default_template(len(profile.sizes), item.fit) if template == default_template(len(profile.sizes)) else None
    return NamedItem(label, fields, own)


# -- sources -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeftOut:
    """The files thumbctl wrote that a submission named, left out of its sources."""

    #: Thumbnails the ledger records as published.
    thumbnails: int = 0
    #: Batch documents of a recorded OUT.
    documents: int = 0

    @property
    def total(self) -> int:
        return self.thumbnails + self.documents


def without_outputs(
    root: str, entries: list[SourceEntry], ledger: Ledger, outs: Iterable[str]
) -> tuple[list[SourceEntry], LeftOut]:
    """``entries`` without the files thumbctl wrote (see the module's docstring), and how many of each
    kind were left out. ``root`` is the folder the entries' paths are relative to; ``outs``, every
    output location the ledger records, and this submission's. Raises RejectedError ``empty_batch``
    when nothing else is left."""
    located = {entry.item_id: _location(root, entry) for entry in entries}
    published = set(ledger.intake.published_keys(located.values()))
    folders = tuple(f"{out.rstrip('/')}/{DOCUMENTS_FOLDER}/" for out in outs)
    thumbnails = {item_id for item_id, where in located.items() if where in published}
    documents = {item_id for item_id, where in located.items() if _is_document(where, folders)} - thumbnails
    left_out = LeftOut(len(thumbnails), len(documents))
    if not left_out.total:
        return entries, left_out
    kept = [entry for entry in entries if entry.item_id not in thumbnails | documents]
    if not kept:
        raise RejectedError(
            f"no sources left in {root}: all {left_out.total} are thumbnails or batch documents thumbctl wrote, "
            "which are never sources",
            code="empty_batch",
        )
    return kept, left_out


def _location(root: str, entry: SourceEntry) -> str:
    """Where the ledger would record ``entry``'s file if thumbctl had written it: its URL, or the real
    path of the file (a link followed, as its source is read)."""
    if is_url(entry.given) or entry.known_real:
        return entry.given
    return os.path.realpath(os.path.join(root, entry.given))


def _is_document(location: str, folders: tuple[str, ...]) -> bool:
    """Whether ``location`` is a batch document right in the documents folder of a recorded OUT."""
    return location.endswith(DOCUMENT_EXTENSIONS) and any(
        location.startswith(folder) and "/" not in location[len(folder) :] for folder in folders
    )
