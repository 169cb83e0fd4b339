"""Queries of the read side: batch views, listings, live following and statistics."""

from __future__ import annotations

from ..states import ALL, FAILED, LIVE, QUEUED, RUNNING, SUCCEEDED, TERMINAL, runnable
from . import query, scoped

_BATCH_COLUMNS = (
    "batch_id, idempotency_key, request_digest, total, source_root, out_dir, "
    "manifest_path, created_at, cancel_requested_at, expired_at, resumed_from"
)
_ITEM_VIEW_COLUMNS = (
    "id, item_id, source, ratio, size, format, state, attempt, error_code, error_detail, derivative_key, "
    "object_path, friendly_path, updated_at, result, alt"
)

# -- batch views ---------------------------------------------------------------------------------

BATCH_IDS_FROM = query("batch_ids_from", "SELECT batch_id FROM batches WHERE batch_id >= ? AND batch_id < ? LIMIT 2")
#: A seek on the ``(batch_id, state)`` index: waiting on a batch without counting its items.
BATCH_LIVE_ITEM = query("batch_live_item", f"SELECT 1 FROM items WHERE batch_id = ? AND state IN {LIVE} LIMIT 1")
BATCH_ROW = query("batch_row", f"SELECT {_BATCH_COLUMNS} FROM batches WHERE batch_id = ?")
RECENT_BATCHES = query(
    "recent_batches", f"SELECT {_BATCH_COLUMNS} FROM batches ORDER BY created_at DESC, batch_id LIMIT ?"
)
LAST_EVENT_AT = query("last_event_at", "SELECT at FROM events WHERE batch_id = ? ORDER BY seq DESC LIMIT 1")
#: The last event of one of the batch's items: when it finished (not gc's ``expired``, nor a name removed later).
LAST_ITEM_EVENT_AT = query(
    "last_item_event_at",
    "SELECT at FROM events WHERE batch_id = ? AND item_row IS NOT NULL ORDER BY seq DESC LIMIT 1",
)
STATE_COUNTS = query("state_counts", "SELECT state, count(*) AS n FROM items WHERE batch_id = ? GROUP BY state")
OLDEST_RUNNABLE = query(
    "oldest_runnable",
    f"SELECT queued_at FROM items {{by_items_queued_age}} WHERE batch_id = ? AND state = {QUEUED} "
    "AND (not_before IS NULL OR not_before <= ?) ORDER BY queued_at LIMIT 1",
    plan_each_run=True,
)
FAILURES = query(
    "failures",
    "SELECT item_id, ratio, size, format, error_code, error_detail AS detail FROM items "
    f"WHERE batch_id = ? AND state = {FAILED} ORDER BY id",
)
OWNED_NAMES = query(
    "owned_names",
    "SELECT i.object_path, i.friendly_path FROM items i JOIN batches b USING (batch_id) "
    f"WHERE i.batch_id = ? AND i.state = {SUCCEEDED} AND b.expired_at IS NULL "
    "AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL AND NOT EXISTS ("
    "SELECT 1 FROM items j JOIN batches c ON c.batch_id = j.batch_id "
    f"WHERE j.friendly_path = i.friendly_path AND j.state = {SUCCEEDED} AND c.expired_at IS NULL "
    "AND (j.updated_at > i.updated_at OR (j.updated_at = i.updated_at AND j.id > i.id))) "
    "ORDER BY i.id",
)
#: The name's own record: it outlives the batch that published the name.
PUBLISHES_AT = query("publishes_at", "SELECT object_path, name_version FROM names WHERE friendly_path = ?")
RELEASED_AT = query("released_at", "SELECT released_at FROM names WHERE friendly_path = ?")
FAILED_SINCE = query(
    "failed_since",
    f"SELECT count(DISTINCT item_row) FROM events WHERE at >= ? AND to_state = {FAILED}{{scope}}",
    lists=scoped(" AND batch_id = ?"),
)
#: The items a host's workers finished (succeeded, failed, or cancelled at publish) at or after a time.
FINISHED_BY_HOST = query(
    "finished_by_host",
    f"SELECT to_state, count(DISTINCT item_row) AS n FROM events WHERE at >= ? AND to_state IN {TERMINAL} "
    "AND substr(worker, 1, ?) = ?{scope} GROUP BY to_state",
    lists=scoped(" AND batch_id = ?"),
)
BATCHES_TOUCHED_SINCE = query("batches_touched_since", "SELECT DISTINCT batch_id FROM events WHERE at >= ?")

# -- listings ------------------------------------------------------------------------------------------

