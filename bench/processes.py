"""Measurement: how many test functions start a process or a server, counted statically with ``ast``.

A test function is a ``def test_*`` at the top of a ``tests/test_*.py`` module or in one of its
``Test*`` classes (one function, however many cases it is parametrized into). It **starts a
process** when its body, or anything it reaches, calls one of:

- ``subprocess.run``/``Popen``/``call``/``check_*``/``get*output``, ``os.fork``/``forkpty``/
  ``spawn*``/``exec*``/``posix_spawn*``/``system``/``popen``, ``pty.spawn``,
  ``asyncio.create_subprocess_*``, ``multiprocessing.*``, ``ProcessPoolExecutor``;

and it **starts a server** when what it reaches builds a ``socketserver``/``http.server`` server
(or a class of tests/ derived from one): the tests' own HTTP servers run on a thread of the test
process. A server that runs anyway (the dev PostgreSQL server of ``THUMBCTL_TEST_PG``, on which
``pg_url`` only creates a database) is not started by the test.

What a test reaches, followed transitively through the code of ``tests/`` only:

- the functions and classes of tests/ it names (called or passed on), found through the module's
  own definitions and its imports of other tests/ modules (``harness``, ``support``, ``s3``, ...);
  naming a class reaches its ``__init__`` (and its server base, if any);
- ``obj.method(...)`` when ``obj``'s class is known: a parameter or fixture annotated with a
  tests/ class (also as ``Iterator[C]``), a name bound to ``C(...)`` (``=`` or ``with ... as``),
  or ``self``; the method's body decides (``Thumbctl.run``/``start`` start a process,
  ``Thumbctl.invoke`` runs Typer's ``CliRunner`` in this process). ``Thumbctl.json`` counts as
  starting one, although it runs a plain ``status``/``events`` read in this process: the count
  looks at bodies, not arguments;
- the fixtures it requests: its parameters, ``@pytest.mark.usefixtures``, ``request.
  getfixturevalue("name")`` with a literal name, and the autouse fixtures of its module and of
  ``tests/conftest.py``; a module's fixture before conftest's, each fixture's own requests in turn.
  What a fixture of a wider scope (``module``, ``session``) starts is started once for many tests:
  it counts, and is also shown apart (a test that starts nothing of its own).

Type annotations reach nothing (``server: HttpServer`` starts no server).

Calls into ``thumbctl`` are not followed, but its entry points that fork workers count as starting
a process (:data:`LIBRARY_PROCESS_CALLS`: ``render``, ``run_batch``, the pool), and so does an
``invoke`` (Typer's ``CliRunner`` or the harness's) of a command that renders with the pool
(:data:`WORKER_COMMANDS`, without ``--detach``, ``--dry-run`` or ``--help``): any call whose
first string argument is such a command's literal name (``cli("submit", ...)`` through a
fixture's in-process runner) counts. A test that
renders in its own process calls :func:`thumbctl.engine.worker.run_worker` instead.

Run from the repository root::

    python bench/processes.py [--list] [--tests DIR]

It prints the number of test functions, how many start a process or a server (and each kind),
and the share; ``--list`` also prints each such test with what it reaches first.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROCESS = "process"
SERVER = "server"
SHARED = "shared "


def as_shared(kind: str) -> str:
    """``kind`` started by a fixture of a wider scope: once for many tests."""
    return kind if kind.startswith(SHARED) else SHARED + kind


#: Calls of the standard library that start a process, by module: every callable of the module,
#: or only the names listed.
PROCESS_CALLS: dict[str, frozenset[str] | None] = {
    "subprocess": frozenset({"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}),
    "multiprocessing": None,
    "pty": frozenset({"spawn", "fork"}),
    "asyncio": frozenset({"create_subprocess_exec", "create_subprocess_shell"}),
    "concurrent.futures": frozenset({"ProcessPoolExecutor"}),
}
#: thumbctl's own entry points that fork worker processes (its worker pool).
LIBRARY_PROCESS_CALLS = frozenset(
    {
        "thumbctl.render",
        "thumbctl.api.render",
        "thumbctl.engine.runner.run_batch",
        "thumbctl.engine.runner.run_work",
        "thumbctl.engine.runner.prepare_workers",
        "thumbctl.engine.pool.Pool",
        "thumbctl.engine.pool.Standby",
    }
)
#: Commands that render with the worker pool unless ``--detach``: run in this process (Typer's
#: ``CliRunner.invoke`` or the harness's ``invoke``), they still fork workers.
WORKER_COMMANDS = frozenset({"submit", "work", "retry", "watch"})
#: Flags with which those commands start no worker.
NO_WORKERS = frozenset({"--detach", "--dry-run", "--help"})
OS_PROCESS_PREFIXES = ("fork", "spawn", "exec", "posix_spawn", "system", "popen")
#: Server classes of the standard library: building one (or a subclass) starts a server.
SERVER_CLASSES = frozenset(
    {
        "HTTPServer",
        "ThreadingHTTPServer",
        "TCPServer",
        "ThreadingTCPServer",
        "UDPServer",
        "ThreadingUDPServer",
        "UnixStreamServer",
        "ThreadingUnixStreamServer",
    }
)
SERVER_MODULES = frozenset({"http.server", "socketserver"})


@dataclass
class Node:
    """A function, method, class or fixture of tests/: what it starts itself and what it reaches."""

    name: str
    kinds: set[str] = field(default_factory=set)
    reaches: list[str] = field(default_factory=list)
    #: A fixture of a wider scope than the test (module, session): what it starts is started once
    #: for many tests, and counts for them as shared.
    shared: bool = False


@dataclass
class Module:
    """One module of tests/: its definitions, imports and fixtures."""

    name: str
    tree: ast.Module
    defs: dict[str, ast.AST] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module" or "module.attr"
    fixtures: dict[str, ast.FunctionDef] = field(default_factory=dict)
    autouse: list[str] = field(default_factory=list)


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def forks_workers(call: ast.Call) -> bool:
    """Whether ``call`` runs a command of :data:`WORKER_COMMANDS` without :data:`NO_WORKERS`, judged by
    its literals: the command is its first string argument (``cli("submit", ...)``,
    ``invoke(case, "work", ...)``, ``harness.run(...)``) or starts the list of a Typer
    ``invoke(app, ["submit", ...])``."""
    words = call.args
    if len(call.args) > 1 and isinstance(call.args[1], ast.List) and getattr(call.func, "attr", "") == "invoke":
        words = call.args[1].elts
    texts = [w.value for w in words if isinstance(w, ast.Constant) and isinstance(w.value, str)]
    return bool(texts) and texts[0] in WORKER_COMMANDS and not NO_WORKERS & set(texts)


def fixture_decorator(function: ast.FunctionDef) -> ast.AST | None:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if dotted(target) in ("pytest.fixture", "fixture"):
            return decorator
    return None


def annotations(function: ast.AST) -> set[int]:
    """The ids of the nodes of ``function``'s type annotations (its parameters', its return's and
    its annotated names')."""
    roots: list[ast.AST] = []
    for node in ast.walk(function):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            roots.append(node.returns)
    return {id(sub) for root in roots for sub in ast.walk(root)}


