"""The old-layout check benchmark runs (its smoke case): never timed here, only that it works."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO


def test_the_layout_check_benchmark_smoke_case_runs_and_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("layoutcheck", REPO / "bench" / "layoutcheck.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    assert bench.main(["--smoke"]) == 0

    out = capsys.readouterr().out
    assert "| batches | output folders | needs_migration ms | with the note ms |" in out
    assert "| 100 | 10 | " in out
