"""The ledger's schema: the newest one, and the versioned migrations that bring an older ledger to it.

A new ledger is created directly at the newest schema (:data:`NEWEST`, one transaction, no
sqlite-utils); a ledger made by an earlier thumbctl is upgraded by the migrations it lacks, applied
in order inside one write transaction. Each migration is ``(version, function)``; ``PRAGMA
user_version`` records the last one applied. Migrations only ever add: what a released one makes
never changes, a new one is appended, and :data:`NEWEST` is changed to match it
(``tests/test_ledger_fresh_schema.py`` proves a created ledger and one migrated from version 1
hold the same tables, columns, indexes, constraints and triggers).

Migrations run on a ``sqlite_utils.Database`` over the ledger's connection, built only when a
migration is due: creating a ledger or opening an up-to-date one does not import sqlite-utils. They
use it for what it is for: creating plain tables (``create_table``), adding columns
(``add_column``), indexing columns (``create_index``) and registering SQL functions, in the calls
that run inside the open transaction on every sqlite-utils the package allows (``Table.create`` of
sqlite-utils 3 commits it). Plain DDL stays where sqlite-utils has no word for it: CHECK
constraints, table-level UNIQUE constraints, partial indexes, triggers, and the table rebuilds of
migrations 8 and 12 (``Table.transform`` cannot change a UNIQUE constraint, and under sqlite-utils
3 it commits the connection's open transaction, which would split a migration in two).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

ITEM_STATES_SQL = "('queued', 'running', 'succeeded', 'failed', 'cancelled')"


def _v1_initial(db: sqlite_utils.Database) -> None:
    db.create_table(
        "batches",
        {
            "batch_id": str,
            "idempotency_key": str,
            "request_digest": str,
            "total": int,
            "source_root": str,
            "out_dir": str,
            "manifest_path": str,
            "profile": str,
            "max_attempts": int,
            "limits": str,
            "created_at": str,
            "deadline_at": str,
            "cancel_requested_at": str,
        },
        pk="batch_id",
        not_null={"idempotency_key", "request_digest", "total", "out_dir", "created_at"},
    )
    db["batches"].create_index(["idempotency_key"], unique=True)
    db["batches"].create_index(["created_at"])
    db.execute(
        f"""
        CREATE TABLE items (
            id INTEGER PRIMARY KEY,
            batch_id TEXT NOT NULL REFERENCES batches(batch_id),
            item_id TEXT NOT NULL,
            ratio TEXT NOT NULL,
            source TEXT NOT NULL,
            source_digest TEXT,
            source_format TEXT,
            source_width INTEGER,
            source_height INTEGER,
            focus_x REAL,
            focus_y REAL,
            state TEXT NOT NULL CHECK (state IN {ITEM_STATES_SQL}),
            attempt INTEGER NOT NULL DEFAULT 0,
            not_before TEXT,
            error_code TEXT,
            error_detail TEXT,
            derivative_key TEXT,
            object_path TEXT,
            friendly_path TEXT,
            dedup INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_token TEXT,
            lease_expires_at TEXT,
            result TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            queued_at TEXT,
            UNIQUE (batch_id, item_id, ratio)
        )
        """
    )
    db["items"].create_index(["batch_id", "state"])
    db["items"].create_index(["state", "not_before"], index_name="items_runnable")
    db["items"].create_index(["derivative_key"])
    db["items"].create_index(["batch_id", "source"])
    db.execute(
        f"""
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            batch_id TEXT NOT NULL REFERENCES batches(batch_id),
            item_row INTEGER REFERENCES items(id),
            from_state TEXT,
            to_state TEXT NOT NULL,
            attempt INTEGER,
            worker TEXT,
            error_code TEXT,
            detail TEXT,
            dedup INTEGER NOT NULL DEFAULT 0,
            CHECK (from_state IS NULL OR from_state IN {ITEM_STATES_SQL})
        )
        """
    )
    db["events"].create_index(["batch_id", "seq"])
    db["events"].create_index(["item_row", "seq"])
    db.execute(
        "CREATE TRIGGER events_append_only BEFORE UPDATE ON events "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END"
    )
    db.create_table(
        "stat_cache",
        {
            "path": str,
            "dev": int,
            "inode": int,
            "size": int,
            "mtime_ns": int,
            "ctime_ns": int,
            "digest": str,
            "format": str,
            "width": int,
            "height": int,
            "orientation": int,
        },
        pk="path",
    )


def _v2_batch_expiry(db: sqlite_utils.Database) -> None:
    """Retention (``thumbctl gc``): when a batch expired; friendly names looked up by path."""
    db["batches"].add_column("expired_at", str)
    db["items"].create_index(["friendly_path"], index_name="items_friendly_path")


def _v3_event_time_indexes(db: sqlite_utils.Database) -> None:
    """Live views and stats read the recent events of the whole ledger twice a second:
    by time, and the latest failures."""
    db["events"].create_index(["at"], index_name="events_at")
    db.execute("CREATE INDEX events_errors ON events (seq) WHERE error_code IS NOT NULL")


def _v4_object_checks(db: sqlite_utils.Database) -> None:
    """What ``reconcile`` last found decoding: an object whose file is unchanged since is not decoded again."""
    db.create_table(
        "object_checks",
        {"object_path": str, "dev": int, "inode": int, "size": int, "mtime_ns": int, "ctime_ns": int},
        pk="object_path",
    )


def _v5_claim_stages(db: sqlite_utils.Database) -> None:
    """Claims by derivative key: ``--item-timeout`` times each stage of a claim (the decode, each
    render), not the whole claim, so a running item records when the stage it waits on started
    (NULL: between stages); a claim steps through the distinct derivative keys of a source's
    queued items on a partial index instead of reading every item of the source."""
    db["items"].add_column("stage_started_at", str)
    db.execute("UPDATE items SET stage_started_at = updated_at WHERE state = 'running'")
    db.execute("CREATE INDEX items_queued_keys ON items (batch_id, source, derivative_key) WHERE state = 'queued'")


def _v6_queued_by_batch(db: sqlite_utils.Database) -> None:
    """A claim scoped to one batch (``submit``, ``work BATCH``) finds that batch's next runnable item
    on a partial index of queued items by batch, instead of walking every queued item of the
    ledger on ``items_runnable`` until one of the batch turns up."""
    db.execute("CREATE INDEX items_queued_by_batch ON items (batch_id, not_before) WHERE state = 'queued'")


def _v7_queued_age(db: sqlite_utils.Database) -> None:
    """Live views show how long the oldest runnable item of a batch has waited: a partial index of
    queued items by batch and time queued finds it in a few steps instead of reading every queued row."""
    db.execute("CREATE INDEX items_queued_age ON items (batch_id, queued_at, not_before) WHERE state = 'queued'")


_V8_ITEMS = f"""
    CREATE TABLE items (
        id INTEGER PRIMARY KEY,
        batch_id TEXT NOT NULL REFERENCES batches(batch_id),
        item_id TEXT NOT NULL,
        ratio TEXT NOT NULL,
        size INTEGER NOT NULL,
        format TEXT NOT NULL,
        source TEXT NOT NULL,
        source_digest TEXT,
        source_format TEXT,
        source_width INTEGER,
        source_height INTEGER,
        focus_x REAL,
        focus_y REAL,
        state TEXT NOT NULL CHECK (state IN {ITEM_STATES_SQL}),
        attempt INTEGER NOT NULL DEFAULT 0,
        not_before TEXT,
        error_code TEXT,
        error_detail TEXT,
        derivative_key TEXT,
        object_path TEXT,
        friendly_path TEXT,
        dedup INTEGER NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_token TEXT,
        lease_expires_at TEXT,
        result TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        queued_at TEXT,
        stage_started_at TEXT,
        UNIQUE (batch_id, item_id, ratio, size, format)
    )
