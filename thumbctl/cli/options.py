"""The command line's option set, declared once: the setting options generated from the settings table
(:data:`thumbctl.config.resolve.KEYS`), the common options (``--db --json -q -v``, also on the root), the options
several commands share, value types that completion can offer, and help grouped in panels. Where each
value came from is :mod:`thumbctl.cli.resolution`.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperOption

from ..config.resolve import KEYS_BY_NAME, PROFILE_ENV, Key, default_text, file_layer, flag_setting, resolve_key
from ..core.errors import UsageError
from .params import PlainCommand, ValueType
from .resolution import ConfigDefaults, typed_value

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
        from ..ledger import Ledger

        target = _completion_ledger(ctx)
        if isinstance(target, Path) and not target.exists():
            return []
        with Ledger(target, read_only=True) as ledger:
            return [(b.batch_id, b.state) for b in ledger.views.batches(50) if b.batch_id.startswith(incomplete)]
    except Exception:  # noqa: BLE001 - a shell's completion gets nothing rather than a traceback
        return []


def _completion_ledger(ctx: typer.Context) -> Path | str:
    db = KEYS_BY_NAME["db"]
    typed = typed_value(ctx, db.param_name)
    if typed is not None:
        return flag_setting(db, typed).value
    return resolve_key(db, {}, os.environ, file_layer(None)).value


def batch_argument(help: str = "Batch id (or a unique prefix, the b_ optional).") -> Any:
    return typer.Argument(metavar="BATCH", help=help, autocompletion=complete_batch_id, show_default=False)


def batch_alias() -> Any:
    """``--batch ID``: the spelling ``work`` and ``stats`` had before BATCH was positional."""
    return typer.Option("--batch", hidden=True, autocompletion=complete_batch_id)


BatchAlias = Annotated[str | None, batch_alias()]


def one_batch(batch: str | None, alias: str | None) -> str | None:
    """BATCH, or the same given as --batch (how `work` and `stats` took it before)."""
    if batch is not None and alias is not None and batch != alias:
        raise UsageError(f"BATCH {batch} and --batch {alias} name different batches: give one")
    return batch if batch is not None else alias


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
    """``app.command`` for a body that takes, besides its own parameters: the named settings (read back
    with :func:`thumbctl.cli.resolution.settings_from_context`), ``--profile`` when it takes any, ``--db``
    always, and ``--json``, ``-q``, ``-v`` when the body has a parameter ``json_out``, ``quiet`` or
    ``verbose`` — which then gets the value typed on the command, else on the root."""

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
            passed |= {n: bool(values[n]) or bool(typed_value(ctx, n)) for n in COMMON_OPTIONS if n in own}
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
StatsIntervalOption = Annotated[
    float,
    typer.Option(
        "--stats-interval",
        envvar="THUMBCTL_STATS_INTERVAL",
        min=0.5,
        metavar="SECONDS",
        help="Off a terminal (CI, pipes): seconds between plain progress lines.",
    ),
]


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


# -- help and usage ----------------------------------------------------------------------------


class PanelCommand(PlainCommand):
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
