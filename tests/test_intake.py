from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import struct
import threading
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from thumbctl import IdempotencyConflict, Ledger, Limits, Profile, RejectedError, SubmitOptions
from thumbctl.core import profile as settings
from thumbctl.core.admission import retry_unavailable
from thumbctl.core.errors import AdmissionRefused, Interrupted, ItemFailure, UsageError
from thumbctl.core.faults import Faults
from thumbctl.core.profile import Ratio
from thumbctl.core.retries import Backoff
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.intake.acceptance import submit
from thumbctl.intake.inspection import inspect_source
from thumbctl.intake.submission import prepare_submission
from thumbctl.sources.scan import SourceFolder
from thumbctl.upkeep.gc import collect_garbage
from thumbctl.upkeep.reconcile import find_problems

from support import check_invariants, is_copy_of, make_image, tree_snapshot


def run(ledger: Ledger, source: Path, out: Path, **kwargs):
    """Prepare and submit like the CLI does; check invariant 1 afterwards."""
    limits = kwargs.pop("limits", Limits())
    options = SubmitOptions(out_dir=out, limits=limits, **kwargs)
    prepared = prepare_submission(source, options, ledger)
    batch = submit(ledger, prepared, limits)
    check_invariants(ledger)
    return batch, prepared


def table_snapshot(ledger: Ledger) -> dict[str, list]:
    with sqlite3.connect(ledger.path) as raw:
        return {t: raw.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("batches", "items", "events")}


def bomb_png(path: Path) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 30_000, 30_000, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 99)) + chunk(b"IEND", b"")
    )


# -- directory submissions ------------------------------------------------------


