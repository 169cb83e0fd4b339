"""One worker process: claim a source's items, render them, publish each exactly once.

The loop: claim (one item of each distinct derivative key of one source, plus a
bounded number that share those keys, under one lease) → checkpoint
``before_decode`` → read and verify the source, decode it once per DCT scale its
sizes need and analyse its crop once on a small copy that does not depend on the
sizes (the window of each ratio is chosen once and scaled for each size) → for each
derivative key: checkpoint ``before_encode`` → crop, resample, encode once →
for each item of that key: write a temp file (the first one verified) →
checkpoint ``before_publish`` → publish in one ledger transaction (cancel flag
and lease checked, object linked, friendly name switched, item marked
``succeeded``). ``--item-timeout`` times the decode and each key's render
separately (the ledger's ``stage_started_at``); the gap at ``before_encode`` is
between stages. A heartbeat thread keeps the lease alive; if the lease is
lost, the worker stops touching the claim.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from ..config.s3location import S3Options
from ..config.settings import busy_policy
from ..core.errors import ItemFailure, LedgerBusy, LedgerFault, LedgerUnavailable, ThumbctlError
from ..core.faults import Faults
from ..core.models import ItemState
from ..core.proc import owner_id, owner_is_dead
from ..core.profile import OUTPUT_FORMATS, Limits, UrlRules
from ..core.retries import Backoff
from ..imaging import CropAnalysis, DecodedSource, SourceDecoder, preview_jpeg, verify_output
from ..ledger import Claim, ClaimedItem, Ledger, is_server_url
from ..publishing.publisher import Publisher
from ..sources.downloads import is_url
from ..sources.downloads.remote import read_verified_url
from ..sources.scan import read_source
from ..storage.fsafe import OutsideOutput
from ..storage.hosts import check_on_host
from ..storage.locations import object_name_of, object_store_of, output_target_at, preview_path_of, use_options
from ..storage.outputs import CopyAhead
from .heap import release_freed_memory
from .rendering import Framing, Renderer, Rendering, SharedRender, decoder_background


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker process of a pool is told (picklable, for spawn)."""

    db_path: str
    batch_id: str | None = None
    until_idle: bool = True
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 10.0
    #: The longest wait between two empty claims (see :func:`idle_waits`).
    poll_seconds: float = 0.25
    backoff: Backoff = field(default_factory=Backoff)
    #: Time limit in seconds for each stage of a claim: the source's decode, and each render
    #: (with the publishes of its items); 0 for none.
    item_timeout: float = 300.0
    #: The S3 settings the stores and targets of ``s3://`` locations are opened with.
    s3: S3Options = field(default_factory=S3Options)


class LeaseLost(Exception):
    """The claim's lease was rescued by someone else; drop the claim."""


class Coordinator:
    """A worker's end of the pipe its coordinator (the pool's process) holds the other end of.

    The coordinator writes nothing to it after the configuration of a worker forked ahead
    of its batch (read before this is made), so the end reading ready means end-of-file:
    the coordinator is gone (even if it died before this process began to run), whoever
    the parent process is now. The worker writes one byte after its first claim, so the
    coordinator can tell a worker that died at work from one that never started.
    """

    def __init__(self, link: Connection | None = None) -> None:
        self.link = link
        self._reported = False

    def gone(self) -> bool:
        return self.link is not None and self.link.poll(0)

    def took_work(self) -> None:
        if self.link is not None and not self._reported:
            self._reported = True
            with contextlib.suppress(OSError):  # the coordinator died meanwhile; gone() says so next
                self.link.send_bytes(b"c")


def open_ledger(target: str) -> Ledger:
    """The ledger of a worker process (or its heartbeat). A server that cannot be reached yet
    (restarting, or refusing connections for a moment) is waited for within the busy policy's
    bound, as a lost connection is later: the coordinator reached it already, so this is an
    outage, not a wrong URL. A file ledger opens at once (a full disk is reported, not waited out)."""
    if not is_server_url(target):
        return Ledger(target)
    for attempt in busy_policy().retrying(LedgerUnavailable):
        with attempt:
            return Ledger(target)
    raise AssertionError("unreachable")  # pragma: no cover - tenacity re-raises the last error


