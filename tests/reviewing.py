"""The review page as its tests use it: ``thumbctl review`` started in a real process, plain HTTP
requests to it (any ``Host`` or ``Origin`` a browser or an attacker could send), and the system's
Chromium driven by Playwright (``executable_path``: no browser is downloaded)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harness import Background, Lines, Thumbctl

#: Chromium's flags on a machine without a network or a display (as root it needs --no-sandbox).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Review:
    """A running ``thumbctl review``: its page's address (token included) and its process."""

    url: str
    process: Background
    out: Lines

    @property
    def origin(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def token(self) -> str:
        return urlsplit(self.url).path.strip("/")

    def request(
        self, method: str, path: str, body: object = None, *, headers: dict[str, str] | None = None, raw: bytes = b""
    ) -> Answer:
        """``method path`` (relative to the page, or absolute from ``/``) with the page's own Host and,
        for a POST, Origin, unless ``headers`` says otherwise (None removes one)."""
        parts = urlsplit(self.url)
        target = path if path.startswith("/") else parts.path + path
        sent = {"Host": self.host}
        if method == "POST":
            sent |= {"Origin": self.origin, "Content-Type": "application/json"}
        for name, value in (headers or {}).items():
            sent.pop(name, None)
            if value is not None:
                sent[name] = value
        data = raw or (json.dumps(body).encode() if body is not None else None)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                connection.putheader(name, value)
            if data is not None:
                connection.putheader("Content-Length", str(len(data)))
            connection.endheaders(data)
            response = connection.getresponse()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            connection.close()

    def get(self, path: str, **headers: str | None) -> Answer:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, body: object, **headers: str | None) -> Answer:
        return self.request("POST", path, body, headers=headers)

    def photos(self, query: str = "") -> dict:
        answer = self.get(f"api/photos{query}")
        assert answer.status == 200, answer.body
        return answer.json()


@contextmanager
def reviewing(cli: Thumbctl, *args: object, **env: str | None) -> Iterator[Review]:
    """``thumbctl review ARGS --no-browser`` running until the block ends (then Ctrl-C, exit 130)."""
    process = cli.start("review", *args, "--no-browser", **env)
    out = Lines(process.proc.stdout)  # type: ignore[arg-type]
    try:
        line = out.wait_for("http://127.0.0.1:", timeout=60)
    except AssertionError:
        raise AssertionError(process.describe()) from None
    url = line[line.index("http://") :].split()[0]
    try:
        yield Review(url, process, out)
    finally:
        if process.running():
            process.interrupt()
            process.wait(timeout=30)


def chromium_path() -> str:
    """Debian's chromium: required in CI (.ci/run installs it); elsewhere its absence skips."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI: .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return found


@contextmanager
def browser(home: Path) -> Iterator[object]:
    """The system's Chromium under Playwright, with a fresh profile under ``home``."""
    executable = chromium_path()
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, env={**os.environ, "HOME": str(home)}
        )
        try:
            yield launched
        finally:
            launched.close()
