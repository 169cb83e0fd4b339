"""The settings table: every setting once, with its file key, variable, option, parser, default and help.

Two parts, one :class:`Key` type and one parse path:

* :data:`KEYS`, the settings a flag, a ``THUMBCTL_*`` variable or the config file gives (commands take
  them by name: :mod:`thumbctl.cli.options`);
* :data:`ENVIRONMENT_KEYS`, the settings only a variable gives: how long a busy ledger is waited out,
  and the test hooks for the workers' lease and the host identity. The library reads them where it
  needs them (:func:`environment_value`), in whichever process it runs.

This module imports nothing heavy, so the library's lowest modules (:mod:`thumbctl.core.proc`,
:mod:`thumbctl.core.retries`, :mod:`thumbctl.config.options`) read their settings through it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.encoders import EncoderSettingError, parse_effort, parse_quality
from ..core.errors import ConfigError, UsageError
from ..core.naming import NameTemplateError, check_template
from ..core.profile import (
    CROP_POLICIES,
    DEFAULT_DOWNLOAD_SECONDS,
    FITS,
    OUTPUT_FORMATS,
    Limits,
    Profile,
    SettingError,
    check_background,
    check_duration,
    check_fit,
    parse_count,
    parse_duration,
    parse_list,
    parse_networks,
    parse_ratios,
    parse_url_prefixes,
    refuse_url,
    shortened,
)
from ..core.retries import BusyPolicy
from .userdirs import default_ledger_path

CONFIG_ENV = "THUMBCTL_CONFIG"
PROFILE_ENV = "THUMBCTL_PROFILE"
FLAG_SOURCE = "flag"
DEFAULT_SOURCE = "default"
_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}
#: The longest a variable may ask a busy ledger to be waited out, or a lease to last (a day): beyond it a
#: busy ledger is better reported than waited out.
_DAY = 86400.0


# -- value parsers: raw text (flag, env) or TOML value -> typed value, or SettingError ----------


def _whole(raw: object) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"[-+]?[0-9]+", raw.strip()):  # a sign, so bounds can say "at least"
        try:
            return int(raw)
        except ValueError:  # more digits than Python converts
            limit = f"at most {sys.get_int_max_str_digits()} digits"
            raise SettingError(f"must be a whole number of {limit}, got {shortened(raw.strip())}") from None
    raise SettingError(f"must be a whole number, got {raw!r}")


def _whole_in(low: int, high: int | None = None) -> Callable[[object], int]:
    def parse(raw: object) -> int:
        value = _whole(raw)
        if value < low or (high is not None and value > high):
            bounds = f"{low}..{high}" if high is not None else f"at least {low}"
            raise SettingError(f"must be {bounds}, got {value}")
        return value

    return parse


def _text(raw: object) -> str:
    if not isinstance(raw, str):
        raise SettingError(f"must be a string, got {raw!r}")
    return raw


def _sizes(raw: object) -> str:
    """The ``sizes`` attribute of the markup: a media-condition list (``(min-width: 900px) 33vw,
    100vw``), written into the HTML as it is, so no quote, angle bracket or control character."""
    text = _text(raw).strip()
    parts = [part.strip() for part in text.split(",")]
    if any(ch in text for ch in "\"'<>&;\\`") or not text.isprintable() or not all(parts):
        raise SettingError("must be a sizes list such as '(min-width: 900px) 33vw, 100vw' (no quotes, < >, ;)")
    return ", ".join(parts)


def _base_url(raw: object) -> str:
    """The prefix of every thumbnail URL in the markup and manifests: an ``http(s)://`` URL or a path
    from the site's root (``/img/``), kept with one trailing ``/``."""
    text = _text(raw).strip()
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    web = parts.scheme in ("http", "https") and bool(parts.netloc) and "@" not in parts.netloc
    unsafe = any(ch in text for ch in "\"'<>\\` ") or not text.isprintable()  # written into HTML and JSON as it is
    if not (web or text.startswith("/")) or parts.query or parts.fragment or unsafe:
        raise SettingError("must be an http:// or https:// URL or a path from the site's root, e.g. /img/")
    return text.rstrip("/") + "/"


