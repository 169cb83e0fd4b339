"""Queries of the work queue: claims, leases, outcomes, rescue, and the one item transition."""

from __future__ import annotations

from ..states import FAILED, LIVE, QUEUED, RUNNING, SUCCEEDED, runnable
from . import IDS, insert, query, scoped

_NOT_CANCELLED = "batch_id NOT IN (SELECT batch_id FROM batches WHERE cancel_requested_at IS NOT NULL)"
_PASSED = {"passed": (" AND NOT (batch_id = ? AND source = ?)", "")}

EVENT_COLUMNS = (
    "at",
    "batch_id",
    "item_row",
    "from_state",
    "to_state",
    "attempt",
    "worker",
    "error_code",
    "detail",
    "dedup",
)
INSERT_EVENTS = insert("events", EVENT_COLUMNS)

# -- the transition primitive -------------------------------------------------------------------

MOVABLE = query(
    "movable",
    "SELECT id FROM items WHERE id IN ({ids}) AND {no_index}state = ?{guard} ORDER BY id{lock}",
    lists={**IDS, "guard": (" AND lease_token = ?", "")},
)
MOVE = query(
    "move",
    "UPDATE items SET state = ?, updated_at = ?, error_code = ?, error_detail = ?, not_before = ?, "
    "queued_at = coalesce(?, queued_at){lease} WHERE id IN ({ids}) RETURNING id, batch_id, attempt",
    lists={
        **IDS,
        "lease": (", lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, stage_started_at = NULL", ""),
    },
)
#: The item to settle, locked, and its batch's cancel flag read under a share lock of the batch row
#: (the row ``cancel`` locks to set the flag): a settle that requeues the item commits before the
#: cancel (which then cancels it as queued) or after it (and sees the flag).
SETTLEABLE = query(
    "settleable",
    "SELECT i.attempt, b.max_attempts, b.deadline_at, b.cancel_requested_at FROM items i "
    f"JOIN batches b USING (batch_id) WHERE i.id = ? AND i.state = {RUNNING}{{lock_i}}{{share_b}}",
)
FRESH_ATTEMPTS = query("fresh_attempts", "UPDATE items SET attempt = 0 WHERE id IN ({ids})", lists=IDS)
UNCOUNTED_ATTEMPTS = query(
    "uncounted_attempts", "UPDATE items SET attempt = attempt - 1 WHERE id IN ({ids})", lists=IDS
)
RELEASED_ATTEMPTS = query(
    "released_attempts",
    "UPDATE items SET attempt = CASE WHEN attempt > 0 THEN attempt - 1 ELSE 0 END WHERE id IN ({ids})",
    lists=IDS,
)

# -- claims --------------------------------------------------------------------------------------

