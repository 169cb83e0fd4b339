"""Settings: output ratios, render profile and limits, with their parsers.

Everything here is plain immutable data; nothing touches the disk.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from . import encoders

OUTPUT_FORMATS: dict[str, str] = {"jpeg": "jpg", "webp": "webp", "avif": "avif", "png": "png"}
#: Crop policy -> version. The version is part of every derivative key, so a
#: change to a policy's algorithm gives new objects instead of stale ones.
CROP_POLICIES: dict[str, int] = {"smart": 3, "entropy": 3, "center": 1}
#: Bumped whenever decoding, resampling or encoding changes output bytes.
PIPELINE_VERSION = 4
#: The output size whose decode the crop analysis of a source reads, whatever sizes are asked, so a
#: source's window per ratio is chosen once and every size shows the same framing.
ANALYSIS_REFERENCE_SIZE = 512
#: How an output frames its source: ``cover`` fills the ratio's canvas with a crop (the default),
#: ``contain`` places the whole photo on it, padded with the background.
FITS = ("cover", "contain")
#: ``--background transparent``: contain's padding is left transparent (formats with alpha only).
TRANSPARENT = "transparent"
#: Formats whose outputs can be transparent.
ALPHA_OUTPUTS = frozenset({"png", "webp", "avif"})
#: ``--trim-tolerance``: how far (largest channel difference, 0..255) a pixel may be from the
#: border's colour and still count as border.
DEFAULT_TRIM_TOLERANCE = 24

MAX_RATIO_TERM = 10_000
_RATIO_RE = re.compile(r"^\s*(\d+)\s*[:xX/]\s*(\d+)\s*$")
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class SettingError(ValueError):
    """A setting's text cannot be parsed; the message says why, ``code`` (when set) is the error code."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


#: ``s3://…``, ``https://…``: a URL, which a local path must not be taken for.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: The error code of a URL given where only local paths work yet.
URL_NOT_SUPPORTED = "url_not_supported"


def refuse_url(text: str, must: str = "it must be a local path") -> None:
    """Raise SettingError (``url_not_supported``) when ``text`` looks like a URL: as a path it would
    become a local folder ``s3:/bucket`` or a file that "does not exist"."""
    if _URL.match(text.strip()):
        scheme = text.strip().split("://", 1)[0]
        raise SettingError(
            f"{text.strip()!r} is a URL ({scheme}://); {must} (URLs are not supported yet)",
            code=URL_NOT_SUPPORTED,
        )


@dataclass(frozen=True, order=True)
class Ratio:
    """An aspect ratio in lowest terms, e.g. ``Ratio(16, 9)``."""

    w: int
    h: int

    def __str__(self) -> str:
        return f"{self.w}:{self.h}"

    @property
    def slug(self) -> str:
        """The form used in friendly file names: ``16x9``."""
        return f"{self.w}x{self.h}"

    @property
    def value(self) -> float:
        return self.w / self.h


def parse_ratio(text: object) -> Ratio:
    """Parse ``W:H`` (also ``WxH`` or ``W/H``) into a ratio in lowest terms."""
    if not isinstance(text, str):
        raise SettingError(f"ratio must be a string like '4:3', got {text!r}")
    match = _RATIO_RE.match(text)
    if not match:
        raise SettingError(f"bad ratio {text!r}: expected W:H with whole numbers, e.g. 16:9")
    w, h = (_term(digits) for digits in match.groups())
    if not (1 <= w <= MAX_RATIO_TERM and 1 <= h <= MAX_RATIO_TERM):
        raise SettingError(f"bad ratio {shortened(text)}: each side must be 1..{MAX_RATIO_TERM}")
    g = math.gcd(w, h)
    return Ratio(w // g, h // g)


def _term(digits: str) -> int:
    """A side of a ratio; one longer than any allowed side counts as too large (never converted)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= len(str(MAX_RATIO_TERM)) else MAX_RATIO_TERM + 1


def shortened(text: str, limit: int = 40) -> str:
    """``text`` as an error message quotes it: in full, or its start and its length when it is long."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[: limit // 2]!r}… ({len(text)} characters)"


def parse_ratios(values: object) -> tuple[Ratio, ...]:
    """Parse a list of ratios, or strings of ratios separated by spaces or commas.

    Duplicates (``1:1`` and ``2:2``) collapse to one, keeping first-seen order.
    """
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, (list, tuple)):
        raise SettingError(f"ratios must be a list like ['1:1', '16:9'], got {values!r}")
    values = [part for value in values for part in _split_text(value)]
    if not values:
        raise SettingError("ratios must not be empty")
    seen: dict[Ratio, None] = {}
    for value in values:
        seen.setdefault(parse_ratio(value), None)
    return tuple(seen)


