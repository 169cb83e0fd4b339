"""The ledger: the one owner of the database and every SQL statement.

The rest of thumbctl talks to :class:`Ledger` through a narrow interface of whole operations
(accept a batch, claim, publish, request a cancel, read a view). Behind it, the same SQL runs on
either backend (:mod:`.backend`): a SQLite file (:mod:`.sqlite`) or a PostgreSQL server
(:mod:`.postgres`).

Rules kept here:

* Acceptance, cancellation and retry commit durably; every write is one transaction of its backend.
* A busy ledger is waited out by one policy (:class:`~thumbctl.retrypolicy.BusyPolicy`), and a
  connection lost to a server restart is reopened and the operation run again, within its bound;
  database errors about the ledger become stable thumbctl errors in the backends.
* Every state change is a conditional move on the current state (:mod:`.transitions`) that
  appends its event in the same transaction; events are numbered in commit order.
* Counts are always derived from item rows.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import astuple, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..admission import WORKER_SEEN_WINDOW, QueueSnapshot, check_admission
from ..errors import IdempotencyConflict, LedgerConnectionLost, LedgerContention, LedgerFault, LedgerUnavailable
from ..models import BatchView, CachedSource, EventView, ItemState, ItemView, NewBatch, NewItem
from ..retrypolicy import BusyPolicy
from ..settings import Limits
from .backend import Backend, Clock, is_server_url, record
from .maintenance import OBJECT_STORE, Maintenance
from .observe import Observation
from .relocation import Relocation
from .states import QUEUED, RUNNING, runnable
from .timefmt import iso, parse_iso
from .transitions import Transitions
from .views import Views
from .work import WorkQueue

if TYPE_CHECKING:
    from ..models import Activity, ObjectStamp, PublishedItem, StalledItem
    from .follow import Follower
    from .maintenance import DelayFor, IsDead
    from .observe import StatsFacts
    from .work import Claim, ClaimedItem, Publication, QueueState

T = TypeVar("T")
_SQL_CHUNK = 500


def open_backend(target: Path | str, *, clock: Clock, busy: BusyPolicy, read_only: bool) -> Backend:
    """The backend for ``target``: a ``postgresql://`` URL opens a server ledger, anything else a file."""
    if is_server_url(target):
        from .postgres import PostgresBackend

        return PostgresBackend(str(target), clock=clock, busy=busy, read_only=read_only)
    from .sqlite import SqliteBackend

    return SqliteBackend(Path(target), clock=clock, busy=busy, read_only=read_only)


def _json_text(value: dict[str, object]) -> str:
    """A JSON column's text, as the batch rows have always been written."""
    return json.dumps(value, default=repr, ensure_ascii=False)


def new_batch_id() -> str:
    return "b_" + secrets.token_hex(8)


