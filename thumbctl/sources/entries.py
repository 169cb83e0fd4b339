"""Entries: the sources a submission names, found by a folder scan or read from a manifest.

Item ids are checked here, and the whole-batch limits (duplicate ids, ratios, items)
that reject a submission before any source is opened (exit 65).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..config.options import SubmitOptions
from ..config.s3location import S3Location, parse_s3
from ..core.errors import ItemFailure, RejectedError, UsageError
from ..core.fixes import FIX_FILE
from ..core.profile import Limits, Profile, Ratio
from ..core.redact import has_userinfo, without_userinfo
from ..storage.outputs import looks_like_output_folder
from ..storage.ownership import is_store_folder
from .downloads import is_url, url_item_id
from .downloads.fetch import shown_url
from .downloads.objects import object_names
from .itemids import UnsafeItemId, check_item_id, escaped_name, unsafe_name_id
from .manifest import ManifestError, is_manifest_path, read_manifest
from .scan import Candidate, ScanResult, scan_directory


@dataclass(frozen=True)
class SourceEntry:
    """One source to admit: its id, the path as named, and per-item overrides."""

    item_id: str
    given: str
    ratios: tuple[Ratio, ...]
    focus: tuple[float, float] | None = None
    #: The manifest's ``fit`` for this source (None: the batch's ``--fit``).
    fit: str | None = None
    #: The manifest's ``"focus": null``: the crop fix remembered for the item's ratios is forgotten.
    clear_focus: bool = False
    #: The manifest's ``alt`` text for the item's markup (empty when not given).
    alt: str = ""
    #: The scan already knows ``given`` is a real path inside the root.
    known_real: bool = False
    #: Known before any file is touched: the source's items fail with it.
    failure: ItemFailure | None = None


def check_utf8_path(path: Path, what: str, code: str) -> None:
    """The ledger records paths as UTF-8 text: a folder whose path is not cannot be used."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError as exc:
        shown = escaped_name(str(path))
        raise UsageError(f"{what} {shown} is not valid UTF-8 (written with %XX escapes)", code=code) from exc


# -- finding entries ----------------------------------------------------------


def collect_entries(
    source: Path | str, options: SubmitOptions, out_dir: Path, outputs: frozenset[str]
) -> tuple[Path | str, list[SourceEntry], ScanResult]:
    """The root and entries of a folder, manifest or ``s3://`` prefix, and what the scan saw besides
    (files ignored, the output folders (``outputs``, or anything shaped like one) it left out, the
    folders it could not read or did not follow)."""
    if isinstance(source, str):
        return _entries_from_prefix(parse_s3(source), options, outputs)
    if source.is_dir():
        root = Path(os.path.realpath(source))
        check_utf8_path(root, "source folder", "bad_source")
        if out_dir == root:
            raise UsageError("--out must not be the source folder itself; pick a separate folder", code="bad_out_dir")
        return root, *_entries_from_scan(root, options, outputs)
    if source.is_file() and is_manifest_path(source):
        root = Path(os.path.realpath(source.parent))
        check_utf8_path(root, "manifest folder", "bad_source")
        return root, _entries_from_manifest(source, root, options.profile), ScanResult()
    if not source.exists():
        raise UsageError(f"source {source} does not exist", code="source_not_found")
    raise UsageError(
        f"source {source} is neither a folder nor a manifest (.json, .jsonl, .csv)",
        code="bad_source",
    )


def _entries_from_scan(
    root: Path, options: SubmitOptions, outputs: frozenset[str]
) -> tuple[list[SourceEntry], ScanResult]:
    def skip(path: str) -> bool:
        return path in outputs or looks_like_output_folder(path) or is_store_folder(path)

    scan = scan_directory(root, options.rules, skip=skip)
    ratios = options.profile.ratios
    entries = []
    for candidate in scan.candidates:
        if candidate.unsafe is not None:
            entries.append(_unsafe_name_entry(root, candidate, ratios))
        else:
            entries.append(SourceEntry(candidate.item_id, candidate.path, ratios, known_real=not candidate.is_link))
    if not entries:
        others = "1 other file" if scan.ignored == 1 else f"{scan.ignored} other files"
        unread = "".join(f"; could not read {e.path}: {e.detail}" for e in scan.errors)
        raise RejectedError(f"no image files found in {root} ({others} ignored{unread})", code="empty_batch")
    return entries, scan


def _entries_from_prefix(
    location: S3Location, options: SubmitOptions, outputs: frozenset[str]
) -> tuple[str, list[SourceEntry], ScanResult]:
    """The entries of the objects under an ``s3://`` prefix, chosen as a folder scan chooses files
    (hidden names and output locations left out, image extensions or ``--include``, ``--exclude``)."""
    entries, ignored, skipped = [], 0, set()
    for name in object_names(location):
        url = location.join(name)
        output = next((o for o in outputs if url.startswith(o.rstrip("/") + "/")), None)
        if output is not None:
            skipped.add(output)
        elif name == FIX_FILE:  # the prefix's fix file, thumbctl's own
            continue
        elif any(part.startswith(".") for part in name.split("/")) or not options.rules.is_candidate(
            name, name.rsplit("/", 1)[-1]
        ):
            ignored += 1
        else:
            entries.append(_object_entry(name, url, options.profile.ratios))
    if not entries:
        others = "1 other object" if ignored == 1 else f"{ignored} other objects"
        raise RejectedError(f"no images found under {location.url} ({others} ignored)", code="empty_batch")
    return location.url, entries, ScanResult(ignored=ignored, skipped=sorted(skipped))