def _switch(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
        return raw.strip().lower() in _TRUE_WORDS
    raise SettingError(f"must be true or false, got {raw!r}")


def _seconds(raw: object) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw >= 0:
        return check_duration(float(raw), raw)
    if isinstance(raw, str):
        return parse_duration(raw)
    raise SettingError(f"must be a duration such as 90s, 15m, 2h (or seconds), got {raw!r}")


def _seconds_between(low: float, high: float) -> Callable[[object], float]:
    """A plain number of seconds from ``low`` to ``high`` (the variables of the busy policy and the lease)."""

    def parse(raw: object) -> float:
        text = str(raw).strip()
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # also refuses nan and inf
            raise SettingError(f"must be a number of seconds from {low:g} to {high:g}, got {text!r}")
        return value

    return parse


def _positive_seconds(raw: object) -> float:
    seconds = _seconds(raw)
    if seconds <= 0:
        raise SettingError(f"must be a duration over 0, got {raw!r}")
    return seconds


def _count(raw: object) -> int:
    if isinstance(raw, str):
        return parse_count(raw)
    return _whole_in(1)(raw)


def _ledger_target(raw: object) -> Path | str:
    """A ledger file path, or a ``postgresql://`` URL kept as it is (a path would fold its ``//``)."""
    from .ledgerurl import is_server_url  # light: no driver is imported

    if isinstance(raw, str) and is_server_url(raw.strip()):
        return raw.strip()
    if isinstance(raw, str):
        refuse_url(raw, "it must be a local file or a postgresql:// URL")
    return _path(raw)


def _path(raw: object) -> Path:
    if isinstance(raw, Path):
        return raw
    if isinstance(raw, str) and raw.strip():
        refuse_url(raw)
        return Path(raw).expanduser()
    raise SettingError(f"must be a path, got {raw!r}")


def _location(raw: object) -> Path | str:
    """A local folder, or an ``s3://bucket/prefix`` URL kept as text (checked, normalized): a path
    would fold its ``//`` into a local folder ``s3:/bucket``. Other URLs are refused."""
    from .s3location import BadLocation, is_s3, parse_s3  # text only: no S3 client

    if isinstance(raw, str) and is_s3(raw.strip()):
        try:
            return parse_s3(raw.strip()).url
        except BadLocation as exc:
            raise SettingError(str(exc), code=exc.code) from None
    if isinstance(raw, str):
        refuse_url(raw, "it must be a local folder or s3://bucket/prefix")
    return _path(raw)


def _endpoint(raw: object) -> str:
    text = _text(raw).strip()
    if not re.fullmatch(r"https?://[^/\s@]+(/\S*)?", text):  # no user:secret@ part: settings are shown
        raise SettingError("must be an http:// or https:// URL without credentials in it")
    return text


def _profile_list(name: str, convert: Callable[[object], Any]) -> Callable[[object], Any]:
    """One value or several (``320,640`` or a TOML list), each converted; the setting holds one
    value when one is given, else a tuple, checked by :class:`Profile` as a flag is."""

    def parse(raw: object) -> Any:
        values = [convert(part) for part in parse_list(raw)]
        value = values[0] if len(values) == 1 else tuple(values)
        return getattr(Profile(**{name: value}), name)

    return parse


def _per_format(parse: Callable[[object], dict[str, int]]) -> Callable[[object], dict[str, int]]:
    """A per-format quality or effort (:mod:`thumbctl.core.encoders`): every format's value."""

    def parsed(raw: object) -> dict[str, int]:
        try:
            return parse(raw)
        except EncoderSettingError as exc:
            raise SettingError(str(exc)) from None

    return parsed


def _name_template(raw: object) -> str:
    try:
        return check_template(_text(raw))
    except NameTemplateError as exc:
        raise SettingError(str(exc)) from None


def _profile_field(name: str, convert: Callable[[object], Any]) -> Callable[[object], Any]:
    """Convert, then let :class:`Profile` check the value exactly as it checks a flag."""

    def parse(raw: object) -> Any:
        value = convert(raw)
        Profile(**{name: value})
        return value

    return parse


# -- the settings ------------------------------------------------------------------------------


#: Ratios offered by completion; any ``W:H`` is accepted.
COMMON_RATIOS = ("1:1", "4:3", "3:2", "16:9", "4:5", "2:3", "3:4", "9:16", "21:9")
#: Help panels of the setting options.
OUTPUT, RENDER, LIMITS, WORKERS, ADMISSION, LEDGER = "Output", "Render", "Limits", "Workers", "Admission", "Ledger"


def complete_from(choices: Iterable[str]) -> Callable[[str], list[str]]:
    """Completion of one value among ``choices``."""
    offered = tuple(choices)
    return lambda incomplete: [c for c in offered if c.startswith(incomplete)]


def complete_list_of(choices: Iterable[str]) -> Callable[[str], list[str]]:
    """Completion of the next element of a comma-separated list (``avif,w`` -> ``avif,webp``)."""
    offered = tuple(choices)

    def complete(incomplete: str) -> list[str]:
        head, _, last = incomplete.rpartition(",")
        taken = set(head.split(",")) if head else set()
        prefix = f"{head}," if head else ""
        return [prefix + c for c in offered if c.startswith(last) and c not in taken]

    return complete


@dataclass(frozen=True)
class Key:
    """One setting and its command-line option: the file key is ``name``, the env var ``THUMBCTL_`` + the
    name in upper case, the option ``flag`` (``--x/--no-x`` for a switch), shown under ``panel`` in help.
    A setting of :data:`ENVIRONMENT_KEYS` has no flag and no file key; one of :data:`KEYS` without a
    flag (the S3 settings) comes from its variable or the config file."""

    name: str
    flag: str
    parse: Callable[[object], Any]
    default: Callable[[], Any]
    help: str = ""
    panel: str = ""
    metavar: str | None = None
    #: A short option, one meaning across every command (``-r`` is always --ratio).
    short: str = ""
    #: The values completion offers for what has been typed so far.
    complete: Callable[[str], list[str]] | None = None
    switch: bool = False
    repeat: bool = False
    #: The command's parameter name when it differs from ``name`` (``--format`` is ``fmt``).
    param: str = ""
    #: ``db`` is one ledger for every profile, so it may be set only in ``[defaults]``.
    in_profiles: bool = True
    #: What docs/configuration.md says the setting means (markdown), when it says more than ``help``.
    doc: str = ""
    #: The default as docs/configuration.md states it, when it differs by machine.
    doc_default: str = ""

    @property
    def env(self) -> str:
        return f"THUMBCTL_{self.name.upper()}"

    @property
    def param_name(self) -> str:
        return self.param or self.name


_PROFILE = Profile()
_LIMITS = Limits()

_DB_HELP = (
    "Ledger: a file, or postgresql://user@host/dbname for workers on many machines (needs pip install "
    "'thumbctl[postgres]'; the password is shown masked)."
)
_STORE_HELP = "Object store (or s3://): rendered objects, outside OUT; one per ledger; required with a PostgreSQL --db."
_S3_DOC = (
    " (unset: the standard `AWS_*` variables and files decide; [scaling-out.md](scaling-out.md#postgresql-plus-s3))"
)
_TIMEOUT_HELP = "Time limit for each stage (decoding a source, each render); over it, items fail `timeout`. 0: none."
_FORMATS = "[" + "|".join(OUTPUT_FORMATS) + "][,...]"

#: Every setting a flag, a variable or the config file gives, once: its file key, env var, option, parser, default,
#: help and completion. A new setting is one entry here; commands take it by name (see thumbctl.cli.resolution).
# fmt: off
KEYS: tuple[Key, ...] = (
    Key("out", "--out", _location, lambda: Path("thumbs"), "Output folder, or s3://bucket/prefix.", OUTPUT, "DIR|S3",
        doc="where thumbnails are published: a folder, or `s3://bucket/prefix` "
            "([scaling-out.md](scaling-out.md#postgresql-plus-s3))"),
    Key("ratios", "--ratio", parse_ratios, lambda: _PROFILE.ratios,
        "Aspect ratio W:H; repeat (or 1:1,4:5) for several.", RENDER, "W:H", "-r",
        complete_from(COMMON_RATIOS), repeat=True, param="ratio",
        doc='aspect ratios (a list, or one string such as `"1:1 4:5"`; the variable takes `"1:1,4:5"`)'),
    Key("size", "--size", _profile_list("size", _whole), lambda: _PROFILE.size,
        "Longest side of each thumbnail, px; several: 320,640,1280.", RENDER, "PX[,PX...]",
        doc="longest side of each thumbnail; several give every ratio at every size (`sizes = [320, 640]` in a file)"),
    Key("format", "--format", _profile_list("format", _text), lambda: _PROFILE.format,
        "Output format; several: webp,jpeg.", RENDER, _FORMATS, complete=complete_list_of(OUTPUT_FORMATS), param="fmt",
        doc="`jpeg`, `webp`, `avif`, `png`; several give every output in each (`formats = [...]`)"),
    Key("quality", "--quality", _per_format(parse_quality), lambda: _PROFILE.qualities,
        "Quality 1-100: one for every format, or per format: jpeg:85,webp:80,avif:55.", RENDER, "Q|FMT:Q[,...]",
        doc="encoder quality, 1-100: one number for every format, or some formats' (`\"jpeg:85,webp:80\"`, or a "
            "table `{ webp = 80 }`; the others keep their defaults). PNG has none"),
    Key("effort", "--effort", _per_format(parse_effort), lambda: _PROFILE.efforts,
        "Encoder effort, higher = slower and smaller: webp 0-6 (its method), avif 0-10 (libavif speed 10-effort).",
        RENDER, "E|FMT:E[,...]",
        doc="encoder effort, higher is slower and smaller: WebP 0-6 (its `method`), AVIF 0-10 (given to libavif "
            "as `speed = 10 - effort`); one number for both, or per format (`\"webp:6,avif:4\"`). JPEG and PNG "
            "have none"),
    Key("crop", "--crop", _profile_field("crop", _text), lambda: _PROFILE.crop, "Crop policy.", RENDER,
        "[" + "|".join(CROP_POLICIES) + "]", complete=complete_from(CROP_POLICIES),
        doc="`smart`, `entropy` or `center`"),
    Key("upscale", "--upscale", _switch, lambda: _PROFILE.upscale, "Allow outputs larger than the source crop.",
        RENDER, switch=True,
        doc="allow outputs larger than the source crop (variable: `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`)"),
    Key("background", "--background", lambda raw: check_background(_text(raw)), lambda: _PROFILE.background,
        "Colour to flatten transparency and pad contain onto; transparent (png, webp, avif).", RENDER,
        "#RRGGBB|transparent",
        doc="colour transparency is flattened onto and `contain` is padded with; `transparent` leaves the "
            "padding transparent (only with formats that have alpha: png, webp, avif; with jpeg a submit "
            "exits 2, `transparent_needs_alpha`)"),
    Key("fit", "--fit", lambda raw: check_fit(_text(raw)), lambda: _PROFILE.fit,
        "cover: crop to fill the ratio; contain: the whole photo, padded.", RENDER, "[" + "|".join(FITS) + "]",
        complete=complete_from(FITS),
        doc="`cover` crops to fill the ratio (the default); `contain` keeps the whole photo on the ratio's canvas, "
            "padded with `background` ([sellers.md](sellers.md#fit-contain-and-trim)); a manifest item's `fit` "
            "overrides it"),
    Key("trim", "--trim", _switch, lambda: _PROFILE.trim, "First remove a near-uniform border.", RENDER,
        switch=True,
        doc="first remove a near-uniform border (its colour from the photo's outer edge), found once per source "
            "(variable: `1`/`0`, `true`/`false`)"),
    Key("trim_tolerance", "--trim-tolerance", _whole_in(0, 255), lambda: _PROFILE.trim_tolerance,
        "How far (0-255, largest channel difference) a border pixel may be from the border colour.", RENDER,
        "0-255", doc="how far a pixel may be from the border colour (largest channel difference, 0..255) and "
        "still count as border; used with `trim`"),
    Key("name", "--name", _name_template, lambda: None,
        "Thumbnail names in OUT, from {path} {stem} {ratio} {size} {width} {height} {ext}.", OUTPUT, "TEMPLATE",
        doc="thumbnail names ([sellers.md](sellers.md#names))"),
    Key("markup_sizes", "--sizes", _sizes, lambda: None, "The sizes attribute of the markup (default: auto, then "
        "the widest file).", OUTPUT, "SIZES", param="sizes",
        doc="the `sizes` attribute of every `<picture>` (markup and manifests only: changing it renders nothing); "
            "default `auto` (a lazy image is chosen by its laid-out width), then the widest file's width",
        doc_default="`auto, (max-width: Wpx) 100vw, Wpx`"),
    Key("base_url", "--base-url", _base_url, lambda: None, "URL prefix of the thumbnails in the markup (a CDN).",
        OUTPUT, "URL",
        doc="what every thumbnail URL in the markup and manifests starts with (`https://cdn.example.com/img/` or "
            "`/img/`; markup and manifests only: changing it renders nothing); none: paths relative to OUT"),
    Key("documents", "--documents", _location, lambda: None, "Where batch manifests and sheets go. Default: OUT.",
        OUTPUT, "DIR|S3",
        doc="where the batch manifests and contact sheets go (`batches/` there): a folder or `s3://bucket/prefix`, "
            "for example a private one beside a public site bucket; default OUT ([scaling-out.md]"
            "(scaling-out.md#a-public-site-bucket))"),
    Key("attempts", "--attempts", _whole_in(1, 100), lambda: 3, "Attempts per item before it fails.",
        WORKERS, "1-100", doc="attempts per item before it fails (transient errors only)"),
    Key("deadline", "--deadline", _seconds, lambda: None,
        "Batch deadline, e.g. 30m or 2h; 0: none.", WORKERS, "DURATION",
        doc="batch deadline (`30m`, `2h`; `0`: none)"),
    Key("workers", "--workers", _whole_in(0), lambda: 0, "Worker processes (0: one per CPU).", WORKERS, "N", "-w"),
    Key("item_timeout", "--item-timeout", _seconds, lambda: 300.0, _TIMEOUT_HELP, WORKERS, "DURATION",
        doc="time limit for each stage of a claim: the decode of the source, and each render (restarted by each "
            "publish); over it the stage's items fail `timeout`"),
    Key("sheet", "--sheet", _switch, lambda: True,
        "Write the contact sheets (catalogue, batch) when the run ends.", OUTPUT,
        switch=True, doc="write the contact sheets (`OUT/batches/catalogue.html`, this run's changes first, "
        "and `OUT/batches/<batch_id>.html`) at the end of a foreground run"),
    Key("max_failures", "--max-failures", _whole_in(0), lambda: 0,
        "Exit 1 only when more than N items failed (work: only when set).", WORKERS, "N",
        doc="exit 1 only when more than N items failed (`work`: only when set)"),
    Key("max_pixels", "--max-pixels", _count, lambda: _LIMITS.max_pixels, "Pixel limit per source.", LIMITS, "COUNT",
        doc="pixels per source, read from the header before any decode"),
    Key("max_bytes", "--max-bytes", _count, lambda: _LIMITS.max_bytes, "Byte limit per source.", LIMITS, "BYTES",
        doc="bytes per source file"),
    Key("allow_urls", "--allow-url", parse_url_prefixes, lambda: (),
        "Only URL sources under this prefix (repeat).", LIMITS, "PREFIX", repeat=True, param="allow_url",
        doc="the only URL prefixes a URL source and each of its redirects may start with (`https://cdn.example.com/`; "
            "a list, or separated by commas or spaces); none: any http or https URL "
            "([sellers.md](sellers.md#sources-by-url))"),
    Key("allow_networks", "--allow-network", parse_networks, lambda: (),
        "Let URL sources reach this private network.", LIMITS, "CIDR", repeat=True,
        param="allow_network",
        doc="networks (CIDR) a URL source's host may resolve to although they are loopback, private, link-local or "
            "otherwise refused (`10.20.0.0/16`, `fd00::/8`); none: public addresses only"),
    Key("download_timeout", "--download-timeout", _positive_seconds, lambda: DEFAULT_DOWNLOAD_SECONDS,
        "Deadline of each URL download.", LIMITS, "DURATION",
        doc="the deadline of one URL source's whole download, redirects and retries included (a slow drip ends "
            "there: `source_timeout`)"),
    Key("max_items", "--max-items", _whole_in(1), lambda: _LIMITS.max_items, "Item limit per batch.", LIMITS, "N",
        doc="items (sources × ratios × sizes × formats) per batch"),
    Key("max_runnable", "--max-runnable", _whole_in(1), lambda: _LIMITS.max_runnable,
        "Runnable items the ledger may hold.", ADMISSION, "N",
        doc="admission: runnable items the whole ledger may hold"),
    Key("queue_age_objective", "--queue-age-objective", _seconds, lambda: _LIMITS.queue_age_objective,
        "Refuse while the oldest runnable item is older (0 = off).", ADMISSION, "DURATION",
        doc="admission: refuse new batches while the oldest runnable item has waited longer *and* workers are "
            "draining the queue (one took or finished an item in the last 10 minutes); `0` turns it off"),
    Key("db", "--db", _ledger_target, default_ledger_path, _DB_HELP, LEDGER, "PATH|URL", in_profiles=False,
        doc="the ledger: a file, or a `postgresql://` URL ([scaling-out.md](scaling-out.md)); every command takes "
            "it; only in `[defaults]`, since one ledger serves every profile",
        doc_default="`ledger.db` in the per-user state folder"),
    Key("store", "--store", _location, lambda: None, _STORE_HELP, OUTPUT, "DIR|S3", in_profiles=False,
        doc="the content-addressed object store, outside OUT (`submit`, `work`, `retry`, `reconcile`, `gc`, "
            "`config`); one store belongs to one ledger (a second ledger is refused, `store_taken`); never an "
            "output folder of the ledger (this batch's or an earlier one's), inside one or holding one, nor "
            "holding the source folder (`bad_store`); another ledger's store inside a source folder is not "
            "scanned; required with a PostgreSQL ledger (`store_required`); only in `[defaults]`",
        doc_default="the store the ledger last used, else `LEDGER.store` beside a SQLite ledger (`ledger.store`)"),
    Key("s3_endpoint", "", _endpoint, lambda: None, "S3 endpoint URL of s3:// locations.", OUTPUT, in_profiles=False,
        doc="the endpoint of `s3://` stores and outputs, e.g. `http://127.0.0.1:8333` for a local server" + _S3_DOC),
    Key("s3_region", "", _text, lambda: None, "S3 region of s3:// locations.", OUTPUT, in_profiles=False,
        doc="the region of `s3://` stores and outputs" + _S3_DOC),
    Key("s3_profile", "", _text, lambda: None, "AWS profile of s3:// locations.", OUTPUT, in_profiles=False,
        doc="the profile of the AWS config and credentials files used for `s3://` locations" + _S3_DOC),
    Key("s3_cache_control_objects", "", _text, lambda: "public, max-age=31536000, immutable",
        "Cache-Control of objects in an s3:// store.", OUTPUT, in_profiles=False,
        doc="`Cache-Control` of content-addressed objects in an `s3://` store (they never change)"),
    Key("s3_cache_control_names", "", _text, lambda: "public, max-age=300",
        "Cache-Control of names and documents in an s3:// OUT.", OUTPUT, in_profiles=False,
        doc="`Cache-Control` of thumbnails and batch documents in an `s3://` OUT (they may be replaced)"),
)

#: The settings only a variable gives: no flag, no file key. Their values mean what they meant as
#: variables read on their own: a blank variable is unset, a bad value a ``config_error``.
ENVIRONMENT_KEYS: tuple[Key, ...] = (
    Key("busy_timeout", "", _seconds_between(0, _DAY), lambda: 5.0,
        "How long one ledger write waits for a held lock, s (PostgreSQL: also the connect timeout, at least 2 s).",
        doc="how long one write waits for a held lock, in seconds from 0 to 86400 (for PostgreSQL also the connect "
            "timeout, at least 2 s) ([operations.md](operations.md#when-the-ledger-is-in-trouble))"),
    Key("busy_wait", "", _seconds_between(0, _DAY), lambda: 20.0,
        "How long a busy ledger is waited out, all retries together, s (at least busy_timeout).",
        doc="how long a busy ledger is waited out, all retries of one operation together, in seconds from 0 to "
            "86400 (at least `busy_timeout`)"),
    Key("s3_retry", "", _seconds_between(0, 3600), lambda: 20.0,
        "How long one S3 request is retried through errors and lost connections, s.",
        doc="how long one request to an `s3://` store or OUT is retried through 5xx, 429 and lost connections "
            "before it fails (`storage_unreachable`), in seconds from 0 to 3600; the default rides out a restart "
            "of the S3 server"),
    Key("lease_seconds", "", _seconds_between(1, _DAY), lambda: 30.0,
        "Test only: the workers' lease, s (the heartbeat beats every third of it).",
        doc="test only: the lease of `submit`/`work` workers in seconds, from 1 to 86400 (the heartbeat beats "
            "every third of it)"),
    Key("host_id", "", _text, lambda: None,
        "Test only: this host's identity in lease owners (no ':').",
        doc="test only: replaces this host's identity in lease owners (normally `hostname~machine-id`; no `:`), "
            "e.g. to run several \"hosts\" on one machine",
        doc_default="`hostname~machine-id`"),
)
# fmt: on
ALL_KEYS = KEYS + ENVIRONMENT_KEYS
KEYS_BY_NAME: dict[str, Key] = {key.name: key for key in ALL_KEYS}
DURATION_KEYS = frozenset(
    {
        "deadline",
        "item_timeout",
        "download_timeout",
        "queue_age_objective",
        "busy_timeout",
        "busy_wait",
        "lease_seconds",
        "s3_retry",
    }
)
COUNT_KEYS = frozenset({"max_pixels", "max_bytes"})


@dataclass(frozen=True)
class Setting:
    """A resolved value and where it came from: ``flag``, ``env THUMBCTL_X``, ``file PATH [TABLE]``, ``default``."""

    value: Any
    source: str


def parse_value(key: Key, raw: object, where: str, *, error: type[UsageError]) -> Any:
    """``raw`` through the key's parser; a bad value is ``error`` naming ``where`` it came from."""
    try:
        return key.parse(raw)
    except SettingError as exc:
        raise error(f"{where}: {exc}", code=exc.code) from None


def flag_setting(key: Key, raw: object) -> Setting:
    return Setting(parse_value(key, raw, key.flag, error=UsageError), FLAG_SOURCE)


def env_setting(key: Key, raw: object) -> Setting:
    return Setting(parse_value(key, raw, key.env, error=ConfigError), f"env {key.env}")


def default_setting(key: Key) -> Setting:
    return Setting(key.default(), DEFAULT_SOURCE)


def environment_setting(key: Key, env: Mapping[str, str] | None = None) -> Setting:
    """A setting of :data:`ENVIRONMENT_KEYS`: its variable (a blank one is unset), else its default."""
    raw = (os.environ if env is None else env).get(key.env, "")
    return env_setting(key, raw) if raw.strip() else default_setting(key)


def environment_value(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The value of the environment-only setting ``name`` (its default when the variable is unset)."""
    return environment_setting(KEYS_BY_NAME[name], env).value


def busy_policy() -> BusyPolicy:
    """The settings ``busy_timeout`` and ``busy_wait`` (``THUMBCTL_BUSY_TIMEOUT``, ``THUMBCTL_BUSY_WAIT``;
    5 s and 20 s unless set) as the ledger's busy policy; the bound is never shorter than one wait."""
    timeout = environment_value("busy_timeout")
    return BusyPolicy(timeout=timeout, bound=max(timeout, environment_value("busy_wait")))
