"""A real PostgreSQL server for the tests: fresh databases on it, and a server of their own to restart.

``THUMBCTL_TEST_PG`` is the URL of a server the tests may create and drop databases on (trust
auth, a superuser); ``.ci/run`` starts one. When it is unset the PostgreSQL tests skip; when
it is set, any failure to reach the server is an error. Tests run in parallel on that server, so
the tests that stop, start or restart a server get a throw-away cluster of their own
(:class:`PgCluster`), made with the server binaries of ``THUMBCTL_TEST_PG_CTL`` (a ``pg_ctl``;
when unset they are looked for) and removed when the test session ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PG_ENV = "THUMBCTL_TEST_PG"
PG_CTL_ENV = "THUMBCTL_TEST_PG_CTL"
SKIP_REASON = f"PostgreSQL tests need {PG_ENV} (see README)"
NO_BINARIES = f"restarting PostgreSQL needs its server binaries (initdb, pg_ctl; or {PG_CTL_ENV})"


def with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead, with the same user, host and query."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def unique_database_name() -> str:
    return f"thumbctl_test_{os.getpid()}_{uuid.uuid4().hex[:12]}"


def create_database(admin_url: str) -> str:
    """Create a fresh, empty database on the server of ``admin_url`` and return its URL."""
    import psycopg  # not importorskip: with THUMBCTL_TEST_PG set, a missing driver is an error

    name = unique_database_name()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    """Drop the database of ``url``, closing the sessions still connected to it."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def as_server_user(command: list[str]) -> list[str]:
    """The server may not run as root: root runs its tools as the ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def server_binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: that of ``THUMBCTL_TEST_PG_CTL`` when set (an error
    when it holds no server), else ``pg_config --bindir``, the newest ``/usr/lib/postgresql/*/bin``
    or the ``PATH``; None when there is none."""
    given = os.environ.get(PG_CTL_ENV)
    if given:
        folder = Path(given).parent
        if not (folder / "initdb").exists():
            raise RuntimeError(f"{PG_CTL_ENV}={given}: no initdb beside it")
        return folder
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        candidates.append(Path(done.stdout.strip()))
    versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    candidates += sorted(versions, key=lambda p: int(p.parent.name), reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    return next((c for c in candidates if (c / "initdb").exists() and (c / "pg_ctl").exists()), None)


class PgCluster:
    """A throw-away cluster of the tests' own: data and Unix socket in a fresh temporary folder
    (readable by ``postgres``, which runs it when the tests run as root), trust auth, no fsync (nor
    synchronous commits or full-page writes: a test cluster's durability buys nothing)."""

    PORT = 5432  # names the socket file only: the folder is this cluster's alone

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="thumbctl-test-pg-"))
        self.data_dir = self.root / "data"
        self.admin_url = f"postgresql://postgres@/postgres?host={self.root}&port={self.PORT}"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        initdb = [str(bindir / "initdb"), "-D", str(self.data_dir), "-A", "trust", "-U", "postgres", "-N"]
        done = subprocess.run(as_server_user(initdb), capture_output=True, text=True, cwd=self.root, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr or done.stdout}")
        with open(self.data_dir / "postgresql.conf", "a") as conf:  # the file, not -o: pg_ctl restart keeps it
            conf.write(
                f"port = {self.PORT}\nlisten_addresses = ''\nunix_socket_directories = '{self.root}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n"
            )
        self.server(self.admin_url).start()

    def server(self, url: str) -> PgServer:
        """Control of this cluster; ``url`` is the database the test uses."""
        return PgServer(str(self.data_dir), str(self.bindir / "pg_ctl"), url)

    def remove(self) -> None:
        server = self.server(self.admin_url)
        if server.is_running():
            server.stop(mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PgServer:
    """Stop, start and restart a test cluster with its own ``pg_ctl`` (as ``postgres`` when root)."""

    def __init__(self, data_dir: str, pg_ctl: str, url: str) -> None:
        self.data_dir = data_dir
        self.pg_ctl = pg_ctl
        self.url = url
        self.log = str(Path(data_dir) / "server.log")

    def restart(self) -> None:
        """A fast restart: every open connection is closed; returns when the server accepts again."""
        self._ctl("restart", "-w", "-m", "fast", "-l", self.log)

    def stop(self, mode: str = "fast") -> None:
        self._ctl("stop", "-w", "-m", mode)

    def start(self) -> None:
        self._ctl("start", "-w", "-l", self.log)

    def is_running(self) -> bool:
        return self._ctl("status", check=False).returncode == 0

    def _ctl(self, action: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = as_server_user([self.pg_ctl, action, "-D", self.data_dir, *args])
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=Path(self.data_dir).parent)
        if check and done.returncode != 0:
            raise RuntimeError(f"pg_ctl {action} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done
