"""The imaging pipeline on real photos: orientation, smart crop, colour, alpha, formats, geometry."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from icc import wide_gamut_profile
from PIL import Image, ImageCms, ImageFilter, JpegImagePlugin

from thumbctl.core.errors import ItemFailure
from thumbctl.core.profile import Ratio
from thumbctl.imaging import (
    CropAnalysis,
    SourceDecoder,
    decode_source,
    encode,
    output_geometry,
    probe,
    resample,
)

from conftest import SAMPLE_IMAGES
from support import ihdr_png

#: Small copies of the EXIF orientation examples (see tests/data/README.md), shipped with the tests.
ORIENTATION_DATA = Path(__file__).parent / "data" / "orientation"
LIMIT = 100_000_000
RATIOS = [Ratio(1, 1), Ratio(4, 3), Ratio(16, 9), Ratio(3, 4), Ratio(9, 16), Ratio(3, 1), Ratio(1, 5)]


def to_bytes(image: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **params)
    return buf.getvalue()


def render(
    data: bytes,
    ratio: Ratio,
    size: int = 256,
    *,
    crop: str = "center",
    focus=None,
    fmt: str = "jpeg",
    upscale: bool = False,
    background: str = "#ffffff",
    keep_alpha: bool = False,
):
    info = probe(io.BytesIO(data), data[:32], LIMIT)
    geometry = output_geometry(info.width, info.height, ratio, size, upscale)
    decoded = decode_source(
        data, info.format, LIMIT, geometry.out_w / geometry.crop_w, background=background, keep_alpha=keep_alpha
    )
    choice = CropAnalysis(decoded.image, decoded.width, decoded.height, crop).choose(geometry, focus)
    image = resample(decoded, choice.box, geometry.out_w, geometry.out_h)
    return image, choice, geometry, encode(image, fmt, 85)


def mean_abs_diff(a: Image.Image, b: Image.Image, size: int = 32) -> float:
    a = a.convert("L").resize((size, size), Image.Resampling.BOX)
    b = b.convert("L").resize((size, size), Image.Resampling.BOX)
    return sum(abs(x - y) for x, y in zip(a.tobytes(), b.tobytes(), strict=True)) / (size * size)


# -- orientation ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Landscape", "Portrait"])
def test_all_eight_exif_orientations_match_orientation_1(kind: str) -> None:
    reference, *_ = render((ORIENTATION_DATA / f"{kind}_1.jpg").read_bytes(), Ratio(4, 3))
    for orientation in range(2, 9):
        image, *_ = render((ORIENTATION_DATA / f"{kind}_{orientation}.jpg").read_bytes(), Ratio(4, 3))
        assert image.size == reference.size
        assert mean_abs_diff(image, reference) < 6.0, f"{kind}_{orientation}"  # grey levels of 255


#: EXIF orientation -> how to store an upright picture so that orientation turns it upright again.
STORED_AS = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def test_orientation_is_applied_to_synthetic_rotations() -> None:
    upright = Image.open(SAMPLE_IMAGES / "orientation" / "Landscape_1.jpg").convert("RGB")
    inverse = {o: method for o, method in STORED_AS.items() if method is not None}
    reference, *_ = render(to_bytes(upright, "JPEG", quality=95), Ratio(16, 9))
    for orientation, method in inverse.items():
        exif = Image.Exif()
        exif[0x0112] = orientation
        stored = to_bytes(upright.transpose(method), "JPEG", quality=95, exif=exif.tobytes())
        image, *_ = render(stored, Ratio(16, 9))
        assert mean_abs_diff(image, reference) < 4.0, orientation


@pytest.mark.parametrize("container", ["TIFF", "PNG", "WEBP", "AVIF"])
def test_orientation_is_applied_once_in_every_container(container: str) -> None:
    upright = Image.open(SAMPLE_IMAGES / "orientation" / "Landscape_1.jpg").convert("RGB")
    upright.thumbnail((300, 300))
    reference, *_ = render(to_bytes(upright, "PNG"), Ratio(16, 9), size=128)
    inverse = STORED_AS
    for orientation, method in inverse.items():
        stored = upright if method is None else upright.transpose(method)
        exif = Image.Exif()
        exif[0x0112] = orientation
        tagged = {"tiffinfo": {0x0112: orientation}} if container == "TIFF" else {"exif": exif.tobytes()}
        lossless = {"lossless": True} if container == "WEBP" else {"quality": 95} if container == "AVIF" else {}
        image, *_ = render(to_bytes(stored, container, **tagged, **lossless), Ratio(16, 9), size=128)
        assert image.size == reference.size and mean_abs_diff(image, reference) < 4.0, (container, orientation)


# -- crop policies -------------------------------------------------------------------------


def pasted(photo: Path, where: float) -> tuple[bytes, tuple[int, int, int, int]]:
    """A real photo pasted onto a wide, smooth, low-contrast canvas at ``where`` (0..1 across)."""
    subject = Image.open(photo).convert("RGB")
    subject.thumbnail((400, 400))
    canvas = Image.linear_gradient("L").resize((1600, 400)).point(lambda v: 110 + v // 16).convert("RGB")
    canvas = canvas.filter(ImageFilter.GaussianBlur(8))
    left = round((canvas.width - subject.width) * where)
    top = (canvas.height - subject.height) // 2
    canvas.paste(subject, (left, top))
    return to_bytes(canvas, "JPEG", quality=92), (left, top, left + subject.width, top + subject.height)


def coverage(box: tuple[int, int, int, int], region: tuple[int, int, int, int]) -> float:
    w = max(0, min(box[2], region[2]) - max(box[0], region[0]))
    h = max(0, min(box[3], region[3]) - max(box[1], region[1]))
    return w * h / ((region[2] - region[0]) * (region[3] - region[1]))


SUBJECTS = sorted((SAMPLE_IMAGES / "unsplash").glob("*.jpg")) + [SAMPLE_IMAGES / "public-domain" / "sk-astronaut.png"]


@pytest.mark.parametrize("where", [0.05, 0.2, 0.8, 0.95])
def test_smart_crop_finds_the_subject_and_beats_center(where: float) -> None:
    smart_total = center_total = 0.0
    for photo in SUBJECTS:
        data, region = pasted(photo, where)
        _, smart, *_ = render(data, Ratio(1, 1), crop="smart")
        _, center, *_ = render(data, Ratio(1, 1), crop="center")
        assert coverage(smart.box, region) >= 0.7, (photo.name, smart, region)
        smart_total += coverage(smart.box, region)
        center_total += coverage(center.box, region)
    assert smart_total > center_total


def test_entropy_crop_also_finds_the_subject() -> None:
    data, region = pasted(SUBJECTS[0], 0.9)
    _, choice, *_ = render(data, Ratio(1, 1), crop="entropy")
    assert choice.policy == "entropy" and coverage(choice.box, region) >= 0.7


@pytest.mark.parametrize("focus", [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.3, 0.6)])
@pytest.mark.parametrize("ratio", [Ratio(1, 1), Ratio(9, 16), Ratio(3, 1)])
def test_a_focal_point_stays_inside_the_crop(focus: tuple[float, float], ratio: Ratio) -> None:
    data = (SAMPLE_IMAGES / "unsplash" / "rachel-hisko-rEM3cK8F1pk.jpg").read_bytes()
    _, choice, geometry, _ = render(data, ratio, crop="smart", focus=focus)
    info = probe(io.BytesIO(data), data[:32], LIMIT)
    x, y = focus[0] * info.width, focus[1] * info.height
    left, top, right, bottom = choice.box
    assert left <= x <= right and top <= y <= bottom and choice.policy == "focus"
    assert (right - left, bottom - top) == (geometry.crop_w, geometry.crop_h)


def test_the_crop_choice_is_recorded_in_source_pixels() -> None:
    data = (SAMPLE_IMAGES / "unsplash" / "seondol-son-skcD9ONunJw.jpg").read_bytes()
    _, choice, geometry, _ = render(data, Ratio(1, 1), crop="smart")
    doc = choice.to_json()
    assert doc["policy"] == "smart" and 0 < doc["score"] <= 1
    left, top, right, bottom = doc["box"]
    assert (right - left, bottom - top) == (geometry.crop_w, geometry.crop_h) == (1200, 1200)


# -- colour ----------------------------------------------------------------------------------


def delta_e(a: Image.Image, b: Image.Image) -> float:
    """Mean CIE76 colour difference of two sRGB images (compared on a 48x48 copy)."""
    to_lab = ImageCms.buildTransform(ImageCms.createProfile("sRGB"), ImageCms.createProfile("LAB"), "RGB", "LAB")
    la, lb = (ImageCms.applyTransform(i.convert("RGB").resize((48, 48), Image.Resampling.BOX), to_lab) for i in (a, b))
    total = 0.0
    pixels = zip(zip(*[iter(la.tobytes())] * 3, strict=True), zip(*[iter(lb.tobytes())] * 3, strict=True), strict=True)
    for (l1, a1, b1), (l2, a2, b2) in pixels:
        total += math.sqrt(((l1 - l2) * 100 / 255) ** 2 + (a1 - a2) ** 2 + (b1 - b2) ** 2)
    return total / (48 * 48)


@pytest.fixture(scope="module")
def coffee() -> Image.Image:
    return Image.open(SAMPLE_IMAGES / "public-domain" / "sk-coffee.png").convert("RGB")


@pytest.mark.parametrize("description", ["thumbctl test wide-gamut RGB", "wide gamut, not sRGB"])
def test_a_wide_gamut_profile_is_converted_to_srgb(coffee: Image.Image, description: str) -> None:
    """Whatever its name says: a profile is judged by what it does to colours."""
    icc = wide_gamut_profile(description)
    to_wide = ImageCms.buildTransform(
        ImageCms.createProfile("sRGB"), ImageCms.ImageCmsProfile(io.BytesIO(icc)), "RGB", "RGB"
    )
    wide = ImageCms.applyTransform(coffee, to_wide)
    wide.info.pop("icc_profile", None)  # applyTransform tags its output; embed explicitly below
    reference, *_ = render(to_bytes(coffee, "PNG"), Ratio(3, 2), size=300, fmt="png")
    managed, *_ = render(to_bytes(wide, "PNG", icc_profile=icc), Ratio(3, 2), size=300, fmt="png")
    ignored, *_ = render(to_bytes(wide, "PNG"), Ratio(3, 2), size=300, fmt="png")
    assert delta_e(managed, reference) < 2.0
    assert delta_e(ignored, reference) > 3 * delta_e(managed, reference)


@pytest.mark.parametrize("container", ["JPEG", "TIFF"], ids=["adobe-inverted-cmyk-jpeg", "plain-cmyk-tiff"])
def test_cmyk_sources_come_out_in_the_right_colours(coffee: Image.Image, container: str) -> None:
    cmyk = coffee.convert("CMYK")
    params = {"quality": 95} if container == "JPEG" else {}
    reference, *_ = render(to_bytes(coffee, "PNG"), Ratio(3, 2), size=300, fmt="png")
    image, *_ = render(to_bytes(cmyk, container, **params), Ratio(3, 2), size=300, fmt="png")
    assert image.mode == "RGB" and delta_e(image, reference) < 4.0


@pytest.mark.parametrize("crop", ["smart", "entropy", "center"])
@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
@pytest.mark.parametrize("fmt", ["png", "webp", "jpeg"])
def test_every_crop_policy_renders_sources_with_transparency(crop: str, mode: str, fmt: str) -> None:
    """The crop analysis works on an opaque copy whatever the source's channels (the smart
    crop once failed on every source with alpha kept for PNG, WebP and AVIF)."""
    rgba = Image.new("RGBA", (300, 200), (0, 0, 0, 0))
    rgba.paste((230, 40, 40, 255), (180, 40, 260, 160))
    source = rgba.convert(mode)  # P: a palette with a transparent entry
    keep_alpha = fmt != "jpeg"
    image, choice, geometry, encoded = render(
        to_bytes(source, "PNG"), Ratio(1, 1), size=100, crop=crop, fmt=fmt, keep_alpha=keep_alpha
    )
    assert image.size == (100, 100) and choice.policy == crop
    assert image.mode == ("RGBA" if keep_alpha else "RGB")
    with Image.open(io.BytesIO(encoded)) as output:
        assert output.size == (100, 100)


def test_transparency_is_flattened_onto_the_background() -> None:
    rgba = Image.new("RGBA", (200, 100), (0, 255, 0, 0))
    rgba.paste((200, 0, 0, 255), (50, 0, 150, 100))
    data = to_bytes(rgba, "PNG")
    white, *_ = render(data, Ratio(2, 1), size=100)
    assert white.getpixel((2, 25)) == (255, 255, 255)
    black, *_ = render(data, Ratio(2, 1), size=100, background="#000000")
    assert black.getpixel((2, 25)) == (0, 0, 0)
    edge = white.getpixel((25, 25))  # where red meets transparency: no green fringe
    assert edge[1] <= max(edge[2], 8) + 4


def test_alpha_is_kept_premultiplied_for_formats_that_have_it() -> None:
    rgba = Image.new("RGBA", (201, 101), (0, 255, 0, 0))
    rgba.paste((200, 0, 0, 255), (50, 0, 151, 101))
    image, *_ = render(to_bytes(rgba, "PNG"), Ratio(2, 1), size=67, fmt="png", keep_alpha=True)
    assert image.mode == "RGBA"
    for x in range(image.width):
        r, g, b, a = image.getpixel((x, 10))
        assert a == 0 or g <= 2, (x, (r, g, b, a))  # never a green halo from the transparent pixels


def test_palette_with_transparency_and_one_bit_sources() -> None:
    palette = Image.new("P", (120, 60), 0)
    palette.putpalette([0, 0, 255] + [255, 0, 0] * 255)
    palette.paste(1, (60, 0, 120, 60))
    image, *_ = render(to_bytes(palette, "PNG", transparency=0), Ratio(2, 1), size=60)
    assert image.getpixel((5, 15)) == (255, 255, 255) and image.getpixel((50, 15))[0] > 200
    gif = to_bytes(palette, "GIF", transparency=0)
    assert render(gif, Ratio(2, 1), size=60)[0].getpixel((5, 15)) == (255, 255, 255)
    onebit = Image.new("1", (64, 64), 0)
    onebit.paste(1, (0, 0, 30, 64))  # an edge inside an output pixel: averaging shows grey there
    mono, *_ = render(to_bytes(onebit, "PNG"), Ratio(1, 1), size=16)
    values = sorted(set(mono.convert("L").tobytes()))
    assert values[0] < 10 and values[-1] > 245 and len(values) > 2  # resampled, not nearest-neighbour


#: mode -> (colour of the left half, colour of the right half, the tRNS value naming the right half)
COLOUR_KEYS = {
    "RGB": ((200, 30, 30), (30, 30, 200), (30, 30, 200)),
    "L": (60, 200, 200),
    "1": (0, 1, 255),
    "I;16": (9000, 60000, 60000),
}


@pytest.mark.parametrize("mode", sorted(COLOUR_KEYS))
def test_a_transparent_colour_key_is_flattened_or_kept_as_alpha(mode: str) -> None:
    left, right, key = COLOUR_KEYS[mode]
    source = Image.new(mode, (120, 60), left)
    source.paste(Image.new(mode, (60, 60), right), (60, 0))
    data = to_bytes(source, "PNG", transparency=key)
    flat, *_ = render(data, Ratio(2, 1), size=60, background="#00ff00")
    assert flat.mode == "RGB" and flat.getpixel((50, 15)) == (0, 255, 0)
    assert flat.getpixel((5, 15)) != (0, 255, 0)
    image, _, _, encoded = render(data, Ratio(2, 1), size=60, fmt="png", keep_alpha=True)
    assert image.mode == "RGBA" and image.getpixel((50, 15))[3] == 0 and image.getpixel((5, 15))[3] == 255
    with Image.open(io.BytesIO(encoded)) as output:
        assert output.mode == "RGBA" and "transparency" not in output.info


def test_sixteen_bit_sources_are_rescaled_not_clamped() -> None:
    gradient = Image.new("I;16", (256, 64))
    gradient.putdata([x * 257 for _ in range(64) for x in range(256)])
    image, *_ = render(to_bytes(gradient, "PNG"), Ratio(4, 1), size=256)
    row = [image.getpixel((x, 32))[0] for x in (8, 128, 247)]
    assert row[0] < 20 and 100 < row[1] < 156 and row[2] > 235


@pytest.mark.parametrize(("top", "expected"), [(1.0, (4, 128, 251)), (255.0, (4, 128, 251)), (1000.0, (16, 255, 255))])
def test_floating_point_tiffs_are_scaled_by_their_convention(top: float, expected: tuple[int, int, int]) -> None:
    """0..1 data (the usual convention) and 0..255 data both give the full grey range; larger values clamp."""
    gradient = Image.new("F", (256, 64))
    gradient.putdata([x / 255 * top for _ in range(64) for x in range(256)])
    image, *_ = render(to_bytes(gradient, "TIFF"), Ratio(4, 1), size=256)
    row = tuple(image.getpixel((x, 32))[0] for x in (4, 128, 251))
    assert all(abs(got - want) <= 2 for got, want in zip(row, expected, strict=True)), row


def test_animated_and_multi_page_sources_give_their_first_frame() -> None:
    frames = [Image.new("RGB", (60, 60), colour) for colour in ((250, 0, 0), (0, 250, 0), (0, 0, 250))]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:], duration=100)
    tiff = io.BytesIO()
    frames[0].save(tiff, "TIFF", save_all=True, append_images=frames[1:])
    for data in (gif.getvalue(), tiff.getvalue()):
        image, *_ = render(data, Ratio(1, 1), size=20)
        r, g, b = image.getpixel((10, 10))
        assert r > 200 and g < 40 and b < 40


# -- geometry, formats, determinism, limits ------------------------------------------------------


@pytest.mark.parametrize("source", [(1, 1), (3, 2), (2000, 10), (10, 2000), (640, 427), (4000, 3000), (1267, 1600)])
@pytest.mark.parametrize("size", [1, 16, 512])
@pytest.mark.parametrize("container", ["PNG", "JPEG"])
def test_exact_output_dimensions(source: tuple[int, int], size: int, container: str) -> None:
    data = to_bytes(Image.new("RGB", source, (90, 120, 150)), container)
    for ratio in RATIOS:
        image, _, geometry, encoded = render(data, ratio, size=size)
        assert image.size == (geometry.out_w, geometry.out_h) and min(image.size) >= 1
        assert max(image.size) <= size
        assert abs(geometry.crop_w * ratio.h - geometry.crop_h * ratio.w) <= max(ratio.w, ratio.h)
        with Image.open(io.BytesIO(encoded)) as decoded:
            assert decoded.size == image.size


def test_small_sources_are_not_upscaled_unless_asked() -> None:
    data = (SAMPLE_IMAGES / "public-domain" / "sk-rocket.jpg").read_bytes()  # 640x427
    _, _, geometry, _ = render(data, Ratio(1, 1), size=1024)
    assert (geometry.out_w, geometry.out_h, geometry.limited) == (427, 427, True)
    _, _, bigger, _ = render(data, Ratio(1, 1), size=1024, upscale=True)
    assert (bigger.out_w, bigger.out_h, bigger.limited) == (1024, 1024, False)


@pytest.mark.parametrize("fmt", ["jpeg", "webp", "avif", "png"])
def test_every_output_format_is_deterministic_and_tagged_srgb(fmt: str) -> None:
    data = (SAMPLE_IMAGES / "unsplash" / "alfred-schrock-shoE2y51uX0.jpg").read_bytes()
    first = render(data, Ratio(4, 3), crop="smart", fmt=fmt)[3]
    second = render(data, Ratio(4, 3), crop="smart", fmt=fmt)[3]
    assert first == second
    with Image.open(io.BytesIO(first)) as image:
        assert image.format == {"jpeg": "JPEG", "webp": "WEBP", "avif": "AVIF", "png": "PNG"}[fmt]
        profile = ImageCms.ImageCmsProfile(io.BytesIO(image.info["icc_profile"]))
        assert "srgb" in profile.profile.profile_description.lower()
        assert "exif" not in image.info


def test_jpeg_sources_are_decoded_reduced_with_twice_the_needed_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    data = (SAMPLE_IMAGES / "unsplash" / "seondol-son-skcD9ONunJw.jpg").read_bytes()  # 1600x1200
    drafts: list[tuple[int, int]] = []
    original = JpegImagePlugin.JpegImageFile.draft

    def spy(self: Image.Image, mode: str | None, size: tuple[int, int] | None):  # type: ignore[no-untyped-def]
        drafts.append(size)
        return original(self, mode, size)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    decode_source(data, "jpeg", LIMIT, 128 / 1200)
    assert drafts == [(2 * 128 * 1600 // 1200 + 1, 2 * 128)]  # DCT scaling keeps 2x headroom


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
@pytest.mark.parametrize("needed", [1.0, 0.6, 0.5, 0.26, 0.1])
def test_decode_is_box_reduced_once_but_never_below_what_the_outputs_need(mode: str, needed: float) -> None:
    data = to_bytes(Image.new(mode, (400, 300), (200, 100, 50, 128)[: len(mode)]), "png")
    decoded = decode_source(data, "png", LIMIT, needed, keep_alpha=True)
    assert decoded.image.mode == mode
    assert decoded.image.width >= 400 * needed and decoded.image.height >= 300 * needed
    assert decoded.image.width < 2 * 400 * needed or decoded.image.width == 400


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_the_formats_of_one_size_share_a_reduction_and_a_resample_only_where_alpha_cannot_differ(mode: str) -> None:
    """WebP keeps alpha and JPEG does not: without transparency both render from one reduction and
    one resample, with the same pixels as a decoder and a resample of their own; with it, each has its own."""
    data = to_bytes(Image.new(mode, (400, 300), (200, 100, 50, 128)[: len(mode)]), "png")
    box = (50, 0, 350, 300)
    decoder = SourceDecoder(data, "png", LIMIT)
    kept, flat = (decoder.decoded(0.3, keep_alpha=keep) for keep in (True, False))
    assert (kept is flat) == (mode == "RGB")
    first, again = resample(kept, box, 64, 64), resample(kept, box, 64, 64)
    assert first is again and resample(kept, (0, 0, 300, 300), 64, 64) is not first
    alone = resample(SourceDecoder(data, "png", LIMIT).decoded(0.3, keep_alpha=True), box, 64, 64)
    assert alone.mode == first.mode and alone.tobytes() == first.tobytes()
    for fmt in ("webp", "jpeg") if mode == "RGB" else ("webp",):
        assert encode(first, fmt, 85) == encode(alone, fmt, 85)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "unsupported_format"),
        (b"plain text, not a photo", "unsupported_format"),
        (b"\xff\xd8\xff\xe0" + bytes(60), "corrupt_image"),
        (ihdr_png(30_000, 30_000), "too_many_pixels"),
    ],
    ids=["zero-bytes", "text", "corrupt-header", "bomb"],
)
def test_hostile_inputs_fail_with_their_code_before_any_full_decode(data: bytes, code: str) -> None:
    with pytest.raises(ItemFailure) as info:
        decode_source(data, "png" if data.startswith(b"\x89PNG") else "jpeg", LIMIT, 0.1)
    assert info.value.code == code


def test_a_truncated_jpeg_fails_corrupt_image_when_decoded() -> None:
    data = (SAMPLE_IMAGES / "public-domain" / "sk-rocket.jpg").read_bytes()
    with pytest.raises(ItemFailure) as info:
        decode_source(data[: len(data) // 2], "jpeg", LIMIT, 0.5)
    assert info.value.code == "corrupt_image"


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (
            to_bytes(Image.new("RGB", (40, 30)), "JPEG", icc_profile=b"not a profile" * 10),
            "embedded colour profile is unusable: cannot open profile from string",
        ),
        (b"\xff\xd8\xff" + ihdr_png(4, 4), "jpeg data does not decode: unrecognised data"),
    ],
    ids=["garbage-icc-profile", "jpeg-magic-png-body"],
)
def test_undecodable_sources_fail_with_a_plain_one_line_detail(data: bytes, detail: str) -> None:
    with pytest.raises(ItemFailure) as info:
        decode_source(data, "jpeg", LIMIT, 0.5)
    assert (info.value.code, info.value.detail) == ("corrupt_image", detail)


def heic_bytes() -> bytes:
    pillow_heif = pytest.importorskip("pillow_heif", reason="HEIC needs the optional extra thumbctl[heif]")
    pillow_heif.register_heif_opener()
    image = Image.open(SAMPLE_IMAGES / "public-domain" / "sk-coffee.png").convert("RGB")
    return to_bytes(image, "HEIF", quality=80)


def test_heic_sources_render_with_the_optional_extra() -> None:
    data = heic_bytes()
    image, _, geometry, _ = render(data, Ratio(1, 1), size=128)
    assert probe(io.BytesIO(data), data[:32], LIMIT).format == "heif"
    assert image.size == (geometry.out_w, geometry.out_h) == (128, 128)


def test_heic_without_the_extra_fails_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from thumbctl.imaging import formats

    monkeypatch.setattr(formats, "heif_available", lambda: False)
    head = b"\x00\x00\x00\x1cftypheic\x00\x00\x00\x00mif1heicmiaf\x00\x00\x01W"
    with pytest.raises(ItemFailure) as info:
        formats.check_supported("heif", head)
    assert info.value.code == "unsupported_format" and "thumbctl[heif]" in info.value.detail
