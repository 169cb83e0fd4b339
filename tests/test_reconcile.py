"""reconcile and gc on real ledgers and real outputs: each finding made for real, reported,
repaired (audited), gone on the next run, and the outputs restored by the next work."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_crash import Env
from test_ledger_contract import dead_owner

from thumbctl import Ledger
from thumbctl.core.errors import UsageError
from thumbctl.core.faults import Faults
from thumbctl.core.models import FINDING_KINDS, GcReport, ItemView
from thumbctl.core.proc import owner_id
from thumbctl.core.retries import Backoff
from thumbctl.engine.runner import write_batch_manifest
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.review.sheet import write_contact_sheet
from thumbctl.storage.fsafe import host_tag
from thumbctl.upkeep.gc import collect_garbage
from thumbctl.upkeep.reconcile import find_problems, reconcile

from harness import Thumbctl
from inprocess import json_here, render_here
from support import accept, check_invariants, is_copy_of, make_image, objects_in, tree_snapshot

DAY = 86400.0
OTHER_HOST_OWNER = "another-host:4242:777"  # never declared dead here: its leases only expire


class Clock:
    """Wall time moved by ``offset`` seconds: how the tests move time for the ledger."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def led(ledger_url: str, clock: Clock):
    """A fresh ledger on each backend (``[sqlite]``, ``[postgres]``): reconcile and gc work through
    the Ledger API only, so every test of them runs on both."""
    with Ledger(ledger_url, clock=clock) as ledger:
        yield ledger
        check_invariants(ledger)


def work(ledger: Ledger) -> None:
    config = WorkerConfig(str(ledger.path), backoff=Backoff(base=0.001, cap=0.001), poll_seconds=0.01)
    run_worker(config, threading.Event(), Faults(""))


def kinds(findings) -> list[str]:
    return [f.kind for f in findings]


def reconcile_events(ledger: Ledger, batch_id: str) -> list:
    return [e for e in ledger.views.events(batch_id) if e.detail and "reconcile" in e.detail]


def assert_found_repaired_then_clean(ledger: Ledger, kind: str, count: int) -> None:
    assert kind in FINDING_KINDS
    found = reconcile(ledger)
    assert kinds(found.findings) == [kind] * count and not found.clean
    assert not any(f.repaired for f in found.findings)
    fixed = reconcile(ledger, repair=True, delay_for=lambda attempt: 0.0)
    assert [(f.kind, f.repaired) for f in fixed.findings] == [(kind, True)] * count and fixed.clean
    again = reconcile(ledger)
    assert again.findings == () and again.clean


def assert_restored(ledger: Ledger, batch_id: str) -> None:
    work(ledger)
    view = ledger.views.batch(batch_id)
    assert view.state == "succeeded", view.counts
    for item in ledger.views.items(batch_id):
        assert is_copy_of(item.friendly_path, item.object_path)
    check_invariants(ledger)
    assert find_problems(ledger) == []


@pytest.fixture
def rendered(led: Ledger, photos: Path, out_dir: Path):
    batch = accept(led, photos, out_dir)
    work(led)
    assert led.views.batch(batch.batch_id).state == "succeeded"
    assert find_problems(led) == []
    return batch


# -- the outputs of succeeded items -------------------------------------------------------------


def delete_object(item: ItemView, other: ItemView) -> None:
    os.unlink(item.object_path)