def is_shared(decorator: ast.AST) -> bool:
    """Whether a fixture's decorator gives it a scope wider than one test."""
    return isinstance(decorator, ast.Call) and any(
        k.arg == "scope" and isinstance(k.value, ast.Constant) and k.value.value != "function"
        for k in decorator.keywords
    )


def is_autouse(decorator: ast.AST) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "autouse" and isinstance(k.value, ast.Constant) and k.value.value is True for k in decorator.keywords
    )


def load(folder: Path) -> dict[str, Module]:
    modules = {}
    for path in sorted(folder.glob("*.py")):
        module = Module(path.stem, ast.parse(path.read_text(), str(path)))
        for statement in module.tree.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                module.defs[statement.name] = statement
                decorator = fixture_decorator(statement) if not isinstance(statement, ast.ClassDef) else None
                if decorator is not None:
                    module.fixtures[statement.name] = statement  # type: ignore[assignment]
                    if is_autouse(decorator):
                        module.autouse.append(statement.name)
            elif isinstance(statement, ast.Import):
                for alias in statement.names:
                    module.imports[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                for alias in statement.names:
                    module.imports[alias.asname or alias.name] = f"{statement.module}.{alias.name}"
        modules[module.name] = module
    return modules


class Graph:
    """The nodes of tests/ and the kinds each reaches, computed once per node."""

    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules
        self.nodes: dict[str, Node] = {}
        self.first: dict[str, str] = {}

    # -- resolution ---------------------------------------------------------------------------

    def qualified(self, module: Module, name: str) -> str | None:
        """The node of tests/ that ``name`` (maybe dotted) means in ``module``, or None."""
        head, _, rest = name.partition(".")
        if head in module.defs:
            return f"{module.name}.{name}" if not rest or isinstance(module.defs[head], ast.ClassDef) else None
        target = module.imports.get(head)
        if target is None:
            return None
        full = f"{target}.{rest}" if rest else target
        owner, _, attr = full.partition(".")
        if owner in self.modules and attr:
            inner = self.modules[owner]
            return self.qualified(inner, attr)
        return None

    def class_of(self, module: Module, annotation: ast.AST | None) -> str | None:
        """The tests/ class an annotation names (``C``, ``"C"``, ``Iterator[C]``, ``C | None``)."""
        if annotation is None:
            return None
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(annotation, ast.Subscript):
            return self.class_of(module, annotation.slice)
        if isinstance(annotation, ast.BinOp):
            return self.class_of(module, annotation.left) or self.class_of(module, annotation.right)
        if isinstance(annotation, ast.Tuple):
            return next((c for e in annotation.elts if (c := self.class_of(module, e))), None)
        name = dotted(annotation)
        qualified = self.qualified(module, name) if name else None
        return qualified if qualified and self.is_class(qualified) else None

    def definition(self, qualified: str) -> tuple[Module, ast.AST] | None:
        module_name, _, rest = qualified.partition(".")
        module = self.modules.get(module_name)
        if module is None:
            return None
        head, _, attr = rest.partition(".")
        node = module.defs.get(head)
        if node is None:
            return None
        if attr:
            if not isinstance(node, ast.ClassDef):
                return None
            node = next((s for s in node.body if getattr(s, "name", None) == attr), None)
            if node is None:
                return self.inherited(module, qualified)
        return module, node

    def inherited(self, module: Module, qualified: str) -> tuple[Module, ast.AST] | None:
        """A method a tests/ class takes from a tests/ base class."""
        class_name, method = qualified.rsplit(".", 1)
        found = self.definition(class_name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        for base in found[1].bases:
            name = dotted(base)
            base_class = self.qualified(found[0], name) if name else None
            if base_class and (hit := self.definition(f"{base_class}.{method}")):
                return hit
        return None

    def methods(self, module: Module, definition: ast.ClassDef) -> Iterator[str]:
        """The names of the methods of a tests/ class, its bases' included."""
        for statement in definition.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                yield statement.name
        for base in definition.bases:
            name = dotted(base)
            base_class = self.qualified(module, name) if name else None
            found = self.definition(base_class) if base_class else None
            if found is not None and isinstance(found[1], ast.ClassDef):
                yield from self.methods(found[0], found[1])

    def is_class(self, qualified: str) -> bool:
        found = self.definition(qualified)
        return found is not None and isinstance(found[1], ast.ClassDef)

    # -- what a body does ---------------------------------------------------------------------

    def primitive(self, module: Module, call: ast.Call) -> str | None:
        """PROCESS or SERVER when ``call`` is one of the standard library's, else None."""
        if forks_workers(call):
            return PROCESS
        name = dotted(call.func)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        full = module.imports.get(head, head) + (f".{rest}" if rest else "")
        owner, _, attr = full.rpartition(".")
        if full in LIBRARY_PROCESS_CALLS:
            return PROCESS
        if owner == "os" and attr.startswith(OS_PROCESS_PREFIXES):
            return PROCESS
        for prefix, names in PROCESS_CALLS.items():
            if (owner == prefix or owner.startswith(prefix + ".")) and (names is None or attr in names):
                return PROCESS
        if attr in SERVER_CLASSES and (owner in SERVER_MODULES or not owner):
            return SERVER
        return None

    def bindings(self, module: Module, function: ast.AST, own_class: str | None, requests: bool) -> dict[str, str]:
        """Names in ``function`` whose tests/ class is known: ``self``, annotated parameters,
        fixtures (when ``requests``: a test or a fixture), names bound to ``C(...)``."""
        known: dict[str, str] = {}
        arguments = getattr(function, "args", None)
        if arguments is not None:
            for position, arg in enumerate([*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]):
                if position == 0 and arg.arg == "self" and own_class:
                    known["self"] = own_class
                elif cls := self.class_of(module, arg.annotation) or (
                    self.fixture_class(module, arg.arg, own_class) if requests else None
                ):
                    known[arg.arg] = cls
        for node in ast.walk(function):
            value, targets = None, []
            if isinstance(node, ast.Assign):
                value, targets = node.value, node.targets
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                value, targets = node.value, [node.target]
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                value, targets = node.context_expr, [node.optional_vars]
            if isinstance(value, ast.Call) and (cls := self.returned_class(module, known, value)):
                for target in targets:
                    if isinstance(target, ast.Name):
                        known[target.id] = cls
        return known

    def callee(self, module: Module, known: dict[str, str], call: ast.Call) -> str | None:
        """The tests/ function or class ``call`` calls, or None."""
        name = dotted(call.func)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in known and rest:
            return f"{known[head]}.{rest.split('.')[0]}"
        return self.qualified(module, name)

    def returned_class(self, module: Module, known: dict[str, str], call: ast.Call) -> str | None:
        """The tests/ class of what ``call`` returns: the class it builds, or its callee's return
        annotation."""
        target = self.callee(module, known, call)
        if target is None:
            return None
        if self.is_class(target):
            return target
        found = self.definition(target)
        if found is None:
            return None
        return self.class_of(found[0], getattr(found[1], "returns", None))

    def fixture(self, module: Module, name: str, own_class: str | None = None) -> str | None:
        """The fixture ``name`` as a test of ``module`` (and ``own_class``) sees it: its class's
        (or a base class's), else its module's, else conftest's."""
        if own_class is not None:
            found = self.definition(f"{own_class}.{name}")
            if found is not None and isinstance(found[1], ast.FunctionDef) and fixture_decorator(found[1]):
                return f"{own_class}.{name}"
        if name in module.fixtures:
            return f"{module.name}.{name}"
        conftest = self.modules.get("conftest")
        if conftest is not None and name in conftest.fixtures:
            return f"conftest.{name}"
        return None

    def fixture_class(self, module: Module, name: str, own_class: str | None) -> str | None:
        """The tests/ class of the value of fixture ``name`` (its return annotation), or None."""
        fixture = self.fixture(module, name, own_class)
        found = self.definition(fixture) if fixture else None
        return self.class_of(found[0], getattr(found[1], "returns", None)) if found else None

    def requested(self, module: Module, function: ast.AST) -> Iterator[str]:
        """The fixtures ``function`` asks for: parameters, ``usefixtures``, ``getfixturevalue``."""
        arguments = getattr(function, "args", None)
        if arguments is not None:
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                yield arg.arg
        for decorator in getattr(function, "decorator_list", []):
            if isinstance(decorator, ast.Call) and (dotted(decorator.func) or "").endswith("usefixtures"):
                yield from (a.value for a in decorator.args if isinstance(a, ast.Constant))
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getfixturevalue"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                yield node.args[0].value

    def build(self, qualified: str) -> Node:
        """The node of ``qualified``: its own kinds and what it reaches (not yet transitive)."""
        node = Node(qualified)
        found = self.definition(qualified)
        if found is None:
            return node
        module, definition = found
        if isinstance(definition, ast.ClassDef):
            for base in definition.bases:
                name = dotted(base) or ""
                if name.rsplit(".", 1)[-1] in SERVER_CLASSES:
                    node.kinds.add(SERVER)
                elif (base_class := self.qualified(module, name)) and self.is_class(base_class):
                    node.reaches.append(base_class)
            if any(getattr(s, "name", None) == "__init__" for s in definition.body):
                node.reaches.append(f"{qualified}.__init__")
            return node
        parts = qualified.split(".")
        own_class = ".".join(parts[:-1]) if len(parts) == 3 else None
        decorator = fixture_decorator(definition)  # type: ignore[arg-type]
        node.shared = decorator is not None and is_shared(decorator)
        requests = parts[-1].startswith("test_") or decorator is not None
        known = self.bindings(self.modules[parts[0]], definition, own_class, requests)
        types = annotations(definition)
        for sub in ast.walk(definition):
            if id(sub) in types:  # a type names a class; it starts nothing
                continue
            if isinstance(sub, ast.Call) and (kind := self.primitive(module, sub)):
                node.kinds.add(kind)
            if isinstance(sub, ast.Name | ast.Attribute) and (name := dotted(sub)):
                head, _, rest = name.partition(".")
                if head in known and rest:
                    node.reaches.append(f"{known[head]}.{rest.split('.')[0]}")
                elif (target := self.qualified(module, name)) and target != qualified:
                    node.reaches.append(target)
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Call)
                and (cls := self.returned_class(module, known, sub.value))
            ):
                node.reaches.append(f"{cls}.{sub.attr}")
        fixtures = list(self.requested(module, definition)) if requests else []
        if parts[-1].startswith("test_"):
            fixtures += [
                *self.modules.get("conftest", Module("", ast.Module([], []))).autouse,
                *self.modules[parts[0]].autouse,
            ]
        for name in fixtures:
            if (fixture := self.fixture(self.modules[parts[0]], name, own_class)) and fixture != qualified:
                node.reaches.append(fixture)
        return node

    def settle(self, roots: list[str]) -> dict[str, set[str]]:
        """The kinds every node reachable from ``roots`` starts, itself or through what it reaches
        (a fixed point, so cycles between helpers are fine); ``first`` names where each was found."""
        todo = list(roots)
        while todo:
            qualified = todo.pop()
            if qualified not in self.nodes:
                node = self.nodes[qualified] = self.build(qualified)
                todo.extend(node.reaches)
        found = {name: set(node.kinds) for name, node in self.nodes.items()}
        for name, node in self.nodes.items():
            if node.kinds:
                self.first[name] = "itself"
        changed = True
        while changed:
            changed = False
            for name, node in self.nodes.items():
                for target in node.reaches:
                    kinds = {as_shared(kind) for kind in found[target]} if self.nodes[target].shared else found[target]
                    if not kinds <= found[name]:
                        found[name] |= kinds
                        self.first.setdefault(name, target)
                        changed = True
        return found


