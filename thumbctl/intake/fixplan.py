"""What a root's fix file gives a submission: the fix of each photo it names, a fix carried over
to a retouch, the fixes it no longer holds cleared, and what it could not apply, reported.

Each photo is found in the file by its content digest (a moved or renamed photo keeps its fix),
else by its path: an entry there for other content is the photo before a retouch. The fix follows
when the new content has the entry's dimensions and a perceptual hash within
:data:`~thumbctl.imaging.fingerprint.SAME_PICTURE_BITS` of the entry's; else it is not applied
and the submit says so (``stale``), by path. An entry removed from the file clears the fixes it
gave before (what the ledger recorded as ``applied``), never a fix only the ledger holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from ..core.errors import ItemFailure, UsageError
from ..core.fixes import FIX_FILE, FixFileState, FixFileUpdate, StaleFix, path_key
from ..core.models import CachedSource
from ..core.profile import Limits
from ..imaging.fingerprint import picture_hash, same_picture
from ..sources.downloads import is_url
from ..sources.scan import SourceFolder, check_size
from ..storage.rootfiles import root_file_at
from .fixfile import FIX_FILE_LIMIT, FixEntry, FixFile, parse_fix_file

Point = tuple[float, float]


@dataclass(frozen=True)
class PhotoSeen:
    """A photo of the submission as intake read it."""

    source: str
    info: CachedSource

    @property
    def digest(self) -> str:
        return self.info.digest


@dataclass(frozen=True)
class FixFileOutcome:
    """What the fix file did in one submission, for the summary and the JSON."""

    where: str
    applied: int = 0
    carried: tuple[str, ...] = ()
    stale: tuple[StaleFix, ...] = ()
    cleared: int = 0
    #: Why the file was not read (a file of that name thumbctl did not write), else None.
    problem: str | None = None
    #: Photos with a fix the ledger holds and the file does not (a fresh ledger would lose it).
    ledger_only: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.where,
            "applied": self.applied,
            "carried_over": list(self.carried),
            "not_applied": [note.to_json() for note in self.stale],
            "cleared": self.cleared,
            "problem": self.problem,
            "ledger_only": list(self.ledger_only),
        }


@dataclass(frozen=True)
class FileFixes:
    """The file's word on each (digest, ratio) of the submission (None: cleared), what to tell the
    user, and the state to record with the batch."""

    points: Mapping[tuple[str, str], Point | None] = field(default_factory=dict)
    outcome: FixFileOutcome | None = None
    state: FixFileUpdate | None = None


def read_fix_file(root: str) -> FixFile | None:
    """The fix file at ``root``, None when there is none. :class:`UsageError` for one that does not
    read (``bad_focus_file``) or that thumbctl did not write (``focus_file_taken``)."""
    where = f"{root.rstrip('/')}/{FIX_FILE}"
    try:
        data = root_file_at(root, FIX_FILE).read(FIX_FILE_LIMIT)
    except OSError as exc:
        raise UsageError(f"{where} cannot be read: {exc.strerror or exc}", code="io_error") from None
    if data is None:
        return None
    if data == b"":
        raise UsageError(
            f"{where} is not a regular file of at most {FIX_FILE_LIMIT // 2**20} MB: not one thumbctl wrote; "
            "it is left as it is",
            code="focus_file_taken",
        )
    return parse_fix_file(data, where)


def file_fixes(
    root: str,
    photos: Iterable[PhotoSeen],
    recorded: FixFileState,
    phash_of: Callable[[PhotoSeen], str | None],
) -> FileFixes:
    """What the fix file at ``root`` gives ``photos`` (see the module notes); ``recorded`` is what
    the ledger kept of it, ``phash_of`` hashes a photo's content (None where it cannot)."""
    where = f"{root.rstrip('/')}/{FIX_FILE}"
    try:
        file = read_fix_file(root)
    except UsageError as exc:
        if exc.code != "focus_file_taken":
            raise
        return FileFixes(outcome=FixFileOutcome(where, problem=str(exc)))
    if file is None and not recorded.applied:
        return FileFixes()
    file = file or FixFile()
    by_digest, by_path = file.by_digest(), file.by_path()
    points: dict[tuple[str, str], Point | None] = {}
    applied: set[tuple[str, str]] = set()
    carried: list[str] = []
    stale: dict[str, StaleFix] = {}
    photos = list({p.digest: p for p in photos}.values())
    for photo in photos:
        key = path_key(root, photo.source)
        at_path = by_path.get(key)
        entry = at_path if at_path is not None and at_path.digest == photo.digest else by_digest.get(photo.digest)
        if entry is None and (before := at_path) is not None:
            if _same_picture(before, photo, phash_of):
                entry = before
                carried.append(key)
            else:
                stale[photo.digest] = StaleFix(key, tuple(sorted(before.focus)), _why_not(before, photo))
        for ratio, point in (entry.focus if entry else {}).items():
            points[photo.digest, ratio] = point
            applied.add((photo.digest, ratio))
    digests = {p.digest for p in photos}
    cleared = {pair for pair in recorded.applied if pair[0] in digests and pair not in applied}
    points.update(dict.fromkeys(cleared))
    state = FixFileUpdate(frozenset(digests), frozenset(applied), stale)
    outcome = FixFileOutcome(
        where,
        applied=len({digest for digest, _ in applied}),
        carried=tuple(sorted(carried)),
        stale=tuple(sorted(stale.values(), key=lambda n: n.path)),
        cleared=len(cleared),
    )
    return FileFixes(points, outcome, state)


