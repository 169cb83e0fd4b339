"""How long a transiently failed item waits before its next attempt.

Capped exponential backoff with full jitter (tenacity's ``wait_random_exponential``):
attempt n waits a uniform random time in [0, min(cap, base * 2**(n-1))].
The chosen time is persisted as the item's ``not_before``, so a restart keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import RetryCallState, wait_random_exponential


@dataclass(frozen=True)
class Backoff:
    base: float = 1.0
    cap: float = 60.0

    def delay_for(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = max(1, attempt)
        return wait_random_exponential(multiplier=self.base, max=self.cap)(state)
