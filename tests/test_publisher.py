"""Publishing through a real worker run: what happens to an object already at its name, and
to temp files when the output folder's disk is full."""

from __future__ import annotations

import ctypes
import io
import os
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from PIL import Image

from thumbctl import Ledger, Profile
from thumbctl.core.faults import Faults
from thumbctl.core.profile import Ratio
from thumbctl.core.retries import Backoff
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.imaging import verify_output
from thumbctl.storage import fsafe
from thumbctl.storage.outputs import LocalOutputTarget, write_json_atomically, write_page
from thumbctl.upkeep.reconcile import reconcile

import support
from support import is_copy_of, make_image, tree_snapshot

#: One 200x100 source, one 1:1 ratio at size 64: its output is 64x64.
PROFILE = Profile(ratios=(Ratio(1, 1),), size=64)


#: A submission here is of PROFILE unless it names another.
accept = partial(support.accept, profile=PROFILE)


def work(ledger: Ledger) -> None:
    config = WorkerConfig(str(ledger.path), backoff=Backoff(base=0.01, cap=0.02), poll_seconds=0.01)
    run_worker(config, threading.Event(), Faults(""))


def jpeg(size: tuple[int, int], colour: tuple[int, int, int]) -> bytes:
    stream = io.BytesIO()
    Image.new("RGB", size, colour).save(stream, "JPEG")
    return stream.getvalue()


@pytest.fixture
def one_photo(tmp_path: Path) -> Path:
    make_image(tmp_path / "photos" / "sofa.png", (200, 100), "PNG", seed=3)
    return tmp_path / "photos"


def published_event(ledger: Ledger, batch_id: str):
    [event] = [e for e in ledger.views.events(batch_id) if e.to_state == "succeeded"]
    return event


# -- an object already at the name -----------------------------------------------------------


def test_an_existing_object_with_other_bytes_that_verifies_is_kept(
    ledger: Ledger, one_photo: Path, out_dir: Path
) -> None:
    batch = accept(ledger, one_photo, out_dir)
    [item] = ledger.views.items(batch.batch_id)
    foreign = jpeg((64, 64), (10, 200, 30))  # another host's encoder, say: right format and size
    os.makedirs(os.path.dirname(item.object_path))
    Path(item.object_path).write_bytes(foreign)
    work(ledger)
    [item] = ledger.views.items(batch.batch_id)
    assert (item.state, item.error_code, item.error_detail) == ("succeeded", None, None)
    assert Path(item.object_path).read_bytes() == foreign
    assert is_copy_of(item.friendly_path, item.object_path)
    event = published_event(ledger, batch.batch_id)
    assert event.error_code is None and event.detail.startswith("object_mismatch: ")
    assert not (out_dir / ".tmp").exists()


@pytest.mark.parametrize(
    ("existing", "reason"),
    [
        (jpeg((64, 64), (10, 200, 30))[:300], "does not decode as jpeg"),
        (jpeg((64, 48), (10, 200, 30)), "is 64x48, expected 64x64"),
        (b"GIF89a not a jpeg", "does not decode as jpeg"),
    ],
    ids=["truncated", "wrong-size", "wrong-format"],
)
def test_an_existing_object_that_fails_verification_is_replaced(
    ledger: Ledger, one_photo: Path, out_dir: Path, existing: bytes, reason: str
) -> None:
    batch = accept(ledger, one_photo, out_dir)
    [item] = ledger.views.items(batch.batch_id)
    os.makedirs(os.path.dirname(item.object_path))
    Path(item.object_path).write_bytes(existing)
    work(ledger)
    [item] = ledger.views.items(batch.batch_id)
    assert item.state == "succeeded"
    assert verify_output(Path(item.object_path), "jpeg", 64, 64) is None
    assert published_event(ledger, batch.batch_id).detail.startswith(f"object_replaced: the existing object {reason}")


def test_a_symlink_at_the_object_name_is_replaced_by_a_regular_file(
    ledger: Ledger, one_photo: Path, out_dir: Path, tmp_path: Path
) -> None:
    batch = accept(ledger, one_photo, out_dir)
    [item] = ledger.views.items(batch.batch_id)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.jpg").write_bytes(jpeg((64, 64), (1, 2, 3)))  # would even verify: still not the object
    before = tree_snapshot(victim)
    os.makedirs(os.path.dirname(item.object_path))
    os.symlink(victim / "precious.jpg", item.object_path)
    work(ledger)
    [item] = ledger.views.items(batch.batch_id)
    assert item.state == "succeeded"
    assert not os.path.islink(item.object_path) and verify_output(Path(item.object_path), "jpeg", 64, 64) is None
    assert tree_snapshot(victim) == before
    event = published_event(ledger, batch.batch_id)
    assert event.detail == "object_replaced: the existing object was not a regular file; replaced"


