"""Schema parity: a freshly migrated SQLite ledger and PostgreSQL ledger hold the same schema.

The two backends have their own migrations (``schema.py`` and ``pgschema.py``); this test is what
keeps them in step. It compares tables, columns with their type family and nullability, primary
keys, unique constraints, foreign keys and indexes (by table, columns and the condition of a
partial index, written alike once PostgreSQL's casts and parentheses are dropped).

Index columns are compared without a trailing primary-key column: every SQLite index of a rowid
table ends with the rowid (``items.id``) implicitly, where PostgreSQL names it. The indexes that
exist on PostgreSQL only are listed in :data:`PLANNER_ONLY`, each with its reason: they let its
planner find what SQLite is told through an index hint, and adding them to SQLite would change
its plans. Nothing else may differ.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from thumbctl import Ledger

#: Indexes only the PostgreSQL ledger has: (table, columns, condition).
PLANNER_ONLY = {
    # A lease's running items (heartbeat, publish, release) without a hint to the batch index.
    ("items", ("lease_token",), "lease_token is not null"),
    # The running items of one worker (overdue stages, rescue).
    ("items", ("lease_owner",), "state = 'running'"),
    # A claim's next fresh item in id order, and its next due retry: SQLite walks items_runnable.
    ("items", ("id",), "state = 'queued' and not_before is null"),
    ("items", ("not_before",), "state = 'queued' and not_before is not null"),
}

_FAMILIES = {
    "integer": "integer",
    "bigint": "integer",
    "smallint": "integer",
    "int": "integer",
    "text": "text",
    "character varying": "text",
    "real": "real",
    "float": "real",
    "double precision": "real",
    "blob": "blob",
    "bytea": "blob",
    "boolean": "bool",
}

Index = tuple[str, tuple[str, ...], str | None]


@dataclass
class Schema:
    #: table -> column -> (type family, not null)
    columns: dict[str, dict[str, tuple[str, bool]]]
    primary_keys: dict[str, tuple[str, ...]]
    unique: set[tuple[str, tuple[str, ...]]]
    foreign_keys: set[tuple[str, tuple[str, ...], str, tuple[str, ...]]]
    indexes: set[Index]


def family(declared: str) -> str:
    return _FAMILIES[declared.lower()]


def condition(text: str | None) -> str | None:
    """A partial index's condition in one spelling: lower case, no casts, no parentheses."""
    if text is None:
        return None
    text = re.sub(r"::[a-z ]+", "", text).replace("(", "").replace(")", "")
    return " ".join(text.split()).lower()


def without_rowid(columns: tuple[str, ...], primary_key: tuple[str, ...]) -> tuple[str, ...]:
    if len(columns) > 1 and primary_key == ("id",) and columns[-1] == "id":
        return columns[:-1]
    return columns


