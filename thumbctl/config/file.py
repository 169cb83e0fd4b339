"""The config file: find it, read it, check all of it, and give the layer of values that applies.

The file is TOML: ``thumbctl.toml`` in the current folder, else ``config.toml`` in the per-user config
folder; ``THUMBCTL_CONFIG`` names another. Its optional ``[defaults]`` table always applies;
``[profiles.NAME]`` applies when the profile is chosen and wins over ``[defaults]``. Every value goes
through the parser of its key in the settings table (:mod:`thumbctl.config.settings`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from .settings import CONFIG_ENV, KEYS, KEYS_BY_NAME, Setting, parse_value
from .userdirs import config_dir

LOCAL_FILE_NAME = "thumbctl.toml"
USER_FILE_NAME = "config.toml"
#: Plural spellings a config file may use for a list: ``sizes = [320, 640]``.
FILE_ALIASES = {"sizes": "size", "formats": "format"}
#: The settings one ledger has for every profile: only in ``[defaults]``.
_LEDGER_WIDE = frozenset(key.name for key in KEYS if not key.in_profiles)


@dataclass(frozen=True)
class ConfigFile:
    """A loaded, fully validated config file: parsed values per table."""

    path: Path
    defaults: dict[str, Any]
    profiles: dict[str, dict[str, Any]]


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


def find_config_file(env: Mapping[str, str], cwd: Path | None = None) -> Path | None:
    """``$THUMBCTL_CONFIG``, else ``./thumbctl.toml``, else ``config.toml`` in the config folder, else none."""
    named = env.get(CONFIG_ENV)
    if named:
        path = Path(named).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(f"{CONFIG_ENV}: no such file {named}")
        return path
    for candidate in ((cwd or Path.cwd()).absolute() / LOCAL_FILE_NAME, config_dir() / USER_FILE_NAME):
        if candidate.is_file():
            return candidate
    return None


def _looked_at() -> str:
    return f"looked for ./{LOCAL_FILE_NAME} and {config_dir() / USER_FILE_NAME}; {CONFIG_ENV} names another"


def _load_found(env: Mapping[str, str], cwd: Path | None) -> ConfigFile | None:
    path = find_config_file(env, cwd)
    return None if path is None else load_config_file(path)


def load_config_file(path: Path) -> ConfigFile:
    """Read and validate the whole file: unknown tables or keys and bad values are errors."""
    document = _parsed(path, _text(path))
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


def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text (at line {line}, column {column})") from None


def _parsed(path: Path, text: str) -> dict[str, Any]:
    import tomllib  # only when a config file is there: most commands run without one (start-up time)

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables by recursion
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    except ValueError:  # tomllib converts a number with more digits than Python allows
        raise ConfigError(f"{path}: not valid TOML: a number is too long") from None


def _parse_table(path: Path, label: str, table: object) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path} [{label}]: must be a table")
    in_profile = label != "defaults"
    allowed = [key.name for key in KEYS if key.in_profiles or not in_profile]
    table = _without_aliases(path, label, table)
    for name in table:
        if name not in allowed:
            hint = f"{name} belongs in [defaults] (one ledger for every profile)" if name in _LEDGER_WIDE else ""
            raise ConfigError(
                f"{path} [{label}]: unknown key {name!r}; {hint or 'allowed keys: ' + ', '.join(allowed)}"
            )
    return {
        name: parse_value(KEYS_BY_NAME[name], raw, f"{path} [{label}] {name}", error=ConfigError)
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
