"""What a claim's renders start from: a host that sees where the claim's outputs go, and its source
read again and decoded: its bytes checked against the digest accepted at submit (from its folder,
or downloaded under the batch's URL rules), then decoded once per DCT scale the claim's sizes need.
A failure here fails all the claim's items, before any render."""

from __future__ import annotations

import hashlib

from ..core.errors import ItemFailure
from ..core.profile import Limits, UrlRules
from ..imaging import SourceDecoder
from ..ledger import Claim
from ..sources.downloads import is_url
from ..sources.downloads.remote import read_verified_url
from ..sources.scan import read_source
from ..storage.hosts import check_on_host
from .rendering import Rendering, decoder_background


def decode_claim(claim: Claim, rendering: Rendering, backend: str) -> tuple[SourceDecoder, int]:
    """The claim's source decoded at every DCT scale its sizes need, each scale once, and its size
    in bytes; first, a ledger of ``backend`` that workers on several hosts share must have given
    this host the claim's store and OUT folder (``store_not_on_host``, ``out_not_on_host``)."""
    check_on_host(claim.out_dir, claim.items[0].object_path, backend)
    limits = Limits()
    max_bytes = int(claim.limits.get("max_bytes", limits.max_bytes))
    max_pixels = int(claim.limits.get("max_pixels", limits.max_pixels))
    data = read_claimed_source(claim, max_bytes)
    decoder = SourceDecoder(
        data,
        claim.source_format,
        max_pixels,
        background=decoder_background(claim.profile),
        label=claim.source,
    )
    decoder.expect(rendering.decode_scales())
    for item in claim.items:
        rendering.decoded_for(decoder, item)
    return decoder, len(data)


def read_claimed_source(claim: Claim, max_bytes: int) -> bytes:
    """The claim's source read again and checked against the digest accepted at submit: from
    its folder, or (a URL source) downloaded under the URL rules the batch recorded."""
    if is_url(claim.source):
        rules = UrlRules.from_json(claim.limits.get("urls"))
        return read_verified_url(claim.source, claim.source_digest, max_bytes, rules)
    return read_verified_source(claim.source_root, claim.source, claim.source_digest, max_bytes)


def read_verified_source(root: str, path: str, digest: str, max_bytes: int) -> bytes:
    """The source's bytes, if they still are the ones accepted at submit.

    Opened below ``root`` without following any symlink and only if it is a regular
    file, read up to ``max_bytes`` (see :func:`~thumbctl.sources.scan.open_source`).
    """
    data = read_source(root, path, max_bytes)
    if hashlib.sha256(data).hexdigest() != digest:
        raise ItemFailure("source_changed", f"{path} changed since it was submitted")
    return data
