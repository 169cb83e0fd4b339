"""reconcile, gc and the mirror on an S3 store and an S3 OUT (a real SeaweedFS): the same findings,
repairs and reference checks as on local folders, with the bucket's keys checked as a user's own S3
client lists them.

A batch's state in the bucket is made the way an operator moves a finished batch there: rendered
into local folders, each object put into the S3 store and each name published into the S3 OUT
through thumbctl's own S3 classes, and the ledger's recorded locations (and the names' versions,
ETags now) pointed at the bucket; the local folders are then removed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import obstore
import pytest
from typer.testing import CliRunner

from thumbctl import Ledger
from thumbctl.cli import app
from thumbctl.core.scanrules import ScanRules
from thumbctl.storage.locations import object_store_at, output_target_at, parse_s3
from thumbctl.upkeep.mirror import FolderView, mirror_batch

from inprocess import render_here
from s3 import get_raw, keys, put_raw, raw_store
from support import check_invariants, raw_rows, raw_write

OBJECT_NAME = 64 + len(".jpg")
THUMBNAILS = ["coffee.1x1.jpg", "garden.1x1.jpg", "rooms/kitchen.1x1.jpg", "rooms/living.1x1.jpg"]


@dataclass
class S3Batch:
    """A rendered batch whose store and OUT are prefixes of the test bucket."""

    cli: object
    ledger_url: str
    batch_id: str
    store: str
    out: str
    bucket: object

    def key(self, url: str) -> str:
        location = parse_s3(url)
        return location.prefix

    def object_keys(self) -> list[str]:
        found = keys(self.bucket, self.key(self.store) + "/objects/")
        return [k for k in found if len(k.rsplit("/", 1)[1]) == OBJECT_NAME]

    def out_names(self) -> list[str]:
        """The names under the S3 OUT, as a user's S3 client lists them."""
        head = self.key(self.out) + "/"
        return [k.removeprefix(head) for k in keys(self.bucket, head)]

    def status_items(self) -> list[dict]:
        return json.loads(self.cli("status", self.batch_id, "--items", "--json").stdout)["items"]


def make_cli(monkeypatch: pytest.MonkeyPatch, ledger_url: str):
    monkeypatch.setenv("THUMBCTL_DB", ledger_url)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def move_to_bucket(ledger_url: str, store_dir: Path, out_dir: Path, store: str, out: str) -> None:
    """Put every object of ``store_dir`` into the S3 store ``store`` and publish every name of
    ``out_dir`` (with the batch documents) into the S3 OUT ``out``, then point the ledger at them."""
    s3_store, target = object_store_at(store), output_target_at(out)
    for path in sorted(store_dir.glob("objects/*/*")):
        if len(path.name) == OBJECT_NAME or path.name.endswith(".webp"):
            s3_store.put(path.name, path.read_bytes(), verify=lambda _: None)
    with Ledger(ledger_url) as ledger:
        versions = {}
        rows = raw_rows(ledger, "SELECT friendly_path, name_version FROM names WHERE out_dir = ?", (str(out_dir),))
        for friendly_path, old_version in rows:
            name = os.path.relpath(friendly_path, out_dir)
            data = (out_dir / name).read_bytes()
            version = target.version_of(name)
            if version is None or target.read(name, len(data)) != data:
                version = target.publish(name, data)
            versions[old_version] = version
        for path in sorted(out_dir.glob("batches/*")):
            target.write_document(f"batches/{path.name}", path.read_bytes())
        # a later batch's publish takes over a name's record
        replaced = "SELECT replace(friendly_path, ?, ?) FROM names WHERE out_dir = ?"
        raw_write(ledger, f"DELETE FROM names WHERE friendly_path IN ({replaced})", (str(out_dir), out, str(out_dir)))
        for table, columns in (
            ("items", ("object_path", "friendly_path", "result")),
            ("batches", ("out_dir", "manifest_path")),
            ("names", ("friendly_path", "out_dir", "object_path")),
        ):
            for column in columns:
                for old, new in ((str(store_dir), store), (str(out_dir), out)):
                    raw_write(ledger, f"UPDATE {table} SET {column} = replace({column}, ?, ?)", (old, new))
        for old_version, version in versions.items():
            for table in ("items", "names"):
                raw_write(ledger, f"UPDATE {table} SET name_version = ? WHERE name_version = ?", (version, old_version))
        raw_write(ledger, "UPDATE meta SET value = ? WHERE name = 'store'", (store,))
        raw_write(ledger, "DELETE FROM object_checks")
    shutil.rmtree(store_dir)
    shutil.rmtree(out_dir)