def _split_text(value: object) -> list[object]:
    """``"1:1, 4:5"`` -> ``["1:1", "4:5"]``; anything else as one element."""
    return [part for part in re.split(r"[\s,]+", value) if part] if isinstance(value, str) else [value]


#: The longest duration accepted anywhere (100 years): beyond it, times stop being representable.
MAX_DURATION_SECONDS = 100 * 365 * 86400.0


def parse_duration(text: str) -> float:
    """Parse ``90``, ``90s``, ``15m``, ``2h30m``, ``30d`` into seconds (at most 100 years)."""
    return check_duration(_duration_seconds(text), text)


def check_duration(seconds: float, shown: object) -> float:
    if not 0 <= seconds <= MAX_DURATION_SECONDS:
        raise SettingError(f"duration {shown!r} is out of range: at most 100 years")
    return seconds


def _duration_seconds(text: str) -> float:
    stripped = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", stripped):
        return float(stripped)
    pos, total = 0, 0.0
    while match := _DURATION_RE.match(stripped, pos):  # at pos only: a search would retry every later start
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
        pos = match.end()
    if pos != len(stripped) or not stripped:
        raise SettingError(f"bad duration {text!r}: use e.g. 90s, 15m, 2h, 30d")
    return total


@dataclass(frozen=True)
class Profile:
    """What to render for every source: the part of a request that shapes pixels.

    ``size`` and ``format`` are one value, or a tuple of several (a derivative set: every ratio at
    every size in every format); :meth:`variant` is the profile of one (size, format) of it.
    """

    ratios: tuple[Ratio, ...] = (Ratio(1, 1), Ratio(4, 3), Ratio(16, 9))
    size: int | tuple[int, ...] = 512
    format: str | tuple[str, ...] = "jpeg"
    #: One quality for every format, or some formats' (``{"webp": 80}``; the others keep their
    #: defaults); held as a quality per format (:mod:`thumbctl.core.encoders`). Effort likewise.
    quality: int | Mapping[str, int] | None = None
    crop: str = "smart"
    upscale: bool = False
    background: str = "#ffffff"
    effort: int | Mapping[str, int] | None = None
    fit: str = "cover"
    trim: bool = False
    trim_tolerance: int = DEFAULT_TRIM_TOLERANCE

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _one_or_tuple(self.size))
        object.__setattr__(self, "format", _one_or_tuple(self.format))
        for fmt in self.formats:
            if fmt not in OUTPUT_FORMATS:
                raise SettingError(f"unknown format {fmt!r}: choose one of {', '.join(OUTPUT_FORMATS)}")
        if self.crop not in CROP_POLICIES:
            raise SettingError(f"unknown crop policy {self.crop!r}: choose one of {', '.join(CROP_POLICIES)}")
        for size in self.sizes:
            if not 1 <= size <= 16384:
                raise SettingError(f"size must be 1..16384 px, got {size}")
        try:
            object.__setattr__(self, "quality", _per_format(encoders.parse_quality, self.quality))
            object.__setattr__(self, "effort", _per_format(encoders.parse_effort, self.effort))
        except encoders.EncoderSettingError as exc:
            raise SettingError(str(exc)) from None
        check_background(self.background)
        check_fit(self.fit)
        if not 0 <= self.trim_tolerance <= 255:
            raise SettingError(f"trim tolerance must be 0..255, got {self.trim_tolerance}")
        opaque = [fmt for fmt in self.formats if fmt not in ALPHA_OUTPUTS]
        if self.background == TRANSPARENT and opaque:
            raise SettingError(
                f"--background transparent needs a format with alpha (png, webp, avif); {opaque[0]} has none",
                code="transparent_needs_alpha",
            )

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.size if isinstance(self.size, tuple) else (self.size,)

    @property
    def formats(self) -> tuple[str, ...]:
        return self.format if isinstance(self.format, tuple) else (self.format,)

    @property
    def qualities(self) -> dict[str, int]:
        """The quality of each format that has one."""
        return dict(self.quality)  # type: ignore[arg-type]

    @property
    def efforts(self) -> dict[str, int]:
        """The effort of each format that has one (higher: slower and smaller)."""
        return dict(self.effort)  # type: ignore[arg-type]

    def variant(self, size: int, fmt: str) -> Profile:
        """The profile of one derivative: this one at one size in one format."""
        return replace(self, size=size, format=fmt)

    @property
    def extension(self) -> str:
        if not isinstance(self.format, str):
            raise ValueError("a profile of several formats has no single extension; see variant()")
        return OUTPUT_FORMATS[self.format]

    @cached_property
    def encoder_settings(self) -> dict[str, object]:
        """Everything besides the source and the ratio that changes output bytes (for a set of
        sizes or formats: the lists, in the order given). One format's holds only its own
        encoder settings (:func:`thumbctl.core.encoders.key_settings`); a set's, each of its formats'
        quality and the efforts that differ from the earlier fixed ones."""
        if isinstance(self.format, str):
            encoder = encoders.key_settings(self.format, self.qualities, self.efforts)
        else:
            quality = {fmt: q for fmt, q in self.qualities.items() if fmt in self.formats}
            encoder = {"quality": quality, **encoders.native_settings(self.formats, self.efforts)}
        return {
            "size": list(self.size) if isinstance(self.size, tuple) else self.size,
            "format": list(self.format) if isinstance(self.format, tuple) else self.format,
            **encoder,
            "crop": self.crop,
            "crop_version": CROP_POLICIES[self.crop],
            "upscale": self.upscale,
            "background": self.background.lower(),
            "pipeline": PIPELINE_VERSION,
        } | self.fit_settings

    @property
    def fit_settings(self) -> dict[str, object]:
        """The fit and trim settings, only where they differ from the framing every earlier
        derivative had (cover, untrimmed), so existing keys stay valid."""
        settings: dict[str, object] = {}
        if self.fit != "cover":
            settings["fit"] = self.fit
        if self.trim:
            settings["trim"] = self.trim_tolerance
        return settings


