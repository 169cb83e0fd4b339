"""The structure figures (bench/structure.py) read a package as the layering test does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conftest import REPO


def load_structure():
    spec = importlib.util.spec_from_file_location("structure", REPO / "bench" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_hub_counts_relative_absolute_and_function_local_imports(tmp_path: Path) -> None:
    package = tmp_path / "thumbctl"
    write(package / "__init__.py", "")
    write(package / "core" / "__init__.py", "")
    for n in range(10):
        write(package / "core" / f"m{n}.py", "x = 1\n")
    imports = [f"from .core import m{n}\n" for n in range(5)]
    imports += [f"import thumbctl.core.m{n}\n" for n in range(5, 9)]
    imports.append("def late():\n    from .core.m9 import x\n    return x\n")
    write(package / "hub.py", "".join(imports))
    write(package / "small.py", "from .core import m0\n")
    figures = load_structure().shape(tmp_path)
    assert figures["modules importing >= 10 others"] == "1"
    assert figures["modules directly in thumbctl/"] == "3"
    assert figures["packages"] == "1"
    assert figures["largest module (lines)"] == "thumbctl.hub (12)"
    assert figures["longest function (lines)"] == "thumbctl.hub (3)"


def test_this_checkout_keeps_at_most_twelve_modules_at_the_top() -> None:
    figures = load_structure().shape(REPO)
    assert int(figures["modules directly in thumbctl/"]) <= 12
