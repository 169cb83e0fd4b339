"""Sweep: every command against every damaged stored value, as real processes; counts tracebacks.

A small batch is submitted (real photos, a photo that fails, two ratios), then for each TEXT
column of each table of the ledger and each kind of damage, one row's value is damaged on a copy
of the ledger (cut in half, a quote written into its middle, replaced by other JSON, and on SQLite
a byte that is not UTF-8 appended), and every command runs against that copy as
``python -m thumbctl`` would for a user. A run whose stderr holds a Python traceback is counted,
with its exit code; so are the exit codes of all runs. ``tests/test_damage.py`` samples the same
space in process with hypothesis; this is the whole of it.

``--pg URL`` (a server the sweep may create databases on) runs the same on PostgreSQL, one fresh
database per damaged value. ``--smoke`` damages one column each way and runs two commands (for CI:
that the sweep runs on each backend; ``tests/test_damage.py`` checks the values themselves).
Run it from the repository root::

    python bench/damage.py [--pg URL] [--smoke] [--columns items.result,batches.profile]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import sqlite_utils

REPO = Path(__file__).resolve().parent.parent

COMMANDS = (
    ("status", "--json"),
    ("status", "{b}"),
    ("status", "{b}", "--items"),
    ("status", "{b}", "--items", "--json"),
    ("status", "{b}", "--html"),
    ("events", "{b}", "--json"),
    ("stats",),
    ("reconcile",),
    ("reconcile", "--repair"),
    ("sheet", "{b}", "-o", "{sheet}"),
    ("cancel", "{b}", "--json"),
    ("retry", "{b}", "-w", "1", "--json"),
)
SMOKE_COMMANDS = (("status", "{b}", "--items"), ("sheet", "{b}", "-o", "{sheet}"))
SMOKE_COLUMNS = ("items.result",)


def damages(backend: str) -> dict[str, Callable[[str], str] | None]:
    """Kind -> new value from the stored text (None: a SQL expression of SQLite's, see :func:`damage`)."""
    kinds: dict[str, Callable[[str], str] | None] = {
        "truncate": lambda value: value[: len(value) // 2],
        "garble": lambda value: value[: len(value) // 2] + '"' + value[len(value) // 2 + 1 :],
        "other JSON": lambda value: "[1]",
    }
    if backend == "sqlite":
        kinds["not UTF-8"] = None
    return kinds


def thumbctl(db: str, store: Path, *args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "THUMBCTL_DB": db, "THUMBCTL_STORE": str(store), "PYTHONPATH": str(REPO)}
    env.pop("THUMBCTL_FAULT", None)
    command = [sys.executable, "-m", "thumbctl", *(str(a) for a in args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def photos(folder: Path) -> Path:
    folder.mkdir(parents=True)
    samples = REPO / "sample_images"
    shutil.copy(samples / "orientation" / "Landscape_6.jpg", folder / "living.jpg")
    shutil.copy(samples / "public-domain" / "sk-coffee.png", folder / "coffee.png")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"x" * 64)
    return folder


def submit(db: str, work: Path, src: Path) -> str:
    done = thumbctl(
        db, work / "store", "submit", src, "--out", work / "out", "--ratio", "1:1", "--ratio", "4:3", "--json"
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"submit failed: {done.stderr}")
    return json.loads(done.stdout)["batch_id"]


def text_columns(db: Path) -> list[str]:
    """Every TEXT column of the ledger's own tables, as ``table.column``."""
    ledger = sqlite_utils.Database(db)
    try:
        return [
            f"{table.name}.{column.name}"
            for table in ledger.tables
            if not table.name.startswith("sqlite_")
            for column in table.columns
            if column.type.upper() == "TEXT"
        ]
    finally:
        ledger.close()


class SqliteLedger:
    """Copies of one submitted SQLite ledger, damaged one value at a time."""

    backend = "sqlite"

    def __init__(self, work: Path, src: Path) -> None:
        self.work = work
        self.base = work / "base.db"
        self.batch_id = submit(str(self.base), work, src)
        self.copy = work / "copy.db"

    def damaged(self, table: str, column: str, change: Callable[[str], str] | None) -> str | None:
        for leftover in (self.copy, Path(f"{self.copy}-wal"), Path(f"{self.copy}-shm")):
            leftover.unlink(missing_ok=True)
        shutil.copy(self.base, self.copy)
        with sqlite3.connect(self.copy, isolation_level=None) as raw:
            rows = raw.execute(f"SELECT rowid, {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY 1").fetchall()
            if not rows:
                return None
            row, value = rows[len(rows) // 2]
            trigger = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'events_append_only'").fetchone()[0]
            raw.execute("DROP TRIGGER events_append_only")
            try:
                if change is None:
                    raw.execute(
                        f"UPDATE {table} SET {column} = CAST(CAST({column} AS BLOB) || x'ff' AS TEXT) WHERE rowid = ?",
                        (row,),
                    )
                else:
                    raw.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (change(str(value)), row))
            except sqlite3.IntegrityError:
                return None
            finally:
                raw.execute(trigger)
        return str(self.copy)


class PgLedger:
    """A fresh PostgreSQL database per damaged value, each with the same batch submitted."""

    backend = "postgresql"

    def __init__(self, work: Path, src: Path, admin_url: str) -> None:
        import psycopg

        self.psycopg = psycopg
        self.work, self.src, self.admin_url = work, src, admin_url
        self.url: str | None = None
        self.batch_id = ""

    def damaged(self, table: str, column: str, change: Callable[[str], str] | None) -> str | None:
        self.drop()
        name = f"thumbctl_damage_{uuid.uuid4().hex[:12]}"
        with self.psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.url = urlunsplit(urlsplit(self.admin_url)._replace(path=f"/{name}"))
        shutil.rmtree(self.work / "store", ignore_errors=True)
        shutil.rmtree(self.work / "out", ignore_errors=True)
        self.batch_id = submit(self.url, self.work, self.src)
        assert change is not None
        with self.psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(f"SELECT ctid, {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY 1").fetchall()
            if not rows:
                return None
            row, value = rows[len(rows) // 2]
            conn.execute("ALTER TABLE events DISABLE TRIGGER USER")
            try:
                conn.execute(f"UPDATE {table} SET {column} = %s WHERE ctid = %s", (change(str(value)), row))
            except self.psycopg.errors.IntegrityError:
                return None
            finally:
                conn.execute("ALTER TABLE events ENABLE TRIGGER USER")
        return self.url

    def drop(self) -> None:
        if self.url is not None:
            name = urlsplit(self.url).path.lstrip("/")
            with self.psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self.url = None


def sweep(ledger: SqliteLedger | PgLedger, columns: list[str], commands: tuple[tuple[str, ...], ...]) -> Iterator[dict]:
    for column in columns:
        table, name = column.split(".")
        for kind, change in damages(ledger.backend).items():
            db = ledger.damaged(table, name, change)
            if db is None:
                continue
            for command in commands:
                args = [part.format(b=ledger.batch_id, sheet=ledger.work / "sheet.html") for part in command]
                done = thumbctl(db, ledger.work / "store", *args)
                yield {
                    "column": column,
                    "damage": kind,
                    "command": " ".join(command),
                    "code": done.returncode,
                    "traceback": "Traceback (most recent call last)" in done.stderr,
                    "last": (done.stderr.strip().splitlines() or [""])[-1][:160],
                }


def report(backend: str, runs: list[dict]) -> None:
    tracebacks = [r for r in runs if r["traceback"]]
    codes = collections.Counter(r["code"] for r in runs)
    print(f"## {backend}\n")
    print("| runs | damaged values | tracebacks | exit codes |")
    print("|---|---|---|---|")
    values = len({(r["column"], r["damage"]) for r in runs})
    shown = ", ".join(f"{code}: {n}" for code, n in sorted(codes.items()))
    print(f"| {len(runs)} | {values} | {len(tracebacks)} | {shown} |\n")
    for run in tracebacks:
        print(f"- traceback: {run['column']} {run['damage']} `{run['command']}` exit {run['code']}: {run['last']}")
    if tracebacks:
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", help="also sweep a PostgreSQL ledger on this server (admin URL)")
    parser.add_argument("--smoke", action="store_true", help="one column, two commands")
    parser.add_argument("--columns", help="table.column,... (default: every TEXT column)")
    args = parser.parse_args()
    commands = SMOKE_COMMANDS if args.smoke else COMMANDS
    failed = False
    with tempfile.TemporaryDirectory(prefix="thumbctl-damage-") as tmp:
        src = photos(Path(tmp) / "photos")
        ledger = SqliteLedger(Path(tmp) / "sqlite", src)
        columns = args.columns.split(",") if args.columns else list(SMOKE_COLUMNS) if args.smoke else None
        columns = columns or text_columns(ledger.base)
        runs = list(sweep(ledger, columns, commands))
        report("SQLite", runs)
        failed |= any(r["traceback"] for r in runs)
        if args.pg:
            pg = PgLedger(Path(tmp) / "pg", src, args.pg)
            try:
                runs = list(sweep(pg, columns, commands))
            finally:
                pg.drop()
            report("PostgreSQL", runs)
            failed |= any(r["traceback"] for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
