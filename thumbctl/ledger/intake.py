"""The intake port of the ledger: what ``submit`` (and ``cancel``, ``focus``) ask of it.

:class:`IntakePort` is the protocol intake is typed against, documented there once;
:class:`Intake` implements it over SQL, for every backend.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, replace
from typing import Protocol

from ..core.admission import WORKER_SEEN_WINDOW, QueueSnapshot, check_admission
from ..core.errors import IdempotencyConflict, LedgerUnavailable, RowDamaged, UsageError
from ..core.fixes import FixFileState, FixFileUpdate, FocusChange, FocusPoint
from ..core.models import BatchView, CachedSource, ItemState, KeyedBatch, NewBatch, NewItem
from ..core.profile import Limits
from ..core.redact import redacted_text
from .backend import Backend, Row, record
from .batchviews import BatchViews
from .damage import loose_object, needed_batch_document
from .namelocks import OBJECT_STORE, NameLocks
from .retry import Retrier, direct
from .sql import intake as sql
from .sql import upkeep as upkeep_sql
from .timefmt import iso, parse_iso
from .transitions import Transitions, chunks

#: The fields of a render's result that belong to its derivative key, not to the one output: the
#: crop window and its score, the framing (``engine.rendering.Framing``), the placeholder's dominant
#: colour and tiny image (``imaging.placeholder``), and the source's preview for the contact sheet.
CARRIED_FIELDS = ("crop", "placed", "trim", "dominant_colour", "lqip", "preview")


def _json_text(value: dict[str, object]) -> str:
    """A JSON column's text, as the batch rows have always been written."""
    return json.dumps(value, default=repr, ensure_ascii=False)


def new_batch_id() -> str:
    return "b_" + secrets.token_hex(8)


class IntakePort(Protocol):
    """The intake port: what ``submit``, ``cancel``, ``focus`` and a resumed ``retry`` ask of the
    ledger. Implemented over SQL by :class:`Intake`.

    Acceptance is one durable transaction: the idempotency check, admission control, the batch row,
    every item row and every creation event commit together. The stat cache lets an unchanged
    folder be submitted again without reading its files. A cancel flags the batch and cancels its
    queued items at once."""

    def batch_for_key(self, key: str) -> KeyedBatch | None:
        """The batch an idempotency key names, if any: the newest of its chain."""

    def newest_of_chain(self, batch_id: str) -> str:
        """The newest batch of ``batch_id``'s chain: the batch itself, or the one that resumed it, and so on."""

    def recorded_request(self, batch_id: str) -> NewBatch:
        """The request ``batch_id`` recorded, to be accepted again as the batch that resumes it: under
        its key, every item that was admitted to render queued again, the others failed as they were."""

    def accept_batch(
        self,
        new: NewBatch,
        limits: Limits,
        still_present: Callable[[str], bool] | None = None,
        *,
        resume: bool = False,
    ) -> BatchView:
        """Record ``new`` durably, or return the batch its key already names.

        Same key and digest: the original batch, ``replayed=True``. Same key,
        other digest: :class:`IdempotencyConflict`, nothing changes. A new
        batch must pass admission control (:class:`AdmissionRefused`).

        With ``resume``, a key naming a batch whose cancel was requested does not replay it:
        ``new`` is recorded as the next batch of the key's chain (``resumed_from`` that batch)
        and the key moves to it, in one transaction. Two such submits at once serialize on the
        key: the second finds the key on the resuming batch and replays it.

        ``still_present(object_path)`` is asked again, inside the write transaction, for
        every item that reuses an earlier object: gc removes objects inside its own write
        transaction, so an object present here stays until this batch references it, and
        one gc removed since intake looked is rendered again instead.
        """

    def request_cancel(self, batch_id: str) -> BatchView:
        """Record a cancel: flag the batch and cancel its queued items, at once.

        Idempotent; a terminal batch is left as it is.
        """

    def focus_points(self, digests: Sequence[str]) -> list[FocusPoint]:
        """The crop fixes remembered for these source contents, by content and ratio (cleared ones too)."""

    def change_focus(self, changes: Sequence[FocusChange]) -> None:
        """Remember or forget crop fixes at once (``thumbctl focus``), in one transaction."""

    def fix_file_state(self, root: str) -> FixFileState:
        """What the fix file of the source root ``root`` gave its last submits (see :mod:`thumbctl.core.fixes`)."""

    def update_fix_file_state(self, root: str, update: FixFileUpdate) -> None:
        """Apply ``update`` to the record of ``root`` in one transaction (``thumbctl focus``, after
        writing the file)."""

    def source_roots(self, source: str) -> list[str]:
        """The source roots of the batches that read ``source`` (a real path or a URL), newest first."""

    def cached_sources(self, paths: Iterable[str]) -> dict[str, CachedSource]:
        """Stat-cache rows for ``paths`` (those that have one)."""

    def recorded_digest(self, source: str) -> str | None:
        """The content digest the newest batch read for the URL or ``s3://`` source ``source`` (as
        recorded, or as shown: without its query), None when no batch read it."""

    def published_keys(self, paths: Iterable[str]) -> dict[str, tuple[str | None, dict[str, object] | None]]:
        """For each of ``paths`` published before: the derivative key of its recorded object and the
        recorded profile of the batch that published it (None once that batch's record is gone)."""

    def remember_sources(self, entries: Iterable[CachedSource]) -> None:
        """Remember what each source held at its stat signature."""

    def requeue_missing_objects(self, batch_id: str, present: Callable[[str], bool]) -> int:
        """On a replay: the batch's succeeded items whose object is not ``present`` go back to
        ``queued`` with a fresh attempt budget, logged ``succeeded → queued`` with
        ``object_missing`` (as reconcile's repair does), so the run renders them again.

        Files are checked before the write transaction; inside it only items still succeeded
        with the same object move. A batch whose cancel was requested, or that expired, is left
        alone (nothing more is rendered for it). Returns how many items were requeued.
        """


