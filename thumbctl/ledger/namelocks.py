"""Locks by name, held to the end of a write transaction: a thumbnail name while it is published,
and the store while gc removes an object a submit may be reusing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from .backend import Backend
from .damage import loose_object
from .retry import direct
from .sql import damage as damage_sql
from .sql import queue as sql
from .timefmt import iso

#: The outcomes of publishing at a name that a batch counts (``replaced``, ``overwritten``).
NAME_FLAGS = ("replaced", "overwritten")
#: Serializes gc removing an object with a submit recording a reuse of it.
OBJECT_STORE = "object-store"


def name_key(friendly_path: str) -> str:
    """What transactions publishing or removing ``friendly_path`` serialize on."""
    return f"name:{friendly_path}"


class NameLocks:
    """The lock on a thumbnail name, for the ports that publish names (the queue and intake)."""

    db: Backend

    @direct  # the caller's block runs inside: nothing here can run again
    @contextmanager
    def publishing_name(self, friendly_path: str) -> Iterator[None]:
        key = name_key(friendly_path)
        if self.db.in_transaction:
            self.db.serialize_on(key)
            yield
            return
        with self.db.write():
            self.db.serialize_on(key)
            yield

    @direct  # a part of the publishing_name transaction when one is open
    def record_name_version(
        self, batch_id: str, friendly_path: str, version: str | None, outcome: str | None = None
    ) -> None:
        if self.db.in_transaction:
            self._record_name_version(batch_id, friendly_path, version, outcome, self.db.clock())
            return
        with self.db.write() as now:
            self._record_name_version(batch_id, friendly_path, version, outcome, now)

    def _record_name_version(
        self, batch_id: str, friendly_path: str, version: str | None, outcome: str | None, now: float
    ) -> None:
        self.db.execute(sql.RECORD_NAME_VERSION, (version, batch_id, friendly_path))
        if outcome in NAME_FLAGS:
            self._flag_reused_name(batch_id, friendly_path, f"name_{outcome}")
        row = self.db.scalar(sql.NAMED_ITEM, (batch_id, friendly_path))
        if row is not None:
            record_name(self.db, row, version, iso(now))

    def _flag_reused_name(self, batch_id: str, friendly_path: str, flag: str) -> None:
        """A reused output's publish that replaced other bytes at its name: the flag is merged into what
        intake recorded of it (no result, or one marked ``reused``), never into a render's result; a
        stored result that does not parse is left as it is (reconcile reports it)."""
        for row in self.db.execute(damage_sql.RESULTS_AT_NAME, (batch_id, friendly_path)).fetchall():
            stored = loose_object(row["result"])
            if row["result"] is None or (stored is not None and stored.get("reused") is True):
                self.db.execute(sql.STORE_RESULT, (json.dumps({**(stored or {}), flag: True}), row["id"]))


def record_name(db: Backend, row: int, version: str | None, at: str, *, deferred: bool = False) -> None:
    """Inside a write transaction: the name of item ``row`` was published at ``version``. The name's
    own record, which outlives the batch's expiry, now names this item: the newest publisher at a
    name owns it. ``deferred``: written at the end of the transaction (:meth:`Backend.defer`)."""
    if deferred:
        db.defer(sql.RECORD_NAME, (version, at, at, row))
    else:
        db.execute(sql.RECORD_NAME, (version, at, at, row))
