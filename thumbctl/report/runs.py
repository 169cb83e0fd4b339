"""What a run says: a submission accepted or replayed, the end of a run, its exit line, and the
notices on the way (a store moved, names not linked, the layout migrated, admission waits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import ExitCode, Interrupted, UnavailableError
from ..core.models import BatchState, BatchView, ItemState
from .mirror import MirrorReports
from .styles import escape, page_link, plural, printable, styled

if TYPE_CHECKING:  # the commands that print these import them; reading commands stay light
    from collections.abc import Sequence

    from ..engine.pool import Supervision
    from ..intake.fixplan import FixFileOutcome
    from ..intake.prepared import IntakeReport
    from ..review.sitemanifest import SiteManifestWrite
    from ..sources.scan import ScanError
    from ..upkeep.legacy_layout import MigrationReport
    from ..upkeep.mirror import MirrorReport


def scan_errors_json(errors: Sequence[ScanError]) -> dict[str, object]:
    """``{"scan_errors": [{path, code, detail}, ...]}``: in the batch object a submit prints."""
    return {"scan_errors": [error.to_json() for error in errors]}


class RunReports(MirrorReports):
    """The reports of ``submit``, ``retry`` and ``work``."""

    #: The submission's outputs that render again because a format's encoder settings changed,
    #: kept for the JSON of the run's end (``"renders_again"``).
    renders_again: tuple[dict[str, object], ...] = ()
    #: What the source root's fix file did (``"fix_file"`` in the JSON of the submit and the run's end).
    fix_file: dict[str, object] | None = None

    def submitted(self, batch: BatchView, report: IntakeReport, *, final: bool = True) -> None:
        """``final``: nothing is rendered after this (``--detach``), so this summary is the
        command's result (stdout); else the run follows and ends with its own summary, and this
        one is a notice on the way (stderr)."""
        if report.unlinked_names:
            self.unlinked_names(report.unlinked_names)
        if report.manifest_error:
            self.manifest_errors((report.manifest_error,))
        self.scan_errors(report.scan_errors)
        if report.store_moved and not self.quiet:
            self.store_moved(*report.store_moved)
        self.replay_notes(batch, report, rendering=not final)
        self.renders_again = tuple(change.to_json() for change in report.encoder_changes)
        self.fix_file = report.fix_file.to_json() if report.fix_file else None
        if report.fix_file is not None:
            self.fix_file_warnings(report.fix_file)
        if self.json_mode:
            if batch.resumed_from and not batch.replayed and not self.quiet:
                self.diagnostics.print(self.resuming_line(batch))
            if final:
                self.emit_json(batch.to_json() | self.renders_again_json() | scan_errors_json(report.scan_errors))
            return
        if self.quiet:  # every line below is one say or note would drop
            return
        line = self.say if final else self.note
        if batch.resumed_from and not batch.replayed:
            line(self.resuming_line(batch))
        verb = "Replayed existing" if batch.replayed else "Accepted"
        sources = plural(report.sources, "source")
        line(f"{verb} batch [bold]{batch.batch_id}[/]: {plural(batch.total, 'item')} from {sources}")
        if report.ignored_files:
            why = "not image names, or excluded; see --include, --exclude"
            line(f"  {plural(report.ignored_files, 'other file')} ignored ({why})")
        if report.skipped_output_folders:
            folders = ", ".join(report.skipped_output_folders)
            line(f"  output folders left out (thumbnails are never sources): {folders}")
        if report.left_out.total:
            left_out = ((report.left_out.thumbnails, "thumbnail"), (report.left_out.documents, "batch document"))
            kinds = ", ".join(plural(count, kind) for count, kind in left_out if count)
            line(f"  left out: {kinds} thumbctl wrote (what thumbctl publishes is never a source)")
        if report.symlinked_folders:
            folders = escape(", ".join(report.symlinked_folders))
            line(f"  folders not scanned (symlinks to folders are never followed): {folders}")
        if not report.from_ledger:
            line(f"  sources read {report.read}, unchanged (stat cache) {report.cached}")
        self.counts_line(batch, line)
        self.failure_summary(batch, line)
        line(f"  outputs: {escape(batch.out_dir)}")
        reused = batch.counts[ItemState.SUCCEEDED]
        if reused and not batch.replayed:
            line(f"  {plural(reused, 'output')} already existed and {'was' if reused == 1 else 'were'} reused")
        if report.fix_file is not None and not report.fix_file.problem:
            line(self.fix_file_line(report.fix_file))
        if report.fix_file is not None and report.fix_file.ledger_only:
            only = plural(len(report.fix_file.ledger_only), "photo")
            root = report.fix_file.where.rsplit("/", 1)[0]
            export = f"thumbctl focus --export --root {escape(printable(root))}"
            line(f"  crop fixes only in the ledger: {only} ({export} writes them to the file)")
        for change in report.encoder_changes:
            why = "defaults changed" if change.defaults else "settings changed"
            again = f"{plural(change.outputs, 'output')} {'renders' if change.outputs == 1 else 'render'} again"
            line(f"  {change.format}: {again}: {change.format} {why} ({', '.join(change.changes())})")
        if final:
            self.replaced_names_line(batch)
        if batch.replayed and batch.state == BatchState.CANCELLED:
            again = (
                "run the same command again: it resumes the batch"
                if report.derived_key
                else "submit again with a new --key"
            )
            line(
                f"  [magenta]this batch was cancelled[/] at {batch.cancel_requested_at}; a replay renders nothing. "
                f"To render the rest, {again} (finished outputs are reused)."
            )

    def next_step(self, command: str, what: str) -> None:
        """The command to run next, as a line of the result (``--detach``: what renders the batch),
        the command alone at its end so it can be pasted whole."""
        self.say(f"  {what}: [bold]{escape(command)}[/]")

    def renders_again_json(self) -> dict[str, object]:
        """``{"renders_again": [...]}`` when outputs render again for changed encoder settings, and
        ``{"fix_file": {...}}`` when the source root has a fix file."""
        fixes = {"fix_file": self.fix_file} if self.fix_file else {}
        return ({"renders_again": list(self.renders_again)} if self.renders_again else {}) | fixes

    @staticmethod
    def fix_file_line(outcome: FixFileOutcome) -> str:
        """``crop fixes from …/thumbctl-focus.json: 3 photos, carried over to 1 retouched photo (a.jpg)``."""
        if not (outcome.applied or outcome.carried or outcome.cleared or outcome.stale):
            return f"  crop fixes from {escape(outcome.where)}: none apply to these photos"
        parts = [plural(outcome.applied, "photo")]
        if outcome.carried:
            retouched = plural(len(outcome.carried), "retouched photo")
            parts.append(f"carried over to {retouched} ({', '.join(outcome.carried)}; focus --export records them)")
        if outcome.cleared:
            parts.append(f"{plural(outcome.cleared, 'fix')} removed from the file cleared")
        return f"  crop fixes from {escape(printable(outcome.where))}: {escape(printable(', '.join(parts)))}"

    def fix_file_warnings(self, outcome: FixFileOutcome) -> None:
        """A fix file thumbctl did not write, and each fix not applied because the picture changed:
        warnings on stderr, never dropped silently (the JSON has them too)."""
        if outcome.problem:
            problem = escape(printable(outcome.problem))
            self.diagnostics.print(f"[yellow]warning[/] [dim]\\[focus_file_taken][/] {problem}")
        for note in outcome.stale:
            why = "another picture" if note.reason == "picture_changed" else "not compared (no hash to compare)"
            self.diagnostics.print(
                f"[yellow]warning[/] [dim]\\[focus_not_applied][/] {escape(printable(note.path))} "
                f"({', '.join(note.ratios)}): fix for the previous content not applied: {why}; "
                "set it again with [bold]thumbctl focus PHOTO --ratio R --at X,Y[/]"
            )

    @staticmethod
    def resuming_line(batch: BatchView) -> str:
        """``resuming cancelled batch b_… as b_…: 130 reused, 278 to render``."""
        reused, queued = batch.counts[ItemState.SUCCEEDED], batch.counts[ItemState.QUEUED]
        ids = f"{batch.resumed_from} as [bold]{batch.batch_id}[/]"
        return f"resuming cancelled batch {ids}: {reused} reused, {queued} to render"

    def store_moved(self, before: str, now: str) -> None:
        """Shown even with --json (on stderr), unless quiet: --store gave the ledger another store, so
        the objects of the one it used are no longer reused, checked or collected."""
        self.diagnostics.print(
            f"[yellow]store[/] this ledger used the store {escape(printable(before))} until now and uses "
            f"{escape(printable(now))} from "
            "here on (--store): the objects in the earlier one are no longer reused, checked or collected; "
            "give its path as --store to go back"
        )

    def requeued(self, batch_id: str, count: int, *, final: bool) -> None:
        """``retry``: how many failed items went back to the queue; the result when nothing is
        rendered after it (``final``), else a notice before the run."""
        (self.say if final else self.note)(f"Requeued {count} failed items of {batch_id}")

    def replay_notes(self, batch: BatchView, report: IntakeReport, *, rendering: bool) -> None:
        """Shown even with --json (on stderr), unless quiet: a replay found outputs gone or
        names taken, and the user would otherwise believe the outputs are where they were."""
        if self.quiet:
            return
        restored = report.restored_outputs
        if restored:
            then = "rendering them again" if rendering else "queued again: run `thumbctl work` to render them"
            were = "was" if restored == 1 else "were"
            what = f"{plural(restored, 'output')} of this batch {were} missing"
            self.diagnostics.print(f"[yellow]replay[/] {what}; {then}")
        taken = report.names_taken_by_newer
        if taken:
            self.diagnostics.print(
                f"[yellow]replay[/] {plural(taken, 'friendly name')} of this batch now show a newer batch's outputs "
                f"(it rendered the same names later); this batch's own files are its objects in the store, "
                f"listed in {escape(batch.manifest_path)}"
            )

    def unlinked_names(self, failures: list[str]) -> None:
        """One line, shown even with -q or --json (on stderr): these names do not show the
        batch's outputs yet."""
        first = failures[0]
        self.diagnostics.print(
            f"[yellow]warning[/] [dim]\\[friendly_link_failed][/] {plural(len(failures), 'friendly name')} "
            f"could not be pointed at the batch's outputs (first: {escape(first)}); "
            "`thumbctl reconcile` says why for each: `--repair` restores a missing one (one whose object is "
            "gone is queued again: then run `thumbctl work`); one holding a user's file stays theirs unless "
            "`--repair --restore-modified` takes it back"
        )

    def finished(
        self,
        batch: BatchView,
        *,
        crashes: int = 0,
        sheet: str | None = None,
        max_failures: int = 0,
        manifest_written: bool = True,
        mirrored: MirrorReport | None = None,
        scan_errors: Sequence[ScanError] = (),
    ) -> None:
        """The end of a run: the batch object, or a summary; ``sheet`` is the contact sheet a
        foreground run wrote (its JSON gets ``"sheet"``, its summary the ``file://`` link);
        ``max_failures`` the failed items allowed before the exit is 1 (in the JSON); a manifest
        not written (already warned of) is not named; ``mirrored`` what ``--delete`` removed
        (``"mirrored"``); ``scan_errors`` the folders the submit's scan could not read
        (``"scan_errors"``, each named in the summary)."""
        if self.json_mode:
            extra = ({"sheet": sheet} if sheet else {}) | ({"mirrored": mirrored.to_json()} if mirrored else {})
            extra |= self.renders_again_json() | scan_errors_json(scan_errors)
            self.emit_json(batch.to_json() | {"max_failures": max_failures} | extra)
            return
        if self.quiet:  # the summary is all say lines, dropped; only the mirror's warnings still show
            if mirrored is not None:
                self.mirrored(mirrored)
            return
        self.say(f"Batch [bold]{batch.batch_id}[/] {styled(batch.state)}")
        self.counts_line(batch)
        if crashes:
            self.say(f"  {replaced_workers(crashes)}; each death counted as an attempt of the items it held")
        self.smaller_than_target_line(batch)
        self.replaced_names_line(batch)
        self.failure_summary(batch)
        if batch.counts[ItemState.SUCCEEDED]:
            manifest = (
                f"manifest {escape(batch.manifest_path)}"
                if manifest_written
                else "the batch manifest was not written (see the warning)"
            )
            self.say(f"  thumbnails in {escape(batch.out_dir)}, {manifest}")
        if sheet:
            self.say(f"  contact sheet {escape(page_link(sheet))}")
        for error in scan_errors:
            where = f"{escape(error.path)} ({escape(error.detail)})"
            self.say(f"  [yellow]not read[/] {where}: its photos are not in this batch")
        if mirrored is not None:
            self.mirrored(mirrored)

    def sheet_error(self, error: str | None) -> None:
        """Shown even with -q or --json (on stderr), like a manifest not written."""
        if error:
            self.diagnostics.print(f"[yellow]warning[/] [dim]\\[cannot_write][/] {escape(error)}")

    def manifest_errors(self, errors: tuple[str, ...], what: str = "batch manifest") -> None:
        """Shown even with -q or --json (on stderr): an output the user expects is missing."""
        for error in errors:
            self.diagnostics.print(f"[yellow]warning[/] [dim]\\[io_error][/] {what} not written: {escape(error)}")

    def site_manifests_kept(self, written: Sequence[SiteManifestWrite]) -> None:
        """Shown even with -q or --json (on stderr): a ``thumbctl.json`` thumbctl did not write was
        left where the site manifest goes (the command exits 1)."""
        for site in written:
            if problem := site.problem():
                self.diagnostics.print(f"[yellow]warning[/] [dim]\\[document_name_taken][/] {escape(problem)}")

    def exit_summary(self, batch: BatchView, code: int, max_failures: int = 0, scan_errors: int = 0) -> None:
        """With -q, the one line a run ending with a non-zero exit prints (on stderr), so a quiet
        command is never silent about why it failed; a run Ctrl-C ended ends with its
        ``error [interrupted]`` line in every mode, as every command Ctrl-C ends does."""
        if code == ExitCode.INTERRUPTED:
            recorded = "its cancel is recorded" if batch.cancel_requested_at else "it had ended before the Ctrl-C"
            message = f"batch {batch.batch_id} is {batch.state}, {recorded}; thumbctl status {batch.batch_id}"
            self.error_line(Interrupted(message))
            return
        if not self.quiet or code == 0:
            return
        where = f"(exit {int(code)}); thumbctl status {batch.batch_id}"
        failed, total = batch.counts[ItemState.FAILED], batch.total
        if code == ExitCode.CANCELLED:
            line = f"batch cancelled: {batch.counts[ItemState.SUCCEEDED]} of {total} succeeded {where}"
        elif scan_errors and failed <= max_failures:
            line = f"{plural(scan_errors, 'folder')} of the source could not be read {where}"
        else:
            over = f", more than --max-failures {max_failures}" if max_failures else ""
            line = f"{failed} of {total} failed{over} {where}"
        self.diagnostics.print(escape(line))

    def work_failures(self, failed: int, max_failures: int, batch_id: str | None) -> None:
        """``work --max-failures N`` went over N: one line, even with -q."""
        status = f"thumbctl status {batch_id}" if batch_id else "thumbctl status"
        over = f"more than --max-failures {max_failures}"
        self.diagnostics.print(escape(f"{plural(failed, 'item')} failed while it ran, {over} (exit 1); {status}"))

    def work_done(self, supervision: Supervision, finished: dict[ItemState, int]) -> None:
        """``work``'s end: how it stopped, and what this host's workers finished while it ran."""
        if self.json_mode:
            done = {str(state): count for state, count in finished.items()}
            self.emit_json({"interrupted": supervision.interrupted, "crashes": supervision.crashes, "finished": done})
            return
        note = " (stopped on request)" if supervision.interrupted else ""
        crashes = f", {replaced_workers(supervision.crashes)}" if supervision.crashes else ""
        counts = ", ".join(f"{styled(state)} {count}" for state, count in finished.items())
        done = sum(finished.values())
        what = f"{plural(done, 'item')} done on this host" + (f" ({counts})" if done else "")
        self.say(f"Workers finished{note}{crashes}: {what}.")

    def admission_retry(self, error: UnavailableError, delay: float) -> None:
        """Shown even with --json (on stderr): the user is waiting and should know why."""
        if not self.quiet:
            self.diagnostics.print(
                f"[yellow]waiting[/] [dim]\\[{error.code}][/] {escape(error.message)}; retrying in {delay:.1f}s"
            )

    def layout_migrated(self, report: MigrationReport) -> None:
        """The one line of the one-time layout migration, on stderr (also with --json); what it
        had to set aside or leave is a warning, shown even with -q."""
        if report.folders and not self.quiet:
            sources = ", ".join(f"{folder}/objects" for folder in report.folders[:2])
            if len(report.folders) > 2:
                sources = f"OUT/objects of {len(report.folders)} output folders"
            extra = f"; {report.duplicates_dropped} duplicates dropped" if report.duplicates_dropped else ""
            self.diagnostics.print(
                f"moved {report.objects_moved} objects from {escape(sources)} to {escape(report.store)} "
                f"(one-time layout migration{extra}; {report.thumbnails_copied} thumbnails are now their own files)"
            )
        for path in report.conflicts:
            self.diagnostics.print(
                f"[yellow]warning[/] {escape(path)}: an old object with other bytes than the store's for that "
                "derivative, kept here; its thumbnails keep their bytes until `reconcile --repair` "
                "(see docs/operations.md, 'Moving from the old layout')"
            )
        for path in report.left:
            self.diagnostics.print(f"[yellow]warning[/] {escape(path)} is not an object; left in place")
        for folder in report.refused:
            self.diagnostics.print(f"[yellow]warning[/] {escape(folder)}/objects is a symlink or a file; not migrated")

    def smaller_than_target_line(self, batch: BatchView) -> None:
        """Outputs smaller than ``--size`` asked for are correct, but a person should not have to
        open each file to find out."""
        n = batch.smaller_than_target
        if n:
            verb = "is" if n == 1 else "are"
            hint = "(source smaller than --size; --upscale enlarges)"
            self.say(f"  {plural(n, 'output')} {verb} smaller than asked {hint}")

    def replaced_names_line(self, batch: BatchView) -> None:
        """Names this batch took over: thumbnails of earlier batches, and (``--overwrite``) other files."""
        if batch.replaced:
            self.say(f"  replaced {plural(batch.replaced, 'thumbnail')} an earlier batch published under the same name")
            if self.verbose:
                for name in batch.replaced_names:
                    self.say(f"    replaced {escape(name)}")
        if batch.overwritten:
            self.say(f"  overwrote {plural(batch.overwritten, 'file')} thumbctl had not published (--overwrite)")


def replaced_workers(n: int) -> str:
    """``2 worker processes died and were replaced``."""
    return f"{plural(n, 'worker process')} died and {'was' if n == 1 else 'were'} replaced"
