"""Reconcile (findings and safe repairs): what an operator runs from cron.

``reconcile`` compares the ledger with the stores and output targets it recorded (local folders
or ``s3://`` prefixes, reached through their interfaces): stalled leases, cancels whose claims
have stopped, every ``succeeded`` item's object (present, the published size and checksum,
decodes to the exact dimensions) and thumbnail, orphan objects (listed by prefix) and, in local
folders, stale temp files. Each problem is a :class:`~thumbctl.core.models.Finding` of a stable kind;
with ``repair`` the safe repairs are applied through conditional ledger transactions (a live
lease is never touched) and each is logged with its reason. Orphan objects are only reported:
``gc`` (:mod:`thumbctl.upkeep.gc`) removes them.

An object in a local folder is decoded again only when its file changed since it last decoded
without fault; one in a bucket is checked by a HEAD (its size and the checksum kept with it). With
``deep`` every object is read (bounded) and decoded wherever it lives.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

from ..config.options import DEFAULT_GRACE
from ..config.s3location import S3Options
from ..core.models import Finding, ObjectStamp, PublishedItem, ReconcileReport, StalledItem, UnsettledName
from ..core.proc import owner_is_dead
from ..core.profile import parse_ratio
from ..core.retries import Backoff
from ..imaging import fit_geometry, verify_output
from ..ledger import Ledger, iso
from ..ledger.damage import BATCH_WAY_OUT, ITEM_TIMES, Damage
from ..ledger.upkeep import Publishing, stall_reason
from ..publishing.publisher import Publisher
from ..storage.fsafe import StoredFile
from ..storage.locations import is_s3, name_in
from ..storage.objects import ObjectStore, ObjectTooLarge
from ..storage.outputs import OutputTarget
from .inventory import listed_objects, object_size, object_stores
from .leftovers import (
    COMPARE_READ_LIMIT,
    IsDead,
    Scope,
    crash_leftover,
    expired_writers,
    holds_object,
    records_itself,
    requeued_to_record,
    stale_temp_reason,
)

Fix = Callable[[], bool]

#: The most a deep check reads of one object: far above any thumbnail, so a runaway object is
#: reported, never loaded whole.
DEEP_READ_LIMIT = COMPARE_READ_LIMIT


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
    store: str | None = None,
    options: S3Options | None = None,
) -> list[Finding]:
    """Every problem reconcile can see now, changing nothing but the cache of sound objects."""
    scope = Scope(store, options)
    checks = _ObjectChecks(scope, ledger.upkeep.verified_objects())
    return [p.finding for p in _problems(ledger, grace, is_dead, Backoff().delay_for, checks, scope)]


def reconcile(
    ledger: Ledger,
    *,
    repair: bool = False,
    deep: bool = False,
    grace: float = DEFAULT_GRACE,
    is_dead: IsDead = owner_is_dead,
    delay_for: Callable[[int], float] | None = None,
    store: str | None = None,
    options: S3Options | None = None,
    restore_modified: bool = False,
) -> ReconcileReport:
    """Find problems and, with ``repair``, apply the safe repairs (each audited).

    ``deep`` reads and decodes every object, also those a cheaper check finds sound (a local file
    unchanged since it last decoded, a bucket's object of the right size and checksum): it finds
    damage no write made, e.g. a failing disk. ``store`` is the ledger's store (default: the one it
    recorded); its orphans and temp files are checked too. A name a user changed (other bytes, a
    symlink) is only reported, unless ``restore_modified`` asks for it back.
    """
    scope = Scope(store, options, restore_modified)
    checks = _ObjectChecks(scope, {} if deep else ledger.upkeep.verified_objects(), deep=deep)
    problems = list(_problems(ledger, grace, is_dead, delay_for or Backoff().delay_for, checks, scope))
    findings = tuple(_repaired(p) for p in problems) if repair else tuple(p.finding for p in problems)
    if repair:
        for out_dir, _ in ledger.upkeep.output_folders():  # OUT/.tmp exists only while files are being written
            if not is_s3(out_dir):
                scope.target_at(out_dir).remove_empty_tmp()
    return ReconcileReport(findings, len(checks.verdicts), checks.decoded, checks.unchanged)


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
    scope: Scope,
) -> Iterator[Problem]:
    now = ledger.clock()
    yield from _damage_problems(ledger)
    for item in ledger.upkeep.stalled_candidates():
        problem = _stalled_problem(ledger, item, iso(now), is_dead, delay_for)
        if problem is not None:
            yield problem
    yield from _output_problems(ledger, checks)
    yield from _unsettled_problems(ledger, scope)
    referenced = ledger.upkeep.referenced_object_paths()
    stores = object_stores(ledger, scope)
    for location, found in stores:
        yield from _orphan_problems(location, found, referenced)
    store_roots = {found.root for _, found in stores}
    for out_dir, newest_batch in ledger.upkeep.output_folders():
        if not is_s3(out_dir) and out_dir not in store_roots:  # a bucket has no temp files
            yield from _temp_problems(ledger, scope.target_at(out_dir), newest_batch, now, grace, is_dead)
    for _, found in stores:
        yield from _temp_problems(ledger, found, None, now, grace, is_dead)


# -- damaged rows ---------------------------------------------------------------------------


def _damage_problems(ledger: Ledger) -> Iterator[Problem]:
    """A stored value that does not parse (``damaged_row``): the rest of the ledger is checked as
    usual. An item's damaged result is repaired by failing the item ``ledger_corrupt`` (``retry``
    renders it again); a damaged ratio or batch document is reported only."""
    for damage in ledger.upkeep.damaged_rows():
        finding = Finding("damaged_row", damage.batch_id, damage.item_id, _damage_detail(damage))
        if damage.table == "items" and damage.column == "result":
            yield Problem(finding, partial(_fail_damaged_item, ledger, int(damage.row)))
        else:
            yield Problem(finding)


def _damage_detail(damage: Damage) -> str:
    if damage.table == "items" and damage.column == "result":
        return f"{damage.describe()}; --repair records the item failed (ledger_corrupt): `thumbctl retry` renders it"
    if damage.table == "items" and damage.column in ITEM_TIMES:
        return f"{damage.describe()}; it counts as passed: `thumbctl work` takes the item up again"
    if damage.table == "items":
        return f"{damage.describe()}; the item cannot be rendered again: restore a backup of the ledger"
    return f"{damage.describe()}; {BATCH_WAY_OUT}"


def _fail_damaged_item(ledger: Ledger, row: int) -> bool:
    return ledger.upkeep.fail_damaged_item(row) is not None


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
    """Why an object is not what it must be (None: sound), its file's stamp when sound (a local
    file), and whether it had to be decoded to know."""

    problem: str | None
    stamp: ObjectStamp | None = None
    decoded: bool = False


def _expected_size(item: PublishedItem) -> tuple[int, int]:
    geometry = fit_geometry(
        item.source_width,
        item.source_height,
        parse_ratio(item.ratio),
        item.size,
        bool(item.profile["upscale"]),
        item.fit,
    )
    return geometry.out_w, geometry.out_h


def object_problem(
    store: ObjectStore, name: str, item: PublishedItem, known: ObjectStamp | None, *, deep: bool
) -> ObjectCheck:
    """Check a succeeded item's object through its store's interface: present, a plain object, the
    published size, then by what the store knows without reading it. A local file is decoded
    again only when it changed since it last decoded without fault (``known``: same inode, size,
    modification and change times); a bucket's object by the checksum kept with it equal to the
    published one and, with ``deep``, by reading it (bounded) and decoding it."""
    peek = store.peek(name)
    if peek is None:
        return ObjectCheck("is missing")
    if not peek.plain:
        return ObjectCheck("is not a plain file in the output folder (a symlink or another kind of file)")
    if item.output_bytes is not None and peek.size != item.output_bytes:
        return ObjectCheck(f"is {peek.size} bytes, {item.output_bytes} were published")
    if peek.stamp is not None:
        if peek.stamp == known:
            return ObjectCheck(None, peek.stamp)
        width, height = _expected_size(item)
        problem = store.verify(name, lambda stream: verify_output(stream, item.format, width, height))
        return ObjectCheck(problem, None if problem else peek.stamp, decoded=True)
    if peek.checksum is None:
        return ObjectCheck("has no checksum kept with it (thumbctl did not write it)")
    if item.output_sha256 is not None and peek.checksum != item.output_sha256:
        return ObjectCheck("holds other bytes than were published (its checksum differs)")
    if not deep:
        return ObjectCheck(None)
    try:
        data = store.read(name, DEEP_READ_LIMIT)
    except FileNotFoundError:
        return ObjectCheck("is missing")
    except ObjectTooLarge:
        return ObjectCheck(f"holds over {DEEP_READ_LIMIT} bytes")
    if hashlib.sha256(data).hexdigest() != peek.checksum:
        return ObjectCheck("holds bytes that no longer match the checksum kept with it (damaged)", decoded=True)
    width, height = _expected_size(item)
    return ObjectCheck(verify_output(io.BytesIO(data), item.format, width, height), decoded=True)


@dataclass
class _ObjectChecks:
    """Objects checked in one reconcile run: verdicts (an object shared by items is checked once)."""

    scope: Scope
    known: dict[str, ObjectStamp]
    deep: bool = False
    verdicts: dict[str, str | None] = field(default_factory=dict)
    sound: dict[str, ObjectStamp] = field(default_factory=dict)
    decoded: int = 0
    unchanged: int = 0

    def check(self, item: PublishedItem) -> str | None:
        path = item.object_path
        if path not in self.verdicts:
            known = self.known.get(path)
            checked = self._checked(item, known)
            self.decoded += checked.decoded
            self.unchanged += checked.stamp is not None and checked.stamp == known
            self.verdicts[path] = checked.problem
            if checked.stamp is not None:
                self.sound[path] = checked.stamp
        return self.verdicts[path]

    def _checked(self, item: PublishedItem, known: ObjectStamp | None) -> ObjectCheck:
        store, name = self.scope.object_of(item.object_path)
        return object_problem(store, name, item, known, deep=self.deep)


def _output_problems(ledger: Ledger, checks: _ObjectChecks) -> Iterator[Problem]:
    for item in ledger.upkeep.published_items():
        problem = checks.check(item)
        if problem is not None:
            yield _object_finding(ledger, item, problem) if not item.expired else _expired_object_finding(item, problem)
        elif item.owns_friendly_name:
            target = checks.scope.target_at(item.out_dir)
            link = _thumbnail_problem(ledger, target, item)
            if link is not None:
                yield from _name_problems(ledger, target, checks.scope, item, link)
    ledger.upkeep.replace_verified_objects(checks.sound)


def _thumbnail_problem(ledger: Ledger, target: OutputTarget, item: PublishedItem) -> str | None:
    """``missing``, ``wrong`` or ``modified`` (see :data:`_USER_CHANGES`), None when the thumbnail
    is what thumbctl published (see :meth:`~thumbctl.storage.outputs.OutputTarget.thumbnail_problem`)."""

    def versions() -> set[str | None]:
        return {v for path, v in ledger.views.publishes_at(item.friendly_path) if path == item.object_path}

    return target.thumbnail_problem(name_in(item.out_dir, item.friendly_path), item.object_path, versions)


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


_RESTORE_ON_REQUEST = (
    "; left as it is: `thumbctl reconcile --repair --restore-modified` puts thumbctl's copy back, "
    "`thumbctl release NAME` gives the name to you"
)
_USER_CHANGES = {
    "wrong": "the thumbnail's name holds a symlink or a folder, not thumbctl's file",
    "modified": "the thumbnail no longer holds its object's bytes (edited since?)",
}


def _name_problems(
    ledger: Ledger, target: OutputTarget, scope: Scope, item: PublishedItem, problem: str
) -> Iterator[Problem]:
    """The finding about a thumbnail that is not what thumbctl published (see :mod:`thumbctl.upkeep.leftovers`
    for the rules): a missing one is restored; the bytes of another item that was publishing there
    are that item's to record; an earlier version of thumbctl's is restored; anything else is the
    user's, reported and left unless ``--restore-modified`` asks for it back."""
    at = {"ratio": item.ratio, "path": item.friendly_path}
    if problem == "missing":
        finding = Finding("friendly_link_missing", item.batch_id, item.item_id, "the thumbnail is missing", **at)
        yield _restore(ledger, target, scope, item, finding, replace=False)
        return
    leftover = (
        crash_leftover(ledger, scope, item.row, item.out_dir, item.friendly_path) if problem == "modified" else None
    )
    if leftover is None or _put_back(leftover, item):
        finding = Finding("thumbnail_modified", item.batch_id, item.item_id, _USER_CHANGES[problem], **at)
        if scope.restore_modified:
            yield _restore(ledger, target, scope, item, finding, replace=True)
        else:
            yield Problem(replace(finding, detail=finding.detail + _RESTORE_ON_REQUEST))
    elif requeued_to_record(leftover):
        yield _unrecorded_problem(ledger, leftover.item)
    elif not records_itself(leftover):
        detail = (
            f"the thumbnail holds an earlier version thumbctl published there ({leftover.item.batch_id}, "
            f"{leftover.state}); --repair puts the recorded one back"
        )
        finding = Finding("thumbnail_outdated", item.batch_id, item.item_id, detail, **at)
        yield _restore(ledger, target, scope, item, finding, replace=True)


