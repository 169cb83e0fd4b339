"""What an installed thumbctl carries: one version, a licence, type information."""

from __future__ import annotations

import tomllib
from pathlib import Path

import thumbctl

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_written_once_in_the_package() -> None:
    project = _project()
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "thumbctl.core.version.__version__"}
    assert thumbctl.__version__.count(".") == 2


def test_the_licence_is_an_spdx_expression_with_its_file() -> None:
    project = _project()["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_package_declares_its_type_hints() -> None:
    assert (Path(thumbctl.__file__).parent / "py.typed").exists()
    assert _project()["tool"]["setuptools"]["package-data"]["thumbctl"] == ["py.typed"]


def test_every_runtime_dependency_has_a_major_version_bound() -> None:
    project = _project()["project"]
    pinned = [*project["dependencies"], *project["optional-dependencies"]["postgres"]]
    assert all("<" in requirement for requirement in pinned), pinned
