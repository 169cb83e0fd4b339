"""Paste-ready markup: the manifest's per-(source, ratio) files, srcset strings and <picture>
elements, and ``status BATCH --html``, checked by parsing the HTML and opening the files it names."""

from __future__ import annotations

import base64
import io
import json
import os
from dataclasses import dataclass, field, replace
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from PIL import Image
from typer.testing import CliRunner

from thumbctl.cli import app
from thumbctl.core.models import ItemView, NewBatch, NewItem
from thumbctl.core.profile import Limits
from thumbctl.review.markup import PictureSet, batch_snippets, picture_html, picture_sets, snippets
from thumbctl.testing import InMemoryLedger

from harness import Thumbctl
from inprocess import submit_here
from support import make_image

REPO = Path(__file__).resolve().parent.parent
MEDIA_TYPES = {"AVIF": "image/avif", "WEBP": "image/webp", "JPEG": "image/jpeg", "PNG": "image/png"}
PILLOW_NAMES = {"avif": "AVIF", "webp": "WEBP", "jpeg": "JPEG", "png": "PNG"}
EXTENSIONS = {"avif": "avif", "webp": "webp", "jpeg": "jpg", "png": "png"}
ODD_ID = 'rooms/a "b" <c> & d é, 50%.jpg'
FILE_KEYS = {"path", "url", "width", "height", "format", "bytes", "size"}
PICTURE_KEYS = {"item_id", "ratio", "files", "srcset", "alt", "dominant_colour", "lqip", "picture"}


@dataclass
class Picture:
    comment: str | None
    sources: list[dict[str, str]] = field(default_factory=list)
    img: dict[str, str] | None = None


