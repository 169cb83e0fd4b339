"""Admission control: refuse new work while the queue is saturated or stale,
and retry a refused submission with capped exponential backoff and full jitter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

from .errors import AdmissionRefused, Interrupted, UnavailableError
from .settings import Limits

T = TypeVar("T")


def check_admission(snapshot: tuple[int, float | None], incoming: int, limits: Limits) -> None:
    """Raise :class:`AdmissionRefused` if ``incoming`` runnable items may not join the queue.

    ``snapshot`` is (runnable items in the ledger, age in seconds of the
    oldest one or None).
    """
    runnable, oldest_age = snapshot
    if incoming and runnable + incoming > limits.max_runnable:
        raise AdmissionRefused(
            f"queue saturated: {runnable} runnable items in the ledger, this batch adds "
            f"{incoming}, the limit is {limits.max_runnable}; run `thumbctl work` or retry "
            "later (--retry-admission waits for room)",
            retry_after=30,
        )
    objective = limits.queue_age_objective
    if incoming and objective and oldest_age is not None and oldest_age > objective:
        raise AdmissionRefused(
            f"queue is behind: the oldest runnable item has waited {oldest_age:.0f}s, the "
            f"objective is {objective:.0f}s; run `thumbctl work` or retry later "
            "(--retry-admission waits for room)",
            retry_after=60,
        )


def retry_unavailable(
    attempt: Callable[[], T],
    *,
    should_stop: Callable[[], bool],
    max_wait: float = 600.0,
    max_delay: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``attempt`` until it stops raising :class:`UnavailableError`.

    Delays grow exponentially with full jitter, capped at ``max_delay``; after
    ``max_wait`` seconds the last error is raised. ``should_stop`` is polled
    while waiting, so Ctrl-C ends the wait promptly with :class:`Interrupted`.
    """

    def wait(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not should_stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            sleep(min(0.1, left))
        raise Interrupted("interrupted while waiting for admission; nothing was recorded")

    retrying = Retrying(
        retry=retry_if_exception_type(UnavailableError),
        wait=wait_random_exponential(multiplier=0.5, max=max_delay),
        stop=stop_after_delay(max_wait),
        sleep=wait,
        reraise=True,
    )
    return retrying(attempt)
