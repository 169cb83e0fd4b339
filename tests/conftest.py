"""Shared fixtures: real ledgers and real images in tmp_path."""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from thumbctl import Ledger
from thumbctl.config.options import LEASE_ENV
from thumbctl.config.resolve import CONFIG_ENV, KEYS, PROFILE_ENV
from thumbctl.core.proc import HOST_ID_ENV

from harness import kill_leftovers
from httpserver import HttpServer, serving
from pg import (
    NO_BINARIES,
    PG_ENV,
    SKIP_REASON,
    PgCluster,
    PgServer,
    create_database,
    drop_database,
    server_binaries,
)
from s3 import BUCKET, WeedServer, clean_aws_environment, s3_env_or_skip, weed_binary
from support import MEMORY, check_invariants, make_image

REPO = Path(__file__).resolve().parent.parent
SAMPLE_IMAGES = REPO / "sample_images"
T = TypeVar("T")


#: The longest tests (``--durations`` of a whole run on 2 CPUs), longest first, by the start of
#: their node id (a module, a test, a parametrized case): they are handed out first, so that a run
#: never ends with one process busy with a long test while the other has nothing left to do.
LONGEST_FIRST = (
    "test_docs.py::test_every_documented_command_runs[sellers.md]",
    "test_bench_damage.py",
    "test_cli_backends.py::test_every_command_gives_the_documented_json_and_exit_code[postgres]",
    "test_cli_backends.py::test_every_command_gives_the_documented_json_and_exit_code[sqlite]",
    "test_pgfixtures.py",
    "test_pg_restart.py",
    "test_docs.py::test_every_documented_command_runs[operations.md]",
    "test_bench_derivatives.py",
    "test_bench_backends.py",
    "test_docs.py::test_every_documented_command_runs[json.md]",
    "test_ledger_scale.py",
)


def in_tests(nodeid: str) -> str:
    """``nodeid`` from its module's file name on (``tests/test_x.py::t[a/b]`` -> ``test_x.py::t[a/b]``)."""
    path, _, rest = nodeid.partition("::")
    return f"{path.rsplit('/', 1)[-1]}::{rest}"


