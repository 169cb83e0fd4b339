"""``thumbctl submit`` into an S3 store and an S3 OUT, and the two mixed cases, end to end.

Against the test process's SeaweedFS (``s3_server``, one per test process), each test under a fresh
prefix of the bucket. A submit and its re-submit run as real processes (``python -m thumbctl``), for
the summary a foreground run prints; the other cases record and render in the test's process
(tests/inprocess). What a user sees is checked: the objects and names in the bucket with the right
bytes, the batch's manifest and contact sheet in OUT, ``s3://`` locations in the JSON and the printed
summary, a re-submit that publishes nothing new, a user's object at a name (``name_taken``, then
``--overwrite``), a crop fix republished over the recorded version, and a bucket that is missing
refused before any batch is recorded.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import obstore
import pytest

from harness import Thumbctl
from inprocess import json_here, submit_here
from s3 import BUCKET, WeedServer, free_ports, get_raw, put_raw, raw_store, weed_binary

ONE_RATIO = ("-r", "1:1", "-w", "1")
HEAD = f"s3://{BUCKET}/"


def read(raw: object, location: str) -> bytes | None:
    """The bytes at an object's or a name's location: a key of the test bucket, or a local file."""
    if location.startswith(HEAD):
        found = get_raw(raw, location[len(HEAD) :])
        return None if found is None else found[0]
    path = Path(location)
    return path.read_bytes() if path.is_file() else None


def listing(raw: object, prefix: str) -> dict[str, tuple[str | None, object]]:
    """Every key under ``prefix`` with its ETag and time: a key written again gets a new time."""
    return {m["path"]: (m["e_tag"], m["last_modified"]) for batch in obstore.list(raw, prefix) for m in batch}


def published(raw: object, doc: dict) -> dict[str, bytes]:
    """The batch's names and their bytes, each checked to hold exactly its object's bytes."""
    manifest = json.loads(read(raw, doc["manifest_path"]) or b"null")
    assert manifest is not None, f"no manifest at {doc['manifest_path']}"
    names = {}
    for item in manifest["items"]:
        assert item["state"] == "succeeded", item
        name, obj = (located(doc["out_dir"], item[key]) for key in ("friendly_path", "object_path"))
        data = read(raw, name)
        assert data is not None and data == read(raw, obj), name
        names[name] = data
    return names


def located(out: str, path: str) -> str:
    """A path of a batch manifest as it is: an ``s3://`` location, or a local one relative to OUT."""
    return path if path.startswith(HEAD) else os.path.normpath(os.path.join(out, path))


def locations(layout: str, s3_url: str, tmp_path: Path) -> tuple[str, str]:
    """(store, OUT) of a layout: ``both`` in the bucket, only the ``store``, or only ``out``."""
    store = f"{s3_url}/store" if layout in ("both", "store") else str(tmp_path / "store")
    out = f"{s3_url}/out" if layout in ("both", "out") else str(tmp_path / "out")
    return store, out


def submit_and_resubmit(cli: Thumbctl, raw: object, photos: Path, store: str, out: str) -> None:
    first = cli.json("submit", photos, "--out", out, *ONE_RATIO)
    batch = first["batch_id"]
    assert (first["state"], first["counts"]["succeeded"], first["out_dir"]) == ("succeeded", 4, out)
    assert first["manifest_path"] == f"{out}/batches/{batch}.json"
    assert first["sheet"] == f"{out}/batches/catalogue.html"  # the catalogue, this batch's changes first
    assert read(raw, f"{out}/batches/{batch}.html") is not None  # and the batch's own, its history
    names = published(raw, first)
    assert len(names) == 4 and all(name.startswith(f"{out}/") for name in names)
    assert all(item.startswith(f"{store}/objects/") for item in _object_paths(raw, first))
    sheet = read(raw, first["sheet"])
    assert sheet is not None and b"Catalogue" in sheet and b"s3://" not in sheet.split(b"<main", 1)[-1]

    before = listing(raw, out[len(HEAD) :]) if out.startswith(HEAD) else None
    again = cli.run("submit", photos, "--out", out, *ONE_RATIO)
    assert again.returncode == 0, again.stderr
    shown = out if out.startswith(HEAD) else Path(out).as_uri()
    assert f"contact sheet {shown}/batches/catalogue.html" in again.stdout
    assert f"thumbnails in {out}, manifest {out}/batches/{batch}.json" in again.stdout
    assert published(raw, first) == names
    if before is not None:
        after = listing(raw, out[len(HEAD) :])

        def thumbnails(listed: dict) -> dict:  # not the batch documents nor the site manifest
            return {k: v for k, v in listed.items() if "/batches/" not in k and not k.endswith("/thumbctl.json")}

        assert thumbnails(after) == thumbnails(before)  # nothing published again


