"""Ledgers and output folders in the layouts of older commits, for tests/test_migrate.py.

The archives in tests/fixtures/legacy/ were made by tests/fixtures/make_legacy_layouts.py with the
thumbctl of the commit each case names, under a fixed placeholder root. :func:`unpack_case`
unpacks one into a test's folder and rewrites that root in the ledger: every text column of every
table (SQLite: the file; PostgreSQL: the plain SQL dump loaded into the test's fresh database).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tarfile
from dataclasses import dataclass
from pathlib import Path

from harness import Thumbctl

LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy"
CASES_DOC = json.loads((LEGACY / "cases.json").read_text())
PLACEHOLDER: str = CASES_DOC["placeholder"]
CASES: list[str] = [case["case"] for case in CASES_DOC["cases"]]


@dataclass(frozen=True)
class LegacyCase:
    """One unpacked case: its root folder, the ``--db`` of its ledger and its commit."""

    name: str
    commit: str
    backend: str
    root: Path
    db: str

    @property
    def outs(self) -> list[Path]:
        return [self.root / "out1", self.root / "out2"]

    @property
    def runs(self) -> list[tuple[str, list[str]]]:
        """(output folder, ratios) of each batch the case's ledger holds, in submission order."""
        return [(out, list(ratios)) for out, ratios in CASES_DOC["runs"]]

    @property
    def size(self) -> int:
        return int(CASES_DOC["size"])


def extract(archive: tarfile.TarFile, into: Path) -> None:
    """Extract with the standard library's "tar" filter. Python 3.11 before 3.11.4 has no filters:
    there every member, and every link's target, must stay inside ``into`` (what the filter checks)."""
    if hasattr(tarfile, "tar_filter"):
        archive.extractall(into, filter="tar")
        return
    for member in archive.getmembers():
        targets = [member.name]
        if member.issym():
            targets.append(os.path.join(os.path.dirname(member.name), member.linkname))
        elif member.islnk():
            targets.append(member.linkname)
        for target in targets:
            if os.path.isabs(target) or os.path.normpath(target).split(os.sep)[0] == "..":
                raise ValueError(f"{member.name!r}: leads outside the case")
    archive.extractall(into)


def unpack_case(name: str, into: Path, pg_url: str | None = None) -> LegacyCase:
    """Unpack case ``name`` into ``into`` with its paths rewritten there; a PostgreSQL case is
    loaded into the (fresh, empty) database ``pg_url``."""
    meta = next(case for case in CASES_DOC["cases"] if case["case"] == name)
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(LEGACY / f"{name}.tar.gz") as archive:
        extract(archive, into)
    root = str(into.resolve())
    if meta["backend"] == "sqlite":
        rewrite_sqlite(into / "ledger.db", root)
        db = str(into / "ledger.db")
    else:
        if pg_url is None:
            raise ValueError("a PostgreSQL case needs a database")
        load_postgres(into / "ledger.sql", pg_url, root)
        db = pg_url
    return LegacyCase(name, meta["commit"], meta["backend"], into, db)


def rewrite_sqlite(db: Path, root: str) -> None:
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for column in [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[2].upper() == "TEXT"]:
                conn.execute(
                    f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) WHERE instr("{column}", ?) > 0',
                    (PLACEHOLDER, root, PLACEHOLDER),
                )


def dump_statements(dump: Path) -> str:
    """The SQL of a plain ``pg_dump --inserts`` file without psql's own lines (``\\restrict``…):
    one script the server runs as it is, as ``psql -f`` would."""
    return "".join(line for line in dump.read_text().splitlines(keepends=True) if not line.startswith("\\"))


def load_postgres(dump: Path, url: str, root: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(dump_statements(dump).encode())  # several statements, no parameters: one simple query
    with psycopg.connect(url, autocommit=True) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type = 'text'"
        ).fetchall()
        for table, column in columns:
            conn.execute(
                f'UPDATE public."{table}" SET "{column}" = replace("{column}", %s, %s) '
                f'WHERE strpos("{column}", %s) > 0',
                (PLACEHOLDER, root, PLACEHOLDER),
            )


def replayable(case: LegacyCase, scratch: Path) -> None:
    """Make the case's batches replayable from where it was unpacked: the request digest (and the
    idempotency key derived from it) covers the absolute source and output folders, so it is
    computed again by the current code for the same request at the new root (a ``--detach``
    submit into a fresh scratch ledger, which writes nothing to OUT) and written over the recorded one.
    The current code gives the recorded digest for the same request at the placeholder root (both
    commits' requests are canonicalized alike), so this is the path rewrite, not a new request."""
    digests = []
    for run, (out, ratios) in enumerate(case.runs):
        ratio_args = [arg for ratio in ratios for arg in ("--ratio", ratio)]
        args = ["submit", str(case.root / "src"), "--out", str(case.root / out), *ratio_args, "--size", str(case.size)]
        # a fresh scratch ledger each time: one that knew the folder would migrate its old objects/
        db = scratch.with_name(f"{scratch.stem}-{run}{scratch.suffix}")
        recorded = Thumbctl(db).invoke(*args, "--detach", "--db", str(db), "--json")  # in this process
        assert recorded.returncode == 0, recorded.stderr
        digests.append(json.loads(recorded.stdout)["request_digest"])
    from thumbctl import Ledger

    with Ledger(case.db) as ledger:
        batches = sorted(ledger.views.batches(limit=100), key=lambda b: (b.created_at, b.batch_id))
    updates = [(digest, digest, batch.batch_id) for digest, batch in zip(digests, batches, strict=True)]
    sql = "UPDATE batches SET idempotency_key = ?, request_digest = ? WHERE batch_id = ?"
    if case.backend == "sqlite":
        with sqlite3.connect(case.db) as conn:
            conn.executemany(sql, updates)
        return
    import psycopg

    with psycopg.connect(case.db, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(sql.replace("?", "%s"), updates)