ITEMS = query(
    "items",
    f"SELECT {_ITEM_VIEW_COLUMNS} FROM items WHERE batch_id = ?{{scope}} ORDER BY id",
    lists=scoped(" AND state = ?"),
)
EVENTS = query(
    "events",
    "SELECT e.seq, e.at, e.batch_id, i.item_id, i.ratio, i.size, i.format, e.from_state, e.to_state, "
    "e.attempt, e.worker, e.error_code, e.detail, e.dedup "
    "FROM events e LEFT JOIN items i ON i.id = e.item_row WHERE e.batch_id = ?{scope} ORDER BY e.seq",
    lists=scoped(" AND i.item_id = ?"),
)
#: The next page of a batch's events after a seq (``events --follow``): events are numbered in
#: commit order, so none can appear later below a seq already read.
EVENTS_AFTER = query(
    "events_after",
    "SELECT e.seq, e.at, e.batch_id, i.item_id, i.ratio, i.size, i.format, e.from_state, e.to_state, "
    "e.attempt, e.worker, e.error_code, e.detail, e.dedup "
    "FROM events e LEFT JOIN items i ON i.id = e.item_row WHERE e.batch_id = ? AND e.seq > ?{scope} "
    "ORDER BY e.seq LIMIT 500",
    lists=scoped(" AND i.item_id = ?"),
)
ITEM_EXISTS = query("item_exists", "SELECT 1 FROM items WHERE batch_id = ? AND item_id = ? LIMIT 1")
SOURCE_SIZES = query(
    "source_sizes",
    "SELECT item_id, source_width, source_height FROM items "
    "WHERE batch_id = ? AND source_width IS NOT NULL AND source_height IS NOT NULL",
)
WORKERS = query(
    "workers",
    "SELECT i.lease_owner, min(i.item_id) AS item_id, {ratios} AS ratios, "
    f"min(i.updated_at) AS since FROM items i WHERE i.state = {RUNNING} AND i.lease_owner IS NOT NULL{{scope}} "
    "GROUP BY i.lease_owner, i.lease_token ORDER BY min(i.updated_at), i.lease_owner",
    lists=scoped(" AND i.batch_id = ?"),
)

# -- following live (a Follower) -------------------------------------------------------------------

_CLAIM = f"e.to_state = {RUNNING}"
_COMPLETION = f"(e.from_state = {RUNNING} AND e.to_state IN {TERMINAL})"
_FAILURE = f"e.error_code IS NOT NULL AND e.to_state IN ({FAILED}, {QUEUED})"
_FAILURE_COLUMNS = f"SELECT e.at, i.item_id, i.ratio, e.error_code, e.detail, e.to_state = {QUEUED} AS retry"

LAST_SEQ = query("last_seq", "SELECT coalesce(max(seq), 0) FROM events")
CANCELLED_BATCHES = query(
    "cancelled_batches",
    "SELECT batch_id FROM batches WHERE cancel_requested_at IS NOT NULL{scope}",
    lists=scoped(" AND batch_id = ?"),
)
#: On the time index: only the window's events, whatever the size of the batch (the batch is kept
#: off its own index, which would walk all its events).
WINDOW_START = query(
    "window_start",
    f"SELECT e.at, count(CASE WHEN {_COMPLETION} THEN 1 END) AS n FROM events e {{by_events_at}} "
    f"WHERE e.at >= ? AND e.seq <= ? AND ({_CLAIM} OR {_COMPLETION}){{scope}} GROUP BY e.at ORDER BY e.at",
    lists=scoped(" AND {no_index}e.batch_id = ?"),
    plan_each_run=True,
)
#: On the partial index of events with an error code: only failures are walked.
FAILURES_START = query(
    "failures_start",
    f"{_FAILURE_COLUMNS} FROM events e {{by_events_errors}} JOIN items i ON i.id = e.item_row "
    f"WHERE {_FAILURE} AND e.seq <= ?{{scope}} ORDER BY e.seq DESC LIMIT ?",
    lists=scoped(" AND {no_index}e.batch_id = ?"),
    plan_each_run=True,
)
#: Queued items by batch on the partial index of queued items.
QUEUED_BY_BATCH = query(
    "queued_by_batch",
    f"SELECT batch_id, count(*) AS n FROM items {{by_items_queued_age}} WHERE state = {QUEUED} GROUP BY batch_id",
    plan_each_run=True,
)
RUNNING_BY_BATCH = query(
    "running_by_batch", f"SELECT batch_id, count(*) AS n FROM items WHERE state = {RUNNING} GROUP BY batch_id"
)
_SPAN = "e.seq > ? AND e.seq <= ?{scope}"
_SPAN_SCOPE = scoped(" AND e.batch_id = ?")
MOVES_SINCE = query(
    "moves_since",
    f"SELECT e.batch_id, e.from_state, e.to_state, count(*) AS n FROM events e WHERE {_SPAN} "
    f"AND e.item_row IS NOT NULL AND e.to_state IN {ALL} GROUP BY 1, 2, 3",
    lists=_SPAN_SCOPE,
)
CANCELS_SINCE = query(
    "cancels_since",
    f"SELECT DISTINCT e.batch_id FROM events e WHERE {_SPAN} AND e.item_row IS NULL "
    "AND e.to_state = 'cancel_requested'",
    lists=_SPAN_SCOPE,
)
WINDOW_SINCE = query(
    "window_since",
    f"SELECT e.at, count(CASE WHEN {_COMPLETION} THEN 1 END) AS n FROM events e "
    f"WHERE {_SPAN} AND ({_CLAIM} OR {_COMPLETION}) GROUP BY e.at ORDER BY e.at",
    lists=_SPAN_SCOPE,
)
FAILURES_SINCE = query(
    "failures_since",
    f"{_FAILURE_COLUMNS} FROM events e JOIN items i ON i.id = e.item_row WHERE {_FAILURE} AND {_SPAN} "
    "ORDER BY e.seq DESC LIMIT ?",
    lists=_SPAN_SCOPE,
)
#: Queued items waiting out a backoff, walked on an index of queued items by ``not_before``.
DELAYED_OF_BATCH = query(
    "delayed_of_batch",
    f"SELECT count(*) FROM items {{by_items_queued_by_batch}} WHERE batch_id = ? AND state = {QUEUED} "
    "AND not_before > ?",
    plan_each_run=True,
)
DELAYED = query(
    "delayed",
    f"SELECT count(*) FROM items i {{by_items_runnable}} WHERE i.state = {QUEUED} AND i.not_before > ? "
    "AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.batch_id = i.batch_id AND b.cancel_requested_at IS NOT NULL)",
    plan_each_run=True,
)

