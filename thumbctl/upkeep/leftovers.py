"""What a crash leaves behind, told apart from what a user put there.

A worker killed mid-publish leaves temp files (``OUT/.tmp``, ``STORE/.tmp``) and may leave a
thumbnail at its name before the commit that records it. The rules, shared by ``reconcile`` and by
the start of ``submit``, ``work`` and ``retry`` (:func:`clean_up_after_crashes`):

- Only a file named by thumbctl's temp-name pattern (:data:`~.storage.fsafe.TEMP_NAME_PATTERN`) is
  a temp file; anything else in a temp folder is the user's and is never touched. A temp file goes
  once its writer is gone: a process of this host that has exited, or a writer whose lease expired
  (a worker of another host sharing the folder with a PostgreSQL ledger). ``reconcile`` and ``gc``
  also remove one older than the grace period.
- A name whose bytes equal the object of an item that was publishing there is thumbctl's: that item
  records it (a failed one is queued again to do so). A name holding the bytes of an earlier publish
  there (or of an item whose batch was cancelled) is restored to the recorded version, never removed.
  Anything else at a name is the user's (:mod:`thumbctl.upkeep.reconcile` reports it, ``thumbctl release``
  hands it over).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..config.s3location import S3Options
from ..core.models import ItemState
from ..core.proc import owner_is_dead
from ..ledger import Ledger, iso
from ..ledger.damage import is_location
from ..ledger.upkeep import Publishing
from ..storage.fsafe import StoredFile, remove_file, temp_files, temp_prefix_of, temp_writer
from ..storage.locations import is_s3, name_in, object_name_of, object_store_at, output_target_at, store_location_of
from ..storage.objects import LocalObjectStore, ObjectStore
from ..storage.outputs import LocalOutputTarget, OutputTarget

IsDead = Callable[[str], bool]

#: The most read of one object to compare it with a name (far above any thumbnail).
COMPARE_READ_LIMIT = 64 << 20


@dataclass(frozen=True)
class Scope:
    """What one run looks at: the store it was given (a location; default: the one the ledger
    recorded), the S3 settings its stores and targets are opened with (None: the process's), and
    whether a name a user changed is restored (``reconcile --repair --restore-modified``)."""

    store: str | None = None
    options: S3Options | None = None
    restore_modified: bool = False

    def store_at(self, location: str) -> ObjectStore:
        return object_store_at(location, self.options)

    def target_at(self, location: str) -> OutputTarget:
        return output_target_at(location, self.options)

    def object_of(self, object_path: str) -> tuple[ObjectStore, str]:
        """The store a recorded object path lies in, and the object's name there."""
        return self.store_at(store_location_of(object_path)), object_name_of(object_path)


@dataclass(frozen=True)
class CleanUp:
    """What :func:`clean_up_after_crashes` did: temp files removed, items queued again to record
    the thumbnail a crash left at their name."""

    temp_files: int = 0
    requeued: int = 0


# -- thumbnails at names -------------------------------------------------------------------------


def holds_object(scope: Scope, out_dir: str, object_path: str, friendly_path: str) -> bool:
    """Whether the thumbnail at ``friendly_path`` holds exactly the bytes of ``object_path`` (both present)."""
    return scope.target_at(out_dir).holds_object(name_in(out_dir, friendly_path), object_path)


def crash_leftover(ledger: Ledger, scope: Scope, owner_row: int, out_dir: str, friendly_path: str) -> Publishing | None:
    """The item (not the name's owner ``owner_row``) whose object's bytes the name holds: what a crash
    before a publish's commit leaves there, or an earlier publish of thumbctl's. None: the user's."""
    for publishing in ledger.upkeep.publishers_at(friendly_path, owner_row):
        if publishing.item.out_dir == out_dir and holds_object(
            scope, out_dir, publishing.item.object_path, friendly_path
        ):
            return publishing
    return None


def records_itself(publishing: Publishing) -> bool:
    """Whether the item will record the name it left by itself: it is still queued or running (a
    stalled lease is rescued and the item run again; its render finds its own bytes there)."""
    return not publishing.ended and publishing.state in (ItemState.QUEUED, ItemState.RUNNING)


def requeued_to_record(publishing: Publishing) -> bool:
    """Whether the item is queued again to record the name it left: it failed, in a live batch."""
    return not publishing.ended and publishing.state == ItemState.FAILED


# -- temp files ----------------------------------------------------------------------------------


def expired_writers(ledger: Ledger) -> frozenset[str]:
    """Lease owners (``host-id:pid:ticks``) of running items whose lease has expired: writers whose
    temp files may go at once, even on another host."""
    now = iso(ledger.clock())
    return frozenset(
        item.lease_owner
        for item in ledger.upkeep.stalled_candidates()
        if item.state == ItemState.RUNNING
        and item.lease_owner
        and item.lease_expires_at is not None
        and item.lease_expires_at <= now
    )


def gone_writer(found: StoredFile, expired: Iterable[str], is_dead: IsDead = owner_is_dead) -> str | None:
    """Why the writer of the temp file ``found`` is gone (None: it may still be running)."""
    writer = temp_writer(found.name)
    if writer is not None and is_dead(writer):
        return f"its writer {writer} is gone"
    for owner in expired:
        if found.name.startswith(temp_prefix_of(owner)):
            return f"its writer {owner} lost its lease"
    return None


def stale_temp_reason(
    found: StoredFile, now: float, grace: float, is_dead: IsDead, expired: Iterable[str] = ()
) -> str | None:
    """Why a temp file may go: its writer is gone (at once), or it is older than ``grace``."""
    gone = gone_writer(found, expired, is_dead)
    if gone is not None:
        return gone
    age = now - found.mtime
    if age > grace:
        known = temp_writer(found.name) is not None
        return f"older than the grace period ({age:.0f}s > {grace:.0f}s)" + ("" if known else "; writer unknown")
    return None


def _temp_folders(ledger: Ledger, out_dirs: Iterable[str]) -> list[tuple[str, str, str | None]]:
    """(root, temp folder, batch id to log on) of the local OUTs ``out_dirs`` and the recorded local store."""
    newest = dict(ledger.upkeep.output_folders())
    folders: list[tuple[str, str, str | None]] = [
        (out, LocalOutputTarget(out).tmp_dir, newest.get(out))
        for out in out_dirs
        if is_location(out) and not is_s3(out)  # a damaged one is reported by reconcile
    ]
    store = ledger.upkeep.recorded_store()
    if store is not None and not is_s3(store) and os.path.isdir(store):
        folders.append((store, LocalObjectStore(store).tmp_dir, None))
    return folders


def clean_up_after_crashes(
    ledger: Ledger, out_dirs: Iterable[str] | None = None, *, is_dead: IsDead = owner_is_dead
) -> CleanUp:
    """What ``submit``, ``work`` and ``retry`` do first, for their OUTs (``out_dirs``; default: every
    output folder the ledger knows) and the ledger's store: remove the temp files whose writer is
    gone, and queue again each failed item whose thumbnail a crash left at its name before the
    commit (its render records it, unchanged). A temp file whose writer may still run is left."""
    outs = [out for out, _ in ledger.upkeep.output_folders()] if out_dirs is None else list(dict.fromkeys(out_dirs))
    expired = expired_writers(ledger)
    removed = 0
    for root, tmp_dir, batch_id in _temp_folders(ledger, outs):
        for found in temp_files(root, tmp_dir):
            reason = gone_writer(found, expired, is_dead)
            if reason is None:
                continue
            detail = f"removed {found.path}, a temp file left by a crash: {reason}"
            if batch_id is None:
                remove_file(root, found.path)
            else:
                ledger.upkeep.record_file_removal(
                    batch_id, "stale_temp_file", detail, lambda root=root, path=found.path: remove_file(root, path)
                )
            removed += 1
    return CleanUp(removed, _requeue_unrecorded(ledger, Scope(), outs))


def _requeue_unrecorded(ledger: Ledger, scope: Scope, outs: list[str]) -> int:
    requeued = 0
    for item in ledger.upkeep.unsettled_names():
        if item.out_dir in outs and holds_object(scope, item.out_dir, item.object_path, item.friendly_path):
            detail = "a crash before the commit left its thumbnail at its name: queued again to record it"
            requeued += ledger.upkeep.requeue_unsettled(
                item.row, item.object_path, item.friendly_path, "unrecorded_thumbnail", detail
            )
    return requeued