def test_a_fresh_object_notes_nothing(ledger: Ledger, one_photo: Path, out_dir: Path) -> None:
    batch = accept(ledger, one_photo, out_dir)
    work(ledger)
    assert published_event(ledger, batch.batch_id).detail is None


# -- the version published at a name --------------------------------------------------------------


def recorded_version(ledger: Ledger, friendly_path: str) -> str | None:
    [(_, version)] = ledger.views.publishes_at(friendly_path)
    return version


def test_the_worker_records_the_version_it_published(ledger: Ledger, one_photo: Path, out_dir: Path) -> None:
    batch = accept(ledger, one_photo, out_dir)
    work(ledger)
    [item] = ledger.views.items(batch.batch_id)
    target = LocalOutputTarget(str(out_dir))
    version = recorded_version(ledger, item.friendly_path)
    assert version is not None and version == target.version_of(target.name_of(item.friendly_path))


def test_a_submit_reusing_outputs_records_the_versions_it_published(
    ledger: Ledger, one_photo: Path, out_dir: Path, tmp_path: Path
) -> None:
    accept(ledger, one_photo, out_dir)
    work(ledger)
    other = tmp_path / "other-out"
    batch = accept(ledger, one_photo, other)  # the same photo elsewhere: its object is reused at once
    [item] = ledger.views.items(batch.batch_id)
    assert item.state == "succeeded" and [e.dedup for e in ledger.views.events(batch.batch_id)] == [True]
    target = LocalOutputTarget(str(other))
    assert recorded_version(ledger, item.friendly_path) == target.version_of(target.name_of(item.friendly_path))


def test_a_restored_thumbnail_records_its_new_version(ledger: Ledger, one_photo: Path, out_dir: Path) -> None:
    batch = accept(ledger, one_photo, out_dir)
    work(ledger)
    [item] = ledger.views.items(batch.batch_id)
    before = recorded_version(ledger, item.friendly_path)
    Path(item.friendly_path).write_bytes(b"edited")
    report = reconcile(ledger, repair=True, restore_modified=True)
    assert [(f.kind, f.repaired) for f in report.findings] == [("thumbnail_modified", True)]
    target = LocalOutputTarget(str(out_dir))
    after = recorded_version(ledger, item.friendly_path)
    assert after != before and after == target.version_of(target.name_of(item.friendly_path))


def test_a_name_holding_the_recorded_version_is_replaced_and_a_copy_put_back_is_the_users(
    ledger: Ledger, one_photo: Path, out_dir: Path
) -> None:
    """ "Ours" follows the recorded version: a later batch with other settings replaces the thumbnail
    thumbctl published, but not a file the user put there, even one holding the very same bytes."""
    first = accept(ledger, one_photo, out_dir)
    work(ledger)
    [item] = ledger.views.items(first.batch_id)
    replaced = accept(ledger, one_photo, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=64, quality=60))
    work(ledger)
    [again] = ledger.views.items(replaced.batch_id)
    assert again.state == "succeeded" and again.friendly_path == item.friendly_path
    assert (again.result or {}).get("name_replaced") is True
    copy = Path(f"{again.friendly_path}.copy")
    copy.write_bytes(Path(again.friendly_path).read_bytes())
    os.replace(copy, again.friendly_path)  # the same bytes, put back by the user: another file
    third = accept(ledger, one_photo, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=64, quality=40))
    work(ledger)
    [taken] = ledger.views.items(third.batch_id)
    assert (taken.state, taken.error_code) == ("failed", "name_taken")


# -- a full disk under OUT ---------------------------------------------------------------------


