"""The address rule of URL sources: which hosts a download may connect to.

A host name is resolved once per hop and every address it gives is checked; the download then
connects to the first of them, the address that was checked (:mod:`thumbctl.sources.downloads.fetch`),
so a name that resolves to a public address for the check and to a private one for the
connection (DNS rebinding) cannot lead anywhere. An address is refused when it is unspecified,
loopback, private, link-local (cloud metadata at 169.254.169.254), multicast, site-local,
reserved or otherwise not global, and any IPv6 address that carries an IPv4 one (mapped
``::ffff:a.b.c.d``, compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4, Teredo), whatever the
IPv4 address inside: unless a network the user allowed holds it.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterable
from ipaddress import IPv4Address, IPv6Address

from ...core.errors import ItemFailure

Address = IPv4Address | IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The special-purpose blocks of the IANA registries that no download reaches, named here so the rule
#: does not depend on the Python release's idea of "global" (which has grown over releases).
SPECIAL_NETWORKS = tuple(
    ipaddress.ip_network(text)
    for text in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24",
        "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
        "224.0.0.0/4", "240.0.0.0/4",
        "::/127", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7", "fe80::/10",
        "fec0::/10", "ff00::/8",
    )
)  # fmt: skip
_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: The kinds of address refused, in the order a refusal names them.
_KINDS = (
    ("unspecified", "is_unspecified"),
    ("loopback", "is_loopback"),
    ("link-local", "is_link_local"),
    ("multicast", "is_multicast"),
    ("private", "is_private"),
    ("reserved", "is_reserved"),
)


def networks_of(texts: Iterable[str]) -> tuple[Network, ...]:
    """The allowed networks, from their CIDR text (checked when the setting was parsed)."""
    return tuple(ipaddress.ip_network(text, strict=False) for text in texts)


def address_problem(address: Address, allowed: tuple[Network, ...] = ()) -> str | None:
    """Why a download must not connect to ``address`` (None: it may)."""
    if any(address.version == net.version and address in net for net in allowed):
        return None
    if isinstance(address, IPv6Address) and _carries_ipv4(address):
        return "an IPv6 address that carries an IPv4 one"
    for kind, test in _KINDS:
        if getattr(address, test):
            return f"a {kind} address"
    if isinstance(address, IPv6Address) and address.is_site_local:
        return "a site-local address"
    if not address.is_global or any(address.version == net.version and address in net for net in SPECIAL_NETWORKS):
        return "not a global address"
    return None


def _carries_ipv4(address: IPv6Address) -> bool:
    return bool(
        address.ipv4_mapped is not None
        or address.sixtofour is not None
        or address.teredo is not None
        or (address in _COMPATIBLE and int(address) > 1)  # :: and ::1 are refused as what they are
        or address in _NAT64
    )


def checked_address(host: str, port: int, allowed: tuple[Network, ...], timeout: float) -> Address:
    """The address to connect to for ``host``: every address it resolves to must pass the rule
    (``source_forbidden_address``, permanent), and the first is returned. A name that does not
    resolve within ``timeout`` seconds, or at all, is ``source_unreachable`` (transient)."""
    addresses = _resolved(host, port, timeout)
    for address in addresses:
        problem = address_problem(address, allowed)
        if problem is not None:
            shown = host if host == str(address) else f"{host} resolves to {address}, which"
            raise ItemFailure("source_forbidden_address", f"{shown} is {problem}; it is not downloaded from")
    return addresses[0]


def _resolved(host: str, port: int, timeout: float) -> list[Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    found: list[object] = []

    def resolve() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            found.append(exc)

    # getaddrinfo takes no timeout: it runs on a thread of its own, waited for until the deadline
    thread = threading.Thread(target=resolve, name="resolve", daemon=True)
    thread.start()
    thread.join(max(timeout, 0.0))
    if not found:
        raise ItemFailure("source_timeout", f"resolving {host} took longer than the download's deadline")
    result = found[0]
    if isinstance(result, BaseException):
        raise ItemFailure("source_unreachable", f"{host} cannot be resolved: {result}")
    addresses = []
    for family, _, _, _, sockaddr in result:  # type: ignore[attr-defined]
        if family in (socket.AF_INET, socket.AF_INET6):
            addresses.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
    if not addresses:
        raise ItemFailure("source_unreachable", f"{host} resolves to no IP address")
    return list(dict.fromkeys(addresses))
