"""Admission control: refuse new work while the queue is saturated or stale,
and retry a refused submission with capped exponential backoff and full jitter.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .errors import AdmissionRefused, Interrupted, RejectedError, UnavailableError
from .profile import Limits

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T")


#: A worker took or finished an item this recently (seconds): the queue is being drained, so its age
#: says the workers are behind. Without one, an old queue only means nobody runs ``thumbctl work``
#: (a forgotten ``--detach`` on a laptop): refusing would not help, waiting never ends.
WORKER_SEEN_WINDOW = 600.0


@dataclass(frozen=True)
class QueueSnapshot:
    """What admission looks at, read inside the accepting transaction. The last two are asked only
    when the queue is older than its objective."""

    runnable: int
    oldest_age: float | None
    workers_seen: Callable[[], bool] = lambda: True
    oldest_batch: Callable[[], str | None] = lambda: None


def check_admission(snapshot: QueueSnapshot, incoming: int, limits: Limits) -> None:
    """Raise :class:`AdmissionRefused` if ``incoming`` runnable items may not join the queue now,
    or :class:`RejectedError` if they never could (more than the limit on their own).

    The queue-age objective applies only while workers are draining the queue (one took or
    finished an item in the last :data:`WORKER_SEEN_WINDOW` seconds).
    """
    runnable, oldest_age = snapshot.runnable, snapshot.oldest_age
    if incoming > limits.max_runnable:  # no amount of draining makes room: retrying cannot help
        raise RejectedError(
            f"this batch alone adds {incoming} runnable items, over the limit of {limits.max_runnable} "
            "(--max-runnable) even with an empty queue; split it or raise --max-runnable",
            code="too_many_items",
        )
    if incoming and runnable + incoming > limits.max_runnable:
        raise AdmissionRefused(
            f"queue saturated: {runnable} runnable items in the ledger, this batch adds "
            f"{incoming}, the limit is {limits.max_runnable}; let workers drain the queue, "
            "cancel old batches, or retry in about 30 s (--retry-admission waits for room)",
            retry_after=30,
        )
    objective = limits.queue_age_objective
    if incoming and objective and oldest_age is not None and oldest_age > objective and snapshot.workers_seen():
        oldest = snapshot.oldest_batch() or "?"
        raise AdmissionRefused(
            f"queue is behind: the oldest runnable item (batch {oldest}) has waited {oldest_age:.0f}s, the "
            f"objective is {objective:.0f}s (--queue-age-objective); let the workers drain the queue "
            f"(`thumbctl work --until-idle` adds some), cancel what is no longer wanted (`thumbctl cancel {oldest}`), "
            "or retry in about a minute (--retry-admission waits for room)",
            retry_after=60,
        )


def retry_unavailable(
    attempt: Callable[[], T],
    *,
    should_stop: Callable[[], bool],
    max_wait: float = 600.0,
    max_delay: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[UnavailableError, float], None] | None = None,
) -> T:
    """Call ``attempt`` until it stops raising :class:`UnavailableError`.

    Delays grow exponentially with full jitter, capped at ``max_delay``; after
    ``max_wait`` seconds the last error is raised. ``should_stop`` is polled
    while waiting, so Ctrl-C ends the wait promptly with :class:`Interrupted`.
    ``on_retry(error, delay)`` is told of each refusal before its wait.
    """
    from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_random_exponential

    def announce(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        if on_retry is not None and isinstance(error, UnavailableError):
            on_retry(error, state.upcoming_sleep)

    retrying = Retrying(
        retry=retry_if_exception_type(UnavailableError),
        wait=wait_random_exponential(multiplier=0.5, max=max_delay),
        stop=stop_before_delay(max_wait),  # never plans a wait past max_wait
        sleep=functools.partial(interruptible_sleep, should_stop=should_stop, sleep=sleep),
        before_sleep=announce,
        reraise=True,
    )
    return retrying(attempt)


def interruptible_sleep(seconds: float, *, should_stop: Callable[[], bool], sleep: Callable[[float], None]) -> None:
    """tenacity's sleep between two tries: ``seconds`` in steps of at most 0.1 s, ended by
    :class:`Interrupted` as soon as ``should_stop()`` is true. The CLI's signal handler only counts
    a Ctrl-C press: a plain sleep would run to its end (Python resumes it after the handler), and a
    ``threading.Event`` set by the handler (tenacity's ``sleep_using_event``) could deadlock on the
    event's lock, which the interrupted thread itself may hold."""
    deadline = time.monotonic() + seconds
    while not should_stop():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        sleep(min(0.1, left))
    raise Interrupted("interrupted while waiting for admission; nothing was recorded")
