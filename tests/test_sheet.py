"""The contact sheet: built from a really rendered batch, parsed as HTML, every link followed."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
from collections import defaultdict
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from PIL import Image, ImageChops, ImageDraw, ImageOps, ImageStat
from typer.testing import CliRunner

from thumbctl import Ledger
from thumbctl.cli import app
from thumbctl.core.display import score_text
from thumbctl.core.models import BatchView, ItemView
from thumbctl.review.sheet import item_key, render_sheet, write_contact_sheet
from thumbctl.storage.objects import LocalObjectStore

from conftest import SAMPLE_IMAGES
from harness import Thumbctl
from inprocess import submit_here
from reviewing import chromium_path
from support import CENTRED_WINDOWS, PHOTO_SIZES, window_size

#: A file name that is also an HTML injection attempt and a URL with a fragment and a query.
HOSTILE_ID = '<img src=x onerror=alert(1)> Tom & "Jerry\'s" #1 50%?é.jpg'


class SheetParser(HTMLParser):
    """Collects what the tests check: cards, their text, images, links and every attribute."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.cards: list[str] = []
        self.card_text: dict[str, str] = defaultdict(str)
        self.images: dict[str, list[dict[str, str]]] = defaultdict(list)
        self.links: list[str] = []
        self.windows: dict[str, list[dict[str, str]]] = defaultdict(list)
        self.captions: dict[str, list[str]] = defaultdict(list)
        #: The source previews (data: URIs) under the crop windows, by card.
        self.previews: dict[str, list[dict[str, str]]] = defaultdict(list)
        #: The re-crop manifest lines, by card.
        self.recrops: dict[str, list[str]] = defaultdict(list)
        #: Cards that are one compact row.
        self.compact: list[str] = []
        self.in_caption = False
        self.in_recrop = False
        self.current: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.tags.append(tag)
        self.attributes.extend(values.items())
        if tag == "section":
            self.current = values["data-item-id"]
            self.cards.append(self.current)
            if "compact" in values["class"].split():
                self.compact.append(self.current)
        if tag == "img" and values["src"].startswith("data:"):
            self.previews[self.current or ""].append(values)
        elif tag == "img":
            self.images[self.current or ""].append(values)
            self.links.append(values["src"])
        if tag == "code" and "recrop" in values.get("class", "").split():
            self.recrops[self.current or ""].append("")
            self.in_recrop = True
        if tag == "a":
            self.links.append(values["href"])
        if tag == "span" and "window" in values.get("class", "").split():
            self.windows[self.current or ""].append(values)
        if tag == "figcaption":
            self.captions[self.current or ""].append("")
            self.in_caption = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.current = None
        if tag == "figcaption":
            self.in_caption = False
        if tag == "code":
            self.in_recrop = False

    def handle_data(self, data: str) -> None:
        if self.current is not None:
            self.card_text[self.current] += data
        if self.in_caption:
            self.captions[self.current or ""][-1] += data
        if self.in_recrop:
            self.recrops[self.current or ""][-1] += data


def parse(page: str) -> SheetParser:
    parser = SheetParser()
    parser.feed(page)
    parser.close()
    return parser


def invoke(tmp_path: Path, *args: object):
    runner = CliRunner()
    return runner.invoke(app, [*map(str, args), "--db", str(tmp_path / "ledger.db")], catch_exceptions=False)


def render(tmp_path: Path, *args: object, states: tuple[str, ...] = ("succeeded",)) -> dict:
    """The finished document of ``submit ARGS`` on tmp_path's ledger, recorded and rendered in
    this process (tests/inprocess); ``succeeded``: what the foreground run's exit 0 says."""
    return submit_here(Thumbctl(tmp_path / "ledger.db"), *args, states=states)


@pytest.fixture
def rendered(tmp_path: Path, photos: Path, out_dir: Path) -> str:
    """A batch rendered (in this process): four photos, a hostile file name, and a text file named .jpg."""
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Portrait_8.jpg", photos / HOSTILE_ID)
    (photos / "notes.jpg").write_text("meeting notes, not a photo")
    args = ("--out", out_dir, "-w", "1", "-r", "1:1", "-r", "16:9")
    return render(tmp_path, photos, *args, states=("partial",))["batch_id"]  # notes.jpg is not an image


