"""A small RGB matrix/TRC ICC profile (Adobe RGB (1998) primaries), built byte by byte for tests."""

from __future__ import annotations

import struct


def _s15(v: float) -> bytes:
    return struct.pack(">i", round(v * 65536))


def _xyz(x: float, y: float, z: float) -> bytes:
    return b"XYZ " + bytes(4) + _s15(x) + _s15(y) + _s15(z)


def _curve(gamma: float) -> bytes:
    return b"curv" + bytes(4) + struct.pack(">I", 1) + struct.pack(">H", round(gamma * 256)) + bytes(2)


def _desc(text: str) -> bytes:
    ascii_ = text.encode() + b"\0"
    return b"desc" + bytes(4) + struct.pack(">I", len(ascii_)) + ascii_ + bytes(4 + 4 + 2 + 1 + 67)


def wide_gamut_profile(description: str = "thumbctl test wide-gamut RGB") -> bytes:
    """ICC v2 display profile with Adobe RGB (1998) primaries (D50-adapted) and gamma 2.2."""
    tags = [
        (b"desc", _desc(description)),
        (b"wtpt", _xyz(0.9642, 1.0, 0.8249)),
        (b"rXYZ", _xyz(0.6097, 0.3111, 0.0195)),
        (b"gXYZ", _xyz(0.2053, 0.6257, 0.0609)),
        (b"bXYZ", _xyz(0.1492, 0.0632, 0.7446)),
        (b"rTRC", _curve(2.19921875)),
        (b"gTRC", _curve(2.19921875)),
        (b"bTRC", _curve(2.19921875)),
        (b"cprt", b"text" + bytes(4) + b"public domain\0"),
    ]
    table_size = 4 + 12 * len(tags)
    offset = 128 + table_size
    table, body = struct.pack(">I", len(tags)), b""
    for sig, data in tags:
        pad = (-len(data)) % 4
        table += sig + struct.pack(">II", offset + len(body), len(data))
        body += data + bytes(pad)
    size = 128 + table_size + len(body)
    header = (
        struct.pack(">I", size)
        + b"none"
        + bytes([2, 0x10, 0, 0])
        + b"mntr"
        + b"RGB "
        + b"XYZ "
        + bytes(12)
        + b"acsp"
        + bytes(4)
        + bytes(4)
        + bytes(4)
        + bytes(4)
        + bytes(8)
        + struct.pack(">I", 0)
        + _s15(0.9642)
        + _s15(1.0)
        + _s15(0.8249)
        + bytes(4)
        + bytes(16)
        + bytes(28)
    )
    assert len(header) == 128, len(header)
    return header + table + body
