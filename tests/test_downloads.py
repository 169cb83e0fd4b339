"""Downloads of URL sources: the address rule, the URL rules and the bounds, against the tests'
own HTTP server (tests/httpserver.py), hostile answers included."""

from __future__ import annotations

import email.utils
import ipaddress
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.core.errors import ItemFailure, UsageError, is_transient
from thumbctl.core.profile import SettingError, UrlRules, parse_networks, parse_url_prefixes
from thumbctl.sources.downloads import is_url, url_item_id
from thumbctl.sources.downloads.addresses import address_problem, networks_of
from thumbctl.sources.downloads.fetch import MAX_REDIRECTS, checked_target, download, shown_url

from httpserver import NETWORK, Answer, HttpServer, HttpsServer, gzip_bomb, redirect, served_path, tls_files

RULES = UrlRules(allow_networks=(NETWORK,), timeout=10.0)
CAP = 100_000


def failure_of(url: str, rules: UrlRules = RULES, max_bytes: int = CAP) -> ItemFailure:
    with pytest.raises(ItemFailure) as caught:
        download(url, rules, max_bytes)
    return caught.value


# -- the address rule --------------------------------------------------------------------------

FORBIDDEN_V4 = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "240.0.0.0/4",
]
FORBIDDEN_V6 = ["::1/128", "::/128", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8", "2001:db8::/32"]


def in_network(cidr: str) -> st.SearchStrategy[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    network = ipaddress.ip_network(cidr)
    return st.integers(0, network.num_addresses - 1).map(lambda n: network[n])


@given(st.sampled_from(FORBIDDEN_V4 + FORBIDDEN_V6).flatmap(in_network))
def test_every_address_of_the_forbidden_ranges_is_refused(address) -> None:
    assert address_problem(address) is not None


@given(st.integers(0, 2**32 - 1))
def test_every_ipv4_address_carried_in_ipv6_is_refused_whatever_it_is(value: int) -> None:
    """Mapped (::ffff:a.b.c.d), compatible (::a.b.c.d), NAT64 and 6to4 forms, even of a public address."""
    forms = [
        ipaddress.IPv6Address((0xFFFF << 32) | value),
        ipaddress.IPv6Address((0x0064_FF9B << 96) | value),
        ipaddress.IPv6Address((0x2002 << 112) | (value << 80)),
    ]
    if value > 1:
        forms.append(ipaddress.IPv6Address(value))
    for form in forms:
        assert address_problem(form) is not None, form


@given(st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address))
def test_an_ipv4_address_passes_only_outside_every_special_range(address) -> None:
    special = any(address in ipaddress.ip_network(cidr) for cidr in FORBIDDEN_V4) or not address.is_global
    assert (address_problem(address) is None) == (not special)


def test_public_addresses_pass_and_allowed_networks_admit_the_others() -> None:
    for text in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"):
        assert address_problem(ipaddress.ip_address(text)) is None
    assert address_problem(ipaddress.ip_address("169.254.169.254")) == "a link-local address"
    allowed = networks_of(["127.0.0.2/32", "10.20.0.0/16"])
    assert address_problem(ipaddress.ip_address("127.0.0.2"), allowed) is None
    assert address_problem(ipaddress.ip_address("10.20.3.4"), allowed) is None
    assert address_problem(ipaddress.ip_address("127.0.0.1"), allowed) == "a loopback address"
    assert address_problem(ipaddress.ip_address("::ffff:127.0.0.2"), allowed) is not None


def test_settings_parse_networks_and_prefixes() -> None:
    assert parse_networks("127.0.0.2, 10.1.2.3/16 fd00::/8") == ("127.0.0.2/32", "10.1.0.0/16", "fd00::/8")
    assert parse_url_prefixes(["HTTPS://CDN.example.com", "http://h:8080/p/"]) == (
        "https://cdn.example.com/",
        "http://h:8080/p/",
    )
    for bad in ("10.0.0.300/8", "x"):
        with pytest.raises(SettingError, match="bad network"):
            parse_networks(bad)
    for bad in ("ftp://h/", "https://", "cdn.example.com", "https://user@h/"):
        with pytest.raises(SettingError, match="bad URL prefix"):
            parse_url_prefixes(bad)


def test_url_ids_are_safe_relative_paths_from_host_and_path() -> None:
    assert url_item_id("https://CDN.example.com:8443/photos/a%20b.jpg?sig=x#f") == "cdn.example.com/photos/a b.jpg"
    assert url_item_id("https://h/a%2Fb/c.jpg") == "h/a%2Fb/c.jpg"
    assert url_item_id("https://h/x/%2E%2E/c.jpg") == "h/x/%2E%2E/c.jpg"
    assert url_item_id("https://h/../etc/passwd") is None
    assert is_url("https://h/a.jpg") and is_url("s3://b/k") and not is_url("photos/a.jpg")
    assert shown_url("https://user:secret@h/a.jpg?X-Amz-Signature=abc") == "https://h/a.jpg"


# -- downloads against the tests' server --------------------------------------------------------


def test_a_download_sends_identity_and_the_host_and_gets_the_bytes(http_server: HttpServer) -> None:
    url, route = http_server.route("a.jpg", Answer(body=b"bytes", headers={"ETag": '"v1"'}))
    got = download(url, RULES, CAP)
    assert (got.data, got.etag, got.length) == (b"bytes", '"v1"', 5)
    sent = route.request_headers[0]
    assert sent["Accept-Encoding"] == "identity"
    assert sent["Host"] == f"127.0.0.2:{http_server.port}"


def test_the_server_is_refused_unless_its_network_is_allowed(http_server: HttpServer) -> None:
    url, route = http_server.route("a.jpg", Answer(body=b"x"))
    failure = failure_of(url, UrlRules())
    assert failure.code == "source_forbidden_address" and not is_transient(failure.code)
    assert "127.0.0.2 is a loopback address" in failure.detail
    assert route.requests == 0


def test_a_slow_drip_stops_at_the_whole_download_deadline(http_server: HttpServer) -> None:
    url, _ = http_server.route("drip.jpg", Answer(body=b"x" * 200, drip=0.05))
    started = time.monotonic()
    failure = failure_of(url, UrlRules(allow_networks=(NETWORK,), timeout=0.6))
    assert failure.code == "source_timeout" and is_transient("source_timeout")
    assert time.monotonic() - started < 2.0


def test_a_content_length_over_the_cap_fails_before_the_body_is_read(http_server: HttpServer) -> None:
    url, _ = http_server.route("big.jpg", Answer(stream_bytes=50_000_000))
    started = time.monotonic()
    failure = failure_of(url)
    assert failure.code == "too_large" and "Content-Length 50.0 MB" in failure.detail
    assert time.monotonic() - started < 2.0


def test_a_body_without_content_length_is_counted_and_stopped_past_the_cap(http_server: HttpServer) -> None:
    url, _ = http_server.route("endless.jpg", Answer(stream_bytes=50_000_000, chunked=True))
    failure = failure_of(url)
    assert failure.code == "too_large" and "more than 0.1 MB" in failure.detail


def test_a_gzip_bomb_is_counted_compressed_and_never_inflated(http_server: HttpServer) -> None:
    bomb = gzip_bomb(50_000_000)
    assert len(bomb) < CAP
    url, _ = http_server.route("bomb.jpg", Answer(body=bomb, headers={"Content-Encoding": "gzip"}))
    assert download(url, RULES, CAP).data == bomb


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/x.jpg", "http://169.254.169.254/latest/meta-data/"])
def test_a_redirect_to_a_forbidden_address_is_refused(http_server: HttpServer, target: str) -> None:
    url, _ = http_server.route("moved.jpg", redirect(target.format(port=http_server.port)))
    failure = failure_of(url)
    assert failure.code == "source_forbidden_address"


def test_a_name_that_resolves_to_loopback_is_refused(http_server: HttpServer) -> None:
    url, route = http_server.route("a.jpg", Answer(body=b"x"))
    failure = failure_of(url.replace("127.0.0.2", "localhost"))
    assert failure.code == "source_forbidden_address" and "localhost resolves to" in failure.detail
    assert route.requests == 0


def chain(http_server: HttpServer, hops: int) -> str:
    url, _ = http_server.route("end.jpg", Answer(body=b"end"))
    for n in range(hops):
        url, _ = http_server.route(f"hop{n}", redirect(url, 307 if n % 2 else 301))
    return url


def test_five_redirects_are_followed_and_a_sixth_is_not(http_server: HttpServer) -> None:
    assert download(chain(http_server, MAX_REDIRECTS), RULES, CAP).data == b"end"
    failure = failure_of(chain(http_server, MAX_REDIRECTS + 1))
    assert failure.code == "source_http_error" and "more than 5 redirects" in failure.detail


def test_503_then_200_is_tried_again(http_server: HttpServer) -> None:
    url, route = http_server.route("flaky.jpg", Answer(503), Answer(body=b"ok"))
    assert download(url, RULES, CAP).data == b"ok"
    assert route.requests == 2


def test_429_waits_for_retry_after(http_server: HttpServer) -> None:
    url, route = http_server.route("busy.jpg", Answer(429, headers={"Retry-After": "1"}), Answer(body=b"ok"))
    started = time.monotonic()
    assert download(url, RULES, CAP).data == b"ok"
    assert time.monotonic() - started >= 1.0 and route.requests == 2


def test_a_retry_after_past_the_deadline_gives_up_at_once(http_server: HttpServer) -> None:
    url, route = http_server.route("later.jpg", Answer(503, headers={"Retry-After": "20"}))
    started = time.monotonic()
    failure = failure_of(url, UrlRules(allow_networks=(NETWORK,), timeout=2.0))
    assert failure.code == "source_unreachable" and "no time left" in failure.detail
    assert time.monotonic() - started < 1.0 and route.requests == 1


def test_a_retry_after_date_past_the_deadline_gives_up_at_once(http_server: HttpServer) -> None:
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    url, route = http_server.route("dated.jpg", Answer(503, headers={"Retry-After": when}))
    started = time.monotonic()
    failure = failure_of(url, UrlRules(allow_networks=(NETWORK,), timeout=2.0))
    assert failure.code == "source_unreachable" and "no time left" in failure.detail
    assert time.monotonic() - started < 1.0 and route.requests == 1


def test_an_unreadable_retry_after_is_the_backoff(http_server: HttpServer) -> None:
    url, route = http_server.route("odd.jpg", Answer(503, headers={"Retry-After": "soon"}), Answer(body=b"ok"))
    started = time.monotonic()
    assert download(url, RULES, CAP).data == b"ok"
    assert route.requests == 2 and time.monotonic() - started >= 0.125


def test_the_tries_are_spaced_by_the_backoff(http_server: HttpServer) -> None:
    """Three tries of a 503: at least 0.125 s, then 0.25 s between them (half of 0.25 s, doubling,
    plus a random part of up to the other half)."""
    url, route = http_server.route("slow-down.jpg", Answer(503))
    started = time.monotonic()
    assert failure_of(url).code == "source_unreachable"
    assert route.requests == 3 and 0.375 <= time.monotonic() - started < 5.0


def test_a_redirect_on_a_second_try_is_checked_like_the_first(http_server: HttpServer) -> None:
    """A retried download follows its redirects itself too: the hop to a forbidden address is refused."""
    url, route = http_server.route("flaky-move.jpg", Answer(503), redirect("http://169.254.169.254/latest/meta-data/"))
    failure = failure_of(url)
    assert failure.code == "source_forbidden_address" and route.requests == 2


def test_5xx_on_every_try_is_unreachable_and_transient(http_server: HttpServer) -> None:
    url, route = http_server.route("down.jpg", Answer(502))
    failure = failure_of(url)
    assert failure.code == "source_unreachable" and is_transient(failure.code)
    assert route.requests == 3


@pytest.mark.parametrize(
    ("status", "code"), [(404, "source_missing"), (410, "source_missing"), (403, "source_http_error")]
)
def test_4xx_is_permanent(http_server: HttpServer, status: int, code: str) -> None:
    url, route = http_server.route("gone.jpg", Answer(status))
    failure = failure_of(url)
    assert failure.code == code and not is_transient(code)
    assert route.requests == 1


def test_a_refused_connection_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        port = sock.getsockname()[1]
    failure = failure_of(f"http://127.0.0.2:{port}/a.jpg")
    assert failure.code == "source_unreachable"


def test_prefixes_schemes_and_credentials(http_server: HttpServer) -> None:
    url, _ = http_server.route("a.jpg", Answer(body=b"x"))
    inside = UrlRules(allow_urls=(http_server.url("/"),), allow_networks=(NETWORK,))
    assert download(url, inside, CAP).data == b"x"
    outside = UrlRules(allow_urls=("https://cdn.example.com/",), allow_networks=(NETWORK,))
    assert "under no allowed URL prefix" in failure_of(url, outside).detail
    leaving, _ = http_server.route("leave.jpg", redirect("https://other.example.com/a.jpg"))
    assert failure_of(leaving, inside).code == "source_forbidden_address"
    assert failure_of("ftp://example.com/a.jpg").code == "source_forbidden_address"
    secret = failure_of(url.replace("http://", "http://user:hunter2@"))
    assert secret.code == "source_forbidden_address" and "hunter2" not in secret.detail


def test_without_urllib3_a_download_is_a_coded_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "urllib3", None)  # import urllib3 raises ImportError
    with pytest.raises(UsageError) as caught:
        download("https://example.com/a.jpg", RULES, CAP)
    assert caught.value.code == "downloads_unavailable" and "pip install 'thumbctl[s3]'" in caught.value.message