class PictureParser(HTMLParser):
    """Collects each <picture> with its <source>s, <img> and the comment before it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pictures: list[Picture] = []
        self.comments: list[str] = []
        self.other: list[str] = []
        self._open: Picture | None = None

    def handle_comment(self, data: str) -> None:
        self.comments.append(data.strip())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "picture":
            self._open = Picture(self.comments[-1] if self.comments else None)
        elif tag == "source" and self._open:
            self._open.sources.append(values)
        elif tag == "img" and self._open:
            self._open.img = values
        else:
            self.other.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "picture" and self._open:
            self.pictures.append(self._open)
            self._open = None

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.other.append(data)


def parse(html: str) -> PictureParser:
    parser = PictureParser()
    parser.feed(html)
    parser.close()
    return parser


def srcset_entries(value: str) -> list[tuple[str, int]]:
    entries = []
    for candidate in value.split(", "):
        url, descriptor = candidate.split(" ")
        assert descriptor.endswith("w")
        entries.append((url, int(descriptor[:-1])))
    return entries


def check_against_files(picture: Picture, out_dir: Path) -> dict[str, list[int]]:
    """Every URL names a file in OUT of the type and width it claims, each width once per srcset;
    the <img>'s width and height are its src's real pixels. Returns type -> widths."""
    assert picture.img is not None and picture.img["loading"] == "lazy"
    widths: dict[str, list[int]] = {}
    for element in [*picture.sources, picture.img]:
        entries = srcset_entries(element["srcset"])
        assert len({w for _, w in entries}) == len(entries) and [w for _, w in entries] == sorted(w for _, w in entries)
        for url, width in entries:
            with Image.open(out_dir / unquote(url)) as image:
                assert image.width == width
                kind = MEDIA_TYPES[image.format]
            if "type" in element:
                assert element["type"] == kind
            widths.setdefault(kind, []).append(width)
        assert element["sizes"]
    with Image.open(out_dir / unquote(picture.img["src"])) as image:
        assert (image.width, image.height) == (int(picture.img["width"]), int(picture.img["height"]))
        assert image.width == max(w for _, w in srcset_entries(picture.img["srcset"]))
    return widths


def output_item(
    out_dir: Path,
    item_id: str,
    ratio: str,
    size: int,
    fmt: str,
    produced: tuple[int, int],
    *,
    result: bool = True,
    recorded_bytes: int | None = None,
    alt: str = "",
    placeholder: dict[str, str] | None = None,
) -> ItemView:
    """A succeeded item whose output (a real file of ``produced`` pixels) is at its friendly name;
    ``recorded_bytes`` stands in for the size the render recorded."""
    stem = item_id.rpartition(".")[0]
    name = f"{stem}.{ratio.replace(':', 'x')}.{size}.{EXTENSIONS[fmt]}"
    path = make_image(out_dir / name, produced, PILLOW_NAMES[fmt], seed=size)
    facts = {"width": produced[0], "height": produced[1], "output_bytes": recorded_bytes or path.stat().st_size}
    facts |= {"size": size, **(placeholder or {})}
    return ItemView(
        item_id=item_id,
        source=f"/src/{item_id}",
        ratio=ratio,
        state="succeeded",
        attempt=1,
        error_code=None,
        error_detail=None,
        derivative_key=f"k{size}{fmt}",
        object_path=str(out_dir / "objects" / f"k{size}{fmt}.{EXTENSIONS[fmt]}"),
        friendly_path=str(path),
        updated_at="2026-01-01T00:00:00Z",
        result={**facts, "format": fmt} if result else None,
        alt=alt,
    )


def failed_item(item_id: str, ratio: str) -> ItemView:
    return ItemView(item_id, f"/src/{item_id}", ratio, "failed", 1, "corrupt_image", "bad", None, None, None, "t")


def one_set(out_dir: Path, items: list[ItemView]) -> PictureSet:
    (pictures,) = picture_sets(str(out_dir), items)
    return pictures


def test_a_pair_of_many_sizes_and_formats_is_one_picture_that_matches_its_files(tmp_path: Path) -> None:
    recorded = {"jpeg": 1000, "webp": 600, "avif": 700}
    items = [
        output_item(tmp_path, "shop/mug.jpg", "4:3", size, fmt, (size, size * 3 // 4), recorded_bytes=recorded[fmt])
        for fmt in ("jpeg", "webp", "avif")
        for size in (640, 320)
    ]
    pictures = one_set(tmp_path, items)
    parsed = parse(snippets([pictures]))
    (picture,) = parsed.pictures
    assert parsed.other == [] and picture.comment == "shop/mug.jpg · 4:3"
    assert [s["type"] for s in picture.sources] == ["image/webp", "image/avif"]  # smallest total first
    widths = check_against_files(picture, tmp_path)
    assert widths == {"image/avif": [320, 640], "image/webp": [320, 640], "image/jpeg": [320, 640]}
    assert (picture.img["src"], picture.img["width"], picture.img["height"]) == ("shop/mug.4x3.640.jpg", "640", "480")
    assert picture.img["alt"] == ""  # never the file name: empty unless the manifest gives one
    assert pictures.srcsets() == {
        "avif": "shop/mug.4x3.320.avif 320w, shop/mug.4x3.640.avif 640w",
        "webp": "shop/mug.4x3.320.webp 320w, shop/mug.4x3.640.webp 640w",
        "jpeg": "shop/mug.4x3.320.jpg 320w, shop/mug.4x3.640.jpg 640w",
    }


def test_sizes_that_collapse_to_one_width_are_listed_once(tmp_path: Path) -> None:
    """A small source without --upscale gives 500 px for both 640 and 1280: one srcset entry,
    the one asked for the smaller size; the manifest still lists both files."""
    items = [output_item(tmp_path, "tiny.png", "1:1", size, "jpeg", (min(size, 500),) * 2) for size in (1280, 320, 640)]
    pictures = one_set(tmp_path, items)
    assert pictures.srcsets() == {"jpeg": "tiny.1x1.320.jpg 320w, tiny.1x1.640.jpg 500w"}
    assert [f["size"] for f in pictures.to_json()["files"]] == [320, 640, 1280]
    (picture,) = parse(pictures.picture()).pictures
    assert check_against_files(picture, tmp_path) == {"image/jpeg": [320, 500]}
    assert picture.img["src"] == "tiny.1x1.640.jpg"


@pytest.mark.parametrize(
    ("formats", "img_type", "source_types"),
    [
        (("jpeg",), "image/jpeg", []),
        (("png", "webp"), "image/png", ["image/webp"]),
        (("webp", "avif"), "image/webp", ["image/avif"]),
        (("avif",), "image/avif", []),
        (("png", "jpeg", "avif"), "image/jpeg", ["image/avif"]),
    ],
)
def test_the_img_is_the_jpeg_else_png_else_webp_set(
    tmp_path: Path, formats: tuple[str, ...], img_type: str, source_types: list[str]
) -> None:
    img_format = img_type.removeprefix("image/")
    sized = {fmt: 1000 if fmt == img_format else 900 for fmt in formats}  # the <source>s are the smaller sets
    items = [output_item(tmp_path, "a.jpg", "1:1", 200, fmt, (200, 200), recorded_bytes=sized[fmt]) for fmt in formats]
    pictures = one_set(tmp_path, items)
    (picture,) = parse(pictures.picture()).pictures
    widths = check_against_files(picture, tmp_path)
    assert [s["type"] for s in picture.sources] == source_types
    assert set(widths) == {img_type, *source_types}
    with Image.open(tmp_path / unquote(picture.img["src"])) as image:
        assert MEDIA_TYPES[image.format] == img_type


def test_an_output_reused_from_an_earlier_batch_is_measured_from_its_file(tmp_path: Path) -> None:
    item = output_item(tmp_path, "a.jpg", "16:9", 320, "webp", (320, 180), result=False)
    (file,) = one_set(tmp_path, [item]).files
    assert (file.width, file.height, file.format) == (320, 180, "webp")
    assert file.bytes == Path(item.friendly_path).stat().st_size


def test_a_pair_that_published_nothing_has_no_picture_and_its_snippet_says_so(tmp_path: Path) -> None:
    sets = picture_sets(str(tmp_path), [failed_item("bad.jpg", "1:1")])
    assert sets[0].to_json() == {
        "item_id": "bad.jpg",
        "ratio": "1:1",
        "files": [],
        "srcset": {},
        "alt": "",
        "dominant_colour": None,
        "lqip": None,
        "picture": None,
    }
    parsed = parse(snippets(sets))
    assert parsed.pictures == [] and parsed.comments == ["bad.jpg · 1:1: no thumbnail"] and parsed.other == []


def recorded_batch(ledger: InMemoryLedger, out_dir: Path, published: ItemView, failed: ItemView) -> str:
    """A batch in ``ledger`` into ``out_dir`` where ``published`` was rendered (its file and
    result as given) and ``failed`` failed at admission; returns its id."""

    def admitted(item: ItemView) -> NewItem:
        state = "failed" if item.state == "failed" else "queued"
        return NewItem(
            item.item_id,
            item.ratio,
            item.source,
            state,
            error_code=item.error_code,
            error_detail=item.error_detail,
            derivative_key=item.derivative_key,
            object_path=item.object_path,
            friendly_path=item.friendly_path,
            size=item.size or 64,
            format=item.format or "jpeg",
        )

    new = NewBatch("k", "d", "/src", str(out_dir), {"size": 64}, (admitted(published), admitted(failed)))
    batch_id = ledger.intake.accept_batch(new, Limits()).batch_id
    claim = ledger.queue.claim("w1")
    assert claim is not None
    assert ledger.queue.publish(claim, claim.items[0], lambda: None, result=published.result) == "succeeded"
    return batch_id


def test_a_batch_s_snippets_are_read_from_the_views_port_alone(tmp_path: Path) -> None:
    published = output_item(tmp_path, "a.jpg", "1:1", 64, "jpeg", (64, 64))
    with InMemoryLedger() as ledger:
        batch_id = recorded_batch(ledger, tmp_path, published, failed_item("bad.jpg", "1:1"))
        parsed = parse(batch_snippets(ledger.views, batch_id[:6]))
        assert len(parsed.pictures) == 1 and parsed.comments[-1] == "bad.jpg · 1:1: no thumbnail"
        items = ledger.views.items(batch_id)
        assert batch_snippets(ledger.views, batch_id) == snippets(picture_sets(str(tmp_path), items))


@pytest.mark.parametrize(
    "item_id", [ODD_ID, "x --> <!-- y.jpg", "日本/写真 1.jpg", "a&amp;b.jpg", "q?#frag.jpg", "--!>.jpg"]
)
def test_item_ids_are_escaped_in_alt_comment_and_urls(tmp_path: Path, item_id: str) -> None:
    item = output_item(tmp_path, item_id, "1:1", 64, "jpeg", (64, 64))
    html = snippets([one_set(tmp_path, [item])])
    parsed = parse(html)
    (picture,) = parsed.pictures
    assert parsed.other == [] and len(parsed.comments) == 1
    assert picture.img["alt"] == ""
    assert picture.comment == f"{item_id} · 1:1".replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    url = picture.img["src"]
    assert all(ch.isascii() and ch not in ' "<>&,?#' for ch in url)
    assert unquote(url) == str(Path(item.friendly_path).relative_to(tmp_path))
    check_against_files(picture, tmp_path)


def expected_snippets(manifest: dict) -> str:
    """What ``status --html`` must print: each pair's comment, then its manifest <picture>."""
    lines = []
    for pair in manifest["pictures"]:
        label = escape(f"{pair['item_id']} · {pair['ratio']}", quote=False)
        picture = pair["picture"]
        lines.append(f"<!-- {label} -->\n{picture}\n" if picture else f"<!-- {label}: no thumbnail -->\n")
    return "".join(lines)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("THUMBCTL_DB", str(tmp_path / "ledger.db"))
    monkeypatch.delenv("THUMBCTL_OUT", raising=False)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def odd_photos(photos: Path) -> Path:
    make_image(photos / ODD_ID, (300, 200), "JPEG", seed=7)
    (photos / "notes.jpg").write_text("not an image")
    return photos