def longest_first_rank(item: pytest.Item) -> int:
    name = in_tests(item.nodeid)
    return next((i for i, start in enumerate(LONGEST_FIRST) if name.startswith(start)), len(LONGEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of :data:`LONGEST_FIRST` first, in its order; every other in collection order."""
    items.sort(key=longest_first_rank)


@pytest.fixture(scope="session")
def built_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], T]], T]:
    """``built_once(name, build)``: what ``build(folder)`` returns, built once for the whole run
    whichever test process asks first (pytest-xdist's recipe for session data, with a lock in the
    run's shared temporary folder), for costly data the tests only read or copy."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # every test process's basetemp sits in the run's own folder

    def get(name: str, build: Callable[[Path], T]) -> T:
        folder, done = shared / f"built-{name}", shared / f"built-{name}.pickle"
        with (shared / f"built-{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                folder.mkdir(exist_ok=True)
                done.write_bytes(pickle.dumps(build(folder)))
        return pickle.loads(done.read_bytes())

    return get


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the per-user config file, the default ledger nor THUMBCTL_* settings of the machine reach a test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state-home")))
    for name in (CONFIG_ENV, PROFILE_ENV, HOST_ID_ENV, LEASE_ENV, *(key.env for key in KEYS)):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def leftover_processes() -> Iterator[None]:
    """Background commands a test started (and their workers) do not outlive it, even when it fails."""
    yield
    kill_leftovers()


@pytest.fixture
def ledger(tmp_path: Path):
    """A fresh ledger; invariant 1 is checked again when the test ends."""
    with Ledger(tmp_path / "ledger.db") as led:
        yield led
        check_invariants(led)


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    """A folder of real photos: a few from sample_images plus generated PNG/JPEG/WebP."""
    root = tmp_path / "photos"
    (root / "rooms").mkdir(parents=True)
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg", root / "rooms" / "living.jpg")
    shutil.copy(SAMPLE_IMAGES / "public-domain" / "sk-coffee.png", root / "coffee.png")
    make_image(root / "rooms" / "kitchen.webp", (320, 200), "WEBP", seed=1)
    make_image(root / "garden.jpeg", (200, 320), "JPEG", seed=2)
    return root


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"


@pytest.fixture(scope="session")
def http_server() -> Iterator[HttpServer]:
    """The tests' own HTTP server for URL sources (tests/httpserver.py), one per test process."""
    yield from serving()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """The object store of the ``ledger`` fixture: the default, beside it."""
    return tmp_path / "ledger.store"


@pytest.fixture(scope="session")
def pg_admin_url() -> str | None:
    """The URL of the test PostgreSQL server (``THUMBCTL_TEST_PG``), or None when there is none."""
    return os.environ.get(PG_ENV) or None


@pytest.fixture
def pg_url(pg_admin_url: str | None) -> Iterator[str]:
    """The URL of a fresh, uniquely named database on the test server, dropped after the test.

    Skips when ``THUMBCTL_TEST_PG`` is unset; when it is set, a server that cannot be reached is
    an error, never a skip."""
    if pg_admin_url is None:
        pytest.skip(SKIP_REASON)
    url = create_database(pg_admin_url)
    yield url
    drop_database(pg_admin_url, url)


@pytest.fixture(scope="session")
def pg_cluster(pg_admin_url: str | None) -> Iterator[PgCluster]:
    """A throw-away PostgreSQL cluster of this test process's own, for the tests that stop or
    restart a server (the server of ``THUMBCTL_TEST_PG`` serves tests running in parallel).

    Skips when ``THUMBCTL_TEST_PG`` is unset (PostgreSQL tests are off) or no server binaries are
    found; removed when the session ends."""
    if pg_admin_url is None:
        pytest.skip(SKIP_REASON)
    bindir = server_binaries()
    if bindir is None:
        pytest.skip(NO_BINARIES)
    cluster = PgCluster(bindir)
    yield cluster
    cluster.remove()


@pytest.fixture
def pg_server(pg_cluster: PgCluster) -> Iterator[PgServer]:
    """Control of a test cluster (restart, stop, start); ``.url`` is this test's fresh database on
    it. The server is running again when the test ends."""
    url = create_database(pg_cluster.admin_url)
    server = pg_cluster.server(url)
    yield server
    if not server.is_running():
        server.start()
    drop_database(pg_cluster.admin_url, url)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The ``--db`` of a fresh ledger on each backend: a SQLite file path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return request.getfixturevalue("pg_url")


#: What the in-memory ledger cannot do, by the marker of the contract tests that need it: such a
#: test is skipped on ``[memory]`` with this reason.
NOT_IN_MEMORY = {
    "cross_process": "cross-process: an in-memory ledger lives in one process; another process cannot open it",
    "reads_beside_writes": (
        "reads beside a write: a read that goes on while another connection's write is open needs SQLite's "
        "write-ahead log (a file's -wal and -shm); in memory a write and the reads exclude each other"
    ),
}


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one test process per CPU and one more. The tests wait on subprocesses, servers
    and browsers for about a third of their time (a 2-core run used 1.6 cores): a third process on 2
    cores took the suite from 617 s to 551 s."""
    return (os.cpu_count() or 1) + 1


def pytest_configure(config: pytest.Config) -> None:
    for marker, reason in NOT_IN_MEMORY.items():
        config.addinivalue_line("markers", f"{marker}: a ledger contract case skipped on [memory] ({reason})")


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def contract_ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger for the ledger contract on each backend: ``ledger_url``'s, and ``memory:NAME``,
    a fresh :class:`~thumbctl.testing.InMemoryLedger` (opened by ``support.open_ledger``). A test
    marked with a key of :data:`NOT_IN_MEMORY` is skipped on memory."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    if request.param == "postgres":
        return request.getfixturevalue("pg_url")
    for marker, reason in NOT_IN_MEMORY.items():
        if request.node.get_closest_marker(marker):
            pytest.skip(reason)
    return f"{MEMORY}{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[WeedServer]:
    """A real S3 server (SeaweedFS ``weed mini``) of this test process, with credentials and the
    bucket ``thumbs``; started once, stopped when the session ends. Skips without the S3 extra."""
    s3_env_or_skip()
    server = WeedServer(weed_binary())
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server: WeedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The standard AWS variables pointing at the test server, set for this test (and so for the
    commands it runs); any other AWS variable of the machine is unset. Returned for a harness's ``env``."""
    for name, value in {**clean_aws_environment(), **s3_server.env()}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    return {**s3_server.env(), "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


@pytest.fixture
def s3_url(s3_env: dict[str, str]) -> str:
    """A fresh, empty ``s3://thumbs/<random prefix>`` on the test server (the AWS variables set)."""
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}"