class Ledger:
    """A connection to one ledger: a file (SQLite) or a server URL (PostgreSQL). Not shared across
    processes or threads.

    The narrow interface every other module uses: intake, cancel and views here, the work queue
    (:class:`~.work.WorkQueue`), maintenance (:class:`~.maintenance.Maintenance`) and live
    projections (:class:`~.observe.Observation`) through the methods below. A connection lost to a
    server restart is reopened and the operation run again within the busy policy's bound.
    """

    def __init__(
        self,
        target: Path | str,
        *,
        busy_timeout: float | None = None,
        clock: Clock = time.time,
        read_only: bool = False,
        busy: BusyPolicy | None = None,
    ) -> None:
        """Open the ledger at ``target``: a file path, or a ``postgresql://`` URL. ``read_only``
        never writes (for commands that only read; a ledger needing a schema upgrade is upgraded
        first where it is writable). ``busy`` is the busy policy (default:
        :meth:`BusyPolicy.from_env`); ``busy_timeout`` overrides its timeout."""
        self.clock = clock
        self.read_only = read_only
        policy = busy or BusyPolicy.from_env()
        if busy_timeout is not None:
            policy = replace(policy, timeout=busy_timeout, bound=max(policy.bound, busy_timeout))
        self.busy = policy
        self._db = open_backend(target, clock=self._now, busy=policy, read_only=read_only)
        self.path = self._db.name
        self._log = Transitions(self._db)
        self._views = Views(self._db)
        self._queue = WorkQueue(self._db, self._log)
        self._upkeep = Maintenance(self._db, self._log)
        self._observe = Observation(self._db, self._views)
        self._relocation = Relocation(self._db)

    def _now(self) -> float:
        return self.clock()

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.kind

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_file(self) -> None:
        """Raise :class:`LedgerGone` if the ledger file is no longer the one opened (a file ledger)."""
        self._db.check_file()

    def fault(self, code: str, detail: str) -> LedgerFault:
        """The error ``code`` (``ledger_full``, ``ledger_corrupt``, …) for this ledger, with its advice."""
        return self._db.fault(code, detail)  # type: ignore[return-value]

    def _retrying(self, operation: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``operation`` run again after a lost connection is reopened, or a deadlock broken,
        within the busy policy's bound (a server restart is waited out, not reported)."""
        for attempt in self.busy.retrying((LedgerConnectionLost, LedgerContention)):
            with attempt:
                try:
                    return operation(*args, **kwargs)
                except LedgerConnectionLost:
                    self._reconnect_quietly()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover - tenacity re-raises the last error

    def _reconnect_quietly(self) -> None:
        try:
            self._db.reconnect()
        except LedgerUnavailable as exc:  # still down: the next attempt tries again
            raise LedgerConnectionLost(str(exc), retry_after=exc.retry_after) from exc

    # -- reading -------------------------------------------------------------

    def resolve_batch_id(self, text: str) -> str:
        """See :meth:`Views.resolve_batch_id`."""
        return self._retrying(self._views.resolve_batch_id, text)

    def batch(self, batch_id: str, *, with_failures: bool = True) -> BatchView:
        """See :meth:`Views.batch`."""
        return self._retrying(self._views.batch, batch_id, with_failures=with_failures)

    def batch_settled(self, batch_id: str) -> bool:
        """See :meth:`Views.batch_settled`."""
        return self._retrying(self._views.batch_settled, batch_id)

    def batches(self, limit: int = 20) -> list[BatchView]:
        """See :meth:`Views.batches`."""
        return self._retrying(self._views.batches, limit)

    def owned_friendly_names(self, batch_id: str) -> list[tuple[str, str]]:
        """See :meth:`Views.owned_friendly_names`."""
        return self._retrying(self._views.owned_friendly_names, batch_id)

    def publishes_at(self, friendly_path: str) -> list[tuple[str, str | None]]:
        """See :meth:`Views.publishes_at`."""
        return self._retrying(self._views.publishes_at, friendly_path)

    def record_name_version(self, batch_id: str, friendly_path: str, version: str | None) -> None:
        """Record the version publishing returned at ``friendly_path`` for the batch's succeeded item
        there: inside the write transaction of :meth:`publishing_name` when one is open."""
        if self._db.in_transaction:
            self._upkeep.record_name_version(batch_id, friendly_path, version)
            return
        with self._db.write():
            self._upkeep.record_name_version(batch_id, friendly_path, version)

    @contextmanager
    def publishing_name(self, friendly_path: str) -> Iterator[None]:
        """Hold the thumbnail name ``friendly_path`` (an absolute path: OUT and the name) against
        every other process publishing at it, from the name check through the link to the commit
        that records who published it: otherwise two items of different batches (workers on two
        hosts) can both find the name free, or one can find the other's link before that is
        recorded and take it for a file thumbctl did not publish.

        Inside a write transaction (a worker's publish) the hold lasts until that transaction
        ends, whatever this block does; outside one (a submit relinking its names) it is a write
        transaction of its own. PostgreSQL: a transaction advisory lock on the name. SQLite: the
        write transaction itself, as it excludes every other writer of the ledger."""
        key = f"name:{friendly_path}"
        if self._db.in_transaction:
            self._db.serialize_on(key)
            yield
            return
        with self._db.write():
            self._db.serialize_on(key)
            yield

    def batches_touched_since(self, at: str) -> list[str]:
        """See :meth:`Views.batches_touched_since`."""
        return self._retrying(self._views.batches_touched_since, at)

    def failed_since(self, at: str, batch_id: str | None = None) -> int:
        """See :meth:`Views.failed_since`."""
        return self._retrying(self._views.failed_since, at, batch_id)

    def items(self, batch_id: str, *, state: str | None = None) -> list[ItemView]:
        """See :meth:`Views.items`."""
        return self._retrying(self._views.items, batch_id, state=state)

    def streamed_items(self, batch_id: str, *, state: str | None = None) -> AbstractContextManager[Iterator[ItemView]]:
        """See :meth:`Views.streamed_items`."""
        return self._views.streamed_items(batch_id, state=state)

    def events(self, batch_id: str, *, item_id: str | None = None) -> list[EventView]:
        """See :meth:`Views.events`."""
        return self._retrying(self._views.events, batch_id, item_id=item_id)

    def streamed_events(
        self, batch_id: str, *, item_id: str | None = None
    ) -> AbstractContextManager[Iterator[EventView]]:
        """See :meth:`Views.streamed_events`."""
        return self._views.streamed_events(batch_id, item_id=item_id)

    def source_sizes(self, batch_id: str) -> dict[str, tuple[int, int]]:
        """See :meth:`Views.source_sizes`."""
        return self._retrying(self._views.source_sizes, batch_id)

    # -- the work queue ------------------------------------------------------
    def claim(
        self,
        owner: str,
        *,
        batch_id: str | None = None,
        lease_seconds: float = 30.0,
        is_dead: Callable[[str], bool] = lambda owner: False,
        delay_for: DelayFor = lambda attempt: 0.0,
    ) -> Claim | None:
        """See :meth:`WorkQueue.claim`."""
        return self._retrying(
            self._queue.claim,
            owner,
            batch_id=batch_id,
            lease_seconds=lease_seconds,
            is_dead=is_dead,
            delay_for=delay_for,
        )

    def heartbeat(self, token: str, lease_seconds: float = 30.0) -> int:
        """See :meth:`WorkQueue.heartbeat`."""
        return self._retrying(self._queue.heartbeat, token, lease_seconds)

    def start_stage(self, claim: Claim, rows: list[int]) -> None:
        """See :meth:`WorkQueue.start_stage`."""
        return self._retrying(self._queue.start_stage, claim, rows)

    def cancel_if_requested(self, claim: Claim) -> bool:
        """See :meth:`WorkQueue.cancel_if_requested`."""
        return self._retrying(self._queue.cancel_if_requested, claim)

    def release(self, claim: Claim, reason: str) -> int:
        """See :meth:`WorkQueue.release`."""
        return self._retrying(self._queue.release, claim, reason)

    def publish(
        self,
        claim: Claim,
        item: ClaimedItem,
        effect: Callable[[], Publication | None],
        *,
        result: dict[str, object] | None = None,
    ) -> str:
        """See :meth:`WorkQueue.publish`."""
        return self._retrying(self._queue.publish, claim, item, effect, result=result)

    def fail(self, claim: Claim, rows: list[int], code: str, detail: str, delay_for: DelayFor) -> dict[int, str]:
        """See :meth:`WorkQueue.fail`."""
        return self._retrying(self._queue.fail, claim, rows, code, detail, delay_for)

    def retry_failed(self, batch_id: str) -> int:
        """See :meth:`WorkQueue.retry_failed`."""
        return self._retrying(self._queue.retry_failed, batch_id)

    def rescue_leases(self, is_dead: Callable[[str], bool], delay_for: DelayFor) -> int:
        """See :meth:`WorkQueue.rescue_leases`."""
        return self._retrying(self._queue.rescue_leases, is_dead, delay_for)

    def queue_state(self, batch_id: str | None = None) -> QueueState:
        """See :meth:`WorkQueue.queue_state`."""
        return self._retrying(self._queue.queue_state, batch_id)

    def queue_idle(self, batch_id: str | None = None) -> bool:
        """See :meth:`WorkQueue.queue_idle`."""
        return self._retrying(self._queue.queue_idle, batch_id)

    def overdue_owners(self, seconds: float) -> list[str]:
        """See :meth:`WorkQueue.overdue_owners`."""
        return self._retrying(self._queue.overdue_owners, seconds)

    def stop_overdue(self, owner: str, seconds: float, code: str, detail: str) -> int:
        """See :meth:`WorkQueue.stop_overdue`."""
        return self._retrying(self._queue.stop_overdue, owner, seconds, code, detail)

    # -- maintenance: reconcile and gc ---------------------------------------
    def stalled_candidates(self) -> list[StalledItem]:
        """See :meth:`Maintenance.stalled_candidates`."""
        return self._retrying(self._upkeep.stalled_candidates)

    def published_items(self) -> list[PublishedItem]:
        """See :meth:`Maintenance.published_items`."""
        return self._retrying(self._upkeep.published_items)

    def verified_objects(self) -> dict[str, ObjectStamp]:
        """See :meth:`Maintenance.verified_objects`."""
        return self._retrying(self._upkeep.verified_objects)

    def replace_verified_objects(self, verified: dict[str, ObjectStamp]) -> bool:
        """See :meth:`Maintenance.replace_verified_objects`."""
        return self._retrying(self._upkeep.replace_verified_objects, verified)

    def referenced_object_paths(self, *, also_expiring: Sequence[str] = ()) -> set[str]:
        """See :meth:`Maintenance.referenced_object_paths`."""
        return self._retrying(self._upkeep.referenced_object_paths, also_expiring=also_expiring)

    def output_folders(self) -> list[tuple[str, str]]:
        """See :meth:`Maintenance.output_folders`."""
        return self._retrying(self._upkeep.output_folders)

    def rescue_stalled(self, row: int, token: str | None, is_dead: IsDead, delay_for: DelayFor) -> str | None:
        """See :meth:`Maintenance.rescue_stalled`."""
        return self._retrying(self._upkeep.rescue_stalled, row, token, is_dead, delay_for)

    def requeue_published(self, row: int, object_path: str, code: str, detail: str) -> str | None:
        """See :meth:`Maintenance.requeue_published`."""
        return self._retrying(self._upkeep.requeue_published, row, object_path, code, detail)

    def requeue_missing_objects(self, batch_id: str, present: Callable[[str], bool]) -> int:
        """See :meth:`Maintenance.requeue_missing_objects`."""
        return self._retrying(self._upkeep.requeue_missing_objects, batch_id, present)

    def relink_published(
        self, row: int, object_path: str, friendly_path: str, code: str, detail: str, link: Callable[[], str | None]
    ) -> bool:
        """See :meth:`Maintenance.relink_published`."""
        return self._retrying(self._upkeep.relink_published, row, object_path, friendly_path, code, detail, link)

    def record_file_removal(self, batch_id: str, code: str, detail: str, remove: Callable[[], object]) -> None:
        """See :meth:`Maintenance.record_file_removal`."""
        return self._retrying(self._upkeep.record_file_removal, batch_id, code, detail, remove)

    def expirable_batches(self, cutoff: str, *, batch_id: str | None = None) -> list[str]:
        """See :meth:`Maintenance.expirable_batches`."""
        return self._retrying(self._upkeep.expirable_batches, cutoff, batch_id=batch_id)

    def expire_batch(self, batch_id: str, cutoff: str) -> bool:
        """See :meth:`Maintenance.expire_batch`."""
        return self._retrying(self._upkeep.expire_batch, batch_id, cutoff)

    def expired_manifests(self, *, also_expiring: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """See :meth:`Maintenance.expired_manifests`."""
        return self._retrying(self._upkeep.expired_manifests, also_expiring=also_expiring)

    def expired_friendly_paths(self, key: str, object_path: str, *, also_expiring: Sequence[str] = ()) -> list[str]:
        """See :meth:`Maintenance.expired_friendly_paths`."""
        return self._retrying(self._upkeep.expired_friendly_paths, key, object_path, also_expiring=also_expiring)

    def remove_if_unreferenced(self, key: str, object_path: str, remove: Callable[[], T]) -> T | None:
        """See :meth:`Maintenance.remove_if_unreferenced`."""
        return self._retrying(self._upkeep.remove_if_unreferenced, key, object_path, remove)

    # -- the one-time layout migration (thumbctl.migrate) ------------------------------------

    def object_paths_under(self, folder: str) -> set[str]:
        """See :meth:`Relocation.object_paths_under`."""
        return self._retrying(self._relocation.object_paths_under, folder)

    def names_in(self, out_dir: str) -> list[str]:
        """See :meth:`Relocation.names_in`."""
        return self._retrying(self._relocation.names_in, out_dir)

    def live_batches_in(self, out_dir: str) -> list[str]:
        """See :meth:`Relocation.live_batches_in`."""
        return self._retrying(self._relocation.live_batches_in, out_dir)

    def relocate_objects(self, folder: str, moved: dict[str, str]) -> int:
        """See :meth:`Relocation.relocate_objects`."""
        return self._retrying(self._relocation.relocate_objects, folder, moved)

    # -- live views and stats ------------------------------------------------
    def follow(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Follower:
        """See :meth:`Observation.follow`; its reads survive a lost connection (:class:`_Refollowing`)."""
        return _Refollowing(  # type: ignore[return-value] - a Follower in all but name: it only reads
            lambda: self._observe.follow(batch_id, window=window, failures=failures), self._retrying
        )

    def activity(self, batch_id: str | None = None, *, window: float = 30.0, failures: int = 3) -> Activity:
        """See :meth:`Observation.activity`."""
        return self._retrying(self._observe.activity, batch_id, window=window, failures=failures)

    def stats_facts(self, since: float, batch_id: str | None = None) -> StatsFacts:
        """See :meth:`Observation.stats_facts`."""
        return self._retrying(self._observe.stats_facts, since, batch_id)

    # -- the store ----------------------------------------------------------

    def ledger_id(self) -> str:
        """The ledger's stable id, made once by its schema migration (a store records the one ledger it
        belongs to)."""
        return str(self._retrying(self._db.scalar, "SELECT value FROM meta WHERE name = 'ledger_id'"))

    def recorded_store(self) -> str | None:
        """The store this ledger last used, or None before it used one."""
        return self._retrying(self._db.scalar, "SELECT value FROM meta WHERE name = 'store'")

    def record_store(self, path: str) -> None:
        """Remember ``path`` as the store this ledger uses."""
        if self.recorded_store() != path:
            self._retrying(self._record_store, path)

    def _record_store(self, path: str) -> None:
        with self._db.write():
            self._db.execute(
                "INSERT INTO meta (name, value) VALUES ('store', ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (path,),
            )

    # -- intake -------------------------------------------------------------

    def batch_for_key(self, key: str) -> str | None:
        """The id of the batch an idempotency key names, if any."""
        return self._retrying(self._db.scalar, "SELECT batch_id FROM batches WHERE idempotency_key = ?", (key,))

    def accept_batch(
        self, new: NewBatch, limits: Limits, still_present: Callable[[str], bool] | None = None
    ) -> BatchView:
        """Record ``new`` durably, or return the batch its key already names.

        Same key and digest: the original batch, ``replayed=True``. Same key,
        other digest: :class:`IdempotencyConflict`, nothing changes. A new
        batch must pass admission control (:class:`AdmissionRefused`).

        ``still_present(object_path)`` is asked again, inside the write transaction, for
        every item that reuses an earlier object: gc removes objects inside its own write
        transaction, so an object present here stays until this batch references it, and
        one gc removed since intake looked is rendered again instead.
        """
        batch_id, replayed = self._retrying(self._accept, new, limits, still_present)
        return replace(self.batch(batch_id), replayed=replayed)

    def _accept(self, new: NewBatch, limits: Limits, still_present: Callable[[str], bool] | None) -> tuple[str, bool]:
        with self._db.write(durable=True) as now:
            self._db.serialize_on(f"key:{new.idempotency_key}")  # two submits of one key: one batch
            row = self._db.execute(
                "SELECT batch_id, request_digest FROM batches WHERE idempotency_key = ?", (new.idempotency_key,)
            ).fetchone()
            if row is not None:
                if row["request_digest"] != new.request_digest:
                    raise IdempotencyConflict(
                        f"key {new.idempotency_key!r} was already used by batch {row['batch_id']} "
                        "for a different request; nothing was changed",
                        batch_id=row["batch_id"],
                    )
                return row["batch_id"], True
            if still_present and any(item.dedup for item in new.items):
                self._db.serialize_on(OBJECT_STORE)  # gc cannot remove a reused object meanwhile
                new = _without_vanished_reuse(new, still_present)
            check_admission(self._queue_snapshot(now), new.runnable_count, limits)
            return self._insert_batch(new, now), False

    def _insert_batch(self, new: NewBatch, now: float) -> str:
        batch_id = new_batch_id()
        at = iso(now)
        deadline = iso(now + new.deadline_seconds) if new.deadline_seconds else None
        self._db.execute(
            _INSERT_BATCH,
            (
                batch_id,
                new.idempotency_key,
                new.request_digest,
                len(new.items),
                new.source_root,
                new.out_dir,
                f"{new.manifest_dir}/{batch_id}.json",
                _json_text(new.profile),
                new.max_attempts,
                _json_text(new.limits or {}),
                at,
                deadline,
            ),
        )
        self._db.insert_rows("items", _ITEM_COLUMNS, (_item_row(batch_id, item, at) for item in new.items))
        self._db.append_events_from(_INSERT_CREATION_EVENTS, (at, batch_id))
        return batch_id

    def _queue_snapshot(self, now: float) -> QueueSnapshot:
        """Runnable items in the ledger and the age of the oldest one (runnable: see :func:`.states.runnable`);
        whether workers are draining the queue and which batch waits longest are asked only when needed."""
        at = iso(now)
        row = self._db.execute(
            "SELECT count(*) AS n, min(i.queued_at) AS oldest FROM items i JOIN batches b USING (batch_id) "
            f"WHERE {runnable('i')} AND b.cancel_requested_at IS NULL",
            (at,),
        ).fetchone()
        oldest = row["oldest"]
        return QueueSnapshot(
            row["n"],
            (now - parse_iso(oldest)) if oldest else None,
            workers_seen=lambda: self._workers_seen(now),
            oldest_batch=lambda: self._oldest_waiting_batch(at),
        )

    def _workers_seen(self, now: float) -> bool:
        """An item is running, or one was claimed or left running within :data:`WORKER_SEEN_WINDOW`
        (read on the time index of the log: only the window's events)."""
        running = self._db.scalar(f"SELECT 1 FROM items WHERE state = {RUNNING} LIMIT 1")
        if running:
            return True
        return bool(
            self._db.scalar(
                "SELECT 1 FROM events INDEXED BY events_at WHERE at >= ? "
                f"AND (to_state = {RUNNING} OR from_state = {RUNNING}) LIMIT 1",
                (iso(now - WORKER_SEEN_WINDOW),),
            )
        )

    def _oldest_waiting_batch(self, at: str) -> str | None:
        return self._db.scalar(
            "SELECT i.batch_id FROM items i JOIN batches b USING (batch_id) "
            f"WHERE {runnable('i')} AND b.cancel_requested_at IS NULL ORDER BY i.queued_at, i.id LIMIT 1",
            (at,),
        )

    # -- stat cache ---------------------------------------------------------

    def cached_sources(self, paths: Iterable[str]) -> dict[str, CachedSource]:
        """Stat-cache rows for ``paths`` (those that have one)."""
        return self._retrying(self._cached_sources, list(paths))

    def _cached_sources(self, paths: list[str]) -> dict[str, CachedSource]:
        found: dict[str, CachedSource] = {}
        for chunk in _chunks(paths, _SQL_CHUNK):
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT {_CACHE_COLUMNS} FROM stat_cache WHERE path IN ({marks})"
            for row in self._db.execute(sql, chunk).fetchall():
                found[row["path"]] = record(CachedSource, row)
        return found

    def remember_sources(self, entries: Iterable[CachedSource]) -> None:
        rows = [astuple(e) for e in entries]
        if rows:
            self._retrying(self._remember_sources, rows)

    def _remember_sources(self, rows: list[tuple[object, ...]]) -> None:
        updates = ", ".join(f"{c} = excluded.{c}" for c in _CACHE_COLUMNS.split(", ")[1:])
        with self._db.write():
            self._db.executemany(
                f"INSERT INTO stat_cache ({_CACHE_COLUMNS}) VALUES ({','.join('?' * 11)}) "
                f"ON CONFLICT (path) DO UPDATE SET {updates}",
                sorted(rows, key=lambda r: str(r[0])),  # one order for every writer: no deadlock between two
            )

    # -- cancellation -------------------------------------------------------

    def request_cancel(self, batch_id: str) -> BatchView:
        """Record a cancel: flag the batch and cancel its queued items, at once.

        Idempotent; a terminal batch is left as it is.
        """
        batch_id = self.resolve_batch_id(batch_id)
        self._retrying(self._cancel, batch_id)
        return self.batch(batch_id)

    def _cancel(self, batch_id: str) -> None:
        """The flag and the queued items in one transaction. The batch row is locked first: a
        publish in flight holds it shared until it commits, and every publish after sees the flag
        (the race rule); claims in flight hold their items, which are running when they commit."""
        with self._db.write(durable=True) as now:
            at = iso(now)
            flagged = self._db.scalar(
                f"SELECT cancel_requested_at FROM batches WHERE batch_id = ?{self._db.lock()}", (batch_id,)
            )
            if flagged is None and not self._views.batch_settled(batch_id):
                self._db.execute("UPDATE batches SET cancel_requested_at = ? WHERE batch_id = ?", (at, batch_id))
                self._log.event(at, batch_id, None, None, None, "cancel_requested")
            queued = [
                r["id"]
                for r in self._db.execute(
                    f"SELECT id FROM items WHERE batch_id = ? AND state = {QUEUED} ORDER BY id", (batch_id,)
                ).fetchall()
            ]
            self._log.move(at, queued, ItemState.QUEUED, ItemState.CANCELLED)


class _Refollowing:
    """A :class:`~.follow.Follower` that starts over after a lost connection: a read cut off half
    way may have updated part of what the follower derived, so a new one counts from the rows
    again, on the reopened connection, within the busy policy's bound (the supervisor of a run
    reads progress while a server restarts)."""

    def __init__(self, make: Callable[[], Follower], retrying: Callable[..., object]) -> None:
        self._make = make
        self._retrying = retrying
        self._follower = make()

    def read(self) -> tuple[BatchView | None, Activity]:
        return self._retrying(self._read)  # type: ignore[return-value]

    def __getattr__(self, name: str) -> object:  # what the follower holds (batch_id, window, …)
        if name == "_follower":
            raise AttributeError(name)
        return getattr(self._follower, name)

    def _read(self) -> tuple[BatchView | None, Activity]:
        try:
            return self._follower.read()
        except LedgerConnectionLost:
            self._follower = self._make()
            raise


def _without_vanished_reuse(new: NewBatch, still_present: Callable[[str], bool]) -> NewBatch:
    """Items reusing an object that is gone since intake looked are queued to render again."""
    items = tuple(
        replace(item, state=ItemState.QUEUED.value, dedup=False)
        if item.dedup and item.object_path is not None and not still_present(item.object_path)
        else item
        for item in new.items
    )
    return replace(new, items=items)


def _chunks(values: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _item_row(batch_id: str, item: NewItem, at: str) -> tuple:
    focus_x, focus_y = item.focus if item.focus else (None, None)
    return (
        batch_id,
        item.item_id,
        item.ratio,
        item.size,
        item.format,
        item.source,
        item.source_digest,
        item.source_format,
        item.source_width,
        item.source_height,
        focus_x,
        focus_y,
        item.state,
        item.error_code,
        item.error_detail,
        item.derivative_key,
        item.object_path,
        item.friendly_path,
        int(item.dedup),
        at,
        at,
        at if item.state == ItemState.QUEUED else None,
    )


_INSERT_BATCH = (
    "INSERT INTO batches (batch_id, idempotency_key, request_digest, total, source_root, out_dir, "
    "manifest_path, profile, max_attempts, limits, created_at, deadline_at) VALUES (" + ",".join("?" * 12) + ")"
)
_ITEM_COLUMNS = (
    "batch_id",
    "item_id",
    "ratio",
    "size",
    "format",
    "source",
    "source_digest",
    "source_format",
    "source_width",
    "source_height",
    "focus_x",
    "focus_y",
    "state",
    "error_code",
    "error_detail",
    "derivative_key",
    "object_path",
    "friendly_path",
    "dedup",
    "created_at",
    "updated_at",
    "queued_at",
)
_INSERT_CREATION_EVENTS = (
    "INSERT INTO events (at, batch_id, item_row, from_state, to_state, attempt, error_code, detail, dedup) "
    "SELECT ?, batch_id, id, NULL, state, 0, error_code, error_detail, dedup "
    "FROM items WHERE batch_id = ? ORDER BY id"
)
_CACHE_COLUMNS = "path, dev, inode, size, mtime_ns, ctime_ns, digest, format, width, height, orientation"
