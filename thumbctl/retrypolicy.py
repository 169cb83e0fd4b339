"""Retry timing: how long a transiently failed item waits before its next attempt, and how
long a ledger operation waits out a busy write lock (:class:`BusyPolicy`).

Capped exponential backoff with full jitter (tenacity's ``wait_random_exponential``):
attempt n waits a uniform random time in [0, min(cap, base * 2**(n-1))].
The chosen time is persisted as the item's ``not_before``, so a restart keeps it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenacity import Retrying

from .errors import ConfigError


@dataclass(frozen=True)
class Backoff:
    base: float = 1.0
    cap: float = 60.0

    def delay_for(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        from tenacity import RetryCallState, wait_random_exponential  # only where an item fails: start-up stays light

        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = max(1, attempt)
        return wait_random_exponential(multiplier=self.base, max=self.cap)(state)


#: Environment variables tuning the busy policy (seconds). Mostly for tests and for ledgers on slow disks.
BUSY_TIMEOUT_ENV = "THUMBCTL_BUSY_TIMEOUT"
BUSY_WAIT_ENV = "THUMBCTL_BUSY_WAIT"


@dataclass(frozen=True)
class BusyPolicy:
    """The one policy for a ledger whose write lock another process holds.

    SQLite itself waits up to ``timeout`` for the lock on each try; the tries are repeated
    with jittered, capped exponential pauses until ``bound`` seconds have passed since the
    first, then :class:`~thumbctl.errors.LedgerBusy` is raised. The bound stays under the
    default lease (30 s), so a worker that waited it out still holds its claim.
    """

    timeout: float = 5.0
    bound: float = 20.0

    @classmethod
    def from_env(cls) -> BusyPolicy:
        """``THUMBCTL_BUSY_TIMEOUT`` and ``THUMBCTL_BUSY_WAIT`` override the defaults."""
        timeout = _seconds(BUSY_TIMEOUT_ENV, cls.timeout)
        return cls(timeout=timeout, bound=max(timeout, _seconds(BUSY_WAIT_ENV, cls.bound)))

    def retrying(self, busy: type[BaseException] | tuple[type[BaseException], ...]) -> Retrying:
        """A tenacity loop retrying ``busy`` errors within the bound; the last one is re-raised."""
        from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

        return Retrying(
            retry=retry_if_exception_type(busy),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            stop=stop_after_delay(self.bound),
            reraise=True,
        )


#: The longest busy wait a variable may ask for (a day): beyond it a busy ledger is better reported than waited out.
_MAX_BUSY_SECONDS = 86400.0


def _seconds(name: str, default: float) -> float:
    """Seconds from the variable ``name`` (``default`` when unset or empty); anything but a number
    from 0 to a day is a :class:`~thumbctl.errors.ConfigError`, never silently the default."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= _MAX_BUSY_SECONDS:  # also refuses nan and inf
        raise ConfigError(f"{name}: must be a number of seconds from 0 to {_MAX_BUSY_SECONDS:g}, got {text!r}")
    return value
