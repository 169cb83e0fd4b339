"""Running batches: the foreground run of ``submit``, ``work``, and ``cancel --wait``.

Policy on top of the pool: what the first Ctrl-C means (a durable cancel for
a foreground batch; a graceful stop for ``work``), and writing each finished
batch's JSON manifest (and, at the end of a foreground run, its contact sheet).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..config.options import RunOptions, lease_seconds
from ..core.errors import CannotWrite, Interrupted
from ..core.models import BatchView, EventView, ItemState, ItemView
from ..core.proc import host_id, owner_is_dead
from ..core.retries import Backoff
from ..ledger import Ledger, iso
from ..review.markup import manifest_present
from ..review.markup import write_batch_manifest as write_manifest
from ..review.sitemanifest import SITE_MANIFEST, SiteManifestWrite, write_site_manifest
from ..storage.hosts import out_on_host

if TYPE_CHECKING:  # imported where a run starts: reading commands need neither multiprocessing nor Pillow
    from .pool import Standby, Supervision, WorkerDeath
    from .worker import WorkerConfig


class RunObserver(Protocol):
    """What a run tells its caller (the CLI renders it; the library never prints)."""

    def tick(self, ledger: Ledger) -> None: ...

    def cancel_recorded(self, batch: BatchView) -> None: ...

    def stopping(self) -> None: ...

    def worker_died(self, death: WorkerDeath, restarted: bool) -> None: ...

    def finish(self, ledger: Ledger) -> None: ...


class SilentObserver:
    def tick(self, ledger: Ledger) -> None:
        pass

    def cancel_recorded(self, batch: BatchView) -> None:
        pass

    def stopping(self) -> None:
        pass

    def worker_died(self, death: WorkerDeath, restarted: bool) -> None:
        pass

    def finish(self, ledger: Ledger) -> None:
        pass


@dataclass(frozen=True)
class RunResult:
    batch: BatchView | None
    supervision: Supervision
    #: Batch manifests that could not be written (path: reason); the batches themselves are done.
    manifest_errors: tuple[str, ...] = ()
    #: The contact sheet written at the end of the run (None when off or not written).
    sheet_path: str | None = None
    #: Why the contact sheet could not be written.
    sheet_error: str | None = None
    #: ``work``: items (in its scope) that failed while it ran, on any host.
    failed: int = 0
    #: ``work``: what this host's workers finished while it ran, per final state.
    finished: dict[ItemState, int] = field(default_factory=dict)
    #: ``work``: the site manifests (``OUT/thumbctl.json``) it wrote or kept at its end, and why any
    #: could not be written.
    site_manifests: tuple[SiteManifestWrite, ...] = ()
    site_errors: tuple[str, ...] = ()


def prepare_workers(count: int) -> Standby:
    """Fork ``count`` workers now, before this process opens a ledger: they wait for the batch
    while the caller reads the sources, and :func:`run_batch` hands them the batch (see
    :class:`~thumbctl.engine.pool.Standby`). Use it as a context manager: workers never handed over
    are ended when it exits. For a command's process (``submit``), which ends with the run:
    what it imported is frozen out of the collector's sight (``Standby(freeze=True)``)."""
    from .pool import Standby

    return Standby(count, freeze=True)