def render_into_bucket(cli, ledger_url: str, photos: Path, tmp_path: Path, store: str, out: str) -> str:
    """Submit ``photos`` (1:1), render it in this process and move its state into the bucket; returns the batch id."""
    store_dir, out_dir = tmp_path / "staging.store", tmp_path / "staging.out"
    done = cli("submit", photos, "--out", out_dir, "--store", store_dir, "-r", "1:1", "-w", "1", "--detach", "--json")
    assert done.exit_code == 0, done.stdout
    batch_id = json.loads(done.stdout)["batch_id"]
    render_here(ledger_url, batch_id)
    assert cli("sheet", batch_id).exit_code == 0  # the page a foreground run's end writes
    move_to_bucket(ledger_url, store_dir, out_dir, store, out)
    return batch_id


@pytest.fixture
def s3_batch(monkeypatch, ledger_url: str, photos: Path, tmp_path: Path, s3_url: str, s3_server) -> S3Batch:
    cli = make_cli(monkeypatch, ledger_url)
    store, out = f"{s3_url}/store", f"{s3_url}/out"
    batch_id = render_into_bucket(cli, ledger_url, photos, tmp_path, store, out)
    yield S3Batch(cli, ledger_url, batch_id, store, out, raw_store(s3_server))
    with Ledger(ledger_url) as ledger:
        check_invariants(ledger, outputs=False)


def reconciled(batch: S3Batch, *args: str) -> tuple[int, dict]:
    result = batch.cli("reconcile", *args, "--json")
    return result.exit_code, json.loads(result.stdout)


def test_reconcile_of_a_batch_in_a_bucket_is_clean_by_head_alone_and_a_deleted_object_is_found_and_requeued(
    s3_batch: S3Batch,
) -> None:
    objects = s3_batch.object_keys()
    assert len(objects) == 4 and s3_batch.out_names() == [
        f"batches/{s3_batch.batch_id}.html",
        f"batches/{s3_batch.batch_id}.json",
        *THUMBNAILS,
    ]
    clean = {"findings": [], "clean": True, "objects": {"checked": 4, "decoded": 0, "unchanged": 0, "matched": 4}}
    assert reconciled(s3_batch) == (0, clean)
    deep = {"checked": 4, "decoded": 4, "unchanged": 0, "matched": 0}
    assert reconciled(s3_batch, "--deep") == (0, {**clean, "objects": deep})
    item = next(i for i in s3_batch.status_items() if i["item_id"] == "garden.jpeg")
    obstore.delete(s3_batch.bucket, s3_batch.key(item["object_path"]))
    finding = {
        "kind": "object_missing",
        "batch_id": s3_batch.batch_id,
        "item_id": "garden.jpeg",
        "ratio": "1:1",
        "path": item["object_path"],
        "detail": "the object is missing",
        "repaired": False,
    }
    checked = {"checked": 4, "decoded": 0, "unchanged": 0, "matched": 3}  # and 1 found missing
    assert reconciled(s3_batch) == (1, {"findings": [finding], "clean": False, "objects": checked})
    assert reconciled(s3_batch, "--repair") == (
        0,
        {"findings": [{**finding, "repaired": True}], "clean": True, "objects": checked},
    )
    assert next(i for i in s3_batch.status_items() if i["item_id"] == "garden.jpeg")["state"] == "queued"
    assert reconciled(s3_batch) == (0, {**clean, "objects": {**checked, "checked": 3}})


SQLITE_ONLY = pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)