class Intake(NameLocks):
    """The intake port over SQL (:class:`IntakePort`), on any backend."""

    def __init__(self, db: Backend, log: Transitions, views: BatchViews, retrier: Retrier) -> None:
        self.db = db
        self._log = log
        self._views = views
        self._retrier = retrier

    def batch_for_key(self, key: str) -> KeyedBatch | None:
        row = self.db.execute(sql.BATCH_OF_KEY, (key,)).fetchone()
        return KeyedBatch(row["batch_id"], row["cancel_requested_at"] is not None) if row else None

    def newest_of_chain(self, batch_id: str) -> str:
        while (resumed_by := self.db.scalar(sql.RESUMED_BY, (batch_id,))) is not None:
            batch_id = resumed_by
        return batch_id

    def recorded_request(self, batch_id: str) -> NewBatch:
        batch = self.db.execute(sql.RECORDED_BATCH, (batch_id,)).fetchone()
        if batch["expired_at"] is not None:
            raise UsageError(f"batch {batch_id} expired at {batch['expired_at']} (gc); submit again to redo its work")
        deadline = batch["deadline_at"]
        items = tuple(_recorded_item(row) for row in self.db.execute(sql.RECORDED_ITEMS, (batch_id,)).fetchall())
        return NewBatch(
            idempotency_key=batch["idempotency_key"],
            request_digest=batch["request_digest"],
            source_root=batch["source_root"],
            out_dir=batch["out_dir"],
            profile=needed_batch_document(batch_id, "profile", batch["profile"]) or {},
            items=items,
            max_attempts=batch["max_attempts"],
            deadline_seconds=parse_iso(deadline) - parse_iso(batch["created_at"]) if deadline else None,
            limits=needed_batch_document(batch_id, "limits", batch["limits"]),
            manifest_folder=os.path.dirname(batch["manifest_path"]),
        )

    @direct  # two steps, each retried: a retry of the view must not accept again
    def accept_batch(
        self,
        new: NewBatch,
        limits: Limits,
        still_present: Callable[[str], bool] | None = None,
        *,
        resume: bool = False,
    ) -> BatchView:
        batch_id, replayed = self._retrier.run(self._accept, new, limits, still_present, resume)
        return replace(self._retrier.run(self._views.batch, batch_id), replayed=replayed)

    def _accept(
        self, new: NewBatch, limits: Limits, still_present: Callable[[str], bool] | None, resume: bool
    ) -> tuple[str, bool]:
        with self.db.write(durable=True) as now:
            self.db.serialize_on(f"key:{new.idempotency_key}")  # two submits of one key: one batch
            row = self.db.execute(sql.BATCH_OF_KEY, (new.idempotency_key,)).fetchone()
            resumes = None
            if row is not None:
                if row["request_digest"] != new.request_digest:
                    raise IdempotencyConflict(
                        f"key {new.idempotency_key!r} was already used by batch {row['batch_id']} "
                        "for a different request; nothing was changed",
                        batch_id=row["batch_id"],
                    )
                if not (resume and row["cancel_requested_at"] is not None):
                    self._record_focus(new, row["batch_id"], iso(now))  # the manifest's fixes stand again
                    return row["batch_id"], True
                resumes = row["batch_id"]
            if still_present and any(item.dedup for item in new.items):
                self.db.serialize_on(OBJECT_STORE)  # gc cannot remove a reused object meanwhile
                new = _without_vanished_reuse(new, still_present)
            new = self._with_recorded_renders(new)
            check_admission(self._queue_snapshot(now), new.runnable_count, limits)
            return self._insert_batch(new, now, resumes), False

    def _with_recorded_renders(self, new: NewBatch) -> NewBatch:
        """Reused outputs carry what their derivative key's render recorded (the same window of the
        same source): the crop window and its score, the framing, the placeholder and the preview."""
        keys = sorted({item.derivative_key for item in new.items if item.dedup and item.derivative_key})
        found: dict[str, dict[str, object]] = {}
        for chunk in chunks(keys):
            for row in self.db.execute(sql.DERIVATIVE_RENDERS, chunk, ids=len(chunk)).fetchall():
                result = loose_object(row["result"]) or {}
                found[row["derivative_key"]] = {name: result[name] for name in CARRIED_FIELDS if name in result}
        if not found:
            return new
        items = tuple(
            replace(item, reused={**(item.reused or {}), **found[item.derivative_key]})
            if item.dedup and item.derivative_key in found
            else item
            for item in new.items
        )
        return replace(new, items=items)

    def _insert_batch(self, new: NewBatch, now: float, resumes: str | None = None) -> str:
        """Insert the batch, its items and their creation events. A resume first takes the key from
        the cancelled batch ``resumes`` (suffixed ``#resumed:<new id>``, as gc's expiry releases
        one); the unique index on ``resumed_from`` refuses a second resume of it."""
        batch_id = new_batch_id()
        if resumes is not None:
            released = f"{new.idempotency_key}#resumed:{batch_id}"
            moved = self.db.execute(sql.RELEASE_KEY_TO_RESUME, (released, resumes, new.idempotency_key)).rowcount
            if moved != 1:
                raise LedgerUnavailable(f"the key of batch {resumes} moved while it was being resumed; try again")
        at = iso(now)
        deadline = iso(now + new.deadline_seconds) if new.deadline_seconds else None
        batch = {
            "batch_id": batch_id,
            "idempotency_key": new.idempotency_key,
            "request_digest": new.request_digest,
            "total": len(new.items),
            "source_root": new.source_root,
            "out_dir": new.out_dir,
            "manifest_path": f"{new.manifest_dir}/{batch_id}.json",
            "profile": _json_text(new.profile),
            "max_attempts": new.max_attempts,
            "limits": _json_text(new.limits or {}),
            "created_at": at,
            "deadline_at": deadline,
            "resumed_from": resumes,
        }
        self.db.insert(sql.INSERT_BATCH, [batch])
        self.db.insert(sql.INSERT_ITEMS, (_item_row(batch_id, item, at) for item in new.items))
        self.db.append_events_from(sql.INSERT_CREATION_EVENTS, (at, batch_id))
        self._record_focus(new, batch_id, at)
        return batch_id

    def _record_focus(self, new: NewBatch, batch_id: str | None, at: str) -> None:
        """The crop fixes ``new`` sets or clears, and its root's fix-file state, in its acceptance's transaction."""
        for change in sorted(new.focus_changes, key=lambda c: (c.source_digest, c.ratio)):
            self._change_focus(change, batch_id, at)
        if new.fix_file is not None:
            self._update_fix_file_state(*new.fix_file)

    def _change_focus(self, change: FocusChange, batch_id: str | None, at: str) -> None:
        """Set a fix, or clear it (kept without a point, so the next submit is a new request)."""
        x, y = change.focus if change.focus else (None, None)
        row = {"source_digest": change.source_digest, "ratio": change.ratio, "focus_x": x, "focus_y": y}
        self.db.execute(sql.SET_FOCUS, row | {"set_at": at, "batch_id": batch_id})

    def focus_points(self, digests: Sequence[str]) -> list[FocusPoint]:
        digests = sorted(set(digests))
        found: list[FocusPoint] = []
        for chunk in chunks(digests):
            for row in self.db.execute(sql.FOCUS_POINTS, chunk, ids=len(chunk)).fetchall():
                focus = _stored_focus(row) if row["focus_x"] is not None else None
                found.append(FocusPoint(row["source_digest"], row["ratio"], focus, row["set_at"], row["batch_id"]))
        return found

    def fix_file_state(self, root: str) -> FixFileState:
        return FixFileState.from_text(self.db.scalar(sql.FIX_FILE_STATE, (f"fix_file:{root}",)))

    def update_fix_file_state(self, root: str, update: FixFileUpdate) -> None:
        with self.db.write(durable=True):
            self._update_fix_file_state(root, update)

    def _update_fix_file_state(self, root: str, update: FixFileUpdate) -> None:
        """Read, update and write the record of ``root`` inside the caller's write transaction."""
        name = f"fix_file:{root}"
        self.db.serialize_on(name)  # PostgreSQL: one writer of the row at a time (SQLite's lock does it)
        state = FixFileState.from_text(self.db.scalar(sql.FIX_FILE_STATE, (name,)))
        self.db.execute(sql.SET_FIX_FILE_STATE, (name, update.applied_to(state).to_text()))

    def source_roots(self, source: str) -> list[str]:
        return [row["source_root"] for row in self.db.execute(sql.SOURCE_ROOTS, (source,)).fetchall()]

    def change_focus(self, changes: Sequence[FocusChange]) -> None:
        if not changes:
            return
        with self.db.write(durable=True) as now:
            for change in sorted(changes, key=lambda c: (c.source_digest, c.ratio)):
                self._change_focus(change, None, iso(now))

    def _queue_snapshot(self, now: float) -> QueueSnapshot:
        """Runnable items in the ledger and the age of the oldest one (runnable: see :func:`.states.runnable`);
        whether workers are draining the queue and which batch waits longest are asked only when needed."""
        at = iso(now)
        row = self.db.execute(sql.QUEUE_SNAPSHOT, (at,)).fetchone()
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
        if self.db.scalar(sql.ANY_RUNNING):
            return True
        return bool(self.db.scalar(sql.RECENT_CLAIM, (iso(now - WORKER_SEEN_WINDOW),)))

    def _oldest_waiting_batch(self, at: str) -> str | None:
        return self.db.scalar(sql.OLDEST_WAITING_BATCH, (at,))

    def recorded_digest(self, source: str) -> str | None:
        base = source.split("?", 1)[0].split("#", 1)[0]
        return self.db.scalar(sql.RECORDED_DIGEST, (source, base, len(base) + 1, base + "?"))

    def cached_sources(self, paths: Iterable[str]) -> dict[str, CachedSource]:
        paths = list(paths)
        found: dict[str, CachedSource] = {}
        for chunk in chunks(paths):
            for row in self.db.execute(sql.CACHED_SOURCES, chunk, ids=len(chunk)).fetchall():
                found[row["path"]] = record(CachedSource, row)
        return found

    def published_keys(self, paths: Iterable[str]) -> dict[str, tuple[str | None, dict[str, object] | None]]:
        paths = list(paths)
        found: dict[str, tuple[str | None, dict[str, object] | None]] = {}
        for chunk in chunks(paths):
            for row in self.db.execute(sql.PUBLISHED_KEYS, chunk, paths=len(chunk)).fetchall():
                profile = loose_object(row["profile"])
                found[row["friendly_path"]] = (row["derivative_key"], profile)
        return found

    def remember_sources(self, entries: Iterable[CachedSource]) -> None:
        rows = [asdict(e) for e in entries]
        if not rows:
            return
        with self.db.write():
            # one order for every writer: no deadlock between two
            self.db.executemany(sql.REMEMBER_SOURCE, sorted(rows, key=lambda r: str(r["path"])))

    def requeue_missing_objects(self, batch_id: str, present: Callable[[str], bool]) -> int:
        missing = {path for path in {p for _, p in self._renderable_successes(batch_id)} if not present(path)}
        if not missing:
            return 0
        with self.db.write() as now:
            rows = [row for row, path in self._renderable_successes(batch_id) if path in missing]
            detail = "replay: its object file is gone; rendering it again"
            moved = self._log.move(
                iso(now), rows, ItemState.SUCCEEDED, ItemState.QUEUED, error_code="object_missing", detail=detail
            )
            for chunk in chunks(moved):
                self.db.execute(upkeep_sql.RENDER_AGAIN, list(chunk), ids=len(chunk))
            return len(moved)

    def _renderable_successes(self, batch_id: str) -> list[tuple[int, str]]:
        """(row, object path) of the succeeded items of a batch that is neither expired nor cancelled."""
        rows = self.db.execute(upkeep_sql.RENDERABLE_SUCCESSES, (batch_id,)).fetchall()
        return [(r["id"], r["object_path"]) for r in rows]

    @direct  # three steps, each retried
    def request_cancel(self, batch_id: str) -> BatchView:
        batch_id = self._retrier.run(self._views.resolve_batch_id, batch_id)
        self._retrier.run(self._cancel, batch_id)
        return self._retrier.run(self._views.batch, batch_id)

    def _cancel(self, batch_id: str) -> None:
        """The flag and the queued items in one transaction. The batch row is locked first: a
        publish in flight holds it shared until it commits, and every publish after sees the flag
        (the race rule); claims in flight hold their items, which are running when they commit."""
        with self.db.write(durable=True) as now:
            at = iso(now)
            flagged = self.db.scalar(sql.CANCEL_FLAG_LOCKED, (batch_id,))
            if flagged is None and not self._views.batch_settled(batch_id):
                self.db.execute(sql.FLAG_CANCEL, (at, batch_id))
                self._log.event(at, batch_id, None, None, None, "cancel_requested")
            queued = [r["id"] for r in self.db.execute(sql.QUEUED_OF_BATCH, (batch_id,)).fetchall()]
            self._log.move(at, queued, ItemState.QUEUED, ItemState.CANCELLED)


