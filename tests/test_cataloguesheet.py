"""``thumbctl sheet`` without a batch: the contact sheet of an OUT's whole live catalogue, every photo
with its current crop windows, scores and fix lines, whichever batch made each name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote

from test_sheet import parse

from thumbctl.core.display import score_text

from conftest import SAMPLE_IMAGES
from harness import Thumbctl
from inprocess import json_here, submit_here

RUN = ("-r", "1:1", "-r", "16:9", "--size", "96")


def two_runs(tmp_path: Path, photos: Path, out_dir: Path) -> tuple[Thumbctl, dict, dict]:
    """A first batch over the photos, then one more photo: the second batch reuses every old output."""
    cli = Thumbctl(tmp_path / "ledger.db")
    first = submit_here(cli, photos, "--out", out_dir, *RUN)
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Portrait_8.jpg", photos / "new.jpg")
    second = submit_here(cli, photos, "--out", out_dir, *RUN)
    return cli, first, second


def test_the_sheet_of_an_out_draws_every_live_photo_with_its_windows_reused_or_not(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli, _, _ = two_runs(tmp_path, photos, out_dir)
    written = json_here(cli, "sheet", "--out", out_dir)
    page = out_dir.resolve() / "batches" / "catalogue.html"
    counts = {"sources": 5, "names": 10, "missing": 0, "unknown": 0}
    assert written == {"out": str(out_dir.resolve()), "path": str(page), **counts}
    parser = parse(page.read_text(encoding="utf-8"))
    assert sorted(parser.cards) == ["coffee.png", "garden.jpeg", "new.jpg", "rooms/kitchen.webp", "rooms/living.jpg"]
    entries = json_here(cli, "catalogue", out_dir)["entries"]
    linked = {os.path.realpath(page.parent / unquote(src)) for src in parser.links}
    assert linked == {entry["path"] for entry in entries}
    for entry in entries:  # every name: its window's score and the line that fixes it
        card = entry["source"].removeprefix(str(photos.resolve()) + "/")
        assert score_text(entry["score"]) in parser.card_text[card] and "no crop recorded" not in parser.card_text[card]
        assert any(f"--ratio {entry['ratio']} --at " in line for line in parser.recrops[card])
    header = page.read_text(encoding="utf-8").split("</header>")[0]
    assert str(tmp_path) not in header  # no absolute local path in what the page says of OUT


def test_changed_and_sort_narrow_and_order_the_sheet(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    cli, first, _ = two_runs(tmp_path, photos, out_dir)
    written = json_here(cli, "sheet", "--out", out_dir, "--changed", first["batch_id"], "-o", tmp_path / "new.html")
    assert (written["sources"], written["names"], written["path"]) == (1, 2, str(tmp_path / "new.html"))
    assert parse((tmp_path / "new.html").read_text(encoding="utf-8")).cards == ["new.jpg"]
    json_here(cli, "sheet", "--out", out_dir, "--sort", "score")
    parser = parse((out_dir / "batches" / "catalogue.html").read_text(encoding="utf-8"))
    worst = min(json_here(cli, "catalogue", out_dir)["entries"], key=lambda e: e["score"])
    assert worst["source"].endswith("/" + parser.cards[0])


def test_the_out_is_the_only_one_or_must_be_named_and_changed_needs_no_batch(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    first = submit_here(cli, photos, "--out", out_dir, *RUN)
    assert json_here(cli, "sheet")["out"] == str(out_dir.resolve())
    submit_here(cli, photos, "--out", tmp_path / "site", "-r", "1:1", "--size", "64")
    ambiguous = cli.invoke("sheet", "--json")
    assert ambiguous.returncode == 2 and json.loads(ambiguous.stdout)["error"]["code"] == "out_required"
    mixed = cli.invoke("sheet", first["batch_id"], "--changed", "1h", "--json")
    assert mixed.returncode == 2 and "--changed" in json.loads(mixed.stdout)["error"]["message"]


def test_a_submit_links_the_catalogues_sheet_with_the_photos_it_changed_first(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(cli, photos, "--out", out_dir, *RUN)
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Portrait_8.jpg", photos / "zz-new.jpg")  # last by name
    done = cli.invoke("submit", photos, "--out", out_dir, *RUN, "-w", "1", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    page = out_dir.resolve() / "batches" / "catalogue.html"
    assert doc["sheet"] == str(page) and (page.parent / f"{doc['batch_id']}.html").is_file()
    text = page.read_text(encoding="utf-8")
    cards = parse(text).cards
    assert cards[0] == "zz-new.jpg" and len(cards) == 5  # the change first, then every other live photo
    assert "<b>1</b> changed by this run, shown first" in text


def test_a_sheet_narrowed_by_changed_never_replaces_the_whole_catalogues(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli, first, _ = two_runs(tmp_path, photos, out_dir)
    whole = json_here(cli, "sheet", "--out", out_dir)
    narrowed = json_here(cli, "sheet", "--out", out_dir, "--changed", first["batch_id"])
    assert narrowed["path"] == str(out_dir.resolve() / "batches" / "catalogue-changed.html")
    assert (narrowed["sources"], whole["sources"]) == (1, 5)
    assert len(parse(Path(whole["path"]).read_text(encoding="utf-8")).cards) == 5