@SQLITE_ONLY
def test_a_damaged_object_in_a_bucket_is_found_by_head_or_only_by_deep(s3_batch: S3Batch) -> None:
    items = {i["item_id"]: s3_batch.key(i["object_path"]) for i in s3_batch.status_items()}
    published = {name: get_raw(s3_batch.bucket, key) for name, key in items.items()}
    living, _ = published["rooms/living.jpg"]
    put_raw(s3_batch.bucket, items["rooms/living.jpg"], b"not an image", "image/jpeg")  # a user's bytes
    kitchen, _ = published["rooms/kitchen.webp"]
    put_raw(s3_batch.bucket, items["rooms/kitchen.webp"], bytes(len(kitchen)), "image/jpeg")  # same size, no checksum
    coffee, _ = published["coffee.png"]
    other = {"Content-Type": "image/jpeg", "sha256": "0" * 64}  # same size, another checksum
    obstore.put(s3_batch.bucket, items["coffee.png"], bytes(len(coffee)), attributes=other, use_multipart=False)
    garden, attributes = published["garden.jpeg"]
    rotten = garden[:100] + bytes(b ^ 0xFF for b in garden[100:200]) + garden[200:]  # bit rot: size, checksum kept
    kept = {"Content-Type": "image/jpeg", "sha256": attributes["sha256"]}
    obstore.put(s3_batch.bucket, items["garden.jpeg"], rotten, attributes=kept, use_multipart=False)
    by_head = [
        ("coffee.png", "the object holds other bytes than were published (its checksum differs)"),
        ("rooms/kitchen.webp", "the object has no checksum kept with it (thumbctl did not write it)"),
        ("rooms/living.jpg", f"the object is 12 bytes, {len(living)} were published"),
    ]
    code, found = reconciled(s3_batch)
    assert code == 1 and sorted((f["item_id"], f["detail"]) for f in found["findings"]) == by_head
    assert {f["kind"] for f in found["findings"]} == {"object_invalid"}
    code, deep = reconciled(s3_batch, "--deep")
    damaged = ("garden.jpeg", "the object holds bytes that no longer match the checksum kept with it (damaged)")
    assert code == 1 and sorted((f["item_id"], f["detail"]) for f in deep["findings"]) == sorted([*by_head, damaged])
    assert deep["objects"] == {"checked": 4, "decoded": 1, "unchanged": 0, "matched": 0}  # and 3 wrong by head
    summary = s3_batch.cli("reconcile")
    said = "4 objects checked: 1 matched by the size and checksum kept with them, 3 found wrong without decoding"
    assert summary.exit_code == 1 and said in summary.stdout  # parts that add up to what was checked


@SQLITE_ONLY
def test_a_thumbnail_gone_from_the_bucket_or_edited_there_is_found_and_published_again(s3_batch: S3Batch) -> None:
    out = s3_batch.key(s3_batch.out)
    obstore.delete(s3_batch.bucket, f"{out}/coffee.1x1.jpg")
    put_raw(s3_batch.bucket, f"{out}/garden.1x1.jpg", b"edited by hand", "image/jpeg")
    code, found = reconciled(s3_batch)
    assert code == 1 and [(f["kind"], f["item_id"], f["path"], f["repaired"]) for f in found["findings"]] == [
        ("friendly_link_missing", "coffee.png", f"{s3_batch.out}/coffee.1x1.jpg", False),
        ("thumbnail_modified", "garden.jpeg", f"{s3_batch.out}/garden.1x1.jpg", False),
    ]
    code, kept = reconciled(s3_batch, "--repair")  # the missing one published again, the edit left
    assert code == 1 and [(f["kind"], f["repaired"]) for f in kept["findings"]] == [
        ("friendly_link_missing", True),
        ("thumbnail_modified", False),
    ]
    assert get_raw(s3_batch.bucket, f"{out}/garden.1x1.jpg")[0] == b"edited by hand"
    code, fixed = reconciled(s3_batch, "--repair", "--restore-modified")
    assert code == 0 and [(f["kind"], f["repaired"]) for f in fixed["findings"]] == [("thumbnail_modified", True)]
    for item in s3_batch.status_items():
        thumbnail, _ = get_raw(s3_batch.bucket, s3_batch.key(item["friendly_path"]))
        assert thumbnail == get_raw(s3_batch.bucket, s3_batch.key(item["object_path"]))[0]
    assert reconciled(s3_batch)[0] == 0