def test_directory_submit_records_one_item_per_source_and_ratio(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    batch, prepared = run(ledger, photos, out_dir)
    assert (batch.total, batch.state, batch.replayed) == (12, "queued", False)
    assert batch.counts == {"queued": 12, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
    assert prepared.report.sources == 4 and prepared.report.read == 4
    items = ledger.views.items(batch.batch_id)
    assert {i.item_id for i in items} == {"coffee.png", "garden.jpeg", "rooms/kitchen.webp", "rooms/living.jpg"}
    living = {i.ratio: i for i in items if i.item_id == "rooms/living.jpg"}
    assert living["16:9"].friendly_path == str(out_dir / "rooms" / "living.16x9.jpg")
    key = living["1:1"].derivative_key
    store = out_dir.parent / "ledger.store"  # the default: beside the ledger, outside OUT
    assert living["1:1"].object_path == str(store / "objects" / key[:2] / f"{key}.jpg")
    assert len({i.derivative_key for i in items}) == 12
    assert all(Path(i.object_path).is_relative_to(store) for i in items)


def test_bad_files_become_failed_items_and_never_shrink_the_total(
    ledger: Ledger, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    (photos / "readme.jpg").write_text("I am text")
    (photos / "empty.png").write_bytes(b"")
    (photos / "cut.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 40)
    bomb_png(photos / "bomb.png")
    make_image(photos / "huge-file.bmp", (500, 500), "BMP")
    os.symlink(tmp_path / "elsewhere.jpg", photos / "dangling.jpg")
    make_image(tmp_path / "outside.jpg", (8, 8), "JPEG")
    os.symlink(tmp_path / "outside.jpg", photos / "escape.jpg")
    limits = Limits(max_bytes=600_000)
    batch, _ = run(ledger, photos, out_dir, limits=limits, profile=Profile(ratios=(Ratio(1, 1), Ratio(3, 2))))
    assert batch.total == 11 * 2
    assert batch.counts["queued"] == 4 * 2 and batch.counts["failed"] == 7 * 2
    codes = {(f.item_id, f.error_code) for f in batch.failures}
    assert codes == {
        ("readme.jpg", "unsupported_format"),
        ("empty.png", "unsupported_format"),
        ("cut.jpg", "corrupt_image"),
        ("bomb.png", "too_many_pixels"),
        ("huge-file.bmp", "too_large"),
        ("dangling.jpg", "source_missing"),
        ("escape.jpg", "path_outside_root"),
    }
    failed = ledger.views.items(batch.batch_id, state="failed")
    assert all(i.object_path is None and i.friendly_path is None for i in failed)
    assert [e.to_state for e in ledger.views.events(batch.batch_id, item_id="bomb.png")] == ["failed", "failed"]


@pytest.fixture
def one_cpu():
    """This process (and the threads it starts) limited to one CPU, as under ``taskset -c 0``."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def test_many_sources_read_in_two_threads_make_the_same_request_as_one_thread(
    photos: Path, out_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With two CPUs and enough sources, intake reads and hashes them in two threads: the
    request, each source's outcome, the counts and the stat cache are the same as read in one."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to read in two threads")
    for n in range(24):
        make_image(photos / "many" / f"p{n:02d}.jpg", (40 + n, 30), "JPEG", seed=n)
    (photos / "readme.jpg").write_text("I am text")
    os.symlink(tmp_path / "elsewhere.jpg", photos / "dangling.jpg")
    results = {}
    for case in ("two threads", "one thread"):
        if case == "one thread":
            request.getfixturevalue("one_cpu")
        with Ledger(tmp_path / f"{case}.db") as ledger:
            batch, prepared = run(ledger, photos, out_dir)
            report = prepared.report
            failures = sorted((f.item_id, f.error_code) for f in batch.failures)
            results[case] = (prepared.batch.request_digest, failures, report.read, report.failed_sources)
            again = prepare_submission(photos, SubmitOptions(out_dir=out_dir), ledger).report
            assert (again.cached, again.read) == (28, 0)  # every readable source is in the stat cache
    assert results["two threads"] == results["one thread"]
    failures = [("dangling.jpg", "source_missing")] * 3 + [("readme.jpg", "unsupported_format")] * 3
    assert results["one thread"][1:] == (failures, 28, 2)


def copy_to_bytes_name(source: Path, folder: Path, name: bytes) -> None:
    """Copy ``source`` into ``folder`` under a name given as bytes (it need not be UTF-8)."""
    with open(os.path.join(os.fsencode(folder), name), "wb") as fh:
        fh.write(source.read_bytes())


#: File names no item id can hold, the id each gets and the reason in its detail.
ODD_NAMES = [
    (b"bad\xffname.jpg", ".unsafe/bad%FFname.jpg", "bad%FFname.jpg", "is not valid UTF-8"),
    (b"tab\tname.jpg", ".unsafe/tab%09name.jpg", "tab%09name.jpg", "contains control characters"),
    (b"new\nline.jpg", ".unsafe/new%0Aline.jpg", "new%0Aline.jpg", "contains control characters"),
    (b"back\\slash.jpg", ".unsafe/back%5Cslash.jpg", "back%5Cslash.jpg", "contains a backslash"),
]


def test_files_whose_names_cannot_be_ids_fail_alone_and_the_rest_is_queued(
    ledger: Ledger, photos: Path, out_dir: Path
) -> None:
    for name, *_ in ODD_NAMES:
        copy_to_bytes_name(photos / "coffee.png", photos, name)
    shutil.copy(photos / "coffee.png", photos / "bad%FFname.jpg")  # a usable name that looks like an escape
    profile = Profile(ratios=(Ratio(1, 1), Ratio(4, 3)))
    batch, prepared = run(ledger, photos, out_dir, profile=profile)
    assert (batch.total, batch.counts["queued"], batch.counts["failed"]) == (18, 10, 8)
    assert prepared.report.sources == 9 and prepared.report.read == 5
    failed = {(i.item_id, i.ratio): i for i in ledger.views.items(batch.batch_id, state="failed")}
    assert set(failed) == {(item_id, r) for _, item_id, _, _ in ODD_NAMES for r in ("1:1", "4:3")}
    for name, item_id, shown, reason in ODD_NAMES:
        item = failed[(item_id, "1:1")]
        source = f"{photos}/{name.decode()}" if name.isascii() else f"{photos}/{shown}"  # the true path when text
        assert (item.error_code, item.source) == ("unsafe_name", source)
        assert (item.derivative_key, item.object_path, item.friendly_path) == (None, None, None)
        detail = next(f.detail for f in batch.failures if f.item_id == item_id)
        assert detail == f"the name {shown} (written with %XX escapes) {reason}: no item id can hold it"
    queued = {i.item_id for i in ledger.views.items(batch.batch_id, state="queued")}
    assert queued == {"bad%FFname.jpg", "coffee.png", "garden.jpeg", "rooms/kitchen.webp", "rooms/living.jpg"}


def test_a_folder_with_odd_names_replays_as_the_same_request(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    copy_to_bytes_name(photos / "coffee.png", photos, b"bad\xffname.jpg")
    first, _ = run(ledger, photos, out_dir)
    again, _ = run(ledger, photos, out_dir)
    assert again.replayed and again.batch_id == first.batch_id


def test_a_source_folder_whose_path_is_not_utf8_is_a_usage_error(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    odd = os.path.join(os.fsencode(photos.parent), b"photos-\xff")
    os.rename(photos, odd)
    with pytest.raises(UsageError) as info:
        run(ledger, Path(os.fsdecode(odd)), out_dir)
    assert info.value.code == "bad_source" and "photos-%FF is not valid UTF-8" in info.value.message
    assert ledger.views.batches() == []


@pytest.mark.parametrize(
    ("store", "relation"),
    [("out", "is the output folder"), ("out/store", "lies inside the output folder"), (".", "holds the output folder")],
)
def test_a_store_overlapping_out_is_refused_before_anything_is_written(
    ledger: Ledger, photos: Path, tmp_path: Path, store: str, relation: str
) -> None:
    out = tmp_path / "out"
    with pytest.raises(UsageError) as info:
        run(ledger, photos, out, store_dir=tmp_path / store)
    assert info.value.code == "bad_store" and relation in info.value.message
    assert ledger.views.batches() == [] and ledger.upkeep.recorded_store() is None
    assert not (tmp_path / store / "ledger-id").exists() and not (out / "ledger-id").exists()


def test_a_store_inside_an_earlier_batchs_output_folder_is_refused(
    ledger: Ledger, photos: Path, tmp_path: Path
) -> None:
    run(ledger, photos, tmp_path / "out1", store_dir=tmp_path / "store")
    before = [batch.batch_id for batch in ledger.views.batches()]
    with pytest.raises(UsageError) as info:
        run(ledger, photos, tmp_path / "out2", store_dir=tmp_path / "out1" / "store")
    assert info.value.code == "bad_store" and f"lies inside the output folder {tmp_path / 'out1'}" in info.value.message
    assert [b.batch_id for b in ledger.views.batches()] == before
    assert ledger.upkeep.recorded_store() == str(tmp_path / "store")
    assert not (tmp_path / "out1" / "store").exists()


@pytest.mark.parametrize("store", ["photos", "photos/rooms"])
def test_a_source_folder_inside_the_store_is_refused(ledger: Ledger, photos: Path, out_dir: Path, store: str) -> None:
    with pytest.raises(UsageError) as info:
        run(ledger, photos / "rooms", out_dir, store_dir=photos.parent / store)
    assert info.value.code == "bad_store" and "lies inside it" in info.value.message
    assert ledger.upkeep.recorded_store() is None


def test_a_store_of_another_ledger_inside_the_source_folder_is_not_scanned(
    ledger: Ledger, photos: Path, tmp_path: Path
) -> None:
    with Ledger(tmp_path / "other.db") as other:
        run(other, photos, tmp_path / "other-out", store_dir=photos / "shop-store")
    assert (photos / "shop-store" / "ledger-id").exists()
    make_image(photos / "shop-store" / "objects" / "ab" / "ab12.jpg", (40, 40), "JPEG")  # what a worker leaves there
    batch, prepared = run(ledger, photos, tmp_path / "out")
    assert batch.total == 12 and prepared.report.skipped_output_folders == ["shop-store"]


def test_a_png_holding_jpeg_bytes_is_taken_by_its_content(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    make_image(tmp_path / "src" / "really-a-jpeg.png", (16, 16), "JPEG")
    batch, _ = run(ledger, tmp_path / "src", out_dir)
    assert batch.counts["queued"] == 3


def test_empty_folder_is_rejected(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "notes.txt").write_text("x")
    with pytest.raises(RejectedError) as info:
        run(ledger, tmp_path / "src", out_dir)
    assert info.value.code == "empty_batch" and "(1 other file ignored)" in info.value.message


# -- idempotency ------------------------------------------------------------------


def test_the_same_submit_replays_the_same_batch(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    first, _ = run(ledger, photos, out_dir)
    before = table_snapshot(ledger)
    second, prepared = run(ledger, photos, out_dir)
    assert second.replayed and second.batch_id == first.batch_id
    assert prepared.report.cached == 4 and prepared.report.read == 0
    assert table_snapshot(ledger) == before


def test_same_key_with_other_content_conflicts_and_changes_nothing(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    first, _ = run(ledger, photos, out_dir, key="listing-42")
    before = table_snapshot(ledger)
    with pytest.raises(IdempotencyConflict) as info:
        run(ledger, photos, out_dir, key="listing-42", profile=Profile(size=256))
    assert info.value.batch_id == first.batch_id and info.value.exit_code == 3
    assert table_snapshot(ledger) == before
    again, _ = run(ledger, photos, out_dir, key="listing-42")
    assert again.replayed and again.batch_id == first.batch_id


def test_changing_one_photo_makes_a_new_request_and_keeps_the_other_keys(
    ledger: Ledger, photos: Path, out_dir: Path
) -> None:
    first, _ = run(ledger, photos, out_dir)
    make_image(photos / "garden.jpeg", (200, 320), "JPEG", seed=99)
    second, prepared = run(ledger, photos, out_dir)
    assert second.batch_id != first.batch_id and not second.replayed
    assert prepared.report.read == 1 and prepared.report.cached == 3
    keys = [{(i.item_id, i.ratio): i.derivative_key for i in ledger.views.items(b.batch_id)} for b in (first, second)]
    changed = {k for k in keys[0] if keys[0][k] != keys[1][k]}
    assert changed == {("garden.jpeg", r) for r in ("1:1", "4:3", "16:9")}


def test_stat_cache_catches_content_changes_that_keep_size_and_mtime(
    ledger: Ledger, photos: Path, out_dir: Path
) -> None:
    first, _ = run(ledger, photos, out_dir)
    path = photos / "coffee.png"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    second, prepared = run(ledger, photos, out_dir)
    assert prepared.report.read == 1
    assert second.request_digest != first.request_digest


def test_keys_do_not_depend_on_ledger_or_source_location(photos: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(photos, copy)
    keys = []
    for name, source in (("one.db", photos), ("two.db", copy)):
        with Ledger(tmp_path / name) as led:
            batch, _ = run(led, source, tmp_path / f"out-{name}")
            keys.append(sorted(i.derivative_key for i in led.views.items(batch.batch_id)))
    assert keys[0] == keys[1]


# -- manifests -------------------------------------------------------------------


def write_manifests(root: Path) -> dict[str, Path]:
    items = [
        {"id": "listing/a", "source": "rooms/living.jpg", "ratios": ["1:1", "4:5"], "focus": [0.2, 0.3]},
        {"source": "coffee.png"},
    ]
    paths = {}
    paths["json"] = root / "m.json"
    paths["json"].write_text(json.dumps({"items": items}))
    paths["jsonl"] = root / "m.jsonl"
    paths["jsonl"].write_text("\n".join(json.dumps(i) for i in items))
    paths["csv"] = root / "m.csv"
    paths["csv"].write_text(
        "\ufeffid,source,ratios,focus_x,focus_y\nlisting/a,rooms/living.jpg,1:1 4:5,0.2,0.3\n,coffee.png,,,\n",
        encoding="utf-8",
    )
    return paths


def test_three_manifest_formats_make_the_same_request(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    digests = set()
    for path in write_manifests(photos).values():
        batch, _ = run(ledger, path, out_dir)
        digests.add(batch.request_digest)
    assert len(digests) == 1 and len(ledger.views.batches()) == 1
    items = ledger.views.items(ledger.views.batches()[0].batch_id)
    assert [(i.item_id, i.ratio) for i in items] == [
        ("coffee.png", "1:1"),
        ("coffee.png", "4:3"),
        ("coffee.png", "16:9"),
        ("listing/a", "1:1"),
        ("listing/a", "4:5"),
    ]
    assert items[3].friendly_path == str(out_dir / "listing" / "a.1x1.jpg")


def test_focus_is_part_of_the_derivative_key(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    manifest = photos / "m.json"
    keys = []
    for focus in ([0.5, 0.5], [0.9, 0.1]):
        manifest.write_text(json.dumps([{"source": "coffee.png", "ratios": ["1:1"], "focus": focus}]))
        batch, _ = run(ledger, manifest, out_dir)
        keys.append(ledger.views.items(batch.batch_id)[0].derivative_key)
    assert keys[0] != keys[1]


def derivative_keys_by_policy(ledger: Ledger, photos: Path, out_dir: Path) -> dict[str, dict[str, str]]:
    """Crop policy -> item id -> the derivative key intake gives its 1:1 item (nothing is recorded)."""
    keys = {}
    for policy in ("smart", "entropy", "center"):
        options = SubmitOptions(out_dir=out_dir, profile=Profile(ratios=(Ratio(1, 1),), crop=policy))
        prepared = prepare_submission(photos, options, ledger)
        keys[policy] = {item.item_id: item.derivative_key for item in prepared.batch.items}
    return keys


@pytest.mark.parametrize("bumped", ["smart", "entropy", "center"])
def test_the_crop_policy_and_its_version_are_part_of_the_derivative_key(
    ledger: Ledger, photos: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch, bumped: str
) -> None:
    before = derivative_keys_by_policy(ledger, photos, out_dir)
    assert {len(keys) for keys in before.values()} == {4}
    for item_id in before["smart"]:
        assert len({before[policy][item_id] for policy in before}) == 3  # one source, one ratio, three objects
    monkeypatch.setitem(settings.CROP_POLICIES, bumped, settings.CROP_POLICIES[bumped] + 1)
    after = derivative_keys_by_policy(ledger, photos, out_dir)
    for policy, keys in after.items():
        changed = {item_id for item_id, key in keys.items() if key != before[policy][item_id]}
        assert changed == (set(keys) if policy == bumped else set()), policy


def test_absolute_source_inside_the_root_gets_a_relative_id(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    manifest = photos / "m.jsonl"
    manifest.write_text(json.dumps({"source": str(photos / "rooms" / "living.jpg")}))
    batch, _ = run(ledger, manifest, out_dir)
    assert {i.item_id for i in ledger.views.items(batch.batch_id)} == {"rooms/living.jpg"}


def test_manifest_traversal_is_never_read_and_never_accepted(
    ledger: Ledger, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "trap.jpg")  # reading it would hang the test until its timeout
    os.symlink(tmp_path / "trap.jpg", photos / "link-out.jpg")
    manifest = photos / "m.json"
    manifest.write_text(
        json.dumps(
            [
                {"source": "../trap.jpg", "id": "up"},
                {"source": str(tmp_path / "trap.jpg"), "id": "absolute"},
                {"source": "link-out.jpg"},
                {"source": "rooms/../../trap.jpg", "id": "sneaky"},
                {"source": "coffee.png"},
            ]
        )
    )
    batch, _ = run(ledger, manifest, out_dir)
    assert batch.total == 15 and batch.counts["queued"] == 3
    assert {f.error_code for f in batch.failures} == {"path_outside_root"}
    assert all(i.friendly_path is None for i in ledger.views.items(batch.batch_id, state="failed"))


def make_zero_device(path: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")


#: What a source checked by path may have become by the time submit opens it, and the code.
SWAPPED_AT_SUBMIT = {
    "fifo": (lambda photo: (photo.unlink(), os.mkfifo(photo)), "unsupported_format"),
    "device": (lambda photo: (photo.unlink(), make_zero_device(photo)), "unsupported_format"),
    "folder-linked-to-dev": (
        lambda photo: (photo.parent.rename(photo.parent.with_name("moved")), photo.parent.symlink_to("/dev")),
        "path_outside_root",
    ),
}


@pytest.mark.parametrize("case", list(SWAPPED_AT_SUBMIT))
def test_submit_reads_a_source_only_as_a_regular_file_reached_without_symlinks(tmp_path: Path, case: str) -> None:
    """Between the path check and the read, ``rooms/zero`` becomes a FIFO, a /dev/zero node or
    /dev/zero through a linked folder: the read fails at once instead of hanging or filling memory."""
    root = tmp_path / "photos"
    photo = make_image(root / "rooms" / "zero", (16, 16), "PNG")
    swap, code = SWAPPED_AT_SUBMIT[case]
    swap(photo)
    with pytest.raises(ItemFailure) as info:
        inspect_source(SourceFolder(str(root)), str(photo), None, Limits())
    assert info.value.code == code


@pytest.mark.parametrize("source", ["../../etc/passwd", "/etc/passwd", "rooms/../../photos2/x.jpg", "rooms/.."])
def test_an_item_without_id_whose_source_is_outside_the_root_rejects_the_batch(
    ledger: Ledger, photos: Path, out_dir: Path, source: str
) -> None:
    """Its id would be its source, which is no safe path inside OUT: rejected like an unsafe explicit id."""
    manifest = photos / "m.json"
    manifest.write_text(json.dumps([{"source": "coffee.png"}, {"source": source}]))
    with pytest.raises(RejectedError) as info:
        run(ledger, manifest, out_dir)
    assert (info.value.code, info.value.exit_code) == ("unsafe_id", 65)
    assert info.value.message == (
        f"an item without an id takes its source as id, and {source!r} is not a path inside {photos}; "
        "give the item an id (ids must be safe relative paths inside --out)"
    )
    assert ledger.views.batches() == []


def test_nothing_is_written_outside_the_ledger(ledger: Ledger, photos: Path, out_dir: Path, tmp_path: Path) -> None:
    before = {p for p in tmp_path.rglob("*")}
    manifest = photos / "m.json"
    manifest.write_text(json.dumps([{"source": "coffee.png", "id": "x/y"}]))
    before.add(manifest)
    run(ledger, photos, out_dir)
    run(ledger, manifest, out_dir)
    after = {p for p in tmp_path.rglob("*")}
    store = tmp_path / "ledger.store"  # made at first use: it records the ledger it belongs to
    ledger_files = {"ledger.db", "ledger.db-wal", "ledger.db-shm", "ledger.store"}
    assert {p.name for p in after - before if not p.is_relative_to(store) or p == store} <= ledger_files
    assert {p.relative_to(store).as_posix() for p in after if p.is_relative_to(store) and p != store} == {
        "ledger-id",
        ".tmp",
    }


@pytest.mark.parametrize(
    ("content", "code"),
    [
        ("[{]", "malformed_manifest"),
        ('[{"source": "coffee.png", "ratios": ["1:1", "banana"]}]', "malformed_manifest"),
        ('[{"source": "coffee.png"}, {"source": "garden.jpeg", "id": "coffee.png"}]', "duplicate_id"),
        ('[{"source": "coffee.png"}, {"source": "./coffee.png"}]', "duplicate_id"),
        (
            '[{"source": "coffee.png", "ratios": ' + json.dumps([f"{n}:1" for n in range(1, 14)]) + "}]",
            "too_many_ratios",
        ),
        ('[{"source": "coffee.png", "id": "../escape"}]', "unsafe_id"),
        ('[{"source": "coffee.png", "id": "/etc/x"}]', "unsafe_id"),
        ('[{"source": "coffee.png", "id": "a\\u0000b"}]', "unsafe_id"),
        ('[{"source": "coffee.png", "id": ""}]', "unsafe_id"),
        ('[{"source": "coffee.png", "id": "a\\ud800b"}]', "malformed_manifest"),
        ('[{"source": "raw/\\udcffx.jpg"}]', "malformed_manifest"),
        ("[]", "empty_batch"),
    ],
)
def test_whole_batch_rejections(ledger: Ledger, photos: Path, out_dir: Path, content: str, code: str) -> None:
    manifest = photos / "m.json"
    manifest.write_text(content)
    with pytest.raises(RejectedError) as info:
        run(ledger, manifest, out_dir)
    assert info.value.code == code and info.value.exit_code == 65
    assert ledger.views.batches() == []


def test_item_limit_rejects_the_whole_batch(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    with pytest.raises(RejectedError) as info:
        run(ledger, photos, out_dir, limits=Limits(max_items=11))
    assert info.value.code == "too_many_items" and "12 items" in info.value.message
    assert ledger.views.batches() == []


def test_the_item_limit_and_the_denominator_count_derivatives(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    """4 sources x 3 ratios x 2 sizes x 2 formats: 48 items, each one derivative."""
    profile = Profile(size=(256, 512), format=("webp", "jpeg"))
    with pytest.raises(RejectedError) as info:
        run(ledger, photos, out_dir, profile=profile, limits=Limits(max_items=47))
    assert info.value.code == "too_many_items"
    assert "48 items (4 sources x ratios x sizes x formats)" in info.value.message
    batch, _ = run(ledger, photos, out_dir, profile=profile, limits=Limits(max_items=48))
    assert batch.total == 48
    keys = {(i.item_id, i.ratio, i.size, i.format): i.derivative_key for i in ledger.views.items(batch.batch_id)}
    assert len(keys) == len(set(keys.values())) == 48


def test_a_one_size_one_format_request_digests_as_before(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    """The batch's profile keeps its single size and format (not lists), so the request digest,
    and with it the idempotency key, of a request made before derivative sets is unchanged."""
    batch, prepared = run(ledger, photos, out_dir)
    assert (prepared.batch.profile["size"], prepared.batch.profile["format"]) == (512, "jpeg")
    sets, prepared_sets = run(ledger, photos, out_dir.parent / "sets", profile=Profile(size=(256, 512)))
    assert prepared_sets.batch.profile["size"] == [256, 512] and sets.batch_id != batch.batch_id


# -- admission control --------------------------------------------------------------


def prepared_for(ledger: Ledger, source: Path, out: Path, **kwargs):
    return prepare_submission(source, SubmitOptions(out_dir=out, **kwargs), ledger)


def test_saturated_queue_refuses_new_batches_but_replays_old_ones(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    limits = Limits(max_runnable=20)
    first, _ = run(ledger, photos, out_dir, limits=limits)
    other = prepared_for(ledger, photos, out_dir, profile=Profile(size=128))
    with pytest.raises(AdmissionRefused) as info:
        submit(ledger, other, limits)
    assert info.value.exit_code == 75 and "12 runnable" in info.value.message
    assert run(ledger, photos, out_dir, limits=limits)[0].replayed
    ledger.intake.request_cancel(first.batch_id)
    assert submit(ledger, other, limits).batch_id != first.batch_id


@pytest.mark.parametrize("retry_admission", [False, True])
def test_a_batch_over_the_runnable_limit_on_its_own_is_rejected_for_good(
    ledger: Ledger, photos: Path, out_dir: Path, retry_admission: bool
) -> None:
    prepared = prepared_for(ledger, photos, out_dir)  # 12 runnable items, into an empty ledger
    polls = []

    def never_interrupted() -> bool:
        polls.append(1)
        return False

    with pytest.raises(RejectedError) as info:
        limits = Limits(max_runnable=11)
        submit(ledger, prepared, limits, retry_admission=retry_admission, max_wait=5, should_stop=never_interrupted)
    assert (info.value.code, info.value.exit_code, info.value.transient) == ("too_many_items", 65, False)
    assert "adds 12 runnable items, over the limit of 11" in info.value.message
    assert polls == [] and ledger.views.batches() == []  # no wait for room that can never come; nothing recorded
    assert submit(ledger, prepared, Limits(max_runnable=12)).total == 12


def test_stale_queue_refuses_while_workers_drain_it(photos: Path, out_dir: Path, tmp_path: Path) -> None:
    """A worker took an item in the last ten minutes and the oldest runnable item is over the
    objective: the workers are behind. The refusal names the batch and the two ways out."""
    now = [1_000_000.0]
    with Ledger(tmp_path / "clocked.db", clock=lambda: now[0]) as led:
        limits = Limits(queue_age_objective=3600)
        first, _ = run(led, photos, out_dir, limits=limits)
        now[0] += 3601
        claim = led.queue.claim("w1")
        led.queue.publish(claim, claim.items[0], lambda: None)
        now[0] += 60
        other = prepared_for(led, photos, out_dir, profile=Profile(size=128))
        with pytest.raises(AdmissionRefused) as info:
            submit(led, other, limits)
        assert "3661s" in info.value.message and f"batch {first.batch_id}" in info.value.message
        assert "thumbctl work --until-idle" in info.value.message
        assert f"thumbctl cancel {first.batch_id}" in info.value.message
        assert submit(led, other, replace(limits, queue_age_objective=0)).total == 12
        led.intake.request_cancel(first.batch_id)


@pytest.mark.parametrize("last_seen", [None, 601.0])
def test_an_old_queue_nobody_works_on_does_not_block_a_submit(
    photos: Path, out_dir: Path, tmp_path: Path, last_seen: float | None
) -> None:
    """A forgotten ``--detach`` batch on a laptop, with no worker for ten minutes (or ever): waiting
    would never help, so the age objective does not refuse."""
    now = [1_000_000.0]
    with Ledger(tmp_path / "clocked.db", clock=lambda: now[0]) as led:
        limits = Limits(queue_age_objective=3600)
        run(led, photos, out_dir, limits=limits)
        if last_seen is not None:
            claim = led.queue.claim("w1")
            for item in claim.items:
                led.queue.publish(claim, item, lambda: None)
            now[0] += last_seen
        now[0] += 3601
        second = submit(led, prepared_for(led, photos, out_dir, profile=Profile(size=128)), limits)
        assert second.total == 12 and not second.replayed


def test_items_waiting_out_a_retry_backoff_are_not_runnable(photos: Path, out_dir: Path, tmp_path: Path) -> None:
    """Admission, status and stats agree on "runnable": queued and not waiting out a backoff,
    so a batch whose items are between retries neither fills the queue nor ages it."""
    now = [1_000_000.0]
    with Ledger(tmp_path / "clocked.db", clock=lambda: now[0]) as led:
        limits = Limits(max_runnable=12, queue_age_objective=3600)
        first, _ = run(led, photos, out_dir, limits=limits)
        while (claim := led.queue.claim("w1")) is not None:
            led.queue.fail(claim, [i.row for i in claim.items], "io_error", "disk busy", lambda attempt: 7200.0)
        now[0] += 3601
        view = led.views.batch(first.batch_id)
        assert view.counts["queued"] == 12 and view.queue_age_seconds is None
        other = prepared_for(led, photos, out_dir, profile=Profile(size=128))
        second = submit(led, other, limits)
        assert second.total == 12 and led.views.batch(second.batch_id).queue_age_seconds == 0.0
        now[0] += 3601  # the backoff is over: all 24 are runnable, the oldest for an hour
        assert led.views.batch(first.batch_id).queue_age_seconds == 7202.0
        with pytest.raises(AdmissionRefused) as info:
            submit(led, prepared_for(led, photos, out_dir, profile=Profile(size=64)), limits)
        assert "24 runnable" in info.value.message


def test_retry_admission_waits_for_room_with_the_same_key(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    limits = Limits(max_runnable=20)
    first, _ = run(ledger, photos, out_dir, limits=limits)
    other = prepared_for(ledger, photos, out_dir, profile=Profile(size=128), key="second")
    polls = []

    def drain_on_first_poll() -> bool:
        if not polls:
            ledger.intake.request_cancel(first.batch_id)
        polls.append(1)
        return False

    batch = submit(ledger, other, limits, retry_admission=True, max_wait=30, should_stop=drain_on_first_poll)
    assert batch.idempotency_key == "second" and not batch.replayed
    assert polls


def test_retry_admission_stops_promptly_when_asked(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    limits = Limits(max_runnable=20)
    run(ledger, photos, out_dir, limits=limits)
    other = prepared_for(ledger, photos, out_dir, profile=Profile(size=128))
    with pytest.raises(Interrupted):
        submit(ledger, other, limits, retry_admission=True, max_wait=600, should_stop=lambda: True)
    assert len(ledger.views.batches()) == 1


def test_retry_admission_gives_up_after_max_wait(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    limits = Limits(max_runnable=20)
    run(ledger, photos, out_dir, limits=limits)
    other = prepared_for(ledger, photos, out_dir, profile=Profile(size=128))
    with pytest.raises(AdmissionRefused):
        submit(ledger, other, limits, retry_admission=True, max_wait=0.3)


def test_waiting_for_admission_never_plans_a_wait_past_max_wait() -> None:
    """The waits announced before each retry never add up past max_wait: the last one is not
    taken rather than overshooting (it could overshoot by up to max_delay, 30 s, when the
    limit was checked only after each sleep)."""
    planned: list[float] = []

    def refused() -> None:
        raise AdmissionRefused("queue saturated", retry_after=30)

    with pytest.raises(AdmissionRefused):
        retry_unavailable(
            refused,
            should_stop=lambda: False,
            max_wait=0.6,
            max_delay=30.0,
            on_retry=lambda error, delay: planned.append(delay),
        )
    assert planned and sum(planned) <= 0.6


@pytest.mark.parametrize(
    ("linked", "failing"),
    [("store/objects", 12), ("rooms", 6), ("rooms/living.jpg", 0), ("objects", 0)],
)
def test_items_whose_outputs_would_go_through_a_symlink_in_out_fail_at_submit(
    ledger: Ledger, photos: Path, out_dir: Path, store_dir: Path, tmp_path: Path, linked: str, failing: int
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "living.1x1.jpg").write_text("precious user data")
    base, linked = (store_dir, linked.removeprefix("store/")) if linked.startswith("store/") else (out_dir, linked)
    (base / linked).parent.mkdir(parents=True, exist_ok=True)
    if (base / linked).is_dir():
        (base / linked).rmdir()
    # rooms/living.jpg is on no item's path, nor is OUT/objects now that the objects are in the store
    (base / linked).symlink_to(victim, target_is_directory=True)
    before = tree_snapshot(victim)
    batch, _ = run(ledger, photos, out_dir)
    failed = ledger.views.items(batch.batch_id, state="failed")
    assert len(failed) == failing and len(ledger.views.items(batch.batch_id, state="queued")) == 12 - failing
    assert {i.error_code for i in failed} <= {"path_outside_root"}
    assert all((i.error_detail or "").startswith(f"{base / linked} is a symlink") for i in failed)
    assert tree_snapshot(victim) == before


@pytest.mark.parametrize("linked", [".tmp", "batches"])
def test_a_symlinked_folder_for_the_batch_files_refuses_the_whole_submission(
    ledger: Ledger, photos: Path, out_dir: Path, tmp_path: Path, linked: str
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    out_dir.mkdir()
    (out_dir / linked).symlink_to(victim, target_is_directory=True)
    before, rows = tree_snapshot(victim), table_snapshot(ledger)
    with pytest.raises(UsageError, match=f"{out_dir / linked} is a symlink") as raised:
        prepare_submission(photos, SubmitOptions(out_dir=out_dir), ledger)
    assert raised.value.code == "bad_out_dir"
    assert tree_snapshot(victim) == before and table_snapshot(ledger) == rows


# -- friendly names of reused outputs ----------------------------------------------------------


def work(ledger: Ledger) -> None:
    config = WorkerConfig(str(ledger.path), backoff=Backoff(base=0.001, cap=0.001), poll_seconds=0.01)
    run_worker(config, threading.Event(), Faults(""))


def rendered(ledger: Ledger, source: Path, out: Path, size: int, key: str | None = None):
    batch, prepared = run(ledger, source, out, profile=Profile(ratios=(Ratio(1, 1),), size=size), key=key)
    work(ledger)
    return ledger.views.batch(batch.batch_id), prepared


def names_point_at(ledger: Ledger, batch_id: str) -> bool:
    return all(is_copy_of(i.friendly_path, i.object_path) for i in ledger.views.items(batch_id))


def render_at_another_size(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    rendered(ledger, photos, out_dir, 256)


def put_foreign_files_at_the_names(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    for name in out_dir.rglob("*.1x1.jpg"):
        if "objects" in name.parts:
            continue
        name.unlink()
        make_image(name, (10, 10), "JPEG", seed=5)


def remove_the_names(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    for name in out_dir.rglob("*.1x1.jpg"):
        name.unlink()


@pytest.mark.parametrize("stale", [render_at_another_size, remove_the_names])
def test_reused_outputs_take_their_friendly_names_back(ledger: Ledger, photos: Path, out_dir: Path, stale) -> None:
    first, _ = rendered(ledger, photos, out_dir, 512)
    stale(ledger, photos, out_dir)
    again, prepared = run(ledger, photos, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=512), key="again")
    assert (again.state, again.counts["succeeded"], again.replayed) == ("succeeded", 4, False)
    assert prepared.report.unlinked_names == []
    assert names_point_at(ledger, again.batch_id) and names_point_at(ledger, first.batch_id)
    assert find_problems(ledger) == []


@pytest.mark.parametrize("overwrite", [False, True])
def test_reused_outputs_leave_files_thumbctl_did_not_publish_alone(
    ledger: Ledger, photos: Path, out_dir: Path, overwrite: bool
) -> None:
    rendered(ledger, photos, out_dir, 512)
    put_foreign_files_at_the_names(ledger, photos, out_dir)
    before = tree_snapshot(out_dir)
    profile = Profile(ratios=(Ratio(1, 1),), size=512)
    again, _ = run(ledger, photos, out_dir, profile=profile, key="again", overwrite=overwrite)
    if overwrite:  # reused, and their names taken back at acceptance
        assert (again.state, again.counts["succeeded"]) == ("succeeded", 4)
        assert names_point_at(ledger, again.batch_id)
        return
    assert again.counts["queued"] == 4  # not reused: the worker decides, in the publish transaction
    work(ledger)
    done = ledger.views.batch(again.batch_id)
    assert (done.state, done.counts["failed"]) == ("failed", 4)
    assert {f.error_code for f in done.failures} == {"name_taken"}
    assert all(f.detail.startswith(str(out_dir)) for f in done.failures)
    names = {p: v for p, v in tree_snapshot(out_dir).items() if p.endswith(".1x1.jpg")}
    assert names == {p: v for p, v in before.items() if p.endswith(".1x1.jpg")}


def test_a_replay_relinks_only_the_names_its_batch_still_owns(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    big, _ = rendered(ledger, photos, out_dir, 512)
    small, _ = rendered(ledger, photos, out_dir, 256)
    replay, prepared = rendered(ledger, photos, out_dir, 512)
    assert replay.batch_id == big.batch_id and prepared.report.unlinked_names == []
    assert names_point_at(ledger, small.batch_id)  # the newer batch keeps the names
    reused, _ = run(ledger, photos, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=512), key="again")
    remove_the_names(ledger, photos, out_dir)  # as if the submit stopped before linking
    replay, prepared = run(ledger, photos, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=512), key="again")
    assert replay.replayed and replay.batch_id == reused.batch_id
    assert names_point_at(ledger, reused.batch_id) and find_problems(ledger) == []


def test_a_folder_at_a_reused_items_name_leaves_it_to_the_worker(ledger: Ledger, photos: Path, out_dir: Path) -> None:
    rendered(ledger, photos, out_dir, 512)
    small, _ = rendered(ledger, photos, out_dir, 256)
    blocked = out_dir / "coffee.1x1.jpg"
    blocked.unlink()
    (blocked / "inside").mkdir(parents=True)
    again, prepared = run(ledger, photos, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=512), key="again")
    assert (again.counts["succeeded"], again.counts["queued"]) == (3, 1) and prepared.report.unlinked_names == []
    work(ledger)
    done = ledger.views.batch(again.batch_id)
    assert [(f.item_id, f.error_code) for f in done.failures] == [("coffee.png", "name_taken")]
    assert (blocked / "inside").is_dir()  # reconcile reports it against the batch that wrote the name last
    assert [(f.kind, f.batch_id) for f in find_problems(ledger)] == [("thumbnail_modified", small.batch_id)]


def test_an_object_gc_removes_between_the_reuse_check_and_acceptance_is_rendered_again(
    ledger: Ledger, photos: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc expiring the only batch that referenced the objects and removing them while a
    submit that reuses them is being accepted: the new batch must not record successes whose
    objects are gone (invariant 2); those items render again. (Their names show a later render
    at another size, so no name's record references them either.)"""
    first, _ = rendered(ledger, photos, out_dir, 512)
    second, _ = rendered(ledger, photos, out_dir, 256)
    accept = ledger.intake.accept_batch

    def gc_in_the_window(new, limits, still_present=None, *, resume=False):
        assert sum(item.dedup for item in new.items) == 4  # intake saw the objects and reuses them
        gone = collect_garbage(ledger, -60.0)  # what a cron gc does in that window
        assert gone.expired_batches == (first.batch_id, second.batch_id) and gone.objects_removed == 4
        return accept(new, limits, still_present, resume=resume)

    monkeypatch.setattr(ledger.intake, "accept_batch", gc_in_the_window)
    batch, _ = run(ledger, photos, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=512), key="again")
    assert batch.counts["queued"] == 4 and batch.counts["succeeded"] == 0
    work(ledger)
    assert ledger.views.batch(batch.batch_id).state == "succeeded"
    second_objects = {i.object_path for i in ledger.views.items(second.batch_id)}
    assert {(f.kind, f.path) for f in find_problems(ledger)} == {("orphan_object", p) for p in second_objects}