#: What a claimer may have to rescue, read before its transaction: each lease owner with the earliest
#: expiry of its leases, and a row without an owner for each batch with queued items that is past its
#: deadline or has a cancel request (queued items no claim will ever take).
RESCUE_DUE = query(
    "rescue_due",
    f"SELECT lease_owner AS owner, min(lease_expires_at) AS expires FROM items WHERE state = {RUNNING} "
    "AND lease_owner IS NOT NULL GROUP BY lease_owner UNION ALL SELECT NULL AS owner, "
    "coalesce(b.cancel_requested_at, b.deadline_at) AS expires FROM batches b "
    "WHERE (b.deadline_at <= ? OR b.cancel_requested_at IS NOT NULL) "
    f"AND EXISTS (SELECT 1 FROM items i WHERE i.batch_id = b.batch_id AND i.state = {QUEUED})",
)
#: The next source to claim from: a retry that is due first, then the oldest fresh item; each half walks
#: an index of queued items without sorting (``{by_…}``: the ledger's, or for one batch the batch's own,
#: so a claim scoped to a batch never steps over the queued items of the others). ``{try_source}`` holds
#: the source for this transaction where claimers run side by side (PostgreSQL: a try-lock, so a source
#: another claimer is taking is passed over in the same statement).
_NEXT_SOURCE = (
    "SELECT batch_id, source FROM (SELECT batch_id, source FROM items {index} WHERE state = {queued} "
    "AND not_before <= ?{scope}{{passed}} AND {not_cancelled}{{try_source}} ORDER BY not_before LIMIT 1) AS due "
    "UNION ALL SELECT batch_id, source FROM (SELECT batch_id, source FROM items {index} WHERE state = {queued} "
    "AND not_before IS NULL{scope}{{passed}} AND {not_cancelled}{{try_source}} ORDER BY id LIMIT 1) AS fresh LIMIT 1"
)
NEXT_SOURCE = query(
    "next_source",
    _NEXT_SOURCE.format(index="{by_items_runnable}", queued=QUEUED, scope="", not_cancelled=_NOT_CANCELLED),
    lists=_PASSED,
    plan_each_run=True,
)
NEXT_SOURCE_OF_BATCH = query(
    "next_source_of_batch",
    _NEXT_SOURCE.format(
        index="{by_items_queued_by_batch}", queued=QUEUED, scope=" AND batch_id = ?", not_cancelled=_NOT_CANCELLED
    ),
    lists=_PASSED,
    plan_each_run=True,
)
_OF_SOURCE = f"batch_id = ? AND source = ? AND state = {QUEUED}"
#: The claimable items of a source in key order, up to a limit: when fewer come back, that is all of them.
CLAIMABLE_OF_SOURCE = query(
    "claimable_of_source",
    f"SELECT id, derivative_key FROM items WHERE {_OF_SOURCE} AND (not_before IS NULL OR not_before <= ?) "
    "ORDER BY derivative_key, id LIMIT ?{lock_skip_locked}",
)
NEXT_KEY = query("next_key", f"SELECT min(derivative_key) FROM items WHERE {_OF_SOURCE} AND derivative_key > ?")
CLAIMABLE_OF_KEY = query(
    "claimable_of_key",
    f"SELECT id FROM items WHERE {_OF_SOURCE} AND derivative_key = ? "
    "AND (not_before IS NULL OR not_before <= ?) ORDER BY id LIMIT ?{lock_skip_locked}",
)
#: ``queued -> running`` under a new lease (the attempt counted), returning what the claim holds.
TAKE = query(
    "take",
    f"UPDATE items SET state = {RUNNING}, updated_at = ?, error_code = NULL, error_detail = NULL, not_before = NULL, "
    "attempt = attempt + 1, lease_owner = ?, lease_token = ?, lease_expires_at = ?, stage_started_at = ? "
    f"WHERE id IN ({{ids}}) AND {{no_index}}state = {QUEUED} RETURNING id, item_id, ratio, size, format, attempt, "
    "derivative_key, object_path, friendly_path, focus_x, focus_y, fit, batch_id, source, source_digest, "
    "source_format, source_width, source_height",
    lists=IDS,
)
CLAIMED_BATCH = query("claimed_batch", "SELECT profile, limits, out_dir, source_root FROM batches WHERE batch_id = ?")

# -- leases and stages -----------------------------------------------------------------------------

HEARTBEAT = query("heartbeat", f"UPDATE items SET lease_expires_at = ? WHERE lease_token = ? AND state = {RUNNING}")
#: The claim's current stage becomes the render of ``{ids}`` (their clock starts), its other items wait.
STAGE_MOVED = query(
    "stage_moved",
    "UPDATE items SET stage_started_at = CASE WHEN id IN ({ids}) THEN ? END WHERE lease_token = ? "
    f"AND state = {RUNNING} AND (stage_started_at IS NOT NULL OR id IN ({{ids}}))",
    lists=IDS,
)
STAGE_ENDED = query(
    "stage_ended",
    f"UPDATE items SET stage_started_at = NULL WHERE lease_token = ? AND state = {RUNNING} "
    "AND stage_started_at IS NOT NULL",
)
STAGE_STARTED = query(
    "stage_started",
    "UPDATE items SET stage_started_at = ? WHERE id IN ({ids}) "
    f"AND lease_token = ? AND {{no_index}}state = {RUNNING}",
    lists=IDS,
)
STAGE_PROGRESSED = query(
    "stage_progressed",
    f"UPDATE items SET stage_started_at = ? WHERE lease_token = ? AND state = {RUNNING} "
    "AND stage_started_at IS NOT NULL",
)
HELD_ROWS = query("held_rows", f"SELECT id FROM items WHERE lease_token = ? AND state = {RUNNING} ORDER BY id{{lock}}")
CANCEL_FLAG = query("cancel_flag", "SELECT cancel_requested_at FROM batches WHERE batch_id = ?")
#: The cancel flag read to decide whether items go back to the queue (see ``{share}``).
CANCEL_FLAG_SHARED = query("cancel_flag_shared", "SELECT cancel_requested_at FROM batches WHERE batch_id = ?{share}")

