"""The thumbnails reconcile checks: a name that is missing, holds a symlink or other bytes than
thumbctl published, an earlier version of thumbctl's, or the bytes of an item a crash left
unrecorded, with the repairs the name rules allow (see :mod:`thumbctl.upkeep.leftovers`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ..core.models import Finding, PublishedItem, UnsettledName
from ..ledger import Ledger
from ..ledger.upkeep import Publishing
from ..publishing.publisher import Publisher
from ..storage.locations import name_in
from ..storage.outputs import OutputTarget
from .leftovers import Scope, crash_leftover, holds_object, records_itself, requeued_to_record
from .problems import Problem


def thumbnail_problem(ledger: Ledger, target: OutputTarget, item: PublishedItem) -> str | None:
    """``missing``, ``wrong`` or ``modified`` (see :data:`_USER_CHANGES`), None when the thumbnail
    is what thumbctl published (see :meth:`~thumbctl.storage.outputs.OutputTarget.thumbnail_problem`)."""

    def versions() -> set[str | None]:
        return {v for path, v in ledger.views.publishes_at(item.friendly_path) if path == item.object_path}

    return target.thumbnail_problem(name_in(item.out_dir, item.friendly_path), item.object_path, versions)


_RESTORE_ON_REQUEST = (
    "; left as it is: `thumbctl reconcile --repair --restore-modified` puts thumbctl's copy back, "
    "`thumbctl release NAME` gives the name to you"
)
_USER_CHANGES = {
    "wrong": "the thumbnail's name holds a symlink or a folder, not thumbctl's file",
    "modified": "the thumbnail no longer holds its object's bytes (edited since?)",
}


def name_problems(
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


def unsettled_problems(ledger: Ledger, scope: Scope) -> Iterator[Problem]:
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
