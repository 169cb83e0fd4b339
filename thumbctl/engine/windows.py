"""Crop windows the catalogue does not know, chosen again by analysis alone.

A thumbnail rendered before renders recorded their windows shows "unknown" in the catalogue and
its sheet. When its source is still there with the content accepted at submit, its window is chosen
again the way its render chose it (the batch's crop policy, trim, fit, focus and size, on the same
analysis copy of the source) and recorded with its derivative: no output is rendered again, and
the next catalogue reads the window from the ledger. A source gone or changed leaves it unknown.
"""

from __future__ import annotations

from ..core.catalogue import CatalogueEntry
from ..core.errors import ItemFailure
from ..core.profile import Limits
from ..imaging import SourceDecoder
from ..ledger import Claim, Ledger
from .decoding import read_claimed_source
from .rendering import Rendering, decoder_background


def unknown_windows(entries: list[CatalogueEntry]) -> list[CatalogueEntry]:
    """The entries whose crop window is unknown: cover outputs whose render recorded none."""
    return [entry for entry in entries if entry.crop is None and entry.fit == "cover"]


def fill_unknown_windows(ledger: Ledger, out_dir: str, entries: list[CatalogueEntry]) -> int:
    """Choose again and record the window of each of ``entries`` (of ``out_dir``) the catalogue does
    not know, where its source still holds its content; returns how many were recorded."""
    unknown = {entry.name: entry for entry in unknown_windows(entries)}
    if not unknown:
        return 0
    renders = []
    for claim in ledger.catalogue.name_claims(out_dir, sorted(unknown)):
        for key, name, framing in _windows(claim):
            renders.append((key, unknown[name].result | framing))
    ledger.catalogue.record_windows(renders)
    return len(renders)


def _windows(claim: Claim) -> list[tuple[str, str, dict[str, object]]]:
    """(derivative key, name, framing) of each cover item of ``claim``; none when its source cannot
    be read as it was accepted (gone, changed, no longer decodes)."""
    limits = Limits()
    max_bytes = int(claim.limits.get("max_bytes", limits.max_bytes))
    max_pixels = int(claim.limits.get("max_pixels", limits.max_pixels))
    rendering = Rendering(claim)
    try:
        data = read_claimed_source(claim, max_bytes)
        rendering.analyse(
            SourceDecoder(data, claim.source_format, max_pixels, background=decoder_background(claim.profile))
        )
    except (ItemFailure, OSError):
        return []
    cover = [item for item in claim.items if item.fit == "cover"]
    return [(item.derivative_key, item.friendly_path, rendering.window_of(item).to_result()) for item in cover]
