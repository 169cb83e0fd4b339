"""Settings resolution, in one place: flag > ``THUMBCTL_*`` environment > config file > default.

The config file is TOML: ``thumbctl.toml`` in the current folder, else ``config.toml`` in
the per-user app folder (the default ledger is in the state folder); ``THUMBCTL_CONFIG`` names another.
Its optional ``[defaults]`` table always applies; ``[profiles.NAME]`` applies when the
profile is chosen (``--profile NAME`` or ``THUMBCTL_PROFILE``) and wins over ``[defaults]``.

Every value, whatever its origin, goes through the same parser; an error names where the
value came from (``--size``, ``THUMBCTL_SIZE`` or ``thumbctl.toml [profiles.shop] size``).

On the command line Click finds each value (its option's ``envvar``, the file's layer as the
command's ``default_map``, and which of them gave it: :mod:`thumbctl.cliopts`); this module
holds the table, the parsers, the file and its layer. :func:`resolve_settings` applies the
same precedence without a command line.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from .errors import ConfigError, UsageError
from .options import RunOptions, SubmitOptions, default_workers, lease_seconds
from .settings import (
    CROP_POLICIES,
    OUTPUT_FORMATS,
    Limits,
    Profile,
    Ratio,
    SettingError,
    check_duration,
    parse_count,
    parse_duration,
    parse_list,
    parse_ratios,
)
from .sources import ScanRules

APP_NAME = "thumbctl"
LOCAL_FILE_NAME = "thumbctl.toml"
USER_FILE_NAME = "config.toml"
LEDGER_FILE_NAME = "ledger.db"
CONFIG_ENV = "THUMBCTL_CONFIG"
PROFILE_ENV = "THUMBCTL_PROFILE"
FLAG_SOURCE = "flag"
DEFAULT_SOURCE = "default"
_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}


def app_dir() -> Path:
    """The per-user app folder (``$XDG_CONFIG_HOME/thumbctl`` or ``~/.config/thumbctl`` on Linux): the config file."""
    return Path(typer.get_app_dir(APP_NAME))


def state_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """The per-user state folder, where the default ledger lives: ``$XDG_STATE_HOME/thumbctl``
    (``~/.local/state/thumbctl``) on Linux and the BSDs, ``~/Library/Application Support/thumbctl``
    on macOS, ``%LOCALAPPDATA%\\thumbctl`` on Windows (as platformdirs has them)."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_NAME
    if platform == "win32":
        return Path(env.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / APP_NAME
    base = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative (or empty) value is ignored
        base = str(Path.home() / ".local" / "state")
    return Path(base) / APP_NAME


def default_ledger_path() -> Path:
    """``ledger.db`` in the per-user state folder."""
    return state_dir() / LEDGER_FILE_NAME


def old_default_ledger_path() -> Path:
    """Where the default ledger was before it moved to the state folder: the app (config) folder."""
    return app_dir() / LEDGER_FILE_NAME


# -- value parsers: raw text (flag, env) or TOML value -> typed value, or SettingError ----------


def _whole(raw: object) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"[-+]?[0-9]+", raw.strip()):  # a sign, so bounds can say "at least"
        return int(raw)
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


def _count(raw: object) -> int:
    if isinstance(raw, str):
        return parse_count(raw)
    return _whole_in(1)(raw)


def _ledger_target(raw: object) -> Path | str:
    """A ledger file path, or a ``postgresql://`` URL kept as it is (a path would fold its ``//``)."""
    from .ledger.backend import is_server_url  # light: no driver is imported

    if isinstance(raw, str) and is_server_url(raw.strip()):
        return raw.strip()
    return _path(raw)


def _path(raw: object) -> Path:
    if isinstance(raw, Path):
        return raw
    if isinstance(raw, str) and raw.strip():
        return Path(raw).expanduser()
    raise SettingError(f"must be a path, got {raw!r}")


def _profile_list(name: str, convert: Callable[[object], Any]) -> Callable[[object], Any]:
    """One value or several (``320,640`` or a TOML list), each converted; the setting holds one
    value when one is given, else a tuple, checked by :class:`Profile` as a flag is."""

    def parse(raw: object) -> Any:
        values = [convert(part) for part in parse_list(raw)]
        value = values[0] if len(values) == 1 else tuple(values)
        return getattr(Profile(**{name: value}), name)

    return parse