def _object_paths(raw: object, doc: dict) -> list[str]:
    manifest = json.loads(read(raw, doc["manifest_path"]) or b"{}")
    return [located(doc["out_dir"], item["object_path"]) for item in manifest["items"]]


def test_a_submit_into_an_s3_store_and_out_publishes_there_and_a_resubmit_publishes_nothing(
    ledger_url: str, s3_server, s3_env: dict[str, str], s3_url: str, photos: Path, tmp_path: Path
) -> None:
    store, out = locations("both", s3_url, tmp_path)
    cli = Thumbctl(ledger_url, env={"THUMBCTL_STORE": store})
    submit_and_resubmit(cli, raw_store(s3_server), photos, store, out)
    assert not (tmp_path / "s3:").exists() and not Path("s3:").exists()


@pytest.mark.parametrize("layout", ["store", "out"])
def test_an_s3_store_with_a_local_out_and_the_reverse(
    layout: str, s3_server, s3_env: dict[str, str], s3_url: str, photos: Path, tmp_path: Path
) -> None:
    store, out = locations(layout, s3_url, tmp_path)
    cli = Thumbctl(tmp_path / "ledger.db", env={"THUMBCTL_STORE": store})
    submit_and_resubmit(cli, raw_store(s3_server), photos, store, out)


def test_a_users_object_at_a_name_is_name_taken_until_overwrite_and_a_crop_fix_replaces_ours(
    ledger_url: str, s3_server, s3_env: dict[str, str], s3_url: str, photos: Path, tmp_path: Path
) -> None:
    raw = raw_store(s3_server)
    store, out = locations("both", s3_url, tmp_path)
    cli = Thumbctl(ledger_url, env={"THUMBCTL_STORE": store})
    name = f"{out}/coffee.1x1.jpg"
    put_raw(raw, name[len(HEAD) :], b"the seller's own picture", "image/jpeg")

    taken = submit_here(cli, photos, "--out", out, *ONE_RATIO, states=("partial",))
    assert (taken["state"], taken["counts"]["succeeded"], taken["counts"]["failed"]) == ("partial", 3, 1)
    assert taken["failures"] == [
        {
            "item_id": "coffee.png",
            "ratio": "1:1",
            "size": 512,
            "format": "jpeg",
            "error_code": "name_taken",
            "detail": f"{name} is a file thumbctl did not publish; it is left as it is (--overwrite replaces it)",
        }
    ]
    assert read(raw, name) == b"the seller's own picture"

    overwritten = submit_here(cli, photos, "--out", out, *ONE_RATIO, "--overwrite")
    assert (overwritten["state"], overwritten["overwritten"]) == ("succeeded", 1)
    names = published(raw, overwritten)
    assert names[name] != b"the seller's own picture"

    fixed = json_here(cli, "focus", photos / "coffee.png", "--ratio", "1:1", "--at", "0.05,0.95")
    assert fixed["set"] == ["1:1"]
    after = submit_here(cli, photos, "--out", out, *ONE_RATIO)
    assert (after["state"], after["replaced"]) == ("succeeded", 1)
    republished = published(raw, after)
    assert republished[name] != names[name]
    assert {k: v for k, v in republished.items() if k != name} == {k: v for k, v in names.items() if k != name}


