"""The shape of the code, read with ``ast`` from a checkout: what the closing table of a structure
change compares.

For the package under ``TREE/thumbctl``: modules directly in ``thumbctl/``, packages, the largest
module (lines), modules importing 10 or more other thumbctl modules (every import counts: at the
top, under ``TYPE_CHECKING`` and inside functions), and the longest function::

    python bench/structure.py [TREE ...]      # default: this checkout

Several trees (e.g. a worktree of an earlier commit) are shown side by side.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUB = 10


def modules(package: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The thumbctl modules ``module`` imports, wherever the import stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name in known and name != module}


def longest_function(path: Path) -> int:
    nodes = ast.walk(ast.parse(path.read_text()))
    return max((n.end_lineno - n.lineno + 1 for n in nodes if isinstance(n, ast.FunctionDef)), default=0)


def shape(tree: Path) -> dict[str, str]:
    package = tree / "thumbctl"
    known = modules(package)
    lines = {name: len(path.read_text().splitlines()) for name, path in known.items()}
    hubs = [name for name, path in known.items() if len(imported(name, path, known)) >= HUB]
    largest = max(lines, key=lines.__getitem__)
    longest = max(known, key=lambda name: longest_function(known[name]))
    return {
        "modules": str(len(known)),
        "modules directly in thumbctl/": str(len(list(package.glob("*.py")))),
        "packages": str(sum(1 for p in package.rglob("__init__.py")) - 1),
        "largest module (lines)": f"{largest} ({lines[largest]})",
        f"modules importing >= {HUB} others": str(len(hubs)),
        "longest function (lines)": f"{longest} ({longest_function(known[longest])})",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[REPO])
    trees = parser.parse_args().trees
    shapes = [shape(tree) for tree in trees]
    print("| figure | " + " | ".join(str(t) for t in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for figure in shapes[0]:
        print(f"| {figure} | " + " | ".join(s[figure] for s in shapes) + " |")


if __name__ == "__main__":
    main()