def _put_back(leftover: Publishing, item: PublishedItem) -> bool:
    """Whether the name holds the owner's own object under a version thumbctl did not record, and the
    other item with those bytes finished publishing: a copy put back there (a user's upload of the same
    bytes), which restoring would adopt as thumbctl's. An item still publishing records its own bytes."""
    return (
        leftover.item.object_path == item.object_path
        and not records_itself(leftover)
        and not requeued_to_record(leftover)
    )


def _restore(
    ledger: Ledger, target: OutputTarget, scope: Scope, item: PublishedItem, finding: Finding, *, replace: bool
) -> Problem:
    """The finding, with the repair that puts a copy of the item's object at its name (created only
    while free, unless ``replace``), recording the version with a ``relinked`` event."""
    detail = f"reconcile: {finding.detail}"
    publisher = Publisher(ledger, target, out=item.out_dir, options=scope.options)

    def fix() -> bool:
        return publisher.restore(item.row, item.object_path, item.friendly_path, finding.kind, detail, replace=replace)

    return Problem(finding, fix)


def _unsettled_problems(ledger: Ledger, scope: Scope) -> Iterator[Problem]:
    """A failed item whose name holds exactly its object's bytes: thumbctl published it, and a crash
    lost the commit that would have recorded it. Queued again, its render records the name as it is."""
    for item in ledger.upkeep.unsettled_names():
        if holds_object(scope, item.out_dir, item.object_path, item.friendly_path):
            yield _unrecorded_problem(ledger, item)


