"""Settings resolution, in one place: flag > ``THUMBCTL_*`` environment > config file > default.

Every value, whatever its origin, goes through the parser of its key in the settings table
(:mod:`thumbctl.config.settings`); an error names where the value came from (``--size``, ``THUMBCTL_SIZE``
or ``thumbctl.toml [profiles.shop] size``). The config file and its layer of values are
:mod:`thumbctl.config.file`'s, the per-user folders :mod:`thumbctl.config.userdirs`'.

On the command line Click finds each value (its option's ``envvar``, the file's layer as the
command's ``default_map``, and which of them gave it: :mod:`thumbctl.cli.resolution`); :func:`resolve_settings`
applies the same precedence without a command line. This module is the settings API of the command
line and the library: it also offers the table's and the file's names they use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from ..core.profile import Limits, Profile, Ratio, SettingError, UrlRules
from ..core.redact import without_userinfo
from .file import LOCAL_FILE_NAME, USER_FILE_NAME, FileLayer, file_layer, find_config_file, load_config_file
from .options import RunOptions, SiteMarkup, SubmitOptions, default_workers, lease_seconds
from .s3location import S3Options, endpoint_of, is_s3
from .settings import (
    ALL_KEYS,
    CONFIG_ENV,
    COUNT_KEYS,
    DEFAULT_SOURCE,
    DURATION_KEYS,
    ENVIRONMENT_KEYS,
    FLAG_SOURCE,
    KEYS,
    KEYS_BY_NAME,
    PROFILE_ENV,
    Key,
    Setting,
    default_setting,
    env_setting,
    environment_setting,
    flag_setting,
)
from .userdirs import default_ledger_path, old_default_ledger_path, state_dir

if TYPE_CHECKING:
    from ..core.scanrules import ScanRules

__all__ = [
    "ALL_KEYS",
    "CONFIG_ENV",
    "ENVIRONMENT_KEYS",
    "KEYS",
    "KEYS_BY_NAME",
    "PROFILE_ENV",
    "FileLayer",
    "Key",
    "Setting",
    "Settings",
    "default_ledger_path",
    "default_setting",
    "default_text",
    "display_value",
    "with_recorded_store",
    "env_setting",
    "environment_help",
    "file_layer",
    "find_config_file",
    "flag_setting",
    "format_count",
    "format_seconds",
    "json_value",
    "load_config_file",
    "old_default_ledger_path",
    "resolve_key",
    "resolve_ledger_path",
    "resolve_settings",
    "state_dir",
]

_DB = KEYS_BY_NAME["db"]
_ENVIRONMENT_ONLY = frozenset(key.name for key in ENVIRONMENT_KEYS)


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
    def store_path(self) -> Path | str | None:
        """The object store given (flag, env, file), or None: the default beside the ledger."""
        return self["store"]

    def s3_options(self) -> S3Options:
        """The S3 settings of ``s3://`` stores and outputs; each unset one falls back to the AWS defaults."""
        return S3Options(
            endpoint=self["s3_endpoint"],
            region=self["s3_region"],
            profile=self["s3_profile"],
            cache_control_objects=self["s3_cache_control_objects"],
            cache_control_names=self["s3_cache_control_names"],
            retry_seconds=self["s3_retry"],
        )

    def render_profile(self) -> Profile:
        names = ("ratios", "size", "format", "quality", "effort", "crop", "upscale", "background", "fit", "trim")
        names += ("trim_tolerance",)
        try:
            return Profile(**{name: self[name] for name in names})
        except SettingError as exc:  # settings each valid alone that do not go together
            raise UsageError(str(exc), code=exc.code or "bad_setting") from None

    def limits(self) -> Limits:
        names = ("max_pixels", "max_bytes", "max_items", "max_runnable", "queue_age_objective")
        return Limits(**{name: self[name] for name in names})

    def url_rules(self) -> UrlRules:
        return UrlRules(self["allow_urls"], self["allow_networks"], self["download_timeout"])

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
            documents_dir=self["documents"],
            url_rules=self.url_rules(),
            markup=SiteMarkup(self["markup_sizes"], self["base_url"] or ""),
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
            s3=self.s3_options(),
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


# -- resolution --------------------------------------------------------------------------------