def render(*args: object) -> dict:
    """The document of a ``submit ARGS`` whose batch ends partial (``odd_photos`` holds a file that
    is not an image), recorded and rendered in this process (tests/inprocess), on THUMBCTL_DB's ledger."""
    return submit_here(Thumbctl(os.environ["THUMBCTL_DB"]), *args, states=("partial",))


def test_the_manifest_lists_every_file_and_picture_of_each_pair(cli, odd_photos: Path, out_dir: Path) -> None:
    batch = render(odd_photos, "--out", out_dir, "-w", "1", "-r", "1:1", "-r", "16:9")  # notes.jpg is not an image
    manifest = json.loads(Path(batch["manifest_path"]).read_text())
    pairs = {(p["item_id"], p["ratio"]): p for p in manifest["pictures"]}
    assert set(pairs) == {(i["item_id"], i["ratio"]) for i in manifest["items"]} and len(pairs) == 12
    for (item_id, _ratio), pair in pairs.items():
        assert set(pair) == PICTURE_KEYS
        if item_id == "notes.jpg":
            assert (pair["files"], pair["srcset"], pair["picture"]) == ([], {}, None)
            continue
        (file,) = pair["files"]
        assert set(file) == FILE_KEYS and file["format"] == "jpeg" and file["size"] == 512
        on_disk = out_dir / file["path"]
        with Image.open(on_disk) as image:
            assert (image.format, image.size) == ("JPEG", (file["width"], file["height"]))
        assert file["bytes"] == on_disk.stat().st_size and unquote(file["url"]) == file["path"]
        assert pair["srcset"] == {"jpeg": f"{file['url']} {file['width']}w"}
        (picture,) = parse(pair["picture"]).pictures
        assert check_against_files(picture, out_dir) == {"image/jpeg": [file["width"]]}
        assert picture.img["alt"] == "" and pair["alt"] == ""
        style = f"background-color:{pair['dominant_colour']};background-image:url({pair['lqip']});background-size:cover"
        assert picture.img["style"] == style and len(pair["lqip"]) <= 1024
        with Image.open(io.BytesIO(base64.b64decode(pair["lqip"].removeprefix("data:image/webp;base64,")))) as tiny:
            assert tiny.format == "WEBP" and max(tiny.size) == 16


