"""A big 8-bit PNG is decoded in bands and reduced as it goes: the same pixels as the whole decode,
the same errors, and far less memory held. Band sizes are shrunk here so small images take many bands."""

from __future__ import annotations

import io
import random
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from thumbctl.core.errors import ItemFailure
from thumbctl.imaging import decode, pngstrips
from thumbctl.imaging.decode import SourceDecoder

LIMIT = 100_000_000


def png_of(mode: str, size: tuple[int, int], **save: object) -> bytes:
    """A PNG with detail in every channel (noise and gradients), so filters and reductions matter."""
    noise = Image.frombytes("L", size, random.Random(7).randbytes(size[0] * size[1]))
    ramp = Image.linear_gradient("L").resize(size)
    other = ramp.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    image = {
        "L": lambda: Image.blend(noise, ramp, 0.5),
        "LA": lambda: Image.merge("LA", (noise, ramp)),
        "RGB": lambda: Image.merge("RGB", (noise, ramp, other)),
        "RGBA": lambda: Image.merge("RGBA", (noise, ramp, other, ramp.transpose(Image.Transpose.ROTATE_180))),
        "P": lambda: Image.merge("RGB", (noise, ramp, other)).quantize(200),
    }[mode]()
    out = io.BytesIO()
    image.save(out, "PNG", **save)
    return out.getvalue()


def decodes(data: bytes, banded: bool, monkeypatch: pytest.MonkeyPatch, scales: tuple[float, ...]) -> list[bytes]:
    """Every scale's decode (with and without alpha kept), as mode, size and pixel bytes."""
    monkeypatch.setattr(pngstrips, "MIN_PIXELS", 0 if banded else 10**12)
    monkeypatch.setattr(pngstrips, "BAND_BYTES", 4 * 301 * 50)  # bands of 42 rows
    trace: list[tuple[str, str, tuple[int, int]]] = []
    monkeypatch.setattr(decode, "TRACE", trace)
    decoder = SourceDecoder(data, "png", LIMIT)
    decoder.expect(scales)
    made = []
    for scale in scales:
        for keep_alpha in (False, True):
            image = decoder.decoded(scale, keep_alpha=keep_alpha).image
            made.append(image.mode.encode() + struct.pack(">II", *image.size) + image.tobytes())
    kinds = {kind for kind, _, _ in trace}
    assert kinds == ({"bands"} if banded else {"decode"})  # each path taken, as asked
    assert sum(kind == "bands" for kind, _, _ in trace) <= 1  # one pass for every scale
    return made


@pytest.mark.parametrize(
    ("mode", "save"),
    [
        ("L", {}),
        ("LA", {}),
        ("RGB", {}),
        ("RGBA", {}),
        ("P", {}),
        ("P", {"transparency": 3}),
        ("L", {"transparency": 7}),
        ("RGB", {"transparency": (1, 2, 3)}),
    ],
)
def test_a_banded_decode_gives_exactly_the_pixels_of_the_whole_decode(
    mode: str, save: dict[str, object], monkeypatch: pytest.MonkeyPatch
):
    data = png_of(mode, (301, 203), **save)  # neither side a multiple of a band or a factor
    scales = (0.5, 0.3, 0.14)  # factors 2, 3 and 7: one pass, in bands of 42 rows
    assert decodes(data, True, monkeypatch, scales) == decodes(data, False, monkeypatch, scales)


def test_an_output_that_needs_the_full_resolution_decodes_whole(monkeypatch: pytest.MonkeyPatch):
    data = png_of("RGB", (301, 203))
    monkeypatch.setattr(pngstrips, "MIN_PIXELS", 0)
    trace: list[tuple[str, str, tuple[int, int]]] = []
    monkeypatch.setattr(decode, "TRACE", trace)
    decoder = SourceDecoder(data, "png", LIMIT)
    decoder.expect([0.9, 0.1])
    assert decoder.decoded(0.1).image.size == (31, 21)
    assert [kind for kind, _, _ in trace] == ["decode"]  # factor 1 asked beside: no bands at all


