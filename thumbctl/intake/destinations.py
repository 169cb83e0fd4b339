"""Where a submission writes: OUT and STORE chosen and checked (OUT writable, STORE apart from OUT,
the source folder and earlier outputs), the store bound to the ledger, and nothing written through
a symlink inside a local OUT or STORE (a bucket has no links): an item that would be fails at once
(``path_outside_root``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache, partial
from pathlib import Path

from ..config.options import SubmitOptions
from ..core.errors import UsageError
from ..core.models import ItemState, NewBatch, NewItem
from ..ledger import Ledger
from ..publishing.stores import Location, bind_store, check_store_apart, chosen_store, location_text
from ..publishing.targets import resolve_out_dir_or_fail
from ..storage.fsafe import symlinked_folder
from ..storage.locations import is_s3, store_location_of
from ..storage.outputs import LocalOutputTarget


@dataclass(frozen=True)
class Destinations:
    """OUT and STORE of a submission, as given and as the ledger records them."""

    out_dir: Location
    #: OUT as recorded: a folder's absolute path or ``s3://bucket/prefix``.
    out: str
    #: STORE as recorded.
    store: str
    #: Every folder thumbctl writes to (OUT, STORE and the OUTs of earlier batches): never sources.
    outputs: frozenset[str]
    #: The store the ledger used before this submission (None before it used one).
    previous_store: str | None
    #: Where the batch documents go (``--documents``, as recorded); "": OUT.
    documents: str = ""

    @property
    def store_moved(self) -> tuple[str, str] | None:
        """(the store the ledger used before, the one it uses now) when this submit gave it another."""
        if self.previous_store and self.previous_store != self.store:
            return self.previous_store, self.store
        return None


def bound_destinations(source: Path | str, options: SubmitOptions, ledger: Ledger) -> Destinations:
    """OUT and STORE checked, and STORE made the ledger's store."""
    out_dir = resolve_out_dir_or_fail(options.out_dir)
    store_dir = chosen_store(ledger, options.store_dir)
    earlier_outs = [folder if is_s3(folder) else Path(folder) for folder, _ in ledger.upkeep.output_folders()]
    folder = Path(os.path.realpath(source)) if isinstance(source, Path) and source.is_dir() else None
    check_store_apart(store_dir, out_dir, folder, earlier_outs)
    previous_store = ledger.upkeep.recorded_store()
    store_at = location_text(store_dir)
    bind_store(ledger, store_dir)
    out = location_text(out_dir)
    if not is_s3(out) and ledger.backend != "sqlite":
        os.makedirs(out, exist_ok=True)  # so each worker host can tell whether it sees this folder
    documents = _documents(options.documents_dir, out, store_at)
    outputs = frozenset(
        [out, store_at, *([documents] if documents else []), *(f for f, _ in ledger.upkeep.output_folders())]
    )
    return Destinations(out_dir, out, store_at, outputs, previous_store, documents)


def _documents(given: Path | str | None, out: str, store: str) -> str:
    """``--documents`` checked as OUT is (a writable folder, a reachable bucket prefix) and apart
    from OUT and the store: "" when not given or OUT itself."""
    if given is None:
        return ""
    documents = location_text(resolve_out_dir_or_fail(given))
    if documents == out:
        return ""
    for other, what in ((out, "OUT"), (store, "the store")):
        head, inner = other.rstrip("/") + "/", documents.rstrip("/") + "/"
        if inner.startswith(head) or head.startswith(inner):
            raise UsageError(
                f"--documents {documents} must lie apart from {what} ({other}): pick another folder or prefix",
                code="bad_out_dir",
            )
    return documents


def refusing_symlinks(batch: NewBatch, store: str) -> NewBatch:
    """``batch`` with each queued item failed whose files would be written through a symlink in a
    local OUT or ``store``."""
    if is_s3(batch.out_dir) and is_s3(store):
        return batch
    return replace(batch, items=tuple(_refused_through_symlinks(list(batch.items), batch.out_dir, store)))


def _refused_through_symlinks(items: list[NewItem], out: str, store: str) -> list[NewItem]:
    layout = None if is_s3(out) else LocalOutputTarget(out)
    symlink_in = cache(partial(symlinked_folder, out))
    symlink_in_store = cache(partial(symlinked_folder, store))
    return [_refused_if_through_symlink(item, layout, symlink_in, symlink_in_store) for item in items]


def _refused_if_through_symlink(
    item: NewItem,
    layout: LocalOutputTarget | None,
    symlink_in: Callable[[str], str | None],
    symlink_in_store: Callable[[str], str | None],
) -> NewItem:
    """A queued item whose temp file, object or thumbnail would be written through a symlink
    inside OUT or STORE fails at once (``path_outside_root``); nothing is written through it."""
    if item.state != ItemState.QUEUED or item.object_path is None or item.friendly_path is None:
        return item
    checks = []
    if layout is not None:
        checks += [(symlink_in, layout.tmp_dir), (symlink_in, os.path.dirname(item.friendly_path))]
    if not is_s3(item.object_path):
        store = store_location_of(item.object_path)
        checks += [(symlink_in_store, f"{store}/.tmp"), (symlink_in_store, os.path.dirname(item.object_path))]
    link = next((found for check, folder in checks if (found := check(folder))), None)
    if link is None:
        return item
    detail = f"{link} is a symlink, which could lead out of the output folder; nothing is written through it"
    return replace(item, state=ItemState.FAILED, error_code="path_outside_root", error_detail=detail)
