"""The layers of thumbctl, read from its source (docs/architecture.md, "Modules").

Every import is read with ``ast``: at the top of a module, under ``if TYPE_CHECKING:`` and inside
functions alike. A room (the first name under ``thumbctl/``) lives on one floor and imports from its
own floor or below, never above; there are no import cycles, no module imports another module's
``_private`` names, and no module is over 600 lines.

There is no list of exceptions: a new violation fails its test, named with the file and line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "thumbctl"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAX_LINES = 600

CORE, ADAPTERS, SERVICES, INTERFACES = range(4)
FLOOR_NAMES = {CORE: "core", ADAPTERS: "adapters", SERVICES: "services", INTERFACES: "interfaces"}

#: The floor of each room: ``thumbctl/NAME.py`` or ``thumbctl/NAME/``. A new room is given its floor here
#: and in docs/architecture.md.
FLOORS = {
    # plain data and rules: no files, no database, no processes of their own
    "errors": CORE,
    "models": CORE,
    "settings": CORE,
    "keys": CORE,
    "encoders": CORE,
    "faults": CORE,
    "admission": CORE,
    "naming": CORE,
    "records": CORE,
    # the outside world: the database, files, pixels, the environment
    "ledger": ADAPTERS,
    "storage": ADAPTERS,
    "imaging": ADAPTERS,
    "sources": ADAPTERS,
    "manifest": ADAPTERS,
    "downloads": ADAPTERS,
    "names": ADAPTERS,
    "config": ADAPTERS,
    "configkeys": ADAPTERS,
    "configfile": ADAPTERS,
    "userdirs": ADAPTERS,
    "proc": ADAPTERS,
    "heap": ADAPTERS,
    "retrypolicy": ADAPTERS,
    "options": ADAPTERS,
    # what thumbctl does, composed from the adapters
    "intake": SERVICES,
    "rerender": SERVICES,
    "focus": SERVICES,
    "entries": SERVICES,
    "lanes": SERVICES,
    "publisher": SERVICES,
    "stores": SERVICES,
    "targets": SERVICES,
    "worker": SERVICES,
    "rendering": SERVICES,
    "reuse": SERVICES,
    "workerproc": SERVICES,
    "pool": SERVICES,
    "runner": SERVICES,
    "engine": SERVICES,
    "reconcile": SERVICES,
    "gc": SERVICES,
    "leftovers": SERVICES,
    "release": SERVICES,
    "migrate": SERVICES,
    "mirror": SERVICES,
    "upkeep": SERVICES,
    "sheet": SERVICES,
    "sheetcrops": SERVICES,
    "markup": SERVICES,
    "stats": SERVICES,
    "review": SERVICES,
    "resume": SERVICES,
    "watch": SERVICES,
    # how people and programs reach it
    "cli": INTERFACES,
    "report": INTERFACES,
    "api": INTERFACES,
    "__main__": INTERFACES,
    "thumbctl": INTERFACES,  # the package itself: the library's public names, imported on first use
}

#: Rooms a room never imports, whatever their floors.
FORBIDDEN = {
    "ledger": (
        {"storage", "stores", "publisher", "markup", "sheet", "report", "cli"},
        "the ledger and storage never import each other: the publisher composes them",
    ),
    "report": ({"cli"}, "the reporter renders views; the command line calls it, never the reverse"),
    "cli": (
        {"storage", "imaging", "migrate"},
        "no SQL, pixels or storage policy in the command line: it calls the library",
    ),
}


#: Typer's own modules thumbctl may import: its public ones, and the Click it carries.
TYPER_PRIVATE_ALLOWED = {"typer._click"}


@dataclass(frozen=True)
class Import:
    importer: str
    module: str  # the thumbctl module (or package) imported
    names: tuple[str, ...]  # the names taken from it (empty for ``import x``)
    line: int


@cache
def modules() -> dict[str, Path]:
    """Every module of thumbctl by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@cache
def tree(module: str) -> ast.Module:
    return ast.parse(modules()[module].read_text(), filename=str(modules()[module]))


def absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a ``from`` import names, resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if modules()[module].name != "__init__.py":
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


@cache
def imports() -> tuple[Import, ...]:
    """Every import of a thumbctl module by a thumbctl module, wherever it stands in the file."""
    known = modules()
    found = []
    for module in known:
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.ImportFrom):
                target = absolute(module, node)
                if not target.startswith("thumbctl"):
                    continue
                plain = []
                for alias in node.names:
                    submodule = f"{target}.{alias.name}"
                    if submodule in known:
                        found.append(Import(module, submodule, (), node.lineno))
                    else:
                        plain.append(alias.name)
                if plain:
                    found.append(Import(module, target, tuple(plain), node.lineno))
            elif isinstance(node, ast.Import):
                found += [
                    Import(module, alias.name, (), node.lineno)
                    for alias in node.names
                    if alias.name.split(".")[0] == "thumbctl"
                ]
    return tuple(i for i in found if i.module != i.importer)


def edges() -> set[tuple[str, str]]:
    return {(i.importer, i.module) for i in imports()}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floor(module: str) -> int:
    return FLOORS[room(module)]


def where(i: Import) -> str:
    return f"{modules()[i.importer].relative_to(PACKAGE.parent)}:{i.line}"


