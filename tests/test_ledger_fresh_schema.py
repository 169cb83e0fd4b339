"""A new ledger is created at the newest schema at once; an old one is upgraded by its migrations.

Both must end with the same schema, on each backend: the same tables with the same columns in the
same order (type, nullability, default, primary key, collation), the same indexes (name, columns,
uniqueness, partial condition), constraints (checks, unique, foreign keys), triggers and schema
version. A ledger migrated from version 1 is the reference: a migration added later without the
same change to ``NEWEST`` fails here.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.ledger.pgschema import MIGRATIONS as PG_MIGRATIONS
from thumbctl.ledger.schema import MIGRATIONS, SCHEMA_VERSION

from pg import create_database, drop_database


def _spaced(sql: str) -> str:
    """SQL text in one spelling: single spaces, no quotes around names, no space inside parentheses."""
    text = " ".join(sql.replace('"', "").split())
    return text.replace("( ", "(").replace(" )", ")")


def _checks(sql: str) -> list[str]:
    """The CHECK constraints of a CREATE TABLE statement, each in one spelling."""
    found = []
    for match in re.finditer(r"CHECK\s*\(", sql):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            end += 1
        found.append(_spaced(sql[match.start() : end]))
    return sorted(found)


def sqlite_schema(path: Path) -> dict[str, object]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        master = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        tables = {}
        for kind, name, _, sql in master:
            if kind != "table":
                continue
            indexes = {}
            for _, index, unique, origin, partial in db.execute(f"PRAGMA index_list({name})").fetchall():
                where = None
                if partial:
                    (index_sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (index,)).fetchone()
                    where = _spaced(index_sql.split(" WHERE ", 1)[1])
                indexes[index] = (unique, origin, where, db.execute(f"PRAGMA index_xinfo({index})").fetchall())
            tables[name] = {
                "columns": db.execute(f"PRAGMA table_xinfo({name})").fetchall(),
                "indexes": indexes,
                "foreign_keys": db.execute(f"PRAGMA foreign_key_list({name})").fetchall(),
                "checks": _checks(sql),
            }
        triggers = {name: _spaced(sql) for kind, name, _, sql in master if kind == "trigger"}
        (version,) = db.execute("PRAGMA user_version").fetchone()
        (ledger_ids,) = db.execute("SELECT count(*) FROM meta WHERE name = 'ledger_id'").fetchone()
    return {"tables": tables, "triggers": triggers, "version": version, "ledger_ids": ledger_ids}


def _sqlite_at_version_1(path: Path) -> None:
    import sqlite_utils

    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        MIGRATIONS[0][1](sqlite_utils.Database(conn))
        conn.execute("PRAGMA user_version = 1")
        conn.execute("COMMIT")


def test_a_new_sqlite_ledger_has_the_schema_its_migrations_give_an_old_one(tmp_path: Path) -> None:
    _sqlite_at_version_1(tmp_path / "old.db")
    Ledger(tmp_path / "old.db").close()
    Ledger(tmp_path / "new.db").close()

    migrated, created = sqlite_schema(tmp_path / "old.db"), sqlite_schema(tmp_path / "new.db")

    assert created["version"] == migrated["version"] == SCHEMA_VERSION
    assert created["ledger_ids"] == migrated["ledger_ids"] == 1
    assert sorted(created["tables"]) == sorted(migrated["tables"])
    for table, shape in migrated["tables"].items():
        assert created["tables"][table] == shape, table
    assert created["triggers"] == migrated["triggers"]
    assert "sqlite_sequence" in created["tables"]  # events.seq is AUTOINCREMENT on both


def postgres_schema(url: str) -> dict[str, object]:
    import psycopg

    with psycopg.connect(url) as db:
        columns = db.execute(
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, column_default, "
            "collation_name, is_identity, identity_generation FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        ).fetchall()
        indexes = db.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname"
        ).fetchall()
        constraints = db.execute(
            "SELECT c.conrelid::regclass::text, c.conname, c.contype, pg_get_constraintdef(c.oid) "
            "FROM pg_constraint c JOIN pg_namespace s ON s.oid = c.connamespace "
            "WHERE s.nspname = 'public' ORDER BY c.conname"
        ).fetchall()
        triggers = db.execute(
            "SELECT tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' AND NOT t.tgisinternal "
            "ORDER BY tgname"
        ).fetchall()
        functions = db.execute(
            "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "
            "WHERE s.nspname = 'public' ORDER BY p.proname"
        ).fetchall()
        versions = db.execute("SELECT version FROM thumbctl_schema").fetchall()
        ledger_ids = db.execute("SELECT count(*) FROM meta WHERE name = 'ledger_id'").fetchone()
    return {
        "columns": columns,
        "indexes": indexes,
        "constraints": constraints,
        "triggers": triggers,
        "functions": functions,
        "versions": versions,
        "ledger_ids": ledger_ids,
    }


@pytest.fixture
def two_pg_urls(pg_url: str, pg_admin_url: str) -> Iterator[tuple[str, str]]:
    other = create_database(pg_admin_url)
    try:
        yield pg_url, other
    finally:
        drop_database(pg_admin_url, other)


def _postgres_at_version_1(url: str) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        for statement in dict(PG_MIGRATIONS)[1]:
            conn.execute(statement)
        conn.execute("CREATE TABLE thumbctl_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO thumbctl_schema (version) VALUES (1)")


def test_a_new_postgresql_ledger_has_the_schema_its_migrations_give_an_old_one(two_pg_urls: tuple[str, str]) -> None:
    old, new = two_pg_urls
    _postgres_at_version_1(old)
    Ledger(old).close()
    Ledger(new).close()

    migrated, created = postgres_schema(old), postgres_schema(new)

    assert created["versions"] == migrated["versions"] == [(PG_MIGRATIONS[-1][0],)]
    assert created["ledger_ids"] == migrated["ledger_ids"] == (1,)
    for part in ("columns", "indexes", "constraints", "triggers", "functions"):
        assert created[part] == migrated[part], part
