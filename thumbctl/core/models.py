"""Plain data passed between modules: new batches going in, views coming out.

Views are read-only projections of ledger rows; their ``to_json`` methods give the stable JSON shapes of the README.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .fixes import FixFileUpdate, FocusChange


class _State(StrEnum):
    """A state that prints as its JSON value everywhere, a ``repr`` included, so a printed dict of
    counts (``print(batch.counts)``) reads as the JSON does."""

    def __repr__(self) -> str:
        return repr(self.value)


class ItemState(_State):
    """The states of an item (DESIGN.md section 4), defined once: in code, JSON and SQL."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ITEM_STATES: tuple[ItemState, ...] = tuple(ItemState)
TERMINAL_ITEM_STATES = frozenset({ItemState.SUCCEEDED, ItemState.FAILED, ItemState.CANCELLED})


class BatchState(_State):
    """The states of a batch, projected from its items (:func:`batch_state`), defined once."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "cancelled"


TERMINAL_BATCH_STATES = frozenset({BatchState.SUCCEEDED, BatchState.PARTIAL, BatchState.FAILED, BatchState.CANCELLED})


@dataclass(frozen=True)
class NewItem:
    """One derivative of a source, (ratio, size, format), as intake admits it."""

    item_id: str
    ratio: str
    source: str
    state: ItemState
    source_digest: str | None = None
    source_format: str | None = None
    source_width: int | None = None
    source_height: int | None = None
    focus: tuple[float, float] | None = None
    error_code: str | None = None
    error_detail: str | None = None
    derivative_key: str | None = None
    #: How the output frames its source: ``cover`` (a crop) or ``contain`` (the whole photo, padded).
    fit: str = "cover"
    object_path: str | None = None
    friendly_path: str | None = None
    dedup: bool = False
    #: The size asked for (longest side, px) and the output format of this derivative.
    size: int = 512
    format: str = "jpeg"
    #: What intake learnt of a reused output (its size, and whether the source was smaller
    #: than asked): the item's ``result``, so the batch's figures count it like a render.
    reused: dict[str, object] | None = None
    #: The manifest's ``alt`` text for the markup ("" when not given).
    alt: str = ""


@dataclass(frozen=True)
class NewBatch:
    """A normalized, digested request ready to be accepted by the ledger."""

    idempotency_key: str
    request_digest: str
    source_root: str
    out_dir: str
    profile: dict[str, object]
    items: tuple[NewItem, ...]
    max_attempts: int = 3
    deadline_seconds: float | None = None
    #: Render-time limits (max_pixels, max_bytes) the workers apply to this batch.
    limits: dict[str, object] | None = None
    #: The folder the batch's manifest goes in (as ``<batch_id>.json``); empty: OUT/batches.
    manifest_folder: str = ""
    #: The crop fixes the batch's manifest sets or clears, recorded with the batch.
    focus_changes: tuple[FocusChange, ...] = ()
    #: What this batch read of its source root's fix file (root, update), recorded with the batch.
    fix_file: tuple[str, FixFileUpdate] | None = None

    @property
    def manifest_dir(self) -> str:
        return self.manifest_folder or f"{self.out_dir}/batches"

    @property
    def runnable_count(self) -> int:
        return sum(1 for item in self.items if item.state == ItemState.QUEUED)


@dataclass(frozen=True)
class KeyedBatch:
    """The batch an idempotency key names (the newest of its chain) and whether its cancel was requested."""

    batch_id: str
    cancelled: bool


def batch_state(counts: dict[ItemState, int], total: int, cancel_requested: bool) -> BatchState:
    """Project a batch's state from its item counts and its cancel flag."""
    queued, running = counts[ItemState.QUEUED], counts[ItemState.RUNNING]
    if cancel_requested:
        return BatchState.CANCEL_REQUESTED if running or queued else BatchState.CANCELLED
    if running or (queued and counts[ItemState.SUCCEEDED]):
        return BatchState.RUNNING
    if queued:
        return BatchState.QUEUED
    if counts[ItemState.FAILED] == total:
        return BatchState.FAILED
    if counts[ItemState.FAILED] or counts[ItemState.CANCELLED]:
        return BatchState.PARTIAL
    return BatchState.SUCCEEDED


