"""The ledger's SQL: every statement a named :class:`Query`, written once, rendered per backend at import.

A statement is written once, with ``?`` placeholders (``:name`` where its parameters come from a
mapping). Where the two dialects really differ (planner hints, an aggregate, row locks, a
join SQLite needs to keep its order), the text names a fragment in braces and
:data:`FRAGMENTS` gives it per backend, side by side. Rendering happens once, when the module
defining the query is imported: SQLite keeps ``?`` and ``:name``, PostgreSQL gets ``%s`` and
``%(name)s``. Nothing is rewritten while the ledger runs.

Some statements take a list of values (``id IN ({ids})``) or an optional condition (a scope to one
batch); such a *list field* names the unit that repeats, its joiner, and optionally what goes
before and after the list when it is not empty. The statement is completed with the count of
values (0 or 1 for an optional condition) when it runs: the count of placeholders is all that
changes.

The modules beside this one hold the queries, one module per concept of the ledger:
:mod:`.intake`, :mod:`.queue`, :mod:`.views`, :mod:`.upkeep`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
KINDS = (SQLITE, POSTGRESQL)

#: PostgreSQL's advisory lock class of locks by name (the first half of their two-int keys; the
#: backend takes them as ``(NAMED_LOCKS, hashtext(name))``).
NAMED_LOCKS = 7419_0004

#: What differs between the dialects, written for each: a query names these in braces.
FRAGMENTS: dict[str, dict[str, str]] = {
    SQLITE: {
        # A write transaction there excludes every other writer: no row locks are needed.
        "lock": "",
        "lock_skip_locked": "",
        # A write transaction excludes every other: a source is never taken by two claimers at once.
        "try_source": "",
        "lock_i": "",
        "share_b": "",
        "share": "",
        # Planner hints: the index a query must walk, and a unary + keeping a column off an index.
        "by_items_runnable": "INDEXED BY items_runnable",
        "by_items_queued_by_batch": "INDEXED BY items_queued_by_batch",
        "by_items_queued_age": "INDEXED BY items_queued_age",
        "by_events_at": "INDEXED BY events_at",
        "by_events_errors": "INDEXED BY events_errors",
        "no_index": "+",
        # SQLite keeps the written order of a CROSS JOIN; PostgreSQL has no CROSS JOIN … USING.
        "ordered_join": "CROSS JOIN",
        "ratios": "group_concat(i.ratio, ' ')",
    },
    POSTGRESQL: {
        "lock": " FOR NO KEY UPDATE",
        "lock_skip_locked": " FOR NO KEY UPDATE SKIP LOCKED",
        # The source held to the end of the transaction, or passed over when another claimer holds it
        # (the named lock ``source:<batch>/<source>`` of PostgresBackend.try_exclusive).
        "try_source": (
            f" AND pg_try_advisory_xact_lock({NAMED_LOCKS}, hashtext('source:' || batch_id || '/' || source))"
        ),
        "lock_i": " FOR NO KEY UPDATE OF i",
        "share_b": " FOR SHARE OF b",
        # A batch row read to decide an item's next state: a cancel (which locks the row to set its
        # flag) waits for the decision to commit, or the read waits for the cancel and sees its flag.
        "share": " FOR SHARE",
        "by_items_runnable": "",
        "by_items_queued_by_batch": "",
        "by_items_queued_age": "",
        "by_events_at": "",
        "by_events_errors": "",
        "no_index": "",
        "ordered_join": "JOIN",
        "ratios": "string_agg(i.ratio, ' ')",
    },
}

_POSITIONAL = re.compile(r"\?")
_NAMED = re.compile(r"(?<![:\w]):([a-z_]+)\b")


def _placeholders(text: str, kind: str) -> str:
    if kind == SQLITE:
        return text
    text = _POSITIONAL.sub("%s", text.replace("%", "%%"))
    return _NAMED.sub(r"%(\1)s", text)


@dataclass(frozen=True, eq=False)
class Query:
    """One named statement, rendered for each backend.

    ``plan_each_run``: PostgreSQL plans it with its actual parameters every time it runs (psycopg
    ``prepare=False``). Left to the driver, a statement run five times is prepared, and the
    server may then plan it once for any parameters: a claim scoped to a batch walked the index
    of every queued item in id order, past every queued item of the batches before it (600 ms
    per claim with 1M queued, 2 ms planned with the batch's id). Set on the statements whose
    plan depends on their parameters: those SQLite is given an index hint for."""

    name: str
    texts: Mapping[str, str]
    lists: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    plan_each_run: bool = False

    def text(self, kind: str, **counts: int) -> str:
        """The statement for backend ``kind``, each list field repeated ``counts[field]`` times."""
        if not counts:
            return self.texts[kind]
        return _completed(self, kind, tuple(sorted(counts.items())))


@lru_cache(maxsize=4096)
def _completed(query: Query, kind: str, counts: tuple[tuple[str, int], ...]) -> str:
    units = query.lists[kind]
    return query.texts[kind].format(**{name: _repeated(units[name], n) for name, n in counts})


def _repeated(spec: tuple[str, ...], n: int) -> str:
    unit, joiner, before, after = (*spec, "", "")[:4]
    return f"{before}{joiner.join([unit] * n)}{after}" if n else ""


def query(
    name: str,
    text: str,
    *,
    lists: Mapping[str, tuple[str, ...]] | None = None,
    plan_each_run: bool = False,
) -> Query:
    """The query ``name``: ``text`` rendered for each backend (its fragments from :data:`FRAGMENTS`).
    ``lists`` maps a list field of ``text`` to its repeated unit, its joiner, and what stands before
    and after a list that is not empty (``{"ids": ("?", ",")}``, ``("?", ",", " OR id IN (", ")")``)."""
    lists = dict(lists or {})
    texts: dict[str, str] = {}
    units: dict[str, dict[str, tuple[str, ...]]] = {}
    for kind in KINDS:
        kept = {field_name: "{" + field_name + "}" for field_name in lists}
        texts[kind] = _placeholders(text.format(**FRAGMENTS[kind], **kept), kind)
        units[kind] = {
            field_name: tuple(_placeholders(part.format(**FRAGMENTS[kind]), kind) for part in spec)
            for field_name, spec in lists.items()
        }
    return Query(name, texts, units, plan_each_run)


#: The list field of row ids: ``id IN ({ids})``.
IDS = {"ids": ("?", ",")}


def scoped(condition: str) -> dict[str, tuple[str, ...]]:
    """An optional condition ``{scope}`` (count 1: present, 0: absent)."""
    return {"scope": (condition, "")}


@dataclass(frozen=True, eq=False)
class Insert:
    """Rows of ``table`` inserted from mappings keyed by ``columns`` (SQLite: one statement with
    named parameters; PostgreSQL: ``COPY``)."""

    table: str
    columns: tuple[str, ...]
    query: Query


def insert(table: str, columns: tuple[str, ...]) -> Insert:
    values = ", ".join(f":{column}" for column in columns)
    return Insert(
        table, columns, query(f"insert_{table}", f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})")
    )


__all__ = [
    "FRAGMENTS",
    "IDS",
    "KINDS",
    "NAMED_LOCKS",
    "POSTGRESQL",
    "SQLITE",
    "Insert",
    "Query",
    "insert",
    "query",
    "scoped",
]