def _without_vanished_reuse(new: NewBatch, still_present: Callable[[str], bool]) -> NewBatch:
    """Items reusing an object that is gone since intake looked are queued to render again."""
    items = tuple(
        replace(item, state=ItemState.QUEUED, dedup=False, reused=None)
        if item.dedup and item.object_path is not None and not still_present(item.object_path)
        else item
        for item in new.items
    )
    return replace(new, items=items)


def _recorded_item(row: Row) -> NewItem:
    """An item as recorded: queued again when it was admitted to render (it has a derivative key)."""
    renderable = row["derivative_key"] is not None
    focus = (row["focus_x"], row["focus_y"]) if row["focus_x"] is not None else None
    return NewItem(
        item_id=row["item_id"],
        ratio=row["ratio"],
        source=row["source"],
        state=ItemState.QUEUED if renderable else ItemState.FAILED,
        source_digest=row["source_digest"],
        source_format=row["source_format"],
        source_width=row["source_width"],
        source_height=row["source_height"],
        focus=focus,
        fit=row["fit"] or "cover",
        error_code=None if renderable else row["error_code"],
        error_detail=None if renderable else row["error_detail"],
        derivative_key=row["derivative_key"],
        object_path=row["object_path"],
        friendly_path=row["friendly_path"],
        size=row["size"],
        format=row["format"],
        alt=row["alt"],
    )


