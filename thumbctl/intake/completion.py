"""What follows an acceptance: a replay's missing outputs queued again, the friendly names the
batch owns linked to its objects, and the batch document written once the batch is terminal."""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import ItemFailure
from ..core.models import BatchView, ItemState
from ..ledger import Ledger
from ..publishing.publisher import Publisher
from ..publishing.targets import object_present
from ..review.markup import manifest_present, write_batch_manifest
from .prepared import IntakeReport


def completed(batch: BatchView, ledger: Ledger, report: IntakeReport, overwrite: bool) -> BatchView:
    """The accepted (or replayed) ``batch`` as it stands once its names are linked; the lines of the
    names that failed go to ``report.unlinked_names``."""
    if batch.replayed:
        batch = _restore_missing_outputs(batch, ledger, report)
    report.unlinked_names = _link_owned_names(batch, ledger, report, overwrite)
    if batch.counts[ItemState.SUCCEEDED]:  # the names linked may have replaced others: counted now
        batch = replace(ledger.views.batch(batch.batch_id), replayed=batch.replayed)
    if batch.is_terminal and not (batch.replayed and manifest_present(batch)):
        try:
            write_batch_manifest(batch, ledger.views.items(batch.batch_id), ledger.catalogue.markup(batch.out_dir))
        except OSError as exc:  # recorded already: a refusal here must not read as a failed submit
            report.manifest_error = f"{batch.manifest_path}: {exc.strerror or exc}"
    return batch


def _restore_missing_outputs(batch: BatchView, ledger: Ledger, report: IntakeReport) -> BatchView:
    """A replay of a batch whose objects are gone (``rm -rf OUT``) queues those items again,
    so the run renders them; the replayed batch is returned as it now stands."""
    report.restored_outputs = ledger.intake.requeue_missing_objects(batch.batch_id, object_present)
    return replace(ledger.views.batch(batch.batch_id), replayed=True) if report.restored_outputs else batch


def _link_owned_names(batch: BatchView, ledger: Ledger, report: IntakeReport, overwrite: bool) -> list[str]:
    """Point every friendly name the batch owns (it holds the newest success to claim it)
    at the batch's object, as a render would; returns one line per name that failed.

    At acceptance this links the items reused from earlier runs, replacing whatever sat
    at their names; on a replay it finishes what an interrupted submit left undone, and
    counts the names a later batch took (``report.names_taken_by_newer``). A name a later
    batch took is left to that batch. Names that fail stay for ``reconcile``, whose repair
    restores a missing one. A file thumbctl did not publish at a name is left as it is (unless
    ``overwrite``) and reported as one of those lines.
    """
    if not batch.counts[ItemState.SUCCEEDED]:
        return []
    publisher = Publisher.at(ledger, batch.out_dir, overwrite)
    target = publisher.target
    owned = ledger.views.owned_friendly_names(batch.batch_id)
    if batch.replayed:
        report.names_taken_by_newer = batch.counts[ItemState.SUCCEEDED] - len(owned)
    failures = []
    for object_path, friendly_path in owned:
        try:
            publisher.republish(batch.batch_id, object_path, friendly_path)
        except ItemFailure as failure:
            failures.append(failure.detail)
        except OSError as exc:
            failures.append(f"{friendly_path}: {exc.strerror or exc}")
    target.remove_empty_tmp()
    return failures
