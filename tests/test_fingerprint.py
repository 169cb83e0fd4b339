"""The perceptual hash a crop fix follows a retouch by: a retouch of a photo (brighter, darker, more
contrast, encoded again, a small spot painted over) stays within ``SAME_PICTURE_BITS``; every two
different photos of the samples lie further apart (bench/fingerprint.py measures the corpus)."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image, ImageEnhance, ImageOps

from thumbctl.imaging import probe, sniff_format
from thumbctl.imaging.fingerprint import SAME_PICTURE_BITS, hash_distance, picture_hash, same_picture

from conftest import SAMPLE_IMAGES

PHOTOS = sorted((SAMPLE_IMAGES / "unsplash").glob("*.jpg")) + [
    SAMPLE_IMAGES / "public-domain" / "sk-rocket.jpg",
    SAMPLE_IMAGES / "public-domain" / "sk-coffee.png",
    SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg",
]
LIMIT = 100_000_000


def phash(data: bytes) -> str:
    info = probe(io.BytesIO(data), data[:64], LIMIT)
    return picture_hash(data, sniff_format(data[:64]) or info.format, LIMIT, info.width, info.height)


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=quality)
    return out.getvalue()


def patched(image: Image.Image) -> Image.Image:
    copy = image.convert("RGB")
    w, h = copy.size
    copy.paste((128, 128, 128), (w // 2, h // 5, w // 2 + w // 7, h // 5 + h // 7))
    return copy


RETOUCHES: dict[str, Callable[[Image.Image], bytes]] = {
    "brighter 5%": lambda im: jpeg(ImageEnhance.Brightness(im).enhance(1.05)),
    "darker 15%": lambda im: jpeg(ImageEnhance.Brightness(im).enhance(0.85)),
    "contrast +20%": lambda im: jpeg(ImageEnhance.Contrast(im).enhance(1.2)),
    "re-encoded at 50": lambda im: jpeg(im, 50),
    "a 2% spot painted over": lambda im: jpeg(patched(im)),
}


@pytest.mark.parametrize("path", PHOTOS, ids=lambda p: p.name)
@pytest.mark.parametrize("retouch", RETOUCHES, ids=str)
def test_a_retouch_is_the_same_picture(path: Path, retouch: str) -> None:
    data = path.read_bytes()
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    assert same_picture(phash(data), phash(RETOUCHES[retouch](upright)))


def test_different_photos_are_not() -> None:
    hashes = {path.name: phash(path.read_bytes()) for path in PHOTOS}
    closest = min(hash_distance(a, b) for a, b in itertools.combinations(hashes.values(), 2))
    assert closest > SAME_PICTURE_BITS, hashes


def test_the_hash_is_64_bits_in_16_hex_digits_and_the_same_each_time() -> None:
    data = PHOTOS[0].read_bytes()
    assert phash(data) == phash(data) and len(phash(data)) == 16 and int(phash(data), 16) >= 0


def product_on_white(shape: str, box: tuple[int, int, int, int], colour: str) -> Image.Image:
    from PIL import ImageDraw

    image = Image.new("RGB", (1600, 1067), "white")
    draw = ImageDraw.Draw(image)
    (draw.ellipse if shape == "circle" else draw.rectangle)(box, fill=colour)
    return image


def test_two_small_products_on_white_are_not_one_picture_but_a_retouch_of_one_is() -> None:
    """Few bits are set in such a hash, so two such photos differ by few bits: the share decides."""
    cup = product_on_white("circle", (150, 150, 230, 230), "red")
    box = product_on_white("square", (1300, 800, 1380, 880), "blue")
    assert hash_distance(phash(jpeg(cup)), phash(jpeg(box))) <= SAME_PICTURE_BITS  # the bits alone say "same"
    assert not same_picture(phash(jpeg(cup)), phash(jpeg(box)))
    assert same_picture(phash(jpeg(cup)), phash(jpeg(ImageEnhance.Brightness(cup).enhance(0.9))))
    white, black = Image.new("RGB", (800, 600), "white"), Image.new("RGB", (800, 600), "black")
    assert not same_picture(phash(jpeg(white)), phash(jpeg(black)))  # flat: nothing to compare
