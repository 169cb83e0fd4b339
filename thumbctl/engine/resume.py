"""Resuming a cancelled batch by its id (``thumbctl retry``), as running the same submit again does.

The batch's recorded request is accepted again under its key, as the next batch of the key's
chain (``resumed_from``), reusing every finished output; a batch resumed already gives the
newest batch of its chain, replayed (or resumed in turn when that one was cancelled too). The
submission itself is :class:`~thumbctl.engine.session.SubmitSession`'s.
"""

from __future__ import annotations

from ..core.errors import UsageError
from ..core.keys import REVIEW_KEY_PREFIX
from ..core.profile import Profile
from ..intake.prepared import IntakeReport, PreparedSubmission
from ..ledger import Ledger


def resumption(ledger: Ledger, batch_id: str) -> PreparedSubmission | None:
    """The submission that resumes ``batch_id``: the request recorded for the newest batch of its
    chain, read from the ledger (no source is read); None when no cancel of ``batch_id`` was
    requested or it expired (gc). A review's Apply is never resumed: it is a usage error."""
    view = ledger.views.batch(batch_id)
    if view.cancel_requested_at is None or view.expired_at is not None:
        return None
    newest = ledger.intake.newest_of_chain(batch_id)
    request = ledger.intake.recorded_request(newest)
    if request.idempotency_key.startswith(REVIEW_KEY_PREFIX):
        raise UsageError(
            f"batch {batch_id} is an Apply of thumbctl review, cancelled at {view.cancel_requested_at}: "
            "apply the fix again in thumbctl review",
            code="review_batch",
        )
    sources = len({item.item_id for item in request.items})
    report = IntakeReport(sources=sources, derived_key=True, from_ledger=True)
    profile = Profile(upscale=bool(request.profile.get("upscale", False)))
    return PreparedSubmission(request, report, profile)