# -- outcomes ---------------------------------------------------------------------------------------

#: The item, and its batch kept from a cancel until the publish commits (the race rule).
PUBLISHABLE = query(
    "publishable",
    "SELECT i.state, i.lease_token, b.cancel_requested_at, b.deadline_at FROM items i "
    "JOIN batches b USING (batch_id) WHERE i.id = ?{lock_i}{share_b}",
)
#: ``running -> succeeded`` of an item whose row the publish holds: the lease ends, the version
#: publishing returned at its name and the render's result (if any) are recorded.
PUBLISHED = query(
    "published",
    f"UPDATE items SET state = {SUCCEEDED}, updated_at = ?, error_code = NULL, error_detail = NULL, not_before = NULL, "
    "lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, stage_started_at = NULL, name_version = ?, "
    f"result = coalesce(?, result) WHERE id = ? AND lease_token = ? AND {{no_index}}state = {RUNNING}",
)
#: The version publishing returned at the item's name (None: none known).
SET_NAME_VERSION = query("set_name_version", "UPDATE items SET name_version = ? WHERE id = ?")
#: The version published at a name for the batch's succeeded item there (a reusing submit).
RECORD_NAME_VERSION = query(
    "record_name_version",
    f"UPDATE items SET name_version = ? WHERE batch_id = ? AND friendly_path = ? AND state = {SUCCEEDED}",
)
#: The newest succeeded item of the batch at a name (a reusing submit records the name for it).
NAMED_ITEM = query(
    "named_item",
    f"SELECT id FROM items WHERE batch_id = ? AND friendly_path = ? AND state = {SUCCEEDED} ORDER BY id DESC LIMIT 1",
)
#: The name's own record, kept whatever becomes of the batch: the newest publisher at a name wins;
#: ``changed_at`` moves only when other bytes are published there.
RECORD_NAME = query(
    "record_name",
    "INSERT INTO names (friendly_path, out_dir, object_path, derivative_key, name_version, source_root, source, "
    "ratio, size, format, batch_id, item_row, published_at, changed_at) "
    "SELECT i.friendly_path, b.out_dir, i.object_path, i.derivative_key, ?, b.source_root, i.source, i.ratio, "
    "i.size, i.format, i.batch_id, i.id, ?, ? FROM items i JOIN batches b USING (batch_id) "
    "WHERE i.id = ? AND i.friendly_path IS NOT NULL AND i.object_path IS NOT NULL "
    "ON CONFLICT (friendly_path) DO UPDATE SET out_dir = excluded.out_dir, object_path = excluded.object_path, "
    "derivative_key = excluded.derivative_key, name_version = excluded.name_version, "
    "source_root = excluded.source_root, source = excluded.source, ratio = excluded.ratio, size = excluded.size, "
    "format = excluded.format, batch_id = excluded.batch_id, item_row = excluded.item_row, "
    "published_at = excluded.published_at, released_at = NULL, "
    "changed_at = CASE WHEN names.object_path = excluded.object_path "
    "AND coalesce(names.name_version, '') = coalesce(excluded.name_version, '') "
    "THEN coalesce(names.changed_at, names.published_at) ELSE excluded.changed_at END",
)
#: The render of the item's derivative key, kept with the key: outputs reused from it carry it on.
RECORD_DERIVATIVE = query(
    "record_derivative",
    "INSERT INTO derivatives (derivative_key, result, rendered_at) "
    "SELECT derivative_key, ?, ? FROM items WHERE id = ? AND derivative_key IS NOT NULL "
    "ON CONFLICT (derivative_key) DO UPDATE SET result = excluded.result, rendered_at = excluded.rendered_at",
)
CLEAR_NOTE = query("clear_note", "UPDATE items SET error_detail = NULL WHERE id = ?")
STORE_RESULT = query("store_result", "UPDATE items SET result = ? WHERE id = ?")
RETRY_BATCH = query(
    "retry_batch", "SELECT cancel_requested_at, deadline_at, expired_at FROM batches WHERE batch_id = ?"
)
RETRYABLE = query(
    "retryable",
    f"SELECT id FROM items WHERE batch_id = ? AND state = {FAILED} AND derivative_key IS NOT NULL ORDER BY id",
)

