"""Queries of maintenance: reconcile's findings and repairs, gc's retention, the layout migration."""

from __future__ import annotations

from ..states import ALL, FAILED, LIVE, QUEUED, RUNNING, SUCCEEDED
from . import IDS, query

_LIVE_BATCH = "b.expired_at IS NULL"
#: Whether item ``i`` (of batch ``b``) owns its name: it holds the name's record (it published the name
#: last, whatever became of its batch since), or it never published the name (a reused output whose
#: name could not be published yet) and is the newest success of a live batch to claim a name nobody
#: published after it succeeded. A name released to the user is nobody's.
_OWNS_NAME = (
    "(NOT EXISTS (SELECT 1 FROM names r WHERE r.friendly_path = i.friendly_path AND r.released_at IS NOT NULL) "
    "AND (EXISTS (SELECT 1 FROM names n WHERE n.friendly_path = i.friendly_path AND n.item_row = i.id) "
    f"OR (i.name_version IS NULL AND {_LIVE_BATCH} "
    "AND NOT EXISTS (SELECT 1 FROM names n WHERE n.friendly_path = i.friendly_path AND n.published_at > i.updated_at) "
    "AND NOT EXISTS (SELECT 1 FROM items j JOIN batches c ON c.batch_id = j.batch_id "
    f"WHERE j.friendly_path = i.friendly_path AND j.state = {SUCCEEDED} AND c.expired_at IS NULL "
    "AND (j.updated_at > i.updated_at OR (j.updated_at = i.updated_at AND j.id > i.id))))))"
)
_EXCLUDING = {"excluding": ("?", ",", " AND b.batch_id NOT IN (", ")")}

# -- findings ------------------------------------------------------------------------------------

_STALLED_COLUMNS = (
    "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.state, i.lease_owner, i.lease_token, "
    "i.lease_expires_at, b.cancel_requested_at FROM"
)
#: Two halves, so neither walks the queued items of batches without a cancel request (the second
#: goes from the flagged batches to their items: SQLite keeps that order for a CROSS JOIN).
STALLED_CANDIDATES = query(
    "stalled_candidates",
    f"{_STALLED_COLUMNS} items i JOIN batches b USING (batch_id) WHERE i.state = {RUNNING} UNION ALL "
    f"{_STALLED_COLUMNS} batches b {{ordered_join}} items i USING (batch_id) "
    f"WHERE b.cancel_requested_at IS NOT NULL AND i.state = {QUEUED} ORDER BY 1",
)
#: Succeeded items of live batches, and those of expired batches that still own their name's record.
PUBLISHED_ITEMS = query(
    "published_items",
    "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.size, i.format, i.fit, i.derivative_key, i.object_path, "
    f"i.friendly_path, i.source_width, i.source_height, b.profile, b.out_dir, {_OWNS_NAME} AS owns, "
    "b.expired_at IS NOT NULL AS expired, i.result "
    f"FROM items i JOIN batches b USING (batch_id) WHERE i.state = {SUCCEEDED} "
    "AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL "
    f"AND ({_LIVE_BATCH} OR {_OWNS_NAME}) ORDER BY i.id",
)
#: Failed items whose name nothing claims: no success of a live batch, no recorded name.
UNSETTLED_NAMES = query(
    "unsettled_names",
    "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.error_code, i.object_path, i.friendly_path, b.out_dir "
    f"FROM items i JOIN batches b USING (batch_id) WHERE i.state = {FAILED} AND {_LIVE_BATCH} "
    "AND b.cancel_requested_at IS NULL AND i.object_path IS NOT NULL AND i.friendly_path IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM names n WHERE n.friendly_path = i.friendly_path) "
    "AND NOT EXISTS (SELECT 1 FROM items o JOIN batches ob ON ob.batch_id = o.batch_id "
    f"WHERE o.friendly_path = i.friendly_path AND o.state = {SUCCEEDED} AND ob.expired_at IS NULL) ORDER BY i.id",
)
UNSETTLED_NAME = query(
    "unsettled_name",
    "SELECT i.state, i.object_path, i.friendly_path, b.cancel_requested_at FROM items i "
    f"JOIN batches b USING (batch_id) WHERE i.id = ? AND {_LIVE_BATCH}{{lock_i}}",
)
VERIFIED_OBJECTS = query(
    "verified_objects", "SELECT object_path, dev, inode, size, mtime_ns, ctime_ns FROM object_checks"
)
FORGET_VERIFIED_OBJECTS = query("forget_verified_objects", "DELETE FROM object_checks")
REMEMBER_VERIFIED_OBJECT = query(
    "remember_verified_object",
    "INSERT INTO object_checks (object_path, dev, inode, size, mtime_ns, ctime_ns) "
    "VALUES (:object_path, :dev, :inode, :size, :mtime_ns, :ctime_ns)",
)
#: ``{excluding}``: the ids of batches about to expire. A published name's record references its
#: object whatever became of its batch.
REFERENCED_OBJECTS = query(
    "referenced_objects",
    "SELECT i.object_path FROM items i JOIN batches b USING (batch_id) "
    f"WHERE i.object_path IS NOT NULL AND {_LIVE_BATCH}{{excluding}} UNION SELECT object_path FROM names",
    lists=_EXCLUDING,
)
OUTPUT_FOLDERS = query(
    "output_folders",
    "SELECT out_dir, batch_id FROM (SELECT out_dir, batch_id, row_number() OVER "
    "(PARTITION BY out_dir ORDER BY created_at DESC, batch_id DESC) AS n FROM batches) AS newest "
    "WHERE n = 1 ORDER BY out_dir",
)

