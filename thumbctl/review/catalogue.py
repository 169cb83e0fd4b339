"""The catalogue of an OUT as a person reviews it: which OUT, in which order, changed since when.

The records come from the ledger's catalogue port (:class:`~thumbctl.ledger.catalogue.CataloguePort`);
this module chooses the OUT a command means and orders and filters its entries, and says what a
sheet notes of them (a crop fix not applied) and how a page kept apart from OUT links to them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from ..config.s3location import BadLocation, is_s3, parse_s3
from ..core.catalogue import CatalogueEntry
from ..core.errors import BatchNotFound, UsageError
from ..core.fixes import StaleFix, path_key
from ..core.models import ItemState, ItemView
from ..core.profile import SettingError, parse_duration
from ..core.redact import shown_source
from ..ledger import Ledger
from ..ledger.timefmt import iso
from ..storage.locations import name_in

K = TypeVar("K")


class CatalogueOrder(StrEnum):
    """How a catalogue is listed: by name, or the worst crop first (unknown scores first of all)."""

    NAME = "name"
    SCORE = "score"


def recorded_out(out: Path | str) -> str:
    """``out`` as the ledger records an OUT: an ``s3://`` location normalized, a folder absolute
    with its links resolved."""
    text = str(out)
    if is_s3(text):
        try:
            return parse_s3(text).url
        except BadLocation as exc:
            raise UsageError(str(exc), code="bad_out_dir") from None
    return os.path.realpath(os.path.expanduser(text))


def chosen_out(ledger: Ledger, given: Path | str | None, configured: Path | str | None = None) -> str:
    """The OUT a command means: the one given, else the configured one, else the only OUT the ledger
    holds live names in; a usage error (exit 2) listing them when that leaves a choice."""
    outs = ledger.catalogue.outs()
    if given is not None or configured is not None:
        wanted = recorded_out(given if given is not None else str(configured))
        if wanted not in {out for out, _ in outs}:
            listed = ", ".join(out for out, _ in outs) or "none yet"
            raise UsageError(
                f"this ledger has no live thumbnails in {wanted}; it publishes to: {listed}", code="no_catalogue"
            )
        return wanted
    if len(outs) == 1:
        return outs[0][0]
    if not outs:
        raise UsageError("no thumbnails are recorded in this ledger yet: submit a folder first", code="no_catalogue")
    listed = ", ".join(out for out, _ in outs)
    raise UsageError(
        f"this ledger publishes to {len(outs)} OUTs; name one (OUT, or --out for sheet): {listed}", code="out_required"
    )


def ordered(entries: Iterable[CatalogueEntry], order: CatalogueOrder) -> list[CatalogueEntry]:
    """``entries`` in ``order``; by score, unknown scores first, then the lowest, then by name."""
    listed = list(entries)
    if order == CatalogueOrder.SCORE:
        listed.sort(key=lambda e: (e.score is not None, e.score or 0.0, e.name))
    return listed


def changed_since(entries: Iterable[CatalogueEntry], since: str) -> list[CatalogueEntry]:
    """The entries whose name was published after ``since`` (a time as the ledger records times)."""
    return [entry for entry in entries if entry.changed_at > since]


@dataclass(frozen=True)
class Since:
    """What ``--changed`` was given, parsed before any ledger is opened: a while ago (seconds), a
    moment, or a batch (an id or a unique prefix, looked up in the ledger)."""

    seconds: float | None = None
    moment: datetime | None = None
    batch: str | None = None

    @classmethod
    def parse(cls, text: str) -> Since:
        """``2h``, ``7d``, ``90`` (a while ago), ``2026-12-01`` or ``2026-12-01T09:30`` (UTC unless it
        says otherwise), else a batch; a number or duration out of range is a usage error."""
        stripped = text.strip()
        if _DURATION_LIKE.fullmatch(stripped):
            try:
                return cls(seconds=parse_duration(stripped))
            except SettingError as exc:
                raise UsageError(f"--changed {_short(stripped)}: {exc}", code="bad_since") from None
        try:
            moment = datetime.fromisoformat(stripped)
        except ValueError:
            return cls(batch=stripped)
        return cls(moment=moment if moment.tzinfo else moment.replace(tzinfo=UTC))

    def resolve(self, ledger: Ledger) -> str:
        """The time it means, as the ledger records times (a batch: when its last item moved)."""
        if self.seconds is not None:
            return iso(ledger.clock() - self.seconds)
        if self.moment is not None:
            return iso(self.moment.timestamp())
        try:
            batch_id = ledger.views.resolve_batch_id(self.batch or "")
        except BatchNotFound:
            raise UsageError(
                f"--changed {_short(self.batch or '')!r} is neither a batch, a duration (2h, 7d) nor a date or "
                "time (2026-12-01T09:30)",
                code="bad_since",
            ) from None
        with ledger.views.streamed_items(batch_id) as items:  # its items' last moves: gc's expiry is none of them
            last = max((item.updated_at for item in items), default=None)
        return last or ledger.views.batch(batch_id, with_failures=False).created_at


#: What ``--changed`` reads as a while ago: a number, with or without a sign or duration units.
_DURATION_LIKE = re.compile(r"[-+]?[0-9][0-9.]*(?:[a-zA-Z]+[0-9.]*)*")


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}…{text[-8:]}"


def item_of(entry: CatalogueEntry) -> ItemView:
    """A live name as the sheet draws an item: its source by its path under its root."""
    return ItemView(
        item_id=source_id(entry),
        source=entry.source,
        ratio=entry.ratio,
        state=ItemState.SUCCEEDED,
        attempt=1,
        error_code=None,
        error_detail=None,
        derivative_key=None,
        object_path=entry.object_path,
        friendly_path=entry.name,
        updated_at=entry.changed_at,
        result=entry.result,
        size=entry.size,
        format=entry.format,
        alt=entry.alt,
    )


def source_id(entry: CatalogueEntry) -> str:
    """How a card names its photo: the path under its source root, else the source as shown."""
    root = entry.source_root
    if root and not is_s3(entry.source) and entry.source.startswith(under := root.rstrip("/") + "/"):
        return entry.source[len(under) :]
    return shown_source(entry.source)


def public_links(out_dir: str, page_root: str, base_url: str, shown: dict[K, str]) -> dict[K, str]:
    """The thumbnails a page links to: as they are (relative links from the page), or, for a page
    written apart from OUT (``--documents``) when OUT has a ``--base-url``, by their public URLs."""
    if page_root == out_dir or not base_url.startswith(("http://", "https://")):
        return shown
    return {key: base_url + name_in(out_dir, path) for key, path in shown.items() if path.startswith(out_dir)}


def fix_notes(ledger: Ledger, photos: Iterable[tuple[str, str | None, str]]) -> dict[str, str]:
    """The note of each photo (item id, source root, source) whose fix file holds a fix for its
    previous content that was not applied (see :mod:`thumbctl.intake.fixplan`), by item id."""
    states: dict[str, dict[str, StaleFix]] = {}
    notes = {}
    for item_id, root, source in photos:
        if root is None:
            continue
        if root not in states:
            states[root] = {note.path: note for note in ledger.intake.fix_file_state(root).stale.values()}
        if (stale := states[root].get(path_key(root, source))) is not None:
            why = "another picture" if stale.reason == "picture_changed" else "not compared"
            notes[item_id] = f"fix for the previous content not applied ({', '.join(stale.ratios)}): {why}"
    return notes


#: The colours of the ratios' windows, in turn.
RATIO_COLOURS = ("#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2")


def widest_first(ratios: Iterable[str]) -> list[str]:
    """The distinct ``ratios``, the widest first (one that does not parse last)."""
    return sorted(set(ratios), key=lambda ratio: (-_ratio_value(ratio), ratio))


def ratio_colours(ratios: Iterable[str]) -> dict[str, str]:
    """Each ratio's colour, in turn from the widest: pages of one OUT's ratios (its catalogue sheet,
    its review page) give each ratio the same colour."""
    return {ratio: RATIO_COLOURS[n % len(RATIO_COLOURS)] for n, ratio in enumerate(widest_first(ratios))}


def _ratio_value(ratio: str) -> float:
    width, _, height = ratio.partition(":")
    try:
        return float(width) / float(height)
    except (ValueError, ZeroDivisionError):
        return 0.0
