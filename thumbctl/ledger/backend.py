"""What a ledger backend is: one database connection, its transactions, and its SQL dialect.

The ledger's logic (:mod:`.core`, :mod:`.work`, :mod:`.maintenance`, :mod:`.observe`) runs named
queries (:mod:`.sql`), each rendered for both dialects when it is defined, against this interface;
a backend supplies the connection, the transactions, and runs a query's text for its own dialect.
:class:`~.sqlite.SqliteBackend` is the embedded default, :class:`~.postgres.PostgresBackend` lets
workers on many machines share one queue.

Rules every backend keeps:

* A write transaction serializes with every other write to the rows it touches, and its
  transition events are appended at its end (:meth:`Backend.flush_events`), after every row lock
  it takes, so events are numbered in commit order and a reader that saw event ``n`` never later
  finds one below ``n``. Writes whose result nobody reads may be deferred to that end too
  (:meth:`Backend.defer`): they run before the events, in the order given, so a server backend
  can send them with the commit in one round trip.
* Rows are mappings from the driver (``sqlite3.Row``, psycopg's ``dict_row``), read by column name.
* Errors about the ledger itself leave as :class:`~thumbctl.core.errors.LedgerFault` with a stable code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import fields
from typing import Any, NamedTuple, Protocol, TypeVar

from .sql import Insert, Query
from .sql.queue import INSERT_EVENTS

Clock = Callable[[], float]
T = TypeVar("T")
#: Parameters of a query: values in placeholder order, or a mapping for ``:name`` placeholders.
Params = Sequence[object] | Mapping[str, object]
#: One transition event as written: a value for each column of ``events``.
EventRow = Mapping[str, object]


@contextmanager
def _streamed(cursor: Cursor) -> Iterator[Iterator[Any]]:
    try:
        yield _fetched(cursor)
    finally:
        cursor.close()


def _fetched(cursor: Cursor) -> Iterator[Any]:
    while rows := cursor.fetchmany(500):
        yield from rows


class _Deferred(NamedTuple):
    query: Query
    params: Sequence[object]
    counts: Mapping[str, int] | None = None


class Row(Protocol):
    """A result row: values by column name (``row["state"]``)."""

    def __getitem__(self, key: str) -> Any: ...


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ...) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def close(self) -> None: ...


class Backend(ABC):
    """One connection to one ledger. Not shared across processes or threads."""

    #: Shown to users in messages; a server URL with its password masked.
    name: str
    #: ``sqlite`` or ``postgresql``.
    kind: str
    clock: Clock

    def __init__(self) -> None:
        self._events: list[EventRow | _Deferred] = []
        self._writes: list[_Deferred] = []

    # -- statements ----------------------------------------------------------------------------

    @abstractmethod
    def execute(self, query: Query, params: Params = (), **counts: int) -> Cursor:
        """Run ``query`` (its list fields repeated ``counts`` times); rows come back as mappings."""

    @abstractmethod
    def executemany(self, query: Query, rows: Iterable[Params]) -> None: ...

    def insert(self, insert: Insert, rows: Iterable[Mapping[str, object]]) -> None:
        """Insert many rows, each a mapping by column (a new batch's items)."""
        self.executemany(insert.query, rows)

    def scalar(self, query: Query, params: Params = (), **counts: int) -> Any:
        """The first column of the first row, or None when there is no row."""
        row = self.execute(query, params, **counts).fetchone()
        return None if row is None else self.first_value(row)

    @staticmethod
    @abstractmethod
    def first_value(row: Any) -> Any:
        """The value of the first column of ``row``."""

    # -- transactions --------------------------------------------------------------------------

    @abstractmethod
    def write(self, *, durable: bool = False) -> AbstractContextManager[float]:
        """A write transaction; yields the time taken inside it. ``durable``: the commit reaches
        the disk before it returns (acceptance, cancellation)."""

    @abstractmethod
    def reading(self) -> AbstractContextManager[None]:
        """One read transaction: every statement inside sees the same committed state."""

    @property
    @abstractmethod
    def in_transaction(self) -> bool: ...

    def defer(self, query: Query, params: Sequence[object], **counts: int) -> None:
        """Inside a write transaction: run ``query`` at its end, before its events (a write whose
        result is not read: the rows it changes are already locked, or it changes no state)."""
        self._writes.append(_Deferred(query, params, counts))

    def run_deferred(self) -> None:
        """Run the deferred writes, in order (called first by :meth:`flush_events`)."""
        pending, self._writes = self._writes, []
        for entry in pending:
            self.execute(entry.query, entry.params, **(entry.counts or {}))

    def append_event(self, row: EventRow) -> None:
        """Queue a transition event for the end of the current write transaction."""
        self._events.append(row)

    def append_events_from(self, query: Query, params: Sequence[object]) -> None:
        """Queue an ``INSERT INTO events … SELECT …`` for the end of the current transaction (for
        events of many rows that cannot change before then, e.g. a new batch's creation events)."""
        self._events.append(_Deferred(query, params))

    def flush_events(self) -> None:
        """Run the deferred writes, then write the queued events, in order, as the transaction's last
        statements."""
        self.run_deferred()
        if not self._events:
            return
        self.before_events()
        pending, self._events = self._events, []
        rows: list[EventRow] = []
        for entry in pending:
            if isinstance(entry, _Deferred):
                self._insert_events(rows)
                rows = []
                self.execute(entry.query, entry.params)
            else:
                rows.append(entry)
        self._insert_events(rows)

    def discard_events(self) -> None:
        self._events = []
        self._writes = []

    def before_events(self) -> None:  # noqa: B027 - a hook: nothing to do by default
        """Called once per transaction before its events are written (PostgreSQL takes the lock
        that numbers events in commit order here)."""

    def _insert_events(self, rows: list[EventRow]) -> None:
        if rows:
            self.insert(INSERT_EVENTS, rows)

    # -- dialect -------------------------------------------------------------------------------

    def stream(self, query: Query, params: Params, **counts: int) -> AbstractContextManager[Iterator[Any]]:
        """The rows of ``query`` as they are fetched, a few hundred at a time (inside :meth:`reading`);
        the cursor is closed on leaving, read to the end or not."""
        return _streamed(self.execute(query, params, **counts))

    def serialize_on(self, key: str) -> None:  # noqa: B027 - nothing to do where writes are serialized
        """Inside a write transaction: wait for any other transaction serialized on ``key``
        (two submits of one idempotency key)."""

    def try_exclusive(self, name: str) -> bool:
        """Inside a write transaction: True when no other transaction holds ``name`` (it is held
        until commit), False to skip optional work another process is doing (rescue)."""
        return True

    # -- lifecycle -----------------------------------------------------------------------------

    @abstractmethod
    def check_file(self) -> None:
        """Raise :class:`~thumbctl.core.errors.LedgerGone` when the ledger opened is gone (a file ledger)."""

    @abstractmethod
    def fault(self, code: str, detail: str) -> Exception:
        """The error ``code`` (``ledger_full``, ``ledger_corrupt``, …) for this ledger, with its advice."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def reconnect(self) -> None:
        """Open a new connection after the old one was lost (a server restart)."""


def record(cls: type[T], row: Any, /, **values: Any) -> T:
    """The dataclass ``cls`` from ``row``, field by field by column name; ``values`` give the
    fields named otherwise in the row (or computed)."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    return cls(
        **{name: values[name] if name in values else row[name] for name in names if name in values or _has(row, name)}
    )


def _has(row: Any, name: str) -> bool:
    return name in row.keys()  # noqa: SIM118 - a row has keys(), not __contains__ by name
