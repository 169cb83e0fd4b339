from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, PngImagePlugin

from thumbctl.core.errors import ItemFailure
from thumbctl.imaging import decode_source, encode, probe, sniff_format, verify_output
from thumbctl.imaging.formats import webp_canvas_size

from conftest import SAMPLE_IMAGES
from support import make_image

LIMIT = 100_000_000


def head_of(path: Path) -> bytes:
    return path.read_bytes()[:32]


@pytest.mark.parametrize(
    ("pillow_format", "name", "expected"),
    [
        ("JPEG", "x.png", "jpeg"),
        ("PNG", "x.jpg", "png"),
        ("GIF", "x.gif", "gif"),
        ("WEBP", "x.bin", "webp"),
        ("TIFF", "x.tif", "tiff"),
        ("BMP", "x.bmp", "bmp"),
        ("AVIF", "x.avif", "avif"),
    ],
)
def test_formats_are_recognised_by_content_not_name(
    tmp_path: Path, pillow_format: str, name: str, expected: str
) -> None:
    path = make_image(tmp_path / name, (12, 8), pillow_format)
    assert sniff_format(head_of(path)) == expected
    info = probe(path, head_of(path), LIMIT)
    assert (info.format, info.width, info.height) == (expected, 12, 8)


def test_heif_brand_is_recognised() -> None:
    assert sniff_format(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic") == "heif"


def ihdr_png(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with almost no data behind it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def webp_header(chunk: bytes, width: int, height: int) -> bytes:
    """A WebP whose first chunk (VP8X, lossy VP8 or lossless VP8L) claims width x height, with no image data."""
    if chunk == b"VP8X":
        data = b"\0" * 4 + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    elif chunk == b"VP8 ":
        data = b"\x10\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height) + b"\0" * 8
    else:
        data = b"\x2f" + struct.pack("<I", (width - 1) | (height - 1) << 14) + b"\0" * 8
    body = b"WEBP" + chunk + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"", "unsupported_format"),
        (b"hello, I am text in a .jpg\n", "unsupported_format"),
        (b"\xff\xd8\xff\xe0" + b"\x00" * 64, "corrupt_image"),
        (b"\xff\xd8" + b"garbage" * 10, "corrupt_image"),
        (b"\xff\xd8", "corrupt_image"),
        (b"\x89PNG\r\n\x1a\n" + b"garbage" * 10, "corrupt_image"),
        (ihdr_png(20_000, 20_000), "too_many_pixels"),
        (webp_header(b"VP8X", 16383, 16383), "too_many_pixels"),
        (webp_header(b"VP8 ", 16383, 16383), "too_many_pixels"),
        (webp_header(b"VP8L", 16383, 16383), "too_many_pixels"),
        (webp_header(b"VP8X", 16383, 100), "corrupt_image"),  # under the limit: the missing data is what is wrong
    ],
    ids=[
        "zero-bytes",
        "text",
        "corrupt-jpeg-header",
        "jpeg-start-marker-then-garbage",
        "jpeg-start-marker-only",
        "corrupt-png-header",
        "bomb",
        "webp-vp8x-bomb",
        "webp-vp8-bomb",
        "webp-vp8l-bomb",
        "webp-header-only",
    ],
)
def test_hostile_inputs_map_to_codes_from_the_header(tmp_path: Path, content: bytes, code: str) -> None:
    path = tmp_path / "hostile.jpg"
    path.write_bytes(content)
    with pytest.raises(ItemFailure) as info:
        probe(path, content[:32], LIMIT)
    assert info.value.code == code


@pytest.mark.parametrize("chunk", [b"VP8X", b"VP8 ", b"VP8L"])
def test_a_webp_bomb_is_refused_from_its_header_at_render_too(chunk: bytes) -> None:
    content = webp_header(chunk, 16383, 16383)
    with pytest.raises(ItemFailure) as info:
        decode_source(content, "webp", LIMIT, 1.0)
    assert (info.value.code, info.value.detail) == (
        "too_many_pixels",
        "16383x16383 = 268.4 MP is over the limit of 100 MP",
    )


