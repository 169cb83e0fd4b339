"""The ledger: the one owner of the SQLite database and every SQL statement.

The rest of thumbctl talks to :class:`Ledger` through a narrow interface of
whole operations (accept a batch, request a cancel, read a view), so a
server-backed ledger could stand in for this one without touching callers.

Rules kept here:

* WAL mode, ``busy_timeout``, every write inside ``BEGIN IMMEDIATE``;
  acceptance and cancellation commit with ``synchronous=FULL``.
* A busy write lock is waited out by one policy (:class:`~thumbctl.retrypolicy.BusyPolicy`);
  SQLite errors about the file become stable thumbctl errors in one place
  (:mod:`thumbctl.ledger.connection`); every write first checks the file is still the one opened.
* Every state change is a conditional ``UPDATE`` on the current state that
  appends its event in the same transaction; event times are taken inside
  the transaction and events carry a monotonic sequence number.
* Counts are always derived from item rows.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ..admission import check_admission
from ..errors import (
    BatchNotFound,
    IdempotencyConflict,
    ItemNotFound,
    LedgerBusy,
    LedgerError,
    LedgerFault,
    LedgerUnavailable,
)
from ..models import (
    ITEM_STATES,
    BatchView,
    CachedSource,
    EventView,
    FailureView,
    ItemView,
    NewBatch,
    NewItem,
    batch_state,
)
from ..retrypolicy import BusyPolicy
from ..settings import Limits
from ..store import OutputLayout
from .connection import LedgerConnection, LedgerCursor, connect, fault_for, file_identity, gone_error
from .maintenance import Maintenance
from .observe import Observation
from .schema import MIGRATIONS, SCHEMA_VERSION
from .timefmt import iso, parse_iso
from .work import WorkQueue

Clock = Callable[[], float]
_SQL_CHUNK = 500
#: Rows a streamed listing fetches from SQLite at a time.
_FETCH_ROWS = 500


def _json_text(value: dict[str, object]) -> str:
    """A JSON column's text, as the batch rows have always been written."""
    return json.dumps(value, default=repr, ensure_ascii=False)


def new_batch_id() -> str:
    return "b_" + secrets.token_hex(8)