def test_status_html_prints_one_picture_per_pair_and_nothing_else(cli, odd_photos: Path, out_dir: Path) -> None:
    batch_id = render(odd_photos, "--out", out_dir, "-w", "1", "-r", "1:1")["batch_id"]
    result = cli("status", batch_id[:8], "--html")
    assert result.exit_code == 0 and result.stderr == ""
    manifest = json.loads((out_dir / "batches" / f"{batch_id}.json").read_text())
    assert result.stdout == expected_snippets(manifest)
    assert '<!-- rooms/a "b" &lt;c&gt; &amp; d é, 50%.jpg · 1:1 -->\n<picture>' in result.stdout
    assert "<!-- notes.jpg · 1:1: no thumbnail -->\n" in result.stdout
    parsed = parse(result.stdout)
    assert parsed.other == [] and len(parsed.pictures) == 5
    for picture in parsed.pictures:
        check_against_files(picture, out_dir)


@pytest.mark.parametrize(
    "args", [["status", "--html"], ["status", "{b}", "--html", "--json"], ["status", "{b}", "--html", "--items"]]
)
def test_status_html_refuses_what_it_cannot_combine_with(cli, photos: Path, out_dir: Path, args: list[str]) -> None:
    batch_id = json.loads(cli("submit", photos, "--out", out_dir, "--detach", "--json").stdout)["batch_id"]
    result = cli(*[a.replace("{b}", batch_id) for a in args])
    assert result.exit_code == 2 and "--html" in result.stderr
    assert "<picture>" not in result.stdout


