"""Processing one claim, with its checkpoints: the source decoded and its crop analysed once, then
for each derivative key (checkpoint ``before_encode``) one render, delivered to each item of that
key (checkpoint ``before_publish``). A failure is recorded against the items it concerns; a lost
lease drops the claim; a busy or faulty ledger gives it back."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager

from ..core.errors import ItemFailure, LedgerBusy, LedgerFault
from ..core.faults import Faults
from ..core.models import ItemState
from ..imaging import DecodedSource, SourceDecoder
from ..ledger import Claim, ClaimedItem, Ledger
from ..storage.fsafe import OutsideOutput
from .decoding import decode_claim
from .delivery import Delivery, Staged
from .rendering import Framing, Renderer, Rendering, SharedRender


class LeaseLost(Exception):
    """The claim's lease was rescued by someone else; drop the claim."""


class ClaimRun:
    """Processing of one claim, with its checkpoints."""

    def __init__(
        self,
        ledger: Ledger,
        claim: Claim,
        faults: Faults,
        delay_for: Callable[[int], float],
        lost: threading.Event,
        writer: Executor,
        renderer: Renderer | None = None,
    ) -> None:
        self.ledger = ledger
        self.claim = claim
        self.faults = faults
        #: The backoff of a transient failure, by attempt.
        self.delay_for = delay_for
        self.lost = lost
        self.source_bytes = 0
        self.source_timings: dict[str, float] = {}
        self.rendering = Rendering(claim, renderer)
        self.delivery = Delivery(ledger, claim, faults, writer, self.rendering, previews=renderer is None)

    def run(self) -> None:
        try:
            if self._checkpoint("before_decode"):
                return
            try:
                with self._timed(self.source_timings, "decode_ms"):
                    decoder, self.source_bytes = decode_claim(self.claim, self.rendering, self.ledger.backend)
                with self._timed(self.source_timings, "crop_ms"):
                    analysis = self.rendering.analyse(decoder)
                decoder.release()  # every reduction the claim renders from is made
            except ItemFailure as failure:
                self._fail([i.row for i in self.claim.items], failure.code, failure.detail)
                return
            self.delivery.analysis = analysis
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
            self.delivery.target.remove_empty_tmp()  # OUT/.tmp exists only while files are being written

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
        self.ledger.queue.fail(self.claim, rows, code, detail, self.delay_for)

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
        delivery = self.delivery
        staged: Staged | None = None
        timings = dict(self.source_timings)
        reused = shared.output is not None
        try:
            data, framing = self._rendered(decoded, item, shared, timings)
            with self._timed(timings, "publish_ms"):
                staged = delivery.write_verified(data, shared)
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
                if preview := delivery.preview_of(item):
                    result["preview"] = preview
                staged.wait()  # before the checkpoint
            if self._checkpoint("before_publish"):
                return "stop"
            outcome = delivery.publish(staged, data, item, result)
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
            if staged is not None:
                staged.drop()
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
