"""Per-format encoder settings: quality and effort, their defaults, their parsers, and what of
them enters a derivative key.

Effort is one scale for every format that has one: higher is slower and smaller. WebP's effort
is its ``method`` (0-6); AVIF's is 0-10, given to libavif as ``speed = 10 - effort``. JPEG's
encoder is fixed (progressive, optimised Huffman tables, 4:2:0) and PNG's has no quality.

Before settings were per format, every output had one quality (85 by default) and fixed efforts
(:data:`EARLIER_EFFORT`). A derivative key holds only its own format's settings, and an effort
only when it differs from that earlier value, so the keys of outputs rendered then stay valid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping


class EncoderSettingError(ValueError):
    """A per-format quality or effort that cannot be parsed; the message says why."""


#: Formats with a quality setting, and with an effort setting (its range).
QUALITY_FORMATS: tuple[str, ...] = ("jpeg", "webp", "avif")
EFFORT_RANGES: dict[str, tuple[int, int]] = {"webp": (0, 6), "avif": (0, 10)}
QUALITY_RANGE = (1, 100)
#: The defaults, chosen by measurement (docs/benchmarks.md, "Quality per format").
DEFAULT_QUALITY: dict[str, int] = {"jpeg": 85, "webp": 85, "avif": 71}
DEFAULT_EFFORT: dict[str, int] = {"webp": 4, "avif": 1}
#: The efforts every output had before they were settings: WebP method 4, AVIF speed 8.
EARLIER_EFFORT: dict[str, int] = {"webp": 4, "avif": 2}
#: The quality a PNG key has always held (the one default quality then); PNG ignores it.
PNG_KEY_QUALITY = 85

_PAIR = re.compile(r"^\s*([A-Za-z]+)\s*[:=]\s*([-+]?\d+)\s*$")


def webp_method(effort: int) -> int:
    return effort


def avif_speed(effort: int) -> int:
    return 10 - effort


def parse_quality(raw: object) -> dict[str, int]:
    """``85`` (every format) or ``jpeg:85,webp:80`` (a TOML table too) -> a quality per format;
    formats not named keep their defaults."""
    return _parse(raw, "quality", dict(DEFAULT_QUALITY), {fmt: QUALITY_RANGE for fmt in QUALITY_FORMATS})


def parse_effort(raw: object) -> dict[str, int]:
    """``6`` (every format, within each one's range) or ``webp:6,avif:4`` -> an effort per format."""
    return _parse(raw, "effort", dict(DEFAULT_EFFORT), EFFORT_RANGES)


def _parse(raw: object, what: str, values: dict[str, int], ranges: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    if isinstance(raw, Mapping):
        pairs = [(str(fmt), value) for fmt, value in raw.items()]
    elif _is_whole(raw) or (isinstance(raw, str) and re.fullmatch(r"\s*[-+]?\d+\s*", raw)):
        pairs = [(fmt, raw) for fmt in ranges]
    elif isinstance(raw, str) and raw.strip():
        pairs = [_pair(part, what, ranges) for part in raw.split(",")]
    else:
        raise _error(f"{what} must be a number or FORMAT:N[,FORMAT:N...] (e.g. {_example(ranges)}), got {raw!r}")
    seen: set[str] = set()
    for fmt, value in pairs:
        fmt = fmt.lower()
        if fmt not in ranges:
            raise _error(f"{what}: unknown format {fmt!r}; formats with a {what}: {', '.join(ranges)}")
        if fmt in seen:
            raise _error(f"{what}: {fmt} is given twice")
        seen.add(fmt)
        values[fmt] = _in_range(value, what, fmt, ranges[fmt])
    return values


def _pair(part: str, what: str, ranges: Mapping[str, tuple[int, int]]) -> tuple[str, object]:
    match = _PAIR.match(part)
    if not match:
        raise _error(f"{what}: bad entry {part.strip()[:40]!r}: expected FORMAT:N, e.g. {_example(ranges)}")
    return match.group(1), match.group(2)


def _in_range(value: object, what: str, fmt: str, bounds: tuple[int, int]) -> int:
    low, high = bounds
    text = value.strip() if isinstance(value, str) else ""
    number = int(text) if re.fullmatch(r"[-+]?\d{1,6}", text) else value
    if not _is_whole(number) or not low <= number <= high:
        raise _error(f"{fmt} {what} must be {low}..{high}, got {str(value).strip()[:40]}")
    return int(number)


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _example(ranges: Mapping[str, tuple[int, int]]) -> str:
    return "jpeg:85,webp:80,avif:55" if "jpeg" in ranges else "webp:6,avif:4"


def _error(message: str) -> EncoderSettingError:
    return EncoderSettingError(message)


def native_settings(formats: tuple[str, ...], effort: Mapping[str, int]) -> dict[str, int]:
    """The WebP ``method`` and AVIF ``speed`` of those of ``formats`` whose effort is not the earlier
    fixed one (a batch records them so, and :func:`recorded_encoder` reads them back)."""
    return {
        _NATIVE[fmt]: _NATIVE_VALUE[fmt](effort[fmt])
        for fmt in formats
        if fmt in EFFORT_RANGES and effort[fmt] != EARLIER_EFFORT[fmt]
    }


def key_settings(fmt: str, quality: Mapping[str, int], effort: Mapping[str, int]) -> dict[str, int]:
    """What of the encoder settings enters the key of a ``fmt`` output (see the module notes):
    its quality (a PNG: the quality its key always held) and, for WebP and AVIF, the encoder's own
    ``method`` or ``speed`` only when the effort is not the earlier fixed one."""
    if fmt not in QUALITY_FORMATS:
        return {"quality": PNG_KEY_QUALITY}
    return {"quality": quality[fmt], **native_settings((fmt,), effort)}


_NATIVE = {"webp": "method", "avif": "speed"}
_NATIVE_VALUE = {"webp": webp_method, "avif": avif_speed}


def shown(values: Mapping[str, int]) -> str:
    """``{"jpeg": 85, "webp": 80}`` -> ``jpeg:85,webp:80``, as ``--quality`` takes it."""
    return ",".join(f"{fmt}:{value}" for fmt, value in values.items())


def recorded_encoder(profile: Mapping[str, object], fmt: str) -> tuple[int, int | None]:
    """The (quality, effort) a batch's recorded profile gives a ``fmt`` output. A batch recorded
    before per-format settings has one whole ``quality`` and no efforts: it renders as it did."""
    quality = profile.get("quality", PNG_KEY_QUALITY)
    if isinstance(quality, Mapping):
        quality = quality.get(fmt, PNG_KEY_QUALITY)
    if fmt not in EFFORT_RANGES:
        return int(quality), None
    native = profile.get(_NATIVE[fmt])
    if native is None:
        return int(quality), EARLIER_EFFORT[fmt]
    return int(quality), _NATIVE_VALUE[fmt](int(native))  # both mappings are their own inverse