def test_functions(graph: Graph) -> Iterator[str]:
    """Every test function, as pytest collects them: a ``Test*`` class's own and those it
    inherits from a tests/ base class (a contract suite), each once per class."""
    for module in graph.modules.values():
        if not module.name.startswith("test_"):
            continue
        for name, definition in module.defs.items():
            if isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef) and name.startswith("test_"):
                yield f"{module.name}.{name}"
            elif isinstance(definition, ast.ClassDef) and name.startswith("Test"):
                for method in sorted(set(graph.methods(module, definition))):
                    if method.startswith("test_"):
                        yield f"{module.name}.{name}.{method}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=Path, default=REPO / "tests", help="the folder of the test modules")
    parser.add_argument("--list", action="store_true", help="print each test that starts a process or a server")
    args = parser.parse_args()
    graph = Graph(load(args.tests))
    tests = list(test_functions(graph))
    found = graph.settle(tests)
    starting = {test: found[test] for test in tests if found[test]}
    if args.list:
        for test, kinds in starting.items():
            print(f"{test}: {'+'.join(sorted(kinds))} (via {graph.first.get(test, '?')})")
    own = [kinds for kinds in starting.values() if kinds & {PROCESS, SERVER}]
    processes = sum(PROCESS in kinds for kinds in starting.values())
    print(f"test functions: {len(tests)}")
    print(f"start a process or a server: {len(starting)} ({len(starting) / len(tests):.1%})")
    print(f"  a process of their own: {processes} ({processes / len(tests):.1%})")
    print(f"  a server but no process of their own: {sum(kinds & {PROCESS, SERVER} == {SERVER} for kinds in own)}")
    print(f"  only through a module- or session-wide fixture: {len(starting) - len(own)}")


if __name__ == "__main__":
    main()
