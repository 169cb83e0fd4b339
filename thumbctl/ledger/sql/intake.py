"""Queries of submission: acceptance, admission control, the stat cache, cancel, and the ledger's facts."""

from __future__ import annotations

from ..states import QUEUED, RUNNING, runnable
from . import insert, query

BATCH_COLUMNS = (
    "batch_id",
    "idempotency_key",
    "request_digest",
    "total",
    "source_root",
    "out_dir",
    "manifest_path",
    "profile",
    "max_attempts",
    "limits",
    "created_at",
    "deadline_at",
    "resumed_from",
)
ITEM_COLUMNS = (
    "batch_id",
    "result",
    "alt",
    "item_id",
    "ratio",
    "size",
    "format",
    "source",
    "source_digest",
    "source_format",
    "source_width",
    "source_height",
    "focus_x",
    "focus_y",
    "fit",
    "state",
    "error_code",
    "error_detail",
    "derivative_key",
    "object_path",
    "friendly_path",
    "dedup",
    "created_at",
    "updated_at",
    "queued_at",
)
CACHE_COLUMNS = (
    "path",
    "dev",
    "inode",
    "size",
    "mtime_ns",
    "ctime_ns",
    "digest",
    "format",
    "width",
    "height",
    "orientation",
)

INSERT_BATCH = insert("batches", BATCH_COLUMNS)
INSERT_ITEMS = insert("items", ITEM_COLUMNS)
#: The recorded render of each of these derivative keys: an output reused from it carries it on.
DERIVATIVE_RENDERS = query(
    "derivative_renders",
    "SELECT derivative_key, result FROM derivatives WHERE derivative_key IN ({ids})",
    lists={"ids": ("?", ",")},
)
#: A new batch's creation events, one per item row, in one statement.
INSERT_CREATION_EVENTS = query(
    "insert_creation_events",
    "INSERT INTO events (at, batch_id, item_row, from_state, to_state, attempt, error_code, detail, dedup) "
    "SELECT ?, batch_id, id, NULL, state, 0, error_code, error_detail, dedup FROM items WHERE batch_id = ? ORDER BY id",
)
BATCH_OF_KEY = query(
    "batch_of_key", "SELECT batch_id, request_digest, cancel_requested_at FROM batches WHERE idempotency_key = ?"
)
#: The batch that resumed a cancelled one (at most one: a unique index).
RESUMED_BY = query("resumed_by", "SELECT batch_id FROM batches WHERE resumed_from = ?")
RECORDED_BATCH = query(
    "recorded_batch",
    "SELECT idempotency_key, request_digest, source_root, out_dir, manifest_path, profile, max_attempts, limits, "
    "created_at, deadline_at, expired_at FROM batches WHERE batch_id = ?",
)
RECORDED_ITEMS = query(
    "recorded_items",
    "SELECT item_id, ratio, size, format, source, source_digest, source_format, source_width, source_height, "
    "focus_x, focus_y, fit, error_code, error_detail, derivative_key, object_path, friendly_path, alt "
    "FROM items WHERE batch_id = ? ORDER BY id",
)
#: A resume takes the key from the cancelled batch only while that batch still holds it.
RELEASE_KEY_TO_RESUME = query(
    "release_key_to_resume", "UPDATE batches SET idempotency_key = ? WHERE batch_id = ? AND idempotency_key = ?"
)

# -- admission ------------------------------------------------------------------------------------

QUEUE_SNAPSHOT = query(
    "queue_snapshot",
    "SELECT count(*) AS n, min(i.queued_at) AS oldest FROM items i JOIN batches b USING (batch_id) "
    f"WHERE {runnable('i')} AND b.cancel_requested_at IS NULL",
)
ANY_RUNNING = query("any_running", f"SELECT 1 FROM items WHERE state = {RUNNING} LIMIT 1")
#: On the time index of the log: only the window's events.
RECENT_CLAIM = query(
    "recent_claim",
    f"SELECT 1 FROM events {{by_events_at}} WHERE at >= ? AND (to_state = {RUNNING} OR from_state = {RUNNING}) LIMIT 1",
    plan_each_run=True,
)
OLDEST_WAITING_BATCH = query(
    "oldest_waiting_batch",
    "SELECT i.batch_id FROM items i JOIN batches b USING (batch_id) "
    f"WHERE {runnable('i')} AND b.cancel_requested_at IS NULL ORDER BY i.queued_at, i.id LIMIT 1",
)

