"""Reconcile (findings and safe repairs) and gc (retention): what an operator runs from cron.

``reconcile`` compares the ledger with the output folders: stalled leases, cancels whose
claims have stopped, every ``succeeded`` item's object (present, decodes, exact
dimensions) and friendly name, orphan objects and stale temp files. Each problem is a
:class:`~thumbctl.models.Finding` of a stable kind; with ``repair`` the safe repairs are
applied through conditional ledger transactions (a live lease is never touched) and each
is logged with its reason. Orphan objects are only reported: ``gc`` removes them.

``gc`` expires terminal batches past an age (their records and keys), then removes the objects of
the ledger's store that no remaining batch and no published name's record references (checked
inside a write transaction, one object at a time), stale temp files (OUT/.tmp and STORE/.tmp) and
the manifests and contact sheets of expired batches (OUT/batches). It never removes a thumbnail:
a published name keeps its record, and its file, whatever becomes of the batch that published it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import NamedTuple

from .imaging import output_geometry, verify_output
from .ledger import Ledger, iso
from .ledger.maintenance import stall_reason
from .models import (
    Finding,
    GcReport,
    ObjectStamp,
    PublishedItem,
    ReconcileReport,
    StalledItem,
    UnsettledName,
)
from .options import DEFAULT_GRACE
from .proc import owner_is_dead
from .publisher import Publisher
from .retrypolicy import Backoff
from .settings import parse_ratio
from .storage.fsafe import StoredFile, is_plain_file, remove_file, temp_files, temp_writer
from .storage.objects import LocalObjectStore, object_files, object_stamp, preview_bytes, remove_object
from .storage.outputs import LocalOutputTarget
from .storage.thumbnails import thumbnail_problem

IsDead = Callable[[str], bool]
Fix = Callable[[], bool]


@dataclass(frozen=True)
class Problem:
    """A finding and the safe repair for it (None: report only)."""

    finding: Finding
    fix: Fix | None = None


def find_problems(
    ledger: Ledger,
    *,
    grace: float = DEFAULT_GRACE,
    is_dead: IsDead = owner_is_dead,
    store: LocalObjectStore | None = None,
) -> list[Finding]:
    """Every problem reconcile can see now, changing nothing but the cache of sound objects."""
    checks = _ObjectChecks(ledger.upkeep.verified_objects())
    return [p.finding for p in _problems(ledger, grace, is_dead, Backoff().delay_for, checks, store)]


def reconcile(
    ledger: Ledger,
    *,
    repair: bool = False,
    deep: bool = False,
    grace: float = DEFAULT_GRACE,
    is_dead: IsDead = owner_is_dead,
    delay_for: Callable[[int], float] | None = None,
    store: LocalObjectStore | None = None,
) -> ReconcileReport:
    """Find problems and, with ``repair``, apply the safe repairs (each audited).

    Objects unchanged since they last decoded without fault are not decoded again, unless
    ``deep`` (which finds damage no file operation made, e.g. a failing disk). ``store`` is the
    ledger's store (default: the one it recorded); its orphans and temp files are checked too.
    """
    checks = _ObjectChecks({} if deep else ledger.upkeep.verified_objects())
    problems = list(_problems(ledger, grace, is_dead, delay_for or Backoff().delay_for, checks, store))
    findings = tuple(_repaired(p) for p in problems) if repair else tuple(p.finding for p in problems)
    if repair:
        for out_dir, _ in ledger.upkeep.output_folders():  # OUT/.tmp exists only while files are being written
            LocalOutputTarget(out_dir).remove_empty_tmp()
    return ReconcileReport(findings, len(checks.verdicts), checks.decoded, checks.unchanged)


def object_stores(ledger: Ledger, store: LocalObjectStore | None = None) -> list[LocalObjectStore]:
    """The stores whose objects the ledger accounts for: ``store`` (default: the one the ledger
    recorded), and every output folder of the earlier layout that still holds ``objects/``."""
    recorded = ledger.upkeep.recorded_store()
    roots = [store.root] if store is not None else [recorded] if recorded else []
    roots += [out_dir for out_dir, _ in ledger.upkeep.output_folders() if os.path.isdir(f"{out_dir}/objects")]
    return [LocalObjectStore(root) for root in dict.fromkeys(roots)]


def _repaired(problem: Problem) -> Finding:
    if problem.fix is None:
        return problem.finding
    try:
        return replace(problem.finding, repaired=problem.fix())
    except OSError as exc:  # e.g. OUT is read-only for this user: the finding stays, with why
        detail = f"{problem.finding.detail}; repair failed: {exc.strerror or exc}"
        return replace(problem.finding, detail=detail, repaired=False)


def _problems(
    ledger: Ledger,
    grace: float,
    is_dead: IsDead,
    delay_for: Callable[[int], float],
    checks: _ObjectChecks,
    store: LocalObjectStore | None,
) -> Iterator[Problem]:
    now = ledger.clock()
    for item in ledger.upkeep.stalled_candidates():
        problem = _stalled_problem(ledger, item, iso(now), is_dead, delay_for)
        if problem is not None:
            yield problem
    yield from _output_problems(ledger, checks)
    yield from _unsettled_problems(ledger)
    referenced = ledger.upkeep.referenced_object_paths()
    stores = object_stores(ledger, store)
    for found in stores:
        yield from _orphan_problems(found, referenced)
    for out_dir, newest_batch in ledger.upkeep.output_folders():
        if out_dir not in {found.root for found in stores}:
            yield from _temp_problems(ledger, LocalOutputTarget(out_dir), newest_batch, now, grace, is_dead)
    for found in stores:
        yield from _temp_problems(ledger, found, None, now, grace, is_dead)


# -- leases and cancels ---------------------------------------------------------------------


def _stalled_problem(
    ledger: Ledger, item: StalledItem, at: str, is_dead: IsDead, delay_for: Callable[[int], float]
) -> Problem | None:
    """A running item whose lease expired or whose owner is gone; a queued item of a
    cancelled batch. A lease that is not expired and whose owner lives is no problem."""
    why = stall_reason(item.state, item.lease_owner, item.lease_expires_at, item.cancel_requested_at, at, is_dead)
    if why is None:
        return None
    if item.cancel_requested_at is not None:
        kind = "cancel_not_finalized"
        why = f"the batch's cancel was requested at {item.cancel_requested_at} and {why}"
    else:
        kind = "dead_worker_lease" if item.lease_owner and is_dead(item.lease_owner) else "expired_lease"
    finding = Finding(kind, item.batch_id, item.item_id, why, ratio=item.ratio)

    def fix() -> bool:
        return ledger.upkeep.rescue_stalled(item.row, item.lease_token, is_dead, delay_for) is not None

    return Problem(finding, fix)


# -- objects and friendly names ------------------------------------------------------------------


class ObjectCheck(NamedTuple):
    """Why an object is not what it must be (None: sound), its file's stamp when sound, and
    whether it had to be decoded to know."""

    problem: str | None
    stamp: ObjectStamp | None = None
    decoded: bool = False


def object_problem(item: PublishedItem, known: ObjectStamp | None = None) -> ObjectCheck:
    """Check a succeeded item's object: present, a plain file, the published size, exact
    dimensions, decodes.

    The decode, the one costly check, is skipped when the file is exactly as it was when it
    last decoded without fault (``known``): same inode, size, modification and change times.
    """
    if not os.path.lexists(item.object_path):
        return ObjectCheck("is missing")
    if not is_plain_file(item.object_path):
        return ObjectCheck("is not a plain file in the output folder (a symlink or another kind of file)")
    stamp = object_stamp(item.object_path)
    if item.output_bytes is not None and stamp.size != item.output_bytes:
        return ObjectCheck(f"is {stamp.size} bytes, {item.output_bytes} were published")
    if stamp == known:
        return ObjectCheck(None, stamp)
    geometry = output_geometry(
        item.source_width,
        item.source_height,
        parse_ratio(item.ratio),
        item.size,
        bool(item.profile["upscale"]),
    )
    problem = verify_output(Path(item.object_path), item.format, geometry.out_w, geometry.out_h)
    return ObjectCheck(problem, None if problem else stamp, decoded=True)


@dataclass
class _ObjectChecks:
    """Objects checked in one reconcile run: verdicts (an object shared by items is checked once)."""

    known: dict[str, ObjectStamp]
    verdicts: dict[str, str | None] = field(default_factory=dict)
    sound: dict[str, ObjectStamp] = field(default_factory=dict)
    decoded: int = 0
    unchanged: int = 0

    def check(self, item: PublishedItem) -> str | None:
        path = item.object_path
        if path not in self.verdicts:
            known = self.known.get(path)
            checked = object_problem(item, known)
            self.decoded += checked.decoded
            self.unchanged += checked.stamp is not None and checked.stamp == known
            self.verdicts[path] = checked.problem
            if checked.stamp is not None:
                self.sound[path] = checked.stamp
        return self.verdicts[path]


def _output_problems(ledger: Ledger, checks: _ObjectChecks) -> Iterator[Problem]:
    for item in ledger.upkeep.published_items():
        problem = checks.check(item)
        if problem is not None:
            yield _object_finding(ledger, item, problem) if not item.expired else _expired_object_finding(item, problem)
        elif item.owns_friendly_name:
            link = thumbnail_problem(item.object_path, item.friendly_path)
            if link is not None:
                yield _link_finding(ledger, item, link)
    ledger.upkeep.replace_verified_objects(checks.sound)


def _object_finding(ledger: Ledger, item: PublishedItem, problem: str) -> Problem:
    kind = "object_missing" if problem == "is missing" else "object_invalid"
    finding = Finding(
        kind, item.batch_id, item.item_id, f"the object {problem}", ratio=item.ratio, path=item.object_path
    )

    def fix() -> bool:
        detail = f"reconcile: {finding.detail}"
        return ledger.upkeep.requeue_published(item.row, item.object_path, kind, detail) is not None

    return Problem(finding, fix)


def _expired_object_finding(item: PublishedItem, problem: str) -> Problem:
    """The object of a name whose batch expired: nothing can render it again but a new submit."""
    kind = "object_missing" if problem == "is missing" else "object_invalid"
    detail = f"the object {problem}; its batch expired: submit its source again to render it"
    return Problem(Finding(kind, item.batch_id, item.item_id, detail, ratio=item.ratio, path=item.object_path))


_THUMBNAIL_FINDINGS = {
    "missing": ("friendly_link_missing", "the thumbnail is missing"),
    "wrong": ("friendly_link_wrong", "the thumbnail is not a plain file (a symlink or a folder)"),
    "modified": ("thumbnail_modified", "the thumbnail no longer holds its object's bytes (edited since?)"),
}


def _link_finding(ledger: Ledger, item: PublishedItem, problem: str) -> Problem:
    kind, detail = _THUMBNAIL_FINDINGS[problem]
    finding = Finding(kind, item.batch_id, item.item_id, detail, ratio=item.ratio, path=item.friendly_path)
    publisher = Publisher(ledger, LocalOutputTarget(item.out_dir))

    def fix() -> bool:
        return publisher.restore(item.row, item.object_path, item.friendly_path, kind, f"reconcile: {detail}")

    return Problem(finding, fix)


def _unsettled_problems(ledger: Ledger) -> Iterator[Problem]:
    """A failed item whose name holds exactly its object's bytes: thumbctl published it, and a crash
    lost the commit that would have recorded it. Queued again, its render records the name as it is."""
    for item in ledger.upkeep.unsettled_names():
        if not (is_plain_file(item.object_path) and os.path.isfile(item.friendly_path)):
            continue
        if thumbnail_problem(item.object_path, item.friendly_path) is not None:
            continue
        detail = (
            f"the item failed ({item.error_code}) but its thumbnail was published, holding its object's bytes "
            "(a crash before the commit); --repair queues it again: `thumbctl work` then records it unchanged"
        )
        finding = Finding(
            "unrecorded_thumbnail", item.batch_id, item.item_id, detail, ratio=item.ratio, path=item.friendly_path
        )

        def fix(item: UnsettledName = item, detail: str = detail) -> bool:
            return ledger.upkeep.requeue_unsettled(
                item.row, item.object_path, item.friendly_path, "unrecorded_thumbnail", f"reconcile: {detail}"
            )

        yield Problem(finding, fix)


# -- files nobody accounts for --------------------------------------------------------------------


def _orphan_problems(layout: LocalObjectStore, referenced: set[str]) -> Iterator[Problem]:
    for _key, found in object_files(layout):
        if found.path not in referenced:
            detail = (
                f"no item of a live batch and no published name references this object ({found.size} bytes); "
                "`thumbctl gc` removes it"
            )
            yield Problem(Finding("orphan_object", None, None, detail, path=found.path))


def stale_temp_reason(found: StoredFile, now: float, grace: float, is_dead: IsDead) -> str | None:
    """Why a temp file may go: its writer is gone (at once), or it is older than ``grace``."""
    writer = temp_writer(found.name)
    if writer is not None and is_dead(writer):
        return f"its writer {writer} is gone"
    age = now - found.mtime
    if age > grace:
        return f"older than the grace period ({age:.0f}s > {grace:.0f}s)" + ("" if writer else "; writer unknown")
    return None


def _temp_problems(
    ledger: Ledger,
    layout: LocalOutputTarget | LocalObjectStore,
    batch_id: str | None,
    now: float,
    grace: float,
    is_dead: IsDead,
) -> Iterator[Problem]:
    for found in temp_files(layout.root, layout.tmp_dir):
        reason = stale_temp_reason(found, now, grace, is_dead)
        if reason is None:
            continue
        finding = Finding("stale_temp_file", batch_id, None, f"a temp file: {reason}", path=found.path)

        def fix(found: StoredFile = found, detail: str = finding.detail) -> bool:
            if batch_id is None:  # a temp file of the store: no batch's log to record it in
                remove_file(layout.root, found.path)
                return True
            ledger.upkeep.record_file_removal(
                batch_id,
                "stale_temp_file",
                f"reconcile removed {found.path}: {detail}",
                lambda: remove_file(layout.root, found.path),
            )
            return True

        yield Problem(finding, fix)


# -- gc -----------------------------------------------------------------------------------------


def collect_garbage(
    ledger: Ledger,
    older_than: float,
    *,
    dry_run: bool = False,
    grace: float = DEFAULT_GRACE,
    is_dead: IsDead = owner_is_dead,
    store: LocalObjectStore | None = None,
) -> GcReport:
    """Expire terminal batches whose last event is older than ``older_than`` seconds, then
    remove what no remaining batch references. ``dry_run`` changes nothing and reports
    what would go."""
    now = ledger.clock()
    cutoff = iso(now - older_than)
    expiring = ledger.upkeep.expirable_batches(cutoff)
    expired = expiring if dry_run else [b for b in expiring if ledger.upkeep.expire_batch(b, cutoff)]
    pending = expired if dry_run else []
    errors: list[str] = []
    objects, object_bytes = _collect_objects(ledger, pending, dry_run, errors, store)
    temps, temp_bytes = _collect_temps(ledger, now, grace, is_dead, dry_run, errors, store)
    (manifests, sheets), document_bytes = _collect_batch_documents(ledger, pending, dry_run, errors)
    return GcReport(
        dry_run=dry_run,
        expired_batches=tuple(expired),
        objects_removed=objects,
        temp_files_removed=temps,
        manifests_removed=manifests,
        sheets_removed=sheets,
        bytes_reclaimed=object_bytes + temp_bytes + document_bytes,
        errors=tuple(errors),
    )


def _removing(path: str, errors: list[str], remove: Callable[[], int]) -> int:
    """Run one removal; a filesystem error is recorded (the file stays) and gc goes on."""
    try:
        return remove()
    except OSError as exc:
        errors.append(f"{path}: {exc.strerror or exc}")
        return -1


def _collect_objects(
    ledger: Ledger, pending: list[str], dry_run: bool, errors: list[str], store: LocalObjectStore | None
) -> tuple[int, int]:
    """Objects that no live batch of the ledger (``pending`` batches counted as expired) and no
    published name's record references, in its store and in output folders of the earlier layout:
    (objects, bytes). Thumbnails are never touched."""
    referenced = ledger.upkeep.referenced_object_paths(also_expiring=pending)
    objects = freed = 0
    for layout in object_stores(ledger, store):
        for key, found in object_files(layout):
            if found.path in referenced:
                continue
            if dry_run:
                objects, freed = objects + 1, freed + _object_bytes(found.path)
                continue
            try:
                outcome = ledger.upkeep.remove_if_unreferenced(
                    key, found.path, partial(remove_object, layout, found.path)
                )
            except OSError as exc:
                errors.append(f"{found.path}: {exc.strerror or exc}")
                continue
            if outcome is not None:
                objects, freed = objects + 1, freed + outcome
    return objects, freed


def _object_bytes(path: str) -> int:
    """What removing an object (with its preview) would free: its bytes count while it is their last link."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    own = info.st_size if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 else 0
    return own + preview_bytes(path)


