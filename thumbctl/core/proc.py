"""Process identity for leases: ``host-id:pid:start-time``, and whether such a process lives.

The host identity is the host name plus the machine id, ``name~0123456789ab``, so two
machines that share a host name never take each other's workers for their own. The start
time (from /proc, in clock ticks since boot) tells a live owner from a new process that
reused its pid.
"""

from __future__ import annotations

import hashlib
import os
import socket
from functools import lru_cache

HOST_ID_ENV = "THUMBCTL_HOST_ID"
"""Test-only: replaces the whole host identity (no ``:``), e.g. to run several "hosts" on one machine."""

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
HOST_ID_SEPARATOR = "~"  # never part of a host name (letters, digits, '-' and '.')


@lru_cache(maxsize=1)
def hostname() -> str:
    return socket.gethostname()


@lru_cache(maxsize=1)
def machine_id() -> str:
    """The first 12 hex digits of the machine id (systemd's, else D-Bus's), stable across boots.

    Last resort, where neither file exists: a hash of the host name, which cannot tell apart
    two such machines of the same name (the boot id would, but changes at every boot, so a
    rebooted host could not recognise its own dead workers)."""
    for path in MACHINE_ID_FILES:
        try:
            with open(path, encoding="ascii", errors="replace") as fh:
                text = fh.read().strip().lower()
        except OSError:
            continue
        if len(text) >= 12 and all(c in "0123456789abcdef" for c in text):
            return text[:12]
    return hashlib.sha256(hostname().encode()).hexdigest()[:12]


def host_id() -> str:
    """This host's identity in lease owners: ``$THUMBCTL_HOST_ID`` if set, else ``hostname~machine-id``."""
    given = os.environ.get(HOST_ID_ENV, "")
    return given if given.strip() else f"{hostname()}{HOST_ID_SEPARATOR}{machine_id()}"


def host_name_of(owner: str) -> str:
    """The host name part of a lease owner, for display (``shop-1`` of ``shop-1~0123456789ab:42:7``)."""
    return owner.rsplit(":", 2)[0].split(HOST_ID_SEPARATOR, 1)[0]


def owner_label(owner: str) -> str:
    """A lease owner as people read it: ``host:pid:start-time`` without the machine id."""
    parts = owner.rsplit(":", 2)
    return ":".join([host_name_of(owner), *parts[1:]]) if len(parts) == 3 else owner


def start_ticks(pid: int) -> str:
    """The process start time from /proc, or ``?`` where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return "?"
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else "?"


def owner_id(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{host_id()}:{pid}:{start_ticks(pid)}"


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` names a process on this host that is certainly gone.

    Owners on other hosts — any other host identity, even one of the same host name — are
    never declared dead here; their leases expire.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host_id():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if not _pid_exists(pid):
        return True
    ticks = start_ticks(pid)
    return parts[2] != "?" and ticks != "?" and ticks != parts[2]


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"
