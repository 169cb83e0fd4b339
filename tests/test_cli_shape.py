"""The shape of the command line, read from its source with ``ast``: a command's body (after its
signature and docstring) is at most 30 lines; the work lives in the library (a submit runs through
:class:`thumbctl.engine.session.SubmitSession`) and in the command line's named helpers.

A command is a function ``cli/app.py`` registers: the first element of each entry of its
``COMMANDS`` tuple, found in the ``cli`` module ``app.py`` imports it from."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parent.parent / "thumbctl" / "cli"
MAX_BODY_LINES = 30


@cache
def parsed(module: str) -> ast.Module:
    return ast.parse((CLI / f"{module}.py").read_text(), filename=f"thumbctl/cli/{module}.py")


def registered_commands() -> list[tuple[str, str]]:
    """(module, function) of every command ``cli/app.py`` registers, in its order."""
    app = parsed("app")
    origin = {
        alias.asname or alias.name: node.module
        for node in app.body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }
    [table] = [node.value for node in app.body if _assigns(node, "COMMANDS")]
    assert isinstance(table, ast.Tuple)
    names = [entry.elts[0].id for entry in table.elts if isinstance(entry, ast.Tuple)]
    return [(origin.get(name, "app"), name) for name in names]


def _assigns(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    return isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name


def body_lines(function: ast.FunctionDef) -> int:
    """Lines from the first statement after the docstring to the end of the last one."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    return body[-1].end_lineno - body[0].lineno + 1  # type: ignore[operator]


def function(module: str, name: str) -> ast.FunctionDef:
    [found] = [n for n in parsed(module).body if isinstance(n, ast.FunctionDef) and n.name == name]
    return found


def test_every_registered_command_is_found() -> None:
    commands = registered_commands()
    assert len(commands) >= 15
    assert {("runs", "submit_command"), ("runs", "retry"), ("watch", "watch_command")} <= set(commands)


@pytest.mark.parametrize(("module", "name"), registered_commands(), ids=lambda v: str(v))
def test_a_command_body_is_at_most_30_lines(module: str, name: str) -> None:
    found = function(module, name)
    lines = body_lines(found)
    assert lines <= MAX_BODY_LINES, (
        f"thumbctl/cli/{module}.py:{found.lineno}: the body of command {name} is {lines} lines "
        f"(at most {MAX_BODY_LINES}): move its steps into the library or a named helper"
    )


def test_the_count_is_of_the_body_after_the_signature_and_the_docstring() -> None:
    source = '''
def command(
    a: int,
    b: int,
) -> None:
    """Docstring,
    over two lines."""
    first = a

    return None
'''
    [fn] = ast.parse(source).body
    assert isinstance(fn, ast.FunctionDef) and body_lines(fn) == 3
