"""Mirror mode: OUT follows the folder. After a batch of a folder succeeded, the names thumbctl
published from that folder into the same OUT whose sources are known to be gone (removed or renamed
photos) are removed; with ``dropped``, so are those of sources still there that the batch no longer
asks for (a size, format or ratio dropped, another name template).

A source is known to be gone only on positive evidence (:meth:`FolderView.judge`): no folder on
its path failed the batch's scan (permission, I/O error, vanished during it), none is a symlink
(never followed, so not scanned) or an output folder the scan left out, and ``lstat`` of the path
says it does not exist (or a folder on it is now a file). A source still there that
``--include``/``--exclude`` left out is kept unless ``excluded`` (``--delete-excluded``); any other
source still there is kept.

What is considered is read from the names' own records (:meth:`Upkeep.names_from`): the names
published into OUT from the same source folder, named after their source's path in it (a folder
scan's items, and a manifest's items without an ``id`` of their own). Names published from another
folder, or by a manifest under ids of its own, are never touched. A name is removed only while it
holds the version thumbctl recorded there (or, for a name recorded before versions were, exactly its
object's bytes); anything else at a name (a user's edit, another file) is reported and left. Each
removal is its own transaction under the name's lock, forgets the name's record and logs a
batch-level ``removed`` event on the mirroring batch.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.s3location import S3Options
from ..core.errors import UsageError
from ..core.models import BatchState, NewBatch, PublishedName
from ..core.scanrules import ScanRules
from ..ledger import Ledger
from ..sources.scan import ScanError, is_within
from ..storage.locations import name_in, output_target_at
from ..storage.outputs import NameState, OutputTarget, Recorded

if TYPE_CHECKING:
    from ..intake.prepared import IntakeReport


class Reason(StrEnum):
    """Why a published name is no longer wanted."""

    SOURCE_GONE = "source_gone"
    DROPPED = "dropped"
    #: Its source is still there, left out by ``--include``/``--exclude`` (``--delete-excluded``).
    EXCLUDED = "excluded"


class Kept(StrEnum):
    """Why a name whose source the batch does not hold stays: its source is not known to be gone."""

    #: A folder on the source's path could not be read by the scan.
    SCAN_ERROR = "scan_error"
    #: A folder on the source's path is a symlink (never followed) or an output folder.
    NOT_SCANNED = "not_scanned"
    #: The source is there, left out by ``--include``/``--exclude``.
    EXCLUDED = "excluded"
    #: The source is there, but not a photo the scan takes (hidden, not a file, or new since).
    PRESENT = "present"


@dataclass(frozen=True)
class KeptName:
    """A name kept because its source is not known to be gone, and why (``detail`` names the path)."""

    path: str
    reason: Kept
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": str(self.reason), "detail": self.detail}


@dataclass(frozen=True)
class FolderView:
    """What the batch's scan saw of its folder besides its sources: the evidence the mirror needs
    before it calls a source gone. ``symlinked`` and ``left_out`` are the folders (absolute) the
    scan did not enter: symlinks to folders, and output folders."""

    root: str
    rules: ScanRules
    errors: tuple[ScanError, ...] = ()
    symlinked: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()

    @classmethod
    def of(cls, root: str, report: IntakeReport, rules: ScanRules) -> FolderView:
        def absolute(folders: list[str]) -> tuple[str, ...]:
            return tuple(os.path.join(root, folder) for folder in folders)

        errors = tuple(report.scan_errors)
        return cls(root, rules, errors, absolute(report.symlinked_folders), absolute(report.skipped_output_folders))

    def verdict(self, rel: str, *, excluded: bool = False) -> Reason | tuple[Kept, str]:
        """Whether the names of the source at ``rel`` (relative to the root), which the batch does
        not hold, go (and why) or stay (and why); ``excluded``: ``--delete-excluded``."""
        kept = self.judge(rel)
        if kept is None:
            return Reason.SOURCE_GONE
        if kept[0] == Kept.EXCLUDED and excluded:
            return Reason.EXCLUDED
        return kept

    def judge(self, rel: str) -> tuple[Kept, str] | None:
        """Why the source at ``rel`` (relative to the root) may not be called gone; None when it is
        known to be gone."""
        path = os.path.join(self.root, rel)
        for error in self.errors:
            if is_within(path, error.path):
                return Kept.SCAN_ERROR, f"{error.path} could not be read ({error.detail})"
        for folder in self.symlinked:
            if is_within(path, folder):
                return Kept.NOT_SCANNED, f"{folder} is a symlink, not scanned"
        for folder in self.left_out:
            if is_within(path, folder):
                return Kept.NOT_SCANNED, f"{folder} is an output folder, not scanned"
        return self._look(rel)

    def _look(self, rel: str) -> tuple[Kept, str] | None:
        """``lstat`` each folder on the path, then the source: gone only when one says so."""
        parts = rel.split("/")
        path = self.root
        for depth, part in enumerate(parts):
            path = os.path.join(path, part)
            try:
                mode = os.lstat(path).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                return Kept.SCAN_ERROR, f"{path} could not be read ({exc.strerror or exc})"
            if depth == len(parts) - 1:
                break
            if stat.S_ISLNK(mode):
                return Kept.NOT_SCANNED, f"{path} is a symlink, not scanned"
            if not stat.S_ISDIR(mode):
                return None
        if not self.rules.is_candidate(rel, parts[-1]):
            return Kept.EXCLUDED, f"{path} is left out by --include/--exclude (--delete-excluded removes it)"
        return Kept.PRESENT, f"{path} is still there (hidden, not a regular file, or new since the scan)"


@dataclass(frozen=True)
class MirrorReport:
    """What the mirror removed (with ``dry_run``: would remove) and what it left, by friendly path."""

    dry_run: bool
    removed: tuple[str, ...] = ()
    #: Names whose file is not what thumbctl published there (edited, replaced): left as they are.
    kept_edited: tuple[str, ...] = ()
    #: Derivatives of sources still there that the batch no longer asks for (removed only with ``dropped``).
    kept_dropped: tuple[str, ...] = ()
    #: Why nothing was considered (the batch did not succeed), None when the mirror ran.
    skipped: str | None = None
    #: Names that could not be removed (path: reason); they stay.
    errors: tuple[str, ...] = ()
    #: Names whose source is not in the batch but not known to be gone either, with why.
    kept: tuple[KeptName, ...] = ()
    #: With ``dry_run``: the names the batch would render (new or changed photos; reused outputs are not).
    rendered: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "rendered": list(self.rendered),
            "removed": list(self.removed),
            "kept_edited": list(self.kept_edited),
            "kept_dropped": list(self.kept_dropped),
            "skipped": self.skipped,
            "errors": list(self.errors),
            "kept": [kept.to_json() for kept in self.kept],
        }


@dataclass
class _Outcome:
    removed: list[str] = field(default_factory=list)
    kept_edited: list[str] = field(default_factory=list)
    kept_dropped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    kept: list[KeptName] = field(default_factory=list)


def check_mirrorable(source: Path | str, *, detach: bool) -> None:
    """The mirror needs a folder (its scan is the whole list of sources) and a run that ends here."""
    if not isinstance(source, Path) or not source.is_dir():
        raise UsageError("--delete mirrors a folder: SOURCE must be a folder, not a manifest")
    if detach:
        raise UsageError("--delete runs when the batch has finished: it cannot be used with --detach")


def mirror_batch(
    ledger: Ledger,
    batch_id: str,
    folder: FolderView,
    *,
    dropped: bool = False,
    excluded: bool = False,
    options: S3Options | None = None,
) -> MirrorReport:
    """Remove what the finished batch ``batch_id`` of a folder no longer publishes (see the module's
    docstring), judged with what its scan saw (``folder``); nothing when the batch did not succeed
    (a source it could not render may only be unreadable for now)."""
    batch = ledger.views.batch(batch_id)
    if batch.state != BatchState.SUCCEEDED:
        return MirrorReport(dry_run=False, skipped=f"the batch is {batch.state}")
    items = ledger.views.items(batch_id)
    wanted = {i.friendly_path for i in items if i.friendly_path}
    outcome = _Outcome()
    names = _unwanted(ledger, batch.out_dir, folder, wanted, {i.source for i in items}, excluded, outcome)
    target = output_target_at(batch.out_dir, options)
    return _apply(ledger, target, batch.out_dir, names, batch_id, outcome, dropped=dropped)


def plan_mirror(
    ledger: Ledger,
    new: NewBatch,
    folder: FolderView,
    *,
    dropped: bool = False,
    excluded: bool = False,
    options: S3Options | None = None,
) -> MirrorReport:
    """What :func:`mirror_batch` would remove after the batch ``new`` (not recorded) succeeded; changes nothing."""
    if any(item.error_code for item in new.items):
        return MirrorReport(dry_run=True, skipped="some sources cannot be rendered, so the batch would not succeed")
    wanted = {i.friendly_path for i in new.items if i.friendly_path}
    outcome = _Outcome()
    names = _unwanted(ledger, new.out_dir, folder, wanted, {i.source for i in new.items}, excluded, outcome)
    target = output_target_at(new.out_dir, options)
    return _apply(ledger, target, new.out_dir, names, None, outcome, dropped=dropped)


def _unwanted(
    ledger: Ledger,
    out_dir: str,
    folder: FolderView,
    wanted: set[str],
    sources: set[str],
    excluded: bool,
    outcome: _Outcome,
) -> Iterator[tuple[PublishedName, Reason]]:
    """The names to judge for removal, and why; those whose source is not known to be gone go
    to ``outcome.kept`` instead."""
    verdicts: dict[str, Reason | tuple[Kept, str]] = {}
    for name in ledger.upkeep.names_from(out_dir, folder.root):
        if name.friendly_path in wanted or not _named_after_its_source(name, folder.root):
            continue
        if name.source in sources:
            yield name, Reason.DROPPED
            continue
        if name.source not in verdicts:
            verdicts[name.source] = folder.verdict(os.path.relpath(name.source, folder.root), excluded=excluded)
        verdict = verdicts[name.source]
        if isinstance(verdict, Reason):
            yield name, verdict
        else:
            outcome.kept.append(KeptName(name.friendly_path, *verdict))


def _named_after_its_source(name: PublishedName, source_root: str) -> bool:
    """Whether the item that published ``name`` took its id from its source's path in the folder, as
    a scan of the folder does (a manifest's item with an ``id`` of its own does not)."""
    return name.item_id is not None and name.item_id == os.path.relpath(name.source, source_root)


def _apply(
    ledger: Ledger,
    target: OutputTarget,
    out_dir: str,
    names: Iterable[tuple[PublishedName, Reason]],
    batch_id: str | None,
    outcome: _Outcome,
    *,
    dropped: bool,
) -> MirrorReport:
    """Remove each name (``batch_id`` None: a dry run, which only judges them)."""
    for name, reason in names:
        if reason == Reason.DROPPED and not dropped:
            outcome.kept_dropped.append(name.friendly_path)
            continue
        try:
            _remove_one(ledger, target, out_dir, name, reason, batch_id, outcome)
        except OSError as exc:  # e.g. OUT is read-only for this user: the name stays, with why
            outcome.errors.append(f"{name.friendly_path}: {exc.strerror or exc}")
    return MirrorReport(
        dry_run=batch_id is None,
        removed=tuple(outcome.removed),
        kept_edited=tuple(outcome.kept_edited),
        kept_dropped=tuple(outcome.kept_dropped),
        errors=tuple(outcome.errors),
        kept=tuple(outcome.kept),
    )


def _remove_one(
    ledger: Ledger,
    target: OutputTarget,
    out_dir: str,
    name: PublishedName,
    reason: Reason,
    batch_id: str | None,
    outcome: _Outcome,
) -> None:
    relative = name_in(out_dir, name.friendly_path)
    current = target.version_of(relative)
    version = _our_version(target, relative, name, current)
    if version is None:
        if current is not None or target.occupied(relative):
            outcome.kept_edited.append(name.friendly_path)
        elif batch_id is not None:  # already gone: only its record is left to forget
            detail = f"mirror: {name.friendly_path} was already gone"
            ledger.upkeep.remove_name(name, batch_id, f"mirror_{reason}", detail, lambda: True)
        return
    if batch_id is None:
        outcome.removed.append(name.friendly_path)
        return
    why = _WHY[reason]
    detail = f"mirror removed {name.friendly_path}: {why} ({name.source})"
    removed = ledger.upkeep.remove_name(
        name, batch_id, f"mirror_{reason}", detail, lambda: target.remove(relative, version=version)
    )
    (outcome.removed if removed else outcome.kept_edited).append(name.friendly_path)


_WHY = {
    Reason.SOURCE_GONE: "its source is gone",
    Reason.DROPPED: "the batch no longer asks for it",
    Reason.EXCLUDED: "its source is left out by --include/--exclude (--delete-excluded)",
}


def _our_version(target: OutputTarget, relative: str, name: PublishedName, version: str | None) -> str | None:
    """The version at the name (``version``, read just before) when it is what thumbctl published there, else None."""
    if version is None:
        return None
    if name.name_version is not None:
        return version if version == name.name_version else None
    ours = target.name_state(relative, [Recorded(None, name.object_path)]) == NameState.OURS
    return version if ours else None
