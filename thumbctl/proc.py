"""Process identity for leases: ``host:pid:start-time``, and whether such a process lives.

The start time (from /proc, in clock ticks since boot) tells a live owner
from a new process that reused its pid.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache


@lru_cache(maxsize=1)
def hostname() -> str:
    return socket.gethostname()


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
    return f"{hostname()}:{pid}:{start_ticks(pid)}"


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` names a process on this host that is certainly gone.

    Owners on other hosts are never declared dead here; their leases expire.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != hostname():
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
