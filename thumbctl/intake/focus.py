"""Crop fixes: focus points remembered per (source content digest, ratio).

A fix is set by a manifest item's ``focus`` (recorded when its batch is accepted, for every
ratio the item asks for) or by ``thumbctl focus SOURCE --ratio R --at X,Y``, and forgotten by
``"focus": null`` or ``thumbctl focus SOURCE --clear``. Every later render of that content at
that ratio is centred on the point, whether the source comes from a folder scan or a manifest
item without a ``focus``: the point becomes the item's focus, so it is part of the derivative key
and no object rendered with another framing is reused for it.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config.s3location import is_s3
from ..core.errors import ItemFailure, RowDamaged, UsageError
from ..core.fixes import FIX_FILE, FocusChange, FocusPoint, path_key
from ..core.models import CachedSource
from ..core.profile import Limits, Ratio, SettingError, parse_ratios
from ..core.redact import shown_source
from ..imaging import SNIFF_BYTES, probe
from ..ledger import Ledger
from ..sources.downloads import is_url
from ..sources.entries import SourceEntry
from ..sources.scan import SourceFolder, check_size
from .fixfile import FixEntry
from .fixplan import FileFixes, phash_of_bytes
from .fixwrite import FileWrite, photo_update, write_entries

Point = tuple[float, float]


# -- a submission's focus ------------------------------------------------------------------------


@dataclass(frozen=True)
class FocusPlan:
    """What a submission renders with: the fix remembered for each (digest, ratio) before it, cleared
    ones included (focus None); what the root's fix file says (over the ledger, see
    :mod:`.fixplan`); and the changes to record with the batch: the file's, applied now, and the
    manifest's (they apply from the next batch on: within a manifest, an item without ``focus``
    keeps the fix remembered before, as another item of the same photo with its own focus is
    another derivative)."""

    memory: Mapping[tuple[str, str], FocusPoint] = field(default_factory=dict)
    changes: tuple[FocusChange, ...] = ()
    file: FileFixes = field(default_factory=FileFixes)

    def focus_of(self, entry: SourceEntry, digest: str | None, ratio: Ratio) -> Point | None:
        """The item's focus: the manifest's, none when the manifest clears it, else the fix file's,
        else the remembered one."""
        if entry.focus is not None or entry.clear_focus or digest is None:
            return entry.focus
        if (digest, str(ratio)) in self.file.points:
            return self.file.points[digest, str(ratio)]
        point = self.memory.get((digest, str(ratio)))
        return point.focus if point else None

    def remembered_for(self, entry: SourceEntry, digest: str | None) -> dict[str, object]:
        """The remembered fixes (set or cleared, with when, or from the fix file) ``entry`` renders
        with, for the canonical request: a fix set, cleared or set again since makes the next submit
        a new request."""
        if entry.focus is not None or entry.clear_focus or digest is None:
            return {}
        found: dict[str, object] = {}
        for ratio in map(str, entry.ratios):
            known = self.memory.get((digest, ratio))
            if (digest, ratio) in self.file.points and (
                known is None or known.focus != self.file.points[digest, ratio]
            ):
                point = self.file.points[digest, ratio]  # recorded with the batch: "set_at" from the next submit on
                found[ratio] = {"focus": list(point) if point else None, "from": FIX_FILE}
            elif known is not None:
                found[ratio] = {"focus": list(known.focus) if known.focus else None, "set_at": known.set_at}
        return found


def plan_focus(
    entries: Iterable[tuple[SourceEntry, str | None]], remembered: Iterable[FocusPoint], file: FileFixes | None = None
) -> FocusPlan:
    """The plan of the entries (each with its source's digest, None when it could not be read), given
    the fixes remembered for those digests and what the root's fix file says. Where several items
    of a manifest set or clear one fix, the last in item-id order stands; only what changes the
    remembered fix is recorded (a fix set again as it is keeps its time, clearing none changes nothing)."""
    file = file or FileFixes()
    memory = {(p.source_digest, p.ratio): p for p in remembered}
    wanted: dict[tuple[str, str], Point | None] = dict(file.points)
    for entry, digest in sorted(entries, key=lambda pair: pair[0].item_id):
        if digest is not None and (entry.focus is not None or entry.clear_focus):
            wanted.update({(digest, str(ratio)): entry.focus for ratio in entry.ratios})
    changes = tuple(
        FocusChange(digest, ratio, focus)
        for (digest, ratio), focus in wanted.items()
        if (memory[digest, ratio].focus if (digest, ratio) in memory else None) != focus
    )
    return FocusPlan(memory, changes, file)


# -- thumbctl focus -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceFocus:
    """The crop fixes remembered for one source file's content, and the ratios a command changed."""

    source: str
    source_digest: str
    points: tuple[FocusPoint, ...]
    set: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()
    #: Where the change was written besides the ledger (the root's fix file), or why it was not.
    file: FileWrite | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "source_digest": self.source_digest,
            "focus_points": [p.to_json() for p in self.points],
            "set": list(self.set),
            "cleared": list(self.cleared),
        } | ({"fix_file": self.file.to_json()} if self.file else {})


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
    """A photo's real path (or URL) and content digest, read as a submit reads it, with its upright
    dimensions and perceptual hash where its bytes were read (for the fix file)."""

    path: str
    digest: str
    width: int | None = None
    height: int | None = None
    phash: str | None = None

    def entry(self, root: str, points: Iterable[FocusPoint]) -> FixEntry:
        """This photo's entry in the fix file of ``root``, with ``points``."""
        focus = {p.ratio: p.focus for p in points if p.focus is not None}
        return FixEntry(path_key(root, self.path), self.digest, self.width, self.height, self.phash, focus)