def _name_template(raw: object) -> str:
    from .naming import NameTemplateError, check_template  # light: no image code

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
    name in upper case, the option ``flag`` (``--x/--no-x`` for a switch), shown under ``panel`` in help."""

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

    @property
    def env(self) -> str:
        return f"THUMBCTL_{self.name.upper()}"

    @property
    def param_name(self) -> str:
        return self.param or self.name


_PROFILE = Profile()
_LIMITS = Limits()
_SUBMIT = SubmitOptions()
_RUN = RunOptions(workers=0)

_DB_HELP = (
    "Ledger: a file, or postgresql://user@host/dbname for workers on many machines (needs pip install "
    "'thumbctl[postgres]'; the password is shown masked)."
)
_STORE_HELP = "Object store: rendered objects, kept outside OUT; one per ledger; required with a PostgreSQL --db."
_TIMEOUT_HELP = "Time limit for each stage (decoding a source, each render); over it, items fail `timeout`. 0: none."
_FORMATS = "[" + "|".join(OUTPUT_FORMATS) + "][,...]"

#: Every setting, once: its file key, env var, option, parser, default, help and completion. A new setting is
#: one entry here; commands take it by name (see thumbctl.cliopts).
# fmt: off
KEYS: tuple[Key, ...] = (
    Key("out", "--out", _path, lambda: _SUBMIT.out_dir, "Output folder.", OUTPUT, "DIR"),
    Key("ratios", "--ratio", parse_ratios, lambda: _PROFILE.ratios,
        "Aspect ratio W:H; repeat (or 1:1,4:5) for several.", RENDER, "W:H", "-r",
        complete_from(COMMON_RATIOS), repeat=True, param="ratio"),
    Key("size", "--size", _profile_list("size", _whole), lambda: _PROFILE.size,
        "Longest side of each thumbnail, px; several: 320,640,1280.", RENDER, "PX[,PX...]"),
    Key("format", "--format", _profile_list("format", _text), lambda: _PROFILE.format,
        "Output format; several: webp,jpeg.", RENDER, _FORMATS, complete=complete_list_of(OUTPUT_FORMATS), param="fmt"),
    Key("quality", "--quality", _profile_field("quality", _whole), lambda: _PROFILE.quality, "Encoder quality.",
        RENDER, "1-100"),
    Key("crop", "--crop", _profile_field("crop", _text), lambda: _PROFILE.crop, "Crop policy.", RENDER,
        "[" + "|".join(CROP_POLICIES) + "]", complete=complete_from(CROP_POLICIES)),
    Key("upscale", "--upscale", _switch, lambda: _PROFILE.upscale, "Allow outputs larger than the source crop.",
        RENDER, switch=True),
    Key("background", "--background", _profile_field("background", _text), lambda: _PROFILE.background,
        "Colour to flatten transparency onto.", RENDER, "#RRGGBB"),
    Key("name", "--name", _name_template, lambda: None,
        "Thumbnail names in OUT, from {path} {stem} {ratio} {size} {width} {height} {ext}.", OUTPUT, "TEMPLATE"),
    Key("attempts", "--attempts", _whole_in(1, 100), lambda: _SUBMIT.max_attempts, "Attempts per item before it fails.",
        WORKERS, "1-100"),
    Key("deadline", "--deadline", _seconds, lambda: _SUBMIT.deadline_seconds,
        "Batch deadline, e.g. 30m or 2h; 0: none.", WORKERS, "DURATION"),
    Key("workers", "--workers", _whole_in(0), lambda: 0, "Worker processes (0: one per CPU).", WORKERS, "N", "-w"),
    Key("item_timeout", "--item-timeout", _seconds, lambda: _RUN.item_timeout, _TIMEOUT_HELP, WORKERS, "DURATION"),
    Key("sheet", "--sheet", _switch, lambda: _RUN.sheet,
        "Write the contact sheet (OUT/batches/<batch_id>.html) when the run ends.", OUTPUT, switch=True),
    Key("max_failures", "--max-failures", _whole_in(0), lambda: 0,
        "Exit 1 only when more than N items failed (work: only when set).", WORKERS, "N"),
    Key("max_pixels", "--max-pixels", _count, lambda: _LIMITS.max_pixels, "Pixel limit per source.", LIMITS, "COUNT"),
    Key("max_bytes", "--max-bytes", _count, lambda: _LIMITS.max_bytes, "Byte limit per source.", LIMITS, "BYTES"),
    Key("max_items", "--max-items", _whole_in(1), lambda: _LIMITS.max_items, "Item limit per batch.", LIMITS, "N"),
    Key("max_runnable", "--max-runnable", _whole_in(1), lambda: _LIMITS.max_runnable,
        "Runnable items the ledger may hold.", ADMISSION, "N"),
    Key("queue_age_objective", "--queue-age-objective", _seconds, lambda: _LIMITS.queue_age_objective,
        "Refuse while the oldest runnable item is older (0 = off).", ADMISSION, "DURATION"),
    Key("db", "--db", _ledger_target, default_ledger_path, _DB_HELP, LEDGER, "PATH|URL", in_profiles=False),
    Key("store", "--store", _path, lambda: None, _STORE_HELP, OUTPUT, "DIR", in_profiles=False),
)
# fmt: on
KEYS_BY_NAME: dict[str, Key] = {key.name: key for key in KEYS}
_DB = KEYS_BY_NAME["db"]
_STORE = KEYS_BY_NAME["store"]
DURATION_KEYS = frozenset({"deadline", "item_timeout", "queue_age_objective"})
COUNT_KEYS = frozenset({"max_pixels", "max_bytes"})
#: Plural spellings a config file may use for a list: ``sizes = [320, 640]``.
FILE_ALIASES = {"sizes": "size", "formats": "format"}


@dataclass(frozen=True)
class Setting:
    """A resolved value and where it came from: ``flag``, ``env THUMBCTL_X``, ``file PATH [TABLE]``, ``default``."""

    value: Any
    source: str


@dataclass(frozen=True)
class ConfigFile:
    """A loaded, fully validated config file: parsed values per table."""

    path: Path
    defaults: dict[str, Any]
    profiles: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Settings:
    """Every setting resolved, with its source; builds the library's option objects."""

    config_file: Path | None
    profile: str | None
    profile_source: str | None
    values: dict[str, Setting]

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    @property
    def ledger_path(self) -> Path | str:
        """The ledger file, or a PostgreSQL URL."""
        return self["db"]

    @property
    def store_path(self) -> Path | None:
        """The object store given (flag, env, file), or None: the default beside the ledger."""
        return self["store"]

    def render_profile(self) -> Profile:
        names = ("ratios", "size", "format", "quality", "crop", "upscale", "background")
        return Profile(**{name: self[name] for name in names})

    def limits(self) -> Limits:
        names = ("max_pixels", "max_bytes", "max_items", "max_runnable", "queue_age_objective")
        return Limits(**{name: self[name] for name in names})

    def submit_options(self, *, key: str | None, rules: ScanRules, overwrite: bool = False) -> SubmitOptions:
        return SubmitOptions(
            out_dir=self["out"],
            profile=self.render_profile(),
            limits=self.limits(),
            rules=rules,
            key=key,
            max_attempts=self["attempts"],
            deadline_seconds=self["deadline"],
            name_template=self["name"],
            overwrite=overwrite,
            store_dir=self["store"],
        )

    @property
    def max_failures(self) -> int:
        """How many failed items submit and retry allow before they exit 1 (0: none)."""
        return self["max_failures"]

    @property
    def work_max_failures(self) -> int | None:
        """``work``'s budget of failed items: None unless given (flag, env or file), so a cron
        ``work`` keeps exiting 0 whatever items failed unless asked otherwise."""
        return None if self.values["max_failures"].source == DEFAULT_SOURCE else self.max_failures

    def run_options(self) -> RunOptions:
        """The run's options; a bad ``THUMBCTL_LEASE_SECONDS`` is refused here, before anything is recorded."""
        return RunOptions(
            workers=self["workers"] or default_workers(),
            item_timeout=self["item_timeout"],
            lease_seconds=lease_seconds(RunOptions.lease_seconds),
            sheet=self["sheet"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "config_file": None if self.config_file is None else str(self.config_file),
            "profile": self.profile,
            "profile_source": self.profile_source,
            "settings": {
                name: {"value": json_value(setting.value), "source": setting.source}
                for name, setting in self.values.items()
            },
        }


def json_value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, tuple) and all(isinstance(v, Ratio) for v in value):
        return [str(v) for v in value]
    return value


