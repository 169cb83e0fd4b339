"""The review page's photos: an OUT's catalogue entries grouped by the photo they show.

A photo is a source content (its digest): every live name rendered from it, at every ratio, size and
format, with the window each ratio shows, its score and its fix. Its ``version`` changes whenever a
fix or a name of it changes, so an Apply made on an older view is refused as a conflict.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property

from ..core.catalogue import CatalogueEntry
from ..review.catalogue import source_id, widest_first

Box = tuple[int, int, int, int]
Point = tuple[float, float]

#: Photos a page of the listing holds (the page asks for the next ones as it is scrolled).
PAGE_SIZE = 40


@dataclass(frozen=True)
class NameView:
    """One live name of a photo: where it is under OUT, its size and format, the version of its bytes."""

    name: str
    size: int
    format: str
    width: int | None
    height: int | None
    version: str | None
    #: The object the name holds (in the store): what the page is sent when it asks for the name.
    object_path: str = field(default="", compare=False)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "size": self.size,
            "format": self.format,
            "width": self.width,
            "height": self.height,
            "version": self.version,
        }


@dataclass(frozen=True)
class RatioView:
    """What a photo shows at one ratio: its window as rendered (None: unknown), its score, its fix."""

    ratio: str
    fit: str
    window: Box | None
    score: float | None
    policy: str | None
    focus: Point | None
    #: Whether every name of the ratio shows ``focus`` (false while its render is queued, or after
    #: it was cancelled or failed).
    rendered: bool
    names: tuple[NameView, ...]
    #: A render of its names (by any process) has not ended yet.
    rendering: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "ratio": self.ratio,
            "fit": self.fit,
            "window": list(self.window) if self.window else None,
            "score": self.score,
            "policy": self.policy,
            "focus": list(self.focus) if self.focus else None,
            "rendered": self.rendered,
            "rendering": self.rendering,
            "names": [name.to_json() for name in self.names],
        }


@dataclass(frozen=True)
class PhotoView:
    """One photo of an OUT as the review page shows it."""

    digest: str
    source: str
    shown: str
    root: str | None
    width: int
    height: int
    trim: Box | None
    ratios: tuple[RatioView, ...]
    changed_at: str
    reviewed_at: str | None = None
    #: Where the source's preview is kept (in the store), when a render saved one.
    preview: str | None = field(default=None, compare=False)

    @cached_property
    def score(self) -> float | None:
        """The worst known score of its ratios (None: none is known)."""
        scores = [ratio.score for ratio in self.ratios if ratio.score is not None]
        return min(scores) if scores else None

    @property
    def version(self) -> str:
        """Changes whenever a fix or a name's bytes of the photo change."""
        state = [(r.ratio, r.focus, [(n.name, n.version) for n in r.names]) for r in self.ratios]
        return hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16]

    @property
    def changed_since_review(self) -> bool:
        return self.reviewed_at is None or self.changed_at > self.reviewed_at

    def ratio(self, ratio: str) -> RatioView | None:
        return next((view for view in self.ratios if view.ratio == ratio), None)

    def rendering(self, ratios: set[str]) -> PhotoView:
        """The photo with ``ratios`` marked as being rendered."""
        if not ratios:
            return self
        return replace(self, ratios=tuple(replace(r, rendering=r.ratio in ratios) for r in self.ratios))

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.digest,
            "source": self.shown,
            "width": self.width,
            "height": self.height,
            "trim": list(self.trim) if self.trim else None,
            "score": self.score,
            "ratios": [ratio.to_json() for ratio in self.ratios],
            "changed_at": self.changed_at,
            "reviewed_at": self.reviewed_at,
            "changed": self.changed_since_review,
            "version": self.version,
            "preview": self.preview is not None,
        }


@dataclass
class PhotoGroup:
    """One photo's live names, as read, with what ordering and filtering need; its :class:`PhotoView`
    is made when a page shows it (making all 5,000 of a catalogue costs a tenth of a second)."""

    digest: str
    entries: list[CatalogueEntry]
    reviewed_at: str | None
    score: float | None
    changed_at: str
    shown: str
    _view: PhotoView | None = field(default=None, repr=False)

    def view(self) -> PhotoView:
        if self._view is None:
            self._view = _photo(self.digest, self.entries, self.reviewed_at)
        return self._view

    @property
    def changed_since_review(self) -> bool:
        return self.reviewed_at is None or self.changed_at > self.reviewed_at

    def score_at(self, ratio: str) -> float | None:
        """The worst known score of its names at ``ratio`` (None: none is known)."""
        scores = [score for entry in self.entries if entry.ratio == ratio and (score := entry.score) is not None]
        return min(scores) if scores else None


def _worst_first(score: float | None, shown: str) -> tuple[bool, float, str]:
    """The order of the list: unknown scores first, then the worst."""
    return score is not None, score or 0.0, shown