# -- statistics -------------------------------------------------------------------------------------

QUEUE_FIGURES = query(
    "queue_figures",
    f"SELECT count(CASE WHEN {runnable('i')} THEN 1 END) AS runnable, "
    f"count(CASE WHEN i.state = {QUEUED} AND i.not_before > ? THEN 1 END) AS delayed, "
    f"count(CASE WHEN i.state = {RUNNING} THEN 1 END) AS running, "
    f"min(CASE WHEN {runnable('i')} THEN i.queued_at END) AS oldest "
    f"FROM items i JOIN batches b USING (batch_id) WHERE i.state IN {LIVE} "
    f"AND (b.cancel_requested_at IS NULL OR i.state = {RUNNING}){{scope}}",
    lists=scoped(" AND i.batch_id = ?"),
)
BATCHES_ADMITTED = query(
    "batches_admitted",
    "SELECT count(*) FROM batches b WHERE b.created_at >= ?{scope}",
    lists=scoped(" AND b.batch_id = ?"),
)
_EVENT_COUNT = "SELECT count(*) FROM events e WHERE e.at >= ? AND e.item_row IS NOT NULL AND "
_EVENT_SCOPE = scoped(" AND e.batch_id = ?")
ADMITTED = query("admitted", _EVENT_COUNT + "e.from_state IS NULL{scope}", lists=_EVENT_SCOPE)
CLAIMED = query("claimed", _EVENT_COUNT + f"e.to_state = {RUNNING}{{scope}}", lists=_EVENT_SCOPE)
#: Items that left ``running`` for the state given as the second parameter.
COMPLETED = query(
    "completed", _EVENT_COUNT + f"e.from_state = {RUNNING} AND e.to_state = ?{{scope}}", lists=_EVENT_SCOPE
)
RETRIES = query(
    "retries",
    f"SELECT e.batch_id, count(*) AS n FROM events e WHERE e.at >= ? AND e.to_state = {QUEUED} "
    f"AND e.from_state IN ({RUNNING}, {FAILED}){{scope}} GROUP BY e.batch_id ORDER BY e.batch_id",
    lists=_EVENT_SCOPE,
)
CANCEL_TIMES = query(
    "cancel_times",
    "SELECT b.batch_id, b.cancel_requested_at, "
    "(SELECT min(e.at) FROM events e WHERE e.batch_id = b.batch_id AND e.item_row IS NOT NULL "
    f"AND e.from_state = {RUNNING} AND e.to_state IN {TERMINAL} AND e.at >= b.cancel_requested_at) "
    f"AS first_stop, (SELECT count(*) FROM items i WHERE i.batch_id = b.batch_id AND i.state IN {LIVE}) "
    "AS live, (SELECT max(e.at) FROM events e WHERE e.batch_id = b.batch_id AND e.item_row IS NOT NULL "
    f"AND e.to_state IN {TERMINAL}) AS last_terminal "
    "FROM batches b WHERE b.cancel_requested_at >= ?{scope} ORDER BY b.cancel_requested_at",
    lists=scoped(" AND b.batch_id = ?"),
)
RENDERS = query(
    "renders",
    "SELECT i.id, i.batch_id, i.item_id, i.source, i.ratio, i.attempt, i.dedup, i.result FROM items i "
    f"WHERE i.state = {SUCCEEDED} AND i.updated_at >= ?{{scope}} ORDER BY i.id",
    lists=scoped(" AND i.batch_id = ?"),
)