def run_worker(
    config: WorkerConfig,
    stop: threading.Event,
    faults: Faults | None = None,
    coordinator: Coordinator | None = None,
    renderer: Renderer | None = None,
) -> int:
    """Claim and process until idle (``until_idle``), ``stop`` is set or the coordinator is gone;
    returns claims processed. An orphaned worker finishes the source in hand, then exits."""
    faults = faults or Faults()
    faults.hit("worker_start")
    use_options(config.s3)
    coordinator = coordinator or Coordinator()
    owner = owner_id()
    processed = 0
    waits = idle_waits(config.poll_seconds)
    rested = True
    with (
        open_ledger(config.db_path) as ledger,
        Heartbeat(config) as heartbeat,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="temp-writer") as writer,
    ):
        while not stop.is_set() and not coordinator.gone():
            try:
                claim = ledger.queue.claim(
                    owner,
                    batch_id=config.batch_id,
                    lease_seconds=config.lease_seconds,
                    is_dead=owner_is_dead,
                    delay_for=config.backoff.delay_for,
                )
                idle = claim is None and config.until_idle and ledger.queue.queue_idle(config.batch_id)
            except LedgerBusy:  # the busy policy's bound passed; nothing was taken: try again later
                claim, idle = None, False
            if claim is None:
                if idle:
                    break
                if not rested:  # the heap kept for the next source is not needed while there is none
                    release_freed_memory()
                    rested = True
                faults.hit("ran_dry")
                stop.wait(next(waits))
                continue
            waits = idle_waits(config.poll_seconds)
            rested = False
            coordinator.took_work()
            with heartbeat.tracking(claim.token) as lost:
                ClaimRun(ledger, claim, faults, config, lost, writer, renderer).run()
            processed += 1
    return processed


#: The first wait of a worker whose claim came back empty.
FIRST_IDLE_WAIT = 0.02


def idle_waits(longest: float) -> Iterator[float]:
    """The waits between a worker's empty claims: 20 ms, doubling up to ``longest``. At the end
    of a batch a worker runs dry while another finishes the last source; the batch is done
    only when both have stopped, and with a fixed ``longest`` wait the idle one would notice
    up to that long after the last publish. Doubling, it notices within about as long
    again as it waited, and a worker left idle soon asks at the ``longest`` pace."""
    wait = min(FIRST_IDLE_WAIT, longest)
    while True:
        yield wait
        wait = min(wait * 2, longest)


class Heartbeat:
    """Extends the lease of the claim in hand every ``heartbeat_seconds``.

    One thread and one connection per worker process, for all its claims;
    if the ledger says the lease is gone, ``lost`` is set for that claim.
    """

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.lost = threading.Event()
        self._token: str | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @contextmanager
    def tracking(self, token: str) -> Iterator[threading.Event]:
        with self._lock:
            self._token = token
            self.lost.clear()
        try:
            yield self.lost
        finally:
            with self._lock:
                self._token = None

    def _beat(self) -> None:
        try:
            ledger = open_ledger(self.config.db_path)
        except LedgerFault:  # the worker's own connection meets the same fault and stops the worker
            return
        with ledger:
            while not self._done.wait(self.config.heartbeat_seconds):
                with self._lock, contextlib.suppress(ThumbctlError, sqlite3.Error):  # try again next beat
                    if self._token is not None and ledger.queue.heartbeat(self._token, self.config.lease_seconds) == 0:
                        self.lost.set()