def groups_of(entries: Iterable[CatalogueEntry], reviews: dict[str, str]) -> list[PhotoGroup]:
    """The photos of ``entries`` (names whose source was read and whose size is known), each with when
    it was last approved (``reviews``, by digest), worst score first (unknown ones before all)."""
    grouped: dict[str, list[CatalogueEntry]] = {}
    for entry in entries:
        if entry.source_digest is not None and entry.source_size is not None:
            grouped.setdefault(entry.source_digest, []).append(entry)
    groups = [_group(digest, named, reviews.get(digest)) for digest, named in grouped.items()]
    groups.sort(key=lambda g: _worst_first(g.score, g.shown))
    return groups


def photos_of(entries: Iterable[CatalogueEntry], reviews: dict[str, str]) -> list[PhotoView]:
    """The photos of ``entries`` as :func:`groups_of` orders them, each made."""
    return [group.view() for group in groups_of(entries, reviews)]


def _group(digest: str, entries: list[CatalogueEntry], reviewed_at: str | None) -> PhotoGroup:
    scores = [score for entry in entries if (score := entry.score) is not None]
    changed = max(entry.changed_at for entry in entries)
    return PhotoGroup(digest, entries, reviewed_at, min(scores) if scores else None, changed, source_id(entries[0]))


def _photo(digest: str, entries: list[CatalogueEntry], reviewed_at: str | None) -> PhotoView:
    first = entries[0]
    width, height = first.source_size or (0, 0)
    by_ratio: dict[str, list[CatalogueEntry]] = {}
    for entry in entries:
        by_ratio.setdefault(entry.ratio, []).append(entry)
    trim = preview = None
    for entry in entries:
        trim = trim or _box(entry.result.get("trim"))
        found = entry.result.get("preview")
        preview = preview or (found if isinstance(found, str) else None)
    return PhotoView(
        digest=digest,
        source=first.source,
        shown=source_id(first),
        root=first.source_root,
        width=width,
        height=height,
        trim=trim,
        ratios=tuple(_ratio(ratio, by_ratio[ratio]) for ratio in widest_first(by_ratio)),
        changed_at=max(entry.changed_at for entry in entries),
        reviewed_at=reviewed_at,
        preview=preview,
    )


def _ratio(ratio: str, entries: list[CatalogueEntry]) -> RatioView:
    framed = next((entry for entry in entries if entry.crop is not None), entries[0])
    crop = framed.crop or {}
    ordered = entries if len(entries) == 1 else sorted(entries, key=lambda e: (e.size, e.format, e.name))
    names = tuple(
        NameView(e.relative_name, e.size, e.format, e.width, e.height, e.version, e.object_path) for e in ordered
    )
    policy = crop.get("policy")
    return RatioView(
        ratio=ratio,
        fit=framed.fit,
        window=_box(crop.get("box")),
        score=framed.score,
        policy=policy if isinstance(policy, str) else None,
        focus=framed.focus,
        rendered=all(_same_point(e.rendered_focus, e.focus) for e in entries if e.fit == "cover"),
        names=names,
    )


def _same_point(a: Point | None, b: Point | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a[0], b[0], abs_tol=1e-9) and math.isclose(a[1], b[1], abs_tol=1e-9)


def _box(value: object) -> Box | None:
    if isinstance(value, list) and len(value) == 4 and all(isinstance(v, int) for v in value):
        return value[0], value[1], value[2], value[3]
    return None


class Shown(StrEnum):
    """Which photos the page lists."""

    ALL = "all"
    CHANGED = "changed"  # changed since the last approval (or never approved)
    LOW = "low"  # a ratio's score below the threshold


@dataclass(frozen=True)
class Listing:
    """What the page asked to see: which photos, at which ratio (empty: any), from where on."""

    shown: Shown = Shown.ALL
    ratio: str = ""
    below: float = 0.5
    offset: int = 0
    limit: int = PAGE_SIZE

    def keeps(self, photo: PhotoGroup) -> bool:
        entries = [e for e in photo.entries if not self.ratio or e.ratio == self.ratio]
        if not entries:
            return False
        if self.shown == Shown.CHANGED:
            return photo.changed_since_review
        if self.shown == Shown.LOW:
            return any(e.score is not None and e.score < self.below for e in entries)
        return True

    def page(self, photos: list[PhotoGroup]) -> tuple[int, list[PhotoView]]:
        """How many photos the listing keeps, and those of the page asked for: worst score first, at
        the ratio asked for when there is one."""
        kept = photos if self.shown == Shown.ALL and not self.ratio else [p for p in photos if self.keeps(p)]
        if self.ratio:
            kept = sorted(kept, key=lambda p: _worst_first(p.score_at(self.ratio), p.shown))
        return len(kept), [photo.view() for photo in kept[self.offset : self.offset + self.limit]]
