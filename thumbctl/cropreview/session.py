"""One review of an OUT: what the page lists and shows, and what it changes (Apply, Reset, Approve).

:class:`ReviewSession` is the library behind ``thumbctl review``; the web layer only turns requests
into its calls and its answers into JSON. Every call opens the ledger for itself (a ledger is not
shared across threads) and the changes are serialized by one lock, so two tabs of one page cannot
interleave an Apply: the second one, made on a view the first changed, is refused as a conflict.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config.s3location import is_s3
from ..core.catalogue import CatalogueEntry
from ..core.display import shown
from ..core.errors import CannotWrite, ItemNotFound, LedgerMissing, ReviewConflict, UsageError
from ..core.models import BatchView
from ..core.profile import Limits
from ..ledger import Ledger
from ..review.catalogue import ratio_colours, widest_first
from ..sources.downloads import is_url
from ..storage.locations import object_name_of, object_store_of
from .photos import Listing, PhotoGroup, PhotoView, groups_of, photos_of
from .renders import RenderStarter

Point = tuple[float, float]

#: The most bytes a thumbnail shown on the page is read with (a thumbnail is far smaller).
THUMBNAIL_LIMIT = 32 * 1024 * 1024
#: Media types of the output formats.
MEDIA_TYPES = {"jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "avif": "image/avif"}


@dataclass(frozen=True)
class Applied:
    """What an Apply did: the batches rendering the photo's names again, and the fix file's fate."""

    photo: PhotoView
    batches: tuple[BatchView, ...]
    fix_file: dict[str, object] | None
    #: What went wrong that leaves the Apply standing (a batch document not written).
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "photo": self.photo.to_json(),
            "batches": [batch.batch_id for batch in self.batches],
            "names": sum(batch.total for batch in self.batches),
            "fix_file": self.fix_file,
            "problems": list(self.problems),
        }


@dataclass
class ReviewSession:
    """The review of ``out_dir`` over the ledger ``db``; Apply's renders are started by ``renders``."""

    db: Path | str
    out_dir: str
    limits: Limits
    renders: RenderStarter
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: The batches this session's Applies made, in order.
    batches: list[str] = field(default_factory=list)
    #: The photos as last read, with the catalogue's stamp then: read again only once it changed.
    _cache: tuple[str, list[PhotoGroup], dict[str, PhotoGroup]] | None = field(default=None, repr=False)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def warm_in_background(self, fill: Callable[[list[CatalogueEntry]], bool]) -> threading.Thread:
        """Read the photos in a thread of their own while the server starts and the browser loads the
        page (its first request waits for them). ``fill(entries)`` first chooses the windows no
        render recorded (:mod:`thumbctl.engine.windows`); when it recorded some, they are read again.
        A failure here is left for the first request to meet and report."""
        self._cache_lock.acquire()  # taken here, so no request can come before it

        def warm() -> None:
            try:
                with self._ledger() as ledger:
                    entries = self._load(ledger)
                if fill(entries):
                    with self._ledger() as ledger:
                        self._load(ledger)
            except Exception:  # noqa: BLE001 - reported by the first request, which reads them itself
                self._cache = None
            finally:
                self._cache_lock.release()

        thread = threading.Thread(target=warm, name="thumbctl-review-warm", daemon=True)
        thread.start()
        return thread

    def listing(self, listing: Listing) -> dict[str, object]:
        """The page of photos ``listing`` asks for, with how many it keeps and the OUT's ratios."""
        photos = self._groups()
        total, page = listing.page(photos)
        ratios = widest_first(e.ratio for p in photos for e in p.entries)
        return {
            "out": self.out_dir if is_s3(self.out_dir) else shown(Path(self.out_dir)),
            "total": total,
            "photos_in_out": len(photos),
            "offset": listing.offset,
            "ratios": ratios,
            "colours": ratio_colours(ratios),
            "photos": [photo.to_json() for photo in page],
        }

    def photo(self, digest: str) -> PhotoView:
        """The photo of content ``digest``, with the ratios a render (of any process) has yet to
        publish; ItemNotFound when no live name shows it."""
        found = self._group(digest)
        with self._ledger() as ledger:
            return found.view().rendering(_ratios_in_flight(ledger, self.out_dir, found.entries))

    def _group(self, digest: str) -> PhotoGroup:
        """The photo of content ``digest`` as last read; ItemNotFound when no live name shows it."""
        self._groups()
        assert self._cache is not None
        found = self._cache[2].get(digest)
        if found is None:
            raise ItemNotFound("no live thumbnail of this OUT shows that photo")
        return found

    def apply(self, digest: str, version: str, changes: Mapping[str, Point | None]) -> Applied:
        """Fix the photo's crops at the ratios of ``changes`` (a focus, or None: the smart crop again),
        in the ledger and its fix file, and render its names at those ratios again; refused when the
        photo is no longer at ``version``."""
        if not changes:
            raise UsageError("nothing to apply: click the photo or drag a window first", code="bad_request")
        for point in changes.values():
            _check_point(point)
        with self._lock, self._ledger() as ledger:
            photo, entries = self._current(ledger, digest, version)
            _check_not_rendering(ledger, self.out_dir, photo, [e for e in entries if e.ratio in changes])
            for ratio in changes:
                view = photo.ratio(ratio)
                if view is None:
                    raise UsageError(f"the photo has no thumbnail at {ratio}", code="bad_ratio")
                if view.fit != "cover":
                    raise UsageError(
                        f"{ratio} shows the whole photo (fit contain): it has no crop to move", code="bad_ratio"
                    )
            from .rebatch import apply_fixes  # intake and imaging: loaded by the first Apply, not at start

            done = apply_fixes(ledger, self.out_dir, entries, changes, self.limits)
            fix_file = self._write_fix_file(ledger, photo, changes)
            self.batches.extend(batch.batch_id for batch in done.batches)
        after = self.photo(digest)
        for batch in done.batches:
            if not batch.is_terminal:
                self.renders.start(batch.batch_id)
        return Applied(after, done.batches, fix_file, done.problems)

    def approve(self, digest: str, version: str) -> PhotoView:
        """Mark the photo reviewed as it is now (at ``version``): the "changed" listing leaves it out
        until one of its names changes again."""
        with self._lock, self._ledger() as ledger:
            self._current(ledger, digest, version)
            ledger.catalogue.record_review(self.out_dir, digest)
        return self.photo(digest)

    def batch(self, batch_id: str) -> BatchView:
        """A batch this session's Applies made, as it stands (with its failures)."""
        self._own(batch_id)
        with self._ledger() as ledger:
            return ledger.views.batch(batch_id)

    def cancel(self, batch_id: str) -> BatchView:
        """Cancel a batch this session's Applies made: its queued renders are cancelled at once."""
        self._own(batch_id)
        with self._ledger() as ledger:
            return ledger.intake.request_cancel(batch_id)

    def pending(self) -> list[BatchView]:
        """This session's batches that are not finished (their renders stay queued for ``thumbctl work``)."""
        if not self.batches:
            return []
        with self._ledger() as ledger:
            views = [ledger.views.batch(batch_id, with_failures=False) for batch_id in self.batches]
        return [view for view in views if not view.is_terminal]

    def write_catalogue_sheet(self) -> tuple[str | None, str | None]:
        """After this session's Applies, the OUT's catalogue sheet written again, the photos they
        changed first: (its path, None), or (None, why it could not be written); (None, None)
        when nothing was applied."""
        from ..review.cataloguesheet import write_ledger_catalogue_sheet  # its pages: loaded at the end only

        if not self.batches:
            return None, None
        with self._ledger() as ledger:
            first = ledger.views.batch(self.batches[0], with_failures=False)
            try:
                return write_ledger_catalogue_sheet(ledger, self.out_dir, changed_by=first).path, None
            except CannotWrite as exc:
                return None, exc.message

    def preview(self, digest: str) -> bytes:
        """The JPEG preview of the photo (the render's analysis copy); ItemNotFound when none was kept."""
        from ..review.sheet import preview_at

        photo = self._group(digest).view()
        data = preview_at(photo.preview) if photo.preview else None
        if data is None:
            raise ItemNotFound(f"no preview of {photo.shown} is kept: submit it again to make one")
        return data

    def thumbnail(self, digest: str, name: str) -> tuple[bytes, str]:
        """The bytes of the live name ``name`` (relative to OUT) of the photo, and their media type."""
        named = [n for ratio in self._group(digest).view().ratios for n in ratio.names if n.name == name]
        if not named:
            raise ItemNotFound(f"{name[:200]!r} is not a live thumbnail of this photo")
        path = named[0].object_path
        try:
            data = object_store_of(path).read(object_name_of(path), THUMBNAIL_LIMIT)
        except (FileNotFoundError, ValueError):
            raise ItemNotFound(f"the thumbnail {name} is gone from the store: thumbctl reconcile restores it") from None
        return data, MEDIA_TYPES.get(named[0].format, "application/octet-stream")

    def _groups(self) -> list[PhotoGroup]:
        """The photos of OUT, from the cache while the catalogue's stamp is the same (reading 5,000
        entries again for each page would cost half a second)."""
        with self._cache_lock, self._ledger() as ledger:
            if self._cache is None or self._cache[0] != ledger.catalogue.stamp(self.out_dir):
                self._load(ledger)
            assert self._cache is not None
            return self._cache[1]

    def _load(self, ledger: Ledger) -> list[CatalogueEntry]:
        """Read the entries of OUT into the cache (under its lock); the entries read."""
        stamp = ledger.catalogue.stamp(self.out_dir)
        entries = ledger.catalogue.entries(self.out_dir)
        groups = groups_of(entries, self._reviews(ledger))
        self._cache = stamp, groups, {group.digest: group for group in groups}
        return entries

    def _ledger(self) -> Ledger:
        """The ledger, opened for one call; a ledger file gone since the review started is an error,
        never a new, empty ledger."""
        if isinstance(self.db, Path) and not self.db.exists():
            raise LedgerMissing(f"the ledger {self.db} is gone: the review cannot go on; nothing was changed")
        return Ledger(self.db)

    def _reviews(self, ledger: Ledger) -> dict[str, str]:
        return ledger.catalogue.reviews(self.out_dir)

    def _current(self, ledger: Ledger, digest: str, version: str) -> tuple[PhotoView, list[CatalogueEntry]]:
        """The photo as the ledger holds it now, and its live names; a conflict unless at ``version``."""
        entries = [e for e in ledger.catalogue.entries(self.out_dir) if e.source_digest == digest]
        photo = self._photo(digest, photos_of(entries, self._reviews(ledger)))
        if photo.version != version:
            raise ReviewConflict(
                f"{photo.shown} changed since this page showed it (another tab, or a submit): "
                "it is shown again as it is now; nothing was changed"
            )
        return photo, entries

    @staticmethod
    def _photo(digest: str, photos: list[PhotoView]) -> PhotoView:
        found = next((photo for photo in photos if photo.digest == digest), None)
        if found is None:
            raise ItemNotFound("no live thumbnail of this OUT shows that photo")
        return found

    def _own(self, batch_id: str) -> None:
        if batch_id not in self.batches:
            raise ItemNotFound(f"batch {batch_id!r} is not one this review made")

    def _write_fix_file(
        self, ledger: Ledger, photo: PhotoView, changes: Mapping[str, Point | None]
    ) -> dict[str, object] | None:
        """The photo's fixes written to the fix file at its root, as ``thumbctl focus`` writes them."""
        from ..intake.fixwrite import photo_update, root_of, write_entries
        from ..intake.focus import Photo, described_photo

        remote = is_s3(photo.source) or is_url(photo.source)
        root = root_of(ledger, photo.source, None)
        if root is None:
            return None
        described = described_photo(photo.source, photo.digest, self.limits)
        held = Photo(photo.source, photo.digest, described.width, described.height, described.phash)
        points = [p for p in ledger.intake.focus_points([photo.digest]) if p.focus is not None]
        cleared = [ratio for ratio, point in changes.items() if point is None]
        make = photo_update(held.entry(root, points), cleared)
        written = write_entries(ledger, root, make, [photo.digest])
        return written.to_json() | {"remote": remote}


def _check_point(point: Point | None) -> None:
    if point is None:
        return
    if len(point) != 2 or not all(isinstance(v, int | float) and math.isfinite(v) and 0 <= v <= 1 for v in point):
        raise UsageError(f"a focus point is two numbers in 0..1, not {point!r}"[:200], code="bad_focus")


def _ratios_in_flight(ledger: Ledger, out_dir: str, entries: list[CatalogueEntry]) -> set[str]:
    """The ratios of ``entries`` (one photo's names) that an unfinished render will publish."""
    in_flight = ledger.catalogue.names_in_flight(out_dir, [entry.name for entry in entries])
    return {entry.ratio for entry in entries if entry.name in in_flight}


def _check_not_rendering(ledger: Ledger, out_dir: str, photo: PhotoView, entries: list[CatalogueEntry]) -> None:
    """Refuse an Apply while a render of those names has not ended, whoever started it (this page,
    another review, a submit): two renders of one name in flight could publish in either order, and
    the older crop would win."""
    if _ratios_in_flight(ledger, out_dir, entries):
        raise ReviewConflict(
            f"{photo.shown} is still rendering (an Apply, here or in another review, or a submit): "
            "wait for it to end (or cancel it), then apply again"
        )