def display_value(name: str, value: Any) -> str:
    """A setting's value as a person would type it: ``1:1 4:3``, ``5m``, ``none``."""
    if value is None and name == "store":
        return "beside the ledger (ledger.store)"
    if value is None:
        return "{path}.{ratio}.{ext} ({size} added for several sizes)" if name == "name" else "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if name in DURATION_KEYS:
        return format_seconds(value)
    if name in COUNT_KEYS:
        return format_count(value)
    if name == "workers" and value == 0:
        return "0 (one per CPU)"
    if name == "max_failures" and value == 0:
        return "0 (any failure exits 1; work: only when set)"
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    return _shown(str(value))


def _shown(text: str) -> str:
    """A server URL with its password masked; any other text as it is."""
    from .ledger.backend import is_server_url, masked

    return masked(text) if is_server_url(text) else text


def format_count(count: int) -> str:
    """``100000000`` -> ``100M``, ``104857600`` -> ``100MiB``, ``1234`` -> ``1234`` (as :func:`parse_count` reads)."""
    for base, suffix in ((1000, ""), (1024, "iB")):
        for power in (4, 3, 2, 1):
            if count >= base**power and count % base**power == 0:
                return f"{count // base**power}{'kMGT'[power - 1]}{suffix}"
    return str(count)


