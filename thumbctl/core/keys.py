"""Digests: canonical JSON, content digests and derivative keys.

A derivative key names one output object. It covers everything that shapes
the output bytes and nothing else (no paths, no ids), so the same photo
rendered the same way converges on one object across batches, ledgers and
source locations.
"""

from __future__ import annotations

import hashlib
import json

from .profile import ANALYSIS_REFERENCE_SIZE, Profile, Ratio

#: The idempotency key of a batch the review page made (``review:`` and a random part): no submit
#: replays or resumes it.
REVIEW_KEY_PREFIX = "review:"


def canonical_json(value: object) -> str:
    """JSON with sorted keys and no insignificant whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest_json(value: object) -> str:
    """sha256 (hex) of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def derivative_key(
    source_digest: str,
    ratio: Ratio,
    profile: Profile,
    focus: tuple[float, float] | None,
) -> str:
    """The key of the object rendering ``source_digest`` at ``ratio`` with ``profile``, the
    profile of one size and one format (:meth:`Profile.variant`). The settings are those a
    one-size, one-format request always had, so a derivative of a set shares its object with
    the same derivative asked for alone."""
    if not isinstance(profile.size, int) or not isinstance(profile.format, str):
        raise ValueError("a derivative key is for one size and one format: use profile.variant(size, fmt)")
    encoder = profile.encoder_settings
    if _framed_by_reference_analysis(profile, focus):
        encoder = {**encoder, "analysis_size": ANALYSIS_REFERENCE_SIZE}
    return digest_json(
        {
            "source": source_digest,
            "ratio": str(ratio),
            "focus": list(focus) if focus is not None else None,
            "encoder": encoder,
        }
    )


def _framed_by_reference_analysis(profile: Profile, focus: tuple[float, float] | None) -> bool:
    """The window of an analysed crop comes from the analysis of the reference size's decode
    (:data:`~thumbctl.core.profile.ANALYSIS_REFERENCE_SIZE`); before sets of sizes, each size analysed
    its own decode. At the reference size both are the same, so its key is unchanged; at any other
    size the framing may differ by an analysis step, so the key says so and no object rendered the
    old way is taken for one rendered now."""
    return focus is None and profile.crop != "center" and profile.size != ANALYSIS_REFERENCE_SIZE
