"""The busy/reconnect retry, applied once to each port of a ledger when the port is built.

A port's public method runs again after a lost connection is reopened (a server restart), or after
a deadlock was broken, within the busy policy's bound (:class:`~thumbctl.core.retries.BusyPolicy`):
a caller never sees a restart it could have waited out. :func:`with_retry` gives a port whose every
public method runs through one :class:`Retrier`: its class is made once per port class
(:func:`retrying_class`), with one method of the same name and signature for each of the port's.
The port's own methods call each other unwrapped, so the retry is never nested. Methods that cannot
simply run again say so where they are defined:

* :func:`direct`: returned as they are (a context manager or a stream, whose body belongs to the
  caller; or an operation that retries its own steps with :class:`Retrier`);
* :func:`restartable`: return a reader (a :class:`~.follow.Follower`) that starts over on a new
  connection when a read is cut off (:class:`Refollowing`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol, TypeVar, cast

from ..core.errors import LedgerConnectionLost, LedgerContention, LedgerUnavailable
from ..core.retries import BusyPolicy
from .backend import Backend

T = TypeVar("T")
P = TypeVar("P")
F = TypeVar("F", bound=Callable[..., Any])


class Call(Enum):
    """How a port's public method is called through :func:`with_retry`."""

    RETRIED = "retried"  # the default: the whole call runs again within the busy policy's bound
    DIRECT = "direct"
    RESTARTABLE = "restartable"


def direct(method: F) -> F:
    """Mark a port's method to be called as it is, without the retry around it."""
    method.retry_call = Call.DIRECT  # type: ignore[attr-defined]
    return method


def restartable(method: F) -> F:
    """Mark a port's method that returns a reader: its reads start over after a lost connection."""
    method.retry_call = Call.RESTARTABLE  # type: ignore[attr-defined]
    return method


def call_of(method: object) -> Call:
    """How ``method`` is called through the retry (:func:`direct`, :func:`restartable`, else retried)."""
    return cast(Call, getattr(method, "retry_call", Call.RETRIED))


class Retrier:
    """Runs an operation of one backend within the busy policy's bound."""

    def __init__(self, db: Backend, busy: BusyPolicy) -> None:
        self.db = db
        self.busy = busy

    def run(self, operation: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``operation`` run again after a lost connection is reopened, or a deadlock broken,
        within the busy policy's bound (a server restart is waited out, not reported)."""
        retrying = self.busy.retrying((LedgerConnectionLost, LedgerContention))
        return retrying(self._reconnecting, operation, *args, **kwargs)

    def _reconnecting(self, operation: Callable[..., T], *args: object, **kwargs: object) -> T:
        try:
            return operation(*args, **kwargs)
        except LedgerConnectionLost:
            self._reconnect_quietly()
            raise

    def _reconnect_quietly(self) -> None:
        try:
            self.db.reconnect()
        except LedgerUnavailable as exc:  # still down: the next attempt tries again
            raise LedgerConnectionLost(str(exc), retry_after=exc.retry_after) from exc


class RetryingPort:
    """The base of the classes :func:`retrying_class` makes: a port and the retrier its calls run through."""

    def __init__(self, port: object, retrier: Retrier) -> None:
        self.port = port
        self.retrier = retrier


def with_retry(port: P, retrier: Retrier) -> P:
    """``port`` with the busy/reconnect retry around each of its public methods: an instance of
    :func:`retrying_class` of the port's class, which has the port's public methods and no others."""
    return cast(P, retrying_class(type(port))(port, retrier))


@functools.cache
def retrying_class(port_class: type) -> type[RetryingPort]:
    """The class, made once per port class, with one method for each public method of
    ``port_class``: it calls the port's method through the retrier, as :func:`call_of` says."""
    methods = {
        name: functools.wraps(method)(_calling(name, call_of(method)))
        for name, method in inspect.getmembers(port_class, inspect.isfunction)
        if not name.startswith("_")
    }
    return type(f"Retrying{port_class.__name__}", (RetryingPort,), methods)


def _calling(name: str, call: Call) -> Callable[..., Any]:
    def retried(self: RetryingPort, *args: object, **kwargs: object) -> Any:
        return self.retrier.run(getattr(self.port, name), *args, **kwargs)

    def as_is(self: RetryingPort, *args: object, **kwargs: object) -> Any:
        return getattr(self.port, name)(*args, **kwargs)

    def refollowing(self: RetryingPort, *args: object, **kwargs: object) -> Refollowing:
        make = getattr(self.port, name)
        return Refollowing(lambda: make(*args, **kwargs), self.retrier)

    return {Call.RETRIED: retried, Call.DIRECT: as_is, Call.RESTARTABLE: refollowing}[call]


class Reader(Protocol):
    """What :class:`Refollowing` needs of a :class:`~.follow.Follower`."""

    batch_id: str | None

    def read(self) -> Any: ...


class Refollowing:
    """A :class:`~.follow.Follower` that starts over after a lost connection: a read cut off half
    way may have updated part of what the follower derived, so a new one counts from the rows
    again, on the reopened connection, within the busy policy's bound (the supervisor of a run
    reads progress while a server restarts)."""

    def __init__(self, make: Callable[[], Reader], retrier: Retrier) -> None:
        self._make = make
        self._retrier = retrier
        self._follower = make()

    @property
    def batch_id(self) -> str | None:
        """The batch followed (None: every batch)."""
        return self._follower.batch_id

    def read(self) -> Any:
        return self._retrier.run(self._read)

    def _read(self) -> Any:
        try:
            return self._follower.read()
        except LedgerConnectionLost:
            self._follower = self._make()
            raise