@dataclass(frozen=True)
class FailureView:
    item_id: str
    ratio: str
    error_code: str
    detail: str | None
    size: int | None = None
    format: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "item_id": self.item_id,
            "ratio": self.ratio,
            "size": self.size,
            "format": self.format,
            "error_code": self.error_code,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class BatchView:
    batch_id: str
    state: BatchState
    idempotency_key: str
    request_digest: str
    total: int
    counts: dict[ItemState, int]
    created_at: str
    updated_at: str
    cancel_requested_at: str | None
    finished_at: str | None
    out_dir: str
    manifest_path: str
    source_root: str
    queue_age_seconds: float | None = None
    #: When ``gc`` expired the batch (its records are final; its published names keep theirs), else None.
    expired_at: str | None = None
    #: The cancelled batch this one resumes (the same request, its finished outputs reused), else None.
    resumed_from: str | None = None
    failures: tuple[FailureView, ...] = ()
    replayed: bool = False
    #: Succeeded items whose source was smaller than the size asked (not enlarged); counted
    #: with the failures, for the end-of-run summary. Not part of the batch JSON: each
    #: item's ``result`` says it.
    smaller_than_target: int = 0
    #: Succeeded items whose name held another object's thumbnail thumbctl published for an
    #: earlier batch, which they replaced; and those that replaced a file thumbctl did not
    #: publish (``--overwrite``). Counted with the failures, and in the batch JSON with them.
    replaced: int = 0
    overwritten: int = 0
    #: The names of the ``replaced`` items (``-v`` lists them; not part of the batch JSON).
    replaced_names: tuple[str, ...] = ()

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_BATCH_STATES

    @property
    def done(self) -> int:
        return sum(self.counts[s] for s in TERMINAL_ITEM_STATES)

    def to_json(self, *, with_failures: bool = True) -> dict[str, object]:
        doc: dict[str, object] = {
            "batch_id": self.batch_id,
            "state": self.state,
            "replayed": self.replayed,
            "idempotency_key": self.idempotency_key,
            "request_digest": self.request_digest,
            "total": self.total,
            "counts": dict(self.counts),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "cancel_requested_at": self.cancel_requested_at,
            "finished_at": self.finished_at,
            "out_dir": self.out_dir,
            "manifest_path": self.manifest_path,
            "source_root": self.source_root,
            "queue_age_seconds": self.queue_age_seconds,
            "expired_at": self.expired_at,
            "resumed_from": self.resumed_from,
        }
        if with_failures:
            doc["replaced"] = self.replaced
            doc["overwritten"] = self.overwritten
            doc["failures"] = [f.to_json() for f in self.failures]
        return doc


@dataclass(frozen=True)
class ItemView:
    item_id: str
    source: str
    ratio: str
    state: ItemState
    attempt: int
    error_code: str | None
    error_detail: str | None
    derivative_key: str | None
    object_path: str | None
    friendly_path: str | None
    updated_at: str
    #: What the render chose: output size, crop window (upright source pixels), its score and policy.
    result: dict[str, object] | None = None
    #: The size asked for (longest side, px; ``result`` has the size produced) and the output format.
    size: int | None = None
    format: str | None = None
    #: The manifest's ``alt`` text ("" when not given).
    alt: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "item_id": self.item_id,
            "source": self.source,
            "ratio": self.ratio,
            "size": self.size,
            "format": self.format,
            "state": self.state,
            "attempt": self.attempt,
            "error_code": self.error_code,
            "error_detail": self.error_detail,
            "derivative_key": self.derivative_key,
            "object_path": self.object_path,
            "friendly_path": self.friendly_path,
            "updated_at": self.updated_at,
            "alt": self.alt,
            "result": self.result,
        }


@dataclass(frozen=True)
class EventView:
    """One line of the log. ``from_state``/``to_state`` are item states (:class:`ItemState`) on an item's
    event, and on a batch's event what happened to it (``cancel_requested``, ``removed``, ``expired``)."""

    seq: int
    at: str
    batch_id: str
    item_id: str | None
    ratio: str | None
    from_state: str | None
    to_state: str
    attempt: int | None
    worker: str | None
    error_code: str | None
    detail: str | None
    dedup: bool
    size: int | None = None
    format: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "at": self.at,
            "batch_id": self.batch_id,
            "item_id": self.item_id,
            "ratio": self.ratio,
            "size": self.size,
            "format": self.format,
            "from_state": self.from_state,
            "to_state": self.to_state,
            "attempt": self.attempt,
            "worker": self.worker,
            "error_code": self.error_code,
            "detail": self.detail,
            "dedup": self.dedup,
        }


@dataclass(frozen=True)
class CachedSource:
    """A stat-cache row: what a file held when it last had this stat signature."""

    path: str
    dev: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    digest: str
    format: str
    width: int
    height: int
    orientation: int = 1

    def matches(self, dev: int, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> bool:
        return (self.dev, self.inode, self.size, self.mtime_ns, self.ctime_ns) == (
            dev,
            inode,
            size,
            mtime_ns,
            ctime_ns,
        )


@dataclass(frozen=True)
class WorkerActivity:
    """What one worker process holds right now: one source, all of its claimed ratios."""

    worker: str
    item_id: str
    ratios: tuple[str, ...]
    since: str

    def to_json(self) -> dict[str, object]:
        return {"worker": self.worker, "item_id": self.item_id, "ratios": list(self.ratios), "since": self.since}


@dataclass(frozen=True)
class RecentFailure:
    at: str
    item_id: str
    ratio: str
    error_code: str | None
    detail: str | None
    retrying: bool

    def to_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "item_id": self.item_id,
            "ratio": self.ratio,
            "error_code": self.error_code,
            "detail": self.detail,
            "retrying": self.retrying,
        }


