"""Queries of the catalogue: the live names of an OUT joined with what made them."""

from __future__ import annotations

from ..states import LIVE
from . import query

#: Every live name of an OUT with the item that published it, its derivative's render and the crop
#: fix remembered for its content and ratio, in name order.
ENTRIES = query(
    "catalogue_entries",
    "SELECT n.friendly_path, n.out_dir, n.object_path, n.source, n.source_root, n.ratio, n.size, n.format, "
    "n.name_version, i.source_width, i.source_height, "
    "coalesce(n.changed_at, n.published_at) AS changed_at, n.batch_id, i.source_digest, i.fit, i.alt, "
    "i.result AS item_result, d.result AS render, "
    "f.focus_x, f.focus_y, i.focus_x AS rendered_x, i.focus_y AS rendered_y "
    "FROM names n LEFT JOIN items i ON i.id = n.item_row "
    "LEFT JOIN derivatives d ON d.derivative_key = n.derivative_key "
    "LEFT JOIN focus_points f ON f.source_digest = i.source_digest AND f.ratio = n.ratio "
    "WHERE n.out_dir = ? AND n.released_at IS NULL ORDER BY n.friendly_path",
)
#: Each OUT that holds live names, with how many.
OUTS = query(
    "catalogue_outs",
    "SELECT out_dir, count(*) AS names FROM names WHERE released_at IS NULL GROUP BY out_dir ORDER BY out_dir",
)
#: The site manifest's generation of an OUT, one more on each write (``meta`` row ``site_generation:OUT``).
NEXT_GENERATION = query(
    "next_generation",
    "INSERT INTO meta (name, value) VALUES (?, '1') "
    "ON CONFLICT (name) DO UPDATE SET value = CAST(CAST(meta.value AS INTEGER) + 1 AS TEXT)",
)
GENERATION = query("generation", "SELECT value FROM meta WHERE name = ?")
#: A value kept in ``meta`` (the markup an OUT's documents use), and its upsert.
META_VALUE = query("meta_value", "SELECT value FROM meta WHERE name = ?")
SET_META = query(
    "set_meta", "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
#: The items that published some live names of an OUT, with their batch's profile and limits: what a
#: claim of them holds, to choose their windows again (``names`` listed).
NAME_CLAIMS = query(
    "name_claims",
    "SELECT i.id, i.item_id, i.ratio, i.attempt, i.derivative_key, i.object_path, i.friendly_path, i.focus_x, "
    "i.focus_y, i.size, i.format, i.fit, b.batch_id, b.out_dir, b.source_root, i.source, i.source_digest, "
    "i.source_format, i.source_width, i.source_height, b.profile, b.limits "
    "FROM names n JOIN items i ON i.id = n.item_row JOIN batches b ON b.batch_id = i.batch_id "
    "WHERE n.out_dir = ? AND n.released_at IS NULL AND i.source_digest IS NOT NULL AND n.friendly_path IN ({names}) "
    "ORDER BY b.batch_id, i.source, i.id",
    lists={"names": ("?", ",")},
)
#: A derivative's render as chosen again by analysis (its window), over what was recorded.
RECORD_WINDOW = query(
    "record_window",
    "INSERT INTO derivatives (derivative_key, result, rendered_at) VALUES (?, ?, ?) "
    "ON CONFLICT (derivative_key) DO UPDATE SET result = excluded.result",
)
#: When each photo of an OUT was last approved in the review page (``meta`` rows ``reviewed:OUT|DIGEST``).
REVIEWS = query("reviews", "SELECT name, value FROM meta WHERE substr(name, 1, ?) = ?")
#: What changes whenever the catalogue of an OUT does: its live names (how many, the newest change),
#: every crop fix (how many, the newest set or cleared) and its approvals in the review page.
STAMP = query(
    "catalogue_stamp",
    "SELECT (SELECT count(*) FROM names WHERE out_dir = ? AND released_at IS NULL) AS names, "
    "(SELECT max(coalesce(changed_at, published_at)) FROM names WHERE out_dir = ? AND released_at IS NULL) AS changed, "
    "(SELECT count(*) FROM focus_points) AS fixes, (SELECT max(set_at) FROM focus_points) AS fixed, "
    "(SELECT count(*) FROM meta WHERE substr(name, 1, ?) = ?) AS reviews, "
    "(SELECT max(value) FROM meta WHERE substr(name, 1, ?) = ?) AS reviewed",
)
#: Which of some names of an OUT an unfinished item (queued or running) of any batch will publish.
NAMES_IN_FLIGHT = query(
    "names_in_flight",
    "SELECT DISTINCT i.friendly_path FROM items i JOIN batches b ON b.batch_id = i.batch_id "
    f"WHERE i.friendly_path IN ({{names}}) AND i.state IN {LIVE} AND b.out_dir = ?",
    lists={"names": ("?", ",")},
)
