"""Delivering a claim's rendered derivatives: each one's temp file written and verified, the
thumbnail's copy made ahead, the publish in the ledger's transaction, and the source's preview
beside the first object published."""

from __future__ import annotations

import contextlib
import io
import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from ..core.errors import ItemFailure
from ..core.faults import Faults
from ..core.profile import OUTPUT_FORMATS
from ..imaging import CropAnalysis, preview_jpeg, verify_output
from ..ledger import Claim, ClaimedItem, Ledger
from ..publishing.publisher import Publisher
from ..storage.locations import object_name_of, object_store_of, output_target_at, preview_path_of
from ..storage.outputs import CopyAhead
from .rendering import Rendering, SharedRender


class Delivery:
    """Where one claim's derivatives go and how they get there: its output target, the store
    its objects lie in and the publisher between them and the ledger."""

    def __init__(
        self,
        ledger: Ledger,
        claim: Claim,
        faults: Faults,
        writer: Executor,
        rendering: Rendering,
        *,
        previews: bool,
    ) -> None:
        self.claim = claim
        self.writer = writer
        self.rendering = rendering
        #: False for a stand-in renderer (a queue benchmark), which makes no preview.
        self.previews = previews
        self.target = output_target_at(claim.out_dir)
        #: Where the claim's objects go: the store their recorded paths lie in (STORE, or OUT for
        #: items of the earlier layout; a folder or ``s3://bucket/prefix``).
        self.store = object_store_of(claim.items[0].object_path)
        #: The crop analysis of the claim's source; its small copy becomes the contact sheet's preview.
        self.analysis: CropAnalysis | None = None
        #: The preview once written, beside the first object this claim published.
        self.preview: str | None = None
        overwrite = bool(claim.profile.get("overwrite", False))
        self.publisher = Publisher(ledger, self.target, overwrite, faults, claim.out_dir)

    def preview_of(self, item: ClaimedItem) -> str | None:
        """Where the source's preview is (or will be, once ``item`` is published): the contact sheet
        draws the crop windows on it. A stand-in renderer (a queue benchmark) makes none."""
        if not self.previews or self.analysis is None:
            return None
        return self.preview or preview_path_of(item.object_path)

    def write_preview(self, item: ClaimedItem) -> None:
        """Save the analysis copy as a small JPEG beside ``item``'s object, just published, once per
        claim (kept if already there: the same derivative key gives the same copy). A review aid:
        failing to write it costs the preview, never the item."""
        analysis = self.analysis
        if self.preview is not None or not self.previews or analysis is None:
            return
        with contextlib.suppress(OSError):
            self.store.write_preview(object_name_of(item.object_path), lambda: preview_jpeg(analysis.preview()))
            self.preview = preview_path_of(item.object_path)

    def write_verified(self, data: bytes, shared: SharedRender) -> Staged:
        """A temp file of the derivative's verified bytes (they decode, at the exact size, as the
        media type) being written, and the thumbnail's own copy of them being made in OUT (where the
        target makes one: a local folder, :meth:`~thumbctl.storage.outputs.OutputTarget.copy_ahead`).
        The temp file holds exactly these bytes (written whole and fsynced, or removed), so they
        are verified in memory, on this thread, while the writer thread writes and fsyncs them, then
        copies and fsyncs the thumbnail's copy: the waits for the disk overlap the decode and what
        follows up to the publish, which waits for both before its transaction. Bytes that fail are
        removed again; the same bytes need no second look."""
        extension = OUTPUT_FORMATS[shared.format]
        if shared.verified:
            ready: Future[str] = Future()
            ready.set_result(self.store.stage(data, extension))
            return Staged(self, ready)
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
            Staged(self, writing, thumbnail).drop()
            shared.error = ItemFailure("worker_crashed", f"the encoded output {problem}")
            raise shared.error
        shared.verified = True
        return Staged(self, writing, thumbnail)

    def _stage_thumbnail(self, writing: Future[str], size: int) -> CopyAhead | None:
        """On the writer thread, once the object's temp file is written: the thumbnail's copy of it
        in OUT's temp folder, fsynced. None when it cannot be made: the publish then copies the
        object inside its transaction, as it always could, and meets the same error there."""
        try:
            with self.store.read_staged(writing.result()) as fd:
                return self.target.copy_ahead(fd, size)
        except (OSError, ValueError):
            return None

    def publish(self, staged_files: Staged, data: bytes, item: ClaimedItem, result: dict[str, Any]) -> str:
        """Publish ``item`` through the publisher, inside the ledger's publish transaction. The ledger
        runs the transaction again when the connection was lost before the commit (a server restart):
        the first run used up the temp file (it is always gone after the object is put), so a run
        after the first stages the verified bytes again; the object already there then counts as a
        duplicate delivery. The link time is added to the result's timings (the temp write and
        verification are already in it)."""
        started = time.perf_counter()
        temps = iter([staged_files.temp.result()])  # both waited for before the transaction
        staged_thumbnail = staged_files.thumbnail.result() if staged_files.thumbnail is not None else None
        geometry = self.rendering.geometries[item.row]

        def staged() -> str:
            nonlocal started
            started = time.perf_counter()
            return next(temps, None) or self.store.stage(data, OUTPUT_FORMATS[item.format])

        def published() -> None:
            self.write_preview(item)
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


@dataclass
class Staged:
    """A derivative's temp file being written, and the thumbnail's copy of it being made ahead
    (None where the target makes none, or the bytes were verified before)."""

    delivery: Delivery
    temp: Future[str]
    thumbnail: Future[CopyAhead | None] | None = None

    def wait(self) -> None:
        """Both written (or raised): a pause or crash at the next checkpoint finds them on disk,
        whatever the writer's pace."""
        self.temp.result()
        if self.thumbnail is not None:
            self.thumbnail.result()

    def drop(self) -> None:
        """Remove what was written and not used up by a publish (nothing when it was)."""
        with contextlib.suppress(Exception):
            self.delivery.store.discard(self.temp.result())
        drop_thumbnail(self.thumbnail)


def drop_thumbnail(thumbnail: Future[CopyAhead | None] | None) -> None:
    """Remove a thumbnail's copy made ahead that was not placed (nothing when it was)."""
    if thumbnail is None:
        return
    with contextlib.suppress(Exception):
        staged = thumbnail.result()
        if staged is not None:
            staged.drop()