class Ledger(WorkQueue, Observation, Maintenance):
    """A connection to one ledger file. Not shared across processes or threads."""

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout: float | None = None,
        clock: Clock = time.time,
        read_only: bool = False,
        busy: BusyPolicy | None = None,
    ) -> None:
        """Open the ledger at ``path``. ``read_only`` never writes (for commands that only read;
        a ledger needing a schema upgrade is upgraded first where it is writable). ``busy`` is the
        busy policy (default: :meth:`BusyPolicy.from_env`); ``busy_timeout`` overrides its timeout."""
        self.path = Path(path)
        self.clock = clock
        self.read_only = read_only
        policy = busy or BusyPolicy.from_env()
        if busy_timeout is not None:
            policy = replace(policy, timeout=busy_timeout, bound=max(policy.bound, busy_timeout))
        self.busy = policy
        self._conn = self._open_connection()
        self._identity = file_identity(self.path)
        self._migrate()

    def _open_connection(self) -> LedgerConnection:
        conn = connect(self.path, self.busy.timeout, read_only=self.read_only)
        if not self.read_only or _schema_version(conn) >= SCHEMA_VERSION:
            return conn
        conn.close()
        try:
            return connect(self.path, self.busy.timeout)
        except LedgerUnavailable as exc:
            raise LedgerError(
                f"{self.path} needs a schema upgrade (to version {SCHEMA_VERSION}) and cannot be written here "
                f"({exc.code}): run any thumbctl command once where it is writable",
                code="ledger_read_only",
            ) from exc

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions -------------------------------------------------------

    @contextmanager
    def _write(self, *, durable: bool = False) -> Iterator[float]:
        """A ``BEGIN IMMEDIATE`` transaction on the file still at :attr:`path`; yields the
        time taken inside it. A busy write lock is waited out by the busy policy."""
        self._conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self._begin()
        try:
            self.check_file()
            yield self.clock()
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                with contextlib.suppress(LedgerFault):  # the first fault is the one to report
                    self._conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """One read transaction: every statement inside sees the same committed state of the file."""
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            if self._conn.in_transaction:
                self._conn.execute("COMMIT")

    def _begin(self) -> None:
        """``BEGIN IMMEDIATE``, retried by the busy policy: the one place a busy ledger is waited out."""
        for attempt in self.busy.retrying(LedgerBusy):
            with attempt:
                self._conn.execute("BEGIN IMMEDIATE")

    def check_file(self) -> None:
        """Raise :class:`LedgerGone` if the file at :attr:`path` is no longer the one this
        connection opened (deleted, its folder deleted, or replaced): every write checks."""
        now = file_identity(self.path)
        if now != self._identity:
            raise gone_error(self.path, now)

    def fault(self, code: str, detail: str) -> LedgerFault:
        """The error ``code`` (``ledger_full``, ``ledger_corrupt``, …) for this ledger, with its advice."""
        return fault_for(code, self.path, detail)

    def _migrate(self) -> None:
        version = _schema_version(self._conn)
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"{self.path} has schema version {version}; this thumbctl knows up to "
                f"{SCHEMA_VERSION}: upgrade thumbctl"
            )
        import sqlite_utils  # only here: opening an up-to-date ledger stays light

        with self._write(durable=True):
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            db = sqlite_utils.Database(self._conn)
            for target, migrate in MIGRATIONS:
                if target > version:
                    migrate(db)
                    self._conn.execute(f"PRAGMA user_version={int(target)}")

    # -- intake -------------------------------------------------------------

    def batch_for_key(self, key: str) -> str | None:
        """The id of the batch an idempotency key names, if any."""
        row = self._conn.execute("SELECT batch_id FROM batches WHERE idempotency_key = ?", (key,)).fetchone()
        return row[0] if row else None

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
        with self._write(durable=True) as now:
            row = self._conn.execute(
                "SELECT batch_id, request_digest FROM batches WHERE idempotency_key = ?",
                (new.idempotency_key,),
            ).fetchone()
            if row is not None:
                if row[1] != new.request_digest:
                    raise IdempotencyConflict(
                        f"key {new.idempotency_key!r} was already used by batch {row[0]} "
                        "for a different request; nothing was changed",
                        batch_id=row[0],
                    )
                batch_id, replayed = row[0], True
            else:
                new = _without_vanished_reuse(new, still_present) if still_present else new
                check_admission(self._queue_snapshot(now), new.runnable_count, limits)
                batch_id, replayed = self._insert_batch(new, now), False
        view = self.batch(batch_id)
        return replace(view, replayed=replayed)

    def _insert_batch(self, new: NewBatch, now: float) -> str:
        batch_id = new_batch_id()
        at = iso(now)
        layout = OutputLayout(new.out_dir)
        deadline = iso(now + new.deadline_seconds) if new.deadline_seconds else None
        self._conn.execute(
            _INSERT_BATCH,
            (
                batch_id,
                new.idempotency_key,
                new.request_digest,
                len(new.items),
                new.source_root,
                new.out_dir,
                layout.batch_manifest_path(batch_id),
                _json_text(new.profile),
                new.max_attempts,
                _json_text(new.limits or {}),
                at,
                deadline,
            ),
        )
        self._conn.executemany(_INSERT_ITEM, (_item_row(batch_id, item, at) for item in new.items))
        self._conn.execute(_INSERT_CREATION_EVENTS, (at, batch_id))
        return batch_id

    def _queue_snapshot(self, now: float) -> tuple[int, float | None]:
        """Runnable items in the ledger and the age of the oldest one. Runnable, here as in
        ``stats`` and the live views: queued, not waiting out a retry backoff, batch not cancelled."""
        count, oldest = self._conn.execute(
            "SELECT count(*), min(i.queued_at) FROM items i JOIN batches b USING (batch_id) "
            "WHERE i.state = 'queued' AND (i.not_before IS NULL OR i.not_before <= ?) "
            "AND b.cancel_requested_at IS NULL",
            (iso(now),),
        ).fetchone()
        return count, (now - parse_iso(oldest)) if oldest else None

    # -- stat cache ---------------------------------------------------------

    def cached_sources(self, paths: Iterable[str]) -> dict[str, CachedSource]:
        """Stat-cache rows for ``paths`` (those that have one)."""
        found: dict[str, CachedSource] = {}
        for chunk in _chunks(list(paths), _SQL_CHUNK):
            marks = ",".join("?" * len(chunk))
            for row in self._conn.execute(f"SELECT {_CACHE_COLUMNS} FROM stat_cache WHERE path IN ({marks})", chunk):
                found[row[0]] = CachedSource(*row)
        return found

    def remember_sources(self, entries: Iterable[CachedSource]) -> None:
        rows = [
            (
                e.path,
                e.dev,
                e.inode,
                e.size,
                e.mtime_ns,
                e.ctime_ns,
                e.digest,
                e.format,
                e.width,
                e.height,
                e.orientation,
            )
            for e in entries
        ]
        if not rows:
            return
        with self._write():
            self._conn.executemany(
                f"INSERT OR REPLACE INTO stat_cache ({_CACHE_COLUMNS}) VALUES ({','.join('?' * 11)})",
                rows,
            )

    # -- cancellation -------------------------------------------------------

    def request_cancel(self, batch_id: str) -> BatchView:
        """Record a cancel: flag the batch and cancel its queued items, at once.

        Idempotent; a terminal batch is left as it is.
        """
        batch_id = self.resolve_batch_id(batch_id)
        with self._write(durable=True) as now:
            at = iso(now)
            if self._cancel_allowed(batch_id):
                self._conn.execute("UPDATE batches SET cancel_requested_at = ? WHERE batch_id = ?", (at, batch_id))
                self._append_event(at, batch_id, None, None, None, "cancel_requested")
            self._conn.execute(_CANCEL_QUEUED_EVENTS, (at, batch_id))
            self._conn.execute(
                "UPDATE items SET state = 'cancelled', updated_at = ? WHERE batch_id = ? AND state = 'queued'",
                (at, batch_id),
            )
        return self.batch(batch_id)

    def _cancel_allowed(self, batch_id: str) -> bool:
        row = self._conn.execute("SELECT cancel_requested_at FROM batches WHERE batch_id = ?", (batch_id,)).fetchone()
        if row[0] is not None:
            return False
        live = self._conn.execute(
            "SELECT count(*) FROM items WHERE batch_id = ? AND state IN ('queued', 'running')",
            (batch_id,),
        ).fetchone()[0]
        return live > 0

    def _append_event(
        self,
        at: str,
        batch_id: str,
        item_row: int | None,
        from_state: str | None,
        attempt: int | None,
        to_state: str,
        *,
        error_code: str | None = None,
        detail: str | None = None,
    ) -> None:
        self._conn.execute(
            "INSERT INTO events (at, batch_id, item_row, from_state, to_state, attempt, error_code, detail) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (at, batch_id, item_row, from_state, to_state, attempt, error_code, detail),
        )

    # -- reading ------------------------------------------------------------

    def resolve_batch_id(self, text: str) -> str:
        """The full batch id for ``text``: an id, or an unambiguous prefix of one."""
        rows = self._conn.execute(
            "SELECT batch_id FROM batches WHERE batch_id >= ? AND batch_id < ? LIMIT 2",
            (text, text + "\U0010ffff"),
        ).fetchall()
        exact = [r[0] for r in rows if r[0] == text]
        if exact:
            return exact[0]
        if len(rows) == 1 and len(text) >= 4:
            return rows[0][0]
        if len(rows) > 1:
            raise BatchNotFound(f"batch id prefix {text!r} is ambiguous")
        if rows:
            raise BatchNotFound(f"batch id prefix {text!r} is too short: give at least 4 characters")
        raise BatchNotFound(f"no batch {text!r} in {self.path}")

    def batch(self, batch_id: str, *, with_failures: bool = True) -> BatchView:
        """The current view of one batch, counts derived from its item rows."""
        return self._batch_view(self._batch_row(self.resolve_batch_id(batch_id)), with_failures)

    def batch_settled(self, batch_id: str) -> bool:
        """No item of the batch is queued or running, i.e. the batch is terminal (see
        :func:`~thumbctl.models.batch_state`): a seek on the ``(batch_id, state)`` index, for
        waiting on a batch without counting its items on every poll."""
        return (
            self._conn.execute(
                "SELECT 1 FROM items WHERE batch_id = ? AND state IN ('queued', 'running') LIMIT 1", (batch_id,)
            ).fetchone()
            is None
        )

    def _batch_row(self, batch_id: str) -> tuple:
        return self._conn.execute(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE batch_id = ?", (batch_id,)).fetchone()

    def batches(self, limit: int = 20) -> list[BatchView]:
        """The most recent batches, newest first."""
        rows = self._conn.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches ORDER BY created_at DESC, batch_id LIMIT ?", (limit,)
        ).fetchall()
        return [self._batch_view(row, False) for row in rows]

    def _batch_view(self, row: tuple, with_failures: bool, counts: dict[str, int] | None = None) -> BatchView:
        """The view of the batch ``row``; its ``counts`` by state are counted from its item rows
        unless given (a :class:`~thumbctl.ledger.follow.Follower` keeps them from the log)."""
        (batch_id, key, digest, total, root, out_dir, manifest, created, cancel_at, expired_at) = row
        counts = self._state_counts(batch_id) if counts is None else counts
        oldest_queued = self._oldest_runnable(batch_id, iso(self.clock())) if counts["queued"] else None
        last = self._conn.execute(
            "SELECT at FROM events WHERE batch_id = ? ORDER BY seq DESC LIMIT 1", (batch_id,)
        ).fetchone()
        updated = last[0] if last else created
        state = batch_state(counts, total, cancel_at is not None)
        terminal = state in {"succeeded", "partial", "failed", "cancelled"}
        runnable = oldest_queued is not None and cancel_at is None
        age = max(0.0, self.clock() - parse_iso(oldest_queued)) if runnable else None
        return BatchView(
            batch_id=batch_id,
            state=state,
            idempotency_key=key,
            request_digest=digest,
            total=total,
            counts=counts,
            created_at=created,
            updated_at=updated,
            cancel_requested_at=cancel_at,
            finished_at=updated if terminal else None,
            out_dir=out_dir,
            manifest_path=manifest,
            source_root=root,
            queue_age_seconds=age,
            expired_at=expired_at,
            failures=tuple(self._failures(batch_id)) if with_failures else (),
            smaller_than_target=self._smaller_than_target(batch_id) if with_failures else 0,
        )

    def _state_counts(self, batch_id: str) -> dict[str, int]:
        """Items of the batch by state, counted on the ``(batch_id, state)`` index."""
        counts = dict.fromkeys(ITEM_STATES, 0)
        for state, n in self._conn.execute(
            "SELECT state, count(*) FROM items WHERE batch_id = ? GROUP BY state", (batch_id,)
        ):
            counts[state] = n
        return counts

    def _oldest_runnable(self, batch_id: str, at: str) -> str | None:
        """When the batch's longest-waiting runnable item was queued (not waiting out a backoff at
        ``at``): the first such row of the queued-age index, past only the delayed ones before it."""
        row = self._conn.execute(
            "SELECT queued_at FROM items INDEXED BY items_queued_age WHERE batch_id = ? AND state = 'queued' "
            "AND (not_before IS NULL OR not_before <= ?) ORDER BY queued_at LIMIT 1",
            (batch_id, at),
        ).fetchone()
        return row[0] if row else None

    def _failures(self, batch_id: str) -> Iterator[FailureView]:
        for row in self._conn.execute(
            "SELECT item_id, ratio, error_code, error_detail FROM items "
            "WHERE batch_id = ? AND state = 'failed' ORDER BY id",
            (batch_id,),
        ):
            yield FailureView(*row)

    def _smaller_than_target(self, batch_id: str) -> int:
        return self._conn.execute(
            "SELECT count(*) FROM items WHERE batch_id = ? AND state = 'succeeded' "
            "AND json_extract(result, '$.source_smaller_than_target') = 1",
            (batch_id,),
        ).fetchone()[0]

    def owned_friendly_names(self, batch_id: str) -> list[tuple[str, str]]:
        """(object path, friendly path) of the batch's succeeded items that own their friendly
        name: no succeeded item of a batch that has not expired claimed it later (the rule
        ``reconcile`` checks names by). Empty for an expired batch."""
        return self._conn.execute(
            "SELECT i.object_path, i.friendly_path FROM items i JOIN batches b USING (batch_id) "
            "WHERE i.batch_id = ? AND i.state = 'succeeded' AND b.expired_at IS NULL "
            "AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL AND NOT EXISTS ("
            "SELECT 1 FROM items j JOIN batches c ON c.batch_id = j.batch_id "
            "WHERE j.friendly_path = i.friendly_path AND j.state = 'succeeded' AND c.expired_at IS NULL "
            "AND (j.updated_at > i.updated_at OR (j.updated_at = i.updated_at AND j.id > i.id))) "
            "ORDER BY i.id",
            (batch_id,),
        ).fetchall()

    def batches_touched_since(self, at: str) -> list[str]:
        """Ids of batches with an event at or after ``at``."""
        rows = self._conn.execute("SELECT DISTINCT batch_id FROM events WHERE at >= ?", (at,)).fetchall()
        return [r[0] for r in rows]

    def items(self, batch_id: str, *, state: str | None = None) -> list[ItemView]:
        """The items of a batch (or those in ``state``), in the order they were recorded."""
        sql, params = self._items_query(batch_id, state)
        return [_item_view(row) for row in self._conn.execute(sql, params).fetchall()]

    @contextmanager
    def streamed_items(self, batch_id: str, *, state: str | None = None) -> Iterator[Iterator[ItemView]]:
        """:meth:`items` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot."""
        with self._reading():
            sql, params = self._items_query(batch_id, state)
            with self._rows(sql, params) as rows:
                yield map(_item_view, rows)

    def _items_query(self, batch_id: str, state: str | None) -> tuple[str, list[object]]:
        sql = f"SELECT {_ITEM_VIEW_COLUMNS} FROM items WHERE batch_id = ?"
        params: list[object] = [self.resolve_batch_id(batch_id)]
        if state is not None:
            sql += " AND state = ?"
            params.append(state)
        return sql + " ORDER BY id", params

    def events(self, batch_id: str, *, item_id: str | None = None) -> list[EventView]:
        """The transition log of a batch (or of one item of it), in commit order."""
        sql, params = self._events_query(batch_id, item_id)
        return [_event_view(row) for row in self._conn.execute(sql, params).fetchall()]

    @contextmanager
    def streamed_events(self, batch_id: str, *, item_id: str | None = None) -> Iterator[Iterator[EventView]]:
        """:meth:`events` as an iterator that reads them as it goes, valid inside the ``with``
        block: one read transaction, so the listing is one consistent snapshot. An unknown
        batch or item raises on entering, before anything is listed."""
        with self._reading():
            sql, params = self._events_query(batch_id, item_id)
            with self._rows(sql, params) as rows:
                yield map(_event_view, rows)

    def _events_query(self, batch_id: str, item_id: str | None) -> tuple[str, list[object]]:
        batch_id = self.resolve_batch_id(batch_id)
        sql = (
            "SELECT e.seq, e.at, e.batch_id, i.item_id, i.ratio, e.from_state, e.to_state, "
            "e.attempt, e.worker, e.error_code, e.detail, e.dedup "
            "FROM events e LEFT JOIN items i ON i.id = e.item_row WHERE e.batch_id = ?"
        )
        params: list[object] = [batch_id]
        if item_id is not None:
            self._check_item(batch_id, item_id)
            sql += " AND i.item_id = ?"
            params.append(item_id)
        return sql + " ORDER BY e.seq", params

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """One read transaction: every query inside sees the same snapshot of the ledger,
        however long the caller takes (WAL: writers carry on meanwhile). Inside one already
        open, that one is the snapshot."""
        if self._conn.in_transaction:
            yield
            return
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            if self._conn.in_transaction:
                with contextlib.suppress(LedgerFault):  # a read has nothing to keep; the first fault is the one
                    self._conn.execute("ROLLBACK")

    @contextmanager
    def _rows(self, sql: str, params: list[object]) -> Iterator[Iterator[tuple]]:
        """The rows of ``sql`` as they are fetched. The cursor is closed on leaving, read to the
        end or not: a statement left pending would keep its snapshot, and this connection's
        next write would find the ledger busy."""
        cursor = self._conn.execute(sql, params)
        try:
            yield _fetched(cursor)
        finally:
            cursor.close()

    def _check_item(self, batch_id: str, item_id: str) -> None:
        if (
            self._conn.execute(
                "SELECT 1 FROM items WHERE batch_id = ? AND item_id = ? LIMIT 1", (batch_id, item_id)
            ).fetchone()
            is None
        ):
            raise ItemNotFound(f"batch {batch_id} has no item {item_id!r} (see `thumbctl status {batch_id} --items`)")

    def source_sizes(self, batch_id: str) -> dict[str, tuple[int, int]]:
        """Item id -> upright (width, height) of its source, for items whose header was read at submit."""
        batch_id = self.resolve_batch_id(batch_id)
        rows = self._conn.execute(
            "SELECT item_id, source_width, source_height FROM items "
            "WHERE batch_id = ? AND source_width IS NOT NULL AND source_height IS NOT NULL",
            (batch_id,),
        ).fetchall()
        return {item_id: (width, height) for item_id, width, height in rows}


