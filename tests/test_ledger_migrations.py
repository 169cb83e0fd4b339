"""Schema migrations of ledgers made before derivative sets: existing items take their batch's size and format."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest
import sqlite_utils

from thumbctl import Ledger
from thumbctl.ledger.pgschema import MIGRATIONS as PG_MIGRATIONS
from thumbctl.ledger.schema import MIGRATIONS
from thumbctl.settings import Limits

from support import request

_AT = "2024-01-01T00:00:00.000000Z"


def _old_rows(execute, marker: str) -> None:
    """One batch of the old shape (profile size 320, webp), two items and their events."""
    execute(
        "INSERT INTO batches (batch_id, idempotency_key, request_digest, total, source_root, out_dir, manifest_path, "
        f"profile, max_attempts, limits, created_at) VALUES ('b_old', 'k-old', 'd-old', 2, '/src', '/out', "
        f"'/out/batches/b_old.json', {marker}, 3, '{{}}', '{_AT}')",
        (json.dumps({"ratios": ["1:1", "4:3"], "size": 320, "format": "webp"}),),
    )
    for ratio in ("1:1", "4:3"):
        execute(
            "INSERT INTO items (batch_id, item_id, ratio, source, state, created_at, updated_at) "
            f"VALUES ('b_old', 'a.jpg', '{ratio}', '/src/a.jpg', 'failed', '{_AT}', '{_AT}')",
            (),
        )
        execute(
            "INSERT INTO events (at, batch_id, item_row, to_state, dedup) "
            f"SELECT '{_AT}', 'b_old', id, 'failed', 0 FROM items WHERE ratio = '{ratio}'",
            (),
        )


def _sqlite_v7(path: str) -> str:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    db = sqlite_utils.Database(conn)
    conn.execute("BEGIN")
    for version, migrate in MIGRATIONS:
        if version <= 7:
            migrate(db)
    _old_rows(conn.execute, "?")
    conn.execute("PRAGMA user_version = 7")
    conn.execute("COMMIT")
    conn.close()
    return path


def _postgres_v1(url: str) -> str:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(url, autocommit=False) as conn:
        for statement in dict(PG_MIGRATIONS)[1]:
            conn.execute(statement)
        conn.execute("CREATE TABLE thumbctl_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO thumbctl_schema (version) VALUES (1)")
        _old_rows(lambda sql, params: conn.execute(sql.replace("?", "%s"), params), "%s")
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def old_ledger(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return _sqlite_v7(str(tmp_path / "ledger.db"))
    return _postgres_v1(request.getfixturevalue("pg_url"))


def test_an_old_ledger_keeps_its_items_with_their_batch_size_and_format(old_ledger: str):
    with Ledger(old_ledger) as ledger:
        items = ledger.views.items("b_old")
        assert [(i.ratio, i.size, i.format, i.state) for i in items] == [
            ("1:1", 320, "webp", "failed"),
            ("4:3", 320, "webp", "failed"),
        ]
        assert [(e.item_id, e.ratio, e.size, e.format) for e in ledger.views.events("b_old")] == [
            ("a.jpg", "1:1", 320, "webp"),
            ("a.jpg", "4:3", 320, "webp"),
        ]
        # the same item and ratio at two sizes is two items now
        new = request("k-new", sources=1, ratios=("1:1",))
        item = new.items[0]
        both = replace(new, items=(item, replace(item, size=1024, derivative_key="other", friendly_path="/out/x")))
        batch = ledger.intake.accept_batch(both, Limits())
        assert sorted(i.size for i in ledger.views.items(batch.batch_id)) == [512, 1024]


def test_an_old_ledger_gets_a_stable_id_and_no_store_yet(old_ledger: str):
    with Ledger(old_ledger) as ledger:
        ledger_id = ledger.upkeep.ledger_id()
        assert len(ledger_id) == 32 and int(ledger_id, 16) >= 0
        assert ledger.upkeep.recorded_store() is None
        ledger.upkeep.record_store("/srv/store")
    with Ledger(old_ledger) as ledger:
        assert (ledger.upkeep.ledger_id(), ledger.upkeep.recorded_store()) == (ledger_id, "/srv/store")
