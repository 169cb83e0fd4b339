"""Intake: turn a folder or manifest into a normalized, digested request and admit it.

The steps, in order: find the sources (scan or manifest), check ids, ratios
and limits (whole-batch rejections, exit 65), resolve and inspect every
source (content digest and header probe, through the stat cache), then
build one item per (source, ratio) and digest the canonical request.
A source that fails inspection becomes failed items; it never shrinks the
total.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache, partial
from pathlib import Path
from typing import BinaryIO, TypeVar

from ..config.options import SubmitOptions
from ..core.admission import retry_unavailable
from ..core.errors import ItemFailure, UnavailableError
from ..core.faults import Faults
from ..core.keys import derivative_key, digest_json
from ..core.models import BatchView, CachedSource, ItemState, NewBatch, NewItem
from ..core.naming import default_template
from ..core.profile import Limits, Profile, Ratio, UrlRules
from ..imaging import SNIFF_BYTES, probe
from ..ledger import Ledger
from ..publishing.publisher import Publisher
from ..publishing.stores import bind_store, check_store_apart, chosen_store, location_text
from ..publishing.targets import object_bytes, object_present, resolve_out_dir_or_fail
from ..review.markup import manifest_present, write_batch_manifest
from ..sources.downloads import is_url
from ..sources.downloads.remote import inspect_url
from ..sources.entries import SourceEntry, check_limits, collect_entries
from ..sources.itemids import friendly_stems
from ..sources.scan import ScanError, SourceFolder, SourceRoot, check_size, digest_bounded
from ..storage.fsafe import symlinked_folder
from ..storage.locations import is_s3, object_path_in, store_location_of
from ..storage.outputs import LocalOutputTarget
from .focus import FocusPlan, plan_focus
from .lanes import LeftOut, name_items, without_outputs
from .rerender import EncoderChange, encoder_changes
from .reuse import with_reused_outputs

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Inspection:
    """The outcome of resolving and reading one source."""

    source: str
    info: CachedSource | None = None
    failure: ItemFailure | None = None


@dataclass
class IntakeReport:
    """What intake saw, for the user: counts that are not part of the batch."""

    sources: int = 0
    ignored_files: int = 0
    failed_sources: int = 0
    read: int = 0
    cached: int = 0
    #: Friendly names the submit could not point at their objects, one line each.
    unlinked_names: list[str] = field(default_factory=list)
    #: Output folders inside the source folder that the scan left out (relative paths).
    skipped_output_folders: list[str] = field(default_factory=list)
    #: Files thumbctl wrote (thumbnails it published, batch documents) the scan found, never sources.
    left_out: LeftOut = field(default_factory=LeftOut)
    #: Folders of the source folder the scan could not read: its view of them is incomplete.
    scan_errors: list[ScanError] = field(default_factory=list)
    #: Sub-folders that are symlinks, never followed, so not scanned (relative paths).
    symlinked_folders: list[str] = field(default_factory=list)
    #: On a replay: succeeded items whose object was gone, queued again to be rendered.
    restored_outputs: int = 0
    #: On a replay: succeeded items whose friendly name a newer batch's success took since.
    names_taken_by_newer: int = 0
    #: (the store the ledger used before, the one it uses now) when this submit gave it another (``--store``).
    store_moved: tuple[str, str] | None = None
    #: The key was derived from the request (no ``--key``): a cancelled batch of it is resumed, not replayed.
    derived_key: bool = False
    #: The request came from the ledger (``retry`` of a cancelled batch): no source was read.
    from_ledger: bool = False
    #: Formats whose published outputs render again only because their encoder settings changed.
    encoder_changes: list[EncoderChange] = field(default_factory=list)


@dataclass(frozen=True)
class PreparedSubmission:
    batch: NewBatch
    report: IntakeReport
    profile: Profile


def prepare_submission(source: Path | str, options: SubmitOptions, ledger: Ledger) -> PreparedSubmission:
    """Validate ``source`` and build the batch to accept (nothing recorded yet).

    Raises :class:`UsageError` for a source that is neither a folder nor a
    manifest, and :class:`RejectedError` for whole-batch rejections.
    """
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
    outputs = frozenset([out, store_at, *(folder for folder, _ in ledger.upkeep.output_folders())])
    root, entries, scan = collect_entries(source, options, out_dir, outputs)
    entries, left_out = without_outputs(str(root), entries, ledger, outputs - {store_at})
    report = IntakeReport(
        sources=len(entries),
        left_out=left_out,
        ignored_files=scan.ignored,
        skipped_output_folders=scan.skipped,
        scan_errors=scan.errors,
        symlinked_folders=scan.symlinked,
        derived_key=options.key is None,
    )
    if previous_store and previous_store != store_at:
        report.store_moved = (previous_store, store_at)
    check_limits(entries, options.limits, options.profile)
    inspections = _inspect_all(root, entries, options, ledger, report)
    focus = _focus_plan(entries, inspections, ledger)
    template = options.name_template or default_template(len(options.profile.sizes))
    items = _build_items(entries, inspections, options.profile, out, store_at, template, focus)
    request = _canonical_request(root, out_dir, options, entries, inspections, focus)
    request_digest = digest_json(request)
    batch = NewBatch(
        idempotency_key=options.key or request_digest,
        request_digest=request_digest,
        source_root=str(root),
        out_dir=out,
        profile=request["profile"],
        items=tuple(items),
        max_attempts=options.max_attempts,
        deadline_seconds=options.deadline_seconds,
        limits=options.recorded_limits(urls=any(is_url(entry.given) for entry in entries)),
        manifest_folder=f"{out}/batches",
        focus_changes=focus.changes,
    )
    return PreparedSubmission(batch, report, options.profile)


def submit(
    ledger: Ledger,
    prepared: PreparedSubmission,
    limits: Limits,
    *,
    retry_admission: bool = False,
    max_wait: float = 600.0,
    should_stop: Callable[[], bool] = lambda: False,
    on_retry: Callable[[UnavailableError, float], None] | None = None,
) -> BatchView:
    """Accept a prepared submission (or replay the batch its key names).

    A derived key (no ``--key``) that names a batch whose cancel was requested resumes it: the
    request is recorded again as the next batch of the key's chain, reusing every finished
    output (``accept_batch(resume=True)``).

    With ``retry_admission``, a refusal for saturation or a busy ledger is
    retried with capped exponential backoff and full jitter, keeping the
    same key, until ``max_wait`` seconds pass or ``should_stop()`` is true.
    """

    new = prepared.batch
    overwrite = bool(new.profile.get("overwrite", False))
    keyed = ledger.intake.batch_for_key(new.idempotency_key)
    resume = prepared.report.derived_key and keyed is not None and keyed.cancelled
    if keyed is None or resume:  # a replay does no image work at all
        name_usable = partial(_name_usable, Publisher.at(ledger, new.out_dir, overwrite))
        new = with_reused_outputs(new, prepared.profile, name_usable)
        if not prepared.report.from_ledger:
            prepared.report.encoder_changes = encoder_changes(ledger, new, prepared.profile)
    if resume:
        Faults().hit("before_resume")

    def attempt() -> BatchView:
        return ledger.intake.accept_batch(new, limits, still_present=object_present, resume=resume)

    if retry_admission:
        batch = retry_unavailable(attempt, should_stop=should_stop, max_wait=max_wait, on_retry=on_retry)
    else:
        batch = attempt()
    if batch.replayed:
        batch = _restore_missing_outputs(batch, ledger, prepared.report)
    prepared.report.unlinked_names = _link_owned_names(batch, ledger, prepared.report, overwrite)
    if batch.counts[ItemState.SUCCEEDED]:  # the names linked may have replaced others: counted now
        batch = replace(ledger.views.batch(batch.batch_id), replayed=batch.replayed)
    if batch.is_terminal and not (batch.replayed and manifest_present(batch)):
        write_batch_manifest(batch, ledger.views.items(batch.batch_id))
    return batch


def _name_usable(publisher: Publisher, item: NewItem) -> bool:
    """Whether publishing ``item`` at its name would not fail ``name_taken`` (as things stand now)."""
    if item.friendly_path is None or item.object_path is None:
        return False
    return publisher.name_usable(item.object_path, item.friendly_path, partial(object_bytes, item.object_path))


def _restore_missing_outputs(batch: BatchView, ledger: Ledger, report: IntakeReport) -> BatchView:
    """A replay of a batch whose objects are gone (``rm -rf OUT``) queues those items again,
    so the run renders them; the replayed batch is returned as it now stands."""
    report.restored_outputs = ledger.intake.requeue_missing_objects(batch.batch_id, object_present)
    return replace(ledger.views.batch(batch.batch_id), replayed=True) if report.restored_outputs else batch


def _link_owned_names(batch: BatchView, ledger: Ledger, report: IntakeReport, overwrite: bool) -> list[str]:
    """Point every friendly name the batch owns (it holds the newest success to claim it)
    at the batch's object, as a render would; returns one line per name that failed.

    At acceptance this links the items reused from earlier runs, replacing whatever sat
    at their names; on a replay it finishes what an interrupted submit left undone, and
    counts the names a later batch took (``report.names_taken_by_newer``). A name a later
    batch took is left to that batch. Names that fail stay for ``reconcile``, whose repair
    restores a missing one. A file thumbctl did not publish at a name is left as it is (unless
    ``overwrite``) and reported as one of those lines.
    """
    if not batch.counts[ItemState.SUCCEEDED]:
        return []
    publisher = Publisher.at(ledger, batch.out_dir, overwrite)
    target = publisher.target
    owned = ledger.views.owned_friendly_names(batch.batch_id)
    if batch.replayed:
        report.names_taken_by_newer = batch.counts[ItemState.SUCCEEDED] - len(owned)
    failures = []
    for object_path, friendly_path in owned:
        try:
            publisher.republish(batch.batch_id, object_path, friendly_path)
        except ItemFailure as failure:
            failures.append(failure.detail)
        except OSError as exc:
            failures.append(f"{friendly_path}: {exc.strerror or exc}")
    target.remove_empty_tmp()
    return failures


# -- inspecting sources -------------------------------------------------------


def _inspect_all(
    root: Path, entries: list[SourceEntry], options: SubmitOptions, ledger: Ledger, report: IntakeReport
) -> dict[str, Inspection]:
    source_root = SourceRoot(root)
    resolved: dict[str, str | ItemFailure] = {}
    for entry in entries:
        if entry.failure is not None:
            resolved[entry.item_id] = entry.failure
            continue
        try:
            known = entry.known_real or is_url(entry.given)
            resolved[entry.item_id] = entry.given if known else str(source_root.resolve(entry.given))
        except ItemFailure as failure:
            resolved[entry.item_id] = failure
    paths = [p for p in resolved.values() if isinstance(p, str)]
    cache = ledger.intake.cached_sources(paths)
    inspections = {}
    fresh: list[CachedSource] = []
    with SourceFolder(source_root.real) as folder:
        inspect = partial(_inspect_one, folder, cache, options.limits, options.url_rules)
        results = _in_threads(inspect, list(resolved.values()))
        for item_id, (inspection, from_cache) in zip(resolved, results, strict=True):
            inspections[item_id] = inspection
            if inspection.info is not None:
                report.cached += from_cache
                report.read += not from_cache
                if not from_cache:
                    fresh.append(inspection.info)
    ledger.intake.remember_sources(fresh)
    report.failed_sources = sum(1 for i in inspections.values() if i.failure)
    return inspections


#: Sources inspected per thread at least before a second thread is worth starting.
_SOURCES_PER_THREAD = 8


def _in_threads(inspect: Callable[[T], R], targets: list[T]) -> list[R]:
    """``inspect`` of every target, in order: in two threads when this process may use two CPUs
    and there are enough sources (reading and hashing release the GIL, so a second thread shortens
    the intake every worker waits for), and in up to 8 for URL sources, which wait on the network."""
    remote = sum(1 for target in targets if isinstance(target, str) and is_url(target))
    threads = max(min(2, len(os.sched_getaffinity(0)), len(targets) // _SOURCES_PER_THREAD), min(8, remote))
    if threads < 2:
        return [inspect(target) for target in targets]
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="intake")
    try:
        return list(pool.map(inspect, targets))
    finally:  # on Ctrl-C, no source not yet begun is read
        pool.shutdown(wait=True, cancel_futures=True)


def _inspect_one(
    folder: SourceFolder,
    cache: dict[str, CachedSource],
    limits: Limits,
    rules: UrlRules,
    target: str | ItemFailure,
) -> tuple[Inspection, bool]:
    """The inspection of one resolved source, and whether it came from the stat cache."""
    if isinstance(target, ItemFailure):
        return Inspection(source="", failure=target), False
    try:
        inspect = partial(inspect_url, rules=rules) if is_url(target) else partial(inspect_source, folder)
        info, from_cache = inspect(target, cache.get(target), limits)
    except ItemFailure as failure:
        return Inspection(source=target, failure=failure), False
    return Inspection(source=target, info=info), from_cache


def inspect_source(
    folder: SourceFolder, path: str, cached: CachedSource | None, limits: Limits
) -> tuple[CachedSource, bool]:
    """Digest and probe one resolved source, reusing ``cached`` if its stat still matches.

    The source is opened below the source folder the way a worker opens it (no symlink
    followed, a regular file only, see :func:`~thumbctl.sources.scan.open_source`) and read no
    further than the byte limit. Returns (what the source holds, whether it came from the cache).
    """
    with folder.open(path) as stream:
        st = os.fstat(stream.fileno())
        check_size(st.st_size, limits.max_bytes, path)
        if cached and cached.matches(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            _check_pixels(cached, limits)
            return cached, True
        return _read_source(path, stream, st, limits), False


def _read_source(path: str, stream: BinaryIO, st: os.stat_result, limits: Limits) -> CachedSource:
    try:
        head = stream.read(SNIFF_BYTES)
        stream.seek(0)
        digest = digest_bounded(stream, limits.max_bytes, path)
        stream.seek(0)
        info = probe(stream, head, limits.max_pixels)
    except OSError as exc:
        raise ItemFailure("io_error", f"cannot read {path}: {exc.strerror or exc}") from exc
    return CachedSource(
        path,
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        digest,
        info.format,
        info.width,
        info.height,
        info.orientation,
    )


def _check_pixels(info: CachedSource, limits: Limits) -> None:
    if info.width * info.height > limits.max_pixels:
        raise ItemFailure(
            "too_many_pixels",
            f"{info.width}x{info.height} is over the limit of {limits.max_pixels / 1e6:g} MP",
        )


# -- building the batch ---------------------------------------------------------


def _focus_plan(entries: list[SourceEntry], inspections: dict[str, Inspection], ledger: Ledger) -> FocusPlan:
    """The crop fixes remembered for the sources' contents, with the manifest's own changes."""
    digests = {entry.item_id: _digest(inspections[entry.item_id]) for entry in entries}
    remembered = ledger.intake.focus_points([d for d in digests.values() if d])
    return plan_focus(((entry, digests[entry.item_id]) for entry in entries), remembered)


def _digest(inspection: Inspection) -> str | None:
    return inspection.info.digest if inspection.info else None


def _build_items(
    entries: list[SourceEntry],
    inspections: dict[str, Inspection],
    profile: Profile,
    out: str,
    store: str,
    template: str,
    focus: FocusPlan,
) -> list[NewItem]:
    stems = friendly_stems([e.item_id for e in entries])
    one_profile = _variant_profiles(profile)
    items = [
        _new_item(entry, Variant(ratio, size, fmt), inspections[entry.item_id], profile, one_profile, store, focus)
        for entry in sorted(entries, key=lambda e: e.item_id)
        for ratio in entry.ratios
        for size in profile.sizes
        for fmt in profile.formats
    ]
    items = name_items(items, stems, profile, out, template, one_profile)
    if is_s3(out) and is_s3(store):
        return items
    return _refused_through_symlinks(items, out, store)


def _variant_profiles(profile: Profile) -> Callable[[int, str, str], Profile]:
    """The profile of one (size, format, fit), made once per batch rather than once per item: a
    profile is checked when it is made, and its encoder settings computed on first use."""

    @cache
    def one(size: int, fmt: str, fit: str) -> Profile:
        return replace(profile.variant(size, fmt), fit=fit)

    return one


def _refused_through_symlinks(items: list[NewItem], out: str, store: str) -> list[NewItem]:
    """The local part of intake's checks: nothing is written through a symlink in a local OUT or
    STORE (a bucket has no links)."""
    layout = None if is_s3(out) else LocalOutputTarget(out)
    symlink_in = cache(partial(symlinked_folder, out))
    symlink_in_store = cache(partial(symlinked_folder, store))
    return [_refused_if_through_symlink(item, layout, symlink_in, symlink_in_store) for item in items]


@dataclass(frozen=True)
class Variant:
    """One derivative of a source: its ratio, the size asked for and the format; ``named_size`` is
    the size the friendly name carries (set when the batch asks for several sizes)."""

    ratio: Ratio
    size: int
    format: str
    named_size: int | None = None


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


def _new_item(
    entry: SourceEntry,
    variant: Variant,
    inspection: Inspection,
    profile: Profile,
    one_profile: Callable[[int, str, str], Profile],
    store: str,
    focus_plan: FocusPlan,
) -> NewItem:
    focus = focus_plan.focus_of(entry, _digest(inspection), variant.ratio)
    fit = entry.fit or profile.fit
    common = {
        "item_id": entry.item_id,
        "ratio": str(variant.ratio),
        "size": variant.size,
        "format": variant.format,
        "focus": focus,
        "fit": fit,
        "alt": entry.alt,
    }
    if inspection.failure is not None or inspection.info is None:
        failure = inspection.failure
        return NewItem(
            **common,
            source=inspection.source or entry.given,
            state=ItemState.FAILED,
            error_code=failure.code if failure else "io_error",
            error_detail=failure.detail if failure else None,
        )
    info = inspection.info
    one = one_profile(variant.size, variant.format, fit)
    key = derivative_key(info.digest, variant.ratio, one, focus)
    return NewItem(
        **common,
        source=inspection.source,
        state=ItemState.QUEUED,
        source_digest=info.digest,
        source_format=info.format,
        source_width=info.width,
        source_height=info.height,
        derivative_key=key,
        object_path=object_path_in(store, key, one.extension),
    )


def _canonical_request(
    root: Path,
    out_dir: Path,
    options: SubmitOptions,
    entries: list[SourceEntry],
    inspections: dict[str, Inspection],
    focus: FocusPlan,
) -> dict[str, object]:
    """The normalized request: what was asked, independent of how it was written. The crop fixes an
    item renders with from memory are part of it (only when there are some, so the request of a
    submission without any stays what it always was): a submit after a fix is a new request."""
    items = []
    for entry in sorted(entries, key=lambda e: e.item_id):
        inspection = inspections[entry.item_id]
        item: dict[str, object] = {
            "id": entry.item_id,
            "source": inspection.source or entry.given,
            "digest": _digest(inspection),
            "error": inspection.failure.code if inspection.failure else None,
            "ratios": [str(r) for r in entry.ratios],
            "focus": list(entry.focus) if entry.focus else None,
        } | ({"fit": entry.fit} if entry.fit else {})
        if remembered := focus.remembered_for(entry, _digest(inspection)):
            item["remembered_focus"] = remembered
        if entry.clear_focus:
            item["clear_focus"] = True
        if entry.alt:  # only when given: the request of an item without one stays what it was
            item["alt"] = entry.alt
        items.append(item)
    return {
        "root": str(root),
        "out": str(out_dir),
        "profile": {"ratios": [str(r) for r in options.profile.ratios], **options.profile.encoder_settings}
        | _naming_settings(options),
        "items": items,
    }


def _naming_settings(options: SubmitOptions) -> dict[str, object]:
    """How the batch names its thumbnails, in its profile only when it differs from the default, so
    the request (and the key derived from it) of a submission without ``--name``/``--overwrite``
    stays what it always was. The worker reads ``overwrite`` from the batch's profile."""
    settings: dict[str, object] = {}
    if options.name_template is not None and options.name_template != default_template(len(options.profile.sizes)):
        settings["name"] = options.name_template
    if options.overwrite:
        settings["overwrite"] = True
    return settings
