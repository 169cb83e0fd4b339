"""The worker's heap settings: freed image memory is reused without page faults while there is
work, and given back when the worker runs dry. Each case runs in processes of its own (a fresh
interpreter, or real worker processes), whose heaps the settings govern; the test process's own
is left as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from thumbctl.engine.heap import MB, TOP_PAD, _glibc

from harness import Thumbctl

pytestmark = [
    pytest.mark.skipif(_glibc() is None, reason="the heap settings are glibc's"),
    pytest.mark.timeout(120),
]

#: Three 20 MB buffers, filled, freed, and made again: the shape of a source's decode and
#: reductions. Prints the page faults of the last round and the resident size after each step.
ROUNDS = """
import json, resource, sys
from thumbctl.engine import heap
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


# -- a real worker process ---------------------------------------------------------------------


def photos(folder: Path, count: int = 2) -> Path:
    """JPEGs of 2000 x 1500: each decode frees about 12 MB the next one can reuse."""
    folder.mkdir(parents=True)
    for n in range(count):
        bands = [Image.effect_noise((2000, 1500), 40 + 10 * c + n) for c in range(3)]
        Image.merge("RGB", bands).save(folder / f"p{n}.jpg", quality=90)
    return folder


def heap_of(pid: int) -> tuple[float, float]:
    """The size and the resident part, in MB, of the process's C heap (its ``[heap]`` mappings)."""
    size = resident = 0
    inside = False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                inside = line.rstrip().endswith("[heap]")
                if inside:
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    size += end - start
            elif inside and fields[0] == "Rss:":
                resident += int(fields[1]) * 1024
    return size / MB, resident / MB


def test_a_worker_with_work_keeps_room_in_its_heap_for_the_next_source(tmp_path: Path) -> None:
    env = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults", timeout=90)
    proc = env.start(
        "submit", photos(tmp_path / "photos"), "--out", tmp_path / "out", "-w", "1", "-q", fault="pause:before_publish"
    )
    [worker] = env.paused("before_publish", process=proc)
    size, _ = heap_of(worker)
    env.release()
    assert proc.wait(timeout=60) == 0
    # glibc's defaults map each image buffer on its own and keep the heap at a few MB (8.7 MB measured)
    assert size >= TOP_PAD / MB


def test_a_worker_that_runs_dry_gives_the_memory_it_kept_back(tmp_path: Path) -> None:
    env = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults", timeout=90)
    assert env.invoke("submit", photos(tmp_path / "photos"), "--out", tmp_path / "out", "--detach").returncode == 0
    proc = env.start("work", "-w", "1", "-q", fault="pause:ran_dry")
    [worker] = env.paused("ran_dry", process=proc)  # both photos rendered, the next claim came back empty
    _, resident = heap_of(worker)
    env.release()
    proc.interrupt()
    assert proc.wait(timeout=60) == 0
    assert env.json("status", "--json")["batches"][0]["state"] == "succeeded"
    # kept and not given back, the decodes' freed memory stays resident (19.5 MB measured); given back,
    # what is left is the interpreter's own (about 4 MB)
    assert resident < 8
