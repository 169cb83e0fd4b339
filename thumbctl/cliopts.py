"""The command line's option set, declared once: the setting options generated from the settings table
(:data:`thumbctl.config.KEYS`), the common options (``--db --json -q -v``, also on the root), value types that
completion can offer, help grouped in panels, and where each value came from.

Settings resolution is Click's: an option reads its environment variable (``envvar``), the config file's
values are the command's ``default_map`` (the chosen profile's table over ``[defaults]``), and
``ctx.get_parameter_source`` says which of them gave a value. What Click cannot know is kept here: which
file and which table a value came from, and the parsing of env and file values where an error can name
that origin.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperOption

from .config import (
    ALL_KEYS,
    KEYS_BY_NAME,
    PROFILE_ENV,
    FileLayer,
    Key,
    Setting,
    Settings,
    default_setting,
    default_text,
    env_setting,
    file_layer,
    flag_setting,
    resolve_key,
)
from .errors import ThumbctlError
from .plainparams import ValueType

try:  # the Click that Typer runs on: recent Typer releases carry their own copy of it
    from typer._click.core import ParameterSource
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # a Typer release that runs on Click itself
    from click.core import ParameterSource  # type: ignore[no-redef]
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[no-redef]
    from click.exceptions import UsageError as ClickUsageError  # type: ignore[no-redef]

__all__ = ["ClickException", "ClickUsageError", "NoArgsIsHelpError", "ParameterSource"]

#: The help panel of the options every command shares; a command's own options come first, unpanelled.
COMMON = "Common"
PANEL_ORDER = ("Output", "Render", "Limits", "Workers", "Admission", COMMON)
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class SettingType(ValueType):
    """A setting's value, kept as given: it is parsed where its origin is known, so an error names the flag,
    the environment variable or the file and table (:func:`settings_from_context`), and a command reports
    it like any other error (one line, or a JSON document with --json)."""

    def __init__(self, key: Key) -> None:
        self.key = key

    def complete(self, incomplete: str) -> list[str]:
        return self.key.complete(incomplete) if self.key.complete else []


class Choice(ValueType):
    """One of a closed set of words (``--state``), offered by completion."""

    def __init__(self, choices: Sequence[str]) -> None:
        self.choices = tuple(choices)

    @property
    def metavar(self) -> str:
        return "[" + "|".join(self.choices) + "]"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if value not in self.choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(self.choices)}", ctx=ctx, param=param)
        return value

    def complete(self, incomplete: str) -> list[str]:
        return [choice for choice in self.choices if choice.startswith(incomplete)]


def _completion(kind: ValueType) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:
        return kind.complete(incomplete)

    return complete


def choice_option(*decls: str, choices: Sequence[str], help: str) -> Any:
    kind = Choice(choices)
    return typer.Option(*decls, parser=kind, metavar=kind.metavar, autocompletion=_completion(kind), help=help)


# -- batch ids ---------------------------------------------------------------------------------


def complete_batch_id(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Recent batch ids of the ledger named on the command line (or the configured one), with their state.
    Completion must never fail the shell: any trouble offers nothing."""
    try:
        from .ledger import Ledger

        target = _completion_ledger(ctx)
        if isinstance(target, Path) and not target.exists():
            return []
        with Ledger(target, read_only=True) as ledger:
            return [(b.batch_id, b.state) for b in ledger.views.batches(50) if b.batch_id.startswith(incomplete)]
    except Exception:  # noqa: BLE001 - a shell's completion gets nothing rather than a traceback
        return []


def _completion_ledger(ctx: typer.Context) -> Path | str:
    db = KEYS_BY_NAME["db"]
    typed = _typed(ctx, db.param_name)
    if typed is not None:
        return flag_setting(db, typed).value
    return resolve_key(db, {}, os.environ, file_layer(None)).value


def batch_argument(help: str = "Batch id (or a unique prefix).") -> Any:
    return typer.Argument(metavar="BATCH", help=help, autocompletion=complete_batch_id, show_default=False)


def batch_alias() -> Any:
    """``--batch ID``: the spelling ``work`` and ``stats`` had before BATCH was positional."""
    return typer.Option("--batch", hidden=True, autocompletion=complete_batch_id)


# -- the options, from the table ----------------------------------------------------------------

#: The options every command shares (where they mean something), by the parameter name a body uses.
COMMON_OPTIONS: dict[str, Any] = {
    "json_out": typer.Option("--json", help="Print one JSON document on stdout, nothing else.", rich_help_panel=COMMON),
    "quiet": typer.Option("--quiet", "-q", help="Print errors only.", rich_help_panel=COMMON),
    "verbose": typer.Option(
        "--verbose", "-v", help="More detail: every failure as it happens and in the end.", rich_help_panel=COMMON
    ),
}
ProfileOption = Annotated[
    str | None,
    typer.Option(
        "--profile",
        metavar="NAME",
        envvar=PROFILE_ENV,
        show_envvar=False,
        is_eager=True,  # the config file's layer depends on it: it is read before the setting options
        help="Use [profiles.NAME] of the config file.",
        rich_help_panel=COMMON,
    ),
]


def setting_option(key: Key) -> tuple[Any, Any, Any]:
    """(annotation, Typer option, default) of a setting's option, from its entry in the table."""
    state = "ledger.db in the per-user state folder (~/.local/state/thumbctl on Linux)"
    shown = state if key.name == "db" else default_text(key.name)
    kind = SettingType(key)
    decls = [f"{key.flag}/--no-{key.flag[2:]}"] if key.switch else [key.flag, *filter(None, [key.short])]
    option = typer.Option(
        *decls,
        help=f"{key.help} Default: {shown}.",
        metavar=key.metavar,
        envvar=key.env,
        show_envvar=False,  # the root help lists the environment once
        parser=kind,
        autocompletion=_completion(kind) if key.complete else None,
        show_default=False,
        rich_help_panel=COMMON if key.name == "db" else key.panel,
    )
    if key.switch:
        return bool, option, False
    return (list[str] | None if key.repeat else str | None), option, None