def _object_entry(name: str, url: str, ratios: tuple[Ratio, ...]) -> SourceEntry:
    try:
        return SourceEntry(check_item_id(name), url, ratios)
    except UnsafeItemId as exc:
        detail = f"the key {escaped_name(name)} {exc.reason}: no item id can hold it"
        return SourceEntry(unsafe_name_id(name), url, ratios, failure=ItemFailure("unsafe_name", detail))


def _unsafe_name_entry(root: Path, candidate: Candidate, ratios: tuple[Ratio, ...]) -> SourceEntry:
    """The entry of a file whose name cannot be an item id: it is never opened.

    Its source is the file's true path whenever that is text (a newline, a tab or a
    backslash in the name), so JSON shows ``new\\nline.jpg`` for that file and
    ``new%0Aline.jpg`` only for a file really named so. A path whose bytes are not UTF-8
    cannot be held by the ledger's text or by JSON: its source keeps the ``%XX`` escapes of
    its id, as its detail says, and only its ``unsafe_name`` code and ``.unsafe/`` id tell it
    from a file really named with those escapes.
    """
    rel = escaped_name(os.path.relpath(candidate.path, root))
    detail = f"the name {rel} (written with %XX escapes) {candidate.unsafe}: no item id can hold it"
    source = candidate.path if _is_text(candidate.path) else os.path.join(root, rel)
    return SourceEntry(candidate.item_id, source, ratios, failure=ItemFailure("unsafe_name", detail))


def _is_text(path: str) -> bool:
    """Whether ``path`` (undecodable bytes as surrogate escapes) is valid UTF-8 text."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _entries_from_manifest(path: Path, root: Path, profile: Profile) -> list[SourceEntry]:
    try:
        manifest = read_manifest(path)
    except ManifestError as exc:
        raise RejectedError(f"malformed manifest {path.name}: {exc}", code="malformed_manifest") from exc
    if not manifest.entries:
        raise RejectedError(f"manifest {path.name} lists no items", code="empty_batch")
    default_ratios = manifest.ratios or profile.ratios
    entries = []
    for entry in manifest.entries:
        if entry.id is not None:
            item_id = _checked_id(entry.id)
        else:
            item_id = _url_id(entry.source) if is_url(entry.source) else _default_id(entry.source, root)
        ratios = entry.ratios or default_ratios
        given, failure = _url_without_credentials(entry.source) if is_url(entry.source) else (entry.source, None)
        entries.append(
            SourceEntry(
                item_id, given, ratios, entry.focus, entry.fit, entry.clear_focus, alt=entry.alt, failure=failure
            )
        )
    return entries


def _url_without_credentials(url: str) -> tuple[str, ItemFailure | None]:
    """A URL source as it is recorded: credentials in it (``user:password@``) are never recorded, and
    its items fail ``source_forbidden_address`` without a connection."""
    if not has_userinfo(url):
        return url, None
    detail = f"{shown_url(url)}: a URL with credentials (user:password@) is not downloaded, and they are not recorded"
    return without_userinfo(url), ItemFailure("source_forbidden_address", detail)


def _default_id(source: str, root: Path) -> str:
    """The id of an item whose manifest entry names none: its source, normalised and
    relative to the root.

    A source that does not name a path inside the root (``../../etc/passwd``, an
    absolute path elsewhere) cannot be an id, so like an unsafe explicit id it rejects
    the batch (``unsafe_id``); given a safe ``id``, such an item is accepted and fails
    ``path_outside_root`` without being opened.
    """
    joined = os.path.normpath(os.path.join(root, source))
    for base in (str(root), os.path.abspath(root)):
        if joined.startswith(base.rstrip(os.sep) + os.sep):
            return _checked_id(PurePosixPath(Path(os.path.relpath(joined, base))).as_posix())
    raise RejectedError(
        f"an item without an id takes its source as id, and {source!r} is not a path inside {root}; "
        "give the item an id (ids must be safe relative paths inside --out)",
        code="unsafe_id",
    )


def _url_id(url: str) -> str:
    """The id of a URL source whose entry names none: its host and path (see :func:`url_item_id`)."""
    item_id = url_item_id(url)
    if item_id is None:
        raise RejectedError(
            f"an item without an id takes its URL's host and path as id, and {shown_url(url)!r} gives no safe one; "
            "give the item an id (ids must be safe relative paths inside --out)",
            code="unsafe_id",
        )
    return item_id


def _checked_id(item_id: str) -> str:
    try:
        return check_item_id(item_id)
    except UnsafeItemId as exc:
        raise RejectedError(f"{exc}; ids must be safe relative paths inside --out", code="unsafe_id") from exc


def check_limits(entries: list[SourceEntry], limits: Limits, profile: Profile) -> None:
    """Whole-batch rejections: duplicate ids, too many ratios, too many items (derivatives: every
    ratio of a source at every size in every format is one item)."""
    dupes = [item_id for item_id, n in Counter(e.item_id for e in entries).items() if n > 1]
    if dupes:
        shown = ", ".join(repr(d) for d in sorted(dupes)[:5])
        raise RejectedError(f"duplicate item ids: {shown}", code="duplicate_id")
    for entry in entries:
        if len(entry.ratios) > limits.max_ratios:
            raise RejectedError(
                f"item {entry.item_id!r} asks for {len(entry.ratios)} ratios; the limit is {limits.max_ratios}",
                code="too_many_ratios",
            )
    variants = len(profile.sizes) * len(profile.formats)
    total = sum(len(e.ratios) for e in entries) * variants
    if total > limits.max_items:
        shape = "ratios" if variants == 1 else "ratios x sizes x formats"
        raise RejectedError(
            f"{total} items ({len(entries)} sources x {shape}) is over the limit of {limits.max_items}",
            code="too_many_items",
        )