def check_fit(fit: object) -> str:
    if fit not in FITS:
        raise SettingError(f"unknown fit {fit!r}: choose one of {', '.join(FITS)}")
    return str(fit)


def check_background(background: str) -> str:
    """``#rrggbb``, or ``transparent``."""
    if background != TRANSPARENT and not re.fullmatch(r"#[0-9a-fA-F]{6}", background):
        raise SettingError(f"background must be #rrggbb or transparent, got {background!r}")
    return background


def _per_format(parse: Callable[[object], dict[str, int]], value: object) -> tuple[tuple[str, int], ...]:
    """A per-format setting as a Profile holds it (hashable): its defaults when None, else parsed."""
    if isinstance(value, tuple):
        value = dict(value)
    return tuple(parse({} if value is None else value).items())


def _one_or_tuple(value: object) -> object:
    """A single value as itself, several as a tuple without duplicates: sizes ascending, formats
    in the order given (a page lists its ``<source>`` formats in that order)."""
    if not isinstance(value, (list, tuple)):
        return value
    unique = tuple(dict.fromkeys(value))
    if all(isinstance(v, int) for v in unique):
        unique = tuple(sorted(unique))
    if not unique:
        raise SettingError("a list of sizes or formats must not be empty")
    return unique[0] if len(unique) == 1 else unique


def parse_list(text: object) -> list[object]:
    """A TOML list, or text separated by commas or spaces: ``320,640`` -> ``['320', '640']``."""
    if isinstance(text, (list, tuple)):
        return list(text)
    if isinstance(text, str):
        return [part for part in re.split(r"[\s,]+", text.strip()) if part]
    return [text]


