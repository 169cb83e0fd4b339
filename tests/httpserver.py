"""A small HTTP server of the tests' own, for URL sources, hostile ones included.

One server per test process (the ``http_server`` fixture), on a free port of 127.0.0.2: that
address is on the loopback interface on Linux (all of 127.0.0.0/8 is), so thumbctl reaches it only
when a test allows exactly that network (``--allow-network 127.0.0.2/32``), and a redirect to
127.0.0.1 is still refused. Each test adds its routes under a path of its own
(:meth:`HttpServer.route`), so tests sharing the server never see each other's.

A route is a list of answers served in turn (the last one again and again): an :class:`Answer`
says the status, headers and body, how to send the body (whole, dripping slowly, chunked without
a ``Content-Length``), or a redirect; or it drips its headers a byte at a time after the status line.
The server finds a route as a web server finds a file: by the request's path percent-decoded, with
its dot-segments removed (``/public/%2e%2e/private/x.jpg`` is ``/private/x.jpg``).
"""

from __future__ import annotations

import gzip
import itertools
import posixpath
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

HOST = "127.0.0.2"
#: The network a test allows so thumbctl may reach this server.
NETWORK = "127.0.0.2/32"


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds between two bytes of the body (a slow drip); 0: the body at once.
    drip: float = 0.0
    #: Send the body chunked, without a Content-Length.
    chunked: bool = False
    #: Send this many bytes in all, repeating ``body`` (a body larger than any cap, made on the fly).
    stream_bytes: int = 0
    #: Seconds between two bytes of a header that never ends, sent after the status line (for two
    #: minutes, or until the client leaves); 0: the headers at once.
    header_drip: float = 0.0


def redirect(location: str, status: int = 302) -> Answer:
    return Answer(status, headers={"Location": location})


def gzip_bomb(inflated: int) -> bytes:
    """``inflated`` zero bytes, gzipped: a body a thousand times smaller than what it inflates to."""
    return gzip.compress(b"\0" * inflated, compresslevel=9)


class Route:
    """The answers of one path, in turn; the requests it got are counted."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.requests = 0
        self.request_headers: list[dict[str, str]] = []
        #: The request target of each request, as sent (path and query).
        self.request_targets: list[str] = []
        self._lock = threading.Lock()

    def next_answer(self, target: str, headers: dict[str, str]) -> Answer:
        with self._lock:
            answer = self.answers[min(self.requests, len(self.answers) - 1)]
            self.requests += 1
            self.request_headers.append(headers)
            self.request_targets.append(target)
            return answer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        route = self.server.routes.get(served_path(self.path))
        if route is None:
            self._send(Answer(404, b"no such route"))
            return
        self._send(route.next_answer(self.path, dict(self.headers.items())))

    def _send(self, answer: Answer) -> None:
        try:
            if answer.header_drip:
                self._drip_headers(answer)
                return
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            total = answer.stream_bytes or len(answer.body)
            if answer.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            elif "Content-Length" not in answer.headers:
                self.send_header("Content-Length", str(total))
            self.send_header("Connection", "close")
            self.end_headers()
            self._body(answer, total)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the cases a test makes it give up in)
        self.close_connection = True

    def _drip_headers(self, answer: Answer) -> None:
        self.wfile.write(f"HTTP/1.1 {answer.status} OK\r\nX-Drip: ".encode())
        self.wfile.flush()
        ends = time.monotonic() + 120
        while time.monotonic() < ends:
            time.sleep(answer.header_drip)
            self.wfile.write(b"a")
            self.wfile.flush()

    def _body(self, answer: Answer, total: int) -> None:
        if answer.drip:
            for byte in answer.body:
                self._write(bytes([byte]), answer.chunked)
                time.sleep(answer.drip)
        elif answer.stream_bytes:
            sent = 0
            for piece in itertools.cycle([answer.body or b"\0" * 65536]):
                piece = piece[: total - sent]
                if not piece:
                    break
                self._write(piece, answer.chunked)
                sent += len(piece)
        else:
            self._write(answer.body, answer.chunked)
        if answer.chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _write(self, data: bytes, chunked: bool) -> None:
        if chunked:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        else:
            self.wfile.write(data)
        self.wfile.flush()


def served_path(target: str) -> str:
    """The file a request target names, as a web server finds it: its path percent-decoded, with
    its dot-segments removed."""
    path = posixpath.normpath(unquote(target.split("?", 1)[0]))
    return "/" + path.lstrip("/")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    routes: dict[str, Route]


class HttpServer:
    """The server, serving on a thread; :meth:`route` adds the answers of one path."""

    def __init__(self) -> None:
        self._server = _Server((HOST, 0), _Handler)
        self._server.routes = {}
        self.port = self._server.server_address[1]
        self._paths = itertools.count()
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-server", daemon=True)
        self._thread.start()

    def url(self, path: str, host: str = HOST) -> str:
        return f"http://{host}:{self.port}{path}"

    def route(self, name: str, *answers: Answer) -> tuple[str, Route]:
        """A new path ending in ``name`` (unique to this call) answering ``answers`` in turn: its URL and route."""
        path = f"/{next(self._paths)}/{name}"
        route = Route(list(answers))
        self._server.routes[served_path(path)] = route
        return self.url(path), route

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serving() -> Iterator[HttpServer]:
    server = HttpServer()
    try:
        yield server
    finally:
        server.close()


def tls_files(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A throw-away CA (its certificate) and a server certificate and key for ``name``, signed by it (openssl)."""
    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = folder / "san.ext"
    ext.write_text(f"subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=keyCertSign",
    )
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


class HttpsServer(HttpServer):
    """The same server behind TLS, with a certificate for ``name`` (the tests make ``name`` resolve to
    127.0.0.2 themselves)."""

    def __init__(self, cert: Path, key: Path) -> None:
        super().__init__()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)

    def url(self, path: str, host: str = HOST) -> str:
        return f"https://{host}:{self.port}{path}"
