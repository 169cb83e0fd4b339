"""Benchmark: how far apart the perceptual hashes of retouches and of different photos lie.

A crop fix follows a photo retouched at the same path when the new content has the same
dimensions and a hash within ``SAME_PICTURE_BITS`` of the old one (``thumbctl/imaging/fingerprint.py``).
This measures that threshold. For every photo of FOLDER (JPEG, PNG, WebP) it makes retouches
that keep the dimensions:

* brighter and darker by 5 % and 15 %, contrast up and down by 10 % and 20 %;
* saturation up 20 %, a gamma change (0.9);
* encoded again as JPEG at quality 95, 75 and 50;
* a small edit: a grey patch over 2 % of the area, off-centre; a slight blur (radius 1) and
  sharpening.

and reports the distance (bits of 64) of each to the original; then the distance of every
pair of different photos of the folder (pairs that are copies of one picture, by a mean grey
difference under 3 % at 64×64, such as EXIF orientation variants or resizes, are left out). The
summary prints the largest retouch distance and share of set bits, the smallest different-photo
distance, and how many of each ``same_picture`` keeps and tells apart.

    python bench/fingerprint.py sample_images
    python bench/fingerprint.py FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageEnhance, ImageFilter, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from thumbctl.imaging import probe, sniff_format  # noqa: E402
from thumbctl.imaging.fingerprint import SAME_PICTURE_BITS, hash_distance, picture_hash, same_picture  # noqa: E402

MAX_PIXELS = 100_000_000
EXTENSIONS = {".jpg", ".jpeg", ".png", ".webp"}


def _hash(data: bytes) -> tuple[str, tuple[int, int]]:
    head = data[:64]
    info = probe(io.BytesIO(data), head, MAX_PIXELS)
    return picture_hash(data, sniff_format(head) or info.format, MAX_PIXELS, info.width, info.height), (
        info.width,
        info.height,
    )


def _grey(data: bytes) -> Image.Image:
    """The upright photo as a 64×64 grey copy, to tell copies of one picture apart from other pictures."""
    return ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("L").resize((64, 64), Image.Resampling.BOX)


def _same_picture(a: Image.Image, b: Image.Image) -> bool:
    """A copy of one picture (another encoding, EXIF orientation or size): mean grey difference under 3 %."""
    return statistics.fmean(abs(x - y) for x, y in zip(a.tobytes(), b.tobytes(), strict=True)) < 0.03 * 255


def _encoded(image: Image.Image, quality: int = 92) -> bytes:
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=quality)
    return out.getvalue()


def _patched(image: Image.Image) -> Image.Image:
    copy = image.copy()
    w, h = copy.size
    side_w, side_h = max(1, int(w * 0.14)), max(1, int(h * 0.14))  # 0.14² ≈ 2 % of the area
    copy.paste((128, 128, 128), (int(w * 0.6), int(h * 0.2), int(w * 0.6) + side_w, int(h * 0.2) + side_h))
    return copy


RETOUCHES: dict[str, Callable[[Image.Image], bytes]] = {
    "brighter 5%": lambda im: _encoded(ImageEnhance.Brightness(im).enhance(1.05)),
    "brighter 15%": lambda im: _encoded(ImageEnhance.Brightness(im).enhance(1.15)),
    "darker 5%": lambda im: _encoded(ImageEnhance.Brightness(im).enhance(0.95)),
    "darker 15%": lambda im: _encoded(ImageEnhance.Brightness(im).enhance(0.85)),
    "contrast +10%": lambda im: _encoded(ImageEnhance.Contrast(im).enhance(1.1)),
    "contrast +20%": lambda im: _encoded(ImageEnhance.Contrast(im).enhance(1.2)),
    "contrast -10%": lambda im: _encoded(ImageEnhance.Contrast(im).enhance(0.9)),
    "contrast -20%": lambda im: _encoded(ImageEnhance.Contrast(im).enhance(0.8)),
    "saturation +20%": lambda im: _encoded(ImageEnhance.Color(im).enhance(1.2)),
    "gamma 0.9": lambda im: _encoded(im.point(lambda v: round(255 * (v / 255) ** 0.9))),
    "re-encode q95": lambda im: _encoded(im, 95),
    "re-encode q75": lambda im: _encoded(im, 75),
    "re-encode q50": lambda im: _encoded(im, 50),
    "patch 2%": lambda im: _encoded(_patched(im)),
    "blur r1": lambda im: _encoded(im.filter(ImageFilter.GaussianBlur(1))),
    "sharpen": lambda im: _encoded(im.filter(ImageFilter.SHARPEN)),
}


def _photos(folders: list[Path]) -> list[Path]:
    """The photos of ``folders``, each content once (a folder may hold copies of another's)."""
    seen: dict[str, Path] = {}
    for path in (p for folder in folders for p in sorted(folder.rglob("*")) if p.suffix.lower() in EXTENSIONS):
        seen.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
    found = list(seen.values())
    if not found:
        raise SystemExit(f"no photos in {', '.join(map(str, folders))}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    photos = _photos(args.folders)
    originals: dict[Path, str] = {}
    sizes: dict[Path, tuple[int, int]] = {}
    greys: dict[Path, Image.Image] = {}
    retouch: dict[str, list[int]] = {name: [] for name in RETOUCHES}
    shares: list[float] = []
    kept = 0
    for path in photos:
        data = path.read_bytes()
        originals[path], size = _hash(data)
        sizes[path] = size
        greys[path] = _grey(data)
        upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
        for name, make in RETOUCHES.items():
            changed, changed_size = _hash(make(upright))
            assert changed_size == size, f"{name} changed the size of {path}"
            retouch[name].append(hash_distance(originals[path], changed))
            either = (int(originals[path], 16) | int(changed, 16)).bit_count()
            shares.append(retouch[name][-1] / either if either else 0.0)
            kept += same_picture(originals[path], changed)
    pairs = [(a, b) for a, b in itertools.combinations(photos, 2) if not _same_picture(greys[a], greys[b])]
    different = [hash_distance(originals[a], originals[b]) for a, b in pairs]
    apart = sum(not same_picture(originals[a], originals[b]) for a, b in pairs)
    same_size = [hash_distance(originals[a], originals[b]) for a, b in pairs if sizes[a] == sizes[b]]
    print(f"{len(photos)} distinct photos, {len(photos) * len(RETOUCHES)} retouches, {len(different)} different pairs")
    print(f"{'retouch':<18} {'median':>6} {'max':>4}")
    for name, distances in retouch.items():
        print(f"{name:<18} {statistics.median(distances):>6} {max(distances):>4}")
    all_retouches = [d for ds in retouch.values() for d in ds]
    print(f"largest retouch distance: {max(all_retouches)}; smallest different-photo distance: {min(different)}")
    print(f"largest share of the set bits a retouch changed: {max(shares):.3f}")
    print(f"different photos, median distance: {statistics.median(different)}")
    if same_size:
        closest = min(same_size)
        print(f"{len(same_size)} different pairs of one size (the only ones a fix could follow): smallest {closest}")
    print(
        f"same_picture ({SAME_PICTURE_BITS} bits, share): {kept} of {len(all_retouches)} retouches kept, "
        f"{apart} of {len(different)} different pairs told apart"
    )


if __name__ == "__main__":
    main()
