"""The upkeep port of the ledger: what ``reconcile``, ``gc``, ``mirror``, ``release`` and the
layout migration read and change.

:class:`UpkeepPort` is the protocol they are typed against, documented there once; :class:`Upkeep`
implements it over SQL, for every backend (with :mod:`.relocation` and :mod:`.damage`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import NamedTuple, Protocol, TypeVar

from ..core.errors import LedgerUnavailable, RowDamaged
from ..core.models import ItemState, ObjectStamp, PublishedItem, PublishedName, StalledItem, UnsettledName
from .backend import Backend, record
from .damage import Damage, DamagedRows, is_location, published_item
from .namelocks import OBJECT_STORE, name_key, record_name
from .relocation import Relocation
from .sql import queue as queue_sql
from .sql import upkeep as sql
from .timefmt import has_passed, iso, stored_seconds
from .transitions import Transitions

DelayFor = Callable[[int], float]
IsDead = Callable[[str], bool]

T = TypeVar("T")


class Publishing(NamedTuple):
    """An item other than a name's owner that published, or was publishing, at the name."""

    item: UnsettledName
    state: ItemState
    #: Its batch's cancel was requested, or the batch expired: it will never record the name.
    ended: bool


class Release(NamedTuple):
    """A name handed over to the user: when, and whether it already was before this request."""

    released_at: str
    already: bool


