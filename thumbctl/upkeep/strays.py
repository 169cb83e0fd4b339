"""Files nobody accounts for: objects no live batch or published name references (reported;
``gc`` removes them) and stale temp files in OUT folders and stores (removed by the repair)."""

from __future__ import annotations

from collections.abc import Iterator

from ..core.models import Finding
from ..ledger import Ledger
from ..storage.fsafe import StoredFile
from ..storage.locations import is_s3
from ..storage.objects import ObjectStore
from ..storage.outputs import OutputTarget
from .inventory import listed_objects, object_size, object_stores
from .leftovers import IsDead, Scope, expired_writers, stale_temp_reason
from .problems import Problem


def stray_problems(ledger: Ledger, scope: Scope, now: float, grace: float, is_dead: IsDead) -> Iterator[Problem]:
    """Orphan objects of every store the ledger knows, then stale temp files of every local OUT and
    store (a bucket has no temp files)."""
    referenced = ledger.upkeep.referenced_object_paths()
    stores = object_stores(ledger, scope)
    for location, found in stores:
        yield from _orphan_problems(location, found, referenced)
    store_roots = {found.root for _, found in stores}
    for out_dir, newest_batch in ledger.upkeep.output_folders():
        if not is_s3(out_dir) and out_dir not in store_roots:  # a bucket has no temp files
            yield from _temp_problems(ledger, scope.target_at(out_dir), newest_batch, now, grace, is_dead)
    for _, found in stores:
        yield from _temp_problems(ledger, found, None, now, grace, is_dead)


def remove_empty_temp_folders(ledger: Ledger, scope: Scope) -> None:
    """OUT/.tmp of every local OUT removed when empty: it exists only while files are being written."""
    for out_dir, _ in ledger.upkeep.output_folders():
        if not is_s3(out_dir):
            scope.target_at(out_dir).remove_empty_tmp()


def _orphan_problems(location: str, store: ObjectStore, referenced: set[str]) -> Iterator[Problem]:
    for name, path, size in listed_objects(location, store):
        if path not in referenced:
            detail = (
                f"no item of a live batch and no published name references this object "
                f"({object_size(store, name, size)} bytes); `thumbctl gc` removes it"
            )
            yield Problem(Finding("orphan_object", None, None, detail, path=path))


def _temp_problems(
    ledger: Ledger,
    place: OutputTarget | ObjectStore,
    batch_id: str | None,
    now: float,
    grace: float,
    is_dead: IsDead,
) -> Iterator[Problem]:
    expired = expired_writers(ledger)
    for found in place.temp_files():
        reason = stale_temp_reason(found, now, grace, is_dead, expired)
        if reason is None:
            continue
        finding = Finding("stale_temp_file", batch_id, None, f"a temp file: {reason}", path=found.path)

        def fix(found: StoredFile = found, detail: str = finding.detail) -> bool:
            if batch_id is None:  # a temp file of the store: no batch's log to record it in
                place.remove_temp(found.path)
                return True
            ledger.upkeep.record_file_removal(
                batch_id,
                "stale_temp_file",
                f"reconcile removed {found.path}: {detail}",
                lambda: place.remove_temp(found.path),
            )
            return True

        yield Problem(finding, fix)