@pytest.mark.parametrize("flag", ["--out", "--store"])
def test_a_missing_bucket_is_refused_before_any_batch_is_recorded(
    flag: str, s3_env: dict[str, str], photos: Path, tmp_path: Path
) -> None:
    missing = f"s3://no-bucket-{uuid.uuid4().hex[:8]}/x"
    cli = Thumbctl(tmp_path / "ledger.db")
    args = ["--out", str(tmp_path / "out"), flag, missing] if flag == "--store" else ["--out", missing]
    refused = json_here(cli, "submit", photos, *args, *ONE_RATIO, "--detach", codes=(2,))
    assert refused["error"]["code"] == "bucket_missing" and refused["error"]["exit_code"] == 2
    assert missing.split("/")[2] in refused["error"]["message"]
    assert json_here(cli, "status") == {"batches": []}


def test_config_shows_the_s3_endpoint_and_region_and_never_a_credential(tmp_path: Path) -> None:
    secret = "wJalrXUtnFEMI-not-shown"
    env = {"THUMBCTL_S3_ENDPOINT": "http://127.0.0.1:8333", "THUMBCTL_S3_REGION": "eu-central-1"}
    credentials = {"AWS_SECRET_ACCESS_KEY": secret, "AWS_ACCESS_KEY_ID": "AKIA1"}
    cli = Thumbctl(tmp_path / "ledger.db", env={**env, **credentials})
    shown = json_here(cli, "config")["settings"]
    assert shown["s3_endpoint"] == {"value": "http://127.0.0.1:8333", "source": "env THUMBCTL_S3_ENDPOINT"}
    assert shown["s3_region"] == {"value": "eu-central-1", "source": "env THUMBCTL_S3_REGION"}
    table = cli.invoke("config")
    assert "http://127.0.0.1:8333" in table.stdout and secret not in table.stdout + table.stderr
    assert "AKIA1" not in table.stdout + table.stderr

    userinfo_env = {**env, **credentials, "THUMBCTL_S3_ENDPOINT": f"http://key:{secret}@127.0.0.1:8333"}
    userinfo = Thumbctl(tmp_path / "ledger.db", env=userinfo_env).invoke("config", "--json")
    assert userinfo.returncode == 2 and secret not in userinfo.stdout + userinfo.stderr
    assert json.loads(userinfo.stdout)["error"] == {
        "code": "config_error",
        "message": "THUMBCTL_S3_ENDPOINT: must be an http:// or https:// URL without credentials in it",
        "transient": False,
        "exit_code": 2,
    }


#: The S3 retry window these cases set (THUMBCTL_S3_RETRY; the default, 20 s, rides out a server
#: restart), and how long a command may take to say that the server cannot be reached: that window,
#: as for the OUT probe, and the command's start. Without the setting honoured a case takes 20 s.
RETRY_WINDOW = 2
UNREACHABLE_WITHIN = RETRY_WINDOW + 8


@pytest.fixture(params=["closed-port", "stopped-server"])
def unreachable(request: pytest.FixtureRequest, s3_env: dict[str, str]) -> dict[str, str]:
    """The test's AWS variables with an endpoint nothing answers: a loopback port nobody listens
    on, or a SeaweedFS that served and was stopped."""
    if request.param == "closed-port":
        endpoint = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_ports(1)[0]}"}
    else:
        server = WeedServer(weed_binary())
        server.stop()
        endpoint = server.env()
    return {**s3_env, **endpoint, "THUMBCTL_S3_RETRY": str(RETRY_WINDOW)}


@pytest.mark.parametrize("flag", ["--store", "--out"])
def test_an_unreachable_endpoint_is_storage_unreachable_within_the_retry_window_and_records_nothing(
    flag: str, unreachable: dict[str, str], photos: Path, tmp_path: Path
) -> None:
    """Exit 75 (try again later), for the store as for OUT: the endpoint is no setting to fix (2)."""
    location = f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}"
    args = ["--out", str(tmp_path / "out"), "--store", location] if flag == "--store" else ["--out", location]
    cli = Thumbctl(tmp_path / "ledger.db", env=unreachable)
    started = time.monotonic()
    refused = json_here(cli, "submit", photos, *args, *ONE_RATIO, "--detach", codes=(75,))
    elapsed = time.monotonic() - started
    assert refused["error"]["code"] == "storage_unreachable" and refused["error"]["exit_code"] == 75, refused
    assert "cannot be reached" in refused["error"]["message"]
    assert elapsed < UNREACHABLE_WITHIN, elapsed
    assert json_here(cli, "status") == {"batches": []}