def _panel(param: Any) -> str | None:
    """The help panel of a parameter (Typer's ``rich_help_panel``); Click's own ``--help`` is a common one."""
    if isinstance(param, (TyperOption, TyperArgument)):
        return param.rich_help_panel
    return COMMON


def command(app: typer.Typer, name: str | None = None, *, settings: Sequence[str] = (), **kwargs: Any) -> Callable:
    """``app.command`` for a body that takes, besides its own parameters: the named settings (read back with
    :func:`settings_from_context`), ``--profile`` when it takes any, ``--db`` always, and ``--json``, ``-q``,
    ``-v`` when the body has a parameter ``json_out``, ``quiet`` or ``verbose`` — which then gets the value
    typed on the command, else on the root."""

    def decorate(body: Callable) -> Callable:
        own = inspect.signature(body, eval_str=True).parameters
        params = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in own.values()
            if p.name not in COMMON_OPTIONS and p.name != "ctx"
        ]
        added: dict[str, tuple[Any, Any]] = {}
        for key in (KEYS_BY_NAME[n] for n in settings):
            kind, option, default = setting_option(key)
            added[key.param_name] = (Annotated[kind, option], default)
        if settings:
            added["profile"] = (ProfileOption, None)
        added[KEYS_BY_NAME["db"].param_name] = (DbOption, None)
        added |= {n: (Annotated[bool, COMMON_OPTIONS[n]], False) for n in COMMON_OPTIONS if n in own}
        declared = [_parameter("ctx", typer.Context, inspect.Parameter.empty), *params]
        declared += [_parameter(n, kind, default) for n, (kind, default) in added.items()]

        @functools.wraps(body)
        def run(ctx: typer.Context, **values: Any) -> Any:
            passed = {n: v for n, v in values.items() if n in own}
            passed |= {n: bool(values[n]) or bool(_typed(ctx, n)) for n in COMMON_OPTIONS if n in own}
            if "ctx" in own:
                passed["ctx"] = ctx
            return body(**passed)

        run.__signature__ = inspect.Signature(declared)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in declared}
        return app.command(name, cls=PanelCommand, **kwargs)(run)

    return decorate


_db_kind, _db_option, _ = setting_option(KEYS_BY_NAME["db"])
DbOption = Annotated[_db_kind, _db_option]
JsonOption = Annotated[bool, COMMON_OPTIONS["json_out"]]
QuietOption = Annotated[bool, COMMON_OPTIONS["quiet"]]
VerboseOption = Annotated[bool, COMMON_OPTIONS["verbose"]]


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def _typed(ctx: Any, name: str) -> Any:
    """The value typed for ``name`` on this command, else on the root (``thumbctl --db X status``), else None."""
    for context in (ctx, ctx.find_root()):
        if name in context.params and context.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            return context.params[name]
    return None


# -- resolution --------------------------------------------------------------------------------


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
    typed = _typed(ctx, name)
    if typed is not None:
        return flag_setting(key, typed)
    source = ctx.get_parameter_source(name) if name in ctx.params else None
    if source is ParameterSource.ENVIRONMENT:
        return env_setting(key, _env_text(ctx.params[name]))
    if source is ParameterSource.DEFAULT_MAP:
        return layer.values[key.name]
    if source is ParameterSource.DEFAULT:
        return default_setting(key)
    return resolve_key(key, {}, os.environ, layer)


def _env_text(value: Any) -> Any:
    """An env value as the variable held it: Click splits a repeatable option's value at spaces."""
    return " ".join(value) if isinstance(value, (list, tuple)) else value


def settings_from_context(ctx: Any) -> Settings:
    """Every setting of this command line, with where each came from (``thumbctl config`` shows them)."""
    layer = file_of(ctx)
    profile = ctx.params.get("profile")
    origin = ctx.get_parameter_source("profile") if "profile" in ctx.params else None
    profile_source = {ParameterSource.COMMANDLINE: "flag", ParameterSource.ENVIRONMENT: f"env {PROFILE_ENV}"}
    values = {key.name: setting_of(ctx, key, layer) for key in ALL_KEYS}
    return Settings(layer.path, profile, profile_source.get(origin) if profile else None, values)


def ledger_target(ctx: Any) -> Path | str:
    """The ledger of this command line: --db (here or on the root), THUMBCTL_DB, the file's db, the default."""
    return setting_of(ctx, KEYS_BY_NAME["db"], file_of(ctx)).value


# -- help and usage ----------------------------------------------------------------------------


class PanelCommand(TyperCommand):
    """A command whose help groups its options in panels (its own first), whose usage line reads
    ``SOURCE`` and ``[BATCH]``, and whose ``default_map`` is the config file's layer."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.default_map = ConfigDefaults(ctx)
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = param.metavar or param.name.upper()
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str | None, list[tuple[str, str]]] = {}
        arguments = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                panels.setdefault(_panel(param), []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        for panel in (None, *PANEL_ORDER, *sorted(set(panels) - {None, *PANEL_ORDER})):
            if panel in panels:
                with formatter.section(f"{panel} options" if panel else "Options"):
                    formatter.write_dl(panels[panel])