def test_the_local_tool_does_not_import_urllib3() -> None:
    code = (
        "import sys, thumbctl.intake.submission, thumbctl.engine.worker, thumbctl.cli; print('urllib3' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_https_connects_to_the_address_checked_and_verifies_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``photos.test`` resolves (here) to the tests' address once per hop; the connection goes to that
    address, and TLS checks the certificate against the name, not the address."""
    ca, cert, key = tls_files(tmp_path, "photos.test")
    server = HttpsServer(cert, key)
    real = socket.getaddrinfo
    asked: list[str] = []

    def resolve(host, port, *args, **kwargs):
        asked.append(host)
        return real("127.0.0.2" if host == "photos.test" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    try:
        url, route = server.route("a.png", Answer(body=b"tls bytes"))
        named = url.replace("127.0.0.2", "photos.test")
        assert download(named, RULES, CAP).data == b"tls bytes"
        assert asked.count("photos.test") == 1
        assert route.request_headers[0]["Host"] == f"photos.test:{server.port}"
        failure = failure_of(url)  # the certificate names photos.test, not 127.0.0.2
        assert failure.code == "source_http_error" and "doesn't match 'photos.test'" in failure.detail
        assert route.requests == 1  # only the first download's: the second ended in the TLS handshake
    finally:
        server.close()


# -- the whole download under one deadline -----------------------------------------------------


def test_a_header_drip_ends_as_source_timeout_within_the_deadline_plus_a_second(http_server: HttpServer) -> None:
    """The status line comes at once, then one header byte every 0.2 s for two minutes: no single
    read waits long, only the whole download's deadline can end it."""
    url, route = http_server.route("headers.jpg", Answer(header_drip=0.2))
    started = time.monotonic()
    failure = failure_of(url, UrlRules(allow_networks=(NETWORK,), timeout=1.5))
    elapsed = time.monotonic() - started
    assert failure.code == "source_timeout", failure
    assert 1.5 <= elapsed < 2.5, elapsed
    assert route.requests == 1


def test_a_deadline_passed_during_a_redirect_chain_is_a_timeout(http_server: HttpServer) -> None:
    end, _ = http_server.route("end.jpg", Answer(header_drip=0.2))
    url, _ = http_server.route("hop.jpg", redirect(end))
    started = time.monotonic()
    assert failure_of(url, UrlRules(allow_networks=(NETWORK,), timeout=1.0)).code == "source_timeout"
    assert time.monotonic() - started < 2.0


# -- --allow-url prefixes, compared as the server reads the path -------------------------------

#: Ways out of /public/ that a server decoding the path and removing dot-segments follows.
ESCAPES = ["%2e%2e", "%2E%2E", ".%2e", "%2e.", "..%2f..", "%2e%2e%2f%2e%2e", "..%5c..", "..\\..", "..;", "%252e%252e"]


@pytest.mark.parametrize("escape", ESCAPES)
def test_an_encoded_dot_segment_cannot_leave_an_allowed_prefix(http_server: HttpServer, escape: str) -> None:
    secret, route = http_server.route("secret.jpg", Answer(body=b"secret"))
    inside = http_server.url("/public/")
    sneaky = f"{inside}{escape}{secret.split(str(http_server.port), 1)[1]}"
    assert served_path(sneaky.split(str(http_server.port), 1)[1].replace("\\", "/")).endswith("/secret.jpg")
    failure = failure_of(sneaky, UrlRules(allow_urls=(inside,), allow_networks=(NETWORK,)))
    assert failure.code == "source_forbidden_address" and "under no allowed URL prefix" in failure.detail
    assert route.requests == 0


def test_a_redirect_to_an_encoded_dot_segment_path_is_refused(http_server: HttpServer) -> None:
    secret, route = http_server.route("secret.jpg", Answer(body=b"secret"))
    start, _ = http_server.route(
        "public/start.jpg", redirect("%2e%2e/%2e%2e" + secret.split(str(http_server.port), 1)[1])
    )
    inside = start.rsplit("/", 1)[0] + "/"
    failure = failure_of(start, UrlRules(allow_urls=(inside,), allow_networks=(NETWORK,)))
    assert failure.code == "source_forbidden_address" and "under no allowed URL prefix" in failure.detail
    assert route.requests == 0


def test_paths_that_stay_under_the_prefix_are_still_admitted(http_server: HttpServer) -> None:
    url, route = http_server.route("public/a b.jpg", Answer(body=b"ok"))
    inside = url.rsplit("/", 1)[0] + "/"
    rules = UrlRules(allow_urls=(inside,), allow_networks=(NETWORK,))
    for variant in (
        url.replace(" ", "%20"),
        inside + "./a%20b.jpg",
        inside + "x/../a%20b.jpg",
        inside + "x/%2e%2e/a%20b.jpg",
    ):
        assert download(variant, rules, CAP).data == b"ok", variant
    assert route.requests == 4


PIECES = [
    "a",
    ".",
    "..",
    "%2e",
    "%2e%2e",
    "%2E.",
    "%2f",
    "%5c",
    "\\",
    "..;",
    "%252e%252e",
    "%25252e%25252e",
    ";",
    "%",
    "public%2f",
]


def readings(path: str) -> list[str]:
    """What servers make of a request path: decoded not at all or up to three times, backslashes as slashes or not,
    ``..;`` as ``..`` or not, then dot-segments removed."""
    import posixpath
    from urllib.parse import unquote

    found = []
    for decoded in (path, unquote(path), unquote(unquote(path)), unquote(unquote(unquote(path)))):
        for text in (decoded, decoded.replace("\\", "/")):
            for plain in (text, text.replace("..;", "..")):
                found.append(posixpath.normpath("/" + plain.lstrip("/")) + ("/" if plain.endswith("/") else ""))
    return found


@given(st.lists(st.sampled_from(PIECES), max_size=8), st.sampled_from(["/", ""]))
def test_no_admitted_path_is_read_outside_the_prefix_by_any_server(pieces: list[str], joiner: str) -> None:
    path = "/public/" + (joiner or "/").join(pieces) + "/x.jpg"
    rules = UrlRules(allow_urls=("http://h.example/public/",))
    try:
        target = checked_target(f"http://h.example{path}", rules)
    except ItemFailure as failure:
        assert failure.code == "source_forbidden_address"
        return
    for reading in readings(target.request_uri):
        assert reading.startswith("/public/"), (path, target.request_uri, reading)


# -- secrets of a URL --------------------------------------------------------------------------


def test_shown_sources_keep_no_credentials_and_no_signature() -> None:
    from thumbctl.core.redact import redacted_text, shown_source, without_userinfo

    signed = (
        "https://bucket.s3.amazonaws.com/a.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F1"
        "&X-Amz-Security-Token=tok&X-Amz-Signature=deadbeef&w=800"
    )
    assert shown_source(signed) == (
        "https://bucket.s3.amazonaws.com/a.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED"
        "&X-Amz-Security-Token=REDACTED&X-Amz-Signature=REDACTED&w=800"
    )
    assert shown_source("https://u:hunter2@h/a.jpg?sig=s1&Signature=s2&token=t&Key-Pair-Id=k&x-goog-signature=g") == (
        "https://h/a.jpg?sig=REDACTED&Signature=REDACTED&token=REDACTED&Key-Pair-Id=REDACTED&x-goog-signature=REDACTED"
    )
    assert shown_source("https://h/a.jpg#access_token=t") == "https://h/a.jpg#access_token=REDACTED"
    assert shown_source("photos/a.jpg?token=x") == "photos/a.jpg?token=x"  # a path, not a URL
    assert without_userinfo("https://u:p@ss@h:8/a?b=c") == "https://h:8/a?b=c"
    text = "cannot decode https://u:pw@h/a.jpg?sig=abc: truncated; see http://h/b?token=t."
    assert (
        redacted_text(text) == "cannot decode https://h/a.jpg?sig=REDACTED: truncated; see http://h/b?token=REDACTED."
    )
