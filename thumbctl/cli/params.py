"""Plain command-line values without pydantic: the CLI's start-up, not its behaviour.

Recent Typer releases convert every parameter's value through a pydantic ``TypeAdapter``,
built on first use; importing pydantic and building the adapters costs more than all the rest
of ``thumbctl status`` (see docs/architecture.md, "Start-up"). Yet almost every value a command
line holds is plain: a string, a whole number or a decimal in range, a path, a default that
already has its type. Those are converted here, to what Typer would make of them; anything else
(including every value Typer would reject, so its error messages stay as they are) goes to
Typer's own conversion.

Only public interfaces are used: Typer's parameter classes (``typer.core.TyperOption`` and
``TyperArgument``) are subclassed and Click's ``Parameter.process_value`` overridden, and the
command classes Typer is given (``cls=``) give their parameters these subclasses before parsing.
A parameter whose Typer ``parser`` is a :class:`ValueType` is converted by it, with the context at
hand (a setting's value is checked only when it was typed; see :mod:`thumbctl.cli.options`).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, get_args, get_origin

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ..core.profile import shortened

try:  # the Click that Typer runs on: recent Typer releases carry their own copy of it
    from typer._click.core import ParameterSource
    from typer._click.exceptions import BadParameter, ClickException, MissingParameter, NoArgsIsHelpError
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # a Typer release that runs on Click itself
    from click.core import ParameterSource  # type: ignore[no-redef]
    from click.exceptions import (  # type: ignore[no-redef]
        BadParameter,
        ClickException,
        MissingParameter,
        NoArgsIsHelpError,
    )
    from click.exceptions import UsageError as ClickUsageError  # type: ignore[no-redef]

__all__ = ["ClickException", "ClickUsageError", "NoArgsIsHelpError", "ParameterSource"]

WHOLE = re.compile(r"-?(0|[1-9][0-9]*)")
DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
#: Returned when a value is not plain: Typer's own conversion decides.
NOT_PLAIN = object()


class ValueType:
    """A parameter's value type, given as Typer's ``parser``: :meth:`convert` sees the context (where
    the value came from). Typer's own conversion calls it with the value alone: then the value is
    kept as given."""

    def __call__(self, value: Any) -> Any:
        return value

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return value

    def complete(self, incomplete: str) -> list[str]:
        return []


def processed(param: Any, ctx: Any, value: Any, typer_process: Callable[[Any, Any], Any]) -> Any:
    """Click's ``process_value`` for a Typer parameter: a plain value is converted here, then checked
    and handed to the parameter's callback as Typer does; any other value takes Typer's way."""
    converted = plain_value(param, value, ctx)
    if converted is NOT_PLAIN:
        return typer_process(ctx, value)
    if param.required and param.value_is_missing(converted):
        raise MissingParameter(ctx=ctx, param=param)
    if param.callback is not None:
        converted = param.callback(ctx, param, converted)
    return converted


class PlainOption(TyperOption):
    """A Typer option converting its plain values itself."""

    def process_value(self, ctx: Any, value: Any) -> Any:
        return processed(self, ctx, value, super().process_value)


class PlainArgument(TyperArgument):
    """A Typer argument converting its plain values itself."""

    def process_value(self, ctx: Any, value: Any) -> Any:
        return processed(self, ctx, value, super().process_value)


#: The class each of Typer's parameter classes is given: the same state, one method more.
PLAIN_CLASSES: dict[type, type] = {TyperOption: PlainOption, TyperArgument: PlainArgument}


def convert_plainly(params: Iterable[Any]) -> None:
    """Give Typer's parameters among ``params`` the plain conversion (Click's own, such as ``--help``,
    stay as they are)."""
    for param in params:
        plain = PLAIN_CLASSES.get(type(param))
        if plain is not None:
            param.__class__ = plain


class PlainValues:
    """A command (or group) whose parameters, Typer's completion options included, convert their
    plain values themselves."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        convert_plainly(self.get_params(ctx))  # type: ignore[attr-defined]
        return super().parse_args(ctx, args)  # type: ignore[misc]


class PlainGroup(PlainValues, TyperGroup):
    """Typer's command group, converting the plain values of its own options (``--version``, the
    completion ones)."""


class PlainCommand(PlainValues, TyperCommand):
    """Typer's command, converting the plain values of its options and arguments."""


def plain_value(param: Any, value: Any, ctx: Any) -> Any:
    """``value`` as Typer would convert it for ``param``, or :data:`NOT_PLAIN`."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:  # a Typer release without pydantic: it converts every value itself
        return NOT_PLAIN
    if value is None:
        return () if param.multiple or param.nargs == -1 else None
    annotation = descriptor.annotation
    info = descriptor.parameter_info
    if isinstance(info.parser, ValueType):
        return info.parser.convert(list(value) if isinstance(value, tuple) else value, param, ctx)
    if info.parser is not None or descriptor.file_annotation is not None:
        return NOT_PLAIN
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        plain_strings = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return list(value) if plain_strings else NOT_PLAIN
    if annotation is str:
        return value if isinstance(value, str) else NOT_PLAIN
    if annotation is bool:
        return value if isinstance(value, bool) else NOT_PLAIN
    if annotation is int:
        return in_range(number(value, int, WHOLE, param, ctx), info)
    if annotation is float:
        return in_range(number(value, float, DECIMAL, param, ctx), info)
    if annotation is Path and isinstance(value, str):
        return plain_path(value, info)
    return NOT_PLAIN


def number(value: Any, kind: type, pattern: re.Pattern[str], param: Any, ctx: Any) -> Any:
    if type(value) is kind:
        return value
    if isinstance(value, str) and pattern.fullmatch(value):
        try:
            converted = kind(value)
        except ValueError:  # more digits than Python converts to an int
            limit = f"at most {sys.get_int_max_str_digits()} digits"
            raise BadParameter(f"must be a whole number of {limit}, got {shortened(value)}", ctx, param) from None
        if not math.isfinite(converted):  # a float of more digits than a double holds
            raise BadParameter(f"too large: {shortened(value)}", ctx, param)
        return converted
    return NOT_PLAIN


def in_range(value: Any, info: Any) -> Any:
    """``value`` if inside the parameter's bounds; out of them Typer reports (or clamps) it."""
    if value is NOT_PLAIN or info.clamp:
        return NOT_PLAIN
    if (info.min is not None and value < info.min) or (info.max is not None and value > info.max):
        return NOT_PLAIN
    return value


def plain_path(value: str, info: Any) -> Any:
    """A path option with no checks asked for (Typer's defaults): the path, when nothing is there or
    what is there is readable; anything else Typer checks, and reports in its words."""
    unchecked = (
        info.path_type is None
        and not (info.exists or info.writable or info.resolve_path or info.allow_dash)
        and info.file_okay
        and info.dir_okay
    )
    if not unchecked:
        return NOT_PLAIN
    path = Path(value)
    try:
        os.stat(path)
    except OSError:
        return path
    return path if not info.readable or os.access(path, os.R_OK) else NOT_PLAIN
