"""Queries of damaged rows: the stored values thumbctl parses, read as text, so that one that does
not parse is found in Python instead of failing the statement (SQLite's ``json_extract`` and
PostgreSQL's ``::jsonb`` raise on the first bad value, and PostgreSQL before 16 has no way to ask
whether a text is JSON without raising)."""

from __future__ import annotations

from ..states import SUCCEEDED
from . import query

#: Every item's parsed values, for reconcile's check of the whole ledger.
ITEM_VALUES = query(
    "damage_item_values",
    "SELECT id, batch_id, item_id, ratio, result, object_path, size, source_width, source_height, not_before, "
    "lease_expires_at FROM items ORDER BY id",
)
#: The stored documents of every batch that has not expired.
BATCH_VALUES = query(
    "damage_batch_values",
    "SELECT batch_id, profile, limits, out_dir FROM batches WHERE expired_at IS NULL ORDER BY batch_id",
)
#: One item as a repair finds it, inside its write transaction.
ITEM_NOW = query(
    "damage_item_now",
    "SELECT id, batch_id, state, ratio, result, object_path, size, source_width, source_height, not_before, "
    "lease_expires_at FROM items WHERE id = ?{lock}",
)
CLEAR_RESULT = query("damage_clear_result", "UPDATE items SET result = NULL WHERE id = ?")
#: Succeeded items of a batch whose stored result seems to set a flag true (the LIKE patterns of
#: ``"flag": true`` written with and without the space): a text match that cannot fail, confirmed
#: by parsing each in Python.
FLAG_CANDIDATES = query(
    "damage_flag_candidates",
    f"SELECT friendly_path, result FROM items WHERE batch_id = ? AND state = {SUCCEEDED} "
    "AND (result LIKE ? OR result LIKE ?) ORDER BY id",
)
#: The succeeded items of a batch at one name, with what their results hold.
RESULTS_AT_NAME = query(
    "damage_results_at_name",
    f"SELECT id, result FROM items WHERE batch_id = ? AND friendly_path = ? AND state = {SUCCEEDED} ORDER BY id",
)
