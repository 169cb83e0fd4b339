"""Crop fixes travel with the photos: ``thumbctl focus`` writes ``thumbctl-focus.json`` at the source
root, and every submit of that root reads it. A new ledger applies every fix, an entry removed from
the file clears its fix, a retouch keeps its fix, another picture at the same path does not and the
submit says so (summary, JSON, sheet), a manifest's ``focus`` wins, and a file thumbctl did not
write is never read as one nor written over."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image, ImageEnhance

from thumbctl.config.s3location import parse_s3

from conftest import SAMPLE_IMAGES
from harness import Thumbctl
from inprocess import json_here, render_here
from s3 import get_raw, put_raw, raw_store

SMART = "-r", "4:3,1:1", "-w", "1"
FIXED = "0.05,0.95"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    root = tmp_path / "photos"
    root.mkdir()
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg", root / "sofa.jpg")
    shutil.copy(SAMPLE_IMAGES / "public-domain" / "sk-coffee.png", root / "coffee.png")
    return root


@pytest.fixture
def cli(ledger_url: str, tmp_path: Path) -> Thumbctl:
    return Thumbctl(ledger_url, store=tmp_path / "store")


def submitted(cli: Thumbctl, source: Path | str, out: Path, *args: str, code: int = 0) -> tuple[dict, str]:
    """The submit's JSON (its ``fix_file`` included) and stderr, the batch rendered in this process."""
    done = cli.invoke("submit", source, "--out", out, *SMART, *args, "--detach", "--json")
    assert done.returncode == code, (done.returncode, done.stderr)
    if code:
        return {}, done.stderr
    batch = json.loads(done.stdout)
    render_here(cli.db, batch["batch_id"])
    return batch, done.stderr


def window(cli: Thumbctl, out: Path, name: str) -> list[int]:
    """The crop window the live thumbnail ``name`` was cut from, as the catalogue records it."""
    entries = json_here(cli, "catalogue", out)["entries"]
    (entry,) = [e for e in entries if e["name"].endswith(name)]
    return entry["crop"]["box"]


def fix_file(root: Path) -> dict:
    return json.loads((root / "thumbctl-focus.json").read_text())