def run_batch(
    db_path: Path | str,
    batch_id: str,
    options: RunOptions,
    *,
    interrupts: Callable[[], int] = lambda: 0,
    observer: RunObserver | None = None,
    standby: Standby | None = None,
) -> RunResult:
    """Render one batch in the foreground until it is terminal, with the ``standby`` workers
    (:func:`prepare_workers`) first.

    The first Ctrl-C records the cancel durably at once; running items stop
    at their next checkpoint. The second kills the workers.
    """
    from .pool import Pool, Supervision, supervise

    observer = observer or SilentObserver()
    with Ledger(db_path) as ledger:
        batch_id = ledger.views.resolve_batch_id(batch_id)
        supervision = Supervision()
        ran = not ledger.views.batch_settled(batch_id)
        if ran:
            pool = Pool(_config(db_path, options, batch_id, until_idle=True), options.workers, standby=standby)

            def cancel_now() -> None:
                observer.cancel_recorded(ledger.intake.request_cancel(batch_id))

            supervision = supervise(
                ledger,
                pool,
                interrupts=interrupts,
                on_first_interrupt=cancel_now,
                on_tick=lambda: observer.tick(ledger),
                on_worker_died=observer.worker_died,
            )
            observer.finish(ledger)
        view = ledger.views.batch(batch_id)
        manifest_due = view.is_terminal and (ran or not manifest_present(view))
        items = ledger.views.items(batch_id) if manifest_due or options.sheet else []  # read once for both
        errors = []
        if manifest_due:
            errors += manifest_error(ledger, view, items)
        sheet_path, sheet_error = _write_sheet(ledger, view, items) if options.sheet else (None, None)
        return RunResult(view, supervision, tuple(errors), sheet_path, sheet_error)


def run_work(
    db_path: Path | str,
    options: RunOptions,
    *,
    batch_id: str | None = None,
    until_idle: bool = False,
    interrupts: Callable[[], int] = lambda: 0,
    observer: RunObserver | None = None,
) -> RunResult:
    """Process runnable items of every batch (or one), until idle or stopped.

    The first Ctrl-C lets workers finish the source in hand and exit; the
    second kills them. Batches that finished meanwhile get their manifests.
    """
    from .pool import Pool, supervise

    observer = observer or SilentObserver()
    with Ledger(db_path) as ledger:
        if batch_id is not None:
            batch_id = ledger.views.resolve_batch_id(batch_id)
        started = iso(ledger.clock())
        pool = Pool(_config(db_path, options, batch_id, until_idle=until_idle), options.workers)

        def stop_gracefully() -> None:
            observer.stopping()
            pool.request_stop()

        supervision = supervise(
            ledger,
            pool,
            interrupts=interrupts,
            on_first_interrupt=stop_gracefully,
            on_tick=lambda: observer.tick(ledger),
            on_worker_died=observer.worker_died,
        )
        observer.finish(ledger)
        errors, outs = [], []
        for touched in ledger.views.batches_touched_since(started):
            view = ledger.views.batch(touched)
            if view.is_terminal:
                errors += manifest_error(ledger, view)
                outs.append(view.out_dir)
        site, site_errors = site_manifests(ledger, outs)
        failed = ledger.views.failed_since(started, batch_id)
        finished = ledger.views.finished_by_host(host_id(), started, batch_id)
        batch = ledger.views.batch(batch_id) if batch_id else None
        return RunResult(
            batch,
            supervision,
            tuple(errors),
            failed=failed,
            finished=finished,
            site_manifests=site,
            site_errors=tuple(site_errors),
        )


def wait_until_terminal(
    ledger: Ledger, batch_id: str, *, should_stop: Callable[[], bool], poll: float = 0.2
) -> BatchView:
    """Block until the batch is terminal (``cancel --wait``), rescuing the leases of dead
    or expired workers meanwhile so their items can settle."""
    while True:
        ledger.queue.rescue_leases(owner_is_dead, Backoff().delay_for)
        if ledger.views.batch_settled(batch_id):
            return ledger.views.batch(batch_id)
        if should_stop():
            raise Interrupted("stopped waiting; the cancel stays recorded")
        time.sleep(poll)


def follow_events(
    ledger: Ledger, batch: str, *, item_id: str | None, should_stop: Callable[[], bool], poll: float = 0.5
) -> Iterator[list[EventView]]:
    """The events of a batch as they commit, page by page, until the batch is final (or
    ``should_stop()``): ``events --follow``. Whether it is final is read before its events, so
    the last pages hold every event up to then."""
    batch_id = ledger.views.resolve_batch_id(batch)
    last = 0
    while True:
        final = ledger.views.batch_settled(batch_id)
        while page := ledger.views.events_after(batch_id, last, item_id=item_id):
            yield page
            last = page[-1].seq
        if final or should_stop():
            return
        time.sleep(poll)