@dataclass(frozen=True)
class Activity:
    """A live snapshot of one batch (or of every batch) for progress views, read from the ledger."""

    at: str
    runnable: int
    delayed: int
    running: int
    queue_age_seconds: float | None
    #: Items that reached a terminal state during the last ``window_seconds``.
    completed_recently: int
    window_seconds: float
    workers: tuple[WorkerActivity, ...] = ()
    recent_failures: tuple[RecentFailure, ...] = ()

    @property
    def rate(self) -> float | None:
        """Items per second over the window, or None before anything finished in it."""
        if self.completed_recently == 0 or self.window_seconds <= 0:
            return None
        return self.completed_recently / self.window_seconds

    def eta_seconds(self, remaining: int) -> float | None:
        rate = self.rate
        if remaining == 0:
            return 0.0
        return remaining / rate if rate else None


# -- reconcile and gc -------------------------------------------------------------------

#: Finding kinds of ``thumbctl reconcile``, stable; what each means is in the README.
FINDING_KINDS = (
    "expired_lease",
    "dead_worker_lease",
    "cancel_not_finalized",
    "object_missing",
    "object_invalid",
    "friendly_link_missing",
    "thumbnail_outdated",
    "thumbnail_modified",
    "unrecorded_thumbnail",
    "stale_temp_file",
    "orphan_object",
)


@dataclass(frozen=True)
class StalledItem:
    """A live item (``running`` or ``queued``) as reconcile sees it, with its lease."""

    row: int
    batch_id: str
    item_id: str
    ratio: str
    state: ItemState
    lease_owner: str | None
    lease_token: str | None
    lease_expires_at: str | None
    cancel_requested_at: str | None


@dataclass(frozen=True)
class UnsettledName:
    """A ``failed`` item of a live batch with its object and friendly name, whose name no success
    and no recorded name claims: a crash between publishing the name and the commit leaves this."""

    row: int
    batch_id: str
    item_id: str
    ratio: str
    error_code: str | None
    object_path: str
    friendly_path: str
    out_dir: str


@dataclass(frozen=True)
class PublishedItem:
    """A ``succeeded`` item of a batch that has not expired, with what its object must be."""

    row: int
    batch_id: str
    item_id: str
    ratio: str
    size: int
    format: str
    derivative_key: str
    object_path: str
    friendly_path: str
    source_width: int
    source_height: int
    profile: dict[str, object]
    out_dir: str
    #: Whether this item is the newest success to claim its friendly name (it decides where
    #: the name points when batches share an output folder).
    owns_friendly_name: bool
    #: The object's size in bytes as the worker that rendered it recorded (None for reused outputs).
    output_bytes: int | None = None
    #: The sha256 (hex) of the object's bytes as the worker that rendered it recorded (None for
    #: reused outputs and renders recorded before it was).
    output_sha256: str | None = None
    #: Its batch expired; the item is checked because it still owns its name's record.
    expired: bool = False
    #: ``cover`` or ``contain``: the output's size follows from it.
    fit: str = "cover"


@dataclass(frozen=True)
class PublishedName:
    """A published name's record: what thumbctl published there last, kept whatever becomes of the
    batch that published it."""

    friendly_path: str
    object_path: str
    #: The version publishing returned (None: published before versions were recorded).
    name_version: str | None
    source: str
    batch_id: str
    item_row: int | None
    #: The id of the item that published it (None when that row is gone).
    item_id: str | None = None


@dataclass(frozen=True)
class Finding:
    """One problem reconcile found; ``repaired`` once a safe repair was applied."""

    kind: str
    batch_id: str | None
    item_id: str | None
    detail: str
    ratio: str | None = None
    path: str | None = None
    repaired: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "batch_id": self.batch_id,
            "item_id": self.item_id,
            "ratio": self.ratio,
            "path": self.path,
            "detail": self.detail,
            "repaired": self.repaired,
        }


@dataclass(frozen=True)
class ObjectStamp:
    """Which file an object path names, and its state: any write, rename or relink changes it."""

    dev: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True)
class ReconcileReport:
    findings: tuple[Finding, ...]
    #: Objects checked: decoded, unchanged since last decoded, or matched by a bucket's kept checksum; else wrong.
    objects_checked: int = 0
    objects_decoded: int = 0
    objects_unchanged: int = 0
    objects_matched: int = 0

    @property
    def remaining(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.repaired)

    @property
    def clean(self) -> bool:
        """No finding is left unrepaired."""
        return not self.remaining

    def to_json(self) -> dict[str, object]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "clean": self.clean,
            "objects": {
                "checked": self.objects_checked,
                "decoded": self.objects_decoded,
                "unchanged": self.objects_unchanged,
                "matched": self.objects_matched,
            },
        }


@dataclass(frozen=True)
class GcReport:
    """What ``gc`` removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    expired_batches: tuple[str, ...]
    objects_removed: int
    temp_files_removed: int
    manifests_removed: int
    bytes_reclaimed: int
    sheets_removed: int = 0
    #: Files gc could not remove (path: reason); they stay, and gc exits 1.
    errors: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "expired_batches": list(self.expired_batches),
            "objects_removed": self.objects_removed,
            "temp_files_removed": self.temp_files_removed,
            "manifests_removed": self.manifests_removed,
            "sheets_removed": self.sheets_removed,
            "bytes_reclaimed": self.bytes_reclaimed,
            "errors": list(self.errors),
        }
