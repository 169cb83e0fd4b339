"""A small fault proxy in front of an S3 server: every request is forwarded as it came (the Host
header too, so a SigV4 signature made for the proxy's address still verifies), and a chosen
fraction of them is answered with a 500 or 503 instead, or forwarded slowly.

The faults come from a seeded random generator, so a run with the same seed and the same order of
requests injects the same faults; :attr:`FaultProxy.counts` says how many of each were injected.
Used by the multi-host chaos test and ``bench/chaos.py``; ``set_faults`` changes the mix while
the proxy runs (0 turns faults off).
"""

from __future__ import annotations

import http.client
import random
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
_ERROR_BODY = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code></Error>"
_BUSY_BODY = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code></Error>"


@dataclass
class FaultMix:
    """The fraction of requests answered 500, answered 503, and forwarded after ``delay`` seconds;
    before them, the ``first`` requests are all answered 503 (an outage of a known length)."""

    first: int = 0
    error: float = 0.0
    busy: float = 0.0
    slow: float = 0.0
    delay: float = 0.5


class FaultProxy:
    """A threaded HTTP proxy on a free loopback port, forwarding to ``upstream`` (``http://host:port``)."""

    def __init__(self, upstream: str, mix: FaultMix | None = None, *, seed: int = 22) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.mix = mix or FaultMix()
        self.counts: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def set_faults(self, mix: FaultMix) -> None:
        with self._lock:
            self.mix = mix

    def choose(self) -> str:
        """What to do with the next request: ``error``, ``busy``, ``slow`` or ``forward``."""
        with self._lock:
            if self.counts["outage"] < self.mix.first:
                self.counts["outage"] += 1
                return "busy"
            roll = self._random.random()
            mix = self.mix
            for fault in ("error", "busy", "slow"):
                share = getattr(mix, fault)
                if roll < share:
                    self.counts[fault] += 1
                    return fault
                roll -= share
            self.counts["forward"] += 1
            return "forward"

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            return

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _forward(self, body: bytes, delay: float) -> None:
            if delay:
                threading.Event().wait(delay)
            upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                reply = upstream.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException):
                self.close_connection = True
                self._answer(502, _ERROR_BODY)
                return
            finally:
                upstream.close()
            self.send_response(reply.status, reply.reason)
            head = self.command == "HEAD"  # its Content-Length is the object's, with no body
            for key, value in reply.getheaders():
                if key.lower() not in _HOP_BY_HOP and (head or key.lower() != "content-length"):
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _handle(self) -> None:
            body = self._body()
            fault = proxy.choose()
            try:
                if fault == "error":
                    self._answer(500, _ERROR_BODY)
                elif fault == "busy":
                    self._answer(503, _BUSY_BODY)
                else:
                    self._forward(body, proxy.mix.delay if fault == "slow" else 0.0)
            except (TimeoutError, BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    return Handler
