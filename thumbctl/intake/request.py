"""The batch a submission records: its items, and its normalized request (what was asked,
independent of how it was written), whose digest is the batch's request digest and its key when
none is given."""

from __future__ import annotations

from pathlib import Path

from ..config.options import SubmitOptions
from ..core.keys import digest_json
from ..core.models import NewBatch
from ..core.naming import default_template
from ..sources.downloads import is_url
from ..sources.entries import SourceEntry
from .focus import FocusPlan
from .inspection import Inspection
from .items import build_items


def build_batch(
    root: Path,
    out_dir: Path | str,
    out: str,
    store: str,
    documents: str,
    options: SubmitOptions,
    entries: list[SourceEntry],
    inspections: dict[str, Inspection],
    focus: FocusPlan,
) -> NewBatch:
    """The batch of ``entries`` written to OUT (``out_dir`` as given, ``out`` as recorded): one item
    per (source, ratio, size, format), their objects in ``store``, its documents in ``documents``
    ("": OUT), keyed by the digest of the request unless ``--key`` names a key."""
    template = options.name_template or default_template(len(options.profile.sizes))
    items = build_items(entries, inspections, options.profile, out, store, template, focus)
    request = canonical_request(root, out_dir, options, entries, inspections, focus)
    request_digest = digest_json(request)
    return NewBatch(
        idempotency_key=options.key or request_digest,
        request_digest=request_digest,
        source_root=str(root),
        out_dir=out,
        profile=request["profile"],
        items=tuple(items),
        max_attempts=options.max_attempts,
        deadline_seconds=options.deadline_seconds,
        limits=options.recorded_limits(urls=any(is_url(entry.given) for entry in entries)),
        manifest_folder=f"{documents or out}/batches",
        focus_changes=focus.changes,
        fix_file=(str(root), focus.file.state) if focus.file.state is not None else None,
    )


def canonical_request(
    root: Path,
    out_dir: Path | str,
    options: SubmitOptions,
    entries: list[SourceEntry],
    inspections: dict[str, Inspection],
    focus: FocusPlan,
) -> dict[str, object]:
    """The normalized request: what was asked, independent of how it was written. The crop fixes an
    item renders with from memory are part of it (only when there are some, so the request of a
    submission without any stays what it always was): a submit after a fix is a new request."""
    items = []
    for entry in sorted(entries, key=lambda e: e.item_id):
        inspection = inspections[entry.item_id]
        item: dict[str, object] = {
            "id": entry.item_id,
            "source": inspection.source or entry.given,
            "digest": inspection.digest,
            "error": inspection.failure.code if inspection.failure else None,
            "ratios": [str(r) for r in entry.ratios],
            "focus": list(entry.focus) if entry.focus else None,
        } | ({"fit": entry.fit} if entry.fit else {})
        if remembered := focus.remembered_for(entry, inspection.digest):
            item["remembered_focus"] = remembered
        if entry.clear_focus:
            item["clear_focus"] = True
        if entry.alt:  # only when given: the request of an item without one stays what it was
            item["alt"] = entry.alt
        items.append(item)
    return {
        "root": str(root),
        "out": str(out_dir),
        "profile": {"ratios": [str(r) for r in options.profile.ratios], **options.profile.encoder_settings}
        | _naming_settings(options),
        "items": items,
    }


def _naming_settings(options: SubmitOptions) -> dict[str, object]:
    """How the batch names its thumbnails, in its profile only when it differs from the default, so
    the request (and the key derived from it) of a submission without ``--name``/``--overwrite``
    stays what it always was. The worker reads ``overwrite`` from the batch's profile."""
    settings: dict[str, object] = {}
    if options.name_template is not None and options.name_template != default_template(len(options.profile.sizes)):
        settings["name"] = options.name_template
    if options.overwrite:
        settings["overwrite"] = True
    return settings