"""
_V8_KEPT_COLUMNS = (
    "id, batch_id, item_id, ratio, source, source_digest, source_format, source_width, source_height, focus_x, "
    "focus_y, state, attempt, not_before, error_code, error_detail, derivative_key, object_path, friendly_path, "
    "dedup, lease_owner, lease_token, lease_expires_at, result, created_at, updated_at, queued_at, stage_started_at"
)


def _v8_derivative_items(db: sqlite_utils.Database) -> None:
    """Derivative sets: an item is one (ratio, size, format) of a source, so the size and format
    join the item's identity. SQLite cannot change a table's UNIQUE constraint in place: the table
    is rebuilt (its indexes re-created from their own SQL), and existing rows take their batch's
    size and format. Events keep referring to the same item ids; the foreign-key check waits for
    the commit, by which time every id is back."""
    indexes = [
        r[0]
        for r in db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'items' AND sql IS NOT NULL"
        ).fetchall()
    ]
    db.execute("PRAGMA defer_foreign_keys = ON")
    db.execute(f"CREATE TEMP TABLE items_v7 AS SELECT {_V8_KEPT_COLUMNS} FROM items")
    db.execute("DROP TABLE items")
    db.execute(_V8_ITEMS)
    kept = ", ".join(f"i.{column.strip()}" for column in _V8_KEPT_COLUMNS.split(","))
    db.execute(
        f"INSERT INTO items ({_V8_KEPT_COLUMNS}, size, format) SELECT {kept}, "
        "COALESCE(json_extract(b.profile, '$.size'), 512), COALESCE(json_extract(b.profile, '$.format'), 'jpeg') "
        "FROM items_v7 i LEFT JOIN batches b USING (batch_id) ORDER BY i.id"
    )
    db.execute("DROP TABLE items_v7")
    for sql in indexes:
        db.execute(sql)


#: The ledger's stable id, made once: by migration 9, or with a new ledger.
_NEW_LEDGER_ID = "INSERT INTO meta (name, value) VALUES ('ledger_id', lower(hex(randomblob(16))))"


def _v9_meta(db: sqlite_utils.Database) -> None:
    """Facts about the ledger itself: its stable id (a store records the one ledger it belongs to,
    so gc's reference check is never made by a ledger that does not know all of the store's
    objects) and the store it last used."""
    db.create_table("meta", {"name": str, "value": str}, pk="name", not_null={"value"})
    db.execute(_NEW_LEDGER_ID)


def _v10_name_versions(db: sqlite_utils.Database) -> None:
    """The version publishing returned at an item's name (local: content digest and inode), so
    "ours" is judged by it; NULL on rows published before, which are judged by their bytes."""
    db["items"].add_column("name_version", str)


_V11_NAMES_COLUMNS = {
    "friendly_path": str,
    "out_dir": str,
    "object_path": str,
    "derivative_key": str,
    "name_version": str,
    "source_root": str,
    "source": str,
    "ratio": str,
    "size": int,
    "format": str,
    "batch_id": str,
    "item_row": int,
    "published_at": str,
}
_V11_NAMES_REQUIRED = {"out_dir", "object_path", "source", "ratio", "size", "format", "batch_id", "published_at"}
#: Plain DDL: sqlite-utils 3 spells ``float`` FLOAT, 4 spells it REAL.
_V11_FOCUS = """
    CREATE TABLE focus_points (
        source_digest TEXT NOT NULL,
        ratio TEXT NOT NULL,
        focus_x REAL NOT NULL,
        focus_y REAL NOT NULL,
        set_at TEXT NOT NULL,
        batch_id TEXT,
        PRIMARY KEY (source_digest, ratio)
    )