#: The C library's mount(2) and umount2(2): the small disk is mounted by a system call of this process.
LIBC = ctypes.CDLL(None, use_errno=True)
MNT_DETACH = 2  # umount -l


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted at tmp_path/small (needs root and mount permission)."""
    folder = tmp_path / "small"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    if LIBC.mount(b"tmpfs", bytes(folder), b"tmpfs", 0, b"size=1m") != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {os.strerror(ctypes.get_errno())}")
    try:
        yield folder
    finally:
        assert LIBC.umount2(bytes(folder), MNT_DETACH) == 0, os.strerror(ctypes.get_errno())


def fill(disk: Path) -> None:
    """Write to ``disk`` until it is full (the filler is left in place)."""
    with open(disk / "filler.bin", "wb", buffering=0) as fh:
        block = b"\0" * 4096
        try:
            while True:
                fh.write(block)
        except OSError as exc:
            assert exc.errno == 28, exc  # ENOSPC
    with pytest.raises(OSError, match="No space left"), open(disk / "probe.bin", "wb", buffering=0) as fh:
        fh.write(b"x")
    os.unlink(disk / "probe.bin")


@pytest.mark.parametrize(
    "write",
    [
        lambda layout: fsafe.write_temp(layout.root, layout.tmp_dir, b"x" * 5000, "jpg"),
        lambda layout: write_json_atomically(layout, layout.batch_manifest_path("b_1"), {"items": ["x"] * 500}),
        lambda layout: write_page(layout, layout.batch_sheet_path("b_1"), "<p>x</p>" * 500, create_folder=True),
    ],
    ids=["temp", "manifest", "page"],
)
def test_a_write_that_meets_a_full_disk_leaves_no_temp_file(small_disk: Path, write) -> None:
    layout = LocalOutputTarget(str(small_disk / "out"))
    for folder in (".tmp", "batches"):
        os.makedirs(f"{layout.root}/{folder}")
    fill(small_disk)
    with pytest.raises(OSError, match="No space left"):
        write(layout)
    assert os.listdir(layout.tmp_dir) == [] and os.listdir(f"{layout.root}/batches") == []


def test_items_meeting_a_full_disk_fail_io_error_and_leave_no_temp_file(ledger: Ledger, small_disk: Path) -> None:
    photos = small_disk.parent / "photos"
    for n in range(4):
        make_image(photos / f"p{n}.png", (200, 100), "PNG", seed=n)
    out, store = small_disk / "out", small_disk / "store"
    batch = accept(ledger, photos, out, max_attempts=2, store_dir=store)
    fill(small_disk)
    work(ledger)
    items = ledger.views.items(batch.batch_id)
    assert [(i.state, i.error_code) for i in items] == [("failed", "attempts_exhausted")] * 4
    assert all(i.error_detail.startswith("io_error: No space left on device") for i in items)
    retried = [e for e in ledger.views.events(batch.batch_id) if e.to_state == "queued" and e.from_state == "running"]
    assert [e.error_code for e in retried] == ["io_error"] * 4  # transient: retried once, then failed
    assert not (out / ".tmp").exists() and os.listdir(store / ".tmp") == []


# -- the thumbnail's copy, made ahead of the publish transaction ------------------------------------


class AtCheckpoint(Faults):
    """Runs ``act`` when the worker reaches ``checkpoint`` (in this process, no fault injected)."""

    def __init__(self, checkpoint: str, act) -> None:
        super().__init__("")
        self.checkpoint, self.act = checkpoint, act

    def hit(self, checkpoint: str) -> None:
        if checkpoint == self.checkpoint:
            self.act()


def test_every_file_a_publish_makes_visible_is_fsynced_before_it_commits(
    ledger: Ledger, one_photo: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The object and the thumbnail's own file (copied ahead, outside the transaction) each reach
    the disk before the commit that records them: a power cut after the commit finds them whole."""
    synced: set[tuple[int, int]] = set()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        info = os.fstat(fd)
        synced.add((info.st_dev, info.st_ino))

    monkeypatch.setattr(os, "fsync", fsync)
    batch = accept(ledger, one_photo, out_dir)
    [item] = ledger.views.items(batch.batch_id)
    seen: dict[str, bool] = {}

    def before_commit() -> None:  # the name is published; the transaction has not committed
        for path in (item.object_path, item.friendly_path):
            info = os.lstat(path)
            seen[path] = (info.st_dev, info.st_ino) in synced

    config = WorkerConfig(str(ledger.path), backoff=Backoff(base=0.01, cap=0.02), poll_seconds=0.01)
    run_worker(config, threading.Event(), AtCheckpoint("name_published", before_commit))
    assert seen == {item.object_path: True, item.friendly_path: True}
    [item] = ledger.views.items(batch.batch_id)
    assert item.state == "succeeded" and is_copy_of(item.friendly_path, item.object_path)


def test_a_render_cancelled_before_its_publish_leaves_no_copy_or_temp_file(
    ledger: Ledger, one_photo: Path, out_dir: Path
) -> None:
    batch = accept(ledger, one_photo, out_dir)
    [item] = ledger.views.items(batch.batch_id)
    config = WorkerConfig(str(ledger.path), backoff=Backoff(base=0.01, cap=0.02), poll_seconds=0.01)
    run_worker(
        config, threading.Event(), AtCheckpoint("before_publish", lambda: ledger.intake.request_cancel(batch.batch_id))
    )
    [item] = ledger.views.items(batch.batch_id)
    assert item.state == "cancelled" and not os.path.lexists(item.friendly_path)
    assert not (out_dir / ".tmp").exists()
    store_tmp = Path(item.object_path).parent.parent.parent / ".tmp"
    assert not store_tmp.exists() or list(store_tmp.iterdir()) == []
