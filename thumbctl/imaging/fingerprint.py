"""A photo's perceptual hash: what tells a retouch of a photo (brighter, more contrast, encoded
again, a small spot removed) from another photo, so a crop fix follows the retouch.

The hash is a difference hash (dHash) of 64 bits: the photo decoded small (DCT scaling where the
format has it), upright, flattened on white and reduced to a 9×8 grey copy; each bit says whether
a pixel is brighter than its right-hand neighbour. Brightness and contrast changes keep the order
of neighbours, so they keep most bits; another picture flips about half of them.
:data:`SAME_PICTURE_BITS` is the most bits a retouch may differ by, measured by
``bench/fingerprint.py`` on the corpus (see docs/benchmarks.md). A photo with little in it (a
small product on white) sets few bits, so two such photos differ by few bits too: the bits that
differ must also be at most :data:`SAME_PICTURE_SHARE` of those set in either hash, and two hashes
with no bit set (flat pictures) are never called the same.
"""

from __future__ import annotations

from PIL import Image

from .decode import SourceDecoder

#: The grey copy the hash compares: 9 columns, so each of the 8 rows gives 8 bits.
HASH_COLUMNS, HASH_ROWS = 9, 8
#: The long side decoded for the hash (DCT scaling stops at 1/8, so most photos decode larger).
HASH_DECODE_SIZE = 96
#: The most bits two hashes of one picture may differ by (see the module notes).
SAME_PICTURE_BITS = 10
#: The largest share of the bits set in either hash that may differ (retouches measured: 0.21).
SAME_PICTURE_SHARE = 0.3


def picture_hash(data: bytes, fmt: str, max_pixels: int, width: int, height: int) -> str:
    """The dHash of the photo ``data`` (``width`` × ``height`` upright pixels) as 16 hex digits.
    Raises :class:`~thumbctl.core.errors.ItemFailure` as a render's decode does."""
    scale = min(1.0, HASH_DECODE_SIZE / max(width, height, 1))
    decoded = SourceDecoder(data, fmt, max_pixels).decoded(scale)
    grey = decoded.image.convert("L").resize((HASH_COLUMNS, HASH_ROWS), Image.Resampling.LANCZOS)
    pixels = grey.tobytes()
    bits = 0
    for row in range(HASH_ROWS):
        line = pixels[row * HASH_COLUMNS : (row + 1) * HASH_COLUMNS]
        for left, right in zip(line, line[1:], strict=False):
            bits = (bits << 1) | (right > left)
    return f"{bits:016x}"


def hash_distance(a: str, b: str) -> int:
    """How many of the 64 bits two hashes differ by."""
    return (int(a, 16) ^ int(b, 16)).bit_count()


def same_picture(a: str, b: str) -> bool:
    """Whether two hashes are of one picture (a retouch), by :data:`SAME_PICTURE_BITS` and
    :data:`SAME_PICTURE_SHARE`."""
    distance, either = hash_distance(a, b), (int(a, 16) | int(b, 16)).bit_count()
    return either > 0 and distance <= SAME_PICTURE_BITS and distance <= SAME_PICTURE_SHARE * either
