"""The busy/reconnect retry, applied once to each port of a ledger when the port is built.

A port's public method runs again after a lost connection is reopened (a server restart), or after
a deadlock was broken, within the busy policy's bound (:class:`~thumbctl.core.retries.BusyPolicy`):
a caller never sees a restart it could have waited out. :func:`with_retry` wraps a whole port;
methods that cannot simply run again say so where they are defined:

* :func:`direct`: returned as they are (a context manager or a stream, whose body belongs to the
  caller; or an operation that retries its own steps with :class:`Retrier`);
* :func:`restartable`: return a reader (a :class:`~.follow.Follower`) that starts over on a new
  connection when a read is cut off (:class:`Refollowing`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ..core.errors import LedgerConnectionLost, LedgerContention, LedgerUnavailable
from ..core.retries import BusyPolicy
from .backend import Backend

T = TypeVar("T")
P = TypeVar("P")
F = TypeVar("F", bound=Callable[..., Any])


def direct(method: F) -> F:
    """Mark a port's method to be called as it is, without the retry around it."""
    method.direct = True  # type: ignore[attr-defined]
    return method


def restartable(method: F) -> F:
    """Mark a port's method that returns a reader: its reads start over after a lost connection."""
    method.restartable = True  # type: ignore[attr-defined]
    return method


class Retrier:
    """Runs an operation of one backend within the busy policy's bound."""

    def __init__(self, db: Backend, busy: BusyPolicy) -> None:
        self.db = db
        self.busy = busy

    def run(self, operation: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``operation`` run again after a lost connection is reopened, or a deadlock broken,
        within the busy policy's bound (a server restart is waited out, not reported)."""
        for attempt in self.busy.retrying((LedgerConnectionLost, LedgerContention)):
            with attempt:
                try:
                    return operation(*args, **kwargs)
                except LedgerConnectionLost:
                    self._reconnect_quietly()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover - tenacity re-raises the last error

    def _reconnect_quietly(self) -> None:
        try:
            self.db.reconnect()
        except LedgerUnavailable as exc:  # still down: the next attempt tries again
            raise LedgerConnectionLost(str(exc), retry_after=exc.retry_after) from exc


class _Retrying:
    """A port whose public methods run through one :class:`Retrier`."""

    def __init__(self, port: object, retrier: Retrier) -> None:
        self._port = port
        self._retrier = retrier

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._port, name)
        if name.startswith("_") or not callable(value) or getattr(value, "direct", False):
            return value
        if getattr(value, "restartable", False):
            return functools.partial(_refollowing, value, self._retrier)
        return functools.partial(self._retrier.run, value)


def with_retry(port: P, retrier: Retrier) -> P:
    """``port`` with the busy/reconnect retry around each of its public methods."""
    return cast(P, _Retrying(port, retrier))


def _refollowing(make: Callable[..., Any], retrier: Retrier, *args: object, **kwargs: object) -> Any:
    return Refollowing(lambda: make(*args, **kwargs), retrier)


class Refollowing:
    """A :class:`~.follow.Follower` that starts over after a lost connection: a read cut off half
    way may have updated part of what the follower derived, so a new one counts from the rows
    again, on the reopened connection, within the busy policy's bound (the supervisor of a run
    reads progress while a server restarts)."""

    def __init__(self, make: Callable[[], Any], retrier: Retrier) -> None:
        self._make = make
        self._retrier = retrier
        self._follower = make()

    def read(self) -> Any:
        return self._retrier.run(self._read)

    def __getattr__(self, name: str) -> object:  # what the follower holds (batch_id, window, …)
        if name == "_follower":
            raise AttributeError(name)
        return getattr(self._follower, name)

    def _read(self) -> Any:
        try:
            return self._follower.read()
        except LedgerConnectionLost:
            self._follower = self._make()
            raise
