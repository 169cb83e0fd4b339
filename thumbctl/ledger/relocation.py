"""The ledger's part of the one-time layout migration (:mod:`thumbctl.upkeep.legacy_layout`): which object paths
and thumbnail names an output folder's rows record, and moving object paths in one transaction.

No event is appended: a relocation changes where an object lives, not any item's state.
"""

from __future__ import annotations

import json

from .backend import Backend
from .damage import loose_object
from .sql import upkeep as sql

_CHUNK = 500


class Relocation:
    """Reads and the one rewrite of object paths for the migration of one output folder (a part
    of the upkeep port, :class:`~.maintenance.Upkeep`)."""

    db: Backend

    def object_paths_under(self, folder: str) -> set[str]:
        prefix = folder.rstrip("/") + "/"
        rows = self.db.execute(sql.OBJECT_PATHS_UNDER, (len(prefix), prefix)).fetchall()
        return {r["object_path"] for r in rows}

    def names_in(self, out_dir: str) -> list[str]:
        rows = self.db.execute(sql.NAMES_IN, (out_dir,)).fetchall()
        return [r["friendly_path"] for r in rows]

    def live_batches_in(self, out_dir: str) -> list[str]:
        rows = self.db.execute(sql.LIVE_BATCHES_IN, (out_dir,)).fetchall()
        return [r["batch_id"] for r in rows]

    def relocate_objects(self, folder: str, moved: dict[str, str]) -> int:
        prefix = folder.rstrip("/") + "/"
        changed = 0
        with self.db.write():
            rows = self.db.execute(sql.OBJECTS_UNDER, (len(prefix), prefix)).fetchall()
            for row in rows:
                update = _relocated(row["object_path"], row["result"], moved)
                if update is not None:
                    self.db.execute(sql.RELOCATE_ITEM, (*update, row["id"]))
                    changed += 1
            old = sorted(moved)
            for start in range(0, len(old), _CHUNK):
                part = old[start : start + _CHUNK]
                self.db.execute(sql.FORGET_CHECKS, part, ids=len(part))
        return changed


def _relocated(object_path: str, result: str | None, moved: dict[str, str]) -> tuple[str, str | None] | None:
    """The new (object path, result) of one item, or None when neither names a moved file."""
    new_path = moved.get(object_path, object_path)
    new_result = result
    if result:
        doc = loose_object(result) or {}
        preview = doc.get("preview")
        if isinstance(preview, str) and preview in moved:
            doc["preview"] = moved[preview]
            new_result = json.dumps(doc)
    if new_path == object_path and new_result == result:
        return None
    return new_path, new_result
