"""Placeholders per source and ratio: the dominant colour (linear light, after colour conversion) and
the tiny WebP data: URI, computed on the analysis copy's window."""

from __future__ import annotations

import base64
import io
import random

import pytest
from icc import wide_gamut_profile
from PIL import Image, ImageCms

from thumbctl.imaging import ANALYSIS_REFERENCE_SIZE, CropAnalysis, SourceDecoder, decode_scale, placeholder_of
from thumbctl.imaging.placeholder import SAMPLE_SIZE, dominant_colour, to_linear, to_srgb

PREFIX = "data:image/webp;base64,"


def rgb_of(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def close(hex_colour: str, expected: tuple[int, int, int], tolerance: int = 3) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(rgb_of(hex_colour), expected, strict=True))


def two_colour(
    size: tuple[int, int], main: tuple[int, int, int], other: tuple[int, int, int], share: float
) -> Image.Image:
    """``main`` on ``share`` of the pixels, scattered (not one block), ``other`` on the rest."""
    rng = random.Random(5)
    count = size[0] * size[1]
    pixels = [main] * round(count * share) + [other] * (count - round(count * share))
    rng.shuffle(pixels)
    image = Image.new("RGB", size)
    image.putdata(pixels)
    return image


@pytest.mark.parametrize(
    ("main", "other"),
    [((200, 30, 40), (240, 240, 235)), ((20, 90, 160), (250, 200, 10)), ((240, 240, 235), (10, 10, 10))],
)
def test_the_dominant_colour_is_the_one_covering_most_of_the_picture(main, other) -> None:
    """70% one colour, 30% another, in large blocks: the hex is the 70% colour, not a mix."""
    image = Image.new("RGB", (100, 60), other)
    image.paste(main, (0, 0, 70, 60))
    assert close(placeholder_of(image, 100, 60, (0, 0, 100, 60)).colour, main)
    assert close(dominant_colour(image), main, tolerance=0)


def test_the_dominant_colour_is_not_the_average_colour() -> None:
    """Pixel-fine 70/30 red and white: the colour is the red, not the pink of their mix."""
    image = two_colour((160, 160), (200, 30, 40), (255, 255, 255), 0.7)
    assert close(placeholder_of(image, 160, 160, (0, 0, 160, 160)).colour, (200, 30, 40), tolerance=0)


def test_a_cluster_s_colour_is_its_mean_in_linear_light() -> None:
    """Black and dark green, scattered half and half, are one cluster: their mean in linear light is
    green 26 (0x1a); a mean of the sRGB codes would say 20."""
    image = two_colour((64, 64), (0, 0, 0), (0, 40, 0), 0.5)
    assert dominant_colour(image) == f"#00{to_srgb((to_linear(0) + to_linear(40)) / 2):02x}00" == "#001a00"


def test_sixty_percent_in_two_shades_beats_forty_percent_of_one_colour() -> None:
    """Two close shades of blue (30% each) form one cluster that outweighs 40% of orange."""
    image = Image.new("RGB", (100, 10), (240, 140, 20))
    image.paste((30, 60, 150), (0, 0, 30, 10))
    image.paste((40, 70, 160), (30, 0, 60, 10))
    red, green, blue = rgb_of(dominant_colour(image))
    assert 30 <= red <= 40 and 60 <= green <= 70 and 150 <= blue <= 160


def test_the_window_decides_the_colour_and_the_tiny_image() -> None:
    """Left half red, right half blue: each half's window gives its own colour and a WebP of its shape."""
    image = Image.new("RGB", (256, 128), (10, 20, 200))
    image.paste((220, 20, 10), (0, 0, 128, 128))
    left = placeholder_of(image, 2048, 1024, (0, 0, 1024, 1024))
    right = placeholder_of(image, 2048, 1024, (1024, 0, 2048, 1024))
    assert close(left.colour, (220, 20, 10)) and close(right.colour, (10, 20, 200))
    wide = placeholder_of(image, 2048, 1024, (0, 0, 2048, 1024))
    with Image.open(io.BytesIO(base64.b64decode(wide.lqip.removeprefix(PREFIX)))) as tiny:
        assert tiny.format == "WEBP" and tiny.size == (SAMPLE_SIZE, SAMPLE_SIZE // 2)
        tiny = tiny.convert("RGB")
        assert all(abs(a - b) <= 40 for a, b in zip(tiny.getpixel((2, 4)), (220, 20, 10), strict=True))
        assert all(abs(a - b) <= 40 for a, b in zip(tiny.getpixel((13, 4)), (10, 20, 200), strict=True))


@pytest.mark.parametrize("size", [(4000, 3000), (640, 480), (3000, 4000), (1024, 100), (16, 16), (7, 5)])
def test_the_tiny_image_stays_under_one_kilobyte_and_decodes(size: tuple[int, int]) -> None:
    """Random pixels (a codec's worst case) that the sample keeps as they are when the window is 16 px."""
    rng = random.Random(size[0])
    fit = min(1.0, 256 / max(size))  # the small copy keeps the source's shape
    small = (max(1, round(size[0] * fit)), max(1, round(size[1] * fit)))
    image = Image.frombytes("RGB", small, rng.randbytes(small[0] * small[1] * 3))
    placeholder = placeholder_of(image, *size, (0, 0, *size))
    assert placeholder.lqip.startswith(PREFIX) and len(placeholder.lqip) <= 1024
    with Image.open(io.BytesIO(base64.b64decode(placeholder.lqip.removeprefix(PREFIX)))) as tiny:
        tiny.load()
        assert max(tiny.size) <= SAMPLE_SIZE
        assert abs(tiny.width / tiny.height - size[0] / size[1]) < 0.35 * size[0] / size[1]


def test_a_fixed_input_gives_a_fixed_colour() -> None:
    gradient = Image.linear_gradient("L").resize((64, 48)).convert("RGB")
    assert placeholder_of(gradient, 64, 48, (0, 0, 64, 48)).colour == "#cecece"


def test_an_icc_tagged_source_gives_its_colour_after_conversion_to_srgb() -> None:
    """A wide-gamut source with its profile: the colour is the one the picture shows in sRGB,
    not the numbers stored in the file."""
    icc = wide_gamut_profile()
    stored = (40, 150, 60)
    image = Image.new("RGB", (600, 400), stored)
    buffer = io.BytesIO()
    image.save(buffer, "PNG", icc_profile=icc)
    to_srgb_transform = ImageCms.buildTransform(
        ImageCms.ImageCmsProfile(io.BytesIO(icc)),
        ImageCms.createProfile("sRGB"),
        "RGB",
        "RGB",
        renderingIntent=ImageCms.Intent.PERCEPTUAL,
    )
    expected = ImageCms.applyTransform(Image.new("RGB", (1, 1), stored), to_srgb_transform).getpixel((0, 0))
    assert max(abs(a - b) for a, b in zip(expected, stored, strict=True)) > 10  # the conversion matters here
    decoder = SourceDecoder(buffer.getvalue(), "png", 10**8)
    copy = decoder.analysis_copy(decode_scale(600, 400, ANALYSIS_REFERENCE_SIZE))
    analysis = CropAnalysis(copy, 600, 400, "smart")
    colour = placeholder_of(analysis.preview(), 600, 400, (100, 0, 500, 400)).colour
    assert close(colour, expected, tolerance=2)
