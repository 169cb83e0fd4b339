"""Plain command-line values without pydantic: the CLI's start-up, not its behaviour.

Recent Typer releases convert every parameter's value through a pydantic ``TypeAdapter``,
built on first use; importing pydantic and building the adapters costs more than all the rest
of ``thumbctl status`` (about 90 ms). Yet almost every value a command line holds is plain: a
string, a whole number or a decimal in range, a path, a default that already has its type. This
module converts exactly those itself, to what Typer would make of them, and hands anything
else (including every value Typer would reject, so its error messages stay as they are) to
Typer's own conversion, built then.

A parameter whose Typer ``parser`` is a :class:`ValueType` is converted by it, with the context at
hand (a setting's value is checked only when it was typed; see :mod:`thumbctl.cliopts`).

It relies on Typer's parameters (``typer.core.TyperOption`` and ``TyperArgument``) building their
conversion lazily into ``_runtime_param``, and on Typer's own conversion functions; where those are
missing (another Typer release), it changes nothing and Typer converts every value as usual.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args, get_origin

from typer.core import TyperArgument, TyperGroup, TyperOption

try:  # Typer's own conversions (already imported by Typer itself, so free here)
    from typer._coercion import build_runtime_param
    from typer._param_types import coerce_cli_path
except ImportError:  # another Typer release: leave every value to Typer
    build_runtime_param = coerce_cli_path = None

_WHOLE = re.compile(r"-?(0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
#: Returned when a value is not plain: Typer's own conversion decides.
_NOT_PLAIN = object()


class PlainGroup(TyperGroup):
    """Typer's command group, converting the plain values of its own options (``--version``, the
    completion ones) and of the command a command line names."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install(self, ctx)
        return super().parse_args(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            install(command, ctx)
        return command


def install(command: Any, ctx: Any) -> None:
    """Convert plain values of ``command``'s parameters (with ``--help``) here: see the module's docstring."""
    if build_runtime_param is None or coerce_cli_path is None:
        return
    for param in command.get_params(ctx):
        if isinstance(param, (TyperOption, TyperArgument)) and param._runtime_param is None:
            param._runtime_param = PlainFirst(param.type_descriptor)


class ValueType:
    """A parameter's value type, given as Typer's ``parser``: :meth:`convert` sees the context (where
    the value came from). Typer's own conversion calls it with the value alone (another Typer release):
    then the value is kept as given."""

    def __call__(self, value: Any) -> Any:
        return value

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return value

    def complete(self, incomplete: str) -> list[str]:
        return []


class PlainFirst:
    """A parameter's conversion: plain values here, the rest by Typer's own, built on first need."""

    def __init__(self, descriptor: Any) -> None:
        self.descriptor = descriptor
        self._typer: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        plain = _plain(self.descriptor, value, param, ctx)
        if plain is not _NOT_PLAIN:
            return plain
        if self._typer is None:
            self._typer = build_runtime_param(self.descriptor)
        return self._typer.coerce(value, param=param, ctx=ctx)


def _plain(descriptor: Any, value: Any, param: Any, ctx: Any) -> Any:
    annotation = descriptor.annotation
    info = descriptor.parameter_info
    if isinstance(info.parser, ValueType):
        return info.parser.convert(list(value) if isinstance(value, tuple) else value, param, ctx)
    if info.parser is not None or descriptor.file_annotation is not None:
        return _NOT_PLAIN
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        plain_strings = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return list(value) if plain_strings else _NOT_PLAIN
    if annotation is str:
        return value if isinstance(value, str) else _NOT_PLAIN
    if annotation is bool:
        return value if isinstance(value, bool) else _NOT_PLAIN
    if annotation is int:
        return _in_range(_number(value, int, _WHOLE), info)
    if annotation is float:
        return _in_range(_number(value, float, _DECIMAL), info)
    if annotation is Path and info.path_type is None and isinstance(value, str):
        return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
    return _NOT_PLAIN


def _number(value: Any, kind: type, pattern: re.Pattern[str]) -> Any:
    if type(value) is kind:
        return value
    if isinstance(value, str) and pattern.fullmatch(value):
        return kind(value)
    return _NOT_PLAIN


def _in_range(number: Any, info: Any) -> Any:
    """``number`` if inside the parameter's bounds; out of them Typer reports (or clamps) it."""
    if number is _NOT_PLAIN or info.clamp:
        return _NOT_PLAIN
    if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
        return _NOT_PLAIN
    return number
