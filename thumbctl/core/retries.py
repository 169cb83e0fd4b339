"""Retry timing: how long a transiently failed item waits before its next attempt, and how
long a ledger operation waits out a busy write lock (:class:`BusyPolicy`).

Capped exponential backoff with full jitter (tenacity's ``wait_random_exponential``):
attempt n waits a uniform random time in [0, min(cap, base * 2**(n-1))].
The chosen time is persisted as the item's ``not_before``, so a restart keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from tenacity import RetryCallState, Retrying, wait_random_exponential


@dataclass(frozen=True)
class Attempt:
    """The state a tenacity wait is called with outside a retry loop: the number of the attempt
    that failed, the one field of :class:`tenacity.RetryCallState` its exponential waits read."""

    attempt_number: int


@dataclass(frozen=True)
class Backoff:
    """The wait of a transiently failed item, stored as its ``not_before`` (the worker does not sleep it)."""

    base: float = 1.0
    cap: float = 60.0

    def wait(self) -> wait_random_exponential:
        """The one tenacity wait every stored item delay comes from."""
        from tenacity import wait_random_exponential  # only where an item fails: start-up stays light

        return wait_random_exponential(multiplier=self.base, max=self.cap)

    def delay_for(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        return self.wait()(cast("RetryCallState", Attempt(max(1, attempt))))


@dataclass(frozen=True)
class BusyPolicy:
    """The one policy for a ledger whose write lock another process holds.

    SQLite itself waits up to ``timeout`` for the lock on each try; the tries are repeated
    with jittered, capped exponential pauses until ``bound`` seconds have passed since the
    first, then :class:`~thumbctl.core.errors.LedgerBusy` is raised. The bound stays under the
    default lease (30 s), so a worker that waited it out still holds its claim.
    """

    timeout: float
    bound: float

    def retrying(self, busy: type[BaseException] | tuple[type[BaseException], ...]) -> Retrying:
        """A tenacity loop retrying ``busy`` errors within the bound; the last one is re-raised."""
        from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

        return Retrying(
            retry=retry_if_exception_type(busy),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            stop=stop_after_delay(self.bound),
            reraise=True,
        )
