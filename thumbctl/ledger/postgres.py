"""The server ledger backend: one PostgreSQL database shared by workers on many machines.

Where SQLite lets one writer at a time, PostgreSQL runs write transactions side by side, so the
ledger's queries ask for what it needs explicitly (their PostgreSQL text, :mod:`.sql`):

* Rows a transaction is about to change are locked as it reads them (``FOR NO KEY UPDATE``);
  claims skip rows another claimer holds (``SKIP LOCKED``), so no item goes to two live leases.
  The lock re-reads the row as last committed, so a conditional transition (``running`` under this
  lease token) sees what any concurrent transaction committed.
* The cancel race rule: ``publish`` locks the item, then updates the batch row it checks the cancel
  flag on; ``cancel`` locks the same batch row. One of the two commits first; the other sees it.
  Whatever puts an item back to ``queued`` (a rescue, a failure, a release) reads the flag with the
  batch row share-locked (``FOR SHARE``): the cancel waits for it and cancels the item as queued,
  or it waits for the cancel and sees the flag.
* Commit order of events: a transaction takes one ledger-wide advisory lock
  (:data:`_EVENTS_LOCK`) right before it writes its events, as its last statements, and holds it
  to its commit; event numbers come from the ``events`` identity after that lock, so they are
  handed out in commit order, and a reader that saw event ``n`` never later finds one below ``n``.
  The price: commits that write events are serialized (measured in ``bench/backends.py``).
* A lost connection (a server restart) is :class:`~thumbctl.core.errors.LedgerConnectionLost`; the
  :class:`~.core.Ledger` reconnects and runs the operation again within the busy policy's bound.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..config.ledgerurl import masked, url_secrets
from ..core.errors import (
    LedgerConnectionLost,
    LedgerContention,
    LedgerCorrupt,
    LedgerError,
    LedgerFault,
    LedgerFull,
    LedgerLoginRefused,
    LedgerUnavailable,
    UsageError,
)
from ..core.retries import BusyPolicy
from .backend import Backend, Clock, EventRow, Params
from .pgschema import MIGRATIONS, NEWEST, SCHEMA_VERSION
from .sql import NAMED_LOCKS, POSTGRESQL, Insert, Query
from .sql.queue import INSERT_EVENTS

#: The most events of a transaction written by statements in the commit's round trip; more go by ``COPY``.
PIPELINED_EVENTS = 200
#: Advisory lock keys (the first half of two-int keys: one class of lock each).
_EVENTS_LOCK = 7419_0001
_MIGRATE_LOCK = 7419_0002
_KEY_LOCKS = 7419_0003
_NAMED_LOCKS = NAMED_LOCKS


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            "a PostgreSQL ledger needs the driver: pip install 'thumbctl[postgres]'", code="postgres_driver_missing"
        ) from None
    return psycopg


class PostgresBackend(Backend):
    """A connection to one PostgreSQL ledger."""

    kind = POSTGRESQL

    def __init__(self, url: str, *, clock: Clock, busy: BusyPolicy, read_only: bool = False) -> None:
        super().__init__()
        self.url = url
        self.name = masked(url)
        self.clock = clock
        self.busy = busy
        self.read_only = read_only
        self._psycopg = _driver()
        self._in_tx = False
        #: Statements that begin the write transaction, not sent yet (sent with the first statement).
        self._begin: tuple[str, ...] = ()
        self._streams = 0
        self.conn = self._connect()
        self._migrate()

    # -- connection ----------------------------------------------------------------------------

    def _connect(self) -> Any:
        self._check_url()
        from psycopg.rows import dict_row

        try:
            conn = self._psycopg.connect(
                self.url, autocommit=True, row_factory=dict_row, connect_timeout=max(1, int(self.busy.timeout))
            )
            # One round trip; a durable write asks for its commit to be flushed (see write()).
            conn.execute("SET TIME ZONE 'UTC'; SET synchronous_commit TO off")
        except self._psycopg.Error as exc:  # a bad option; down, starting up, shutting down, or refusing this login
            raise self._bad_option(exc) or self._refused(exc) or self._unavailable(exc) from None
        return conn

    def _bad_option(self, exc: BaseException) -> UsageError | None:
        """An option of the URL libpq refuses before it connects (``sslmode=bogus``): a
        configuration error (exit 2), which retrying the same URL cannot mend."""
        reason = _masked_text(_first_line(exc), self.url)
        if not _BAD_OPTION.search(reason):
            return None
        return UsageError(f"--db {self.name}: a connection option is refused ({reason})", code="bad_ledger_url")

    def _refused(self, exc: BaseException) -> LedgerLoginRefused | None:
        """A login the server refuses for good (the role, its password, the database, pg_hba):
        a configuration error, not a server to wait for."""
        reason = _masked_text(_first_line(exc), self.url)
        if not _LOGIN_REFUSED.search(reason):
            return None
        return LedgerLoginRefused(
            f"the PostgreSQL server refused the login to {self.name} ({reason}): check the user, password and "
            "database in --db (or THUMBCTL_DB)"
        )

    def _check_url(self) -> None:
        """A URL libpq cannot parse, or whose port is no port, is a usage error (exit 2): retrying
        it later, as cron would after exit 75, can never succeed."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(self.url)
        except self._psycopg.ProgrammingError as exc:
            raise UsageError(
                f"--db {self.name} is not a PostgreSQL URL libpq accepts: {_masked_text(_first_line(exc), self.url)}",
                code="bad_ledger_url",
            ) from None
        ports = str(params.get("port") or "5432").split(",")
        if not all(port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536 for port in ports):
            raise UsageError(f"--db {self.name}: the port must be a number from 1 to 65535", code="bad_ledger_url")

    def _unavailable(self, exc: BaseException) -> LedgerUnavailable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return LedgerUnavailable(
            f"the PostgreSQL ledger {self.name} cannot be reached ({_masked_text(reason, self.url)}): check that the "
            "server runs and accepts this user, then run the command again",
            retry_after=10,
        )

    def reconnect(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        self._in_tx = False
        self._begin = ()
        self.discard_events()
        self.conn = self._connect()

    def close(self) -> None:
        self.conn.close()

    # -- statements ----------------------------------------------------------------------------

    def execute(self, query: Query, params: Params = (), **counts: int) -> Any:
        """Run ``query``'s PostgreSQL text; one marked ``plan_each_run`` is never prepared, so the
        server plans it with the parameters it runs with."""
        return self._run(query.text(POSTGRESQL, **counts), params, prepare=False if query.plan_each_run else None)

    def _run(self, text: str, params: Params = (), *, prepare: bool | None = None) -> Any:
        """Run a statement written for PostgreSQL (the backend's own: transactions, advisory locks).
        The first statement of a write transaction goes in one round trip with its ``BEGIN``."""
        values = params if isinstance(params, Mapping) else (list(params) or None)
        try:
            if not self._begin:
                return self.conn.execute(text, values, prepare=prepare)
            with self.conn.pipeline():
                self._send_begin()
                cursor = self.conn.execute(text, values, prepare=prepare)
            return cursor
        except self._psycopg.Error as exc:
            raise self._translate_error(exc) from exc

    def _send_begin(self) -> None:
        """Send the pending ``BEGIN`` of the write transaction (in the pipeline of the caller, or alone)."""
        begin, self._begin = self._begin, ()
        for statement in begin:
            self.conn.execute(statement)

    def _begun(self) -> None:
        """The write transaction begun on the server before a statement that cannot share its round trip."""
        if self._begin:
            self._run("SELECT 1")

    def executemany(self, query: Query, rows: Iterable[Params]) -> None:
        self._begun()
        try:
            with self.conn.cursor() as cursor:
                cursor.executemany(query.text(POSTGRESQL), list(rows))
        except self._psycopg.Error as exc:
            raise self._translate_error(exc) from exc

    def insert(self, insert: Insert, rows: Iterable[Mapping[str, object]]) -> None:
        """Many rows at once through ``COPY``: a 100,000-item batch in one round trip."""
        statement = f"COPY {insert.table} ({', '.join(insert.columns)}) FROM STDIN"
        self._begun()
        try:
            with self.conn.cursor() as cursor, cursor.copy(statement) as copy:
                for row in rows:
                    copy.write_row([row[column] for column in insert.columns])
        except self._psycopg.Error as exc:
            raise self._translate_error(exc) from exc

    def _insert_events(self, rows: list[EventRow]) -> None:
        """A few rows as statements (they can share the commit's round trip), many by ``COPY``."""
        if len(rows) > PIPELINED_EVENTS:
            self.insert(INSERT_EVENTS, rows)
        elif rows:
            self.executemany(INSERT_EVENTS.query, rows)

    @staticmethod
    def first_value(row: Any) -> Any:
        return next(iter(row.values()))

    def _translate_error(self, exc: BaseException) -> BaseException:
        errors = self._psycopg.errors
        if isinstance(exc, errors.DeadlockDetected | errors.LockNotAvailable | errors.SerializationFailure):
            return LedgerContention(
                f"the PostgreSQL ledger {self.name} was busy ({_first_line(exc)}); retry", retry_after=5
            )
        if isinstance(exc, errors.DiskFull):
            return self.fault("ledger_full", _first_line(exc))
        if isinstance(exc, errors.DataCorrupted | errors.IndexCorrupted):
            return self.fault("ledger_corrupt", _first_line(exc))
        if isinstance(exc, self._psycopg.OperationalError) and self.conn.closed:
            return LedgerConnectionLost(
                f"the connection to the PostgreSQL ledger {self.name} was lost ({_first_line(exc)})", retry_after=5
            )
        if isinstance(
            exc, errors.AdminShutdown | errors.CrashShutdown | errors.CannotConnectNow | self._psycopg.InterfaceError
        ):
            return LedgerConnectionLost(
                f"the connection to the PostgreSQL ledger {self.name} was lost ({_first_line(exc)})", retry_after=5
            )
        return exc

    def serialize_on(self, key: str) -> None:
        self._run("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_KEY_LOCKS, key))

    def try_exclusive(self, name: str) -> bool:
        row = self._run("SELECT pg_try_advisory_xact_lock(%s, hashtext(%s)) AS held", (_NAMED_LOCKS, name)).fetchone()
        return bool(row["held"])

    def before_events(self) -> None:
        self._run("SELECT pg_advisory_xact_lock(%s)", (_EVENTS_LOCK,))

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def write(self, *, durable: bool = False) -> Iterator[float]:
        """``READ COMMITTED`` with explicit row locks; a write that need not be durable does not
        wait for its commit to reach the disk (as SQLite's ``synchronous=NORMAL``: the session's
        setting), a durable one does.

        Round trips: ``BEGIN`` goes with the first statement, and the deferred writes, the events
        and ``COMMIT`` go together at the end (:meth:`_commit`); a transaction that only defers its
        writes is one round trip."""
        if self._in_tx:
            raise RuntimeError("nested ledger write")
        self._in_tx = True
        self._begin = ("BEGIN", "SET LOCAL synchronous_commit TO on") if durable else ("BEGIN",)
        try:
            yield self.clock()
            self._commit()
        except BaseException:
            self.discard_events()
            if not self._begin:  # the transaction began on the server
                with contextlib.suppress(Exception):  # the first fault is the one to report
                    self.conn.execute("ROLLBACK")
            raise
        finally:
            self._in_tx = False
            self._begin = ()

    def _commit(self) -> None:
        """The deferred writes, the events and ``COMMIT`` in one round trip (a pipeline); a
        transaction that sent nothing has nothing to commit. Many events go by ``COPY``, which
        cannot join a pipeline: then each step is its own round trip."""
        if self._begin and not self._writes and not self._events:
            self._begin = ()
            return
        if len(self._events) > PIPELINED_EVENTS:
            self._begun()
            self.flush_events()
            self._run("COMMIT")
            return
        try:
            with self.conn.pipeline():
                self._send_begin()
                self.flush_events()
                self.conn.execute("COMMIT")
        except self._psycopg.Error as exc:
            raise self._translate_error(exc) from exc

    @contextmanager
    def reading(self) -> Iterator[None]:
        """``REPEATABLE READ``: one snapshot for every statement inside."""
        if self._in_tx:
            yield
            return
        self._run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._in_tx = True
        try:
            yield
        finally:
            self._in_tx = False
            with contextlib.suppress(Exception):
                self.conn.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    @contextmanager
    def stream(self, query: Query, params: Params, **counts: int) -> Iterator[Iterator[Any]]:
        """The rows of ``sql`` through a server-side cursor, a few hundred at a time (inside
        :meth:`reading`): a million-row listing never sits in memory."""
        self._begun()
        self._streams += 1  # each open listing its own cursor: two may be read at once
        cursor = self.conn.cursor(name=f"thumbctl_stream_{self._streams}")
        cursor.itersize = 500
        try:
            cursor.execute(query.text(POSTGRESQL, **counts), list(params) or None)
            yield iter(cursor)
        except self._psycopg.Error as exc:
            raise self._translate_error(exc) from exc
        finally:
            with contextlib.suppress(Exception):
                cursor.close()

    # -- lifecycle -----------------------------------------------------------------------------

    def check_file(self) -> None:
        """A server ledger has no file to lose."""

    def fault(self, code: str, detail: str) -> LedgerFault:
        if code == "ledger_unavailable":  # a worker could not reach the server within the busy policy's bound
            return self._unavailable(RuntimeError(detail))
        if code == "ledger_full":
            return LedgerFull(
                f"the PostgreSQL server of the ledger {self.name} is out of disk space ({detail}); what was "
                "recorded is kept: free space on the server, then run the command again",
                retry_after=60,
            )
        if code == "ledger_corrupt":
            return LedgerCorrupt(
                f"the PostgreSQL server reports damaged data in the ledger {self.name} ({detail}): restore the "
                "database from a backup (or have its administrator repair it), then run `thumbctl reconcile --repair`"
            )
        from .connection import fault_for  # what a worker reports from its exit status: the same advice

        return fault_for(code, self.name, detail)  # type: ignore[arg-type]

    def _migrate(self) -> None:
        """Create the schema in a new database, or apply the migrations an older ledger lacks, under an
        advisory lock: two processes that start at once on a new database create it once."""
        if self._version() == SCHEMA_VERSION:
            return
        with self.write(durable=True):
            self._run("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
            self._run("CREATE TABLE IF NOT EXISTS thumbctl_schema (version integer NOT NULL)")
            version = self._version()
            if version > SCHEMA_VERSION:
                raise LedgerError(
                    f"the ledger {self.name} has schema version {version}; this thumbctl knows up to "
                    f"{SCHEMA_VERSION}: upgrade thumbctl"
                )
            # A new ledger is created at the newest schema at once; an older one gets the migrations it lacks.
            steps = [NEWEST] if version == 0 else [statements for target, statements in MIGRATIONS if target > version]
            for statements in steps:
                for statement in statements:
                    self.conn.execute(statement)
            self._run("DELETE FROM thumbctl_schema")
            self._run("INSERT INTO thumbctl_schema (version) VALUES (%s)", (SCHEMA_VERSION,))

    def _version(self) -> int:
        if not self._run("SELECT to_regclass('thumbctl_schema') IS NOT NULL AS found").fetchone()["found"]:
            return 0
        return int(self._run("SELECT coalesce(max(version), 0) AS version FROM thumbctl_schema").fetchone()["version"])


#: Server messages (FATAL at connection start, and libpq's own) that retrying cannot change.
_LOGIN_REFUSED = re.compile(
    r'(role|database) "[^"]*" does not exist|authentication failed|no pg_hba\.conf entry'
    r"|is not permitted to log in|no password supplied"
)


#: libpq's refusals of an option's value, before any connection is tried, and the server's of a
#: setting the URL passes (``?options=-c statement_timeout=bogus``): neither mends on its own.
_BAD_OPTION = re.compile(
    r"invalid [\w ]+ value|invalid port number|could not match \d+ (host names|port numbers)"
    r"|value \S+ invalid when \S+ support is not compiled in"
    r"|invalid value for parameter|unrecognized configuration parameter"
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _masked_text(text: str, url: str) -> str:
    """``text`` (a driver's message) without a secret of ``url`` (see :func:`url_secrets`) anywhere in it."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text