"""
#: The newest success at each name of a batch that has not expired: what the names table starts with.
_V11_SEED_NAMES = """
    INSERT INTO names (friendly_path, out_dir, object_path, derivative_key, name_version, source_root, source,
                       ratio, size, format, batch_id, item_row, published_at)
    SELECT friendly_path, out_dir, object_path, derivative_key, name_version, source_root, source,
           ratio, size, format, batch_id, id, updated_at
    FROM (SELECT i.*, b.out_dir, b.source_root, row_number() OVER
            (PARTITION BY i.friendly_path ORDER BY i.updated_at DESC, i.id DESC) AS n
          FROM items i JOIN batches b USING (batch_id)
          WHERE i.state = 'succeeded' AND b.expired_at IS NULL
            AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL) AS newest
    WHERE n = 1
"""


def _v11_kept_work(db: sqlite_utils.Database) -> None:
    """What a seller must never lose. Published names get their own record, independent of batch
    expiry, so retention never removes a published thumbnail and "ours" is still judged after the
    batch that wrote a name expired; it starts with the newest success at each name of a live
    batch. A crop fix is remembered per (source content, ratio). A batch that resumes a cancelled
    one records which (at most one per cancelled batch)."""
    db.create_table("names", _V11_NAMES_COLUMNS, pk="friendly_path", not_null=_V11_NAMES_REQUIRED)
    db["names"].create_index(["object_path"], index_name="names_object")
    db["names"].create_index(["out_dir", "source_root"], index_name="names_out_root")
    db.execute(_V11_SEED_NAMES)
    db.execute(_V11_FOCUS)
    db["batches"].add_column("resumed_from", str)
    db.execute("CREATE UNIQUE INDEX batches_resumed_from ON batches (resumed_from) WHERE resumed_from IS NOT NULL")


_V12_FOCUS = """
    CREATE TABLE focus_points_v12 (
        source_digest TEXT NOT NULL,
        ratio TEXT NOT NULL,
        focus_x REAL,
        focus_y REAL,
        set_at TEXT NOT NULL,
        batch_id TEXT,
        PRIMARY KEY (source_digest, ratio)
    )
