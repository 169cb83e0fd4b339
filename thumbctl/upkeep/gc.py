"""gc (retention): what an operator runs from cron beside ``reconcile``.

``gc`` expires terminal batches past an age (their records and keys), then removes the objects of
the ledger's store (a local folder or an ``s3://`` prefix, listed by prefix through its interface)
that no remaining batch and no published name's record references (checked inside a write
transaction, one object at a time), stale temp files of local folders (OUT/.tmp and STORE/.tmp) and
the manifests and contact sheets of expired batches (OUT/batches). It never removes a thumbnail: a
published name keeps its record, and its file, whatever becomes of the batch that published it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from ..config.options import DEFAULT_GRACE
from ..config.s3location import S3Options
from ..core.models import GcReport
from ..core.proc import owner_is_dead
from ..ledger import Ledger, iso
from ..storage.locations import documents_of, is_s3, name_in
from ..storage.objects import ObjectStore
from ..storage.outputs import OutputTarget
from .inventory import listed_objects, object_stores
from .leftovers import IsDead, Scope, expired_writers, stale_temp_reason


def collect_garbage(
    ledger: Ledger,
    older_than: float,
    *,
    dry_run: bool = False,
    grace: float = DEFAULT_GRACE,
    is_dead: IsDead = owner_is_dead,
    store: str | None = None,
    options: S3Options | None = None,
) -> GcReport:
    """Expire terminal batches whose last event is older than ``older_than`` seconds, then
    remove what no remaining batch references. ``dry_run`` changes nothing and reports
    what would go. ``store`` is the ledger's store's location (default: the one it recorded)."""
    scope = Scope(store, options)
    now = ledger.clock()
    cutoff = iso(now - older_than)
    expiring = ledger.upkeep.expirable_batches(cutoff)
    expired = expiring if dry_run else [b for b in expiring if ledger.upkeep.expire_batch(b, cutoff)]
    pending = expired if dry_run else []
    errors: list[str] = []
    objects, object_bytes = _collect_objects(ledger, pending, dry_run, errors, scope)
    temps, temp_bytes = _collect_temps(ledger, now, grace, is_dead, dry_run, errors, scope)
    (manifests, sheets), document_bytes = _collect_batch_documents(ledger, pending, dry_run, errors, scope)
    return GcReport(
        dry_run=dry_run,
        expired_batches=tuple(expired),
        objects_removed=objects,
        temp_files_removed=temps,
        manifests_removed=manifests,
        sheets_removed=sheets,
        bytes_reclaimed=object_bytes + temp_bytes + document_bytes,
        errors=tuple(errors),
    )


def _removing(path: str, errors: list[str], remove: Callable[[], int]) -> int:
    """Run one removal; a storage error is recorded (the file stays) and gc goes on."""
    try:
        return remove()
    except OSError as exc:
        errors.append(f"{path}: {exc.strerror or exc}")
        return -1


def _collect_objects(
    ledger: Ledger, pending: list[str], dry_run: bool, errors: list[str], scope: Scope
) -> tuple[int, int]:
    """Objects that no live batch of the ledger (``pending`` batches counted as expired) and no
    published name's record references, in its store and in output folders of the earlier layout:
    (objects, bytes). Thumbnails are never touched."""
    referenced = ledger.upkeep.referenced_object_paths(also_expiring=pending)
    objects = freed = 0
    for location, found in object_stores(ledger, scope):
        for name, path, size in listed_objects(location, found):
            if path in referenced:
                continue
            if dry_run:
                objects, freed = objects + 1, freed + found.freed_by_removing(name, size)
                continue
            try:
                outcome = ledger.upkeep.remove_if_unreferenced(name.split(".", 1)[0], path, partial(found.remove, name))
            except OSError as exc:
                errors.append(f"{path}: {exc.strerror or exc}")
                continue
            if outcome is not None:
                objects, freed = objects + 1, freed + outcome
    return objects, freed


def _collect_temps(
    ledger: Ledger,
    now: float,
    grace: float,
    is_dead: IsDead,
    dry_run: bool,
    errors: list[str],
    scope: Scope,
) -> tuple[int, int]:
    """Stale temp files of the output targets and stores (a bucket has none: an object appears whole
    or not at all); an output target's emptied temp folder goes too."""
    count = freed = 0
    outs = [out_dir for out_dir, _ in ledger.upkeep.output_folders() if not is_s3(out_dir)]  # a bucket has none
    targets = [scope.target_at(out_dir) for out_dir in outs]
    roots = {target.root for target in targets}
    places: list[OutputTarget | ObjectStore] = [*targets]
    places += [found for _, found in object_stores(ledger, scope) if found.root not in roots]
    expired = expired_writers(ledger)
    for place in places:
        for found in place.temp_files():  # thumbctl's own: a user's file there is never touched
            if stale_temp_reason(found, now, grace, is_dead, expired) is None:
                continue
            size = found.size if dry_run else _removing(found.path, errors, partial(place.remove_temp, found.path))
            if size >= 0:
                count, freed = count + 1, freed + size
    if not dry_run:
        for target in targets:
            target.remove_empty_tmp()
    return count, freed


def _collect_batch_documents(
    ledger: Ledger, pending: list[str], dry_run: bool, errors: list[str], scope: Scope
) -> tuple[tuple[int, int], int]:
    """Expired batches' manifests and contact sheets (at their default place in OUT, or where
    ``--documents`` put them): ((manifests, sheets), bytes)."""
    manifests = sheets = freed = 0
    for out_dir, batch_id, manifest in ledger.upkeep.expired_manifests(also_expiring=pending):
        documents = _documents_of(out_dir, manifest)
        target = scope.target_at(documents)
        for name, is_sheet in ((_document_name(documents, manifest), False), (f"batches/{batch_id}.html", True)):
            size = target.document_size(name) if name is not None else None
            if size is None:
                continue
            if not dry_run:
                size = _removing(f"{documents}/{name}", errors, partial(target.remove_document, name))
            if size < 0:
                continue
            sheets, manifests = (sheets + 1, manifests) if is_sheet else (sheets, manifests + 1)
            freed += size
    return (manifests, sheets), freed


def _documents_of(out_dir: str, manifest: str) -> str:
    """Where a batch's documents live: above its manifest's ``batches/`` (OUT by default)."""
    try:
        return documents_of(manifest)
    except ValueError:
        return out_dir


def _document_name(out_dir: str, path: str) -> str | None:
    """The name in OUT of a batch document, None for one written elsewhere (not gc's to remove)."""
    try:
        return name_in(out_dir, path)
    except ValueError:
        return None
