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

from .entries import SourceEntry
from .errors import ItemFailure, UsageError
from .imaging import SNIFF_BYTES, probe
from .ledger import Ledger
from .models import FocusChange, FocusPoint
from .settings import Limits, Ratio, SettingError, parse_ratios
from .sources import SourceFolder, check_size, digest_bounded

Point = tuple[float, float]


# -- a submission's focus ------------------------------------------------------------------------


@dataclass(frozen=True)
class FocusPlan:
    """The remembered focus a submission renders with, after its own manifest's changes, and those
    changes (recorded with the batch)."""

    memory: Mapping[tuple[str, str], Point] = field(default_factory=dict)
    changes: tuple[FocusChange, ...] = ()

    def focus_of(self, entry: SourceEntry, digest: str | None, ratio: Ratio) -> Point | None:
        """The item's focus: the manifest's, none when the manifest clears it, else the remembered one."""
        if entry.focus is not None or entry.clear_focus or digest is None:
            return entry.focus
        return self.memory.get((digest, str(ratio)))

    def remembered_for(self, entry: SourceEntry, digest: str | None) -> dict[str, list[float]]:
        """The ratios of ``entry`` that render with a remembered focus, for the canonical request."""
        if entry.focus is not None or entry.clear_focus or digest is None:
            return {}
        return {str(r): list(point) for r in entry.ratios if (point := self.memory.get((digest, str(r))))}


def plan_focus(entries: Iterable[tuple[SourceEntry, str | None]], remembered: Iterable[FocusPoint]) -> FocusPlan:
    """The plan of the entries (each with its source's digest, None when it could not be read), given
    the fixes remembered for those digests. The manifest's changes apply in item-id order."""
    memory = {(p.source_digest, p.ratio): p.focus for p in remembered}
    changes: dict[tuple[str, str], FocusChange] = {}
    for entry, digest in sorted(entries, key=lambda pair: pair[0].item_id):
        if digest is None or (entry.focus is None and not entry.clear_focus):
            continue
        for ratio in entry.ratios:
            key = (digest, str(ratio))
            changes[key] = FocusChange(digest, str(ratio), entry.focus)
            if entry.focus is None:
                memory.pop(key, None)
            else:
                memory[key] = entry.focus
    return FocusPlan(memory, tuple(changes.values()))


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


def parse_focus_ratios(text: str | None) -> tuple[Ratio, ...]:
    """``--ratio`` as submit reads it (``4:3`` or ``1:1,4:3``); none given: every ratio."""
    if text is None:
        return ()
    try:
        return parse_ratios(text)
    except SettingError as exc:
        raise UsageError(f"--ratio: {exc}", code="bad_ratio") from exc


def source_focus(ledger: Ledger, source: Path, limits: Limits, ratios: tuple[Ratio, ...] = ()) -> SourceFocus:
    """The fixes remembered for the content of the file ``source`` (at ``ratios``; none given: all)."""
    path, digest = _digest_of(source, limits)
    shown = _current(ledger, path, digest)
    if not ratios:
        return shown
    wanted = {str(r) for r in ratios}
    return replace(shown, points=tuple(p for p in shown.points if p.ratio in wanted))


def set_focus(ledger: Ledger, source: Path, ratios: tuple[Ratio, ...], point: Point, limits: Limits) -> SourceFocus:
    """Remember ``point`` for the content of ``source`` at each of ``ratios`` (at least one)."""
    if not ratios:
        raise UsageError("--at needs --ratio: the ratios whose crop it fixes (e.g. --ratio 4:3)", code="bad_ratio")
    path, digest = _digest_of(source, limits)
    ledger.intake.change_focus(FocusChange(digest, str(r), point) for r in ratios)
    changed = tuple(str(r) for r in ratios)
    return _current(ledger, path, digest, set_=changed)


def clear_focus(ledger: Ledger, source: Path, ratios: tuple[Ratio, ...], limits: Limits) -> SourceFocus:
    """Forget the fixes of ``source``'s content at ``ratios`` (none given: at every ratio)."""
    path, digest = _digest_of(source, limits)
    known = {p.ratio for p in ledger.intake.focus_points([digest])}
    chosen = [str(r) for r in ratios] if ratios else sorted(known)
    cleared = tuple(r for r in chosen if r in known)
    ledger.intake.change_focus(FocusChange(digest, r, None) for r in cleared)
    return _current(ledger, path, digest, cleared=cleared)


def _current(
    ledger: Ledger, path: str, digest: str, *, set_: tuple[str, ...] = (), cleared: tuple[str, ...] = ()
) -> SourceFocus:
    return SourceFocus(path, digest, tuple(ledger.intake.focus_points([digest])), set_, cleared)


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
