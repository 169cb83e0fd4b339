"""How a worker process's C heap keeps the memory its images freed, and gives it back when idle.

Every source a worker renders allocates the same large buffers again: the decode, its
reductions, the resampled outputs, libjpeg's own. With glibc's defaults the freed top of the
heap goes back to the kernel at once, so the next source touches fresh pages and takes a page
fault for each 4 KiB of them (about 96,000 in a submit of the corpus' ``photos/``). A worker
keeps up to :data:`TRIM_THRESHOLD` of freed heap while it has work, with :data:`TOP_PAD` of slack
on every growth, so the next source reuses warm pages (``docs/benchmarks.md``, "A worker's heap kept for
the next source"), and hands all of it back when it runs dry (:func:`release_freed_memory`), so an
idle worker holds no more than it needs.

Allocations over :data:`MMAP_THRESHOLD` (a whole 100 MP decode is one of them only when Pillow
asks for it in one piece; it uses 16 MB blocks) still map and unmap their own pages, as before.
Only glibc has these knobs: elsewhere both functions do nothing.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

#: ``mallopt`` parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MB = 1 << 20
#: Freed memory at the top of the heap kept for the next source.
TRIM_THRESHOLD = 128 * MB
#: Extra room asked of the kernel whenever the heap grows (touched, and so paid for, only when used).
TOP_PAD = 32 * MB
#: Allocations at least this large get pages of their own, returned when freed.
MMAP_THRESHOLD = 64 * MB


@lru_cache(maxsize=1)
def _glibc() -> Any | None:
    """glibc's C library, or None on any other."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError):
        return None
    import ctypes  # only here: a worker process pays for it, a command never does

    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Let this process keep freed heap memory for reuse (see the module notes); True when it does."""
    libc = _glibc()
    if libc is None:
        return False
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    taken = [libc.mallopt(param, value) == 1 for param, value in settings]  # each tried, whatever the others did
    return all(taken)


def release_freed_memory() -> None:
    """Give every freed page of the heap back to the kernel (a worker with nothing to do)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