# -- rescue and deadlines -----------------------------------------------------------------------------

LEASES = query("leases", f"SELECT id, lease_owner, lease_expires_at FROM items WHERE state = {RUNNING} ORDER BY id")
LATE_BATCHES = query("late_batches", "SELECT batch_id FROM batches WHERE deadline_at IS NOT NULL AND deadline_at <= ?")
#: Batches whose cancel was requested that still have queued items (put back by a path that read the
#: flag before the cancel committed, in a ledger written by an older thumbctl).
UNFINISHED_CANCELS = query(
    "unfinished_cancels",
    "SELECT b.batch_id, b.cancel_requested_at FROM batches b WHERE b.cancel_requested_at IS NOT NULL "
    f"AND EXISTS (SELECT 1 FROM items i WHERE i.batch_id = b.batch_id AND i.state = {QUEUED}) ORDER BY b.batch_id",
)
#: The latest retry time of a queued item (the runnable index's last entry), and the queued items
#: that wait past a time: a ``not_before`` that does not parse (a damaged row) sorts after every real
#: one and no claim would ever take its item.
LATEST_NOT_BEFORE = query("latest_not_before", f"SELECT max(not_before) FROM items WHERE state = {QUEUED}")
WAITING = query("waiting", f"SELECT id, not_before FROM items WHERE state = {QUEUED} AND not_before > ? ORDER BY id")
RELEASE_WAIT = query("release_wait", f"UPDATE items SET not_before = ? WHERE id = ? AND state = {QUEUED}")
QUEUED_OF_BATCH = query("queued_of_batch", f"SELECT id FROM items WHERE batch_id = ? AND state = {QUEUED} ORDER BY id")

# -- reading the queue --------------------------------------------------------------------------------

QUEUE_STATE = query(
    "queue_state",
    f"SELECT count(CASE WHEN {runnable('i')} THEN 1 END) AS runnable, "
    f"count(CASE WHEN i.state = {QUEUED} AND i.not_before > ? THEN 1 END) AS delayed, "
    f"count(CASE WHEN i.state = {RUNNING} THEN 1 END) AS running, "
    f"min(CASE WHEN i.state = {QUEUED} AND i.not_before > ? THEN i.not_before END) AS next_not_before "
    f"FROM items i JOIN batches b USING (batch_id) WHERE i.state IN {LIVE} "
    f"AND (b.cancel_requested_at IS NULL OR i.state = {RUNNING}){{scope}}",
    lists=scoped(" AND i.batch_id = ?"),
)
#: Each half stops at the first live item: the cost is the same whatever the length of the queue.
QUEUE_LIVE = query(
    "queue_live",
    f"SELECT EXISTS (SELECT 1 FROM items WHERE state = {RUNNING}{{scope}}) "
    f"OR EXISTS (SELECT 1 FROM items WHERE state = {QUEUED}{{scope}} AND {_NOT_CANCELLED})",
    lists=scoped(" AND batch_id = ?"),
)
OVERDUE_OWNERS = query(
    "overdue_owners",
    f"SELECT DISTINCT lease_owner FROM items WHERE state = {RUNNING} AND lease_owner IS NOT NULL "
    "AND stage_started_at < ?",
)
OWNER_ITEMS = query(
    "owner_items",
    "SELECT i.id, CASE WHEN i.stage_started_at < ? THEN 1 ELSE 0 END AS late, b.cancel_requested_at "
    f"FROM items i JOIN batches b USING (batch_id) WHERE i.state = {RUNNING} AND i.lease_owner = ? "
    "ORDER BY i.id{lock_i}{share_b}",
)
