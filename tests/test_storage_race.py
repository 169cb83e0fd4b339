"""A folder under OUT or STORE swapped for a symlink and back, in a tight loop, during a real run.

A thread exchanges a folder of OUT (a friendly sub-folder, ``.tmp``) or of the store (``.tmp``,
``objects``, an object shard) with a symlink to a folder outside both, atomically (``renameat2(RENAME_EXCHANGE)``,
so the name never goes missing), while ``thumbctl work`` renders a batch in other processes.
Whatever the interleaving, nothing may land outside OUT: an item whose publish met the
symlink fails ``path_outside_root``, the others succeed. The swaps are counted, so a run in
which the race never had a chance fails instead of passing quietly.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.core.faults import Faults
from thumbctl.core.retries import Backoff
from thumbctl.engine.worker import WorkerConfig, run_worker

from harness import Thumbctl
from inprocess import json_here
from support import check_invariants, make_image

pytestmark = pytest.mark.timeout(180)

SOURCES = 40
RATIOS = ("1:1", "4:3")
#: Fewer swaps than this means the swapping thread barely ran during the work: the test proves nothing.
MIN_SWAPS = 200

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically: at every instant each name exists."""
    if _libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


class Swapper(threading.Thread):
    """Exchanges ``folder`` with a symlink to ``outside`` and back until stopped; counts the swaps."""

    def __init__(self, folder: Path, outside: Path) -> None:
        super().__init__(name="swapper", daemon=True)
        self.folder = folder
        self.link = folder.with_name(folder.name + ".swap")
        self.link.symlink_to(outside, target_is_directory=True)
        self.swaps = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                exchange(self.folder, self.link)  # the folder's name is now the symlink
            except FileNotFoundError:  # OUT/.tmp, removed by a worker once empty: made again, as a worker would
                with contextlib.suppress(FileExistsError):
                    self.folder.mkdir()
                continue
            self.swaps += 1
            time.sleep(0.0002)
            exchange(self.folder, self.link)  # and the real folder again
            time.sleep(0.0002)

    def stop(self) -> None:
        self.done.set()
        self.join()
        assert not self.folder.is_symlink() and (self.folder.is_dir() or not self.folder.exists())
        self.link.unlink()


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if not p.is_dir() or p.is_symlink())


@pytest.fixture(scope="module")
def renameat2_works(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("exchange")
    (folder / "a").mkdir()
    (folder / "b").symlink_to(folder)
    try:
        exchange(folder / "a", folder / "b")
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available here: {exc}")
        raise


# Which folder is swapped: of OUT "d3" and ".tmp", of the store "store/.tmp", "objects" and "shard"
# (the objects/<xx> folder most items publish into, looked up once the batch is recorded).
@pytest.mark.parametrize("swapped", ["d3", ".tmp", "store/.tmp", "objects", "shard"])
def test_a_folder_swapped_for_a_symlink_mid_run_never_leads_a_write_outside(
    tmp_path: Path, renameat2_works: None, swapped: str
) -> None:
    photos, out, outside, db = tmp_path / "photos", tmp_path / "out", tmp_path / "outside", tmp_path / "ledger.db"
    for n in range(SOURCES):
        make_image(photos / "d3" / f"p{n:02}.png", (48 + n % 7, 40), "PNG", seed=n)
    outside.mkdir()
    env = {**os.environ, "THUMBCTL_DB": str(db)}
    env.pop("THUMBCTL_FAULT", None)
    cli = [sys.executable, "-m", "thumbctl"]
    ratio_args = [arg for ratio in RATIOS for arg in ("--ratio", ratio)]
    args = ("--out", out, *ratio_args, "--size", "24", "--detach")
    batch_id = json_here(Thumbctl(db), "submit", photos, *args)["batch_id"]
    with Ledger(db) as ledger:
        shards = Counter(Path(item.object_path).parent for item in ledger.views.items(batch_id))
    store = tmp_path / "ledger.store"
    folders = {"d3": out / "d3", ".tmp": out / ".tmp", "store/.tmp": store / ".tmp", "objects": store / "objects"}
    folder = folders.get(swapped) or shards.most_common(1)[0][0]
    folder.mkdir(parents=True, exist_ok=True)
    (out / ".tmp").mkdir(parents=True, exist_ok=True)

    swapper = Swapper(folder, outside)
    work = subprocess.Popen(
        [*cli, "work", "--batch", batch_id, "--workers", "2", "--until-idle", "-q"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    swapper.start()
    try:
        _, stderr = work.communicate(timeout=120)
    finally:
        swapper.stop()
    assert work.returncode in (0, 1), stderr

    found_outside = files_under(outside)
    with Ledger(db) as ledger:
        outcomes = Counter((i.state, i.error_code) for i in ledger.views.items(batch_id))
        check_invariants(ledger)
    print(f"{swapped}: {swapper.swaps} swaps, {len(found_outside)} files outside OUT, items: {dict(outcomes)}")
    assert swapper.swaps >= MIN_SWAPS
    assert found_outside == []
    assert set(outcomes) <= {("succeeded", None), ("failed", "path_outside_root")}
    assert files_under(store / ".tmp") == []  # every temp file removed on the way out, whatever the swaps


class AtCheckpoint(Faults):
    """Runs ``act`` when the worker reaches ``checkpoint`` (in this process, no fault injected)."""

    def __init__(self, checkpoint: str, act: Callable[[], None]) -> None:
        super().__init__("")
        self.checkpoint, self.act = checkpoint, act

    def hit(self, checkpoint: str) -> None:
        if checkpoint == self.checkpoint:
            self.act()


def test_a_store_temp_folder_swapped_for_a_symlink_after_staging_leaves_no_temp_file(tmp_path: Path) -> None:
    """The temp file was written in STORE/.tmp before the swap: the worker reaches it through the
    folder it wrote it in, never through the symlink, and it is gone when the run ends."""
    photos, out, outside = tmp_path / "photos", tmp_path / "out", tmp_path / "outside"
    make_image(photos / "p.png", (64, 48), "PNG", seed=1)
    outside.mkdir()
    cli = Thumbctl(tmp_path / "ledger.db")
    batch_id = json_here(cli, "submit", photos, "--out", out, "--ratio", "1:1", "--size", "24", "--detach")["batch_id"]
    tmp, moved = tmp_path / "ledger.store" / ".tmp", tmp_path / "ledger.store" / ".tmp-moved"
    staged: list[list[str]] = []

    def swap() -> None:  # the render is staged in STORE/.tmp
        staged.append(files_under(tmp))
        tmp.rename(moved)
        tmp.symlink_to(outside, target_is_directory=True)

    config = WorkerConfig(str(cli.db), batch_id=batch_id, backoff=Backoff(base=0.001, cap=0.001), poll_seconds=0.01)
    run_worker(config, threading.Event(), AtCheckpoint("before_publish", swap))
    assert [len(files) for files in staged] == [1]
    assert files_under(moved) == [] and files_under(outside) == []
    status = json_here(cli, "status", batch_id)
    assert status["counts"]["succeeded"] == 1