def read_photo(source: Path, limits: Limits) -> Photo:
    """The photo at ``source``: a regular file under the byte limit in a format thumbctl reads.
    Refusals are usage errors with the code a submit would give the item."""
    return _read(source, limits)


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


def apply_focus(ledger: Ledger, photo: Photo, request: FocusRequest, root: str | None = None) -> SourceFocus:
    """Carry out ``request`` for ``photo`` and return what is remembered for it afterwards. Setting a
    fix as it already is, or clearing one that is not set, changes nothing in the ledger. A change is
    also written to the fix file at ``root`` (see :mod:`.fixwrite`), when there is one."""
    shown = _applied(ledger, photo, request)
    if request.point is None and not request.clear:
        return shown
    if root is None:
        why = (
            f"no batch has read {photo.path} yet: the fix is kept in the ledger only (--root names the fix file's root)"
        )
        return replace(shown, file=FileWrite(note=why))
    cleared = [str(r) for r in request.ratios] if request.ratios or not request.clear else None
    make = photo_update(photo.entry(root, shown.points), cleared if request.clear else ())
    return replace(shown, file=write_entries(ledger, root, make, [photo.digest]))


def _applied(ledger: Ledger, photo: Photo, request: FocusRequest) -> SourceFocus:
    """:func:`apply_focus` in the ledger alone."""
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


def described_photo(source: str, digest: str, limits: Limits) -> FixEntry:
    """A live photo's entry for ``--export`` (its fixes and path are filled in there): with its
    dimensions and hash when the file at ``source`` still holds ``digest``, else by digest alone."""
    if is_url(source) or is_s3(source):
        return FixEntry(source, digest)
    try:
        photo = read_photo(Path(source), limits)
    except UsageError:
        return FixEntry(source, digest)
    if photo.digest != digest:
        return FixEntry(source, digest)
    return FixEntry(source, digest, photo.width, photo.height, photo.phash)


def _current(ledger: Ledger, photo: Photo, *, set_: tuple[str, ...] = (), cleared: tuple[str, ...] = ()) -> SourceFocus:
    """The fixes set for ``photo`` now (cleared ones are not shown)."""
    points = tuple(p for p in ledger.intake.focus_points([photo.digest]) if p.focus is not None)
    return SourceFocus(photo.path, photo.digest, points, set_, cleared)


def _read(source: Path, limits: Limits) -> Photo:
    """The image file ``source`` by its real path, content digest, dimensions and hash (read as a
    submit reads it: a regular file, under the byte limit, in a format thumbctl reads). Refusals are
    usage errors."""
    if not source.exists():
        raise UsageError(f"source {source} does not exist", code="source_not_found")
    path = os.path.realpath(source)
    if not os.path.isfile(path):
        raise UsageError(f"source {source} is not a file: a focus point belongs to one photo", code="bad_source")
    try:
        with SourceFolder(os.path.dirname(path)) as folder, folder.open(path) as stream:
            check_size(os.fstat(stream.fileno()).st_size, limits.max_bytes, path)
            data = stream.read(limits.max_bytes + 1)
            check_size(len(data), limits.max_bytes, path)
            info = probe(io.BytesIO(data), data[:SNIFF_BYTES], limits.max_pixels)
    except ItemFailure as failure:
        raise UsageError(f"source {source}: {failure.detail}", code=failure.code) from None
    except OSError as exc:
        raise UsageError(f"source {source} cannot be read: {exc.strerror or exc}", code="io_error") from None
    cached = CachedSource(path, 0, 0, len(data), 0, 0, "", info.format, info.width, info.height, info.orientation)
    phash = phash_of_bytes(data, cached, limits)
    return Photo(path, hashlib.sha256(data).hexdigest(), info.width, info.height, phash)
