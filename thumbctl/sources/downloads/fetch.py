"""One bounded download of a URL source, over urllib3, with the SSRF rule on every hop.

* Redirects are followed here, never by urllib3, at most :data:`MAX_REDIRECTS`; every hop's URL
  must be http or https, start with an allowed prefix (when there are some) and name no
  credentials, and its host must pass the address rule (:mod:`thumbctl.sources.downloads.addresses`).
* The connection goes to the address that was checked: a connection to that IP, with the real
  name in the ``Host`` header and, for https, as the TLS server name and the name the
  certificate must carry. Proxy variables are not used.
* An ``--allow-url`` prefix is compared with the URL as the server will read it, percent-decoded
  and without dot-segments (:mod:`thumbctl.sources.downloads.allowlist`).
* One deadline bounds the whole download (resolving, connecting, the TLS handshake, the status
  line, the headers, the body, every retry and redirect). Each socket operation waits no longer
  than the time left, and a watchdog (:class:`Deadline`) shuts the connection's socket down when
  the deadline passes, so a server that drips its headers or body a byte at a time is cut off
  there too (``source_timeout``).
* ``Accept-Encoding: identity`` and no content decoding: a body sent compressed anyway is
  counted and digested as it came, never inflated. ``Content-Length`` over the byte limit
  fails at once; a body without one is counted as it is read, in bounded reads.
* 429 and 5xx answers and failed connections are tried again (a tenacity policy, at most
  :data:`ATTEMPTS` tries) with backoff, honouring a ``Retry-After`` (read by urllib3's ``Retry``)
  up to :data:`MAX_RETRY_AFTER` seconds; a wait that would end past the deadline is not taken.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urljoin

from ...core.errors import ItemFailure, UsageError
from ...core.profile import UrlRules
from ...core.redact import has_userinfo
from .addresses import Network, checked_address, networks_of
from .allowlist import Place, is_allowed, place_of

if TYPE_CHECKING:
    from tenacity import RetryCallState
    from urllib3 import BaseHTTPResponse
    from urllib3.connection import HTTPConnection

SCHEMES = {"http": 80, "https": 443}
MAX_REDIRECTS = 5
#: Tries of one download (the first and the retries after 429, 5xx or a failed connection).
ATTEMPTS = 3
#: The first backoff between tries, in seconds; it doubles, with jitter.
BACKOFF = 0.25
#: The longest ``Retry-After`` honoured, in seconds; a longer one is waited this long.
MAX_RETRY_AFTER = 30.0
_REDIRECTS = {301, 302, 303, 307, 308}
_MISSING = {404, 410}
_READ = 64 * 1024
_USER_AGENT = "thumbctl"


@dataclass(frozen=True)
class Download:
    """What a download gave: the body (None when ``unchanged`` said the headers match what is
    known, and the body was not read), the final URL and the validators of the response."""

    data: bytes | None
    url: str
    etag: str | None
    last_modified: str | None
    length: int | None


#: Decides from a 200 answer's headers that its body need not be read (the stat cache's match).
Unchanged = Callable[[Mapping[str, str]], bool]


class _Retry(Exception):
    def __init__(self, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


def urllib3_module() -> Any:
    """urllib3, an optional dependency (the ``s3`` extra); ``downloads_unavailable`` without it."""
    try:
        import urllib3
    except ImportError:
        raise UsageError("URL sources need urllib3: pip install 'thumbctl[s3]'", code="downloads_unavailable") from None
    return urllib3


class Deadline:
    """The one deadline of a download, kept by a watchdog thread: when it passes, the socket of the
    connection being used is shut down, so whatever read or write is waiting on it returns at once.

    The watchdog holds a duplicate of that socket (shutting a duplicate down shuts the connection
    down, and the duplicate is closed only here, under the lock), so it never acts on a descriptor
    that was closed and reused meanwhile.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._passed = False
        self._socket: socket.socket | None = None
        self._done = threading.Event()
        threading.Thread(target=self._watch, name="download-deadline", daemon=True).start()

    def _watch(self) -> None:
        if self._done.wait(max(self.seconds, 0.0)):
            return
        with self._lock:
            self._passed = True
            self._cut()

    def _cut(self) -> None:
        if self._socket is not None:
            with suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)

    def watch(self, sock: socket.socket) -> None:
        """From now on, the deadline cuts ``sock`` (the connection just made; cut at once when late)."""
        with self._lock:
            self._release()
            self._socket = sock.dup()
            if self._passed:
                self._cut()

    def _release(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def release(self) -> None:
        """The watched connection is done with."""
        with self._lock:
            self._release()

    def close(self) -> None:
        """The download is over: the watchdog ends without acting."""
        self._done.set()
        self.release()

    def left(self, url: str) -> float:
        """Seconds left; ``source_timeout`` when none are (or the watchdog has cut the connection)."""
        left = self.at - time.monotonic()
        with self._lock:
            passed = self._passed
        if passed or left <= 0:
            raise ItemFailure("source_timeout", f"{shown_url(url)}: the download took longer than its deadline")
        return left


def download(url: str, rules: UrlRules, max_bytes: int, unchanged: Unchanged | None = None) -> Download:
    """Download ``url`` under ``rules`` and the byte limit, or raise :class:`ItemFailure`."""
    urllib3_module()
    allowed = networks_of(rules.allow_networks)
    deadline = Deadline(rules.timeout)
    try:
        return _tried(url, rules, allowed, max_bytes, deadline, unchanged)
    finally:
        deadline.close()


def _tried(
    url: str,
    rules: UrlRules,
    allowed: tuple[Network, ...],
    max_bytes: int,
    deadline: Deadline,
    unchanged: Unchanged | None,
) -> Download:
    """The download, tried again (tenacity) after a 429, a 5xx or a failed connection: at most
    :data:`ATTEMPTS` tries, and never a wait that would end past the deadline."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_before_delay

    retrying = Retrying(
        retry=retry_if_exception_type(_Retry),
        wait=_wait_before,
        stop=stop_after_attempt(ATTEMPTS) | stop_before_delay(deadline.at - time.monotonic()),
        retry_error_callback=functools.partial(_given_up, timeout=rules.timeout),
    )
    return retrying(_follow, url, rules, allowed, max_bytes, deadline, unchanged)


def _wait_before(state: RetryCallState) -> float:
    """The wait before the next try: the answer's ``Retry-After`` (at most :data:`MAX_RETRY_AFTER`),
    else the backoff: half of ``BACKOFF * 2**(n-1)``, plus a random part of up to the other half."""
    from tenacity import wait_exponential, wait_random_exponential

    retry_after = _retry_of(state).retry_after
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_AFTER)
    backoff = wait_exponential(multiplier=BACKOFF / 2) + wait_random_exponential(multiplier=BACKOFF / 2)
    return backoff(state)


def _given_up(state: RetryCallState, *, timeout: float) -> NoReturn:
    """The failure of a download whose tries ran out, or whose next wait would pass the deadline."""
    retry = _retry_of(state)
    if state.attempt_number >= ATTEMPTS:
        raise ItemFailure("source_unreachable", f"{retry.detail} ({state.attempt_number} tries)") from None
    detail = f"{retry.detail}; no time left for another try before the deadline of {timeout:g} s"
    raise ItemFailure("source_unreachable", detail) from None


def _retry_of(state: RetryCallState) -> _Retry:
    error = state.outcome.exception() if state.outcome is not None else None
    assert isinstance(error, _Retry)  # only a _Retry is tried again
    return error


def _follow(
    url: str,
    rules: UrlRules,
    allowed: tuple[Network, ...],
    max_bytes: int,
    deadline: Deadline,
    unchanged: Unchanged | None,
) -> Download:
    for _ in range(MAX_REDIRECTS + 1):
        connection, response = _request(url, rules, allowed, deadline)
        try:
            location = response.headers.get("Location")
            if response.status in _REDIRECTS and location:
                url = urljoin(url, location.strip())
                continue
            return _answer(url, response, max_bytes, deadline, unchanged)
        finally:
            response.close()
            connection.close()  # one connection per hop, to the address checked for it
            deadline.release()
    raise ItemFailure("source_http_error", f"{shown_url(url)}: more than {MAX_REDIRECTS} redirects")


@dataclass(frozen=True)
class Target:
    """One hop's URL, taken apart and checked against the URL rules (not yet the address rule)."""

    scheme: str
    host: str
    port: int
    request_uri: str
    #: Where the URL leads, as the server reads it (what ``--allow-url`` prefixes are compared with).
    place: Place

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == SCHEMES[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.request_uri}"


def checked_target(url: str, rules: UrlRules) -> Target:
    """``url`` taken apart, if the URL rules admit it; else ``source_forbidden_address``."""
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    try:
        parts = parse_url(url)
    except LocationParseError:
        raise ItemFailure("source_http_error", f"{shown_url(url)} is not a valid URL") from None
    scheme = (parts.scheme or "").lower()
    if scheme not in SCHEMES:
        raise ItemFailure("source_forbidden_address", f"{shown_url(url)}: only http and https URLs are downloaded")
    if parts.auth or has_userinfo(url):
        raise ItemFailure("source_forbidden_address", f"{shown_url(url)}: a URL with credentials is not downloaded")
    if not parts.host:
        raise ItemFailure("source_http_error", f"{shown_url(url)} names no host")
    host, port = parts.host.strip("[]"), parts.port or SCHEMES[scheme]
    target = Target(scheme, host, port, parts.request_uri, place_of(scheme, host, port, parts.path or "/"))
    if not is_allowed(target.place, rules.allow_urls):
        raise ItemFailure("source_forbidden_address", f"{shown_url(url)} is under no allowed URL prefix")
    return target


def shown_url(url: str) -> str:
    """``url`` as messages show it: without credentials, query or fragment (a signed URL's
    signature is never written anywhere)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url.split("?", 1)[0].split("#", 1)[0]
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]
    path = path.split("?", 1)[0].split("#", 1)[0]
    return f"{scheme}://{authority}{slash}{path}"


@functools.cache
def _connection_classes() -> dict[str, type[HTTPConnection]]:
    """urllib3's connection classes, each telling the deadline about its socket as soon as it is
    connected (before a TLS handshake, which the deadline bounds too)."""
    connection = urllib3_module().connection

    class Watched(connection.HTTPConnection):
        deadline: Deadline

        def _new_conn(self) -> socket.socket:  # urllib3's hook for making the socket
            sock = super()._new_conn()
            self.deadline.watch(sock)
            return sock

    class WatchedTLS(connection.HTTPSConnection):
        deadline: Deadline

        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            self.deadline.watch(sock)
            return sock

    return {"http": Watched, "https": WatchedTLS}


def _connection(target: Target, address: str, timeout: float, deadline: Deadline) -> HTTPConnection:
    """A connection (not yet made) to the checked ``address``, each socket operation bounded by ``timeout``."""
    cls = _connection_classes()[target.scheme]
    if target.scheme == "https":
        tls = {"server_hostname": target.host, "assert_hostname": target.host, "cert_reqs": "CERT_REQUIRED"}
        connection = cls(address, target.port, timeout=timeout, **tls)  # type: ignore[call-arg]
    else:
        connection = cls(address, target.port, timeout=timeout)
    connection.deadline = deadline  # type: ignore[attr-defined]
    return connection


def _request(
    url: str, rules: UrlRules, allowed: tuple[Network, ...], deadline: Deadline
) -> tuple[HTTPConnection, BaseHTTPResponse]:
    import http.client
    import ssl

    from urllib3.util.ssl_match_hostname import CertificateError

    urllib3 = urllib3_module()
    target = checked_target(url, rules)
    try:
        address = checked_address(target.host, target.port, allowed, deadline.left(url))
    except ItemFailure as failure:  # name the hop: after a redirect, the host is not the manifest's
        raise ItemFailure(failure.code, f"{shown_url(url)}: {failure.detail}") from None
    connection = _connection(target, str(address), deadline.left(url), deadline)
    headers = {"Host": target.host_header, "Accept-Encoding": "identity", "User-Agent": _USER_AGENT}
    try:
        connection.request(
            "GET", target.request_uri, headers=headers, preload_content=False, decode_content=False
        )  # fmt: skip
        response = connection.getresponse()
        deadline.left(url)  # headers cut short by the watchdog are no answer
        return connection, response
    except (ssl.SSLError, urllib3.exceptions.SSLError, CertificateError) as exc:
        connection.close()
        deadline.left(url)  # a handshake the deadline cut is a timeout
        raise ItemFailure("source_http_error", f"{shown_url(url)}: TLS: {_reason(exc)}") from None
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        connection.close()
        deadline.left(url)  # past the deadline: a timeout, not an unreachable source
        raise _Retry(f"{shown_url(url)}: {_reason(exc)}") from None
    except BaseException:
        connection.close()
        raise


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason).split(": ", 1)[-1] if "object at 0x" in str(reason) else str(reason)


def _answer(
    url: str, response: BaseHTTPResponse, max_bytes: int, deadline: Deadline, unchanged: Unchanged | None
) -> Download:
    status = response.status
    if status == 429 or status >= 500:
        raise _Retry(f"{shown_url(url)}: HTTP {status}", _retry_after(response))
    if status in _MISSING:
        raise ItemFailure("source_missing", f"{shown_url(url)}: HTTP {status}")
    if status != 200:
        raise ItemFailure("source_http_error", f"{shown_url(url)}: HTTP {status}")
    headers = response.headers
    length = _content_length(headers.get("Content-Length"))
    found = Download(None, url, headers.get("ETag"), headers.get("Last-Modified"), length)
    if unchanged is not None and unchanged(headers):
        return found
    if length is not None and length > max_bytes:
        raise ItemFailure(
            "too_large", f"{shown_url(url)}: Content-Length {length / 1e6:.1f} MB is over {max_bytes / 1e6:g} MB"
        )
    data = _read_bounded(url, response, max_bytes, deadline)
    return Download(data, url, found.etag, found.last_modified, length)


def _read_bounded(url: str, response: BaseHTTPResponse, max_bytes: int, deadline: Deadline) -> bytes:
    """The body, read in bounded pieces until it ends, the byte limit or the deadline."""
    import http.client

    import urllib3

    chunks = []
    total = 0
    try:
        while True:
            deadline.left(url)
            chunk = response.read1(min(_READ, max_bytes + 1 - total))
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise ItemFailure("too_large", f"{shown_url(url)}: more than {max_bytes / 1e6:g} MB")
            chunks.append(chunk)
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        deadline.left(url)
        if isinstance(exc, (TimeoutError, socket.timeout, urllib3.exceptions.TimeoutError)):
            raise ItemFailure(
                "source_timeout", f"{shown_url(url)}: the download took longer than its deadline"
            ) from None
        raise _Retry(f"{shown_url(url)}: the connection broke: {_reason(exc)}") from None
    deadline.left(url)  # a body the watchdog cut short ends like a whole one: it is not taken
    return b"".join(chunks)


def _content_length(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    return int(text.strip())


def _retry_after(response: BaseHTTPResponse) -> float | None:
    """``Retry-After`` in seconds (a number, or an HTTP date), or None (absent or unreadable), as
    urllib3's retry policy reads it. Only its reading is used: the tries and waits are
    :func:`_tried`'s, and redirects stay this module's own (``redirect=False``), checked hop by hop."""
    urllib3 = urllib3_module()
    try:
        seconds = urllib3.util.Retry(total=ATTEMPTS - 1, redirect=False).get_retry_after(response)
    except urllib3.exceptions.InvalidHeader:
        return None
    return None if seconds is None else float(seconds)
