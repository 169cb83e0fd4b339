"""The watch benchmark runs (its smoke case): never timed here, only that it works. It starts no
process (the waiters and the writer are threads), so it runs in the test's process."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO


def test_the_watch_benchmark_smoke_case_runs_and_prints_its_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("bench_watch", REPO / "bench" / "watch.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr("sys.argv", ["bench/watch.py", "--smoke"])
    bench.main()
    out = capsys.readouterr().out
    assert "| wake-up | idle CPU, % of a core | median latency s |" in out
    assert "| polling every 1s | " in out and "| watchfiles | " in out