def _same_picture(entry: FixEntry, photo: PhotoSeen, phash_of: Callable[[PhotoSeen], str | None]) -> bool:
    """Whether ``photo`` is a retouch of the content ``entry`` was fixed for."""
    if (entry.width, entry.height) != (photo.info.width, photo.info.height) or entry.phash is None:
        return False
    phash = phash_of(photo)
    return phash is not None and same_picture(entry.phash, phash)


def _why_not(entry: FixEntry, photo: PhotoSeen) -> str:
    """``picture_changed``, or ``not_compared`` when the entry has no hash or the source is a URL."""
    same_size = (entry.width, entry.height) == (photo.info.width, photo.info.height)
    if same_size and (entry.phash is None or is_url(photo.source)):
        return "not_compared"
    return "picture_changed"


def local_phash(root: str, limits: Limits) -> Callable[[PhotoSeen], str | None]:
    """Hash a photo read below the folder ``root`` as a submit reads it (no symlink followed, under
    the byte limit); None for a URL source, or one that no longer reads."""

    def phash_of(photo: PhotoSeen) -> str | None:
        if is_url(photo.source):
            return None
        try:
            with SourceFolder(root) as folder, folder.open(photo.source) as stream:
                check_size(os.fstat(stream.fileno()).st_size, limits.max_bytes, photo.source)
                data = stream.read(limits.max_bytes + 1)
            return picture_hash(data, photo.info.format, limits.max_pixels, photo.info.width, photo.info.height)
        except (ItemFailure, OSError):
            return None

    return phash_of


def phash_of_bytes(data: bytes, info: CachedSource, limits: Limits) -> str | None:
    """The hash of a photo's bytes (``thumbctl focus``), None when they do not decode."""
    try:
        return picture_hash(data, info.format, limits.max_pixels, info.width, info.height)
    except ItemFailure:
        return None


def with_ledger_only(file: FileFixes, root: str, photos: Iterable[PhotoSeen], fixed: set[str]) -> FileFixes:
    """``file`` noting the photos whose content has a fix in the ledger (``fixed``, by digest) that
    the fix file does not hold: ``focus --export`` writes them there."""
    from_file = {digest for digest, _ in file.points}
    only = sorted({path_key(root, p.source) for p in photos if p.digest in fixed and p.digest not in from_file})
    if not only:
        return file
    outcome = file.outcome or FixFileOutcome(f"{root.rstrip('/')}/{FIX_FILE}")
    return replace(file, outcome=replace(outcome, ledger_only=tuple(only)))
