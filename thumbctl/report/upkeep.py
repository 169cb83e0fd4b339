"""What upkeep says: reconcile's findings and repairs, and what gc removed or would remove."""

from __future__ import annotations

from collections import Counter

from ..core.models import Finding, GcReport, ReconcileReport
from ..upkeep.release import ALREADY, UNKNOWN, ReleaseReport
from .output import Output
from .styles import escape, format_bytes, plural


class UpkeepReports(Output):
    """The reports of ``reconcile`` and ``gc``."""

    def reconciled(self, report: ReconcileReport, *, repair: bool) -> None:
        """One line per finding (its kind first), then a summary by kind. Quiet: only the
        findings that remain, so cron mails only when something is left to do."""
        if self.json_mode:
            self.emit_json(report.to_json())
            return
        if self.quiet:
            for finding in report.remaining:
                self.results.print(finding_line(finding))
            return
        for finding in report.findings:
            self.say(finding_line(finding))
        self.say(objects_line(report))
        if not report.findings:
            self.say("[green]clean[/]: no findings")
            return
        by_kind = Counter(f.kind for f in report.findings)
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
        repaired = len(report.findings) - len(report.remaining)
        tail = (
            f"; {repaired} repaired, {len(report.remaining)} remain"
            if repair
            else "; --repair applies the safe repairs, `thumbctl gc` removes orphan objects"
        )
        self.say(f"{plural(len(report.findings), 'finding')} ({kinds}){tail}")

    def released(self, report: ReleaseReport) -> None:
        """A line per name: released (or would be), released before, or not a name thumbctl published."""
        if self.json_mode:
            self.emit_json(report.to_json())
            return
        for name in report.names:
            if name.state == UNKNOWN:
                self.diagnostics.print(
                    f"[yellow]not released[/] {escape(name.name)}: thumbctl published nothing there; nothing changed"
                )
            elif name.state == ALREADY:
                self.say(f"{escape(name.name)}: already yours since {name.released_at}")
            else:
                verb = "would release" if report.dry_run else "released"
                self.say(f"{verb} {escape(name.name)}: thumbctl no longer reports, restores, replaces or removes it")

    def garbage_collected(self, report: GcReport) -> None:
        if self.json_mode:
            self.emit_json(report.to_json())
            return
        verb = "would remove" if report.dry_run else "removed"
        expired = "would expire" if report.dry_run else "expired"
        batches = plural(len(report.expired_batches), "batch")
        self.say(f"{expired} {batches}: {' '.join(report.expired_batches) or '-'}")
        self.say(
            f"{verb} {plural(report.objects_removed, 'object')}, "
            f"{plural(report.temp_files_removed, 'temp file')}, {plural(report.manifests_removed, 'manifest')}, "
            f"{plural(report.sheets_removed, 'contact sheet')} (thumbnails are kept)"
        )
        self.say(f"{'reclaimable' if report.dry_run else 'reclaimed'}: {format_bytes(report.bytes_reclaimed)}")
        for error in report.errors:
            self.diagnostics.print(f"[bold red]error[/] [dim]\\[io_error][/] could not remove {escape(error)}")


def objects_line(report: ReconcileReport) -> str:
    """How the objects were checked, in parts that add up to how many were."""
    wrong = report.objects_checked - report.objects_decoded - report.objects_unchanged - report.objects_matched
    parts = [
        (report.objects_decoded, "decoded"),
        (report.objects_unchanged, "unchanged since they last decoded"),
        (report.objects_matched, "matched by the size and checksum kept with them"),
        (wrong, "found wrong without decoding"),
    ]
    how = ", ".join(f"{count} {what}" for count, what in parts if count) or "none"
    deep = " (--deep decodes all)" if report.objects_unchanged or report.objects_matched else ""
    return f"{plural(report.objects_checked, 'object')} checked: {how}{deep}"


def finding_line(finding: Finding) -> str:
    where = " ".join(escape(part) for part in (finding.batch_id, finding.item_id, finding.ratio) if part)
    path = f" [dim]{escape(finding.path)}[/]" if finding.path else ""
    mark = " [green](repaired)[/]" if finding.repaired else ""
    head = f"[yellow]{finding.kind}[/]" + (f" {where}" if where else "")
    return f"{head}: {escape(finding.detail)}{path}{mark}"