def _item_row(batch_id: str, item: NewItem, at: str) -> dict[str, object]:
    focus_x, focus_y = item.focus if item.focus else (None, None)
    return {
        "batch_id": batch_id,
        "result": json.dumps(item.reused) if item.dedup and item.reused else None,
        "alt": item.alt,
        "item_id": item.item_id,
        "ratio": item.ratio,
        "size": item.size,
        "format": item.format,
        "source": item.source,
        "source_digest": item.source_digest,
        "source_format": item.source_format,
        "source_width": item.source_width,
        "source_height": item.source_height,
        "focus_x": focus_x,
        "focus_y": focus_y,
        "fit": item.fit if item.fit != "cover" else None,
        "state": item.state,
        "error_code": item.error_code,
        "error_detail": redacted_text(item.error_detail) if item.error_detail else None,
        "derivative_key": item.derivative_key,
        "object_path": item.object_path,
        "friendly_path": item.friendly_path,
        "dedup": int(item.dedup),
        "created_at": at,
        "updated_at": at,
        "queued_at": at if item.state == ItemState.QUEUED else None,
    }


#: What repairs a remembered crop fix that does not parse: setting or clearing it again.
FOCUS_WAY_OUT = "`thumbctl focus PHOTO --ratio RATIO --clear` forgets it, `--at X,Y` sets it again"


def _stored_focus(row: Row) -> tuple[float, float]:
    """A remembered crop fix's point: RowDamaged when a coordinate is no number (SQLite stores any type)."""
    point = []
    for column in ("focus_x", "focus_y"):
        try:
            point.append(float(row[column]))
        except (TypeError, ValueError):
            key = f"{row['source_digest']} {row['ratio']}"
            detail = f"{row[column]!r} is no number"
            raise RowDamaged("focus_points", key, column, detail, FOCUS_WAY_OUT) from None
    return point[0], point[1]