@dataclass(frozen=True)
class Limits:
    """Per-source, per-request and queue limits (all configurable)."""

    max_pixels: int = 100_000_000
    max_bytes: int = 100 * 1024 * 1024
    max_ratios: int = 12
    max_items: int = 100_000
    #: Admission control: refuse a batch that would bring the runnable
    #: items of the whole ledger over this many.
    max_runnable: int = 1_000_000
    #: Admission control: refuse while the oldest runnable item has waited
    #: longer than this (seconds); 0 turns the check off.
    queue_age_objective: float = 24 * 3600.0


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_count(text: str) -> int:
    """Parse a byte or pixel count: ``100000000``, ``100M``, ``100MB``, ``1.5G``, ``64MiB``.

    Suffixes k/M/G/T are powers of 1000; with ``i`` (``MiB``) powers of 1024.
    """
    match = _SIZE_RE.match(text)
    if not match:
        raise SettingError(f"bad count {text!r}: use e.g. 100000000, 100M, 64MiB")
    number, prefix, binary = float(match.group(1)), match.group(2).lower(), match.group(3).lower()
    base = 1024 if binary.startswith("i") else 1000
    power = " kmgt".index(prefix) if prefix else 0
    scaled = number * base**power
    if not math.isfinite(scaled):
        raise SettingError(f"bad count {shortened(text)}: too large")
    value = int(scaled)
    if value < 1:
        raise SettingError(f"bad count {text!r}: must be at least 1")
    return value


#: The longest whole download of one URL source, unless set (``--download-timeout``).
DEFAULT_DOWNLOAD_SECONDS = 60.0


@dataclass(frozen=True)
class UrlRules:
    """What a URL source may reach and how long its download may take.

    ``allow_urls``: the URL prefixes a source and every redirect must start with (empty: any
    http or https URL). ``allow_networks``: networks (CIDR) admitted although loopback, private,
    link-local or otherwise refused. ``timeout``: one deadline for a whole download, retries and
    redirects included.
    """

    allow_urls: tuple[str, ...] = ()
    allow_networks: tuple[str, ...] = ()
    timeout: float = DEFAULT_DOWNLOAD_SECONDS

    def to_json(self) -> dict[str, object]:
        return {
            "allow_urls": list(self.allow_urls),
            "allow_networks": list(self.allow_networks),
            "timeout": self.timeout,
        }

    @classmethod
    def from_json(cls, doc: object) -> UrlRules:
        """The rules a batch recorded (the worker downloads under the same ones)."""
        if not isinstance(doc, dict):
            return cls()
        return cls(
            tuple(doc.get("allow_urls", ())),
            tuple(doc.get("allow_networks", ())),
            float(doc.get("timeout", DEFAULT_DOWNLOAD_SECONDS)),
        )


def parse_networks(values: object) -> tuple[str, ...]:
    """Networks in CIDR form (``127.0.0.2/32``, ``10.1.0.0/16``, ``fd00::/8``; a bare address is
    one host), normalised; several separated by commas or spaces, or a list."""
    import ipaddress

    networks = []
    for value in parse_list(values):
        try:
            networks.append(str(ipaddress.ip_network(str(value).strip(), strict=False)))
        except ValueError:
            raise SettingError(
                f"bad network {shortened(str(value))}: use CIDR such as 10.0.0.0/8 or fd00::/8"
            ) from None
    return tuple(dict.fromkeys(networks))


def parse_url_prefixes(values: object) -> tuple[str, ...]:
    """URL prefixes (``https://cdn.example.com/photos/``): each http:// or https://, with a host."""
    prefixes = []
    for value in parse_list(values):
        text = str(value).strip()
        scheme, sep, rest = text.partition("://")
        authority, slash, path = rest.partition("/")
        if not sep or scheme.lower() not in ("http", "https") or not authority or "@" in authority:
            raise SettingError(f"bad URL prefix {shortened(text)}: use e.g. https://cdn.example.com/photos/")
        # a prefix without a path ends at the host: https://cdn.example.com never admits cdn.example.com.evil.org
        prefixes.append(f"{scheme.lower()}://{authority.lower()}/{path if slash else ''}")
    return tuple(dict.fromkeys(prefixes))