# -- repairs ---------------------------------------------------------------------------------------

LEASE_OF_ITEM = query("lease_of_item", "SELECT lease_token, lease_owner FROM items WHERE id = ?")
#: The item locked, its batch row share-locked as in ``SETTLEABLE``: a rescue and a cancel never miss each other.
STALLED_ITEM = query(
    "stalled_item",
    "SELECT i.state, i.lease_token, i.lease_owner, i.lease_expires_at, b.cancel_requested_at "
    "FROM items i JOIN batches b USING (batch_id) WHERE i.id = ?{lock_i}{share_b}",
)
PUBLISHED_ITEM = query(
    "published_item",
    "SELECT i.state, i.object_path, b.cancel_requested_at FROM items i JOIN batches b USING (batch_id) "
    f"WHERE i.id = ? AND {_LIVE_BATCH}{{lock_i}}",
)
#: Rendered afresh: not a reuse any more, and the old result is void.
RENDER_AGAIN = query(
    "render_again", "UPDATE items SET attempt = 0, dedup = 0, result = NULL WHERE id IN ({ids})", lists=IDS
)
RENDERABLE_SUCCESSES = query(
    "renderable_successes",
    "SELECT i.id, i.object_path FROM items i JOIN batches b USING (batch_id) WHERE i.batch_id = ? "
    f"AND i.state = {SUCCEEDED} AND i.object_path IS NOT NULL AND {_LIVE_BATCH} "
    "AND b.cancel_requested_at IS NULL ORDER BY i.id",
)
#: The item still succeeded with these paths, and still the owner of its name's record.
RELINKABLE = query(
    "relinkable",
    "SELECT i.batch_id, i.attempt FROM items i JOIN batches b USING (batch_id) "
    f"WHERE i.id = ? AND i.state = {SUCCEEDED} AND i.object_path = ? AND i.friendly_path = ? "
    f"AND {_OWNS_NAME}{{lock_i}}",
)

# -- retention ---------------------------------------------------------------------------------------

#: Maintenance events (relinks, temp file removals) do not count: they do not make outputs newer.
EXPIRABLE_BATCHES = query(
    "expirable_batches",
    f"SELECT b.batch_id FROM batches b WHERE {_LIVE_BATCH}{{only}} "
    f"AND NOT EXISTS (SELECT 1 FROM items i WHERE i.batch_id = b.batch_id AND i.state IN {LIVE}) "
    "AND coalesce((SELECT max(e.at) FROM events e WHERE e.batch_id = b.batch_id AND e.item_row IS NOT NULL "
    f"AND e.to_state IN {ALL}), b.created_at) < ? ORDER BY b.created_at, b.batch_id",
    lists={"only": (" AND b.batch_id = ?", "")},
)
IDEMPOTENCY_KEY = query("idempotency_key", "SELECT idempotency_key FROM batches WHERE batch_id = ?{lock}")
EXPIRE_BATCH = query("expire_batch", "UPDATE batches SET expired_at = ?, idempotency_key = ? WHERE batch_id = ?")
EXPIRED_MANIFESTS = query(
    "expired_manifests",
    "SELECT out_dir, batch_id, manifest_path FROM batches WHERE expired_at IS NOT NULL{also} ORDER BY batch_id",
    lists={"also": ("?", ",", " OR batch_id IN (", ")")},
)
OBJECT_REFERENCED = query(
    "object_referenced",
    "SELECT 1 FROM items i JOIN batches b USING (batch_id) WHERE i.derivative_key = ? "
    f"AND i.object_path = ? AND {_LIVE_BATCH} UNION ALL SELECT 1 FROM names WHERE object_path = ?",
)

