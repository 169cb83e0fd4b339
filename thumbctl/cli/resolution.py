"""Where each setting's value came from on this command line.

Settings resolution is Click's: an option reads its environment variable (``envvar``), the config file's
values are the command's ``default_map`` (the chosen profile's table over ``[defaults]``), and
``ctx.get_parameter_source`` says which of them gave a value. What Click cannot know is kept here: which
file and which table a value came from, and the parsing of env and file values where an error can name
that origin.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..config.resolve import (
    ALL_KEYS,
    KEYS_BY_NAME,
    PROFILE_ENV,
    FileLayer,
    Key,
    Setting,
    Settings,
    default_setting,
    env_setting,
    file_layer,
    flag_setting,
    resolve_key,
)
from ..core.errors import ThumbctlError
from .params import ParameterSource


def typed_value(ctx: Any, name: str) -> Any:
    """The value typed for ``name`` on this command, else on the root (``thumbctl --db X status``), else None."""
    for context in (ctx, ctx.find_root()):
        if name in context.params and context.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            return context.params[name]
    return None


class ConfigDefaults(Mapping[str, Any]):
    """A command's ``default_map``: the config file's layer, loaded when Click first asks (after the eager
    ``--profile``). A broken file offers nothing here and is reported by the command (:func:`file_of`), so
    its error is shown like any other."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self._layer: FileLayer | None = None
        self._error: ThumbctlError | None = None
        self._loaded = False

    def layer(self) -> FileLayer:
        if not self._loaded:
            self._loaded = True
            try:
                self._layer = file_layer(self.ctx.params.get("profile"))
            except ThumbctlError as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        assert self._layer is not None
        return self._layer

    def _values(self) -> dict[str, Any]:
        try:
            return self.layer().by_param()
        except ThumbctlError:
            return {}

    def __getitem__(self, name: str) -> Any:
        return self._values()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values())

    def __len__(self) -> int:
        return len(self._values())


def file_of(ctx: Any) -> FileLayer:
    """The config file's layer of this command (raises the file's error, if any)."""
    defaults = ctx.default_map
    return defaults.layer() if isinstance(defaults, ConfigDefaults) else file_layer(None)


def setting_of(ctx: Any, key: Key, layer: FileLayer) -> Setting:
    """A setting's value and origin, as Click found it; a setting this command does not take resolves
    from the environment, the file and the default."""
    name = key.param_name
    typed = typed_value(ctx, name)
    if typed is not None:
        return flag_setting(key, typed)
    source = ctx.get_parameter_source(name) if name in ctx.params else None
    if source is ParameterSource.ENVIRONMENT:
        return env_setting(key, env_text(ctx.params[name]))
    if source is ParameterSource.DEFAULT_MAP:
        return layer.values[key.name]
    if source is ParameterSource.DEFAULT:
        return default_setting(key)
    return resolve_key(key, {}, os.environ, layer)


def env_text(value: Any) -> Any:
    """An env value as the variable held it: Click splits a repeatable option's value at spaces."""
    return " ".join(value) if isinstance(value, (list, tuple)) else value


def settings_from_context(ctx: Any) -> Settings:
    """Every setting of this command line, with where each came from (``thumbctl config`` shows them)."""
    layer = file_of(ctx)
    profile = ctx.params.get("profile")
    origin = ctx.get_parameter_source("profile") if "profile" in ctx.params else None
    profile_source = {ParameterSource.COMMANDLINE: "flag", ParameterSource.ENVIRONMENT: f"env {PROFILE_ENV}"}
    values = {key.name: setting_of(ctx, key, layer) for key in ALL_KEYS}
    settings = Settings(layer.path, profile, profile_source.get(origin) if profile else None, values)
    from ..publishing.stores import use_s3_options  # the ledger's modules: imported only once settings are read

    use_s3_options(settings.s3_options())
    return settings


def ledger_target(ctx: Any) -> Path | str:
    """The ledger of this command line: --db (here or on the root), THUMBCTL_DB, the file's db, the default."""
    return setting_of(ctx, KEYS_BY_NAME["db"], file_of(ctx)).value
