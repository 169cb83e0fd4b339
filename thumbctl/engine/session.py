"""One submit session: a source submitted, its batch rendered here, then (``--delete``) the output
folder mirrored, with the steps every such run takes first: the workers forked on standby before the
ledger opens, the store settled with the ledger, and what a crashed earlier run left cleared.

``thumbctl submit``, ``retry`` (a cancelled batch resumed, or its failed items requeued), each round
of ``watch`` and :func:`thumbctl.render` all run through :class:`SubmitSession`. What it does is told
to a :class:`SessionObserver` (the command line's reporter; the library never prints) and returned
as an :class:`Outcome`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..config.options import RunOptions, SubmitOptions
from ..core.errors import Interrupted
from ..core.models import BatchView, ItemState
from ..intake import acceptance, submission
from ..intake.carryover import carried_over
from ..intake.prepared import IntakeReport, PreparedSubmission
from ..ledger import Ledger
from ..review.markup import documents_root
from ..review.sitemanifest import SiteManifestWrite
from .runner import RunObserver, RunResult, SilentObserver, manifest_error, run_batch, site_manifests

if TYPE_CHECKING:
    from ..core.errors import UnavailableError
    from ..upkeep.leftovers import CleanUp
    from ..upkeep.legacy_layout import MigrationReport
    from ..upkeep.mirror import FolderView, MirrorReport
    from .pool import Standby


#: Ctrl-C while the sources are read: the submission stops before it records anything.
SOURCES_INTERRUPTED = "interrupted while reading the sources; nothing was recorded"


@dataclass(frozen=True)
class Admission:
    """``--retry-admission``: a refusal for saturation or a busy ledger is tried again with backoff
    and jitter, under the same key, for up to ``max_wait`` seconds or until Ctrl-C."""

    max_wait: float = 600.0


@dataclass(frozen=True)
class Mirror:
    """``--delete``: after the batch, remove what it no longer publishes; ``dropped``: also the
    derivatives of sources still there that it no longer asks for (``--delete-dropped``);
    ``excluded``: also the names of sources ``--include``/``--exclude`` leave out (``--delete-excluded``)."""

    dropped: bool = False
    excluded: bool = False


@dataclass(frozen=True)
class Outcome:
    """What a session did: the batch as it was submitted (or requeued), what reading the sources
    found, the run (None: not rendered here) and the mirror (None: not asked for, or skipped)."""

    submitted: BatchView
    report: IntakeReport = field(default_factory=IntakeReport)
    run: RunResult | None = None
    mirrored: MirrorReport | None = None
    #: ``retry`` of a batch not cancelled: how many failed items were queued again (None: a submission).
    requeued: int | None = None
    #: The site manifest of the batch's OUT, written (or kept) once the batch and its mirror were done.
    site_manifests: tuple[SiteManifestWrite, ...] = ()
    #: Why it (or the batch manifest a new ``--sizes``/``--base-url`` rewrote) could not be written.
    site_errors: tuple[str, ...] = ()

    @property
    def batch(self) -> BatchView:
        """The batch as it ended (as submitted, when it was not rendered here)."""
        return self.run.batch if self.run is not None and self.run.batch is not None else self.submitted

    @property
    def interrupted(self) -> bool:
        return self.run is not None and self.run.supervision.interrupted


class SessionObserver(Protocol):
    """What a session tells its caller, in this order (the command line's reporter renders it)."""

    def layout_migrated(self, report: MigrationReport) -> None:
        """Output folders of the old layout were moved into the store (once, before anything else)."""

    def crash_cleared(self, done: CleanUp) -> None:
        """What a crashed earlier run left was cleared (said only when there was something)."""

    def reading_sources(self) -> AbstractContextManager[object]:
        """Around reading the sources, before anything is recorded (a Ctrl-C there raises)."""

    def counting_interrupts(self) -> AbstractContextManager[Callable[[], int]]:
        """From the submission to the end: Ctrl-C counted rather than raised; it gives the count so far.
        The first press cancels a running batch durably."""

    def admission_retry(self, error: UnavailableError, delay: float) -> None:
        """A refusal is tried again in ``delay`` seconds (:class:`Admission`)."""

    def ledger_created(self, where: Path | str) -> None:
        """The submitted batch is the ledger's first."""

    def submitted(self, batch: BatchView, report: IntakeReport, *, final: bool) -> None:
        """A batch was accepted, replayed or resumed; ``final``: it is not rendered here."""

    def requeued(self, batch_id: str, count: int, *, final: bool) -> None:
        """``count`` failed items were queued again; ``final``: they are not rendered here."""

    def run_progress(self, batch_id: str) -> AbstractContextManager[RunObserver]:
        """Around the run: what it reports as it goes."""

    def rendered(self, outcome: Outcome, run: RunResult) -> None:
        """The batch was rendered here (``run``, also ``outcome.run``) and mirrored, Ctrl-C still counted."""


class SilentSession:
    """An observer that says nothing and lets Ctrl-C raise (the Python API)."""

    def layout_migrated(self, report: MigrationReport) -> None:
        pass

    def crash_cleared(self, done: CleanUp) -> None:
        pass

    def reading_sources(self) -> AbstractContextManager[object]:
        return nullcontext()

    def counting_interrupts(self) -> AbstractContextManager[Callable[[], int]]:
        return nullcontext(_no_presses)

    def admission_retry(self, error: UnavailableError, delay: float) -> None:
        pass

    def ledger_created(self, where: Path | str) -> None:
        pass

    def submitted(self, batch: BatchView, report: IntakeReport, *, final: bool) -> None:
        pass

    def requeued(self, batch_id: str, count: int, *, final: bool) -> None:
        pass

    def run_progress(self, batch_id: str) -> AbstractContextManager[RunObserver]:
        return nullcontext(SilentObserver())

    def rendered(self, outcome: Outcome, run: RunResult) -> None:
        pass


def _no_presses() -> int:
    return 0


@dataclass(frozen=True)
class SubmitSession:
    """Submit to the ledger ``db`` with ``options``, render with ``run_options``.

    ``standby``: fork the workers before the ledger opens, so they are ready when the batch is
    recorded (for a process that ends with the run: see :func:`~thumbctl.engine.runner.prepare_workers`).
    ``settle_first``/``clear_first``: settle the store, and clear what a crashed run left in OUT,
    first (``watch`` settles once before its rounds, :meth:`settle_store`, and its rounds clear
    nothing). ``finish_terminal``: a batch terminal at submit (a replay, or every output reused) is
    run all the same, which writes a missing manifest and the contact sheet (``submit``); else it is
    returned as submitted."""

    db: Path | str
    options: SubmitOptions = field(default_factory=SubmitOptions)
    run_options: RunOptions = field(default_factory=RunOptions)
    observer: SessionObserver = field(default_factory=SilentSession)
    admission: Admission | None = None
    mirror: Mirror | None = None
    standby: bool = False
    settle_first: bool = True
    clear_first: bool = True
    finish_terminal: bool = False

    def run(self, source: Path | str, *, detach: bool = False) -> Outcome:
        """Submit ``source`` (a folder, ``s3://`` prefix or manifest) and, unless ``detach``, render
        its batch until it is terminal, then mirror. Ctrl-C while the sources are read (counted
        already, in a ``watch`` round) is :class:`~thumbctl.core.errors.Interrupted`: nothing was recorded."""
        with self._workers(0 if detach else self.run_options.workers) as standby, Ledger(self.db) as ledger:
            first = not ledger.views.batches(1)
            self._settle(ledger)
            prepared = self.read(ledger, source)
            self._clear(ledger, prepared.batch.out_dir)
            with self.observer.counting_interrupts() as presses:
                if presses():
                    raise Interrupted(SOURCES_INTERRUPTED)
                return self._submit_and_render(ledger, prepared, presses, standby, detach=detach, first=first)

    def accept(self, ledger: Ledger, source: Path | str) -> BatchView:
        """Only the submission: ``source`` read and its batch recorded in ``ledger`` (or replayed),
        as :meth:`run` records it; nothing is rendered, settled or cleared."""
        return acceptance.submit(ledger, self.read(ledger, source), self.options.limits)

    def plan(self, source: Path | str) -> tuple[IntakeReport, MirrorReport]:
        """``--dry-run``: what the batch of ``source`` would render, and what the mirror would remove
        once it succeeded; nothing is recorded."""
        from ..upkeep.mirror import plan_mirror

        mirror = self.mirror or Mirror()
        with Ledger(self.db) as ledger:
            self._settle(ledger)
            prepared = self.read(ledger, source)
            folder = self._folder(prepared)
            plan = plan_mirror(ledger, prepared.batch, folder, dropped=mirror.dropped, excluded=mirror.excluded)
            new, resume = carried_over(ledger, prepared)  # the outputs earlier runs made are reused
            replayed = not resume and ledger.intake.batch_for_key(new.idempotency_key) is not None
            queued = [item.friendly_path or item.item_id for item in new.items if item.state == ItemState.QUEUED]
            return prepared.report, replace(plan, rendered=() if replayed else tuple(queued))

    def retry(self, batch: str, *, detach: bool = False) -> Outcome:
        """``retry``: a cancelled batch resumed as its submit again would (a new batch of its key,
        finished outputs reused), else its failed items queued again; then, unless ``detach``,
        rendered until terminal."""
        from .resume import resumption

        with Ledger(self.db) as ledger:
            self._settle(ledger)
            batch_id = ledger.views.resolve_batch_id(batch)
            self._clear(ledger, ledger.views.batch(batch_id).out_dir)
            prepared = resumption(ledger, batch_id)
            if prepared is None:
                return self._requeue(ledger, batch_id, detach=detach)
            with self.observer.counting_interrupts() as presses:
                return self._submit_and_render(ledger, prepared, presses, None, detach=detach, first=False)

    def settle_store(self) -> None:
        """Only the first step: the store settled with the ledger (``watch``, before its rounds)."""
        with Ledger(self.db) as ledger:
            self._settle(ledger)

    def read(self, ledger: Ledger, source: Path | str) -> PreparedSubmission:
        """The submission of ``source``: its sources scanned and inspected, nothing recorded."""
        with self.observer.reading_sources():
            return submission.prepare_submission(source, self.options, ledger)

    def _workers(self, count: int) -> AbstractContextManager[Standby | None]:
        if not self.standby:
            return nullcontext()
        from .runner import prepare_workers

        return prepare_workers(count)

    def _settle(self, ledger: Ledger) -> None:
        if not self.settle_first:
            return
        from ..upkeep.migrate import settle_store

        migrated = settle_store(ledger, self.options.store_dir)
        if migrated is not None:
            self.observer.layout_migrated(migrated)

    def _clear(self, ledger: Ledger, out_dir: str) -> None:
        if not self.clear_first:
            return
        from ..upkeep.leftovers import clean_up_after_crashes

        done = clean_up_after_crashes(ledger, [out_dir])
        if done.temp_files or done.requeued:
            self.observer.crash_cleared(done)

    def _submit_and_render(
        self,
        ledger: Ledger,
        prepared: PreparedSubmission,
        presses: Callable[[], int],
        standby: Standby | None,
        *,
        detach: bool,
        first: bool,
    ) -> Outcome:
        batch = acceptance.submit(
            ledger,
            prepared,
            self.options.limits,
            retry_admission=self.admission is not None,
            max_wait=(self.admission or Admission()).max_wait,
            should_stop=lambda: presses() > 0,
            on_retry=self.observer.admission_retry,
        )
        if first:
            self.observer.ledger_created(self.db if isinstance(self.db, Path) else ledger.path)
        documents = documents_root(batch)  # --documents, as the batch recorded it
        markup = replace(self.options.markup, documents="" if documents == batch.out_dir else documents)
        restyled = ledger.catalogue.record_markup(batch.out_dir, markup)  # --sizes, --base-url, --documents
        renders = not detach and (self.finish_terminal or not batch.is_terminal)
        self.observer.submitted(batch, prepared.report, final=not renders)
        run = self._render(batch.batch_id, presses, standby) if renders else None
        outcome = Outcome(batch, prepared.report, run)
        if self.mirror is not None and not detach and not outcome.interrupted:
            outcome = replace(outcome, mirrored=self._mirror(ledger, self.mirror, prepared, batch.batch_id))
        if restyled and batch.replayed and batch.is_terminal:  # the documents only: nothing renders again
            outcome = replace(outcome, site_errors=tuple(manifest_error(ledger, ledger.views.batch(batch.batch_id))))
        if self._changed_out(outcome, renders) or restyled:
            site, errors = site_manifests(ledger, [batch.out_dir])
            outcome = replace(outcome, site_manifests=site, site_errors=outcome.site_errors + tuple(errors))
        if run is not None:
            self.observer.rendered(outcome, run)
        return outcome

    @staticmethod
    def _changed_out(outcome: Outcome, renders: bool) -> bool:
        """Whether this session changed OUT's live names, so its site manifest is written: a run
        here that was not interrupted, a batch finished at submit (every output reused), or a
        mirror's removals; not a replay, nor a batch left for ``thumbctl work``."""
        removed = outcome.mirrored is not None and bool(outcome.mirrored.removed)
        if outcome.submitted.replayed and not outcome.report.restored_outputs:
            return removed  # a replay changes no name, unless it had gone outputs rendered again
        if renders:
            return not outcome.interrupted or removed
        return removed or outcome.submitted.is_terminal

    def _requeue(self, ledger: Ledger, batch_id: str, *, detach: bool) -> Outcome:
        count = ledger.queue.retry_failed(batch_id)
        outcome = Outcome(ledger.views.batch(batch_id), requeued=count)
        renders = not detach and count > 0
        self.observer.requeued(batch_id, count, final=not renders)
        if not renders:
            return outcome
        with self.observer.counting_interrupts() as presses:
            run = self._render(batch_id, presses, None)
            outcome = replace(outcome, run=run)
            self.observer.rendered(outcome, run)
            return outcome

    def _render(self, batch_id: str, presses: Callable[[], int], standby: Standby | None) -> RunResult:
        with self.observer.run_progress(batch_id) as progress:
            return run_batch(
                self.db, batch_id, self.run_options, interrupts=presses, observer=progress, standby=standby
            )

    def _mirror(self, ledger: Ledger, mirror: Mirror, prepared: PreparedSubmission, batch_id: str) -> MirrorReport:
        from ..upkeep.mirror import mirror_batch

        folder = self._folder(prepared)
        return mirror_batch(ledger, batch_id, folder, dropped=mirror.dropped, excluded=mirror.excluded)

    def _folder(self, prepared: PreparedSubmission) -> FolderView:
        from ..upkeep.mirror import FolderView

        return FolderView.of(prepared.batch.source_root, prepared.report, self.options.rules)
