"""Resuming a cancelled batch by its id (``thumbctl retry``), as running the same submit again does.

The batch's recorded request is accepted again under its key, as the next batch of the key's
chain (``resumed_from``), reusing every finished output; a batch resumed already gives the
newest batch of its chain, replayed (or resumed in turn when that one was cancelled too).
"""

from __future__ import annotations

from ..core.models import BatchView
from ..core.profile import Limits, Profile
from ..intake.submission import IntakeReport, PreparedSubmission, submit
from ..ledger import Ledger


def resume_if_cancelled(ledger: Ledger, batch_id: str, limits: Limits) -> tuple[BatchView, IntakeReport] | None:
    """The batch that resumes ``batch_id`` (created now, or the one that did) and what accepting it
    found (outputs restored, names not linked); None when no cancel of ``batch_id`` was requested
    or it expired (gc)."""
    view = ledger.views.batch(batch_id)
    if view.cancel_requested_at is None or view.expired_at is not None:
        return None
    newest = ledger.intake.newest_of_chain(batch_id)
    request = ledger.intake.recorded_request(newest)
    sources = len({item.item_id for item in request.items})
    report = IntakeReport(sources=sources, derived_key=True, from_ledger=True)
    profile = Profile(upscale=bool(request.profile.get("upscale", False)))
    return submit(ledger, PreparedSubmission(request, report, profile), limits), report