@SQLITE_ONLY
def test_gc_on_a_bucket_reclaims_an_orphan_object_and_expired_documents_never_a_name(s3_batch: S3Batch) -> None:
    objects = s3_batch.object_keys()
    orphan = "ab" * 32 + ".jpg"
    gone = b"\xff\xd8 an object of a batch long gone"
    object_store_at(s3_batch.store).put(orphan, gone, verify=lambda _: None)
    orphan_path = f"{s3_batch.store}/objects/ab/{orphan}"
    code, found = reconciled(s3_batch)
    assert code == 1 and [(f["kind"], f["path"]) for f in found["findings"]] == [("orphan_object", orphan_path)]
    thumbnails = {name: get_raw(s3_batch.bucket, f"{s3_batch.key(s3_batch.out)}/{name}")[0] for name in THUMBNAILS}
    gc = s3_batch.cli("gc", "--older-than", "30d", "--json")
    assert (gc.exit_code, json.loads(gc.stdout)) == (
        0,
        {
            "dry_run": False,
            "expired_batches": [],
            "objects_removed": 1,
            "temp_files_removed": 0,
            "manifests_removed": 0,
            "sheets_removed": 0,
            "bytes_reclaimed": len(gone),
            "errors": [],
        },
    )
    assert s3_batch.object_keys() == objects and len(objects) == 4
    documents = [f"batches/{s3_batch.batch_id}.html", f"batches/{s3_batch.batch_id}.json"]
    sizes = sum(len(get_raw(s3_batch.bucket, f"{s3_batch.key(s3_batch.out)}/{d}")[0]) for d in documents)
    dry = s3_batch.cli("gc", "--older-than", "0s", "--dry-run", "--json")
    gc = s3_batch.cli("gc", "--older-than", "0s", "--json")
    expected = {
        "dry_run": False,
        "expired_batches": [s3_batch.batch_id],
        "objects_removed": 0,
        "temp_files_removed": 0,
        "manifests_removed": 1,
        "sheets_removed": 1,
        "bytes_reclaimed": sizes,
        "errors": [],
    }
    assert (dry.exit_code, json.loads(dry.stdout)) == (0, {**expected, "dry_run": True})
    assert (gc.exit_code, json.loads(gc.stdout)) == (0, expected)
    assert s3_batch.out_names() == THUMBNAILS and s3_batch.object_keys() == objects
    for name, data in thumbnails.items():
        assert get_raw(s3_batch.bucket, f"{s3_batch.key(s3_batch.out)}/{name}")[0] == data
    assert reconciled(s3_batch)[0] == 0  # each name's record keeps its object


def test_the_mirror_on_an_s3_out_removes_a_gone_sources_name_and_leaves_an_edited_one(
    s3_batch: S3Batch, photos: Path, tmp_path: Path
) -> None:
    out = s3_batch.key(s3_batch.out)
    put_raw(s3_batch.bucket, f"{out}/garden.1x1.jpg", b"edited by hand", "image/jpeg")
    os.unlink(photos / "coffee.png")
    os.unlink(photos / "garden.jpeg")
    later = render_into_bucket(s3_batch.cli, s3_batch.ledger_url, photos, tmp_path, s3_batch.store, s3_batch.out)
    with Ledger(s3_batch.ledger_url) as ledger:
        report = mirror_batch(ledger, later, FolderView(os.path.realpath(photos), ScanRules()))
    assert report.to_json() == {
        "dry_run": False,
        "rendered": [],
        "removed": [f"{s3_batch.out}/coffee.1x1.jpg"],
        "kept_edited": [f"{s3_batch.out}/garden.1x1.jpg"],
        "kept_dropped": [],
        "skipped": None,
        "errors": [],
        "kept": [],
    }
    documents = [f"batches/{batch}.{ext}" for batch in (s3_batch.batch_id, later) for ext in ("html", "json")]
    assert s3_batch.out_names() == sorted(documents) + [
        "garden.1x1.jpg",
        "rooms/kitchen.1x1.jpg",
        "rooms/living.1x1.jpg",
    ]
    assert get_raw(s3_batch.bucket, f"{out}/garden.1x1.jpg")[0] == b"edited by hand"