class UpkeepPort(Protocol):
    """The upkeep port: reconcile's findings and repairs, gc's retention, mirror's and release's
    names, the layout migration, and the ledger's own facts about its store. Implemented over SQL
    by :class:`Upkeep`.

    Every repair is one write transaction that first checks the row is still as reconcile saw it
    (state, lease token, object and friendly path), so a worker that renewed its lease or finished
    meanwhile is never disturbed, and every change appends its event with the reason. Batches that
    ``gc`` expired are out of scope for every check, except the names their items still own: a
    published name's record outlives its batch."""

    def stalled_candidates(self) -> list[StalledItem]:
        """Every ``running`` item, and ``queued`` items of batches whose cancel was requested.

        Two queries, so neither walks the queued items of batches without a cancel request (the
        second goes from the flagged batches to their items: ``CROSS JOIN`` keeps that order)."""

    def published_items(self) -> list[PublishedItem]:
        """Succeeded items of batches that have not expired, and of expired ones that still own
        their name's record, with the facts their object is checked against."""

    def unsettled_names(self) -> list[UnsettledName]:
        """Failed items of live batches (not cancelled) whose friendly name no success and no recorded name claims."""

    def verified_objects(self) -> dict[str, ObjectStamp]:
        """The objects reconcile last found sound, with the state their files were in then."""

    def replace_verified_objects(self, verified: dict[str, ObjectStamp]) -> bool:
        """Remember exactly these objects as sound (forgetting every other). It is only a
        cache: False, and nothing changed, when the ledger cannot be written (read-only, busy)."""

    def referenced_object_paths(self, *, also_expiring: Sequence[str] = ()) -> set[str]:
        """Object paths named by any item (any state) of a batch that has not expired (and is not in
        ``also_expiring``), or by a published name's record."""

    def output_folders(self) -> list[tuple[str, str]]:
        """Every output folder the ledger knows, with the id of its newest batch (a damaged one, which
        is no location, left out: reconcile reports it)."""

    def rescue_stalled(self, row: int, token: str | None, is_dead: IsDead, delay_for: DelayFor) -> str | None:
        """Settle one stalled item if it still is as reconcile saw it; returns its new state.

        A running item whose lease (``token``) is unchanged and expired, or whose owner is
        gone, goes back to ``queued`` (the attempt counts) or ``failed`` when the budget is
        spent; in a batch whose cancel was requested it ends ``cancelled``, as does a queued
        item there. Anything else (a live lease, a renewed one, an item that moved on) is
        left alone: None. Whether its owner is gone is asked before the write transaction (the
        owner of the lease ``token`` names, checked again inside).
        """

    def requeue_published(self, row: int, object_path: str, code: str, detail: str) -> str | None:
        """A succeeded item whose object is missing or damaged goes back to ``queued`` with a
        fresh attempt budget, to be rendered again (``cancelled`` instead when its batch's cancel
        was requested: nothing more is rendered for it). Returns the new state, or None when
        the item changed meanwhile."""

    def requeue_unsettled(self, row: int, object_path: str, friendly_path: str, code: str, detail: str) -> bool:
        """A failed item whose thumbnail was published before a crash lost the commit goes back to
        ``queued`` with a fresh attempt budget, if it is still failed with these paths and its batch
        was not cancelled: its render finds its own bytes at the name and records it, unchanged."""

    def relink_published(
        self, row: int, object_path: str, friendly_path: str, code: str, detail: str, link: Callable[[], str | None]
    ) -> bool:
        """Run ``link`` (point the friendly name at the object; it returns the name's new version) if
        the item is still succeeded with these paths and still owns the name (it holds the name's
        record, whether or not its batch expired since), record the version (with the item and in the
        name's record) and log a ``relinked`` event; all in one write transaction, as publish does."""

    def record_file_removal(self, batch_id: str, code: str, detail: str, remove: Callable[[], object]) -> None:
        """Run ``remove`` (delete a file of the batch's output folder), then log a batch-level
        ``removed`` event with the reason (nothing is logged when it raises)."""

    def expirable_batches(self, cutoff: str, *, batch_id: str | None = None) -> list[str]:
        """Batches not yet expired whose every item is terminal and whose last item transition
        is before ``cutoff`` (only ``batch_id``, when given). Maintenance events (relinks, temp
        file removals) do not count: they do not make a batch's outputs newer."""

    def expire_batch(self, batch_id: str, cutoff: str) -> bool:
        """Mark a batch expired (durably, with an ``expired`` event) if it still qualifies.

        Its idempotency key is released (suffixed ``#expired:<batch_id>``), so the same
        request submitted again makes a new batch instead of replaying an expired one. Its
        published names keep their records (and their files).
        """

    def expired_manifests(self, *, also_expiring: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """(output folder, batch id, manifest path) of every expired batch (and those in ``also_expiring``)."""

    def remove_if_unreferenced(self, key: str, object_path: str, remove: Callable[[], T]) -> T | None:
        """Run ``remove`` (delete the object) only if no item of a live batch references it (checked
        by derivative key) and no published name's record does, inside the same write transaction;
        returns what it returned, or None when the object is referenced."""

    def names_from(self, out_dir: str, source_root: str) -> list[PublishedName]:
        """The records of the names published into ``out_dir`` from the source folder ``source_root``."""

    def remove_name(
        self, name: PublishedName, batch_id: str, code: str, detail: str, remove: Callable[[], bool]
    ) -> bool:
        """Under the name's lock, in one write transaction: while the name's record is still ``name``'s
        (the same item, the same version), run ``remove`` (take the file away while it holds our
        version); when it did, forget the record and log a batch-level ``removed`` event on
        ``batch_id`` with the reason. Returns whether the name was removed."""

    def publishers_at(self, friendly_path: str, owner_row: int) -> list[Publishing]:
        """The items other than ``owner_row`` that published, or were publishing, at ``friendly_path``,
        newest first: a crash before a publish's commit leaves one of their objects' bytes there."""

    def release_name(self, friendly_path: str, *, dry_run: bool = False) -> Release | None:
        """Hand the published name ``friendly_path`` over to the user, under the name's lock: its record
        says when, and from then on no reconcile, repair, mirror or submit touches the file there (a
        submit's item fails ``name_taken``). A batch-level ``released`` event is logged on the batch
        that published it last. None when thumbctl never published there; ``dry_run`` changes nothing."""

    def damaged_rows(self) -> Iterator[Damage]:
        """Every stored value of :data:`~.damage.PARSED_COLUMNS` that does not parse: the batches' documents
        (of batches that have not expired), then every item, in order."""

    def batch_document_fault(self) -> RowDamaged | None:
        """The error naming the first batch document (of a batch that has not expired) that does not
        parse, if any: what a worker that stopped on ``ledger_corrupt`` most likely met in its claim."""

    def fail_damaged_item(self, row: int) -> str | None:
        """Settle an item whose stored result still does not parse: ``failed`` with ``ledger_corrupt``,
        its result cleared (what it held is not known any more), logged with what was damaged, so
        ``retry`` renders it again. Returns the new state, or None when the row is gone or its result
        parses (a damaged ratio is not settled: rendering it again needs the ratio)."""

    def object_paths_under(self, folder: str) -> set[str]:
        """Every object path recorded below ``folder`` (e.g. ``OUT/objects``), by any item of any batch."""

    def names_in(self, out_dir: str) -> list[str]:
        """Every thumbnail name recorded by an item of a batch into ``out_dir`` (expired batches too)."""

    def live_batches_in(self, out_dir: str) -> list[str]:
        """Ids of the batches into ``out_dir`` that have not expired, oldest first."""

    def relocate_objects(self, folder: str, moved: dict[str, str]) -> int:
        """In one transaction, point every item whose object (or whose result's ``preview``) is a key
        of ``moved`` at its value, and forget the object checks of the old paths. ``folder`` is the
        old objects folder the keys lie in. Returns the number of items changed."""

    def ledger_id(self) -> str:
        """The ledger's stable id, made once by its schema migration (a store records the one ledger it
        belongs to)."""

    def recorded_store(self) -> str | None:
        """The store this ledger last used, or None before it used one."""

    def record_store(self, path: str) -> None:
        """Remember ``path`` as the store this ledger uses."""

    def layout_settled(self) -> bool:
        """Whether the ledger recorded that no output folder it knows is in the old layout
        (``OUT/objects``): see :mod:`thumbctl.upkeep.migrate`."""

    def record_layout_settled(self) -> None:
        """Record that no output folder the ledger knows is in the old layout (once: it stays true)."""


class Maintenance:
    """Findings, repairs and retention of one ledger."""

    def __init__(self, db: Backend, log: Transitions) -> None:
        self.db = db
        self.log = log

    # -- reading --------------------------------------------------------------------------

    def stalled_candidates(self) -> list[StalledItem]:
        rows = self.db.execute(sql.STALLED_CANDIDATES).fetchall()
        return [record(StalledItem, r, row=r["id"], state=ItemState(r["state"])) for r in rows]

    def published_items(self) -> list[PublishedItem]:
        rows = self.db.execute(sql.PUBLISHED_ITEMS).fetchall()
        return [item for item in map(published_item, rows) if item is not None]

    def unsettled_names(self) -> list[UnsettledName]:
        rows = self.db.execute(sql.UNSETTLED_NAMES).fetchall()
        return [record(UnsettledName, r, row=r["id"]) for r in rows]

    def verified_objects(self) -> dict[str, ObjectStamp]:
        rows = self.db.execute(sql.VERIFIED_OBJECTS).fetchall()
        return {r["object_path"]: record(ObjectStamp, r) for r in rows}

    def replace_verified_objects(self, verified: dict[str, ObjectStamp]) -> bool:
        try:
            with self.db.write():
                self.db.execute(sql.FORGET_VERIFIED_OBJECTS)
                self.db.executemany(
                    sql.REMEMBER_VERIFIED_OBJECT,
                    [{"object_path": path, **asdict(stamp)} for path, stamp in verified.items()],
                )
        except LedgerUnavailable:
            return False
        return True

    def referenced_object_paths(self, *, also_expiring: Sequence[str] = ()) -> set[str]:
        rows = self.db.execute(sql.REFERENCED_OBJECTS, list(also_expiring), excluding=len(also_expiring))
        return {r["object_path"] for r in rows}

    def output_folders(self) -> list[tuple[str, str]]:
        rows = self.db.execute(sql.OUTPUT_FOLDERS).fetchall()
        return [(r["out_dir"], r["batch_id"]) for r in rows if is_location(r["out_dir"])]

    # -- repairs ----------------------------------------------------------------------------

    def rescue_stalled(self, row: int, token: str | None, is_dead: IsDead, delay_for: DelayFor) -> str | None:
        seen = self.db.execute(sql.LEASE_OF_ITEM, (row,)).fetchone()
        if seen is None or seen["lease_token"] != token:
            return None
        gone = seen["lease_owner"] is not None and is_dead(seen["lease_owner"])
        with self.db.write() as now:
            at = iso(now)
            found = self.db.execute(sql.STALLED_ITEM, (row,)).fetchone()
            if found is None or found["lease_token"] != token:
                return None
            state, owner, expires = found["state"], found["lease_owner"], found["lease_expires_at"]
            cancel_at = found["cancel_requested_at"]
            why = stall_reason(state, owner, expires, cancel_at, at, lambda name: gone and name == seen["lease_owner"])
            if why is None:
                return None
            if cancel_at is not None:
                detail = f"reconcile finalized the cancel requested at {cancel_at}: {why}"
                self.log.move(at, [row], state, ItemState.CANCELLED, detail=detail, worker=owner)
                outcome = ItemState.CANCELLED
            else:
                outcome = self.log.settle(now, row, "worker_crashed", f"reconcile: {why}", None, owner, delay_for)
            self.log.faults.hit("after_rescue")
            return outcome

    def requeue_published(self, row: int, object_path: str, code: str, detail: str) -> str | None:
        with self.db.write() as now:
            at = iso(now)
            found = self.db.execute(sql.PUBLISHED_ITEM, (row,)).fetchone()
            if found is None or found["state"] != ItemState.SUCCEEDED or found["object_path"] != object_path:
                return None
            target = ItemState.QUEUED if found["cancel_requested_at"] is None else ItemState.CANCELLED
            self.log.move(at, [row], ItemState.SUCCEEDED, target, error_code=code, detail=detail)
            if target == ItemState.QUEUED:  # rendered afresh: not a reuse any more, and the old result is void
                self.db.execute(sql.RENDER_AGAIN, (row,), ids=1)
            return target

    def requeue_unsettled(self, row: int, object_path: str, friendly_path: str, code: str, detail: str) -> bool:
        with self.db.write() as now:
            found = self.db.execute(sql.UNSETTLED_NAME, (row,)).fetchone()
            unchanged = found is not None and (found["state"], found["object_path"], found["friendly_path"]) == (
                ItemState.FAILED,
                object_path,
                friendly_path,
            )
            if not unchanged or found["cancel_requested_at"] is not None:
                return False
            moved = self.log.move(iso(now), [row], ItemState.FAILED, ItemState.QUEUED, error_code=code, detail=detail)
            self.log.set_attempts(moved, queue_sql.FRESH_ATTEMPTS)
            return bool(moved)

    def relink_published(
        self, row: int, object_path: str, friendly_path: str, code: str, detail: str, link: Callable[[], str | None]
    ) -> bool:
        with self.db.write() as now:
            found = self.db.execute(sql.RELINKABLE, (row, object_path, friendly_path)).fetchone()
            if found is None:
                return False
            version = link()
            self.db.execute(queue_sql.SET_NAME_VERSION, (version, row))
            record_name(self.db, row, version, iso(now))
            self.log.event(
                iso(now),
                found["batch_id"],
                row,
                ItemState.SUCCEEDED,
                found["attempt"],
                "relinked",
                error_code=code,
                detail=detail,
            )
            return True

    def record_file_removal(self, batch_id: str, code: str, detail: str, remove: Callable[[], object]) -> None:
        remove()
        with self.db.write() as now:
            self.log.event(iso(now), batch_id, None, None, None, "removed", error_code=code, detail=detail)

    # -- retention ----------------------------------------------------------------------------

    def expirable_batches(self, cutoff: str, *, batch_id: str | None = None) -> list[str]:
        only = [batch_id] if batch_id is not None else []
        rows = self.db.execute(sql.EXPIRABLE_BATCHES, [*only, cutoff], only=len(only)).fetchall()
        return [r["batch_id"] for r in rows]

    def expire_batch(self, batch_id: str, cutoff: str) -> bool:
        with self.db.write(durable=True) as now:
            if not self.expirable_batches(cutoff, batch_id=batch_id):
                return False
            at = iso(now)
            key = self.db.scalar(sql.IDEMPOTENCY_KEY, (batch_id,))
            self.db.execute(sql.EXPIRE_BATCH, (at, f"{key}#expired:{batch_id}", batch_id))
            detail = f"retention: finished before {cutoff}; idempotency key {key!r} released"
            self.log.event(at, batch_id, None, None, None, "expired", detail=detail)
            return True

    def expired_manifests(self, *, also_expiring: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        rows = self.db.execute(sql.EXPIRED_MANIFESTS, list(also_expiring), also=len(also_expiring)).fetchall()
        return [(r["out_dir"], r["batch_id"], r["manifest_path"]) for r in rows]

    def remove_if_unreferenced(self, key: str, object_path: str, remove: Callable[[], T]) -> T | None:
        with self.db.write():
            self.db.serialize_on(OBJECT_STORE)  # a submit reusing the object waits, then finds it gone
            referenced = self.db.execute(sql.OBJECT_REFERENCED, (key, object_path, object_path)).fetchone()
            return None if referenced is not None else remove()

    # -- published names ----------------------------------------------------------------------------

    def names_from(self, out_dir: str, source_root: str) -> list[PublishedName]:
        rows = self.db.execute(sql.NAMES_FROM, (out_dir, source_root)).fetchall()
        return [record(PublishedName, r) for r in rows]

    def remove_name(
        self, name: PublishedName, batch_id: str, code: str, detail: str, remove: Callable[[], bool]
    ) -> bool:
        with self.db.write() as now:
            self.db.serialize_on(name_key(name.friendly_path))
            found = self.db.execute(sql.NAME_OWNER, (name.friendly_path,)).fetchone()
            if found is None or (found["item_row"], found["name_version"]) != (name.item_row, name.name_version):
                return False
            if not remove():
                return False
            self.db.execute(sql.FORGET_NAME, (name.friendly_path,))
            self.log.event(iso(now), batch_id, None, None, None, "removed", error_code=code, detail=detail)
            return True

    # -- names a crash may have left, and names handed over to the user -----------------------------

    def publishers_at(self, friendly_path: str, owner_row: int) -> list[Publishing]:
        rows = self.db.execute(sql.PUBLISHERS_AT, (friendly_path, owner_row)).fetchall()
        return [
            Publishing(
                record(UnsettledName, r, row=r["id"]),
                ItemState(r["state"]),
                r["cancel_requested_at"] is not None or r["expired_at"] is not None,
            )
            for r in rows
        ]

    def release_name(self, friendly_path: str, *, dry_run: bool = False) -> Release | None:
        if dry_run:
            released = self.db.scalar(sql.NAME_RELEASE, (friendly_path,))
            if released is not None:
                return Release(released, True)
            known = self.db.execute(sql.NAME_OWNER, (friendly_path,)).fetchone() is not None
            newest = known or self.db.execute(sql.NEWEST_SUCCESS_AT, (friendly_path,)).fetchone() is not None
            return Release(iso(self.db.clock()), False) if newest else None
        with self.db.write() as now:
            self.db.serialize_on(name_key(friendly_path))
            at = iso(now)
            released = self.db.scalar(sql.NAME_RELEASE, (friendly_path,))
            if released is not None:
                return Release(released, True)
            if self.db.execute(sql.NAME_OWNER, (friendly_path,)).fetchone() is None:
                newest = self.db.execute(sql.NEWEST_SUCCESS_AT, (friendly_path,)).fetchone()
                if newest is None:
                    return None
                record_name(self.db, newest["id"], newest["name_version"], at)
            self.db.execute(sql.RELEASE_NAME, (at, friendly_path))
            batch_id = self.db.scalar(sql.NAME_BATCH, (friendly_path,))
            self.log.event(at, batch_id, None, None, None, "released", detail=f"{friendly_path} released to the user")
            return Release(at, False)


class Upkeep(Relocation, DamagedRows, Maintenance):
    """The upkeep port over SQL (:class:`UpkeepPort`), on any backend."""

    def ledger_id(self) -> str:
        return str(self.db.scalar(sql.META, ("ledger_id",)))

    def recorded_store(self) -> str | None:
        return self.db.scalar(sql.META, ("store",))

    def record_store(self, path: str) -> None:
        if self.recorded_store() != path:
            with self.db.write():
                self.db.execute(sql.SET_META, ("store", path))

    def layout_settled(self) -> bool:
        return self.db.scalar(sql.META, ("layout",)) == "store"

    def record_layout_settled(self) -> None:
        with self.db.write():
            self.db.execute(sql.SET_META, ("layout", "store"))


def stall_reason(
    state: ItemState, owner: str | None, expires: str | None, cancel_at: str | None, at: str, is_dead: IsDead
) -> str | None:
    """Why an item is stalled: nobody will ever finish it as it stands. None when it is live."""
    if state == ItemState.QUEUED:
        return "no claim remains" if cancel_at is not None else None
    if state != ItemState.RUNNING:
        return None
    if owner is not None and is_dead(owner):
        return f"its worker {owner} is gone"
    if has_passed(expires, at):
        return (
            f"its lease expired at {expires}"
            if stored_seconds(expires) is not None
            else f"its lease expiry {expires!r} is no time"
        )
    return None