def _schema_version(conn: LedgerConnection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _without_vanished_reuse(new: NewBatch, still_present: Callable[[str], bool]) -> NewBatch:
    """Items reusing an object that is gone since intake looked are queued to render again."""
    items = tuple(
        replace(item, state="queued", dedup=False)
        if item.dedup and item.object_path is not None and not still_present(item.object_path)
        else item
        for item in new.items
    )
    return replace(new, items=items)


def _fetched(cursor: LedgerCursor) -> Iterator[tuple]:
    """The rows of ``cursor``, fetched :data:`_FETCH_ROWS` at a time (never all at once)."""
    while rows := cursor.fetchmany(_FETCH_ROWS):
        yield from rows


def _item_view(row: tuple) -> ItemView:
    return ItemView(*row[:-1], json.loads(row[-1]) if row[-1] else None)


def _event_view(row: tuple) -> EventView:
    return EventView(*row[:11], bool(row[11]))


def _chunks(values: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _item_row(batch_id: str, item: NewItem, at: str) -> tuple:
    focus_x, focus_y = item.focus if item.focus else (None, None)
    return (
        batch_id,
        item.item_id,
        item.ratio,
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
        at if item.state == "queued" else None,
    )


_INSERT_BATCH = (
    "INSERT INTO batches (batch_id, idempotency_key, request_digest, total, source_root, out_dir, "
    "manifest_path, profile, max_attempts, limits, created_at, deadline_at) VALUES (" + ",".join("?" * 12) + ")"
)
_INSERT_ITEM = (
    "INSERT INTO items (batch_id, item_id, ratio, source, source_digest, source_format, "
    "source_width, source_height, focus_x, focus_y, state, error_code, error_detail, "
    "derivative_key, object_path, friendly_path, dedup, created_at, updated_at, queued_at) "
    "VALUES (" + ",".join("?" * 20) + ")"
)
_INSERT_CREATION_EVENTS = (
    "INSERT INTO events (at, batch_id, item_row, from_state, to_state, attempt, error_code, detail, dedup) "
    "SELECT ?1, batch_id, id, NULL, state, 0, error_code, error_detail, dedup "
    "FROM items WHERE batch_id = ?2 ORDER BY id"
)
_CANCEL_QUEUED_EVENTS = (
    "INSERT INTO events (at, batch_id, item_row, from_state, to_state, attempt) "
    "SELECT ?1, batch_id, id, 'queued', 'cancelled', attempt "
    "FROM items WHERE batch_id = ?2 AND state = 'queued' ORDER BY id"
)
_CACHE_COLUMNS = "path, dev, inode, size, mtime_ns, ctime_ns, digest, format, width, height, orientation"
_BATCH_COLUMNS = (
    "batch_id, idempotency_key, request_digest, total, source_root, out_dir, "
    "manifest_path, created_at, cancel_requested_at, expired_at"
)
_ITEM_VIEW_COLUMNS = (
    "item_id, source, ratio, state, attempt, error_code, error_detail, derivative_key, "
    "object_path, friendly_path, updated_at, result"
)
