"""Placeholder candidates measured by ``bench/placeholders.py`` that thumbctl does not ship, written
in plain Python from their reference algorithms: ThumbHash (https://evanw.github.io/thumbhash/) and
BlurHash (https://blurha.sh), each with its decoder.

The ThumbHash encoder's output was checked byte for byte against the ``thumbhash`` package's on
three photos; images with alpha are not handled (thumbctl's samples are opaque).
"""

from __future__ import annotations

import math
import operator
from functools import lru_cache

from PIL import Image


def _round(value: float) -> int:
    """JavaScript's Math.round (halves up), as the reference encoder rounds."""
    return math.floor(value + 0.5)


def thumbhash(image: Image.Image) -> bytes:
    """The ThumbHash of an opaque RGB image of at most 100 x 100 px."""
    w, h = image.size
    if w > 100 or h > 100:
        raise ValueError(f"{w}x{h} does not fit in 100x100")
    raw = image.tobytes()
    pixels = [(r / 255, g / 255, b / 255) for r, g, b in zip(raw[0::3], raw[1::3], raw[2::3], strict=True)]
    lum = [(r + g + b) / 3 for r, g, b in pixels]
    yellow_blue = [(r + g) / 2 - b for r, g, b in pixels]
    red_green = [r - g for r, g, b in pixels]
    l_limit = 7
    lx = max(1, _round(l_limit * w / max(w, h)))
    ly = max(1, _round(l_limit * h / max(w, h)))
    l_dc, l_ac, l_scale = _encode_channel(lum, w, h, max(3, lx), max(3, ly))
    p_dc, p_ac, p_scale = _encode_channel(yellow_blue, w, h, 3, 3)
    q_dc, q_ac, q_scale = _encode_channel(red_green, w, h, 3, 3)
    landscape = w > h
    header24 = (
        _round(63 * l_dc)
        | (_round(31.5 + 31.5 * p_dc) << 6)
        | (_round(31.5 + 31.5 * q_dc) << 12)
        | (_round(31 * l_scale) << 18)
    )
    header16 = (ly if landscape else lx) | (_round(63 * p_scale) << 3) | (_round(63 * q_scale) << 9) | (landscape << 15)
    factors = [*l_ac, *p_ac, *q_ac]
    out = bytearray([header24 & 255, (header24 >> 8) & 255, header24 >> 16, header16 & 255, header16 >> 8])
    out.extend(bytes((len(factors) + 1) // 2))
    for index, factor in enumerate(factors):
        out[5 + (index >> 1)] |= _round(15 * factor) << ((index & 1) << 2)
    return bytes(out)


def _encode_channel(channel: list[float], w: int, h: int, nx: int, ny: int) -> tuple[float, list[float], float]:
    """DC and normalised AC terms of the DCT (separable: rows first, then columns)."""
    wanted = [(cx, cy) for cy in range(ny) for cx in range(nx) if cx * ny < nx * (ny - cy)]
    cos_x, cos_y = _cosines(w, nx), _cosines(h, ny)
    rows = [channel[y * w : (y + 1) * w] for y in range(h)]
    columns = [[sum(map(operator.mul, row, cos_x[cx])) for row in rows] for cx in range(nx)]
    dc, ac, scale = 0.0, [], 0.0
    for cx, cy in wanted:
        f = sum(map(operator.mul, columns[cx], cos_y[cy])) / (w * h)
        if cx or cy:
            ac.append(f)
            scale = max(scale, abs(f))
        else:
            dc = f
    if scale:
        ac = [0.5 + 0.5 / scale * f for f in ac]
    return dc, ac, scale


@lru_cache(maxsize=64)
def _cosines(length: int, count: int) -> list[list[float]]:
    """The DCT basis along an axis of ``length`` pixels: ``count`` frequencies."""
    return [[math.cos(math.pi / length * k * (i + 0.5)) for i in range(length)] for k in range(count)]


def thumbhash_image(hashed: bytes) -> Image.Image:
    """The image a ThumbHash stands for (about 32 px on its long side), as the reference decoder draws it."""
    header24 = hashed[0] | (hashed[1] << 8) | (hashed[2] << 16)
    header16 = hashed[3] | (hashed[4] << 8)
    l_dc = (header24 & 63) / 63
    p_dc = ((header24 >> 6) & 63) / 31.5 - 1
    q_dc = ((header24 >> 12) & 63) / 31.5 - 1
    l_scale = ((header24 >> 18) & 31) / 31
    if header24 >> 23:
        raise ValueError("ThumbHashes with alpha are not handled here")
    p_scale = ((header16 >> 3) & 63) / 63
    q_scale = ((header16 >> 9) & 63) / 63
    landscape = header16 >> 15
    lx = max(3, 7 if landscape else header16 & 7)
    ly = max(3, header16 & 7 if landscape else 7)
    nibbles = iter(((hashed[5 + (i >> 1)] >> ((i & 1) << 2)) & 15) for i in range(2 * (len(hashed) - 5)))

    def factors(nx: int, ny: int, scale: float) -> list[tuple[int, int, float]]:
        return [
            (cx, cy, (next(nibbles) / 7.5 - 1) * scale)
            for cy in range(ny)
            for cx in range(0 if cy else 1, nx)
            if cx * ny < nx * (ny - cy)
        ]

    l_ac = factors(lx, ly, l_scale)
    p_ac = factors(3, 3, p_scale * 1.25)
    q_ac = factors(3, 3, q_scale * 1.25)
    ratio = (7 if landscape else header16 & 7) / (header16 & 7 if landscape else 7)
    w = _round(32 if ratio > 1 else 32 * ratio)
    h = _round(32 / ratio if ratio > 1 else 32)
    out = []
    for y in range(h):
        fy = [math.cos(math.pi / h * (y + 0.5) * cy) for cy in range(max(ly, 3))]
        for x in range(w):
            fx = [math.cos(math.pi / w * (x + 0.5) * cx) for cx in range(max(lx, 3))]
            lum = l_dc + sum(f * fx[cx] * fy[cy] * 2 for cx, cy, f in l_ac)
            p = p_dc + sum(f * fx[cx] * fy[cy] * 2 for cx, cy, f in p_ac)
            q = q_dc + sum(f * fx[cx] * fy[cy] * 2 for cx, cy, f in q_ac)
            b = lum - 2 / 3 * p
            r = (3 * lum - b + q) / 2
            g = r - q
            out.append(tuple(int(max(0.0, 255 * min(1.0, v))) for v in (r, g, b)))
    image = Image.new("RGB", (w, h))
    image.putdata(out)
    return image


# -- BlurHash ----------------------------------------------------------------------------------------

_BASE83 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz#$%*+,-.:;=?@[]^_{|}~"


def _to_linear(code: int) -> float:
    v = code / 255
    return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4


def _to_code(value: float) -> int:
    v = min(1.0, max(0.0, value))
    return round(v * 12.92 * 255 + 0.5) if v <= 0.0031308 else round((1.055 * v ** (1 / 2.4) - 0.055) * 255 + 0.5)


def _sign_pow(value: float, exponent: float) -> float:
    return math.copysign(abs(value) ** exponent, value)


def _base83(value: int, length: int) -> str:
    return "".join(_BASE83[(value // 83 ** (length - 1 - i)) % 83] for i in range(length))


def blurhash(image: Image.Image) -> str:
    """The BlurHash (https://blurha.sh, the reference encoder) of an RGB image: 4 x 3 components for a
    landscape image, 3 x 4 for a portrait one."""
    w, h = image.size
    nx, ny = (4, 3) if w >= h else (3, 4)
    raw = image.tobytes()
    linear = [
        (_to_linear(r), _to_linear(g), _to_linear(b)) for r, g, b in zip(raw[0::3], raw[1::3], raw[2::3], strict=True)
    ]
    factors = []
    for j in range(ny):
        for i in range(nx):
            norm = 1 if i == j == 0 else 2
            basis_x = [math.cos(math.pi * i * x / w) for x in range(w)]
            basis_y = [math.cos(math.pi * j * y / h) for y in range(h)]
            sums = [0.0, 0.0, 0.0]
            for y in range(h):
                for x in range(w):
                    basis = norm * basis_x[x] * basis_y[y]
                    pixel = linear[y * w + x]
                    for c in range(3):
                        sums[c] += basis * pixel[c]
            factors.append([v / (w * h) for v in sums])
    dc, ac = factors[0], factors[1:]
    largest = max(abs(v) for f in ac for v in f)
    quantised = max(0, min(82, math.floor(largest * 166 - 0.5)))
    maximum = (quantised + 1) / 166
    text = _base83((nx - 1) + (ny - 1) * 9, 1) + _base83(quantised, 1)
    text += _base83((_to_code(dc[0]) << 16) + (_to_code(dc[1]) << 8) + _to_code(dc[2]), 4)
    for f in ac:
        q = [max(0, min(18, math.floor(_sign_pow(v / maximum, 0.5) * 9 + 9.5))) for v in f]
        text += _base83(q[0] * 19 * 19 + q[1] * 19 + q[2], 2)
    return text


def blurhash_image(text: str, size: tuple[int, int]) -> Image.Image:
    """The image a BlurHash stands for, drawn at ``size`` (the reference decoder, punch 1)."""

    def number(part: str) -> int:
        value = 0
        for char in part:
            value = value * 83 + _BASE83.index(char)
        return value

    flag = number(text[0])
    ny, nx = flag // 9 + 1, flag % 9 + 1
    maximum = (number(text[1]) + 1) / 166
    dc = number(text[2:6])
    colours = [(_to_linear(dc >> 16), _to_linear((dc >> 8) & 255), _to_linear(dc & 255))]
    for k in range(1, nx * ny):
        value = number(text[4 + k * 2 : 6 + k * 2])
        q = (value // (19 * 19), (value // 19) % 19, value % 19)
        colours.append(tuple(_sign_pow((v - 9) / 9, 2.0) * maximum for v in q))
    w, h = size
    out = []
    for y in range(h):
        for x in range(w):
            rgb = [0.0, 0.0, 0.0]
            for j in range(ny):
                for i in range(nx):
                    basis = math.cos(math.pi * x * i / w) * math.cos(math.pi * y * j / h)
                    colour = colours[i + j * nx]
                    for c in range(3):
                        rgb[c] += colour[c] * basis
            out.append(tuple(_to_code(v) for v in rgb))
    image = Image.new("RGB", size)
    image.putdata(out)
    return image
