"""A real PostgreSQL server for the tests: fresh databases on it, and control of the server.

``THUMBCTL_TEST_PG`` is the URL of a server the tests may create and drop databases on (trust
auth, a superuser); ``.ci/run`` starts one. When it is unset the PostgreSQL tests skip; when
it is set, any failure to reach the server is an error. ``THUMBCTL_TEST_PG_DATA`` (the data
directory) and ``THUMBCTL_TEST_PG_CTL`` (its ``pg_ctl``) let a test stop, start or restart that
server; never point them at a server others use.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PG_ENV = "THUMBCTL_TEST_PG"
PG_DATA_ENV = "THUMBCTL_TEST_PG_DATA"
PG_CTL_ENV = "THUMBCTL_TEST_PG_CTL"
SKIP_REASON = f"PostgreSQL tests need {PG_ENV} (see README)"


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


class PgServer:
    """Stop, start and restart the test server with its own ``pg_ctl`` (as ``postgres`` when root)."""

    def __init__(self, data_dir: str, pg_ctl: str, url: str) -> None:
        self.data_dir = data_dir
        self.pg_ctl = pg_ctl
        self.url = url
        self.log = str(Path(data_dir) / "server.log")

    def restart(self) -> None:
        """A fast restart: every open connection is closed; returns when the server accepts again."""
        self._ctl("restart", "-w", "-m", "fast", "-l", self.log)

    def stop(self) -> None:
        self._ctl("stop", "-w", "-m", "fast")

    def start(self) -> None:
        self._ctl("start", "-w", "-l", self.log)

    def is_running(self) -> bool:
        return self._ctl("status", check=False).returncode == 0

    def _ctl(self, action: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [self.pg_ctl, action, "-D", self.data_dir, *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"pg_ctl {action} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done
