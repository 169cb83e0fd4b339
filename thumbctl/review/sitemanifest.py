"""The site manifest of an OUT: ``OUT/thumbctl.json``, the whole live catalogue as a site builds
from it, under one name that never changes.

Every live name of OUT, grouped by photo and ratio as the batch manifests group them: the files
(paths relative to OUT), a ``srcset`` per format, the ``<picture>``, ``alt`` and the placeholder.
It is written from the catalogue after every run that changes OUT (a batch's end, a mirror's
removals), with a ``generation`` one higher each time (counted in the ledger, taken in the same
write as the catalogue is read). The write is a swap: the document there is replaced only when it
is thumbctl's and of an older generation, so two hosts finishing at once never roll it back (a lock
on a local folder, ``If-Match`` in a bucket). A ``thumbctl.json`` that thumbctl did not write is left
as it is (``document_name_taken``). gc never expires it; the batch manifests stay as history.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ..config.options import DEFAULT_MARKUP, SiteMarkup
from ..core.catalogue import CatalogueEntry
from ..core.errors import ExitCode
from ..ledger import Ledger
from ..ledger.timefmt import iso
from ..storage.locations import output_target_at
from ..storage.outputs import json_document
from .catalogue import item_of
from .markup import picture_sets

SITE_MANIFEST = "thumbctl.json"
#: What marks a ``thumbctl.json`` as thumbctl's own.
GENERATOR = "thumbctl"
#: The most of a document there that is read to know whose and which generation it is.
READ_LIMIT = 256 * 1024 * 1024
#: Why a write kept the document there: a newer generation, or a document thumbctl did not write.
NEWER = "a newer generation is there"
TAKEN = "document_name_taken"


@dataclass(frozen=True)
class SiteManifestWrite:
    """One write of an OUT's site manifest: where, which generation, and why it was not written."""

    out_dir: str
    path: str
    generation: int
    #: None when written; :data:`NEWER` (another writer was ahead: nothing to do) or :data:`TAKEN`.
    kept: str | None = None

    @property
    def taken(self) -> bool:
        """A ``thumbctl.json`` thumbctl did not write is there: left as it is, and the command exits 1."""
        return self.kept == TAKEN

    def problem(self) -> str | None:
        """The warning to give, or None."""
        if not self.taken:
            return None
        return (
            f"{self.path} is not thumbctl's: left as it is, the site manifest was not written "
            f"(move it away to get one; exit {int(ExitCode.PARTIAL)})"
        )


def site_document(
    generation: int,
    written_at: str,
    entries: list[CatalogueEntry],
    markup: SiteMarkup = DEFAULT_MARKUP,
    ledger_id: str | None = None,
) -> dict[str, object]:
    """The site manifest of a catalogue's entries, its URLs and ``sizes`` as ``markup`` says."""
    items = [item_of(entry) for entry in entries]
    out_dir = entries[0].out_dir if entries else ""
    pictures = [group.to_json() for group in picture_sets(out_dir, items, markup=markup)] if entries else []
    head = {"generator": GENERATOR, "generation": generation, "ledger": ledger_id, "written_at": written_at}
    return {**head, "pictures": pictures}


def write_site_manifest(ledger: Ledger, out_dir: str) -> SiteManifestWrite:
    """Write ``OUT/thumbctl.json`` from the live catalogue of ``out_dir`` (see the module)."""
    generation, entries = ledger.catalogue.snapshot(out_dir)
    target = output_target_at(out_dir)
    markup, written_at, ledger_id = ledger.catalogue.markup(out_dir), iso(ledger.clock()), ledger.upkeep.ledger_id()
    decision = Decision(generation, ledger_id, lambda at: site_document(at, written_at, entries, markup, ledger_id))
    kept = target.swap_document(SITE_MANIFEST, decision, READ_LIMIT)
    return SiteManifestWrite(out_dir, target.path_of(SITE_MANIFEST), decision.written, kept)


@dataclass
class Decision:
    """What a site manifest write does with the document there (:meth:`OutputTarget.swap_document`):
    none there, or thumbctl's of an older generation of this ledger: write ours; thumbctl's of a newer
    generation of this ledger: keep it (another host was ahead); another ledger's (a ledger lost, as a
    CI cache can be): write ours, counting on from its generation, so the count never goes back; a
    document thumbctl did not write: keep it (:data:`TAKEN`)."""

    generation: int
    ledger_id: str
    build: Callable[[int], dict[str, object]]
    #: The generation written (the one asked for, or more after another ledger's).
    written: int = 0

    def __call__(self, held: bytes | None) -> bytes | str:
        theirs = None if held is None else _thumbctls(held)
        if held is not None and theirs is None:
            return TAKEN
        generation = self.generation
        if theirs is not None:
            their_generation, their_ledger = theirs
            if their_ledger == self.ledger_id and their_generation >= generation:
                return NEWER
            if their_ledger != self.ledger_id:
                generation = max(generation, their_generation + 1)
        self.written = generation
        return json_document(self.build(generation))


def _thumbctls(held: bytes) -> tuple[int, str | None] | None:
    """The generation and ledger of a document thumbctl wrote, else None."""
    try:
        doc = json.loads(held)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("generator") != GENERATOR or not isinstance(doc.get("generation"), int):
        return None
    ledger = doc.get("ledger")
    return doc["generation"], ledger if isinstance(ledger, str) else None
