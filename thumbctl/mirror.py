"""Mirror mode: OUT follows the folder. After a batch of a folder succeeded, the names thumbctl
published from that folder into the same OUT whose sources are no longer there (removed or renamed
photos) are removed; with ``dropped``, so are those of sources still there that the batch no longer
asks for (a size, format or ratio dropped, another name template).

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
from collections.abc import Iterable, Iterator
from dataclasses import field
from enum import StrEnum
from pathlib import Path

from .errors import UsageError
from .ledger import Ledger
from .models import BatchState, NewBatch, PublishedName
from .records import record
from .storage.locations import S3Options, name_in, output_target_at
from .storage.outputs import LocalOutputTarget, NameState, OutputTarget, Recorded


class Reason(StrEnum):
    """Why a published name is no longer wanted."""

    SOURCE_GONE = "source_gone"
    DROPPED = "dropped"


@record
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

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "removed": list(self.removed),
            "kept_edited": list(self.kept_edited),
            "kept_dropped": list(self.kept_dropped),
            "skipped": self.skipped,
            "errors": list(self.errors),
        }


@record(frozen=False)
class _Outcome:
    removed: list[str] = field(default_factory=list)
    kept_edited: list[str] = field(default_factory=list)
    kept_dropped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def check_mirrorable(source: Path | str, *, detach: bool) -> None:
    """The mirror needs a folder (its scan is the whole list of sources) and a run that ends here."""
    if not isinstance(source, Path) or not source.is_dir():
        raise UsageError("--delete mirrors a folder: SOURCE must be a folder, not a manifest")
    if detach:
        raise UsageError("--delete runs when the batch has finished: it cannot be used with --detach")


def mirror_batch(
    ledger: Ledger, batch_id: str, *, dropped: bool = False, options: S3Options | None = None
) -> MirrorReport:
    """Remove what the finished batch ``batch_id`` of a folder no longer publishes (see the module's
    docstring); nothing when the batch did not succeed (a source it could not render may only be
    unreadable for now)."""
    batch = ledger.views.batch(batch_id)
    if batch.state != BatchState.SUCCEEDED:
        return MirrorReport(dry_run=False, skipped=f"the batch is {batch.state}")
    items = ledger.views.items(batch_id)
    wanted = {i.friendly_path for i in items if i.friendly_path}
    names = _unwanted(ledger, batch.out_dir, batch.source_root, wanted, {i.source for i in items})
    return _apply(ledger, output_target_at(batch.out_dir, options), batch.out_dir, names, batch_id, dropped=dropped)


def plan_mirror(
    ledger: Ledger, new: NewBatch, *, dropped: bool = False, options: S3Options | None = None
) -> MirrorReport:
    """What :func:`mirror_batch` would remove after the batch ``new`` (not recorded) succeeded; changes nothing."""
    if any(item.error_code for item in new.items):
        return MirrorReport(dry_run=True, skipped="some sources cannot be rendered, so the batch would not succeed")
    wanted = {i.friendly_path for i in new.items if i.friendly_path}
    names = _unwanted(ledger, new.out_dir, new.source_root, wanted, {i.source for i in new.items})
    return _apply(ledger, output_target_at(new.out_dir, options), new.out_dir, names, None, dropped=dropped)


def _unwanted(
    ledger: Ledger, out_dir: str, source_root: str, wanted: set[str], sources: set[str]
) -> Iterator[tuple[PublishedName, Reason]]:
    for name in ledger.upkeep.names_from(out_dir, source_root):
        if name.friendly_path in wanted or not _named_after_its_source(name, source_root):
            continue
        yield name, Reason.DROPPED if name.source in sources else Reason.SOURCE_GONE


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
    *,
    dropped: bool,
) -> MirrorReport:
    """Remove each name (``batch_id`` None: a dry run, which only judges them)."""
    outcome = _Outcome()
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
        if current is not None or _occupied(target, name.friendly_path):
            outcome.kept_edited.append(name.friendly_path)
        elif batch_id is not None:  # already gone: only its record is left to forget
            detail = f"mirror: {name.friendly_path} was already gone"
            ledger.upkeep.remove_name(name, batch_id, f"mirror_{reason}", detail, lambda: True)
        return
    if batch_id is None:
        outcome.removed.append(name.friendly_path)
        return
    why = "its source is gone" if reason == Reason.SOURCE_GONE else "the batch no longer asks for it"
    detail = f"mirror removed {name.friendly_path}: {why} ({name.source})"
    removed = ledger.upkeep.remove_name(
        name, batch_id, f"mirror_{reason}", detail, lambda: target.remove(relative, version=version)
    )
    (outcome.removed if removed else outcome.kept_edited).append(name.friendly_path)


def _occupied(target: OutputTarget, path: str) -> bool:
    """Whether something that has no version (a symlink, a folder: only a local folder has them) is at ``path``."""
    return isinstance(target, LocalOutputTarget) and os.path.lexists(path)


def _our_version(target: OutputTarget, relative: str, name: PublishedName, version: str | None) -> str | None:
    """The version at the name (``version``, read just before) when it is what thumbctl published there, else None."""
    if version is None:
        return None
    if name.name_version is not None:
        return version if version == name.name_version else None
    ours = target.name_state(relative, [Recorded(None, name.object_path)]) == NameState.OURS
    return version if ours else None
