"""The items of a submission: one per (source, ratio, size, format), each with its focus, its
derivative key and where its object goes, named by the batch's template; a source that failed its
inspection gives failed items."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

from ..core.keys import derivative_key
from ..core.models import ItemState, NewItem
from ..core.profile import Profile, Ratio
from ..sources.entries import SourceEntry
from ..sources.itemids import friendly_stems
from ..storage.locations import object_path_in
from .focus import FocusPlan
from .inspection import Inspection
from .lanes import name_items


def build_items(
    entries: list[SourceEntry],
    inspections: dict[str, Inspection],
    profile: Profile,
    out: str,
    store: str,
    template: str,
    focus: FocusPlan,
) -> list[NewItem]:
    """One item per (source, ratio, size, format), in item-id order, named by ``template`` in OUT,
    its object in ``store``."""
    stems = friendly_stems([e.item_id for e in entries])
    one_profile = _variant_profiles(profile)
    items = [
        _new_item(entry, Variant(ratio, size, fmt), inspections[entry.item_id], profile, one_profile, store, focus)
        for entry in sorted(entries, key=lambda e: e.item_id)
        for ratio in entry.ratios
        for size in profile.sizes
        for fmt in profile.formats
    ]
    return name_items(items, stems, profile, out, template, one_profile)


def _variant_profiles(profile: Profile) -> Callable[[int, str, str], Profile]:
    """The profile of one (size, format, fit), made once per batch rather than once per item: a
    profile is checked when it is made, and its encoder settings computed on first use."""

    @cache
    def one(size: int, fmt: str, fit: str) -> Profile:
        return replace(profile.variant(size, fmt), fit=fit)

    return one


@dataclass(frozen=True)
class Variant:
    """One derivative of a source: its ratio, the size asked for and the format; ``named_size`` is
    the size the friendly name carries (set when the batch asks for several sizes)."""

    ratio: Ratio
    size: int
    format: str
    named_size: int | None = None


def _new_item(
    entry: SourceEntry,
    variant: Variant,
    inspection: Inspection,
    profile: Profile,
    one_profile: Callable[[int, str, str], Profile],
    store: str,
    focus_plan: FocusPlan,
) -> NewItem:
    focus = focus_plan.focus_of(entry, inspection.digest, variant.ratio)
    fit = entry.fit or profile.fit
    common = {
        "item_id": entry.item_id,
        "ratio": str(variant.ratio),
        "size": variant.size,
        "format": variant.format,
        "focus": focus,
        "fit": fit,
        "alt": entry.alt,
    }
    if inspection.failure is not None or inspection.info is None:
        failure = inspection.failure
        return NewItem(
            **common,
            source=inspection.source or entry.given,
            state=ItemState.FAILED,
            error_code=failure.code if failure else "io_error",
            error_detail=failure.detail if failure else None,
        )
    info = inspection.info
    one = one_profile(variant.size, variant.format, fit)
    key = derivative_key(info.digest, variant.ratio, one, focus)
    return NewItem(
        **common,
        source=inspection.source,
        state=ItemState.QUEUED,
        source_digest=info.digest,
        source_format=info.format,
        source_width=info.width,
        source_height=info.height,
        derivative_key=key,
        object_path=object_path_in(store, key, one.extension),
    )