def _collect_temps(
    ledger: Ledger,
    now: float,
    grace: float,
    is_dead: IsDead,
    dry_run: bool,
    errors: list[str],
    store: LocalObjectStore | None,
) -> tuple[int, int]:
    count = freed = 0
    outputs = [LocalOutputTarget(out_dir) for out_dir, _ in ledger.upkeep.output_folders()]
    folders: list[LocalOutputTarget | LocalObjectStore] = list(outputs)
    folders += [found for found in object_stores(ledger, store) if found.root not in {f.root for f in folders}]
    for layout in folders:
        for found in temp_files(layout.root, layout.tmp_dir):
            if stale_temp_reason(found, now, grace, is_dead) is None:
                continue
            size = (
                found.size if dry_run else _removing(found.path, errors, partial(remove_file, layout.root, found.path))
            )
            if size >= 0:
                count, freed = count + 1, freed + size
        if not dry_run and isinstance(layout, LocalOutputTarget):
            layout.remove_empty_tmp()
    return count, freed


def _collect_batch_documents(
    ledger: Ledger, pending: list[str], dry_run: bool, errors: list[str]
) -> tuple[tuple[int, int], int]:
    """Expired batches' manifests and contact sheets (at their default place in OUT):
    ((manifests, sheets), bytes)."""
    manifests = sheets = freed = 0
    for out_dir, batch_id, manifest in ledger.upkeep.expired_manifests(also_expiring=pending):
        target = LocalOutputTarget(out_dir)
        for path, is_sheet in ((manifest, False), (target.batch_sheet_path(batch_id), True)):
            name = target.name_of(path)
            size = target.document_size(name)
            if size is None:
                continue
            if not dry_run:
                size = _removing(path, errors, partial(target.remove_document, name))
            if size < 0:
                continue
            sheets, manifests = (sheets + 1, manifests) if is_sheet else (sheets, manifests + 1)
            freed += size
    return (manifests, sheets), freed