def _unrecorded_problem(ledger: Ledger, item: UnsettledName) -> Problem:
    detail = (
        f"the item failed ({item.error_code}) but its thumbnail was published, holding its object's bytes "
        "(a crash before the commit); --repair queues it again: `thumbctl work` then records it unchanged"
    )
    finding = Finding(
        "unrecorded_thumbnail", item.batch_id, item.item_id, detail, ratio=item.ratio, path=item.friendly_path
    )

    def fix() -> bool:
        return ledger.upkeep.requeue_unsettled(
            item.row, item.object_path, item.friendly_path, "unrecorded_thumbnail", f"reconcile: {detail}"
        )

    return Problem(finding, fix)


# -- files nobody accounts for --------------------------------------------------------------------


def _orphan_problems(location: str, store: ObjectStore, referenced: set[str]) -> Iterator[Problem]:
    for name, path, size in listed_objects(location, store):
        if path not in referenced:
            detail = (
                f"no item of a live batch and no published name references this object "
                f"({object_size(store, name, size)} bytes); `thumbctl gc` removes it"
            )
            yield Problem(Finding("orphan_object", None, None, detail, path=path))


def _temp_problems(
    ledger: Ledger,
    place: OutputTarget | ObjectStore,
    batch_id: str | None,
    now: float,
    grace: float,
    is_dead: IsDead,
) -> Iterator[Problem]:
    expired = expired_writers(ledger)
    for found in place.temp_files():
        reason = stale_temp_reason(found, now, grace, is_dead, expired)
        if reason is None:
            continue
        finding = Finding("stale_temp_file", batch_id, None, f"a temp file: {reason}", path=found.path)

        def fix(found: StoredFile = found, detail: str = finding.detail) -> bool:
            if batch_id is None:  # a temp file of the store: no batch's log to record it in
                place.remove_temp(found.path)
                return True
            ledger.upkeep.record_file_removal(
                batch_id,
                "stale_temp_file",
                f"reconcile removed {found.path}: {detail}",
                lambda: place.remove_temp(found.path),
            )
            return True

        yield Problem(finding, fix)
