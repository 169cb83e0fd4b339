"""The worker's heap settings: freed image memory is reused without page faults while there is
work, and given back when the worker runs dry. Each case runs in a fresh interpreter, whose
heap the settings then govern (the test process's own is left as it is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from thumbctl.heap import _glibc

pytestmark = pytest.mark.skipif(_glibc() is None, reason="the heap settings are glibc's")

#: Three 20 MB buffers, filled, freed, and made again: the shape of a source's decode and
#: reductions. Prints the page faults of the last round and the resident size after each step.
ROUNDS = """
import json, resource, sys
from thumbctl import heap
kept = heap.keep_freed_memory() if sys.argv[1] == "keep" else None

def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) // 1024

def one_round():
    buffers = [bytearray(20 << 20) for _ in range(3)]
    for buffer in buffers:
        buffer[::4096] = b"x" * len(range(0, len(buffer), 4096))
    del buffers

for _ in range(2):
    one_round()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
one_round()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
held = rss()
heap.release_freed_memory()
print(json.dumps({"kept": kept, "faults": faults, "held_mb": held, "released_mb": rss()}))
"""


def rounds(mode: str) -> dict:
    env = {**os.environ, "GLIBC_TUNABLES": ""}
    done = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def test_a_worker_heap_reuses_freed_image_memory_without_faulting_it_in_again() -> None:
    plain, kept = rounds("plain"), rounds("keep")
    pages = 60 << 20 >> 12
    assert plain["faults"] > pages // 2  # glibc's defaults gave the 60 MB back: every page faulted again
    assert kept["kept"] is True
    assert kept["faults"] < pages // 20


def test_a_worker_that_runs_dry_gives_the_kept_memory_back() -> None:
    kept = rounds("keep")
    assert kept["held_mb"] >= 40  # the freed buffers were kept for the next source
    assert kept["released_mb"] <= kept["held_mb"] - 40
