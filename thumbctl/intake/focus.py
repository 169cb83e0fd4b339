"""Crop fixes: focus points remembered per (source content digest, ratio).

A fix is set by a manifest item's ``focus`` (recorded when its batch is accepted, for every
ratio the item asks for) or by ``thumbctl focus SOURCE --ratio R --at X,Y``, and forgotten by
``"focus": null`` or ``thumbctl focus SOURCE --clear``. Every later render of that content at
that ratio is centred on the point, whether the source comes from a folder scan or a manifest
item without a ``focus``: the point becomes the item's focus, so it is part of the derivative key
and no object rendered with another framing is reused for it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..core.errors import ItemFailure, RowDamaged, UsageError
from ..core.models import FocusChange, FocusPoint
from ..core.profile import Limits, Ratio, SettingError, parse_ratios
from ..core.redact import shown_source
from ..imaging import SNIFF_BYTES, probe
from ..ledger import Ledger
from ..sources.entries import SourceEntry
from ..sources.scan import SourceFolder, check_size, digest_bounded

Point = tuple[float, float]


# -- a submission's focus ------------------------------------------------------------------------


@dataclass(frozen=True)
class FocusPlan:
    """What a submission renders with: the fix remembered for each (digest, ratio) before it, cleared
    ones included (focus None); and the changes its manifest makes, recorded with the batch (they
    apply from the next batch on: within a manifest, an item without ``focus`` keeps the fix remembered
    before, as another item of the same photo with its own focus is another derivative)."""

    memory: Mapping[tuple[str, str], FocusPoint] = field(default_factory=dict)
    changes: tuple[FocusChange, ...] = ()

    def focus_of(self, entry: SourceEntry, digest: str | None, ratio: Ratio) -> Point | None:
        """The item's focus: the manifest's, none when the manifest clears it, else the remembered one."""
        if entry.focus is not None or entry.clear_focus or digest is None:
            return entry.focus
        point = self.memory.get((digest, str(ratio)))
        return point.focus if point else None

    def remembered_for(self, entry: SourceEntry, digest: str | None) -> dict[str, object]:
        """The remembered fixes (set or cleared, with when) ``entry`` renders with, for the canonical
        request: a fix set, cleared or set again since makes the next submit a new request."""
        if entry.focus is not None or entry.clear_focus or digest is None:
            return {}
        points = (self.memory.get((digest, str(r))) for r in entry.ratios)
        return {p.ratio: {"focus": list(p.focus) if p.focus else None, "set_at": p.set_at} for p in points if p}


def plan_focus(entries: Iterable[tuple[SourceEntry, str | None]], remembered: Iterable[FocusPoint]) -> FocusPlan:
    """The plan of the entries (each with its source's digest, None when it could not be read), given
    the fixes remembered for those digests. Where several items of a manifest set or clear one fix,
    the last in item-id order stands; only what changes the remembered fix is recorded (a fix set
    again as it is keeps its time, clearing none changes nothing)."""
    memory = {(p.source_digest, p.ratio): p for p in remembered}
    wanted: dict[tuple[str, str], Point | None] = {}
    for entry, digest in sorted(entries, key=lambda pair: pair[0].item_id):
        if digest is not None and (entry.focus is not None or entry.clear_focus):
            wanted.update({(digest, str(ratio)): entry.focus for ratio in entry.ratios})
    changes = tuple(
        FocusChange(digest, ratio, focus)
        for (digest, ratio), focus in wanted.items()
        if (memory[digest, ratio].focus if (digest, ratio) in memory else None) != focus
    )
    return FocusPlan(memory, changes)


# -- thumbctl focus -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceFocus:
    """The crop fixes remembered for one source file's content, and the ratios a command changed."""

    source: str
    source_digest: str
    points: tuple[FocusPoint, ...]
    set: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "source_digest": self.source_digest,
            "focus_points": [p.to_json() for p in self.points],
            "set": list(self.set),
            "cleared": list(self.cleared),
        }


