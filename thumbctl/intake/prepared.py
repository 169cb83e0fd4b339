"""What preparing a submission hands on: the batch to accept, with what intake saw for the user
(:class:`IntakeReport`) and the profile it was built with."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.models import NewBatch
from ..core.profile import Profile
from ..sources.scan import ScanError
from .fixplan import FixFileOutcome
from .lanes import LeftOut
from .rerender import EncoderChange


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
    #: Why the document of a batch finished at acceptance could not be written (None: written, or
    #: not due); the batch stands either way, and the next run or ``reconcile`` writes it.
    manifest_error: str | None = None
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
    #: What the source root's fix file (``thumbctl-focus.json``) did, None when there is none.
    fix_file: FixFileOutcome | None = None


@dataclass(frozen=True)
class PreparedSubmission:
    """A submission validated and built, nothing recorded yet."""

    batch: NewBatch
    report: IntakeReport
    profile: Profile