def watch_batch(
    ledger: Ledger, batch_id: str, *, observer: RunObserver, should_stop: Callable[[], bool], poll: float = 0.5
) -> BatchView:
    """Follow a batch from the ledger until it is terminal or ``should_stop()``; renders nothing itself.
    Each poll asks only whether an item is still live (the observer reads the progress at its own pace)."""
    while True:
        observer.tick(ledger)
        if ledger.views.batch_settled(batch_id) or should_stop():
            observer.finish(ledger)
            return ledger.views.batch(batch_id, with_failures=False)
        time.sleep(poll)


def manifest_error(ledger: Ledger, batch: BatchView, items: list[ItemView] | None = None) -> list[str]:
    """Write the batch's manifest (of ``items`` when the caller read them); a filesystem refusal is
    returned, not raised: the batch is finished either way, and ``reconcile`` and the next run can
    write it later."""
    if not out_on_host(batch.out_dir, ledger.backend):  # never a fresh local folder of that name
        return [f"{batch.manifest_path}: this host has no output folder {batch.out_dir}"]
    try:
        listed = ledger.views.items(batch.batch_id) if items is None else items
        write_manifest(batch, listed, ledger.catalogue.markup(batch.out_dir))
    except OSError as exc:
        return [f"{batch.manifest_path}: {exc.strerror or exc}"]
    return []


def site_manifests(ledger: Ledger, outs: list[str]) -> tuple[tuple[SiteManifestWrite, ...], list[str]]:
    """Write the site manifest of each OUT (once each, those on this host); a filesystem or bucket
    refusal is returned, not raised, as for a batch manifest."""
    written, errors = [], []
    for out_dir in dict.fromkeys(outs):
        if not out_on_host(out_dir, ledger.backend):
            continue
        try:
            written.append(write_site_manifest(ledger, out_dir))
        except OSError as exc:
            errors.append(f"{out_dir}/{SITE_MANIFEST}: {exc.strerror or exc}")
    return tuple(written), errors


def _write_sheet(ledger: Ledger, batch: BatchView, items: list[ItemView]) -> tuple[str | None, str | None]:
    """Write the batch's contact sheet (of ``batch`` and ``items`` as just read: its history) and the
    catalogue's sheet of its OUT, this batch's changes first (what the run links to), at their
    default places: (the catalogue's path, None), or (None, why not). Like the manifest, a sheet that
    cannot be written leaves the run's outcome alone."""
    from ..review.cataloguesheet import write_ledger_catalogue_sheet  # Pillow-free; only a foreground run
    from ..review.sheet import write_contact_sheet

    if not out_on_host(batch.out_dir, ledger.backend):
        return None, f"this host has no output folder {batch.out_dir}"
    try:
        write_contact_sheet(ledger, batch.batch_id, read=(batch, items))
        return write_ledger_catalogue_sheet(ledger, batch.out_dir, changed_by=batch).path, None
    except CannotWrite as exc:
        return None, exc.message


def write_batch_manifest(ledger: Ledger, batch: BatchView) -> str:
    """Write OUT/batches/<batch_id>.json for a batch (see :func:`thumbctl.review.markup.write_batch_manifest`)."""
    return write_manifest(batch, ledger.views.items(batch.batch_id), ledger.catalogue.markup(batch.out_dir))


def _config(db_path: Path | str, options: RunOptions, batch_id: str | None, *, until_idle: bool) -> WorkerConfig:
    from .worker import WorkerConfig

    lease = lease_seconds(options.lease_seconds)
    return WorkerConfig(
        db_path=str(db_path),
        batch_id=batch_id,
        until_idle=until_idle,
        lease_seconds=lease,
        heartbeat_seconds=min(options.heartbeat_seconds, lease / 3),  # a short (test) lease beats more often
        backoff=options.backoff,
        item_timeout=options.item_timeout,
        s3=options.s3,
    )
