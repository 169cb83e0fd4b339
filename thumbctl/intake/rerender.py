"""Outputs a submission renders again only because a format's encoder settings changed.

A name in OUT that was published before keeps its record (the object's key and the batch that
published it). When a submission would render that name again, and the key it had is exactly the
key of the same derivative with the earlier encoder settings of its format (those the publishing
batch recorded; an earlier batch's record gone: the one default quality, 85, and the fixed
efforts of then), nothing else changed: the submit summary says which formats render again and
why, e.g. after an upgrade whose defaults differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..core import encoders
from ..core.keys import derivative_key
from ..core.models import ItemState, NewBatch, NewItem
from ..core.profile import Profile, parse_ratio
from ..ledger import Ledger

#: What a format had when its publishing batch's record is gone: settings before they were per format.
_EARLIER_DEFAULT: dict[str, object] = {"quality": encoders.PNG_KEY_QUALITY}


@dataclass(frozen=True)
class EncoderChange:
    """``outputs`` of ``format`` render again because its (quality, effort) went from ``before`` to ``after``."""

    format: str
    outputs: int
    before: tuple[int, int | None]
    after: tuple[int, int | None]

    @property
    def defaults(self) -> bool:
        """The settings now are thumbctl's defaults for the format (an upgrade changed them)."""
        quality, effort = self.after
        return quality == encoders.DEFAULT_QUALITY[self.format] and effort == encoders.DEFAULT_EFFORT.get(self.format)

    def changes(self) -> list[str]:
        """``["quality 85 -> 80", "effort 4 -> 6"]``: the settings that differ."""
        named = zip(("quality", "effort"), self.before, self.after, strict=True)
        return [f"{name} {old} -> {new}" for name, old, new in named if old != new]

    def to_json(self) -> dict[str, object]:
        names = ("quality", "effort")
        return {
            "format": self.format,
            "outputs": self.outputs,
            "reason": "defaults_changed" if self.defaults else "settings_changed",
            "before": {name: value for name, value in zip(names, self.before, strict=True) if value is not None},
            "after": {name: value for name, value in zip(names, self.after, strict=True) if value is not None},
        }


def encoder_changes(ledger: Ledger, batch: NewBatch, profile: Profile) -> list[EncoderChange]:
    """The formats whose queued items render again only because their encoder settings changed."""
    queued = [
        item
        for item in batch.items
        if item.state == ItemState.QUEUED and item.friendly_path and item.format in encoders.QUALITY_FORMATS
    ]
    published = ledger.intake.published_keys(item.friendly_path for item in queued if item.friendly_path)
    counts: Counter[tuple[str, tuple[int, int | None]]] = Counter()
    for item in queued:
        key, recorded = published.get(item.friendly_path or "", (None, None))
        if key is None or key == item.derivative_key:
            continue
        before = encoders.recorded_encoder(recorded or _EARLIER_DEFAULT, item.format)
        if before != _settings(profile, item.format) and _key_with(item, profile, before) == key:
            counts[(item.format, before)] += 1
    return [
        EncoderChange(fmt, outputs, before, _settings(profile, fmt))
        for (fmt, before), outputs in sorted(counts.items(), key=lambda pair: profile.formats.index(pair[0][0]))
    ]


def _settings(profile: Profile, fmt: str) -> tuple[int, int | None]:
    return profile.qualities[fmt], profile.efforts.get(fmt)


def _key_with(item: NewItem, profile: Profile, settings: tuple[int, int | None]) -> str | None:
    """The item's key had its format been encoded with ``settings``."""
    if item.source_digest is None:
        return None
    quality, effort = settings
    earlier: Mapping[str, int] = {item.format: effort} if effort is not None else {}
    variant = replace(profile.variant(item.size, item.format), quality={item.format: quality}, effort=earlier)
    return derivative_key(item.source_digest, parse_ratio(item.ratio), variant, item.focus)
