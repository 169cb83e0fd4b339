"""Schema migrations of ledgers made before derivative sets: existing items take their batch's size and format."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import replace

import pytest
import sqlite_utils

from thumbctl import Ledger
from thumbctl.core.profile import Limits
from thumbctl.ledger.pgschema import MIGRATIONS as PG_MIGRATIONS
from thumbctl.ledger.schema import MIGRATIONS

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


# -- v11 (PostgreSQL v5): published names get their own record ------------------------------------------


def _published_rows(execute) -> None:
    """Two live batches that published one name in turn, and an expired one that published another."""
    batches = {"b_one": ("a", None), "b_two": ("a", None), "b_gone": ("b", "2024-02-01T00:00:00.000000Z")}
    for day, (batch_id, (name, expired_at)) in enumerate(batches.items(), start=1):
        at = f"2024-01-0{day}T00:00:00.000000Z"
        execute(
            "INSERT INTO batches (batch_id, idempotency_key, request_digest, total, source_root, out_dir, "
            "manifest_path, profile, max_attempts, limits, created_at, expired_at) "
            "VALUES (?, ?, 'd', 1, '/src', '/out', NULL, '{}', 3, '{}', ?, ?)",
            (batch_id, f"k-{batch_id}", at, expired_at),
        )
        execute(
            "INSERT INTO items (batch_id, item_id, ratio, size, format, source, state, derivative_key, object_path, "
            "friendly_path, name_version, created_at, updated_at) "
            "VALUES (?, 'a.jpg', '1:1', 512, 'jpeg', '/src/a.jpg', 'succeeded', ?, ?, ?, ?, ?, ?)",
            (batch_id, f"key-{batch_id}", f"/store/{batch_id}.jpg", f"/out/{name}.1x1.jpg", f"v-{batch_id}", at, at),
        )


def _sqlite_at(path: str, version: int, rows: Callable[[Callable[..., object]], None]) -> str:
    """A SQLite ledger migrated to ``version`` and holding ``rows`` (written through ``execute``)."""
    conn = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(conn)
    conn.execute("BEGIN")
    for number, migrate in MIGRATIONS:
        if number <= version:
            migrate(db)
    rows(conn.execute)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute("COMMIT")
    conn.close()
    return path


def _postgres_at(url: str, version: int, rows: Callable[[Callable[..., object]], None]) -> str:
    """A PostgreSQL ledger migrated to ``version`` and holding ``rows`` (written through ``execute``)."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(url, autocommit=False) as conn:
        for number, statements in PG_MIGRATIONS:
            if number <= version:
                for statement in statements:
                    conn.execute(statement)
        conn.execute("CREATE TABLE thumbctl_schema (version integer NOT NULL)")
        conn.execute(f"INSERT INTO thumbctl_schema (version) VALUES ({version})")
        rows(lambda sql, params: conn.execute(sql.replace("?", "%s"), params))
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def v10_ledger(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return _sqlite_at(str(tmp_path / "ledger.db"), 10, _published_rows)
    return _postgres_at(request.getfixturevalue("pg_url"), 4, _published_rows)


def test_an_old_ledger_records_the_names_its_live_batches_published(v10_ledger: str):
    with Ledger(v10_ledger) as ledger:
        assert ledger.views.publishes_at("/out/a.1x1.jpg") == [("/store/b_two.jpg", "v-b_two")]  # the newest
        assert ledger.views.publishes_at("/out/b.1x1.jpg") == []  # its batch had expired: gc removed it then
        (name,) = ledger.upkeep.names_from("/out", "/src")
        assert (name.friendly_path, name.batch_id, name.item_id, name.source) == (
            "/out/a.1x1.jpg",
            "b_two",
            "a.jpg",
            "/src/a.jpg",
        )
        assert ledger.upkeep.referenced_object_paths(also_expiring=["b_one", "b_two"]) == {"/store/b_two.jpg"}


# -- v17 (PostgreSQL v11): the catalogue's derivatives and when a name's bytes changed ------------------

_CROP = {"box": [10, 0, 110, 100], "score": 0.61, "policy": "smart"}


def _rendered_then_reused(execute) -> None:
    """Batch b_made rendered key K at the name; b_reused reused it (no crop in its result) and holds
    the name's record; key L was only ever reused (made before windows were recorded)."""
    results = {
        "b_made": ("K", {"width": 96, "height": 96, "crop": _CROP, "dominant_colour": "#102030"}),
        "b_reused": ("K", {"width": 96, "height": 96, "reused": True}),
        "b_old": ("L", {"width": 96, "height": 96, "reused": True}),
    }
    for day, (batch_id, (key, result)) in enumerate(results.items(), start=1):
        at = f"2024-01-0{day}T00:00:00.000000Z"
        name = "/out/a.1x1.jpg" if key == "K" else "/out/b.1x1.jpg"
        execute(
            "INSERT INTO batches (batch_id, idempotency_key, request_digest, total, source_root, out_dir, "
            "manifest_path, profile, max_attempts, limits, created_at) "
            "VALUES (?, ?, 'd', 1, '/src', '/out', NULL, '{}', 3, '{}', ?)",
            (batch_id, f"k-{batch_id}", at),
        )
        execute(
            "INSERT INTO items (batch_id, item_id, ratio, size, format, source, state, derivative_key, object_path, "
            "friendly_path, name_version, result, created_at, updated_at) "
            "VALUES (?, 'a.jpg', '1:1', 96, 'jpeg', '/src/a.jpg', 'succeeded', ?, ?, ?, 'v', ?, ?, ?)",
            (batch_id, key, f"/store/{key}.jpg", name, json.dumps(result), at, at),
        )
    for batch_id in ("b_reused", "b_old"):
        execute(
            "INSERT INTO names (friendly_path, out_dir, object_path, derivative_key, name_version, source_root, "
            "source, ratio, size, format, batch_id, item_row, published_at) SELECT friendly_path, '/out', "
            "object_path, derivative_key, 'v', '/src', source, ratio, size, format, batch_id, id, updated_at "
            "FROM items WHERE batch_id = ?",
            (batch_id,),
        )


@pytest.fixture(params=["sqlite", "postgres"])
def v16_ledger(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return _sqlite_at(str(tmp_path / "ledger.db"), 16, _rendered_then_reused)
    return _postgres_at(request.getfixturevalue("pg_url"), 10, _rendered_then_reused)


def test_an_old_ledger_gives_reused_names_the_window_of_their_render_and_keeps_when_they_changed(v16_ledger: str):
    with Ledger(v16_ledger) as ledger:
        reused, never_rendered = ledger.catalogue.entries("/out")
    assert (reused.name, reused.batch_id, reused.crop, reused.score) == ("/out/a.1x1.jpg", "b_reused", _CROP, 0.61)
    assert reused.placeholder == {"dominant_colour": "#102030"} and reused.changed_at == "2024-01-02T00:00:00.000000Z"
    assert (never_rendered.name, never_rendered.crop, never_rendered.score) == ("/out/b.1x1.jpg", None, None)