def sqlite_schema(path: Path) -> Schema:
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [
            name
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        columns: dict[str, dict[str, tuple[str, bool]]] = {}
        primary_keys: dict[str, tuple[str, ...]] = {}
        unique: set[tuple[str, tuple[str, ...]]] = set()
        foreign_keys: set[tuple[str, tuple[str, ...], str, tuple[str, ...]]] = set()
        indexes: set[Index] = set()
        for table in tables:
            info = db.execute(f"PRAGMA table_info({table})").fetchall()
            columns[table] = {name: (family(kind), bool(notnull or pk)) for _, name, kind, notnull, _, pk in info}
            primary_keys[table] = tuple(row[1] for row in sorted(info, key=lambda row: row[5]) if row[5])
            for _, index, is_unique, origin, partial in db.execute(f"PRAGMA index_list({table})").fetchall():
                names = tuple(r[2] for r in db.execute(f"PRAGMA index_info({index})").fetchall())
                if origin == "pk":
                    continue
                if is_unique:
                    unique.add((table, names))
                    continue
                where = None
                if partial:
                    (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (index,)).fetchone()
                    where = condition(sql.split(" WHERE ", 1)[1])
                indexes.add((table, without_rowid(names, primary_keys[table]), where))
            refs: dict[int, list[tuple[str, str, str]]] = {}
            for fk_id, _, target, source, to, *_ in db.execute(f"PRAGMA foreign_key_list({table})").fetchall():
                refs.setdefault(fk_id, []).append((target, source, to))
            for parts in refs.values():
                foreign_keys.add((table, tuple(p[1] for p in parts), parts[0][0], tuple(p[2] for p in parts)))
    return Schema(columns, primary_keys, unique, foreign_keys, indexes)


def postgres_schema(url: str) -> Schema:
    import psycopg

    with psycopg.connect(url) as db:
        columns: dict[str, dict[str, tuple[str, bool]]] = {}
        for table, name, kind, nullable in db.execute(
            "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name <> 'thumbctl_schema' ORDER BY table_name, ordinal_position"
        ):
            columns.setdefault(table, {})[name] = (family(kind), nullable == "NO")
        rows = db.execute(
            "SELECT t.relname, ix.indisprimary, ix.indisunique, pg_get_expr(ix.indpred, ix.indrelid), "
            "array(SELECT a.attname FROM unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum ORDER BY k.n) "
            "FROM pg_index ix JOIN pg_class t ON t.oid = ix.indrelid JOIN pg_namespace s ON s.oid = t.relnamespace "
            "WHERE s.nspname = 'public' AND t.relname <> 'thumbctl_schema'"
        ).fetchall()
        primary_keys = {table: tuple(names) for table, primary, _, _, names in rows if primary}
        unique = {(table, tuple(names)) for table, primary, is_unique, _, names in rows if is_unique and not primary}
        indexes = {
            (table, without_rowid(tuple(names), primary_keys.get(table, ())), condition(where))
            for table, primary, is_unique, where, names in rows
            if not is_unique
        }
        foreign_keys = {
            (table, tuple(source), target, tuple(to))
            for table, source, target, to in db.execute(
                "SELECT c.conrelid::regclass::text, "
                "array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
                "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.n), "
                "c.confrelid::regclass::text, "
                "array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, n) "
                "JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum ORDER BY k.n) "
                "FROM pg_constraint c JOIN pg_namespace s ON s.oid = c.connamespace "
                "WHERE c.contype = 'f' AND s.nspname = 'public'"
            )
        }
    return Schema(columns, primary_keys, unique, foreign_keys, indexes)


def test_a_fresh_sqlite_ledger_and_postgresql_ledger_have_one_schema(tmp_path: Path, pg_url: str) -> None:
    Ledger(tmp_path / "ledger.db").close()
    Ledger(pg_url).close()
    lite, server = sqlite_schema(tmp_path / "ledger.db"), postgres_schema(pg_url)

    assert sorted(lite.columns) == sorted(server.columns)
    for table in lite.columns:
        assert lite.columns[table] == server.columns[table], table
    assert lite.primary_keys == server.primary_keys
    assert lite.unique == server.unique
    assert lite.foreign_keys == server.foreign_keys
    assert lite.indexes == server.indexes - PLANNER_ONLY
    assert PLANNER_ONLY <= server.indexes, "a planner-only index listed here no longer exists"


def test_the_sqlite_schema_is_read_as_the_parity_test_compares_it(tmp_path: Path) -> None:
    """Without a server: the SQLite half reads what the comparison expects (a check of the reader)."""
    Ledger(tmp_path / "ledger.db").close()
    lite = sqlite_schema(tmp_path / "ledger.db")
    assert lite.primary_keys["items"] == ("id",)
    assert lite.columns["items"]["id"] == ("integer", True)
    assert lite.columns["items"]["focus_x"] == ("real", False)
    assert ("batches", ("idempotency_key",)) in lite.unique
    assert ("items", ("batch_id", "not_before"), "state = 'queued'") in lite.indexes
    assert ("events", ("seq",), "error_code is not null") in lite.indexes
    assert ("items", ("batch_id",), "batches", ("batch_id",)) in lite.foreign_keys