def test_status_html_reads_the_same_from_either_ledger_backend(
    ledger_url: str, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    thumbctl = Thumbctl(ledger_url, store=tmp_path / "store")  # a PostgreSQL ledger has no default store
    batch_id = submit_here(thumbctl, photos, "--out", out_dir, "-w", "1", "-r", "4:3")["batch_id"]
    shown = CliRunner().invoke(app, ["status", batch_id, "--html", "--db", ledger_url], catch_exceptions=False)
    assert shown.exit_code == 0 and shown.stderr == ""
    manifest = json.loads((out_dir / "batches" / f"{batch_id}.json").read_text())
    assert shown.stdout == expected_snippets(manifest)
    parsed = parse(shown.stdout)
    assert len(parsed.pictures) == 4 and parsed.other == []
    for picture in parsed.pictures:
        check_against_files(picture, out_dir)


@pytest.mark.parametrize(
    ("recorded", "offered"),
    [
        ({"avif": 999, "webp": 800}, ["image/webp", "image/avif"]),
        ({"avif": 500, "webp": 800}, ["image/avif", "image/webp"]),
        ({"avif": 1000, "webp": 800}, ["image/webp"]),  # equal is not smaller
        ({"avif": 1500, "webp": 1200}, []),
    ],
)
def test_a_modern_source_is_offered_only_when_its_set_is_smaller_than_the_jpeg_set(
    tmp_path: Path, recorded: dict[str, int], offered: list[str]
) -> None:
    """Totals per format over the srcset's files (two widths here): JPEG 2 x 500 = 1000 bytes."""
    items = [
        output_item(tmp_path, "a.jpg", "1:1", size, fmt, (size, size), recorded_bytes=recorded.get(fmt, 1000) // 2)
        for fmt in ("jpeg", "avif", "webp")
        for size in (100, 200)
    ]
    (picture,) = parse(one_set(tmp_path, items).picture()).pictures
    assert [source["type"] for source in picture.sources] == offered
    check_against_files(picture, tmp_path)


def test_a_set_whose_bytes_are_unknown_is_offered_after_the_measured_ones(tmp_path: Path) -> None:
    """A file whose size is neither recorded nor readable (an AVIF here) cannot be compared: it is
    offered, after the sets measured smaller than the JPEG set."""
    jpeg = output_item(tmp_path, "a.jpg", "1:1", 100, "jpeg", (100, 100), recorded_bytes=1000)
    avif, webp = (
        output_item(tmp_path, "a.jpg", "1:1", 100, fmt, (100, 100), recorded_bytes=400) for fmt in ("avif", "webp")
    )
    avif = replace(avif, result={k: v for k, v in avif.result.items() if k != "output_bytes"})
    unreadable = one_set(tmp_path, [jpeg, avif, webp]).by_format()
    unreadable["avif"] = [replace(file, bytes=None) for file in unreadable["avif"]]
    (picture,) = parse(picture_html(unreadable)).pictures
    assert [s["type"] for s in picture.sources] == ["image/webp", "image/avif"]


@pytest.mark.parametrize("alt", ['A "blue" mug <on> a table & chair', "Tasse bleue, 250 ml — vue de face", ""])
def test_alt_comes_from_the_item_escaped(tmp_path: Path, alt: str) -> None:
    item = output_item(tmp_path, "shop/mug.jpg", "1:1", 64, "jpeg", (64, 64), alt=alt)
    pictures = one_set(tmp_path, [item])
    html = pictures.picture()
    (picture,) = parse(html).pictures
    assert picture.img["alt"] == alt and pictures.to_json()["alt"] == alt
    assert "<on>" not in html and "shop/mug" not in picture.img["alt"]


def test_the_placeholder_is_the_img_s_background(tmp_path: Path) -> None:
    placeholder = {"dominant_colour": "#1a2b3c", "lqip": "data:image/webp;base64,UklGRh4AAABXRUJQ+/8="}
    items = [
        output_item(tmp_path, "a.jpg", "1:1", 64, "jpeg", (64, 64), placeholder=placeholder),
        output_item(tmp_path, "a.jpg", "1:1", 128, "jpeg", (128, 128), placeholder=placeholder),
    ]
    pictures = one_set(tmp_path, items)
    (picture,) = parse(pictures.picture()).pictures
    assert picture.img["style"] == (
        "background-color:#1a2b3c;background-image:url(data:image/webp;base64,UklGRh4AAABXRUJQ+/8=);background-size:cover"
    )
    assert {k: pictures.to_json()[k] for k in placeholder} == placeholder
    bare = one_set(tmp_path, [output_item(tmp_path, "b.jpg", "1:1", 64, "jpeg", (64, 64))])
    (picture,) = parse(bare.picture()).pictures
    assert "style" not in picture.img and bare.to_json()["lqip"] is None


@pytest.mark.parametrize(
    "forged",
    [
        {"dominant_colour": 'red" onerror="x', "lqip": "data:image/webp;base64,AAAA"},
        {"dominant_colour": "#000000", "lqip": "data:image/webp;base64,AA);background:url(https://x)"},
        {"dominant_colour": "#000000", "lqip": 'x" onload="y'},
    ],
)
def test_a_recorded_placeholder_that_is_not_a_colour_and_an_image_uri_is_left_out(
    tmp_path: Path, forged: dict[str, str]
) -> None:
    odd = one_set(tmp_path, [output_item(tmp_path, "c.jpg", "1:1", 64, "jpeg", (64, 64), placeholder=forged)])
    (picture,) = parse(odd.picture()).pictures
    assert "style" not in picture.img and set(picture.img) == {
        "src",
        "srcset",
        "sizes",
        "width",
        "height",
        "alt",
        "loading",
    }


def test_alt_and_placeholders_travel_from_the_manifest_to_the_markup_on_either_backend(
    ledger_url: str, photos: Path, out_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest's alt reaches the ledger item, status --json and the <img>; every pair gets its
    dominant colour and tiny image, also when a later request reuses every output."""
    monkeypatch.setenv("THUMBCTL_STORE", str(tmp_path / "store"))  # a PostgreSQL ledger has no default store
    runner = CliRunner()

    def thumbctl(*args: object) -> dict:
        result = runner.invoke(app, [*map(str, args), "--db", ledger_url], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    def submitted(alt: str) -> tuple[dict, dict]:
        manifest = photos / "listing.json"  # sources are named relative to the manifest
        items = [{"source": "coffee.png", "id": "cup", "alt": alt}, {"source": "garden.jpeg", "id": "garden"}]
        manifest.write_text(json.dumps({"items": items}))
        shown = submit_here(Thumbctl(ledger_url), manifest, "--out", out_dir, "-w", "1", "-r", "1:1")
        status = thumbctl("status", shown["batch_id"], "--json", "--items")
        return json.loads(Path(shown["manifest_path"]).read_text()), status

    alt = 'A cup of coffee "on" <a> table & a spoon'
    first, status = submitted(alt)
    cup, garden = (next(p for p in first["pictures"] if p["item_id"] == name) for name in ("cup", "garden"))
    (img,) = [parse(cup["picture"]).pictures[0].img]
    assert cup["alt"] == img["alt"] == alt and "&lt;a&gt;" in cup["picture"]
    assert garden["alt"] == parse(garden["picture"]).pictures[0].img["alt"] == ""
    for pair in (cup, garden):
        assert pair["dominant_colour"].startswith("#") and pair["lqip"].startswith("data:image/webp;base64,")
        assert (
            parse(pair["picture"]).pictures[0].img["style"].startswith(f"background-color:{pair['dominant_colour']};")
        )
    by_id = {item["item_id"]: item for item in status["items"]}
    assert by_id["cup"]["alt"] == alt and by_id["garden"]["alt"] == ""
    assert by_id["cup"]["result"]["dominant_colour"] == cup["dominant_colour"]
    assert by_id["cup"]["result"]["lqip"] == cup["lqip"]

    again, status = submitted("A cup of coffee")  # a new request: every output is reused
    assert all(item["result"].get("reused") for item in status["items"])
    cup_again = next(p for p in again["pictures"] if p["item_id"] == "cup")
    assert (cup_again["dominant_colour"], cup_again["lqip"]) == (cup["dominant_colour"], cup["lqip"])
    assert parse(cup_again["picture"]).pictures[0].img["alt"] == "A cup of coffee"
