"""Where a batch writes, checked before anything is recorded: OUT (a folder or a bucket prefix)
and the objects a store holds, whichever kind the store is.

A local OUT must be writable (a temp file in OUT/.tmp is written and removed) and hold no
symlinked OUT/.tmp or OUT/batches; a bucket prefix gets a probe document written and removed,
so a bucket that is missing, refuses access or cannot be reached gets its coded error
(``bucket_missing``, ``bucket_forbidden``, ``storage_unreachable``) before a batch is recorded.
The local checks have no bucket counterpart: a bucket has no folders or links, and each write
is one request.
"""

from __future__ import annotations

import os

from ..core.errors import UsageError
from ..sources.entries import check_utf8_path
from ..storage.fsafe import is_plain_file, symlinked_folder
from ..storage.locations import is_s3, object_name_of, object_store_of, output_target_at
from ..storage.objects import OBJECT_READ_LIMIT
from ..storage.outputs import LocalOutputTarget, OutputTarget, probe_writable, resolve_out_dir
from .stores import Location, location_text


def object_present(object_path: str) -> bool:
    """Whether the object at ``object_path`` is there (a regular file, or a key of a bucket)."""
    if not is_s3(object_path):
        return is_plain_file(object_path)
    return object_store_of(object_path).stat(object_name_of(object_path)) is not None


def object_bytes(object_path: str) -> bytes:
    """An object's bytes (bounded), from a folder or a bucket."""
    return object_store_of(object_path).read(object_name_of(object_path), OBJECT_READ_LIMIT)


def resolve_out_dir_or_fail(out: Location) -> Location:
    """OUT checked before anything is recorded: a folder that can be written (see
    :func:`probe_writable`), or a bucket prefix that can be reached and written."""
    if isinstance(out, str) and is_s3(out):
        url = location_text(out)
        probe_bucket(output_target_at(url))
        return url
    try:
        resolved = resolve_out_dir(out)
    except NotADirectoryError as exc:
        raise UsageError(str(exc), code="bad_out_dir") from exc
    check_utf8_path(resolved, "--out", "bad_out_dir")
    layout = LocalOutputTarget(str(resolved))
    _refuse_symlinked_batch_folders(layout)
    try:
        probe_writable(layout)
    except OSError as exc:
        raise UsageError(f"--out {resolved} is not writable: {exc.strerror or exc}", code="bad_out_dir") from exc
    return resolved


def probe_bucket(target: OutputTarget) -> None:
    """List, then write and remove a probe document, so a bucket that is missing, refuses access or cannot be
    reached is reported (its coded error) before any batch is recorded. The local checks of OUT
    (symlinked folders, temp files in OUT/.tmp) have no bucket counterpart: a bucket has no
    folders or links, and a write is one conditional request."""
    name = f"batches/probe-{os.urandom(8).hex()}.json"
    next(iter(target.names(name)), None)  # a read first: some servers make a missing bucket on a write
    target.write_document(name, b"{}\n")
    target.remove_document(name)


def _refuse_symlinked_batch_folders(layout: LocalOutputTarget) -> None:
    """OUT/.tmp and OUT/batches hold every batch's own files: a symlink there refuses the
    whole submission (nothing recorded), as the batch's manifest could never be written."""
    for folder in (layout.tmp_dir, layout.batches_dir):
        link = symlinked_folder(layout.root, folder)
        if link is not None:
            raise UsageError(
                f"{link} is a symlink, which could lead out of the output folder; nothing is written through it",
                code="bad_out_dir",
            )
