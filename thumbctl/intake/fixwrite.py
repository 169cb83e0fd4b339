"""``thumbctl focus`` and the fix file: writing a photo's fixes to its root's ``thumbctl-focus.json``,
and ``--export`` / ``--import``, which move every fix of a root between the ledger and the file.

The root is the one given (``--root``: a folder, a manifest's folder or an ``s3://`` prefix), else
that of the newest batch that read the photo. The write is a swap (:mod:`thumbctl.storage.rootfiles`):
atomic, under a lock, never over a file thumbctl did not write. The ledger records what the file
holds (:class:`~thumbctl.core.fixes.FixFileState`), so removing an entry from the file later clears it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ..config.s3location import is_s3
from ..core.errors import UsageError
from ..core.fixes import FIX_FILE, FixFileUpdate, FocusChange, path_key
from ..ledger import Ledger
from ..sources.manifest import is_manifest_path
from ..storage.rootfiles import root_file_at
from .fixfile import FIX_FILE_LIMIT, FixEntry, FixFile, parse_fix_file


@dataclass(frozen=True)
class FileWrite:
    """Where a command wrote the fix file, or why it could not (the fixes stay in the ledger)."""

    where: str | None = None
    problem: str | None = None
    #: ``--export``/``--import``: the photos moved.
    photos: int = 0
    #: Why no file was written though nothing went wrong (no batch has read the photo yet).
    note: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"file": self.where, "problem": self.problem, "note": self.note, "photos": self.photos}


def given_root(text: str) -> str:
    """``--root``: a folder (its real path), a manifest (its folder) or an ``s3://`` prefix."""
    if not text.strip():
        raise UsageError("--root needs a folder, a manifest or an s3:// prefix", code="source_not_found")
    if is_s3(text):
        return text.rstrip("/")
    path = os.path.realpath(text)
    if os.path.isfile(path) and is_manifest_path(Path(path)):
        return os.path.dirname(path)
    if not os.path.isdir(path):
        raise UsageError(f"--root {text}: no such folder, manifest or s3:// prefix", code="source_not_found")
    return path


def newest_root(ledger: Ledger) -> str:
    """The source root of the newest batch (``--export``/``--import`` without ``--root``)."""
    batches = ledger.views.batches(limit=1)
    if not batches:
        raise UsageError("no batch in the ledger: give --root ROOT (the source folder, manifest or s3:// prefix)")
    return batches[0].source_root


def root_of(ledger: Ledger, source: str, root: str | None) -> str | None:
    """The root whose fix file holds ``source``: ``root`` when given (the photo must be below it, or
    a URL), else that of the newest batch that read it; None when no batch has."""
    if root is None:
        roots = ledger.intake.source_roots(source)
        return roots[0] if roots else None
    if not source.startswith(root.rstrip("/") + "/") and source.startswith(("/", "s3://")):
        raise UsageError(f"{source} is not below --root {root}", code="bad_source")
    return root


def write_entries(
    ledger: Ledger, root: str, make: Callable[[FixFile], Iterable[FixEntry]], digests: Iterable[str]
) -> FileWrite:
    """Put the entries ``make`` makes of the fix file at ``root`` in it (an entry without a fix leaves
    its path), and record that the file holds their fixes for ``digests``. A root that cannot be
    written, or a file there that is not thumbctl's, is reported (``problem``); the fixes stay in
    the ledger."""
    where = f"{root.rstrip('/')}/{FIX_FILE}"
    kept: list[tuple[FixFile, int]] = []

    def decide(held: bytes | None) -> bytes | str:
        if held == b"":
            return f"{where} is not a regular file of thumbctl's: left as it is"
        try:
            file = parse_fix_file(held, where) if held is not None else FixFile()
        except UsageError as exc:
            return str(exc)
        entries = list(make(file))
        for entry in entries:
            file = file.with_entry(entry)
        kept.append((file, len(entries)))
        return file.render()

    try:
        problem = root_file_at(root, FIX_FILE).swap(decide, FIX_FILE_LIMIT)
    except OSError as exc:
        problem = f"{where} cannot be written: {exc.strerror or exc}"
    if problem is not None:
        why = "the fixes are kept in the ledger, but a fix the file holds for the photo still wins at the next submit"
        return FileWrite(problem=f"{problem}; {why}")
    file, photos = kept[-1]
    _record_file(ledger, root, file, set(digests))
    return FileWrite(where=where, photos=photos)


def photo_update(entry: FixEntry, cleared: Iterable[str] | None) -> Callable[[FixFile], list[FixEntry]]:
    """What ``thumbctl focus`` makes of a file: ``entry`` (the photo with the fixes the ledger holds
    now) over the fixes the file holds for the same content, less the ratios ``cleared`` (None: all)."""

    def make(file: FixFile) -> list[FixEntry]:
        held = file.by_digest().get(entry.digest)
        focus = dict(held.focus) if held is not None else {}
        focus |= entry.focus
        for ratio in list(focus) if cleared is None else cleared:
            focus.pop(ratio, None)
        moved = [replace(held, focus={})] if held is not None and held.path != entry.path else []
        return [*moved, replace(entry, focus=focus)]

    return make


def _record_file(ledger: Ledger, root: str, file: FixFile, digests: set[str]) -> None:
    """The ledger's record: the file now holds exactly its pairs for ``digests``."""
    held = frozenset(pair for pair in file.pairs() if pair[0] in digests)
    ledger.intake.update_fix_file_state(root, FixFileUpdate(frozenset(digests), held))


def export_fixes(ledger: Ledger, root: str, entry_of: Callable[[str, str], FixEntry | None]) -> FileWrite:
    """Write every fix the ledger holds for the live photos of ``root`` to its fix file.
    ``entry_of(source, digest)`` describes a photo (dimensions, hash), None to leave it out."""
    photos = {
        (e.source, e.source_digest)
        for out, _ in ledger.catalogue.outs()
        for e in ledger.catalogue.entries(out)
        if e.source_root == root and e.source_digest
    }
    fixes: dict[str, dict[str, tuple[float, float]]] = {}
    for point in ledger.intake.focus_points(sorted({d for _, d in photos})):
        if point.focus is not None:
            fixes.setdefault(point.source_digest, {})[point.ratio] = point.focus
    entries = []
    for source, digest in sorted(photos):
        if digest in fixes and (entry := entry_of(source, digest)) is not None:
            entries.append(replace(entry, path=path_key(root, source), focus=fixes[digest]))
    if not entries:
        return FileWrite()
    return write_entries(ledger, root, lambda _file: entries, [e.digest for e in entries])


def import_fixes(ledger: Ledger, root: str) -> FileWrite:
    """Remember every fix of the fix file at ``root`` in the ledger (the file wins)."""
    from .fixplan import read_fix_file

    file = read_fix_file(root)
    where = f"{root.rstrip('/')}/{FIX_FILE}"
    if file is None:
        raise UsageError(f"{where} does not exist: nothing to import", code="source_not_found")
    known = {(p.source_digest, p.ratio): p.focus for p in ledger.intake.focus_points([e.digest for e in file.entries])}
    changes = [
        FocusChange(entry.digest, ratio, point)
        for entry in file.entries
        for ratio, point in sorted(entry.focus.items())
        if known.get((entry.digest, ratio)) != point
    ]
    ledger.intake.change_focus(changes)
    _record_file(ledger, root, file, {e.digest for e in file.entries})
    return FileWrite(where=where, photos=len(file.entries))