def assert_links_resolve(parser: SheetParser, page_dir: Path) -> None:
    """Every link is relative, has no query or fragment, and names an existing file."""
    assert parser.links
    for link in parser.links:
        parts = urlsplit(link)
        assert not (parts.scheme or parts.netloc or parts.query or parts.fragment), link
        assert not link.startswith("/"), link
        assert (page_dir / unquote(link)).is_file(), link


def assert_every_item_shown(parser: SheetParser, items: list[ItemView]) -> None:
    """Each source has one card; each success an image of its output size; each failure its code."""
    assert sorted(parser.cards) == sorted({i.item_id for i in items})
    for item in items:
        text, images = parser.card_text[item.item_id], parser.images[item.item_id]
        if item.state == "succeeded":
            (image,) = [img for img in images if img["alt"] == f"{item.item_id} {item.ratio}"]
            assert (int(image["width"]), int(image["height"])) == (item.result["width"], item.result["height"])
        else:
            assert not images
            assert item.state in text and item.error_code in text and item.error_detail in text


def test_the_sheet_shows_every_item_and_every_link_resolves(tmp_path: Path, rendered: str, out_dir: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        summary = write_contact_sheet(ledger, rendered)
        items = ledger.views.items(rendered)
    page = Path(summary.path)
    assert page == Path(os.path.realpath(out_dir)) / "batches" / f"{rendered}.html"
    parser = parse(page.read_text(encoding="utf-8"))
    assert_every_item_shown(parser, items)
    assert_links_resolve(parser, page.parent)
    assert parser.card_text["notes.jpg"].count("unsupported_format") == 1  # one row for both ratios
    assert parser.compact == ["notes.jpg"] and "1:1, 16:9" in parser.card_text["notes.jpg"]
    assert parser.cards[0] == "notes.jpg"  # sources that need attention come first
    assert {i.state for i in items} == {"succeeded", "failed"}


def test_the_sheet_is_self_contained_and_escapes_item_ids(tmp_path: Path, rendered: str) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        page = Path(write_contact_sheet(ledger, rendered).path).read_text(encoding="utf-8")
    parser = parse(page)
    assert "script" not in parser.tags and "link" not in parser.tags
    assert not [(k, v) for k, v in parser.attributes if k.startswith("on")]
    urls = [v for _, v in parser.attributes if not v.startswith("data:image/jpeg;base64,")]
    assert not [v for v in urls if "http:" in v or "https:" in v or "//" in v]
    assert not [word for word in ("http:", "https:", "url(", "@import") if word in page]
    # 5 photos x 2 ratios, and one preview per photo; the hostile name is text, not markup
    assert sum(map(len, parser.images.values())) == 10 and sum(map(len, parser.previews.values())) == 5
    assert parser.tags.count("img") == 15
    assert HOSTILE_ID in parser.cards
    assert "onerror=alert(1)> Tom" not in page


def test_a_sheet_written_elsewhere_links_back_to_the_outputs(tmp_path: Path, rendered: str) -> None:
    review = tmp_path / "review" / "sheet.html"
    review.parent.mkdir()
    with Ledger(tmp_path / "ledger.db") as ledger:
        summary = write_contact_sheet(ledger, rendered[:8], review)
        items = ledger.views.items(rendered)
    assert summary.path == str(review) and summary.batch_id == rendered
    parser = parse(review.read_text(encoding="utf-8"))
    assert_every_item_shown(parser, items)
    assert_links_resolve(parser, review.parent)
    assert [p.name for p in review.parent.iterdir()] == ["sheet.html"]  # no temp file left behind


def test_links_keep_to_the_batchs_own_objects_after_a_later_batch_takes_the_names(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    batch_id = render(tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1")["batch_id"]
    render(tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--size", "96")
    with Ledger(tmp_path / "ledger.db") as ledger:
        page = Path(write_contact_sheet(ledger, batch_id).path)
        items = ledger.views.items(batch_id)
    parser = parse(page.read_text(encoding="utf-8"))
    shown = {os.path.realpath(page.parent / unquote(src)) for src in parser.links}
    assert shown == {os.path.realpath(i.object_path) for i in items}
    assert_every_item_shown(parser, items)


def test_outputs_reused_at_submit_show_the_crop_window_and_score_of_the_render_that_made_them(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    first = render(tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1")
    again = invoke(tmp_path, "submit", photos, "--out", out_dir, "-r", "1:1", "--key", "again", "--detach", "--json")
    batch_id = json.loads(again.stdout)["batch_id"]
    with Ledger(tmp_path / "ledger.db") as ledger:
        page = Path(write_contact_sheet(ledger, batch_id).path)
        first_page = Path(write_contact_sheet(ledger, first["batch_id"]).path)
        items = ledger.views.items(batch_id)
        rendered = {i.item_id: i for i in ledger.views.items(first["batch_id"])}
    assert {i.state for i in items} == {"succeeded"} and all((i.result or {}).get("reused") for i in items)
    for item in items:
        made_it = rendered[item.item_id].result or {}
        assert (item.result or {})["crop"] == made_it["crop"] and "score" in made_it["crop"]
    parser = parse(page.read_text(encoding="utf-8"))
    assert len(items) == 4  # drawn as the render's own sheet draws them: previews, windows, outputs
    assert parser.tags.count("img") == parse(first_page.read_text(encoding="utf-8")).tags.count("img") > len(items)
    # the reused outputs' sizes come from intake: square, with their width and height set
    assert all(img["width"] == img["height"] for imgs in parser.images.values() for img in imgs)
    for item in items:
        score = score_text(rendered[item.item_id].result["crop"]["score"])
        assert "no crop recorded" not in parser.card_text[item.item_id] and score in parser.card_text[item.item_id]
    assert_links_resolve(parser, page.parent)


def view_of(state: str, error_code: str | None = None) -> tuple[BatchView, list[ItemView]]:
    """A batch of one unfinished or failed item, as the ledger would project it."""
    counts = {"queued": 0, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0, state: 1}
    batch = BatchView("b_1", state, "k", "d", 1, counts, "2026-01-02T03:04:05Z", "t", None, None, "/o", "/o/m", "/s")
    detail = "why" if error_code else None
    item = ItemView("a.jpg", "/s/a.jpg", "4:3", state, 1, error_code, detail, None, None, None, "t")
    return batch, [item]


@pytest.mark.parametrize(
    ("state", "error_code", "label"),
    [
        ("queued", None, "queued"),
        ("running", None, "running"),
        ("cancelled", None, "cancelled"),
        ("failed", "timeout", "failed"),
        ("succeeded", None, "missing"),  # its output file is gone
    ],
)
def test_a_source_with_nothing_to_show_is_one_compact_row(state: str, error_code: str | None, label: str):
    batch, items = view_of(state, error_code)
    parser = parse(render_sheet(batch, items, {"a.jpg": (400, 300)}, {}, "/o/batches"))
    assert parser.cards == parser.compact == ["a.jpg"] and not parser.links and not parser.previews
    text = parser.card_text["a.jpg"]
    assert label in text and "400×300 px" in text and "4:3" in text
    assert (error_code or "") in text and ("why" in text) == bool(error_code)
    assert "figure" not in parser.tags  # no large placeholder box


def test_a_crop_missing_beside_shown_ones_is_a_labelled_placeholder(tmp_path: Path) -> None:
    batch, (failed,) = view_of("failed", "timeout")
    shown = replace(failed, ratio="1:1", state="succeeded", error_code=None, error_detail=None)
    image = tmp_path / "a.1x1.jpg"
    image.write_bytes(b"")
    parser = parse(render_sheet(batch, [shown, failed], {"a.jpg": (400, 300)}, {item_key(shown): str(image)}, "/o"))
    assert not parser.compact and parser.tags.count("figure") == 2
    assert ("aspect-ratio", "4 / 3") in [tuple(v.split(":")) for k, v in parser.attributes if k == "style"]
    assert "timeout" in parser.card_text["a.jpg"] and "why" in parser.card_text["a.jpg"]


@pytest.mark.parametrize("place", ["missing/review.html", "."], ids=["folder-missing", "a-folder"])
def test_sheet_refuses_an_unwritable_place_with_exit_2(tmp_path: Path, rendered: str, place: str):
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(tmp_path, "sheet", rendered, "-o", tmp_path / place, "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "cannot_write"
    assert "cannot_write" in result.stderr and "cannot write the contact sheet" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_sheet_json_names_the_page_and_its_counts(tmp_path: Path, rendered: str, out_dir: Path) -> None:
    result = invoke(tmp_path, "sheet", rendered[:6], "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "batch_id": rendered,
        "state": "partial",
        "path": str(Path(os.path.realpath(out_dir)) / "batches" / f"{rendered}.html"),
        "sources": 6,
        "items": 12,
        "succeeded": 10,
        "failed": 2,
        "missing": 0,
        "damaged": [],
    }


def test_sheet_counts_no_output_missing_for_a_batch_of_several_sizes_and_formats(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    args = ("--out", out_dir, "-w", "1", "-r", "1:1", "--size", "64,128", "--format", "webp,jpeg")
    batch = render(tmp_path, photos, *args)
    assert batch["state"] == "succeeded" and batch["total"] > 4
    summary = json.loads(invoke(tmp_path, "sheet", batch["batch_id"], "--json").stdout)
    assert (summary["succeeded"], summary["missing"]) == (batch["total"], 0)
    items = json.loads(invoke(tmp_path, "status", batch["batch_id"], "--items", "--json").stdout)["items"]
    Path(items[0]["object_path"]).unlink()  # one output really gone (object and thumbnail): counted once
    Path(items[0]["friendly_path"]).unlink()
    summary = json.loads(invoke(tmp_path, "sheet", batch["batch_id"], "--json").stdout)
    assert summary["missing"] == 1
    parser = parse(Path(summary["path"]).read_text(encoding="utf-8"))  # and its tile names it
    gone = f"missing {items[0]['size']} {items[0]['format']} the output file is gone"
    assert parser.tags.count("figure") == len(PHOTO_SIZES) and gone in parser.captions[items[0]["item_id"]][0]


def test_a_batch_of_several_sizes_and_formats_has_one_tile_per_source_and_ratio(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    (photos / "notes.jpg").write_text("meeting notes, not a photo")
    batch_id = render(
        tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1", "-r", "16:9",
        "--size", "64,256", "--format", "avif,webp,jpeg", states=("partial",),  # notes.jpg is not an image
    )["batch_id"]  # fmt: skip
    with Ledger(tmp_path / "ledger.db") as ledger:
        page = Path(write_contact_sheet(ledger, batch_id).path)
        items = ledger.views.items(batch_id)
    assert len(items) == 5 * 2 * 2 * 3
    parser = parse(page.read_text(encoding="utf-8"))
    assert_links_resolve(parser, page.parent)
    assert parser.tags.count("figure") == len(PHOTO_SIZES) * 2  # one tile per (source, ratio), not per derivative
    assert parser.compact == ["notes.jpg"] and parser.card_text["notes.jpg"].count("unsupported_format") == 1
    assert "1:1, 16:9" in parser.card_text["notes.jpg"]
    for item_id in PHOTO_SIZES:
        assert [img["alt"] for img in parser.images[item_id]] == [f"{item_id} 1:1", f"{item_id} 16:9"]
        assert len(parser.recrops[item_id]) == len(parser.windows[item_id]) == len(parser.captions[item_id]) == 2
        tiles = zip(("1:1", "16:9"), parser.images[item_id], parser.captions[item_id], strict=True)
        for ratio, image, caption in tiles:
            mine = [i for i in items if (i.item_id, i.ratio) == (item_id, ratio)]
            assert {i.state for i in mine} == {"succeeded"} and len(mine) == 6
            (largest,) = [i for i in mine if (i.size, i.format) == (256, "jpeg")]  # a JPEG before AVIF or WebP
            assert os.path.realpath(page.parent / unquote(image["src"])) == os.path.realpath(largest.friendly_path)
            assert (int(image["width"]), int(image["height"])) == (largest.result["width"], largest.result["height"])
            produced = dict.fromkeys(f"{i.result['width']}×{i.result['height']}" for i in mine)
            assert caption.startswith(f"{ratio} {', '.join(produced)}") and "· avif, webp, jpeg" in caption
            smaller = largest.result["source_smaller_than_target"]
            assert ("(256 asked, source smaller)" in caption) == smaller
            assert caption.count(" · ") == 2  # the sizes and formats, then the crop once


def test_a_failed_derivative_is_named_on_its_ratios_tile(tmp_path: Path) -> None:
    batch, (template,) = view_of("succeeded")
    result = {"width": 320, "height": 240, "crop": {"box": [0, 0, 400, 300], "score": 0.5, "policy": "smart"}}

    def derivative(size: int, fmt: str, state: str = "succeeded", code: str | None = None) -> ItemView:
        done = {**result, "width": size, "height": size * 3 // 4} if state == "succeeded" else None
        return replace(
            template, size=size, format=fmt, state=state, error_code=code, error_detail=code and "why", result=done
        )

    items = [derivative(320, "webp"), derivative(320, "jpeg"), derivative(640, "webp", "failed", "timeout")]
    items += [derivative(640, "jpeg"), replace(derivative(320, "jpeg", "failed", "encode_failed"), ratio="1:1")]
    items += [replace(derivative(640, "jpeg", "failed", "encode_failed"), ratio="1:1")]
    shown = {item_key(i): str(tmp_path / f"a.{i.size}.{i.format}") for i in items if i.state == "succeeded"}
    parser = parse(render_sheet(batch, items, {"a.jpg": (400, 300)}, shown, str(tmp_path)))
    assert parser.tags.count("figure") == 2 and not parser.compact
    (image,) = parser.images["a.jpg"]
    assert (image["src"], image["width"], image["height"]) == ("a.640.jpeg", "640", "480")
    tile, placeholder = parser.captions["a.jpg"]
    assert tile.startswith("4:3 320×240, 640×480 · webp, jpeg") and tile.count("smart 0.50") == 1
    assert "failed 640 webp timeout why" in tile
    assert "1:1" in placeholder and "failed 320 jpeg, 640 jpeg encode_failed why" in placeholder
    assert len(parser.windows["a.jpg"]) == 1  # the failed ratio recorded none; the other's is drawn once


def test_sheet_path_and_counts_go_to_stdout(tmp_path: Path, rendered: str) -> None:
    review = tmp_path / "review.html"
    result = invoke(tmp_path, "sheet", rendered, "-o", review)
    assert result.exit_code == 0 and result.stderr == ""
    assert str(review) in result.stdout and "6 sources, 12 items: 10 succeeded, 2 failed" in result.stdout
    assert review.is_file()


def test_sheet_of_an_unknown_batch_is_a_usage_error(tmp_path: Path, rendered: str) -> None:
    result = invoke(tmp_path, "sheet", "b_nope", "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "batch_not_found"
    assert "batch_not_found" in result.stderr


def test_sheet_never_lands_on_an_output_inside_out(tmp_path: Path, rendered: str, out_dir: Path) -> None:
    friendly = next(p for p in out_dir.rglob("*.jpg") if "objects" not in p.parts)
    before = friendly.read_bytes()
    result = invoke(tmp_path, "sheet", rendered, "-o", friendly, "--json")
    assert result.exit_code == 2 and "cannot_write" in result.stderr
    assert friendly.read_bytes() == before
    inside = invoke(tmp_path, "sheet", rendered, "-o", out_dir / "batches" / "review.html", "--json")
    assert inside.exit_code == 0 and (out_dir / "batches" / "review.html").is_file()


def window_style(box: list[int], size: tuple[int, int]) -> str:
    """Where the sheet must draw ``box`` on the source frame, in percent of the source."""
    left, top, right, bottom = box
    width, height = size
    return (
        f"left:{100 * left / width:.2f}%;top:{100 * top / height:.2f}%;"
        f"width:{100 * (right - left) / width:.2f}%;height:{100 * (bottom - top) / height:.2f}%"
    )


@pytest.mark.parametrize("policy", ["smart", "center"])
def test_the_sheet_draws_every_recorded_window_and_captions_it_with_policy_and_score(
    tmp_path: Path, photos: Path, out_dir: Path, policy: str
) -> None:
    batch_id = render(
        tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1", "-r", "16:9", "-r", "2:3",
        "--size", "128", "--crop", policy,
    )["batch_id"]  # fmt: skip
    with Ledger(tmp_path / "ledger.db") as ledger:
        page = Path(write_contact_sheet(ledger, batch_id).path)
        items = ledger.views.items(batch_id)
    parser = parse(page.read_text(encoding="utf-8"))
    assert len(items) == len(CENTRED_WINDOWS) and {i.state for i in items} == {"succeeded"}
    for item in items:
        crop = item.result["crop"]
        if policy == "center":
            assert (crop["box"], crop["score"]) == (CENTRED_WINDOWS[item.item_id, item.ratio], 0.0)
        (window,) = [w for w in parser.windows[item.item_id] if w["title"] == item.ratio]
        assert window["style"].endswith(f";{window_style(crop['box'], PHOTO_SIZES[item.item_id])}")
        width, height = window_size(crop["box"])
        caption = f"{policy} {score_text(crop['score'])} · {width}×{height} at {crop['box'][0]},{crop['box'][1]}"
        assert f"{item.ratio} {item.result['width']}×{item.result['height']}{caption}" in parser.captions[item.item_id]
    assert len(parser.windows) == len(PHOTO_SIZES) and sum(map(len, parser.windows.values())) == len(items)


def test_a_centred_window_is_drawn_where_it_sits_on_the_source(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    batch_id = render(tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--crop", "center")["batch_id"]
    with Ledger(tmp_path / "ledger.db") as ledger:
        parser = parse(Path(write_contact_sheet(ledger, batch_id).path).read_text(encoding="utf-8"))
    (window,) = parser.windows["coffee.png"]  # 600x400: the 400x400 window at 100,0
    assert window["style"].split(";")[1:] == ["left:16.67%", "top:0.00%", "width:66.67%", "height:100.00%"]
    assert "1:1 400×400center 0.00 · 400×400 at 100,0 · source smaller than asked" in parser.captions["coffee.png"]


# -- the end of a foreground run --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "written"),
    [((), {}, True), (("--no-sheet",), {}, False), ((), {"THUMBCTL_SHEET": "false"}, False)],
    ids=["default", "no-sheet", "env-off"],
)
def test_a_foreground_run_writes_the_sheet_unless_turned_off(
    tmp_path: Path, photos: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch, args: tuple, env: dict, written: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = invoke(tmp_path, "submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", *args, "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    page = Path(os.path.realpath(out_dir)) / "batches" / f"{doc['batch_id']}.html"
    catalogue = page.with_name("catalogue.html")
    assert page.is_file() == written and catalogue.is_file() == written
    assert doc.get("sheet", "absent") == (str(catalogue) if written else "absent")


def test_the_summary_ends_with_the_thumbnails_folder_and_the_sheets_link(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    result = invoke(tmp_path, "submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1")
    assert result.exit_code == 0, result.stderr
    page = out_dir / "batches" / "catalogue.html"  # the catalogue, this batch's changes first
    lines = result.stdout.splitlines()
    assert lines[-2].strip().startswith(f"thumbnails in {os.path.realpath(out_dir)}, manifest ")
    assert lines[-1].strip() == f"contact sheet {Path(os.path.realpath(page)).as_uri()}"
    detached = invoke(tmp_path, "submit", photos, "--out", tmp_path / "later", "--detach")
    assert detached.exit_code == 0 and "contact sheet" not in detached.stdout + detached.stderr
    assert not (tmp_path / "later" / "batches").exists() or not list((tmp_path / "later" / "batches").glob("*.html"))


# -- the photo under the windows, the re-crop line, the order -----------------------------------------


@pytest.mark.parametrize("policy", ["smart", "center"])
def test_windows_are_drawn_on_the_workers_preview_of_the_photo(
    tmp_path: Path, photos: Path, out_dir: Path, policy: str
) -> None:
    args = ("--out", out_dir, "-w", "1", "-r", "1:1", "-r", "16:9", "--crop", policy)
    batch_id = render(tmp_path, photos, *args)["batch_id"]
    assert invoke(tmp_path, "sheet", batch_id).exit_code == 0  # the page a foreground run writes at its end
    with Ledger(tmp_path / "ledger.db") as ledger:
        items = ledger.views.items(batch_id)
    parser = parse((out_dir / "batches" / f"{batch_id}.html").read_text(encoding="utf-8"))
    saved = {p.name for p in (tmp_path / "ledger.store").rglob("*.preview.jpg")}
    assert len(saved) == len(PHOTO_SIZES)  # one per source, beside one of its objects in the store
    assert not list(out_dir.rglob("*.preview.jpg"))
    for item_id, size in PHOTO_SIZES.items():
        mine = [i for i in items if i.item_id == item_id]
        (path,) = {i.result["preview"] for i in mine}
        assert path in {LocalObjectStore.preview_path(i.object_path) for i in mine} and os.path.isfile(path)
        (img,) = parser.previews[item_id]
        data = base64.b64decode(img["src"].removeprefix("data:image/jpeg;base64,"))
        assert data == Path(path).read_bytes()
        assert_is_the_photo(data, photos / item_id, size)
        assert {w["title"] for w in parser.windows[item_id]} == {"1:1", "16:9"}


def assert_is_the_photo(preview: bytes, source: Path, size: tuple[int, int]) -> None:
    """A small upright copy of the source itself: its shape, at most 256 px long, close in pixels."""
    with Image.open(io.BytesIO(preview)) as small:
        assert small.format == "JPEG" and max(small.size) <= 256
        assert abs(small.width / small.height - size[0] / size[1]) < 0.02
        with Image.open(source) as original:
            expected = ImageOps.exif_transpose(original).convert("RGB").resize(small.size, Image.Resampling.BOX)
        difference = ImageStat.Stat(ImageChops.difference(small.convert("RGB"), expected)).mean
        assert max(difference) < 12, difference
        assert max(ImageStat.Stat(small.convert("L")).stddev) > 5  # not a flat box


def test_gc_removes_a_preview_with_its_object(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    render(tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1")
    store = tmp_path / "ledger.store"
    previews = set(store.rglob("*.preview.jpg"))
    assert len(previews) == len(PHOTO_SIZES)
    # the same names at another size: the first objects are left to no name and no live batch
    render(tmp_path, photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--size", "64")
    result = invoke(tmp_path, "gc", "--older-than", "0s", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["objects_removed"] == len(PHOTO_SIZES)
    assert not previews & set(store.rglob("*.preview.jpg"))
    stems = {p.name.split(".")[0] for p in (store / "objects").rglob("*") if p.is_file()}
    assert len(stems) == len(PHOTO_SIZES)  # the objects the names show, and the previews beside them


def test_each_tile_offers_the_focus_command_that_fixes_it_where_it_is(
    tmp_path: Path, rendered: str, photos: Path
) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        parser = parse(Path(write_contact_sheet(ledger, rendered).path).read_text(encoding="utf-8"))
        items = {(i.item_id, i.ratio): i for i in ledger.views.items(rendered) if i.state == "succeeded"}
        sizes = ledger.views.source_sizes(rendered)  # upright
    lines = [line for recrops in parser.recrops.values() for line in recrops]
    assert len(lines) == len(items) == 10 and not parser.recrops["notes.jpg"]
    wide = []
    for item_id, recrops in parser.recrops.items():
        for line in recrops:
            program, command, source, ratio_flag, ratio, at_flag, at, db_flag, db = shlex.split(line)
            assert (program, command, ratio_flag, at_flag) == ("thumbctl", "focus", "--ratio", "--at")
            # not the default ledger: named, like the photo, from the folder that holds the source root
            # (outside the home folder: no folder of the machine is written into OUT)
            assert (db_flag, db) == ("--db", os.path.relpath(tmp_path / "ledger.db", photos.parent))
            item = items[item_id, ratio]
            left, top, right, bottom = item.result["crop"]["box"]
            width, height = sizes[item_id]
            assert tuple(map(float, at.split(","))) == (
                round((left + right) / 2 / width, 3),
                round((top + bottom) / 2 / height, 3),
            )
            assert photos.parent / source == Path(item.source) and (photos.parent / source).is_file()
            wide += [shlex.split(line)[1:]] if ratio == "16:9" else []
    with contextlib.chdir(photos.parent):  # run as they are, where the page says (with the --db they name)
        for args in wide:
            assert CliRunner().invoke(app, args, catch_exceptions=False).exit_code == 0
    args = ("--out", tmp_path / "again", "-w", "1", "-r", "1:1,16:9")
    again = render(tmp_path, photos, *args, states=("partial",))  # notes.jpg still fails
    with Ledger(tmp_path / "ledger.db") as ledger:
        recropped = [i for i in ledger.views.items(again["batch_id"]) if i.state == "succeeded"]
    assert len(recropped) == 10
    for item in recropped:  # the fixed ratio renders the same window again, now by its focus; the other is reused
        before = items[item.item_id, item.ratio]
        if item.ratio == "16:9":
            assert item.result["crop"]["policy"] == "focus"
            box, earlier = item.result["crop"]["box"], before.result["crop"]["box"]
            assert max(abs(a - b) for a, b in zip(box, earlier, strict=True)) <= 1
        else:
            assert item.derivative_key == before.derivative_key and (item.result or {}).get("reused") is True


def test_sort_score_lists_the_lowest_crop_scores_first(tmp_path: Path, rendered: str) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        items = ledger.views.items(rendered)
    lowest: dict[str, float] = {}
    for item in items:
        if item.state == "succeeded":
            lowest[item.item_id] = min(lowest.get(item.item_id, 1.0), item.result["crop"]["score"])
    expected = ["notes.jpg", *sorted(lowest, key=lambda i: (lowest[i], list(lowest).index(i)))]
    result = invoke(tmp_path, "sheet", rendered, "--sort", "score", "--json")
    assert result.exit_code == 0, result.stderr
    assert parse(Path(json.loads(result.stdout)["path"]).read_text(encoding="utf-8")).cards == expected
    by_ledger = json.loads(invoke(tmp_path, "sheet", rendered, "--json").stdout)["path"]
    assert parse(Path(by_ledger).read_text(encoding="utf-8")).cards == ["notes.jpg", *lowest]
    assert expected != ["notes.jpg", *lowest]  # the fixture's scores are not already in ledger order


# -- the sheet as a browser draws it ----------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium. Required in CI (the env var CI set: .ci/run installs it); elsewhere a
    machine without it skips the screenshot test."""
    return chromium_path()


SCREEN = (1200, 2000)


def screenshot(chromium: str, page: Path, png: Path) -> Image.Image:
    """The page as headless Chromium draws it, with no page-specific flags (root needs --no-sandbox)."""
    command = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}",
        f"--window-size={SCREEN[0]},{SCREEN[1]}", page.as_uri(),
    ]  # fmt: skip
    env = {**os.environ, "HOME": str(png.parent)}  # its profile and crash folders go there, not in ~
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]
    return Image.open(png).convert("RGB")


def patch_spread(image: Image.Image, box: tuple[int, int, int, int]) -> float:
    """The largest standard deviation of a channel in ``box``: about 0 where the page is flat."""
    return max(ImageStat.Stat(image.crop(box)).stddev)


def test_headless_chromium_draws_the_whole_sheet_with_every_photo(
    tmp_path: Path, photos: Path, out_dir: Path, chromium: str
) -> None:
    result = invoke(tmp_path, "submit", photos, "--out", out_dir, "-w", "1", "--json")
    assert result.exit_code == 0, result.stderr
    page = Path(json.loads(result.stdout)["sheet"])
    assert "loading=" not in page.read_text(encoding="utf-8")  # nothing waits to be scrolled to
    shot = screenshot(chromium, page, tmp_path / "sheet.png")
    assert shot.size == SCREEN and patch_spread(shot, (0, 0, *SCREEN)) > 20
    # The first card: the preview of the photo under its windows, then its three crops in a row.
    assert patch_spread(shot, (45, 270, 225, 390)) > 15, "the preview under the windows is blank"
    for left in (270, 500, 760):
        assert patch_spread(shot, (left, 210, left + 150, 380)) > 15, f"the crop at x={left} is blank"
    assert patch_spread(shot, (0, SCREEN[1] - 40, SCREEN[0], SCREEN[1])) < 1  # the page ended above the bottom


def test_a_transparent_crop_sits_on_a_checkerboard(tmp_path: Path, out_dir: Path, chromium: str) -> None:
    photos = tmp_path / "bottles"
    photos.mkdir()
    bottle = Image.new("RGBA", (600, 900), (0, 0, 0, 0))
    ImageDraw.Draw(bottle).ellipse((200, 100, 400, 800), fill=(20, 60, 200, 255))
    bottle.save(photos / "bottle.png")
    args = ("--out", out_dir, "-r", "16:9", "--size", "320", "--fit", "contain", "--background", "transparent")
    result = invoke(tmp_path, "submit", photos, *args, "--format", "png", "-w", "1", "--json")
    assert result.exit_code == 0, result.stderr
    shot = screenshot(chromium, Path(json.loads(result.stdout)["sheet"]), tmp_path / "sheet.png")
    padding = shot.crop((280, 220, 330, 300))  # the tile's left padding: transparent in the file
    colours = {colour for _, colour in padding.getcolors(1 << 16) or []}
    assert {(212, 212, 212), (255, 255, 255)} <= colours, sorted(colours)[:8]


def test_a_fix_line_names_its_ledger_in_full_wherever_it_is_pasted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from thumbctl.review.crops import db_flag_of

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the ledger lies outside it: written in full
    assert db_flag_of("shop.db") == f" --db {tmp_path / 'shop.db'}"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert db_flag_of("shop.db") == " --db ~/shop.db"  # under the home folder: as the shell expands it
    assert db_flag_of("postgresql://shop:secret@db/thumbs") == " --db postgresql://shop@db/thumbs"
