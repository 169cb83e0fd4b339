"""Names stay in their lane: thumbnails never land among the batch documents or take a non-image
extension, what thumbctl wrote is never read back as a source, and a copy a user puts back at a
name is never adopted as thumbctl's. A local OUT and, where storage matters, an S3 OUT on the test
process's SeaweedFS. Batches are recorded and rendered in the test's process (tests/inprocess), but
a replay's and a mirror's (``--delete``) summaries come from real foreground runs (``python -m
thumbctl``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness import Thumbctl
from inprocess import json_here, render_here, submit_here
from s3 import BUCKET, get_raw, put_raw, raw_store
from support import make_image

ONE_RATIO = ("-r", "1:1", "-w", "1")
HEAD = f"s3://{BUCKET}/"


@pytest.fixture
def cli(tmp_path: Path) -> Thumbctl:
    return Thumbctl(tmp_path / "ledger.db")


def photo(path: Path, seed: int = 1) -> Path:
    return make_image(path, (300, 200), "JPEG", seed=seed)


def failures_by_id(doc: dict) -> dict[str, dict]:
    return {failure["item_id"]: failure for failure in doc["failures"]}


def documents_and_names(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and ".tmp" not in p.parts)


# -- names out of their lane fail their items ---------------------------------------------------


def test_a_source_folder_named_batches_fails_only_its_items_bad_name(cli: Thumbctl, tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    photo(src / "batches" / "x.jpg")
    photo(src / "a.jpg", seed=2)
    doc = submit_here(cli, src, "--out", out, *ONE_RATIO, states=("partial",))
    assert (doc["state"], doc["counts"]["succeeded"], doc["counts"]["failed"]) == ("partial", 1, 1)
    failure = failures_by_id(doc)["batches/x.jpg"]
    assert failure["error_code"] == "bad_name"
    assert "batches/x.1x1.jpg lies in OUT/batches/" in failure["detail"] and "--name" in failure["detail"]
    batch = doc["batch_id"]
    assert cli.invoke("sheet", batch).returncode == 0  # the page a foreground run's end writes
    assert documents_and_names(out) == ["a.1x1.jpg", f"batches/{batch}.html", f"batches/{batch}.json", "thumbctl.json"]
    retried = cli.invoke("retry", batch, "--detach")
    render_here(cli.db, batch)
    assert not (out / "batches" / "x.1x1.jpg").exists(), retried.stderr  # nothing sends it to a worker


def test_a_template_that_leads_some_names_into_batches_fails_only_those(cli: Thumbctl, tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    photo(src / "batches.jpg")
    photo(src / "sofa.jpg", seed=2)
    doc = submit_here(cli, src, "--out", out, *ONE_RATIO, "--name", "{stem}/{ratio}.{ext}", states=("partial",))
    assert (doc["state"], doc["counts"]["succeeded"], doc["counts"]["failed"]) == ("partial", 1, 1)
    assert failures_by_id(doc)["batches.jpg"]["error_code"] == "bad_name"
    assert (out / "sofa" / "1x1.jpg").is_file() and not (out / "batches" / "1x1.jpg").exists()


@pytest.mark.parametrize("template", ["{path}.html", "{path}.{ratio}.json", "thumbs/{stem}.svg"])
def test_a_template_giving_every_name_a_non_image_extension_is_a_usage_error(
    cli: Thumbctl, tmp_path: Path, template: str
) -> None:
    photo(tmp_path / "src" / "a.jpg")
    done = cli.invoke("submit", tmp_path / "src", "--out", tmp_path / "out", *ONE_RATIO, "--name", template, "--detach")
    assert done.returncode == 2, done.stderr
    extension = template.rsplit(".", 1)[1]
    assert done.stderr.strip().splitlines() == [
        f"error [usage] --name: name template {template!r}: every name has the extension .{extension} "
        f"({done.stderr.split('(', 1)[1].split(')', 1)[0]}), not a raster image's; end it in .{{ext}}"
    ]
    assert not (tmp_path / "out").exists()


def test_a_name_whose_source_path_gives_it_a_non_image_extension_fails_bad_name(cli: Thumbctl, tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    photo(src / "page.html.jpg")
    photo(src / "sofa.jpg", seed=2)
    doc = submit_here(cli, src, "--out", out, *ONE_RATIO, "--name", "{path}", states=("partial",))
    failure = failures_by_id(doc)["page.html.jpg"]
    assert failure["error_code"] == "bad_name" and "page.html has the extension .html (text/html)" in failure["detail"]
    assert (out / "sofa").is_file() and not (out / "page.html").exists()


def test_an_s3_names_content_type_follows_the_image_format(
    s3_server, s3_env: dict[str, str], s3_url: str, tmp_path: Path
) -> None:
    raw = raw_store(s3_server)
    cli = Thumbctl(tmp_path / "ledger.db", env={"THUMBCTL_STORE": f"{s3_url}/store"})
    photo(tmp_path / "src" / "a.jpg")
    out = f"{s3_url}/out"
    submit_here(cli, tmp_path / "src", "--out", out, *ONE_RATIO, "--format", "webp", "--name", "{path}.{ratio}")
    found = get_raw(raw, f"{out}/a.1x1"[len(HEAD) :])
    assert found is not None and found[0][8:12] == b"WEBP"
    assert found[1]["Content-Type"] == "image/webp"


# -- what thumbctl wrote is never a source ------------------------------------------------------


def test_a_scan_of_an_earlier_out_leaves_its_thumbnails_and_documents_out(cli: Thumbctl, tmp_path: Path) -> None:
    site = tmp_path / "site"
    photo(site / "src" / "a.jpg")
    first = submit_here(cli, site / "src", "--out", site, *ONE_RATIO)
    assert (site / "a.1x1.jpg").is_file() and first["state"] == "succeeded"

    included = ("--include", "*.jpg", "--include", "*.json")
    done = cli.invoke("submit", site, "--out", site / "out3", *ONE_RATIO, *included, "--detach")
    assert done.returncode == 0, done.stderr
    render_here(cli.db, done.stdout.split("Accepted batch ", 1)[1].split(":", 1)[0])
    assert "left out: 1 thumbnail, 1 batch document thumbctl wrote (what thumbctl publishes is never a source)" in (
        done.stderr + done.stdout
    )
    assert documents_and_names(site / "out3") == sorted(
        ["src/a.1x1.jpg", "thumbctl.json", *(f"batches/{p.name}" for p in (site / "out3" / "batches").iterdir())]
    )
    assert not (site / "out3" / "a.1x1.1x1.jpg").exists()


def test_a_scan_that_finds_only_what_thumbctl_wrote_is_an_empty_batch(cli: Thumbctl, tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    photo(src / "a.jpg")
    submit_here(cli, src, "--out", out, *ONE_RATIO)
    refused = json_here(cli, "submit", out, "--out", tmp_path / "out2", *ONE_RATIO, "--detach", codes=(65,))
    assert refused["error"]["code"] == "empty_batch"
    assert "thumbnails or batch documents thumbctl wrote, which are never sources" in refused["error"]["message"]


# -- a copy put back at a name stays the user's --------------------------------------------------


def put_back_locally(name: Path) -> None:
    """A user's tool writes the same bytes again at ``name``: a new file renamed over it (rsync's way)."""
    copy = name.with_name(f".{name.name}.copy")
    shutil.copyfile(name, copy)
    os.replace(copy, name)


def test_a_replay_never_adopts_a_copy_put_back_at_a_local_name_and_the_mirror_keeps_it(
    cli: Thumbctl, tmp_path: Path
) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    photo(src / "a.jpg")
    photo(src / "b.jpg", seed=2)
    submit_here(cli, src, "--out", out, *ONE_RATIO)
    name = out / "a.1x1.jpg"
    put_back_locally(name)
    theirs = (name.read_bytes(), name.stat().st_ino)

    replay = cli.run("submit", src, "--out", out, *ONE_RATIO)
    assert replay.returncode == 0, replay.stderr
    (src / "a.jpg").unlink()
    mirror = cli.run("submit", src, "--out", out, *ONE_RATIO, "--delete")
    assert mirror.returncode == 0, mirror.stderr
    assert name.exists() and (name.read_bytes(), name.stat().st_ino) == theirs
    assert f"kept {name}" in mirror.stdout + mirror.stderr
    assert "holds the same bytes, but is not the file thumbctl published there" in replay.stderr


def test_a_replay_never_adopts_a_copy_put_back_at_an_s3_name_and_the_mirror_keeps_it(
    s3_server, s3_env: dict[str, str], s3_url: str, tmp_path: Path
) -> None:
    raw = raw_store(s3_server)
    cli = Thumbctl(tmp_path / "ledger.db", env={"THUMBCTL_STORE": f"{s3_url}/store"})
    src, out = tmp_path / "src", f"{s3_url}/out"
    photo(src / "a.jpg")
    photo(src / "b.jpg", seed=2)
    submit_here(cli, src, "--out", out, *ONE_RATIO)
    key = f"{out}/a.1x1.jpg"[len(HEAD) :]
    found = get_raw(raw, key)
    assert found is not None
    put_raw(raw, key, found[0], "image/jpeg")  # the same bytes uploaded again by the user

    replay = cli.run("submit", src, "--out", out, *ONE_RATIO)
    assert replay.returncode == 0, replay.stderr
    (src / "a.jpg").unlink()
    mirror = cli.run("submit", src, "--out", out, *ONE_RATIO, "--delete")
    assert mirror.returncode == 0, mirror.stderr
    after = get_raw(raw, key)
    assert after is not None and after[0] == found[0]
    assert "holds the same bytes, but is not the file thumbctl published there" in replay.stderr


def test_the_cron_repair_never_adopts_a_copy_put_back_at_an_s3_name_an_earlier_batch_published(
    s3_server, s3_env: dict[str, str], s3_url: str, tmp_path: Path
) -> None:
    raw = raw_store(s3_server)
    cli = Thumbctl(tmp_path / "ledger.db", env={"THUMBCTL_STORE": f"{s3_url}/store"})
    src, out = tmp_path / "src", f"{s3_url}/out"
    photo(src / "a.jpg")
    photo(src / "b.jpg", seed=2)
    photo(src / "raw" / "r.jpg", seed=3)
    submit_here(cli, src, "--out", out, *ONE_RATIO)
    submit_here(cli, src, "--out", out, *ONE_RATIO, "--exclude", "raw/*")  # another batch, the same objects
    key = f"{out}/a.1x1.jpg"[len(HEAD) :]
    found = get_raw(raw, key)
    assert found is not None
    put_raw(raw, key, found[0], "image/jpeg")  # the same bytes uploaded again by the user
    theirs = get_raw(raw, key)

    repair = cli.invoke("reconcile", "--repair", "--json")
    assert repair.returncode == 1, repair.stdout + repair.stderr
    assert [(f["kind"], f["repaired"]) for f in json.loads(repair.stdout)["findings"]] == [
        ("thumbnail_modified", False)
    ]
    assert get_raw(raw, key) == theirs
    (src / "a.jpg").unlink()
    mirror = cli.run("submit", src, "--out", out, *ONE_RATIO, "--exclude", "raw/*", "--delete")
    assert mirror.returncode == 0, mirror.stderr
    assert get_raw(raw, key) == theirs
