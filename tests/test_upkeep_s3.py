"""reconcile, gc and the mirror on an S3 store and an S3 OUT (a real SeaweedFS): the same findings,
repairs and reference checks as on local folders, with the bucket's keys checked as a user's own S3
client lists them.

A batch's state in the bucket is made the way an operator moves a finished batch there: rendered
into local folders, each object put into the S3 store and each name published into the S3 OUT
through thumbctl's own S3 classes, and the ledger's recorded locations (and the names' versions,
ETags now) pointed at the bucket; the local folders are then removed.
"""

from __future__ import annotations

import hashlib
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
from thumbctl.mirror import mirror_batch
from thumbctl.storage.locations import object_store_at, output_target_at, parse_s3

from s3 import get_raw, keys, put_raw, raw_store
from support import check_invariants, make_image, raw_rows, raw_write

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
        return [k for k in keys(self.bucket, self.key(self.store) + "/objects/") if len(k.rsplit("/", 1)[1]) == OBJECT_NAME]

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
        for (friendly_path, old_version) in raw_rows(ledger, "SELECT friendly_path, name_version FROM names"):
            name = os.path.relpath(friendly_path, out_dir)
            data = (out_dir / name).read_bytes()
            version = target.version_of(name)
            if version is None or target.read(name, len(data)) != data:
                version = target.publish(name, data)
            versions[old_version] = version
        for path in sorted(out_dir.glob("batches/*")):
            target.write_document(f"batches/{path.name}", path.read_bytes())
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


def rendered_into_bucket(
    monkeypatch: pytest.MonkeyPatch, ledger_url: str, photos: Path, tmp_path: Path, s3_url: str, s3_server
) -> S3Batch:
    cli = make_cli(monkeypatch, ledger_url)
    store_dir, out_dir = tmp_path / "staging.store", tmp_path / "staging.out"
    done = cli("submit", photos, "--out", out_dir, "--store", store_dir, "-r", "1:1", "-w", "1", "--json")
    assert done.exit_code == 0, done.stdout
    batch_id = json.loads(done.stdout)["batch_id"]
    store, out = f"{s3_url}/store", f"{s3_url}/out"
    move_to_bucket(ledger_url, store_dir, out_dir, store, out)
    return S3Batch(cli, ledger_url, batch_id, store, out, raw_store(s3_server))


@pytest.fixture
def s3_batch(monkeypatch, ledger_url: str, photos: Path, tmp_path: Path, s3_url: str, s3_server) -> S3Batch:
    batch = rendered_into_bucket(monkeypatch, ledger_url, photos, tmp_path, s3_url, s3_server)
    yield batch
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
    clean = {"findings": [], "clean": True, "objects": {"checked": 4, "decoded": 0, "unchanged": 0}}
    assert reconciled(s3_batch) == (0, clean)
    assert reconciled(s3_batch, "--deep") == (0, {**clean, "objects": {"checked": 4, "decoded": 4, "unchanged": 0}})
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
    checked = {"checked": 4, "decoded": 0, "unchanged": 0}
    assert reconciled(s3_batch) == (1, {"findings": [finding], "clean": False, "objects": checked})
    assert reconciled(s3_batch, "--repair") == (
        0,
        {"findings": [{**finding, "repaired": True}], "clean": True, "objects": checked},
    )
    assert next(i for i in s3_batch.status_items() if i["item_id"] == "garden.jpeg")["state"] == "queued"
    assert reconciled(s3_batch) == (0, {**clean, "objects": {**checked, "checked": 3}})


def test_a_damaged_object_in_a_bucket_is_found_by_head_or_only_by_deep(s3_batch: S3Batch) -> None:
    living, garden = (
        next(i for i in s3_batch.status_items() if i["item_id"] == name) for name in ("rooms/living.jpg", "garden.jpeg")
    )
    published = len(get_raw(s3_batch.bucket, s3_batch.key(living["object_path"]))[0])
    put_raw(s3_batch.bucket, s3_batch.key(living["object_path"]), b"not an image", "image/jpeg")  # a user's bytes
    data, attributes = get_raw(s3_batch.bucket, s3_batch.key(garden["object_path"]))
    rotten = data[:100] + bytes(b ^ 0xFF for b in data[100:200]) + data[200:]  # same size, checksum kept: bit rot
    kept = {"Content-Type": "image/jpeg", "sha256": attributes["sha256"]}
    obstore.put(s3_batch.bucket, s3_batch.key(garden["object_path"]), rotten, attributes=kept, use_multipart=False)
    wrong_size = ("object_invalid", "rooms/living.jpg", f"the object is 12 bytes, {published} were published")
    code, found = reconciled(s3_batch)
    assert code == 1 and [(f["kind"], f["item_id"], f["detail"]) for f in found["findings"]] == [wrong_size]
    code, deep = reconciled(s3_batch, "--deep")
    damaged = "the object holds bytes that no longer match the checksum kept with it (damaged)"
    assert code == 1 and sorted((f["kind"], f["item_id"], f["detail"]) for f in deep["findings"]) == [
        ("object_invalid", "garden.jpeg", damaged),
        wrong_size,
    ]
    assert deep["objects"] == {"checked": 4, "decoded": 3, "unchanged": 0}