class ClaimRun:
    """Processing of one claim, with its checkpoints."""

    def __init__(
        self,
        ledger: Ledger,
        claim: Claim,
        faults: Faults,
        config: WorkerConfig,
        lost: threading.Event,
        writer: Executor,
        renderer: Renderer | None = None,
    ) -> None:
        self.ledger = ledger
        self.writer = writer
        self.renderer = renderer
        self.claim = claim
        self.faults = faults
        self.config = config
        self.lost = lost
        self.target = output_target_at(claim.out_dir)
        #: Where the claim's objects go: the store their recorded paths lie in (STORE, or OUT for
        #: items of the earlier layout; a folder or ``s3://bucket/prefix``).
        self.store = object_store_of(claim.items[0].object_path)
        self.source_bytes = 0
        #: The crop analysis of the claim's source; its small copy becomes the contact sheet's preview.
        self.analysis: CropAnalysis | None = None
        #: The preview once written, beside the first object this claim published.
        self.preview: str | None = None
        self.source_timings: dict[str, float] = {}
        profile = claim.profile
        self.publisher = Publisher(ledger, self.target, bool(profile.get("overwrite", False)), faults, claim.out_dir)
        self.rendering = Rendering(claim, renderer)

    def run(self) -> None:
        try:
            if self._checkpoint("before_decode"):
                return
            try:
                check_on_host(self.claim.out_dir, self.claim.items[0].object_path, self.ledger.backend)
                with self._timed(self.source_timings, "decode_ms"):
                    decoder = self._decode()
                with self._timed(self.source_timings, "crop_ms"):
                    analysis = self.rendering.analyse(decoder)
                decoder.release()  # every reduction the claim renders from is made
            except ItemFailure as failure:
                self._fail([i.row for i in self.claim.items], failure.code, failure.detail)
                return
            self.analysis = analysis
            self.ledger.queue.start_stage(self.claim, [])  # the decode stage is over
            for group in self._by_derivative_key():
                if self._checkpoint("before_encode") or self._render_and_publish(decoder, group) == "stop":
                    return
        except LeaseLost:
            return
        except LedgerBusy as busy:  # waited out to the policy's bound: give the claim back, not an attempt
            self._release(busy)
        except LedgerFault as fault:  # the ledger cannot record anything: no item is to blame
            self._release(fault)
            raise
        except Exception as exc:  # a bug or resource error: retried like a crash
            rows = [i.row for i in self.claim.items]
            self._fail(rows, "worker_crashed", f"{type(exc).__name__}: {exc}")
        finally:
            self.target.remove_empty_tmp()  # OUT/.tmp exists only while files are being written

    def _release(self, fault: LedgerFault) -> None:
        """Give the claim back (attempt not counted) if the ledger takes that write; if not, the
        lease is left to expire and be rescued."""
        with contextlib.suppress(LedgerFault):
            self.ledger.queue.release(self.claim, f"{fault.code}: the claim was given back; the attempt does not count")

    def _checkpoint(self, name: str) -> bool:
        """Fault point, lease check and cancel check; True when the claim must stop."""
        self.faults.hit(name)
        if self.lost.is_set():
            raise LeaseLost
        return self.ledger.queue.cancel_if_requested(self.claim)

    @staticmethod
    @contextmanager
    def _timed(into: dict[str, float], name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            into[name] = round((time.perf_counter() - started) * 1000, 3)

    def _fail(self, rows: list[int], code: str, detail: str) -> None:
        self.ledger.queue.fail(self.claim, rows, code, detail, self.config.backoff.delay_for)

    def _preview_of(self, item: ClaimedItem) -> str | None:
        """Where the source's preview is (or will be, once ``item`` is published): the contact sheet
        draws the crop windows on it. A stand-in ``renderer`` (a queue benchmark) makes none."""
        if self.renderer is not None or self.analysis is None:
            return None
        return self.preview or preview_path_of(item.object_path)

    def _write_preview(self, item: ClaimedItem) -> None:
        """Save the analysis copy as a small JPEG beside ``item``'s object, just published, once per
        claim (kept if already there: the same derivative key gives the same copy). A review aid:
        failing to write it costs the preview, never the item."""
        analysis = self.analysis
        if self.preview is not None or self.renderer is not None or analysis is None:
            return
        with contextlib.suppress(OSError):
            self.store.write_preview(object_name_of(item.object_path), lambda: preview_jpeg(analysis.preview()))
            self.preview = preview_path_of(item.object_path)

    def _decode(self) -> SourceDecoder:
        """Read the source and decode it at every DCT scale the claim's sizes need, each scale once
        (a source that does not decode fails all the claim's items here, before any render)."""
        limits = Limits()
        max_bytes = int(self.claim.limits.get("max_bytes", limits.max_bytes))
        max_pixels = int(self.claim.limits.get("max_pixels", limits.max_pixels))
        data = self._read_source(max_bytes)
        self.source_bytes = len(data)
        decoder = SourceDecoder(
            data,
            self.claim.source_format,
            max_pixels,
            background=decoder_background(self.claim.profile),
            label=self.claim.source,
        )
        decoder.expect(self.rendering.decode_scales())
        for item in self.claim.items:
            self.rendering.decoded_for(decoder, item)
        return decoder

    def _read_source(self, max_bytes: int) -> bytes:
        """The claim's source read again and checked against the digest accepted at submit: from
        its folder, or (a URL source) downloaded under the URL rules the batch recorded."""
        claim = self.claim
        if is_url(claim.source):
            rules = UrlRules.from_json(claim.limits.get("urls"))
            return read_verified_url(claim.source, claim.source_digest, max_bytes, rules)
        return read_verified_source(claim.source_root, claim.source, claim.source_digest, max_bytes)

    def _by_derivative_key(self) -> list[list[ClaimedItem]]:
        """The claim's items grouped by derivative key, in claim order: one render per group."""
        groups: dict[str, list[ClaimedItem]] = {}
        for item in self.claim.items:
            groups.setdefault(item.derivative_key, []).append(item)
        return list(groups.values())

    def _render_and_publish(self, decoder: SourceDecoder, group: list[ClaimedItem]) -> str:
        """Render the group's derivative once (a timed stage of its own) and publish it for each item."""
        self.ledger.queue.start_stage(self.claim, [item.row for item in group])
        decoded = self.rendering.decoded_for(decoder, group[0])
        shared = self.rendering.shared_for(group[0])
        for item in group:
            if self._publish_item(decoded, item, shared) == "stop":
                return "stop"
        return "next"

    def _publish_item(self, decoded: DecodedSource, item: ClaimedItem, shared: SharedRender) -> str:
        geometry = shared.geometry
        temp: Future[str] | None = None
        thumbnail: Future[CopyAhead | None] | None = None
        timings = dict(self.source_timings)
        reused = shared.output is not None
        try:
            data, framing = self._rendered(decoded, item, shared, timings)
            with self._timed(timings, "publish_ms"):
                temp, thumbnail = self._write_verified(data, shared)
                result = {  # made while the writer thread writes
                    "width": geometry.out_w,
                    "height": geometry.out_h,
                    **framing.to_result(),
                    "source_smaller_than_target": geometry.limited,
                    "source_bytes": self.source_bytes,
                    "output_bytes": len(data),
                    "output_sha256": hashlib.sha256(data).hexdigest(),
                    "shared_render": reused,
                    "timings": timings,
                    **self.rendering.placeholder(framing),
                }
                if preview := self._preview_of(item):
                    result["preview"] = preview
                temp.result()  # staged (or raised) before the checkpoint: a pause or crash there finds
                if thumbnail is not None:  # the render's files written, whatever the writer's pace
                    thumbnail.result()
            if self._checkpoint("before_publish"):
                return "stop"
            outcome = self._publish(temp, data, item, result, thumbnail)
        except ItemFailure as failure:
            self._fail([item.row], failure.code, failure.detail)
            return "next"
        except OutsideOutput as exc:  # permanent: retrying would meet the same symlink
            self._fail([item.row], "path_outside_root", str(exc))
            return "next"
        except OSError as exc:
            self._fail([item.row], "io_error", f"{exc.strerror or exc}")
            return "next"
        finally:
            self._discard(temp)
            drop_thumbnail(thumbnail)
        if outcome == "lost":
            raise LeaseLost
        if outcome == ItemState.CANCELLED:
            self.ledger.queue.cancel_if_requested(self.claim)
            return "stop"
        self.faults.hit("after_commit")
        return "next"

    def _rendered(
        self, decoded: DecodedSource, item: ClaimedItem, shared: SharedRender, timings: dict[str, float]
    ) -> tuple[bytes, Framing]:
        """The derivative's bytes and what they kept (see :mod:`thumbctl.engine.rendering`)."""
        return self.rendering.rendered(decoded, item, shared, lambda: self._timed(timings, "encode_ms"))

    def _write_verified(self, data: bytes, shared: SharedRender) -> tuple[Future[str], Future[CopyAhead | None] | None]:
        """A temp file of the derivative's verified bytes (they decode, at the exact size, as the
        media type) being written, and the thumbnail's own copy of them being made in OUT (where the
        target makes one: a local folder, :meth:`~thumbctl.storage.outputs.OutputTarget.copy_ahead`). The temp file holds exactly these bytes (written whole and fsynced, or
        removed), so they are verified in memory, on this thread, while the writer thread writes
        and fsyncs them, then copies and fsyncs the thumbnail's copy: the waits for the disk overlap
        the decode and what follows up to the publish, which waits for both before its
        transaction. Bytes that fail are removed again; the same bytes need no second look."""
        extension = OUTPUT_FORMATS[shared.format]
        if shared.verified:
            staged: Future[str] = Future()
            staged.set_result(self.store.stage(data, extension))
            return staged, None
        writing = self.writer.submit(self.store.stage, data, extension)
        thumbnail = self.writer.submit(self._stage_thumbnail, writing, len(data))
        try:
            problem = verify_output(io.BytesIO(data), shared.format, shared.geometry.out_w, shared.geometry.out_h)
        except BaseException:
            with contextlib.suppress(Exception):
                self.store.discard(writing.result())
            drop_thumbnail(thumbnail)
            raise
        if problem:
            self._discard(writing)
            drop_thumbnail(thumbnail)
            shared.error = ItemFailure("worker_crashed", f"the encoded output {problem}")
            raise shared.error
        shared.verified = True
        return writing, thumbnail

    def _discard(self, temp: Future[str] | None) -> None:
        """Remove a temp file that was written and not used up (nothing when it never was)."""
        if temp is not None:
            with contextlib.suppress(Exception):
                self.store.discard(temp.result())

    def _stage_thumbnail(self, writing: Future[str], size: int) -> CopyAhead | None:
        """On the writer thread, once the object's temp file is written: the thumbnail's copy of it
        in OUT's temp folder, fsynced. None when it cannot be made: the publish then copies the
        object inside its transaction, as it always could, and meets the same error there."""
        try:
            with self.store.read_staged(writing.result()) as fd:
                return self.target.copy_ahead(fd, size)
        except (OSError, ValueError):
            return None

    def _publish(
        self,
        temp: Future[str],
        data: bytes,
        item: ClaimedItem,
        result: dict[str, Any],
        thumbnail: Future[CopyAhead | None] | None = None,
    ) -> str:
        """Publish ``item`` through the publisher, inside the ledger's publish transaction. The ledger
        runs the transaction again when the connection was lost before the commit (a server restart):
        the first run used up the temp file (it is always gone after the object is put), so a run
        after the first stages the verified bytes again; the object already there then counts as a
        duplicate delivery. The link time is added to the result's timings (the temp write and
        verification are already in it)."""
        started = time.perf_counter()
        temps = iter([temp.result()])  # both waited for before the transaction
        staged_thumbnail = thumbnail.result() if thumbnail is not None else None
        geometry = self.rendering.geometries[item.row]

        def staged() -> str:
            nonlocal started
            started = time.perf_counter()
            return next(temps, None) or self.store.stage(data, OUTPUT_FORMATS[item.format])

        def published() -> None:
            self._write_preview(item)
            timings = result["timings"]
            timings["publish_ms"] = round(timings["publish_ms"] + (time.perf_counter() - started) * 1000, 3)

        return self.publisher.publish_render(
            self.claim,
            item,
            self.store,
            staged,
            data,
            verify=lambda existing: verify_output(existing, item.format, geometry.out_w, geometry.out_h),
            result=result,
            published=published,
            thumbnail=staged_thumbnail,
        )


def drop_thumbnail(thumbnail: Future[CopyAhead | None] | None) -> None:
    """Remove a thumbnail's copy made ahead that was not placed (nothing when it was)."""
    if thumbnail is None:
        return
    with contextlib.suppress(Exception):
        staged = thumbnail.result()
        if staged is not None:
            staged.drop()


def read_verified_source(root: str, path: str, digest: str, max_bytes: int) -> bytes:
    """The source's bytes, if they still are the ones accepted at submit.

    Opened below ``root`` without following any symlink and only if it is a regular
    file, read up to ``max_bytes`` (see :func:`~thumbctl.sources.scan.open_source`).
    """
    data = read_source(root, path, max_bytes)
    if hashlib.sha256(data).hexdigest() != digest:
        raise ItemFailure("source_changed", f"{path} changed since it was submitted")
    return data
