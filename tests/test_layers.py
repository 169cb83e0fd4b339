"""The layers of thumbctl, read from its source (docs/architecture.md, "Packages").

Every import is read with ``ast``: at the top of a module, under ``if TYPE_CHECKING:`` and inside
functions alike. A package (the first name under ``thumbctl/``) has a rank and imports only its own
modules and packages of a lower rank, so there are no cycles between packages; there are no import
cycles between modules either, no module imports another module's ``_private`` names, no module is
over 600 lines, at most 12 modules sit directly in ``thumbctl/``, and each package's docstring says
what it owns and what it imports.

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
MAX_TOP_LEVEL_MODULES = 12

#: The rank of each package (``thumbctl/NAME/``) and top-level module (``thumbctl/NAME.py``): a package
#: imports only packages of a lower rank. A new package is given its rank here and in docs/architecture.md.
RANKS = {
    "core": 0,  # plain data and rules: errors, models, profile, digests, retry policies
    "config": 1,  # the settings table, the config file, resolution
    "imaging": 2,  # pixels
    "ledger": 2,  # the database
    "storage": 3,  # object stores and output targets: folders and buckets
    "sources": 4,  # scans, manifests, item ids, URL downloads
    "review": 4,  # the contact sheet, markup, statistics
    "publishing": 5,  # where the ledger and storage meet
    "intake": 6,  # a submission recorded and admitted
    "upkeep": 7,  # reconcile, gc, mirror, release, leftovers, the old-layout migration
    "engine": 8,  # the pool, workers, the foreground run, watch
    "cropreview": 8,  # the review page's library session: photos, Apply as a batch, Approve
    "report": 9,  # what a command says
    "testing": 9,  # in-memory ports for callers' unit tests
    "web": 9,  # the review page over HTTP (Starlette, uvicorn)
    "api": 10,  # the one-call Python API
    "cli": 10,  # the command line
    "thumbctl": 11,  # the package itself: the library's public names, imported on first use
    "__main__": 11,
}
INTERFACES = {"report", "web", "cli", "api", "thumbctl", "__main__"}

#: Packages a package never imports, whatever their ranks.
FORBIDDEN = {
    "cli": ({"storage", "imaging"}, "no SQL, pixels or storage policy in the command line: it calls the library"),
    "web": ({"ledger", "storage", "imaging", "intake"}, "the review page's web layer calls the review session"),
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
    """The package (or top-level module) a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def rank(module: str) -> int:
    return RANKS[room(module)]


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


def test_every_package_has_a_rank() -> None:
    missing = sorted({room(m) for m in modules()} - set(RANKS))
    assert not missing, f"give these a rank in RANKS (and in docs/architecture.md): {missing}"


def test_at_most_twelve_modules_sit_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"move these into a package named for their concern: {top}"


def test_each_package_says_what_it_owns_and_what_it_imports() -> None:
    silent = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if not doc or "\nImports:" not in doc:
            silent.append(str(init.relative_to(PACKAGE.parent)))
    assert not silent, f"a package docstring says what it owns, then 'Imports: ...': {silent}"


def documented_ranks() -> dict[str, int]:
    """The rank docs/architecture.md gives each package, from the map under "Packages"."""
    text = ARCHITECTURE.read_text()
    block = text[text.index("## Packages") :].split("```text\n", 1)[1].split("```", 1)[0]
    found = {}
    for line in block.splitlines():
        entry = re.match(r"\s*(\d+)\s+([A-Za-z_]+)(\.py|/)\s", line)
        if entry:
            name = entry.group(2)
            found["thumbctl" if name == "__init__" else name] = int(entry.group(1))
    return found


def test_the_architecture_document_shows_each_package_at_its_rank() -> None:
    documented = documented_ranks()
    rooms = {room(m) for m in modules()}
    wrong = {r: (documented.get(r), RANKS.get(r)) for r in rooms if documented.get(r) != RANKS.get(r)}
    assert not wrong, f"docs/architecture.md (Packages) and RANKS disagree, (documented, declared): {wrong}"


def test_the_reading_finds_the_imports_it_must() -> None:
    """A check of the reader itself: a module-level, a TYPE_CHECKING and a function-local import."""
    found = edges()
    assert ("thumbctl.cli.app", "thumbctl.cli.options") in found  # at the top
    assert ("thumbctl.report.runs", "thumbctl.intake.prepared") in found  # under TYPE_CHECKING
    assert ("thumbctl.report.output", "thumbctl.report.progress") in found  # inside a method
    assert ("thumbctl.cli.app", "thumbctl.core.version") in found  # ``from ..core.version import``


def test_no_import_cycles_between_modules() -> None:
    found = cycles(edges())
    assert not found, f"import cycles (TYPE_CHECKING and function-local imports count): {found}"


def test_no_import_cycles_between_packages() -> None:
    found = cycles({(room(a), room(b)) for a, b in edges() if room(a) != room(b)})
    assert not found, f"packages that import each other: {found}"


def violations() -> dict[tuple[str, str], str]:
    """Imports of a package of the same or a higher rank, or of a forbidden one, with the rule each breaks."""
    found = {}
    for i in imports():
        if room(i.module) != room(i.importer) and rank(i.module) >= rank(i.importer):
            climb = f"{room(i.importer)} (rank {rank(i.importer)}) imports {room(i.module)} (rank {rank(i.module)})"
            found.setdefault((i.importer, i.module), f"{where(i)}: {climb}")
        rooms, why = FORBIDDEN.get(room(i.importer), (set(), ""))
        if room(i.module) in rooms:
            found.setdefault((i.importer, i.module), f"{where(i)}: {why}")
    return found


def test_no_package_imports_one_of_its_rank_or_above_or_a_forbidden_one() -> None:
    found = violations()
    assert not found, "\n".join(f"{a} -> {b}  ({rule})" for (a, b), rule in sorted(found.items()))


def test_the_core_imports_only_itself() -> None:
    outside = [
        f"{where(i)}: {i.importer} -> {i.module}" for i in imports() if room(i.importer) == "core" != room(i.module)
    ]
    assert not outside


def test_configuration_imports_only_the_core() -> None:
    outside = [
        f"{where(i)}: {i.importer} -> {i.module}"
        for i in imports()
        if room(i.importer) == "config" and room(i.module) not in {"config", "core"}
    ]
    assert not outside


def test_nothing_below_the_interfaces_imports_them() -> None:
    upward = [
        f"{where(i)}: {i.importer} -> {i.module}"
        for i in imports()
        if room(i.importer) not in INTERFACES and room(i.module) in INTERFACES
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
        if room(module) in INTERFACES:
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