# -- published names: the mirror's removals ------------------------------------------------------------

#: Names published into an output folder from a source folder, with the id of the item that published each.
NAMES_FROM = query(
    "names_from",
    "SELECT n.friendly_path, n.object_path, n.name_version, n.source, n.batch_id, n.item_row, i.item_id "
    "FROM names n LEFT JOIN items i ON i.id = n.item_row WHERE n.out_dir = ? AND n.source_root = ? "
    "AND n.released_at IS NULL ORDER BY n.friendly_path",
)
NAME_OWNER = query("name_owner", "SELECT item_row, name_version FROM names WHERE friendly_path = ?")
FORGET_NAME = query("forget_name", "DELETE FROM names WHERE friendly_path = ?")

# -- the one-time layout migration ----------------------------------------------------------------------

OBJECT_PATHS_UNDER = query(
    "object_paths_under", "SELECT DISTINCT object_path FROM items WHERE substr(object_path, 1, ?) = ?"
)
NAMES_IN = query(
    "names_in",
    "SELECT DISTINCT i.friendly_path FROM items i JOIN batches b USING (batch_id) "
    "WHERE b.out_dir = ? AND i.friendly_path IS NOT NULL ORDER BY i.friendly_path",
)
LIVE_BATCHES_IN = query(
    "live_batches_in",
    "SELECT batch_id FROM batches WHERE out_dir = ? AND expired_at IS NULL ORDER BY created_at, batch_id",
)
OBJECTS_UNDER = query("objects_under", "SELECT id, object_path, result FROM items WHERE substr(object_path, 1, ?) = ?")
RELOCATE_ITEM = query("relocate_item", "UPDATE items SET object_path = ?, result = ? WHERE id = ?")
FORGET_CHECKS = query("forget_checks", "DELETE FROM object_checks WHERE object_path IN ({ids})", lists=IDS)

# -- facts about the ledger -----------------------------------------------------------------------------

META = query("meta", "SELECT value FROM meta WHERE name = ?")
SET_META = query(
    "set_meta",
    "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
)

# -- names a crash may have left, and names handed over to the user ------------------------------------

#: The items other than the name's owner that published, or were publishing, at a name: whose bytes
#: a crash may have left there.
PUBLISHERS_AT = query(
    "publishers_at",
    "SELECT i.id, i.batch_id, i.item_id, i.ratio, i.state, i.error_code, i.object_path, i.friendly_path, "
    "b.out_dir, b.cancel_requested_at, b.expired_at FROM items i JOIN batches b USING (batch_id) "
    "WHERE i.friendly_path = ? AND i.id <> ? AND i.object_path IS NOT NULL ORDER BY i.id DESC",
)
NAME_RELEASE = query("name_release", "SELECT released_at FROM names WHERE friendly_path = ?{lock}")
#: The newest success at a name no record holds yet (published before names were recorded).
NEWEST_SUCCESS_AT = query(
    "newest_success_at",
    f"SELECT i.id, i.name_version FROM items i WHERE i.friendly_path = ? AND i.state = {SUCCEEDED} "
    "AND i.object_path IS NOT NULL ORDER BY i.updated_at DESC, i.id DESC LIMIT 1",
)
RELEASE_NAME = query("release_name", "UPDATE names SET released_at = ? WHERE friendly_path = ?")
NAME_BATCH = query("name_batch", "SELECT batch_id FROM names WHERE friendly_path = ?")