@pytest.mark.parametrize("chunk", [b"VP8X", b"VP8 ", b"VP8L"])
def test_webp_canvas_size_is_read_from_every_first_chunk_kind(chunk: bytes) -> None:
    assert webp_canvas_size(webp_header(chunk, 321, 123)[:32]) == (321, 123)


def test_pixel_limit_is_configurable(tmp_path: Path) -> None:
    path = make_image(tmp_path / "x.png", (100, 100), "PNG")
    assert probe(path, head_of(path), 10_000).width == 100
    with pytest.raises(ItemFailure) as info:
        probe(path, head_of(path), 9_999)
    assert info.value.code == "too_many_pixels"


def test_truncated_file_with_intact_header_passes_the_probe(tmp_path: Path) -> None:
    """A truncated body is only found by decoding, which the render does; the header is fine."""
    data = (SAMPLE_IMAGES / "public-domain" / "sk-rocket.jpg").read_bytes()
    path = tmp_path / "cut.jpg"
    path.write_bytes(data[: len(data) // 3])
    assert probe(path, data[:32], LIMIT).format == "jpeg"


@pytest.mark.parametrize(
    ("name", "upright"),
    [("Landscape_6.jpg", (1800, 1200)), ("Portrait_8.jpg", (1200, 1800)), ("Portrait_3.jpg", (1200, 1800))],
)
def test_dimensions_are_upright_after_exif_orientation(name: str, upright: tuple[int, int]) -> None:
    path = SAMPLE_IMAGES / "orientation" / name
    info = probe(path, head_of(path), LIMIT)
    assert (info.width, info.height) == upright


def test_probe_reads_from_an_open_stream() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (5, 7)).save(buf, "PNG")
    buf.seek(0)
    assert probe(buf, buf.getvalue()[:32], LIMIT).height == 7


@pytest.fixture
def png_decodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Sizes of the PNGs whose pixels are decoded while the test runs."""
    decoded: list[tuple[int, int]] = []
    original = PngImagePlugin.PngImageFile.load

    def spy(self: PngImagePlugin.PngImageFile):  # type: ignore[no-untyped-def]
        decoded.append(self.size)
        return original(self)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", spy)
    return decoded


def png_with_orientation(size: tuple[int, int], orientation: int, *, after_pixels: bool) -> bytes:
    """A PNG whose eXIf chunk (holding only Orientation) comes before or after its image data."""
    buf = io.BytesIO()
    Image.new("RGB", size, (10, 120, 200)).save(buf, "PNG")
    plain = buf.getvalue()
    exif = Image.Exif()
    exif[0x0112] = orientation
    body = exif.tobytes()
    chunk = struct.pack(">I", len(body)) + b"eXIf" + body + struct.pack(">I", zlib.crc32(b"eXIf" + body))
    at = len(plain) - 12 if after_pixels else 8 + 25  # before IEND, or right after IHDR
    return plain[:at] + chunk + plain[at:]


@pytest.mark.parametrize("after_pixels", [False, True], ids=["exif-before-pixels", "exif-after-pixels"])
def test_png_orientation_is_read_without_decoding_pixels(png_decodes: list, after_pixels: bool) -> None:
    data = png_with_orientation((30, 20), 6, after_pixels=after_pixels)
    info = probe(io.BytesIO(data), data[:32], LIMIT)
    assert (info.width, info.height, info.orientation) == (20, 30, 6)
    assert png_decodes == []


def test_a_png_bomb_is_refused_before_its_pixels_are_decoded(png_decodes: list) -> None:
    data = ihdr_png(30_000, 30_000)
    with pytest.raises(ItemFailure) as info:
        probe(io.BytesIO(data), data[:32], LIMIT)
    assert info.value.code == "too_many_pixels"
    assert png_decodes == []


@pytest.mark.parametrize(("orientation", "upright"), [(1, (30, 20)), (3, (30, 20)), (6, (20, 30)), (8, (20, 30))])
def test_tiff_orientation_turns_the_dimensions_once(orientation: int, upright: tuple[int, int]) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (30, 20)).save(buf, "TIFF", tiffinfo={0x0112: orientation})
    info = probe(buf, buf.getvalue()[:32], LIMIT)
    assert (info.width, info.height) == upright


@pytest.mark.parametrize(
    "content",
    [b"\xff\xd8\xff", b"\xff\xd8\xff, then text", b"\xff\xd8\xff" + ihdr_png(4, 4)],
    ids=["magic-only", "text-body", "png-body"],
)
def test_an_unrecognised_header_is_described_in_plain_words(content: bytes) -> None:
    with pytest.raises(ItemFailure) as info:
        probe(io.BytesIO(content), content[:32], LIMIT)
    assert (info.value.code, info.value.detail) == ("corrupt_image", "jpeg header does not decode: unrecognised data")


class _ParserBug(Exception):
    pass


@pytest.mark.parametrize(
    ("raised", "detail"),
    [
        (struct.error("unpack requires a buffer of 4 bytes"), "unpack requires a buffer of 4 bytes"),
        (ZeroDivisionError("division by zero"), "division by zero"),
        (KeyError(273), "273"),
        (_ParserBug("odd"), "_ParserBug: odd"),
    ],
)
def test_whatever_a_header_parser_raises_is_a_corrupt_image(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, detail: str
) -> None:
    """A submit probes every file: one parser exception escaping would end the whole submit."""

    def broken_open(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr("thumbctl.imaging.formats.Image.open", broken_open)
    data = ihdr_png(4, 4)
    with pytest.raises(ItemFailure) as info:
        probe(io.BytesIO(data), data[:32], LIMIT)
    assert (info.value.code, info.value.detail) == ("corrupt_image", f"png header does not decode: {detail}")


def test_a_broken_avif_is_a_corrupt_image_not_a_crash() -> None:
    """libavif's refusals reach Python as RuntimeError; they must not escape the probe (intake would crash)."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buf, "AVIF")
    data = buf.getvalue().replace(b"av01", b"zzzz", 1)  # the primary item's type: no image item left
    with pytest.raises(ItemFailure) as info:
        probe(io.BytesIO(data), data[:32], LIMIT)
    assert info.value.code == "corrupt_image" and info.value.detail.startswith("avif header does not decode: ")


def full_decode_problem(data: bytes) -> bool:
    """Whether a whole-size decode of ``data`` fails (what verification decoded before)."""
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as image:
            image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return True
    return False


@pytest.fixture(scope="module")
def encoded_jpeg() -> bytes:
    """A thumbnail as thumbctl encodes it (progressive, optimised Huffman tables, 4:2:0), of a real photo."""
    with Image.open(sorted(SAMPLE_IMAGES.rglob("*.jpg"))[0]) as photo:
        return encode(photo.convert("RGB").resize((160, 120)), "jpeg", 85)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_jpeg_verification_refuses_exactly_what_a_whole_decode_refuses(encoded_jpeg: bytes, data: st.DataObject):
    """Verification decodes a JPEG at 1/8 scale; every truncation and flipped byte that a
    whole-size decode refuses, it refuses, and it passes what a whole-size decode passes."""
    header_end = encoded_jpeg.index(b"\xff\xda")  # start of the first scan: the header stays readable
    if data.draw(st.booleans(), label="truncate"):
        broken = encoded_jpeg[: data.draw(st.integers(header_end + 4, len(encoded_jpeg) - 1), label="length")]
    else:
        at = data.draw(st.integers(header_end + 12, len(encoded_jpeg) - 3), label="at")
        value = data.draw(st.integers(0, 255), label="value")
        broken = encoded_jpeg[:at] + bytes([value]) + encoded_jpeg[at + 1 :]
    verdict = verify_output(io.BytesIO(broken), "jpeg", 160, 120)
    assert (verdict is not None) == full_decode_problem(broken)


def test_jpeg_verification_refuses_a_truncated_thumbnail(encoded_jpeg: bytes) -> None:
    assert verify_output(io.BytesIO(encoded_jpeg), "jpeg", 160, 120) is None
    verdict = verify_output(io.BytesIO(encoded_jpeg[: len(encoded_jpeg) // 2]), "jpeg", 160, 120)
    assert verdict is not None and verdict.startswith("does not decode as jpeg")
