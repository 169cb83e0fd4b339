"""What a new submission takes over from earlier ones: the cancelled batch of its derived key, which
it resumes, and the outputs earlier runs made, reused where their names are still usable (with the
formats that render again only because their encoder settings changed). A replay takes over nothing:
it does no image work at all."""

from __future__ import annotations

from functools import partial

from ..core.faults import Faults
from ..core.models import NewBatch, NewItem
from ..ledger import Ledger
from ..publishing.publisher import Publisher
from ..publishing.targets import object_bytes
from .prepared import PreparedSubmission
from .rerender import encoder_changes
from .reuse import with_reused_outputs


def carried_over(ledger: Ledger, prepared: PreparedSubmission) -> tuple[NewBatch, bool]:
    """The batch to record, and whether it resumes the cancelled batch its key names.

    A derived key (no ``--key``) that names a batch whose cancel was requested resumes it: the
    request is recorded again as the next batch of the key's chain, reusing every finished
    output. Sets the report's encoder changes (not for a request read from the ledger).
    """
    new = prepared.batch
    keyed = ledger.intake.batch_for_key(new.idempotency_key)
    resume = prepared.report.derived_key and keyed is not None and keyed.cancelled
    if keyed is None or resume:  # a replay does no image work at all
        overwrite = bool(new.profile.get("overwrite", False))
        name_usable = partial(_name_usable, Publisher.at(ledger, new.out_dir, overwrite))
        new = with_reused_outputs(new, prepared.profile, name_usable)
        if not prepared.report.from_ledger:
            prepared.report.encoder_changes = encoder_changes(ledger, new, prepared.profile)
    if resume:
        Faults().hit("before_resume")
    return new, resume


def _name_usable(publisher: Publisher, item: NewItem) -> bool:
    """Whether publishing ``item`` at its name would not fail ``name_taken`` (as things stand now)."""
    if item.friendly_path is None or item.object_path is None:
        return False
    return publisher.name_usable(item.object_path, item.friendly_path, partial(object_bytes, item.object_path))