def with_image_data(data: bytes, edit: Callable[[bytes], bytes]) -> bytes:
    """The PNG with its image data (every IDAT's, joined) edited, in one IDAT chunk."""
    kept, stream, offset = [], b"", 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IDAT":
            if not stream:
                kept.append(b"IDAT")
            stream += body
        else:
            kept.append(data[offset : offset + 12 + length])
        offset += 12 + length
    new = edit(stream)
    idat = struct.pack(">I4s", len(new), b"IDAT") + new + struct.pack(">I", zlib.crc32(new, zlib.crc32(b"IDAT")))
    return data[:8] + b"".join(idat if part == b"IDAT" else part for part in kept)


def bad_filter(stream: bytes) -> bytes:
    rows = bytearray(zlib.decompress(stream))
    rows[(1 + 301 * 3) * 50] = 9  # row 50's filter type: there is no filter 9
    return zlib.compress(bytes(rows))


@pytest.mark.parametrize(
    "edit",
    [lambda s: s[: len(s) // 2], lambda s: b"\0\0" + s[2:], bad_filter],
    ids=["truncated", "not-zlib", "bad-filter"],
)
@pytest.mark.parametrize("banded", [True, False])
def test_damaged_image_data_fails_corrupt_image_on_either_path(
    edit: Callable[[bytes], bytes], banded: bool, monkeypatch: pytest.MonkeyPatch
):
    data = with_image_data(png_of("RGB", (301, 203)), edit)
    monkeypatch.setattr(pngstrips, "MIN_PIXELS", 0 if banded else 10**12)
    monkeypatch.setattr(pngstrips, "BAND_BYTES", 4 * 301 * 7)
    with pytest.raises(ItemFailure) as failure:
        SourceDecoder(data, "png", LIMIT).decoded(0.25)
    assert failure.value.code == "corrupt_image"


def test_the_pixel_limit_is_checked_before_any_band(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pngstrips, "MIN_PIXELS", 0)
    with pytest.raises(ItemFailure) as failure:
        SourceDecoder(png_of("RGB", (301, 203)), "png", 301 * 203 - 1).decoded(0.25)
    assert failure.value.code == "too_many_pixels"


def test_other_pngs_keep_the_whole_decode():
    assert pngstrips.png_layout(png_of("RGB", (40, 30))) is not None
    wide = io.BytesIO()
    Image.new("I;16", (40, 30)).save(wide, "PNG")  # 16-bit: Pillow's mode does not keep the stored bytes
    interlaced = bytearray(png_of("RGB", (40, 30)))
    interlaced[28] = 1
    assert pngstrips.png_layout(wide.getvalue()) is None
    assert pngstrips.png_layout(bytes(interlaced)) is None
    assert pngstrips.png_layout(b"\xff\xd8\xff" + b"\0" * 64) is None


MEASURE = """
import sys
from thumbctl.imaging import SourceDecoder, pngstrips

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

def decode(data, scale, size):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak so far forgotten: VmHWM starts again from VmRSS
    before = status("VmRSS:")
    assert SourceDecoder(data, "png", 100_000_000).decoded(scale).image.size == size
    return (status("VmHWM:") - before) // 1024

pngstrips.MIN_PIXELS = int(sys.argv[2])
decode(open(sys.argv[3], "rb").read(), 0.5, (10, 10))  # modules loaded, caches made
print(decode(open(sys.argv[1], "rb").read(), 512 / 4000, (572, 572)))
"""


def test_a_banded_decode_adds_well_under_the_whole_image_to_the_peak(tmp_path: Path):
    """A 16 MP PNG: its whole decode holds 64 MB (4 bytes a pixel), which the same measurement of the
    whole path shows; the banded one adds about 16 MB (bands of 2 MB, their copies, the allocator's
    keep), held here to half of the whole."""
    ramp = Image.linear_gradient("L").resize((4000, 4000))
    flipped, turned = ramp.transpose(Image.Transpose.FLIP_LEFT_RIGHT), ramp.transpose(Image.Transpose.ROTATE_180)
    path = tmp_path / "big.png"
    Image.merge("RGB", (ramp, flipped, turned)).save(path, compress_level=1)
    Image.new("RGB", (20, 20)).save(tmp_path / "small.png")
    added = []
    for min_pixels in (0, 10**12):  # banded, then whole
        command = [sys.executable, "-c", MEASURE, str(path), str(min_pixels), str(tmp_path / "small.png")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        added.append(int(done.stdout))
    banded, whole = added
    assert whole >= 60 and banded <= whole / 2, (banded, whole)