def parse_point(text: str) -> Point:
    """``0.3,0.6`` -> ``(0.3, 0.6)``: x then y, each in 0..1 from the top-left of the upright photo."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) == 2:
        try:
            x, y = float(parts[0]), float(parts[1])
        except ValueError:
            pass
        else:
            if all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in (x, y)):
                return (x, y)
    shown = text if len(text) <= 40 else f"{text[:20]}… ({len(text)} characters)"
    raise UsageError(f"--at {shown!r}: give X,Y with both in 0..1, e.g. 0.3,0.6", code="bad_focus")


@dataclass(frozen=True)
class FocusRequest:
    """What ``thumbctl focus`` was asked: show (no point, not clear), set ``point`` or clear, at ``ratios``
    (empty: every ratio)."""

    ratios: tuple[Ratio, ...] = ()
    point: Point | None = None
    clear: bool = False


def focus_request(ratio: str | None, at: str | None, clear: bool) -> FocusRequest:
    """The request of ``--ratio``, ``--at`` and ``--clear``, checked before any file is read."""
    if at is not None and clear:
        raise UsageError("--at sets a fix and --clear forgets it: give one of them")
    point = parse_point(at) if at is not None else None
    try:
        ratios = parse_ratios(ratio) if ratio is not None else ()
    except SettingError as exc:
        raise UsageError(f"--ratio: {exc}", code="bad_ratio") from exc
    if point is not None and not ratios:
        raise UsageError("--at needs --ratio: the ratios whose crop it fixes (e.g. --ratio 4:3)", code="bad_ratio")
    return FocusRequest(ratios, point, clear)


@dataclass(frozen=True)
class Photo:
    """A photo's real path and content digest, read as a submit reads it."""

    path: str
    digest: str


def read_photo(source: Path, limits: Limits) -> Photo:
    """The photo at ``source``: a regular file under the byte limit in a format thumbctl reads.
    Refusals are usage errors with the code a submit would give the item."""
    return Photo(*_digest_of(source, limits))


def recorded_photo(ledger: Ledger, source: str) -> Photo:
    """A photo given by URL or ``s3://`` key: the content a batch read from it last (nothing is
    downloaded; its recorded digest is what the fix is remembered for)."""
    digest = ledger.intake.recorded_digest(source)
    if digest is None:
        raise UsageError(
            f"no batch has read {shown_source(source)}: submit a manifest naming it first; a fix is remembered "
            "for the content a batch read",
            code="source_not_found",
        )
    return Photo(shown_source(source), digest)


def apply_focus(ledger: Ledger, photo: Photo, request: FocusRequest) -> SourceFocus:
    """Carry out ``request`` for ``photo`` and return what is remembered for it afterwards. Setting a
    fix as it already is, or clearing one that is not set, changes nothing."""
    wanted = [str(r) for r in request.ratios]
    try:
        known = {p.ratio: p.focus for p in ledger.intake.focus_points([photo.digest]) if p.focus is not None}
    except RowDamaged:
        if request.point is None and not (request.clear and wanted):
            raise
        known = {r: None for r in wanted}  # damaged: set or cleared again, whatever it held
    if request.point is not None:
        ledger.intake.change_focus(
            [FocusChange(photo.digest, r, request.point) for r in wanted if known.get(r) != request.point]
        )
        return _current(ledger, photo, set_=tuple(wanted))
    if request.clear:
        cleared = tuple(r for r in (wanted or sorted(known)) if r in known)
        ledger.intake.change_focus([FocusChange(photo.digest, r, None) for r in cleared])
        return _current(ledger, photo, cleared=cleared)
    shown = _current(ledger, photo)
    if not wanted:
        return shown
    return replace(shown, points=tuple(p for p in shown.points if p.ratio in wanted))


def _current(ledger: Ledger, photo: Photo, *, set_: tuple[str, ...] = (), cleared: tuple[str, ...] = ()) -> SourceFocus:
    """The fixes set for ``photo`` now (cleared ones are not shown)."""
    points = tuple(p for p in ledger.intake.focus_points([photo.digest]) if p.focus is not None)
    return SourceFocus(photo.path, photo.digest, points, set_, cleared)


def _digest_of(source: Path, limits: Limits) -> tuple[str, str]:
    """The real path of the image file ``source`` and its content digest (read as a submit reads it:
    a regular file, under the byte limit, in a format thumbctl reads). Refusals are usage errors."""
    if not source.exists():
        raise UsageError(f"source {source} does not exist", code="source_not_found")
    path = os.path.realpath(source)
    if not os.path.isfile(path):
        raise UsageError(f"source {source} is not a file: a focus point belongs to one photo", code="bad_source")
    try:
        with SourceFolder(os.path.dirname(path)) as folder, folder.open(path) as stream:
            check_size(os.fstat(stream.fileno()).st_size, limits.max_bytes, path)
            head = stream.read(SNIFF_BYTES)
            stream.seek(0)
            digest = digest_bounded(stream, limits.max_bytes, path)
            stream.seek(0)
            probe(stream, head, limits.max_pixels)
    except ItemFailure as failure:
        raise UsageError(f"source {source}: {failure.detail}", code=failure.code) from None
    except OSError as exc:
        raise UsageError(f"source {source} cannot be read: {exc.strerror or exc}", code="io_error") from None
    return path, digest
