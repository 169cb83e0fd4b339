"""``OUT/thumbctl.json``: the whole live catalogue under one name, rewritten with a higher generation
after every run that changes OUT, never rolled back, never over a user's file, never expired."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.review.sitemanifest import NEWER, TAKEN, Decision, write_site_manifest
from thumbctl.storage.outputs import LocalOutputTarget

from conftest import SAMPLE_IMAGES
from harness import Thumbctl
from inprocess import json_here, submit_here

RUN = ("-r", "1:1", "-r", "16:9", "--size", "96")


def site(out_dir: Path) -> dict:
    return json.loads((out_dir / "thumbctl.json").read_text(encoding="utf-8"))


def test_a_run_writes_every_live_name_with_its_markup_and_the_next_change_a_higher_generation(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(cli, photos, "--out", out_dir, *RUN)
    first = site(out_dir)
    assert (first["generator"], first["generation"]) == ("thumbctl", 1)
    names = {f["path"] for p in first["pictures"] for f in p["files"]}
    live = {e["name"] for e in json_here(cli, "catalogue", out_dir)["entries"]}
    assert names == live and len(live) == 8  # every live name, relative to OUT
    picture = next(p for p in first["pictures"] if p["item_id"] == "coffee.png" and p["ratio"] == "1:1")
    assert picture["srcset"] == {"jpeg": "coffee.1x1.jpg 96w"} and picture["picture"].startswith("<picture>")
    assert picture["dominant_colour"].startswith("#") and picture["lqip"].startswith("data:image/")
    assert str(tmp_path) not in (out_dir / "thumbctl.json").read_text(encoding="utf-8")
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Portrait_8.jpg", photos / "new.jpg")
    submit_here(cli, photos, "--out", out_dir, *RUN)
    second = site(out_dir)
    assert second["generation"] == 2 and len({(p["item_id"], p["ratio"]) for p in second["pictures"]}) == 10


def document(ledger: str) -> Callable[[int], dict]:
    return lambda generation: {"generator": "thumbctl", "generation": generation, "ledger": ledger}


def test_an_older_generation_never_replaces_a_newer_one_nor_a_users_file(tmp_path: Path) -> None:
    out = LocalOutputTarget(str(tmp_path))
    held = tmp_path / "thumbctl.json"
    assert out.swap_document("thumbctl.json", Decision(5, "L", document("L")), 1 << 20) is None
    assert out.swap_document("thumbctl.json", Decision(3, "L", document("L")), 1 << 20) == NEWER  # this ledger's
    assert json.loads(held.read_text())["generation"] == 5
    other = Decision(2, "M", document("M"))  # another ledger's (the first one lost): its count goes on
    assert out.swap_document("thumbctl.json", other, 1 << 20) is None and other.written == 6
    assert json.loads(held.read_text()) == {"generator": "thumbctl", "generation": 6, "ledger": "M"}
    held.write_text('{"my": "site config"}')
    assert out.swap_document("thumbctl.json", Decision(9, "M", document("M")), 1 << 20) == TAKEN
    assert held.read_text() == '{"my": "site config"}'


def test_a_users_own_thumbctl_json_is_left_with_a_warning_and_exit_1(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    out_dir.mkdir()
    (out_dir / "thumbctl.json").write_text("my site's own settings\n")
    cli = Thumbctl(tmp_path / "ledger.db")
    done = cli.invoke("submit", photos, "--out", out_dir, *RUN, "-w", "1")
    assert done.returncode == 1, done.stderr
    assert "warning [document_name_taken]" in done.stderr and "thumbctl.json is not thumbctl's" in done.stderr
    assert (out_dir / "thumbctl.json").read_text() == "my site's own settings\n"
    assert json_here(cli, "status")["batches"][0]["state"] == "succeeded"  # the thumbnails are all there


def test_gc_never_expires_it_and_a_mirror_rewrites_it_without_the_removed_names(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(cli, photos, "--out", out_dir, *RUN)
    assert json_here(cli, "gc", "--older-than", "0s")["manifests_removed"] == 1
    assert site(out_dir)["generation"] == 1
    (photos / "coffee.png").unlink()
    mirrored = cli.invoke("submit", photos, "--out", out_dir, *RUN, "-w", "1", "--delete", "--json")
    assert mirrored.returncode == 0, mirrored.stderr
    after = site(out_dir)
    assert after["generation"] == 2 and {p["item_id"] for p in after["pictures"]} == {
        "garden.jpeg",
        "rooms/kitchen.webp",
        "rooms/living.jpg",
    }


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_generations_are_counted_per_out_in_the_ledger(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = str(tmp_path / "ledger.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    with Ledger(db) as ledger:
        first = write_site_manifest(ledger, str(tmp_path / "a"))
        again = write_site_manifest(ledger, str(tmp_path / "a"))
        other = write_site_manifest(ledger, str(tmp_path / "b"))
    assert (first.generation, again.generation, other.generation) == (1, 2, 1)
    assert (first.kept, again.kept) == (None, None)
    assert json.loads((tmp_path / "a" / "thumbctl.json").read_text())["pictures"] == []


def test_sizes_and_base_url_change_the_documents_only_and_a_replay_rewrites_them(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    markup = ("--sizes", "(min-width: 900px) 33vw, 100vw", "--base-url", "https://cdn.example.com/img")
    first = submit_here(cli, photos, "--out", out_dir, *RUN, *markup)
    picture = next(p for p in site(out_dir)["pictures"] if p["item_id"] == "coffee.png" and p["ratio"] == "1:1")
    assert picture["srcset"] == {"jpeg": "https://cdn.example.com/img/coffee.1x1.jpg 96w"}
    assert 'sizes="(min-width: 900px) 33vw, 100vw"' in picture["picture"]
    assert picture["files"][0]["path"] == "coffee.1x1.jpg"  # the file's own place stays relative to OUT
    manifest = json.loads((out_dir / "batches" / f"{first['batch_id']}.json").read_text(encoding="utf-8"))
    assert manifest["pictures"][0]["files"][0]["url"].startswith("https://cdn.example.com/img/")
    html = cli.invoke("status", first["batch_id"], "--html").stdout
    assert 'src="https://cdn.example.com/img/' in html and "33vw" in html
    keys = {i["derivative_key"] for i in json_here(cli, "status", first["batch_id"], "--items")["items"]}
    generation = site(out_dir)["generation"]
    same = cli.invoke("submit", photos, "--out", out_dir, *RUN, *markup, "-w", "1", "--json")  # a plain replay
    assert json.loads(same.stdout)["replayed"] is True and site(out_dir)["generation"] == generation
    again = json.loads(cli.invoke("submit", photos, "--out", out_dir, *RUN, "-w", "1", "--json").stdout)  # defaults
    assert again["replayed"] is True and again["batch_id"] == first["batch_id"]  # the same request: nothing renders
    assert {i["derivative_key"] for i in json_here(cli, "status", first["batch_id"], "--items")["items"]} == keys
    plain = next(p for p in site(out_dir)["pictures"] if p["item_id"] == "coffee.png" and p["ratio"] == "1:1")
    assert plain["srcset"] == {"jpeg": "coffee.1x1.jpg 96w"} and 'sizes="auto, ' in plain["picture"]
    assert site(out_dir)["generation"] == generation + 1
    manifest = json.loads((out_dir / "batches" / f"{first['batch_id']}.json").read_text(encoding="utf-8"))
    assert manifest["pictures"][0]["files"][0]["url"] == manifest["pictures"][0]["files"][0]["path"]


def test_a_bad_sizes_or_base_url_is_a_config_error_before_anything_is_recorded(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    for flag, value in (("--sizes", '100vw" onload="x'), ("--base-url", "ftp://cdn.example.com/")):
        refused = cli.invoke("submit", photos, "--out", out_dir, flag, value, "--json")
        assert refused.returncode == 2, refused.stderr
    assert not (tmp_path / "ledger.db").exists()