def resolve_settings(
    flags: Mapping[str, Any], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Settings:
    """Resolve every setting without a command line's parser (the CLI lets Click find each value's origin:
    thumbctl.cli.resolution). ``flags`` holds only the parameters typed on the command line.

    ``flags`` is keyed by the command's parameter names (``fmt`` for ``--format``,
    ``ratio`` for ``--ratio``, ``profile``); other names in it are ignored.
    """
    env = os.environ if env is None else env
    profile, profile_source = _chosen_profile(flags, env)
    layer = file_layer(profile, env, cwd)
    values = {key.name: resolve_key(key, flags, env, layer) for key in ALL_KEYS}
    return Settings(layer.path, profile, profile_source, values)


def resolve_ledger_path(
    flag: Path | str | None, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Path | str:
    """The ledger path alone (for commands without profiles): --db, THUMBCTL_DB, the file's [defaults], default."""
    env = os.environ if env is None else env
    flags = {} if flag is None else {_DB.param_name: flag}
    return resolve_key(_DB, flags, env, file_layer(None, env, cwd)).value


def resolve_key(key: Key, flags: Mapping[str, Any], env: Mapping[str, str], layer: FileLayer) -> Setting:
    """One setting: the flag given, else its variable, else the file's layer, else its default. A setting
    only a variable gives is read as it always was: a blank variable is unset."""
    if key.name in _ENVIRONMENT_ONLY:
        return environment_setting(key, env)
    if key.param_name in flags:
        return flag_setting(key, flags[key.param_name])
    if env.get(key.env):
        return env_setting(key, env[key.env])
    return layer.values.get(key.name) or default_setting(key)


def _chosen_profile(flags: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str | None, str | None]:
    if flags.get("profile"):
        return flags["profile"], FLAG_SOURCE
    if env.get(PROFILE_ENV):
        return env[PROFILE_ENV], f"env {PROFILE_ENV}"
    return None, None


# -- display -----------------------------------------------------------------------------------


def json_value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, tuple) and all(isinstance(v, Ratio) for v in value):
        return [str(v) for v in value]
    return value


#: The source of the store setting when nothing gave one, the ledger recorded none, and the
#: ledger (PostgreSQL) has no default beside it.
STORE_REQUIRED = "required: give --store (a PostgreSQL ledger has no default)"
#: The source of the store setting when the ledger's recorded store is the one used.
STORE_RECORDED = "recorded in the ledger"


def with_recorded_store(settings: Settings, recorded: str | None) -> Settings:
    """``settings`` with the store a command would use when none is given: the one the ledger
    recorded (see :func:`thumbctl.publishing.stores.chosen_store`), else the default beside a SQLite ledger,
    else (PostgreSQL) required."""
    if settings.store_path is not None:
        return settings
    if recorded:
        store = Setting(recorded if is_s3(recorded) else Path(recorded), STORE_RECORDED)
    elif _is_server(settings.ledger_path):
        store = Setting(None, STORE_REQUIRED)
    else:
        return settings
    return replace(settings, values={**settings.values, "store": store})


def with_s3_endpoint(settings: Settings, env: Mapping[str, str]) -> Settings:
    """``settings`` with the S3 endpoint in effect when thumbctl's own is unset: the one the AWS
    variables or the profile give, and which (see :func:`~.s3location.endpoint_of`)."""
    if settings.values["s3_endpoint"].source != DEFAULT_SOURCE:
        return settings
    endpoint, source = endpoint_of(settings.s3_options(), env)
    if endpoint is None:
        return settings
    shown = Setting(without_userinfo(endpoint), source)  # never a password in what is printed
    return replace(settings, values={**settings.values, "s3_endpoint": shown})


def _is_server(target: Path | str) -> bool:
    from .ledgerurl import is_server_url

    return isinstance(target, str) and is_server_url(target)


def display_value(name: str, value: Any, source: str = "") -> str:
    """A setting's value as a person would type it: ``1:1 4:3``, ``5m``, ``none``."""
    if value is None and name == "store":
        return "required" if source == STORE_REQUIRED else "beside the ledger (ledger.store)"
    if value is None and name == "host_id":
        return "hostname~machine-id"
    if value is None:
        return "{path}.{ratio}.{ext} ({size} added for several sizes, {fit} for contain)" if name == "name" else "none"
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
        return " ".join(str(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return _shown(str(value))


def _shown(text: str) -> str:
    """A server URL with its password masked; any other text as it is."""
    from .ledgerurl import is_server_url, masked

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


def environment_help() -> str:
    """The env-var table shown in the root help (built from :data:`KEYS`, so it cannot drift)."""
    rows = [
        (CONFIG_ENV, f"config file (else ./{LOCAL_FILE_NAME}, else {USER_FILE_NAME} in the app folder)"),
        (PROFILE_ENV, "--profile: the [profiles.NAME] table of the config file"),
    ]
    rows += [(key.env, key.flag) for key in KEYS if key.flag]
    rows += [("THUMBCTL_S3_*", "S3 settings of s3:// locations (endpoint, region, ...: see thumbctl config)")]
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