def format_seconds(seconds: float) -> str:
    """``300.0`` -> ``5m``, ``86400.0`` -> ``24h``, ``1.5`` -> ``1.5s``, ``0`` -> ``0``."""
    if seconds == 0:
        return "0"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


# -- resolution --------------------------------------------------------------------------------


def resolve_settings(
    flags: Mapping[str, Any], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Settings:
    """Resolve every setting without a command line's parser (the CLI lets Click find each value's origin:
    thumbctl.cliopts). ``flags`` holds only the parameters typed on the command line.

    ``flags`` is keyed by the command's parameter names (``fmt`` for ``--format``,
    ``ratio`` for ``--ratio``, ``profile``); other names in it are ignored.
    """
    env = os.environ if env is None else env
    profile, profile_source = _chosen_profile(flags, env)
    layer = file_layer(profile, env, cwd)
    values = {key.name: resolve_key(key, flags, env, layer) for key in KEYS}
    return Settings(layer.path, profile, profile_source, values)


def resolve_ledger_path(
    flag: Path | str | None, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Path | str:
    """The ledger path alone (for commands without profiles): --db, THUMBCTL_DB, the file's [defaults], default."""
    env = os.environ if env is None else env
    flags = {} if flag is None else {_DB.param_name: flag}
    return resolve_key(_DB, flags, env, file_layer(None, env, cwd)).value


def resolve_store_path(
    flag: Path | str | None, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Path | None:
    """The object store alone (for commands without profiles): --store, THUMBCTL_STORE, the file's
    [defaults], else None (the default beside the ledger, see :func:`thumbctl.stores.resolve_store`)."""
    env = os.environ if env is None else env
    flags = {} if flag is None else {_STORE.param_name: flag}
    return resolve_key(_STORE, flags, env, file_layer(None, env, cwd)).value


def resolve_key(key: Key, flags: Mapping[str, Any], env: Mapping[str, str], layer: FileLayer) -> Setting:
    if key.param_name in flags:
        return flag_setting(key, flags[key.param_name])
    if env.get(key.env):
        return env_setting(key, env[key.env])
    return layer.values.get(key.name) or default_setting(key)


def flag_setting(key: Key, raw: object) -> Setting:
    return Setting(_parse(key, raw, key.flag, error=UsageError), FLAG_SOURCE)


def env_setting(key: Key, raw: object) -> Setting:
    return Setting(_parse(key, raw, key.env, error=ConfigError), f"env {key.env}")


def default_setting(key: Key) -> Setting:
    return Setting(key.default(), DEFAULT_SOURCE)


def _parse(key: Key, raw: object, where: str, *, error: type[UsageError]) -> Any:
    try:
        return key.parse(raw)
    except SettingError as exc:
        raise error(f"{where}: {exc}") from None


def _chosen_profile(flags: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str | None, str | None]:
    if flags.get("profile"):
        return flags["profile"], FLAG_SOURCE
    if env.get(PROFILE_ENV):
        return env[PROFILE_ENV], f"env {PROFILE_ENV}"
    return None, None


@dataclass(frozen=True)
class FileLayer:
    """The config file's values that apply: the chosen profile's table over ``[defaults]``, by setting name,
    each with the file and table it came from (what a command-line parser cannot know)."""

    path: Path | None
    values: dict[str, Setting]

    def by_param(self) -> dict[str, Any]:
        """The values keyed by the commands' parameter names: a Click ``default_map``."""
        return {KEYS_BY_NAME[name].param_name: setting.value for name, setting in self.values.items()}


def file_layer(profile: str | None, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> FileLayer:
    """Find, load and validate the config file; its layer for ``profile`` (None: ``[defaults]`` alone)."""
    loaded = _load_found(os.environ if env is None else env, cwd)
    if profile is not None and loaded is None:
        raise ConfigError(f"profile {profile!r} needs a config file, and none was found ({_looked_at()})")
    if loaded is None:
        return FileLayer(None, {})
    values = {name: Setting(value, f"file {loaded.path} [defaults]") for name, value in loaded.defaults.items()}
    if profile is not None:
        if profile not in loaded.profiles:
            defined = ", ".join(sorted(loaded.profiles)) or "none"
            raise ConfigError(f"{loaded.path}: no profile {profile!r}; profiles defined: {defined}")
        table = f"file {loaded.path} [profiles.{profile}]"
        values |= {name: Setting(value, table) for name, value in loaded.profiles[profile].items()}
    return FileLayer(loaded.path, values)


# -- the file ----------------------------------------------------------------------------------


def find_config_file(env: Mapping[str, str], cwd: Path | None = None) -> Path | None:
    """``$THUMBCTL_CONFIG``, else ``./thumbctl.toml``, else ``config.toml`` in the app folder, else none."""
    named = env.get(CONFIG_ENV)
    if named:
        path = Path(named).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(f"{CONFIG_ENV}: no such file {named}")
        return path
    for candidate in ((cwd or Path.cwd()).absolute() / LOCAL_FILE_NAME, app_dir() / USER_FILE_NAME):
        if candidate.is_file():
            return candidate
    return None


def _looked_at() -> str:
    return f"looked for ./{LOCAL_FILE_NAME} and {app_dir() / USER_FILE_NAME}; {CONFIG_ENV} names another"


def _load_found(env: Mapping[str, str], cwd: Path | None) -> ConfigFile | None:
    path = find_config_file(env, cwd)
    return None if path is None else load_config_file(path)


def load_config_file(path: Path) -> ConfigFile:
    """Read and validate the whole file: unknown tables or keys and bad values are errors."""
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    unknown = sorted(set(document) - {"defaults", "profiles"})
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {unknown[0]!r}; the file holds [defaults] and [profiles.NAME]")
    profiles = document.get("profiles", {})
    if not isinstance(profiles, dict):
        raise ConfigError(f"{path}: profiles must be tables, [profiles.NAME]")
    return ConfigFile(
        path=path,
        defaults=_parse_table(path, "defaults", document.get("defaults", {})),
        profiles={name: _parse_table(path, f"profiles.{name}", table) for name, table in profiles.items()},
    )


def _parse_table(path: Path, label: str, table: object) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path} [{label}]: must be a table")
    in_profile = label != "defaults"
    allowed = [key.name for key in KEYS if key.in_profiles or not in_profile]
    table = _without_aliases(path, label, table)
    for name in table:
        if name not in allowed:
            ledger_wide = name in (_DB.name, _STORE.name)
            hint = f"{name} belongs in [defaults] (one ledger for every profile)" if ledger_wide else ""
            raise ConfigError(
                f"{path} [{label}]: unknown key {name!r}; {hint or 'allowed keys: ' + ', '.join(allowed)}"
            )
    return {
        name: _parse(KEYS_BY_NAME[name], raw, f"{path} [{label}] {name}", error=ConfigError)
        for name, raw in table.items()
    }


def _without_aliases(path: Path, label: str, table: dict[str, Any]) -> dict[str, Any]:
    """The table with ``sizes``/``formats`` spelled ``size``/``format``; both spellings at once is an error."""
    plain = dict(table)
    for alias, name in FILE_ALIASES.items():
        if alias in plain:
            if name in plain:
                raise ConfigError(f"{path} [{label}]: give {name} or {alias}, not both")
            plain[name] = plain.pop(alias)
    return plain


def environment_help() -> str:
    """The env-var table shown in the root help (built from :data:`KEYS`, so it cannot drift)."""
    rows = [
        (CONFIG_ENV, f"config file (else ./{LOCAL_FILE_NAME}, else {USER_FILE_NAME} in the app folder)"),
        (PROFILE_ENV, "--profile: the [profiles.NAME] table of the config file"),
    ]
    rows += [(key.env, key.flag) for key in KEYS]
    rows += [
        ("THUMBCTL_STATS_INTERVAL", "--stats-interval: seconds between progress lines off a terminal"),
        ("NO_COLOR", "set to anything: no colour in human output"),
    ]
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"  {name:<{width}}{meaning}" for name, meaning in rows]
    return (
        "Settings: flag, else THUMBCTL_* environment, else config file, else default"
        " (`thumbctl config` shows them). File keys are the variable names without THUMBCTL_, in lower case.\n\n"
        "\b\nEnvironment:\n" + "\n".join(lines)
    )


def default_text(name: str) -> str:
    """A setting's default as help shows it."""
    return display_value(name, KEYS_BY_NAME[name].default())
