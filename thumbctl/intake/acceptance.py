"""Accepting a prepared submission: the batch recorded (or the one its key names replayed), with
admission retried while the ledger is saturated or busy, after taking over what earlier runs left
(:mod:`~thumbctl.intake.carryover`) and before completing it (:mod:`~thumbctl.intake.completion`)."""

from __future__ import annotations

from collections.abc import Callable

from ..core.admission import retry_unavailable
from ..core.errors import UnavailableError
from ..core.models import BatchView
from ..core.profile import Limits
from ..ledger import Ledger
from ..publishing.targets import object_present
from .carryover import carried_over
from .completion import completed
from .prepared import PreparedSubmission


def submit(
    ledger: Ledger,
    prepared: PreparedSubmission,
    limits: Limits,
    *,
    retry_admission: bool = False,
    max_wait: float = 600.0,
    should_stop: Callable[[], bool] = lambda: False,
    on_retry: Callable[[UnavailableError, float], None] | None = None,
) -> BatchView:
    """Accept a prepared submission (or replay the batch its key names).

    A derived key (no ``--key``) that names a batch whose cancel was requested resumes it: the
    request is recorded again as the next batch of the key's chain, reusing every finished
    output (``accept_batch(resume=True)``).

    With ``retry_admission``, a refusal for saturation or a busy ledger is
    retried with capped exponential backoff and full jitter, keeping the
    same key, until ``max_wait`` seconds pass or ``should_stop()`` is true.
    """
    new, resume = carried_over(ledger, prepared)

    def attempt() -> BatchView:
        return ledger.intake.accept_batch(new, limits, still_present=object_present, resume=resume)

    if retry_admission:
        batch = retry_unavailable(attempt, should_stop=should_stop, max_wait=max_wait, on_retry=on_retry)
    else:
        batch = attempt()
    return completed(batch, ledger, prepared.report, bool(new.profile.get("overwrite", False)))
