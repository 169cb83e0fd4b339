"""Whether this host sees the local folders a claim was recorded with.

With a PostgreSQL ledger, workers run on many hosts: a local store or OUT is correct only on a
folder every host sees at the same path (a shared filesystem); hosts that share no disk use
``s3://`` for both. A worker whose host lacks the recorded folder fails the claim's items
(``store_not_on_host``, ``out_not_on_host``) rather than render into a fresh local folder of the
same name that no other host, and no later command, would look at. An ``s3://`` location is the
same bucket from every host and needs no check. A SQLite ledger is one host's file.
"""

from __future__ import annotations

import os

from ..core.errors import ItemFailure
from .locations import is_s3, store_location_of
from .ownership import is_store_folder


def check_on_host(out_dir: str, object_path: str, backend: str) -> None:
    """Raise ItemFailure when this host lacks the local store or OUT folder a server ledger recorded."""
    if backend == "sqlite":
        return
    if not is_s3(object_path):
        store = store_location_of(object_path)
        if not (is_store_folder(store) or os.path.isdir(os.path.join(store, "objects"))):
            raise ItemFailure(
                "store_not_on_host",
                f"this host has no store at {store}: a local store must be a folder every worker host sees at "
                "the same path (or use --store s3://bucket/prefix)",
            )
    if not out_on_host(out_dir, backend):
        raise ItemFailure(
            "out_not_on_host",
            f"this host has no output folder {out_dir}: a local OUT must be a folder every worker host sees at "
            "the same path (or use --out s3://bucket/prefix)",
        )


def out_on_host(out_dir: str, backend: str) -> bool:
    """Whether this host sees the OUT a batch recorded (always, for a bucket or a SQLite ledger)."""
    return backend == "sqlite" or is_s3(out_dir) or os.path.isdir(out_dir)
