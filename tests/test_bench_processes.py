"""bench/processes.py: which test functions start a process or a server, by its rule."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def processes():
    spec = importlib.util.spec_from_file_location("bench_processes", REPO / "bench" / "processes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


HARNESS = """
import subprocess

class Runner:
    def run(self, *args):
        return subprocess.run(["true", *args])

    def invoke(self, *args):
        return args
"""

CONFTEST = """
import pytest
from helper import Runner, serve

@pytest.fixture
def runner() -> Runner:
    return Runner()

@pytest.fixture
def served():
    yield serve()

@pytest.fixture(autouse=True)
def quiet():
    yield

@pytest.fixture(scope="session")
def weed() -> Runner:
    runner = Runner()
    runner.run("weed")
    return runner
"""

HELPER = """
from http.server import ThreadingHTTPServer
from harness import Runner

def serve():
    return ThreadingHTTPServer(("127.0.0.1", 0), None)

def setup(path) -> Runner:
    return Runner()
"""

TESTS = """
import os
import pytest
from typer.testing import CliRunner
from thumbctl import render
from harness import Runner
from helper import setup

def test_plain():
    assert 1

def test_runs_through_a_fixture(runner):
    runner.run("status")

def test_invokes_in_this_process(runner):
    runner.invoke("status")

def test_a_helpers_return_value(tmp_path):
    setup(tmp_path).run("x")

def test_bound_to_a_new_instance():
    r = Runner()
    r.run()

def test_forks():
    os.fork()

def test_a_server(served):
    pass

def test_through_getfixturevalue(request):
    request.getfixturevalue("served")

def test_a_detached_submit_in_process(cli):
    CliRunner().invoke(app, ["submit", "x", "--detach"])

def test_a_foreground_submit_in_process():
    CliRunner().invoke(app, ["submit", "x"])

def test_a_wrapper_running_work(cli):
    cli("work", "--until-idle")

def test_the_library_render():
    render("photos")

def test_a_session_wide_server(weed):
    pass

def test_a_type_starts_nothing(tmp_path: Runner) -> Runner:
    pass

class Contract:
    def test_uses_the_store(self, store):
        store.put()

class TestLocal(Contract):
    @pytest.fixture
    def store(self):
        return object()

class TestRemote(Contract):
    @pytest.fixture
    def store(self, runner: Runner):
        runner.run("serve")
        return object()
"""

STARTS = {
    "test_x.test_runs_through_a_fixture": {"process"},
    "test_x.test_a_helpers_return_value": {"process"},
    "test_x.test_bound_to_a_new_instance": {"process"},
    "test_x.test_forks": {"process"},
    "test_x.test_a_server": {"server"},
    "test_x.test_through_getfixturevalue": {"server"},
    "test_x.test_a_foreground_submit_in_process": {"process"},
    "test_x.test_a_wrapper_running_work": {"process"},
    "test_x.test_the_library_render": {"process"},
    "test_x.test_a_session_wide_server": {"shared process"},
    "test_x.TestRemote.test_uses_the_store": {"process"},
}


def test_each_rule_of_the_docstring_decides_one_test(processes, tmp_path: Path) -> None:
    for name, text in {"harness": HARNESS, "conftest": CONFTEST, "helper": HELPER, "test_x": TESTS}.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    graph = processes.Graph(processes.load(tmp_path))
    tests = list(processes.test_functions(graph))
    found = graph.settle(tests)
    assert len(tests) == 16  # the contract's test once per Test class, never for the contract itself
    assert {test: found[test] for test in tests if found[test]} == STARTS


def test_the_repositorys_tests_are_counted(processes) -> None:
    graph = processes.Graph(processes.load(REPO / "tests"))
    tests = list(processes.test_functions(graph))
    found = graph.settle(tests)
    assert "test_bench_processes.test_the_repositorys_tests_are_counted" in tests
    assert not found["test_bench_processes.test_the_repositorys_tests_are_counted"]
    assert found["test_crash.test_ctrl_c_records_the_cancel_and_exits_130"] == {"process"}