def truncate_object(item: ItemView, other: ItemView) -> None:
    os.truncate(item.object_path, os.path.getsize(item.object_path) // 2)


def wrong_dimensions(item: ItemView, other: ItemView) -> None:
    make_image(Path(item.object_path), (31, 17), "JPEG", seed=9)


def undecodable(item: ItemView, other: ItemView) -> None:
    Path(item.object_path).write_bytes(b"\xff\xd8\xff\xe0" + b"not a picture" * 20)


def corrupted_in_place(item: ItemView, other: ItemView) -> None:
    """Bytes scrambled in the middle, same size, the modification time put back: only the
    change time (which no one can set) tells the file was written."""
    st = os.stat(item.object_path)
    with open(item.object_path, "r+b") as fh:
        fh.seek(st.st_size // 3)
        fh.write(b"\x00\xff" * (st.st_size // 6))
    os.utime(item.object_path, ns=(st.st_atime_ns, st.st_mtime_ns))


def delete_friendly_name(item: ItemView, other: ItemView) -> None:
    os.unlink(item.friendly_path)


@pytest.mark.parametrize(
    ("damage", "kind", "audited_as"),
    [
        (delete_object, "object_missing", "object_missing"),
        (truncate_object, "object_invalid", "object_invalid"),
        (wrong_dimensions, "object_invalid", "object_invalid"),
        (undecodable, "object_invalid", "object_invalid"),
        (corrupted_in_place, "object_invalid", "object_invalid"),
        (delete_friendly_name, "friendly_link_missing", "friendly_link_missing"),
    ],
)
def test_a_damaged_output_is_found_repaired_and_rendered_again(
    led: Ledger,
    rendered,
    damage: Callable[[ItemView, ItemView], None],
    kind: str,
    audited_as: str,
) -> None:
    items = led.views.items(rendered.batch_id)
    item, other = items[4], items[0]
    damage(item, other)
    [finding] = find_problems(led)
    assert (finding.batch_id, finding.item_id, finding.ratio) == (rendered.batch_id, item.item_id, item.ratio)
    assert_found_repaired_then_clean(led, kind, 1)
    [event] = reconcile_events(led, rendered.batch_id)
    assert (event.item_id, event.ratio, event.error_code) == (item.item_id, item.ratio, audited_as)
    assert_restored(led, rendered.batch_id)


def counts(report) -> tuple[int, int, int]:
    """Objects a reconcile checked, decoded, and found unchanged since they last decoded."""
    return report.objects_checked, report.objects_decoded, report.objects_unchanged


def test_reconcile_decodes_only_the_objects_changed_since_they_last_decoded(led: Ledger, rendered) -> None:
    objects = sorted({item.object_path for item in led.views.items(rendered.batch_id)})
    n = len(objects)  # the fixture's own reconcile decoded them all
    assert counts(reconcile(led)) == (n, 0, n)
    assert counts(reconcile(led, deep=True)) == (n, n, 0)
    os.utime(objects[1])  # any write, rename or relink changes a file's times
    assert counts(reconcile(led)) == (n, 1, n - 1)
    assert counts(reconcile(led)) == (n, 0, n)


def test_the_cache_of_sound_objects_is_forgotten_for_a_damaged_one(led: Ledger, rendered) -> None:
    item = led.views.items(rendered.batch_id)[0]
    assert item.object_path in led.upkeep.verified_objects()
    os.truncate(item.object_path, 10)
    assert kinds(reconcile(led).findings) == ["object_invalid"]
    assert item.object_path not in led.upkeep.verified_objects()
    assert kinds(reconcile(led).findings) == ["object_invalid"]  # still found: nothing trusts it now
    assert reconcile(led, repair=True, delay_for=lambda attempt: 0.0).clean
    assert_restored(led, rendered.batch_id)


def test_a_bad_object_is_requeued_with_a_fresh_attempt_budget(led: Ledger, rendered) -> None:
    item = led.views.items(rendered.batch_id)[2]
    os.unlink(item.object_path)
    reconcile(led, repair=True)
    requeued = next(i for i in led.views.items(rendered.batch_id) if (i.item_id, i.ratio) == (item.item_id, item.ratio))
    assert (requeued.state, requeued.attempt, requeued.error_code) == ("queued", 0, "object_missing")
    event = reconcile_events(led, rendered.batch_id)[-1]
    assert (event.from_state, event.to_state) == ("succeeded", "queued")


def test_a_bad_object_of_a_cancelled_batch_ends_cancelled(led: Ledger, photos: Path, out_dir: Path) -> None:
    batch = accept(led, photos, out_dir)
    claim = led.queue.claim(OTHER_HOST_OWNER)

    def publish_wrong_size() -> None:
        make_image(Path(claim.items[0].object_path), (1, 1), "JPEG")

    led.queue.publish(claim, claim.items[0], publish_wrong_size)
    led.intake.request_cancel(batch.batch_id)
    led.queue.cancel_if_requested(claim)
    report = reconcile(led, repair=True)  # wrong dimensions; nothing more is rendered for a cancelled batch
    assert [(f.kind, f.repaired) for f in report.findings] == [("object_invalid", True)]
    assert led.views.batch(batch.batch_id).state == "cancelled"
    assert led.views.batch(batch.batch_id).counts["succeeded"] == 0


def test_a_friendly_name_taken_over_by_a_newer_batch_is_not_a_finding(
    led: Ledger, clock: Clock, rendered, photos: Path, out_dir: Path
) -> None:
    make_image(photos / "garden.jpeg", (200, 320), "JPEG", seed=77)  # the photo changed
    clock.offset = 60
    newer = accept(led, photos, out_dir, key="second")
    work(led)
    garden = [i for i in led.views.items(newer.batch_id) if i.item_id == "garden.jpeg"]
    assert all(is_copy_of(i.friendly_path, i.object_path) for i in garden)
    assert find_problems(led) == []  # the old batch's garden names now rightly point at the new renders


# -- leases and cancels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "move", "kind"),
    [
        (OTHER_HOST_OWNER, 31.0, "expired_lease"),
        (None, 0.0, "dead_worker_lease"),
    ],
)
def test_a_stalled_lease_is_rescued_and_the_batch_finishes(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path, owner: str | None, move: float, kind: str
) -> None:
    batch = accept(led, photos, out_dir)
    clock.offset = -move  # claimed `move` seconds ago
    claim = led.queue.claim(owner or dead_owner(), lease_seconds=30)
    clock.offset = 0
    assert_found_repaired_then_clean(led, kind, len(claim.items))
    rescued = reconcile_events(led, batch.batch_id)
    assert [(e.from_state, e.to_state, e.error_code) for e in rescued] == [
        ("running", "queued", "worker_crashed")
    ] * len(claim.items)
    assert_restored(led, batch.batch_id)


def test_a_live_lease_is_never_a_finding(led: Ledger, clock: Clock, photos: Path, out_dir: Path) -> None:
    accept(led, photos, out_dir)
    clock.offset = -29
    led.queue.claim(owner_id(), lease_seconds=30)  # this very process: alive, and 1 s of lease left
    clock.offset = 0
    assert reconcile(led, repair=True).findings == ()
    assert led.queue.queue_state().running == 3


def test_a_lease_renewed_after_the_finding_is_left_alone(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path
) -> None:
    accept(led, photos, out_dir)
    clock.offset = -31
    claim = led.queue.claim(OTHER_HOST_OWNER, lease_seconds=30)
    clock.offset = 0
    stale = find_problems(led)
    assert kinds(stale) == ["expired_lease"] * 3
    led.queue.heartbeat(claim.token, 30)  # the worker was only slow: its heartbeat lands first
    report = reconcile(led, repair=True)
    assert report.findings == ()
    row = claim.items[0].row
    assert led.upkeep.rescue_stalled(row, claim.token, lambda owner: False, lambda attempt: 0.0) is None
    assert led.queue.queue_state().running == 3


def test_a_cancel_whose_claims_stopped_is_finalized(led: Ledger, clock: Clock, photos: Path, out_dir: Path) -> None:
    batch = accept(led, photos, out_dir)
    claim = led.queue.claim(OTHER_HOST_OWNER, lease_seconds=30)
    led.intake.request_cancel(batch.batch_id)
    assert led.views.batch(batch.batch_id).state == "cancel_requested"
    assert find_problems(led) == []  # the claim may still observe the cancel itself
    clock.offset = 31  # its lease runs out
    assert_found_repaired_then_clean(led, "cancel_not_finalized", len(claim.items))
    assert led.views.batch(batch.batch_id).state == "cancelled"
    finalized = reconcile_events(led, batch.batch_id)
    assert [(e.from_state, e.to_state) for e in finalized] == [("running", "cancelled")] * len(claim.items)
    work(led)
    assert led.views.batch(batch.batch_id).state == "cancelled"


# -- files nobody accounts for ---------------------------------------------------------------------


def temp_path(out_dir: Path, name: str) -> Path:
    path = out_dir / ".tmp" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"half a thumbnail")
    return path


def test_a_temp_file_of_a_dead_writer_goes_at_once(led: Ledger, rendered, out_dir: Path) -> None:
    _, pid, ticks = dead_owner().rsplit(":", 2)
    temp = temp_path(out_dir, f"{pid}-{ticks}-{host_tag()}-{'a' * 12}.jpg")
    assert_found_repaired_then_clean(led, "stale_temp_file", 1)
    assert not temp.exists()
    [event] = reconcile_events(led, rendered.batch_id)
    assert (event.item_id, event.to_state, event.error_code) == (None, "removed", "stale_temp_file")
    assert str(temp) in event.detail
    assert_restored(led, rendered.batch_id)


@pytest.mark.parametrize(
    "name",
    [
        f"{os.getpid()}-{{ticks}}-{{host}}-{'b' * 12}.jpg",  # this live process
        "12345-0123456789ab.jpg",  # the older scheme: writer unknown
        f"1-1-{'0' * 8}-{'c' * 12}.jpg",  # another host
    ],
    ids=["this-process", "older-scheme", "another-host"],  # the same in every test process (xdist)
)
def test_other_temp_files_go_only_after_the_grace_period(
    led: Ledger, clock: Clock, rendered, out_dir: Path, name: str
) -> None:
    live = owner_id().rsplit(":", 1)[1]
    temp = temp_path(out_dir, name.format(ticks=live, host=host_tag()))
    assert reconcile(led, repair=True).findings == ()
    assert temp.exists()
    clock.offset = 3601
    assert_found_repaired_then_clean(led, "stale_temp_file", 1)
    assert not temp.exists()


def test_an_orphan_object_is_reported_and_left_for_gc(led: Ledger, rendered, store_dir: Path) -> None:
    source = led.views.items(rendered.batch_id)[0].object_path
    orphan = store_dir / "objects" / "ff" / ("f" * 64 + ".jpg")
    orphan.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, orphan)
    for _ in range(2):
        report = reconcile(led, repair=True)
        assert [(f.kind, f.path, f.repaired) for f in report.findings] == [("orphan_object", str(orphan), False)]
        assert not report.clean
    size = orphan.stat().st_size
    gc = collect_garbage(led, 30 * DAY)
    assert (gc.expired_batches, gc.objects_removed, gc.bytes_reclaimed) == ((), 1, size)
    assert not orphan.exists()
    assert reconcile(led).clean
    assert_restored(led, rendered.batch_id)


# -- gc -------------------------------------------------------------------------------------------


def thumbnails_in(out_dir: Path) -> dict[str, str]:
    """Every file of OUT but its batch documents: the thumbnails, with their bytes' digests."""
    snapshot = tree_snapshot(out_dir)
    return {name: v for name, v in snapshot.items() if not name.startswith(("batches", ".")) and " " not in v}


def test_gc_keeps_every_published_thumbnail_and_the_objects_their_names_reference(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path, store_dir: Path
) -> None:
    clock.offset = -80 * DAY
    first = accept(led, photos, out_dir, key="first")
    work(led)  # workers publish at real time: first's last change is now
    clock.offset = -40 * DAY
    second = accept(led, photos, out_dir, key="second")  # the same photos, all reused: every object shared
    for batch_id in (first.batch_id, second.batch_id):
        write_batch_manifest(led, led.views.batch(batch_id))
        write_contact_sheet(led, batch_id)
    assert led.views.batch(second.batch_id).counts["succeeded"] == 12
    shared = objects_in(store_dir)
    assert len(shared) == 12
    assert {i.object_path for i in led.views.items(first.batch_id)} == {str(p) for p in shared}

    clock.offset = 0  # first finished just now, second 40 days ago
    dry = collect_garbage(led, 30 * DAY, dry_run=True)
    assert (dry.expired_batches, dry.objects_removed, dry.manifests_removed) == ((second.batch_id,), 0, 1)
    assert objects_in(store_dir) == shared and led.views.events(second.batch_id)[-1].to_state != "expired"

    report = collect_garbage(led, 30 * DAY)
    assert report.expired_batches == (second.batch_id,)
    assert (report.objects_removed, report.manifests_removed) == (0, 1)
    assert objects_in(store_dir) == shared  # first still references every one of them
    assert report.sheets_removed == 1
    assert not Path(led.views.batch(second.batch_id).manifest_path).exists()
    assert not (out_dir / "batches" / f"{second.batch_id}.html").exists()
    assert Path(led.views.batch(first.batch_id).manifest_path).exists()
    assert (out_dir / "batches" / f"{first.batch_id}.html").exists()
    expired = led.views.events(second.batch_id)[-1]
    assert (expired.item_id, expired.to_state) == (None, "expired")
    assert find_problems(led) == []

    clock.offset = 31 * DAY  # every batch is past the age now: the cron line `gc --older-than 30d`
    documents = [Path(led.views.batch(first.batch_id).manifest_path), out_dir / "batches" / f"{first.batch_id}.html"]
    thumbnails = thumbnails_in(out_dir)
    assert len(thumbnails) == 12
    freed = sum(p.stat().st_size for p in documents)
    dry = collect_garbage(led, 30 * DAY, dry_run=True)
    assert dry == GcReport(True, (first.batch_id,), 0, 0, 1, freed, sheets_removed=1)
    report = collect_garbage(led, 30 * DAY)
    assert report == GcReport(False, (first.batch_id,), 0, 0, 1, freed, sheets_removed=1)
    assert thumbnails_in(out_dir) == thumbnails  # every thumbnail byte for byte, though every batch expired
    assert objects_in(store_dir) == shared  # their names' records reference them
    assert [p for p in out_dir.rglob("*") if p.is_file() and "batches" in p.parts] == []
    assert find_problems(led) == []
    assert collect_garbage(led, 30 * DAY) == GcReport(False, (), 0, 0, 0, 0)


def rendered_then_changed(led: Ledger, clock: Clock, photos: Path, out_dir: Path):
    """Two batches of ``photos``, the second after ``garden.jpeg`` changed: its three names now show
    new objects and the old ones are referenced only by the first batch. Both finished 31 days ago."""
    first = accept(led, photos, out_dir, key="first")
    work(led)
    make_image(photos / "garden.jpeg", (200, 320), "JPEG", seed=7)
    second = accept(led, photos, out_dir, key="second")
    work(led)
    assert led.views.batch(second.batch_id).replaced == 3
    clock.offset = 31 * DAY
    return first, second


def test_gc_reclaims_an_object_whose_name_a_newer_render_took(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path, store_dir: Path
) -> None:
    first, second = rendered_then_changed(led, clock, photos, out_dir)
    old = {Path(i.object_path) for i in led.views.items(first.batch_id) if i.item_id == "garden.jpeg"}
    assert len(old) == 3 and old <= objects_in(store_dir) and len(objects_in(store_dir)) == 15
    thumbnails = thumbnails_in(out_dir)
    previews = [Path(f"{str(p)[: -len(p.suffix)]}.preview.jpg") for p in old]
    freed = sum(p.stat().st_size for p in [*old, *previews] if p.exists())
    dry = collect_garbage(led, 30 * DAY, dry_run=True)
    assert dry.expired_batches == (first.batch_id, second.batch_id)
    assert (dry.objects_removed, dry.bytes_reclaimed) == (3, freed)
    report = collect_garbage(led, 30 * DAY)
    assert (report.expired_batches, report.objects_removed, report.bytes_reclaimed) == (dry.expired_batches, 3, freed)
    assert objects_in(store_dir) == {Path(i.object_path) for i in led.views.items(second.batch_id)}
    assert thumbnails_in(out_dir) == thumbnails
    assert find_problems(led) == []


def test_a_name_stays_thumbctls_after_the_batch_that_published_it_expired(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path
) -> None:
    first, second = rendered_then_changed(led, clock, photos, out_dir)
    collect_garbage(led, 30 * DAY)
    make_image(photos / "garden.jpeg", (200, 320), "JPEG", seed=9)  # changed again: its names are rendered anew
    third = accept(led, photos, out_dir)
    work(led)
    view = led.views.batch(third.batch_id)
    assert (view.state, view.replaced, view.counts["failed"]) == ("succeeded", 3, 0)  # no name_taken
    for item in led.views.items(third.batch_id):
        assert is_copy_of(item.friendly_path, item.object_path)


def test_reconcile_restores_a_name_whose_batch_expired(led: Ledger, clock: Clock, photos: Path, out_dir: Path) -> None:
    batch = expired_after_30_days(led, clock, photos, out_dir)
    gone, edited = (Path(i.friendly_path) for i in led.views.items(batch.batch_id)[:2])
    gone.unlink()
    edited.write_bytes(b"edited")
    found = reconcile(led)
    assert sorted((f.kind, f.batch_id, f.path) for f in found.findings) == sorted(
        [("friendly_link_missing", batch.batch_id, str(gone)), ("thumbnail_modified", batch.batch_id, str(edited))]
    )
    fixed = reconcile(led, repair=True, restore_modified=True)  # the edit put back on request
    assert all(f.repaired for f in fixed.findings) and fixed.clean
    assert find_problems(led) == []
    for item in led.views.items(batch.batch_id):
        assert is_copy_of(item.friendly_path, item.object_path)


def test_gc_never_expires_a_batch_with_live_items(led: Ledger, clock: Clock, photos: Path, out_dir: Path) -> None:
    clock.offset = -40 * DAY
    batch = accept(led, photos, out_dir)
    clock.offset = 0
    report = collect_garbage(led, 30 * DAY)
    assert report.expired_batches == () and led.views.batch(batch.batch_id).counts["queued"] == 12


def expired_after_30_days(led: Ledger, clock: Clock, photos: Path, out_dir: Path):
    """A batch accepted 40 days ago, rendered, then expired by ``gc --older-than 30d``."""
    clock.offset = -40 * DAY
    batch = accept(led, photos, out_dir)
    clock.offset = 0
    work(led)
    clock.offset = 31 * DAY
    assert collect_garbage(led, 30 * DAY).expired_batches == (batch.batch_id,)
    return batch


def test_an_expired_batch_releases_its_key_so_the_same_request_makes_a_new_batch(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path
) -> None:
    first = expired_after_30_days(led, clock, photos, out_dir)
    again = accept(led, photos, out_dir)
    assert again.batch_id != first.batch_id and not again.replayed
    assert again.idempotency_key == first.idempotency_key
    assert again.counts["succeeded"] == 12  # the names kept their objects: every output is reused
    assert led.views.batch(first.batch_id).idempotency_key == f"{first.idempotency_key}#expired:{first.batch_id}"


def test_an_expired_batch_says_so_and_cannot_be_retried(led: Ledger, clock: Clock, photos: Path, out_dir: Path):
    (photos / "notes.jpg").write_text("not a photo")
    batch = expired_after_30_days(led, clock, photos, out_dir)
    view = led.views.batch(batch.batch_id)
    assert view.expired_at is not None and view.to_json()["expired_at"] == view.expired_at
    with pytest.raises(UsageError, match="expired"):  # an expired batch is final: submit again instead
        led.queue.retry_failed(batch.batch_id)


# -- real processes: a crash between link and commit, and reconcile beside a live pool ---------------

FINDING_FIELDS = {"kind", "batch_id", "item_id", "ratio", "path", "detail", "repaired"}


@pytest.fixture
def env(tmp_path: Path) -> Env:
    """Real processes against a ledger and photos in tmp_path (see tests/test_crash.py)."""
    return Env(tmp_path)


def live_rows(db: Path) -> tuple[list[tuple], int]:
    """What a worker's claim consists of (lease expiry aside: heartbeats move it), and the last event."""
    with sqlite3.connect(db) as raw:
        items = raw.execute("SELECT id, state, lease_owner, lease_token, attempt, updated_at FROM items").fetchall()
        last = raw.execute("SELECT max(seq) FROM events").fetchone()[0]
    return items, last


def test_a_crash_between_link_and_commit_is_found_repaired_and_finished(env: Env) -> None:
    assert env.invoke("submit", str(env.photos), "--out", str(env.out), "--detach").returncode == 0
    proc = env.start("work", "-w", "1", fault="pause:after_link")
    env.paused("after_link")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    batch_id = env.batch()["batch_id"]
    assert env.batch()["counts"]["running"] == 3 and len(objects_in(env.store)) == 1  # stored, never committed

    found = env.invoke("reconcile", "--json")
    assert found.returncode == 1, found.stderr
    doc = json.loads(found.stdout)
    assert doc["clean"] is False and all(set(f) == FINDING_FIELDS for f in doc["findings"])
    # the thumbnail's own copy, made in OUT/.tmp ahead of the publish, is a dead writer's temp file
    assert [(f["kind"], f["batch_id"], f["repaired"]) for f in doc["findings"]] == [
        ("dead_worker_lease", batch_id, False)
    ] * 3 + [("stale_temp_file", batch_id, False)]
    fixed = env.invoke("reconcile", "--repair", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert [(f["kind"], f["repaired"]) for f in json.loads(fixed.stdout)["findings"]] == [
        ("dead_worker_lease", True)
    ] * 3 + [("stale_temp_file", True)]
    assert not (env.out / ".tmp").exists() or list((env.out / ".tmp").iterdir()) == []
    again = env.invoke("reconcile", "--json")
    assert (again.returncode, json.loads(again.stdout)["findings"]) == (0, [])
    rescued = [e for e in env.events(batch_id) if e["error_code"] == "worker_crashed"]
    assert len(rescued) == 3 and all(e["to_state"] == "queued" for e in rescued)

    render_here(env.db, batch_id)  # the next work, in this process
    batch = env.batch()
    assert batch["state"] == "succeeded" and batch["counts"]["succeeded"] == 9
    assert len(objects_in(env.store)) == 9
    assert env.invoke("reconcile").returncode == 0
    env.check()


def test_reconcile_beside_a_live_worker_pool_changes_nothing_live(env: Env) -> None:
    assert env.invoke("submit", str(env.photos), "--out", str(env.out), "--detach").returncode == 0
    proc = env.start("work", "--until-idle", "-w", "2", fault="pause:before_publish")
    env.paused("before_publish", count=2)
    before = live_rows(env.db)
    temps = sorted((env.store / ".tmp").iterdir())  # the objects being staged
    assert len(temps) == 2 and sum(row[1] == "running" for row in before[0]) == 6

    result = env.invoke("reconcile", "--repair", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "findings": [],
        "clean": True,
        "objects": {"checked": 0, "decoded": 0, "unchanged": 0, "matched": 0},
    }
    assert live_rows(env.db) == before
    assert sorted((env.store / ".tmp").iterdir()) == temps

    env.release()
    assert proc.wait(timeout=60) == 0
    assert env.batch()["state"] == "succeeded"
    assert env.invoke("reconcile").returncode == 0
    env.check()


def test_every_finding_kind_is_documented_in_the_operations_guide() -> None:
    guide = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    table = [line.split("|")[1].strip(" `") for line in guide.splitlines() if line.startswith("| `")]
    assert [kind for kind in table if kind in FINDING_KINDS] == list(FINDING_KINDS)


def refuse(*args: object, **kwargs: object) -> None:
    raise PermissionError(13, "Permission denied")


def test_a_repair_the_filesystem_refuses_is_reported_unrepaired(
    led: Ledger, photos: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = accept(led, photos, out_dir)
    work(led)
    item = led.views.items(batch.batch_id)[0]
    os.unlink(item.friendly_path)
    monkeypatch.setattr("thumbctl.publishing.publisher.restore_at", refuse)
    (finding,) = reconcile(led, repair=True).findings
    assert (finding.kind, finding.repaired) == ("friendly_link_missing", False)
    assert finding.detail.endswith("repair failed: Permission denied")
    monkeypatch.undo()
    assert [f.repaired for f in reconcile(led, repair=True).findings] == [True]


def test_gc_reports_files_it_could_not_remove_and_keeps_going(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = rendered_then_changed(led, clock, photos, out_dir)
    write_batch_manifest(led, led.views.batch(first.batch_id))
    before = objects_in(store_dir)
    monkeypatch.setattr("thumbctl.storage.objects.remove_object", refuse)
    report = collect_garbage(led, 30 * DAY)
    assert report.expired_batches == (first.batch_id, second.batch_id) and report.objects_removed == 0
    assert len(report.errors) == 3 and all(e.endswith(": Permission denied") for e in report.errors)
    assert report.manifests_removed == 1  # the rest went on
    assert objects_in(store_dir) == before


# -- symlinks inside OUT --------------------------------------------------------------------------


def move_out_behind_a_symlink(out_dir: Path, name: str, victim: Path) -> None:
    """The user moved OUT/<name> elsewhere and left a symlink to it: its files are no longer OUT's."""
    os.rename(out_dir / name, victim)
    (out_dir / name).symlink_to(victim, target_is_directory=True)


def test_reconcile_never_relinks_through_a_symlinked_folder(
    led: Ledger, rendered, out_dir: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    move_out_behind_a_symlink(out_dir, "rooms", victim)
    (victim / "living.1x1.jpg").unlink()
    (victim / "living.1x1.jpg").write_text("precious user data")  # the QA case: a user's file there
    (victim / "kitchen.4x3.jpg").unlink()
    before = tree_snapshot(victim)
    report = reconcile(led, repair=True, restore_modified=True)
    assert sorted((f.kind, f.item_id, f.ratio, f.repaired) for f in report.findings) == [
        ("friendly_link_missing", "rooms/kitchen.webp", "4:3", False),
        ("thumbnail_modified", "rooms/living.jpg", "1:1", False),
    ]
    assert all(f"{out_dir / 'rooms'} is a symlink" in f.detail for f in report.findings)
    assert tree_snapshot(victim) == before
    assert reconcile_events(led, rendered.batch_id) == []


def test_gc_never_removes_through_a_symlinked_folder(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path, store_dir: Path, tmp_path: Path
) -> None:
    batch = accept(led, photos, out_dir)
    work(led)
    write_batch_manifest(led, led.views.batch(batch.batch_id))
    move_out_behind_a_symlink(out_dir, "rooms", tmp_path / "rooms-elsewhere")
    move_out_behind_a_symlink(out_dir, "batches", tmp_path / "batches-elsewhere")
    (tmp_path / "tmp-elsewhere").mkdir()
    stale = tmp_path / "tmp-elsewhere" / "4242-0123456789ab.jpg"  # named like an old temp file, long stale
    stale.write_bytes(b"user data")
    os.utime(stale, (0, 0))
    assert not (out_dir / ".tmp").exists()  # OUT/.tmp exists only while files are being written
    (out_dir / ".tmp").symlink_to(tmp_path / "tmp-elsewhere", target_is_directory=True)
    victims = ("rooms-elsewhere", "batches-elsewhere", "tmp-elsewhere")
    before = {name: tree_snapshot(tmp_path / name) for name in victims}
    clock.offset = 31 * DAY
    report = collect_garbage(led, 30 * DAY)
    assert {name: tree_snapshot(tmp_path / name) for name in victims} == before
    assert (report.objects_removed, report.temp_files_removed, report.manifests_removed) == (0, 0, 0)
    assert len(report.errors) == 1 and "is a symlink" in report.errors[0]  # the manifest in batches/
    assert len(objects_in(store_dir)) == 12  # every name's record references its object


def test_an_object_that_is_a_symlink_out_of_out_is_invalid_never_linked_and_gc_removes_only_the_link(
    led: Ledger, clock: Clock, photos: Path, out_dir: Path, store_dir: Path, tmp_path: Path
) -> None:
    batch = accept(led, photos, out_dir)
    work(led)
    victim = tmp_path / "victim"
    victim.mkdir()
    item = led.views.items(batch.batch_id)[0]
    (victim / "same.jpg").write_bytes(Path(item.object_path).read_bytes())
    os.unlink(item.object_path)
    os.symlink(victim / "same.jpg", item.object_path)
    os.unlink(item.friendly_path)
    before = tree_snapshot(victim)

    kinds = {(f.kind, f.path) for f in find_problems(led)}
    assert ("object_invalid", item.object_path) in kinds
    report = reconcile(led, repair=True)
    assert all(f.repaired for f in report.findings if f.kind == "object_invalid")
    work(led)  # re-rendered: a real file replaces the symlink
    assert not os.path.islink(item.object_path) and os.path.isfile(item.object_path)
    assert not os.path.islink(item.friendly_path) and is_copy_of(item.friendly_path, item.object_path)
    assert find_problems(led) == []

    orphan = store_dir / "objects" / "ab" / ("ab" * 32 + ".jpg")
    orphan.parent.mkdir(exist_ok=True)
    os.symlink(victim / "same.jpg", orphan)
    assert ("orphan_object", str(orphan)) in {(f.kind, f.path) for f in find_problems(led)}
    collect_garbage(led, 30 * DAY)
    assert not os.path.lexists(orphan)
    assert tree_snapshot(victim) == before  # nothing outside OUT changed


def test_gc_with_no_age_at_all_leaves_every_thumbnail_and_users_file_as_it_was(
    led: Ledger, rendered, out_dir: Path, store_dir: Path
) -> None:
    (out_dir / "rooms" / "notes.txt").write_text("mine")
    thumbnails, objects = thumbnails_in(out_dir), objects_in(store_dir)
    report = collect_garbage(led, -60.0)  # `gc --older-than 0s`: every finished batch expires
    assert report.expired_batches == (rendered.batch_id,) and report.objects_removed == 0
    assert thumbnails_in(out_dir) == thumbnails and len(thumbnails) == 13
    assert objects_in(store_dir) == objects


def test_a_thumbnail_published_before_a_crash_lost_the_commit_is_found_and_recorded(
    ledger_url: str, tmp_path: Path
) -> None:
    """Crash after the name is published, before the commit, with no attempt left: the item is
    ``failed`` while its thumbnail (its object's exact bytes) is in OUT. Reconcile names it, the
    repair queues it again, and ``work`` records the name as it is: no file is rewritten, none lost."""
    photos, out, store = tmp_path / "photos", tmp_path / "out", tmp_path / "store"
    make_image(photos / "p.png", (64, 48), "PNG", seed=3)
    cli = Thumbctl(ledger_url, store=store, faults=tmp_path / "faults")
    submitted = cli.run(
        "submit",
        photos,
        "--out",
        out,
        "-r",
        "1:1",
        "--size",
        "24",
        "--attempts",
        "1",
        "-w",
        "1",
        "--json",
        fault="crash:name_published:once",
    )
    assert submitted.returncode == 1, submitted.stderr
    batch_id = json.loads(submitted.stdout)["batch_id"]
    status = cli.json("status", batch_id, "--items", codes=None)
    (item,) = status["items"]
    assert (item["state"], item["error_code"]) == ("failed", "worker_crashed")
    thumbnail = Path(item["friendly_path"])
    assert is_copy_of(thumbnail, item["object_path"])
    before = thumbnail.read_bytes()

    found = json_here(cli, "reconcile", codes=(1,))
    assert [(f["kind"], f["item_id"], f["path"], f["repaired"]) for f in found["findings"]] == [
        ("unrecorded_thumbnail", "p.png", str(thumbnail), False)
    ]
    repaired = json_here(cli, "reconcile", "--repair")
    assert [(f["kind"], f["repaired"]) for f in repaired["findings"]] == [("unrecorded_thumbnail", True)]
    render_here(ledger_url, batch_id)  # the next work, in this process
    assert cli.json("status", batch_id)["state"] == "succeeded"
    assert thumbnail.read_bytes() == before and is_copy_of(thumbnail, item["object_path"])
    assert json_here(cli, "reconcile")["findings"] == []
