"""Intake: turn a folder or manifest into a normalized, digested request and admit it.

The steps, in order: find the sources (scan or manifest), check ids, ratios
and limits (whole-batch rejections, exit 65), resolve and inspect every
source (content digest and header probe, through the stat cache), then
build one item per (source, ratio) and digest the canonical request.
A source that fails inspection becomes failed items; it never shrinks the
total.
"""

from __future__ import annotations

from pathlib import Path

from ..config.options import SubmitOptions
from ..config.s3location import is_s3
from ..ledger import Ledger
from ..sources.entries import SourceEntry, check_limits, collect_entries
from .destinations import bound_destinations, refusing_symlinks
from .fixplan import PhotoSeen, file_fixes, local_phash, with_ledger_only
from .focus import FocusPlan, plan_focus
from .inspection import Inspection, inspect_all
from .lanes import without_outputs
from .prepared import IntakeReport, PreparedSubmission
from .request import build_batch


def prepare_submission(source: Path | str, options: SubmitOptions, ledger: Ledger) -> PreparedSubmission:
    """Validate ``source`` and build the batch to accept (nothing recorded yet).

    Raises :class:`UsageError` for a source that is neither a folder nor a
    manifest, and :class:`RejectedError` for whole-batch rejections.
    """
    destinations = bound_destinations(source, options, ledger)
    root, entries, scan = collect_entries(source, options, destinations.out_dir, destinations.outputs)
    entries, left_out = without_outputs(str(root), entries, ledger, destinations.outputs - {destinations.store})
    report = IntakeReport(
        sources=len(entries),
        left_out=left_out,
        ignored_files=scan.ignored,
        skipped_output_folders=scan.skipped,
        scan_errors=scan.errors,
        symlinked_folders=scan.symlinked,
        derived_key=options.key is None,
        store_moved=destinations.store_moved,
    )
    check_limits(entries, options.limits, options.profile)
    inspections = inspect_all(root, entries, options.limits, options.url_rules, ledger)
    report.read, report.cached, report.failed_sources = inspections.read, inspections.cached, inspections.failed
    focus = _focus_plan(str(root), entries, inspections.by_item, ledger, options)
    report.fix_file = focus.file.outcome
    batch = build_batch(
        root,
        destinations.out_dir,
        destinations.out,
        destinations.store,
        destinations.documents,
        options,
        entries,
        inspections.by_item,
        focus,
    )
    return PreparedSubmission(refusing_symlinks(batch, destinations.store), report, options.profile)


def _focus_plan(
    root: str, entries: list[SourceEntry], inspections: dict[str, Inspection], ledger: Ledger, options: SubmitOptions
) -> FocusPlan:
    """The crop fixes remembered for the sources' contents, what the root's fix file says, and the
    manifest's own changes."""
    digests = {entry.item_id: inspections[entry.item_id].digest for entry in entries}
    remembered = ledger.intake.focus_points([d for d in digests.values() if d])
    photos = [PhotoSeen(i.source, i.info) for i in inspections.values() if i.info is not None]
    phash_of = local_phash(root, options.limits) if not is_s3(root) else lambda _photo: None
    file = file_fixes(root, photos, ledger.intake.fix_file_state(root), phash_of)
    file = with_ledger_only(file, root, photos, {p.source_digest for p in remembered if p.focus is not None})
    return plan_focus(((entry, digests[entry.item_id]) for entry in entries), remembered, file)
