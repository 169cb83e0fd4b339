"""A review's Apply as a batch: the names of one photo at the ratios it changes, rendered again with
their new fix through the normal durable path.

Each name is rendered again as the batch that published it rendered it (its profile, limits, size,
format, fit and alt, its source as that batch read it), with the new fix as its focus: its derivative
key is the one a submit with that fix would give it (checked: the key rebuilt with the old fix must be
the key the name holds, else the name is refused and a submit renders it). The fixes are recorded in
the same transaction as the batch. A review batch has a key of its own (:data:`REVIEW_KEY_PREFIX`): no
submit replays or resumes it, and ``retry`` never resumes it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.catalogue import CatalogueEntry
from ..core.encoders import EFFORT_RANGES, QUALITY_FORMATS, recorded_encoder
from ..core.errors import UsageError
from ..core.fixes import FocusChange
from ..core.keys import REVIEW_KEY_PREFIX, derivative_key, digest_json
from ..core.models import BatchView, ItemState, NewBatch, NewItem
from ..core.profile import DEFAULT_TRIM_TOLERANCE, Limits, Profile, parse_ratio
from ..intake import acceptance
from ..intake.prepared import IntakeReport, PreparedSubmission
from ..ledger import Claim, ClaimedItem, Ledger
from ..storage.layout import object_path_in
from ..storage.locations import store_location_of

Point = tuple[float, float]


@dataclass(frozen=True)
class Rebatch:
    """The review batches of one Apply (one per publishing batch's profile; mostly one)."""

    batches: tuple[BatchView, ...]
    names: int
    #: What could not be written of batches finished at once (their outputs reused): their documents.
    problems: tuple[str, ...] = ()


def apply_fixes(
    ledger: Ledger, out_dir: str, entries: list[CatalogueEntry], changes: Mapping[str, Point | None], limits: Limits
) -> Rebatch:
    """Record ``changes`` (ratio -> focus, None: the smart crop again) for the photo whose live names
    are ``entries`` and queue its names at those ratios again; nothing is recorded when one of them
    cannot be rendered again."""
    digest = entries[0].source_digest
    assert digest is not None
    named = {entry.name: entry for entry in entries if entry.ratio in changes and entry.fit == "cover"}
    claims = ledger.catalogue.name_claims(out_dir, sorted(named))
    documents = ledger.catalogue.markup(out_dir).documents
    folder = f"{documents or out_dir}/batches"
    focus = [FocusChange(digest, ratio, point) for ratio, point in sorted(changes.items())]
    batches, problems = [], []
    for index, (profile_key, grouped) in enumerate(_by_profile(claims).items()):
        items = tuple(_item(claim, item, named[item.friendly_path], changes) for claim, item in grouped)
        first = grouped[0][0]
        new = NewBatch(
            idempotency_key=REVIEW_KEY_PREFIX + secrets.token_hex(12),
            request_digest=digest_json({"review": profile_key, "items": [_described(i) for i in items]}),
            source_root=first.source_root,
            out_dir=out_dir,
            profile=first.profile,
            items=items,
            limits=first.limits,
            manifest_folder=folder,
            focus_changes=tuple(focus) if index == 0 else (),
        )
        prepared = PreparedSubmission(new, IntakeReport(sources=1, from_ledger=True), _profile(first.profile))
        batches.append(acceptance.submit(ledger, prepared, limits))
        if prepared.report.manifest_error:
            problems.append(f"batch manifest not written: {prepared.report.manifest_error}")
    return Rebatch(tuple(batches), sum(batch.total for batch in batches), tuple(problems))


def _by_profile(claims: list[Claim]) -> dict[str, list[tuple[Claim, ClaimedItem]]]:
    grouped: dict[str, list[tuple[Claim, ClaimedItem]]] = {}
    for claim in claims:
        key = digest_json([claim.profile, claim.limits, claim.source_root])
        grouped.setdefault(key, []).extend((claim, item) for item in claim.items)
    return grouped


def _item(claim: Claim, item: ClaimedItem, entry: CatalogueEntry, changes: Mapping[str, Point | None]) -> NewItem:
    """The claimed name rendered again with its ratio's new focus."""
    variant = _variant(claim.profile, item.size, item.format, item.fit)
    ratio = parse_ratio(item.ratio)
    if derivative_key(claim.source_digest, ratio, variant, item.focus) != item.derivative_key:
        raise UsageError(
            f"{entry.relative_name} was rendered by an older version of thumbctl: submit its folder again, "
            "then fix its crop here",
            code="name_not_rebuilt",
        )
    focus = changes[item.ratio]
    key = derivative_key(claim.source_digest, ratio, variant, focus)
    return NewItem(
        item_id=item.item_id,
        ratio=item.ratio,
        source=claim.source,
        state=ItemState.QUEUED,
        source_digest=claim.source_digest,
        source_format=claim.source_format,
        source_width=claim.source_width,
        source_height=claim.source_height,
        focus=focus,
        derivative_key=key,
        fit=item.fit,
        object_path=object_path_in(store_location_of(item.object_path), key, variant.extension),
        friendly_path=item.friendly_path,
        size=item.size,
        format=item.format,
        alt=entry.alt,
    )


def _variant(profile: Mapping[str, object], size: int, fmt: str, fit: str) -> Profile:
    """The one-size, one-format profile a batch's recorded ``profile`` renders a ``fmt`` output with."""
    quality, effort = recorded_encoder(profile, fmt)
    return Profile(
        size=size,
        format=fmt,
        quality={fmt: quality} if fmt in QUALITY_FORMATS else None,  # a PNG has none
        effort={fmt: effort} if fmt in EFFORT_RANGES and effort is not None else None,
        crop=str(profile.get("crop", "smart")),
        upscale=bool(profile.get("upscale", False)),
        background=str(profile.get("background", "#ffffff")),
        fit=fit,
        trim="trim" in profile,
        trim_tolerance=int(profile.get("trim", DEFAULT_TRIM_TOLERANCE)),  # type: ignore[call-overload]
    )


def _profile(profile: Mapping[str, object]) -> Profile:
    """The batch-wide profile intake's reuse check reads (its framing settings)."""
    return Profile(
        crop=str(profile.get("crop", "smart")),
        upscale=bool(profile.get("upscale", False)),
        background=str(profile.get("background", "#ffffff")),
    )


def _described(item: NewItem) -> dict[str, object]:
    return {"name": item.friendly_path, "key": item.derivative_key}