# -- the stat cache ---------------------------------------------------------------------------------

PUBLISHED_KEYS = query(
    "published_keys",
    "SELECT n.friendly_path, n.derivative_key, b.profile FROM names n LEFT JOIN batches b ON b.batch_id = n.batch_id "
    "WHERE n.friendly_path IN ({paths})",
    lists={"paths": ("?", ",")},
)
#: The content digest a batch read for a source (a URL or an ``s3://`` key), newest first: the source as
#: recorded, or its address before the query (a signed URL is shown with its secrets redacted).
RECORDED_DIGEST = query(
    "recorded_digest",
    "SELECT source_digest FROM items WHERE source_digest IS NOT NULL AND (source = ? OR source = ? "
    "OR substr(source, 1, ?) = ?) ORDER BY id DESC LIMIT 1",
)
CACHED_SOURCES = query(
    "cached_sources",
    f"SELECT {', '.join(CACHE_COLUMNS)} FROM stat_cache WHERE path IN ({{ids}})",
    lists={"ids": ("?", ",")},
)
#: An upsert: the one statement both dialects write alike (``ON CONFLICT … DO UPDATE``).
REMEMBER_SOURCE = query(
    "remember_source",
    f"INSERT INTO stat_cache ({', '.join(CACHE_COLUMNS)}) VALUES ({', '.join(':' + c for c in CACHE_COLUMNS)}) "
    f"ON CONFLICT (path) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in CACHE_COLUMNS[1:])}",
)

# -- cancel -------------------------------------------------------------------------------------------

#: The batch row locked first: a publish in flight holds it shared until it commits.
CANCEL_FLAG_LOCKED = query("cancel_flag_locked", "SELECT cancel_requested_at FROM batches WHERE batch_id = ?{lock}")
FLAG_CANCEL = query("flag_cancel", "UPDATE batches SET cancel_requested_at = ? WHERE batch_id = ?")
QUEUED_OF_BATCH = query("queued_of_batch", f"SELECT id FROM items WHERE batch_id = ? AND state = {QUEUED} ORDER BY id")

# -- remembered crop fixes -------------------------------------------------------------------------

FOCUS_COLUMNS = ("source_digest", "ratio", "focus_x", "focus_y", "set_at", "batch_id")
FOCUS_POINTS = query(
    "focus_points",
    f"SELECT {', '.join(FOCUS_COLUMNS)} FROM focus_points WHERE source_digest IN ({{ids}}) "
    "ORDER BY source_digest, ratio",
    lists={"ids": ("?", ",")},
)
#: A source root's fix-file state (``meta`` row ``fix_file:ROOT``), and its upsert.
FIX_FILE_STATE = query("fix_file_state", "SELECT value FROM meta WHERE name = ?")
SET_FIX_FILE_STATE = query(
    "set_fix_file_state",
    "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
)
#: The source roots of the batches that read a source, newest first.
SOURCE_ROOTS = query(
    "source_roots",
    "SELECT b.source_root, MAX(i.id) AS newest FROM items i JOIN batches b ON b.batch_id = i.batch_id "
    "WHERE i.source = ? AND b.source_root IS NOT NULL GROUP BY b.source_root ORDER BY newest DESC",
)
#: An upsert, like the stat cache's; a cleared fix is kept without a point.
SET_FOCUS = query(
    "set_focus",
    f"INSERT INTO focus_points ({', '.join(FOCUS_COLUMNS)}) VALUES ({', '.join(':' + c for c in FOCUS_COLUMNS)}) "
    f"ON CONFLICT (source_digest, ratio) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in FOCUS_COLUMNS[2:])}",
)