def cycles(graph: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    successors: dict[str, list[str]] = {}
    for a, b in sorted(graph):
        successors.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in successors.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(successors):
        if node not in index:
            visit(node)
    return found


def test_every_room_has_a_floor() -> None:
    missing = sorted({room(m) for m in modules()} - set(FLOORS))
    assert not missing, f"give these a floor in FLOORS (and in docs/architecture.md): {missing}"


def documented_floors() -> dict[str, int]:
    """The floor docs/architecture.md gives each room, from the module map under "Modules"."""
    text = ARCHITECTURE.read_text()
    block = text[text.index("## Modules") :].split("```text\n", 1)[1].split("```", 1)[0]
    found = {}
    current = None
    for line in block.splitlines():
        heading = re.match(r"  floor (\d), ", line)
        entry = re.match(r"  ([A-Za-z_]+)(\.py|/)\s", line)
        if heading:
            current = int(heading.group(1))
        elif entry and current is not None:
            name = entry.group(1)
            found["thumbctl" if name == "__init__" else name] = current
    return found


def test_the_architecture_document_shows_each_room_on_its_floor() -> None:
    documented = documented_floors()
    rooms = {room(m) for m in modules()}
    wrong = {r: (documented.get(r), FLOORS.get(r)) for r in rooms if documented.get(r) != FLOORS.get(r)}
    assert not wrong, f"docs/architecture.md (Modules) and FLOORS disagree, (documented, declared): {wrong}"


def test_the_reading_finds_the_imports_it_must() -> None:
    """A check of the reader itself: a module-level, a TYPE_CHECKING and a function-local import."""
    found = edges()
    assert ("thumbctl.cli.app", "thumbctl.cli.options") in found  # at the top
    assert ("thumbctl.report.runs", "thumbctl.intake") in found  # under TYPE_CHECKING
    assert ("thumbctl.report.output", "thumbctl.report.progress") in found  # inside a method
    assert ("thumbctl.cli.app", "thumbctl") in found  # ``from .. import __version__``


def test_no_import_cycles() -> None:
    found = cycles(edges())
    assert not found, f"import cycles (TYPE_CHECKING and function-local imports count): {found}"


def violations() -> dict[tuple[str, str], str]:
    """Imports that climb a floor or enter a forbidden room, with the rule each breaks."""
    found = {}
    for i in imports():
        if floor(i.module) > floor(i.importer):
            up = f"{FLOOR_NAMES[floor(i.importer)]} imports {FLOOR_NAMES[floor(i.module)]}"
            found.setdefault((i.importer, i.module), f"{where(i)}: {up}")
        rooms, why = FORBIDDEN.get(room(i.importer), (set(), ""))
        if room(i.module) in rooms:
            found.setdefault((i.importer, i.module), f"{where(i)}: {why}")
    return found


def test_no_module_imports_a_higher_floor_or_a_forbidden_room() -> None:
    found = violations()
    assert not found, "\n".join(f"{a} -> {b}  ({rule})" for (a, b), rule in sorted(found.items()))


def test_the_core_imports_only_the_core() -> None:
    upward = [
        f"{where(i)}: {i.importer} -> {i.module}" for i in imports() if floor(i.importer) == CORE < floor(i.module)
    ]
    assert not upward


def test_nothing_below_the_interfaces_imports_them() -> None:
    upward = [
        f"{where(i)}: {i.importer} -> {i.module}"
        for i in imports()
        if floor(i.importer) < INTERFACES and room(i.module) in {"cli", "report", "api"}
    ]
    assert not upward


def private_imports() -> dict[tuple[str, str, str], str]:
    """``(importer, module, name)`` of every ``_private`` name one module takes from another, with where."""
    found = {}
    for i in imports():
        for name in i.names:
            if name.startswith("_") and not name.startswith("__"):
                found[(i.importer, i.module, name)] = where(i)
    for module in modules():  # ``from . import store`` then ``store._name``
        aliases = {
            alias.asname or alias.name: f"{absolute(module, node)}.{alias.name}"
            for node in ast.walk(tree(module))
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if f"{absolute(module, node)}.{alias.name}" in modules()
        }
        for node in ast.walk(tree(module)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found[(module, aliases[node.value.id], node.attr)] = f"{modules()[module].name}:{node.lineno}"
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    found = private_imports()
    assert not found, "\n".join(f"{at}: {a} takes {name} from {b}" for (a, b, name), at in sorted(found.items()))


def lines(module: str) -> int:
    return len(modules()[module].read_text().splitlines())


def test_no_module_is_over_600_lines() -> None:
    over = {m: lines(m) for m in modules() if lines(m) > MAX_LINES}
    assert not over, f"split by concept: {over}"


def test_no_private_typer_module_is_imported() -> None:
    """Typer is used through its public modules (and the Click it carries), so a Typer release that
    reorganizes its insides does not break the command line."""
    private = []
    for module in modules():
        for node in ast.walk(tree(module)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                parts = name.split(".")
                hidden = parts[0] == "typer" and len(parts) > 1 and parts[1].startswith("_")
                if hidden and ".".join(parts[:2]) not in TYPER_PRIVATE_ALLOWED:
                    private.append(f"{modules()[module].name}:{node.lineno}: {name}")
    assert not private


def test_only_the_interfaces_write_to_the_terminal() -> None:
    """The library never prints: what a command says goes through the reporter."""
    writes = []
    for module in modules():
        if floor(module) == INTERFACES:
            continue
        for node in ast.walk(tree(module)):
            printing = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
            streams = (
                isinstance(node, ast.Attribute)
                and node.attr in {"stdout", "stderr", "echo"}
                and isinstance(node.value, ast.Name)
                and node.value.id in {"sys", "typer", "click"}
            )
            if printing or streams:
                writes.append(f"{modules()[module].relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not writes