def test_focus_writes_the_fix_file_and_a_new_ledger_applies_it(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    submitted(cli, shop, out)
    smart = window(cli, out, "sofa.4x3.jpg")
    shown = json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    assert shown["fix_file"]["file"] == str(shop / "thumbctl-focus.json")
    (photo,) = fix_file(shop)["photos"]
    assert (photo["path"], photo["focus"], photo["width"], photo["height"]) == (
        "sofa.jpg",
        {"4:3": [0.05, 0.95]},
        1800,
        1200,
    )
    assert len(photo["phash"]) == 16
    submitted(cli, shop, out)
    fixed = window(cli, out, "sofa.4x3.jpg")
    assert fixed != smart

    fresh = Thumbctl(tmp_path / "cache-miss.db", store=tmp_path / "store2")  # a CI cache miss: no ledger
    batch, _ = submitted(fresh, shop, tmp_path / "out2")
    assert batch["fix_file"]["applied"] == 1
    assert window(fresh, tmp_path / "out2", "sofa.4x3.jpg") == fixed
    assert json_here(fresh, "focus", shop / "sofa.jpg")["focus_points"][0]["focus"] == [0.05, 0.95]
    assert not any(name.startswith(".") for name in os.listdir(shop)), "no temp file left at the root"


def test_removing_an_entry_from_the_file_clears_the_fix(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    submitted(cli, shop, out)
    smart = window(cli, out, "sofa.4x3.jpg")
    json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    submitted(cli, shop, out)
    assert window(cli, out, "sofa.4x3.jpg") != smart

    doc = fix_file(shop)
    doc["photos"] = []
    (shop / "thumbctl-focus.json").write_text(json.dumps(doc))
    batch, _ = submitted(cli, shop, out)
    assert batch["fix_file"]["cleared"] == 1
    assert window(cli, out, "sofa.4x3.jpg") == smart
    assert json_here(cli, "focus", shop / "sofa.jpg")["focus_points"] == []


def test_a_fix_only_the_ledger_holds_is_not_the_files_to_clear(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)  # before any batch: ledger only
    assert not (shop / "thumbctl-focus.json").exists()
    other = shop / "coffee.png"
    submitted(cli, shop, out)
    json_here(cli, "focus", other, "--ratio", "1:1", "--at", "0.2,0.2")  # now the file exists, without sofa
    assert [p["path"] for p in fix_file(shop)["photos"]] == ["coffee.png"]
    submitted(cli, shop, out)
    assert json_here(cli, "focus", shop / "sofa.jpg")["focus_points"][0]["focus"] == [0.05, 0.95]


def retouched(path: Path, how: str) -> None:
    """The photo at ``path`` saved again as an editor saves it (its EXIF orientation kept): 5 % brighter,
    or another picture of the same size."""
    image = Image.open(path)
    exif = image.info.get("exif", b"")
    if how == "brighter":
        image = ImageEnhance.Brightness(image).enhance(1.05)
    else:
        image = Image.open(SAMPLE_IMAGES / "unsplash" / "seondol-son-skcD9ONunJw.jpg").convert("RGB").resize(image.size)
    image.save(path, "JPEG", quality=88, exif=exif)


def test_a_retouched_photo_keeps_its_fix_and_another_picture_does_not(
    cli: Thumbctl, shop: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    submitted(cli, shop, out)
    json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    submitted(cli, shop, out)
    fixed = window(cli, out, "sofa.4x3.jpg")

    retouched(shop / "sofa.jpg", "brighter")
    batch, stderr = submitted(cli, shop, out)
    assert batch["fix_file"]["carried_over"] == ["sofa.jpg"] and batch["fix_file"]["not_applied"] == []
    assert window(cli, out, "sofa.4x3.jpg") == fixed
    assert json_here(cli, "focus", shop / "sofa.jpg")["focus_points"][0]["focus"] == [0.05, 0.95]

    retouched(shop / "sofa.jpg", "another picture")
    batch, stderr = submitted(cli, shop, out)
    assert batch["fix_file"]["not_applied"] == [{"path": "sofa.jpg", "ratios": ["4:3"], "reason": "picture_changed"}]
    assert "[focus_not_applied] sofa.jpg (4:3): fix for the previous content not applied" in " ".join(stderr.split())
    assert window(cli, out, "sofa.4x3.jpg") != fixed
    sheet = cli.invoke("sheet", "--out", out)
    assert sheet.returncode == 0, sheet.stderr
    page = (out / "batches" / "catalogue.html").read_text()
    assert "fix for the previous content not applied (4:3): another picture" in page
    batch_page = cli.invoke("sheet", batch["batch_id"])
    assert batch_page.returncode == 0, batch_page.stderr
    assert "fix for the previous content not applied" in (out / "batches" / f"{batch['batch_id']}.html").read_text()


def test_a_moved_photo_keeps_its_fix_by_its_content(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    submitted(cli, shop, out)
    json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    submitted(cli, shop, out)
    fixed = window(cli, out, "sofa.4x3.jpg")
    (shop / "rooms").mkdir()
    (shop / "sofa.jpg").rename(shop / "rooms" / "sofa.jpg")
    fresh = Thumbctl(tmp_path / "new.db", store=tmp_path / "store2")
    batch, _ = submitted(fresh, shop, tmp_path / "out2")
    assert batch["fix_file"]["applied"] == 1
    assert window(fresh, tmp_path / "out2", "sofa.4x3.jpg") == fixed


def test_a_manifest_focus_wins_over_the_file(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = shop / "shop.json"
    manifest.write_text(json.dumps([{"id": "sofa", "source": "sofa.jpg"}]))
    submitted(cli, manifest, out)
    json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED, "--root", manifest)
    assert fix_file(shop)["photos"][0]["path"] == "sofa.jpg"
    submitted(cli, manifest, out)
    from_file = window(cli, out, "sofa.4x3.jpg")
    manifest.write_text(json.dumps([{"id": "sofa", "source": "sofa.jpg", "focus": [0.95, 0.05]}]))
    submitted(cli, manifest, out)
    assert window(cli, out, "sofa.4x3.jpg") != from_file


def test_a_file_thumbctl_did_not_write_is_left_alone(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    mine = b'{"my": "notes"}\n'
    (shop / "thumbctl-focus.json").write_bytes(mine)
    batch, stderr = submitted(cli, shop, out)
    assert "not written by thumbctl" in batch["fix_file"]["problem"] and "[focus_file_taken]" in stderr
    done = cli.invoke("focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    assert done.returncode == 1 and "[focus_file_unwritten]" in done.stderr and "not written by thumbctl" in done.stderr
    assert (shop / "thumbctl-focus.json").read_bytes() == mine
    assert json_here(cli, "focus", shop / "sofa.jpg")["focus_points"][0]["focus"] == [0.05, 0.95]  # kept in the ledger


def test_a_damaged_fix_file_stops_the_submit_with_the_line_that_is_wrong(
    cli: Thumbctl, shop: Path, tmp_path: Path
) -> None:
    doc = {
        "generator": "thumbctl",
        "version": 1,
        "photos": [{"path": "sofa.jpg", "digest": "x", "focus": {"4:3": [2, 0]}}],
    }
    (shop / "thumbctl-focus.json").write_text(json.dumps(doc))
    _, stderr = submitted(cli, shop, tmp_path / "out", code=2)
    assert "[bad_focus_file]" in stderr and "photo 1" in stderr and "Traceback" not in stderr
    assert not list((tmp_path / "out").glob("**/*.jpg")), "nothing rendered"


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` made unwritable, for root too (``chattr +i``), else skipped."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", folder], capture_output=True).returncode:
        pytest.skip("the file system cannot make a folder immutable (chattr +i)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", folder], check=True)


def test_a_read_only_root_gives_a_clear_error_and_keeps_the_fix_in_the_ledger(
    cli: Thumbctl, shop: Path, tmp_path: Path
) -> None:
    submitted(cli, shop, tmp_path / "out")
    with read_only(shop):
        done = cli.invoke("focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    assert done.returncode == 1, done.stderr
    message = " ".join(done.stderr.split())
    assert "[focus_file_unwritten]" in message and "cannot be written" in message and "kept in the ledger" in message
    assert "Traceback" not in done.stderr and not (shop / "thumbctl-focus.json").exists()
    assert json_here(cli, "focus", shop / "sofa.jpg")["focus_points"][0]["focus"] == [0.05, 0.95]


def test_export_and_import_move_every_fix_between_the_ledger_and_the_file(
    cli: Thumbctl, shop: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    submitted(cli, shop, out)
    json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    json_here(cli, "focus", shop / "coffee.png", "--ratio", "1:1", "--at", "0.2,0.3")
    written = (shop / "thumbctl-focus.json").read_bytes()
    (shop / "thumbctl-focus.json").unlink()
    exported = json_here(cli, "focus", "--export", "--root", shop)
    assert exported["photos"] == 2 and (shop / "thumbctl-focus.json").read_bytes() == written

    fresh = Thumbctl(tmp_path / "new.db", store=tmp_path / "store2")
    fresh_out = tmp_path / "out2"
    submitted(fresh, shop, fresh_out, "--no-sheet")
    imported = json_here(fresh, "focus", "--import", "--root", shop)
    assert imported["photos"] == 2
    assert json_here(fresh, "focus", shop / "coffee.png")["focus_points"][0]["focus"] == [0.2, 0.3]
    both = cli.invoke("focus", "--export", "--import", "--root", shop)
    assert both.returncode == 2 and "give one" in both.stderr


def test_the_fix_file_of_an_s3_prefix_sits_at_the_prefix(
    cli: Thumbctl, shop: Path, tmp_path: Path, s3_url: str, s3_server
) -> None:
    bucket = raw_store(s3_server)
    photos = f"{s3_url}/photos"
    for photo in shop.iterdir():
        put_raw(bucket, parse_s3(photos).key(photo.name), photo.read_bytes())
    out = tmp_path / "out"
    batch, _ = submitted(cli, photos, out)
    shown = json_here(cli, "focus", f"{photos}/sofa.jpg", "--ratio", "4:3", "--at", FIXED)
    assert shown["fix_file"]["file"] == f"{photos}/thumbctl-focus.json"
    held = get_raw(bucket, parse_s3(photos).key("thumbctl-focus.json"))
    assert held is not None
    (photo,) = json.loads(held[0])["photos"]
    assert (photo["path"], photo["focus"]) == ("sofa.jpg", {"4:3": [0.05, 0.95]})
    submitted(cli, photos, out)
    fixed = window(cli, out, "sofa.4x3.jpg")

    fresh = Thumbctl(tmp_path / "cache-miss.db", store=tmp_path / "store2")
    again, _ = submitted(fresh, photos, tmp_path / "out2")
    assert again["fix_file"]["applied"] == 1 and again["counts"]["queued"] + again["counts"]["succeeded"] == 4
    assert window(fresh, tmp_path / "out2", "sofa.4x3.jpg") == fixed