"""


def _v12_cleared_focus(db: sqlite_utils.Database) -> None:
    """A crop fix that was cleared is kept, without a point, with when and by which batch: a submit
    renders with the remembered fixes as they stand (each with when it was set), so clearing one, or
    setting it again, always makes the next submit a new request, never a replay of an earlier one."""
    db.execute(_V12_FOCUS)
    db.execute(
        "INSERT INTO focus_points_v12 SELECT source_digest, ratio, focus_x, focus_y, set_at, batch_id FROM focus_points"
    )
    db.execute("DROP TABLE focus_points")
    db.execute("ALTER TABLE focus_points_v12 RENAME TO focus_points")


def _v13_fit(db: sqlite_utils.Database) -> None:
    """How an item frames its source (``contain``; NULL: ``cover``, as every earlier item did)."""
    db["items"].add_column("fit", str)


def _v14_item_alt(db: sqlite_utils.Database) -> None:
    """The ``alt`` text a manifest gives an item, for the markup ('' when none is given)."""
    db["items"].add_column("alt", str, not_null_default="")


def _v15_released_names(db: sqlite_utils.Database) -> None:
    """A published name ``thumbctl release`` gave to the user: from then on it is never reported,
    restored, replaced or removed, and a submit to it fails ``name_taken``."""
    db["names"].add_column("released_at", str)


#: The trigger that keeps events append-only (dropped and made again by migration 16).
_EVENTS_APPEND_ONLY = (
    "CREATE TRIGGER events_append_only BEFORE UPDATE ON events BEGIN SELECT RAISE(ABORT, 'events are append-only'); END"
)


def _v16_url_secrets(db: sqlite_utils.Database) -> None:
    """The secrets of URL sources recorded by earlier versions: credentials (``user:password@``) go
    from every source (items, names, the stat cache's rows go whole); a URL in an item's detail or
    an event's detail loses its credentials and its signed-query secrets (``REDACTED``). A source's
    signed query stays in ``items.source``, which is never shown as it is: a queued item's worker
    downloads with it. Only an item that already failed at submit had credentials (they were never
    downloaded with), so no item that can still run loses what it needs."""
    from ..core.redact import redacted_text, without_userinfo

    db.register_function(redacted_text, deterministic=True, name="thumbctl_redacted")
    db.register_function(without_userinfo, deterministic=True, name="thumbctl_without_userinfo")
    has_credentials = "LIKE '%://%@%'"
    db.execute(f"UPDATE items SET source = thumbctl_without_userinfo(source) WHERE source {has_credentials}")
    db.execute(f"UPDATE names SET source = thumbctl_without_userinfo(source) WHERE source {has_credentials}")
    db.execute(f"DELETE FROM stat_cache WHERE path {has_credentials}")
    db.execute("UPDATE items SET error_detail = thumbctl_redacted(error_detail) WHERE error_detail LIKE '%://%'")
    db.execute("DROP TRIGGER events_append_only")
    db.execute("UPDATE events SET detail = thumbctl_redacted(detail) WHERE detail LIKE '%://%'")
    db.execute(_EVENTS_APPEND_ONLY)


#: What a derivative's render recorded, kept with the derivative rather than with the batch: every
#: output reused from it carries the crop window, its score, the framing and the placeholder on.
_DERIVATIVES = """CREATE TABLE derivatives (
        derivative_key TEXT PRIMARY KEY,
        result TEXT NOT NULL,
        rendered_at TEXT NOT NULL
    )"""


def _v17_catalogue(db: sqlite_utils.Database) -> None:
    """The catalogue: when the bytes at each name last changed (a reuse that publishes the same
    object again leaves it), and the render of each derivative key, filled in from the newest render
    the items recorded (a reused output's result has no crop; a key never rendered gets no row)."""
    db["names"].add_column("changed_at", str)
    db.execute("UPDATE names SET changed_at = published_at")
    db.execute(_DERIVATIVES)
    db.execute(
        "INSERT INTO derivatives (derivative_key, result, rendered_at) "
        "SELECT derivative_key, result, updated_at FROM items WHERE id IN (SELECT max(id) FROM items "
        "WHERE state = 'succeeded' AND derivative_key IS NOT NULL AND result LIKE '%\"crop\"%' "
        "GROUP BY derivative_key)"
    )


MIGRATIONS: list[tuple[int, Callable[[sqlite_utils.Database], None]]] = [
    (1, _v1_initial),
    (2, _v2_batch_expiry),
    (3, _v3_event_time_indexes),
    (4, _v4_object_checks),
    (5, _v5_claim_stages),
    (6, _v6_queued_by_batch),
    (7, _v7_queued_age),
    (8, _v8_derivative_items),
    (9, _v9_meta),
    (10, _v10_name_versions),
    (11, _v11_kept_work),
    (12, _v12_cleared_focus),
    (13, _v13_fit),
    (14, _v14_item_alt),
    (15, _v15_released_names),
    (16, _v16_url_secrets),
    (17, _v17_catalogue),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


#: The newest schema (version :data:`SCHEMA_VERSION`), written as the migrations leave it: the same
#: names, column order, types, defaults, constraints and indexes.
NEWEST: tuple[str, ...] = (
    """CREATE TABLE batches (
        batch_id TEXT PRIMARY KEY,
        idempotency_key TEXT NOT NULL,
        request_digest TEXT NOT NULL,
        total INTEGER NOT NULL,
        source_root TEXT,
        out_dir TEXT NOT NULL,
        manifest_path TEXT,
        profile TEXT,
        max_attempts INTEGER,
        limits TEXT,
        created_at TEXT NOT NULL,
        deadline_at TEXT,
        cancel_requested_at TEXT,
        expired_at TEXT,
        resumed_from TEXT
    )""",
    "CREATE UNIQUE INDEX idx_batches_idempotency_key ON batches (idempotency_key)",
    "CREATE INDEX idx_batches_created_at ON batches (created_at)",
    "CREATE UNIQUE INDEX batches_resumed_from ON batches (resumed_from) WHERE resumed_from IS NOT NULL",
    f"""CREATE TABLE items (
        id INTEGER PRIMARY KEY,
        batch_id TEXT NOT NULL REFERENCES batches(batch_id),
        item_id TEXT NOT NULL,
        ratio TEXT NOT NULL,
        size INTEGER NOT NULL,
        format TEXT NOT NULL,
        source TEXT NOT NULL,
        source_digest TEXT,
        source_format TEXT,
        source_width INTEGER,
        source_height INTEGER,
        focus_x REAL,
        focus_y REAL,
        state TEXT NOT NULL CHECK (state IN {ITEM_STATES_SQL}),
        attempt INTEGER NOT NULL DEFAULT 0,
        not_before TEXT,
        error_code TEXT,
        error_detail TEXT,
        derivative_key TEXT,
        object_path TEXT,
        friendly_path TEXT,
        dedup INTEGER NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_token TEXT,
        lease_expires_at TEXT,
        result TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        queued_at TEXT,
        stage_started_at TEXT,
        name_version TEXT,
        fit TEXT,
        alt TEXT NOT NULL DEFAULT '',
        UNIQUE (batch_id, item_id, ratio, size, format)
    )""",
    "CREATE INDEX idx_items_batch_id_state ON items (batch_id, state)",
    "CREATE INDEX items_runnable ON items (state, not_before)",
    "CREATE INDEX idx_items_derivative_key ON items (derivative_key)",
    "CREATE INDEX idx_items_batch_id_source ON items (batch_id, source)",
    "CREATE INDEX items_friendly_path ON items (friendly_path)",
    "CREATE INDEX items_queued_keys ON items (batch_id, source, derivative_key) WHERE state = 'queued'",
    "CREATE INDEX items_queued_by_batch ON items (batch_id, not_before) WHERE state = 'queued'",
    "CREATE INDEX items_queued_age ON items (batch_id, queued_at, not_before) WHERE state = 'queued'",
    f"""CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        batch_id TEXT NOT NULL REFERENCES batches(batch_id),
        item_row INTEGER REFERENCES items(id),
        from_state TEXT,
        to_state TEXT NOT NULL,
        attempt INTEGER,
        worker TEXT,
        error_code TEXT,
        detail TEXT,
        dedup INTEGER NOT NULL DEFAULT 0,
        CHECK (from_state IS NULL OR from_state IN {ITEM_STATES_SQL})
    )""",
    "CREATE INDEX idx_events_batch_id_seq ON events (batch_id, seq)",
    "CREATE INDEX idx_events_item_row_seq ON events (item_row, seq)",
    "CREATE INDEX events_at ON events (at)",
    "CREATE INDEX events_errors ON events (seq) WHERE error_code IS NOT NULL",
    _EVENTS_APPEND_ONLY,
    """CREATE TABLE stat_cache (
        path TEXT PRIMARY KEY,
        dev INTEGER,
        inode INTEGER,
        size INTEGER,
        mtime_ns INTEGER,
        ctime_ns INTEGER,
        digest TEXT,
        format TEXT,
        width INTEGER,
        height INTEGER,
        orientation INTEGER
    )""",
    """CREATE TABLE object_checks (
        object_path TEXT PRIMARY KEY,
        dev INTEGER,
        inode INTEGER,
        size INTEGER,
        mtime_ns INTEGER,
        ctime_ns INTEGER
    )""",
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    _NEW_LEDGER_ID,
    """CREATE TABLE names (
        friendly_path TEXT PRIMARY KEY,
        out_dir TEXT NOT NULL,
        object_path TEXT NOT NULL,
        derivative_key TEXT,
        name_version TEXT,
        source_root TEXT,
        source TEXT NOT NULL,
        ratio TEXT NOT NULL,
        size INTEGER NOT NULL,
        format TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        item_row INTEGER,
        published_at TEXT NOT NULL,
        released_at TEXT,
        changed_at TEXT
    )""",
    "CREATE INDEX names_object ON names (object_path)",
    "CREATE INDEX names_out_root ON names (out_dir, source_root)",
    _V12_FOCUS.replace("focus_points_v12", "focus_points"),
    _DERIVATIVES,
)
