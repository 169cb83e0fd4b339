"""Name templates (--name) and never clobbering a file thumbctl did not publish."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from thumbctl import Ledger
from thumbctl.cli import app
from thumbctl.core.naming import (
    NamedItem,
    NameFields,
    NameTemplateError,
    assign_names,
    check_template,
    default_template,
)
from thumbctl.upkeep.reconcile import find_problems

from harness import Thumbctl
from inprocess import submit_here
from support import is_copy_of, make_image


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return cli_on(str(tmp_path / "ledger.db"), monkeypatch)


@pytest.fixture
def cli_both(ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The CLI on a fresh ledger of each backend (with a store: a PostgreSQL ledger has none by default)."""
    monkeypatch.setenv("THUMBCTL_STORE", str(tmp_path / "store"))
    return cli_on(ledger_url, monkeypatch)


def cli_on(db: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("THUMBCTL_DB", db)
    monkeypatch.delenv("THUMBCTL_OUT", raising=False)
    monkeypatch.delenv("THUMBCTL_NAME", raising=False)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def fields(path: str = "rooms/sofa", ratio: str = "1x1", size: int = 512, width: int = 512) -> NameFields:
    return NameFields(path, ratio, size, width, width, "jpg")


# -- the template ---------------------------------------------------------------------------------


def test_the_default_template_gives_todays_names_for_one_size_and_adds_the_size_for_several() -> None:
    assert assign_names(default_template(), [NamedItem("a", fields())]) == ["rooms/sofa.1x1.jpg"]
    assert assign_names(default_template(1), [NamedItem("a", fields())]) == ["rooms/sofa.1x1.jpg"]
    two = [NamedItem("a", fields(size=320, width=320)), NamedItem("b", fields(size=640, width=640))]
    assert assign_names(default_template(2), two) == ["rooms/sofa.1x1.320.jpg", "rooms/sofa.1x1.640.jpg"]


def test_every_field_renders() -> None:
    template = "{ratio}/{stem}-{size}-{width}x{height}.{ext}|{path}"
    assert assign_names(template, [NamedItem("a", fields(width=300))]) == ["1x1/sofa-512-300x300.jpg|rooms/sofa"]


@pytest.mark.parametrize(
    "template, problem",
    [
        ("{stem}.{nope}", "unknown field {nope}"),
        ("{0}.jpg", "unknown field {0}"),
        ("{stem:>10}.{ext}", "takes no conversion or format spec"),
        ("{stem!r}.{ext}", "takes no conversion or format spec"),
        ("{stem.{ext}", "literal braces"),
        ("", "empty"),
    ],
)
def test_a_template_with_bad_syntax_is_refused(template: str, problem: str) -> None:
    with pytest.raises(NameTemplateError, match=problem.replace("{", r"\{").replace("}", r"\}")):
        check_template(template)


@pytest.mark.parametrize(
    "template, problem",
    [
        ("/tmp/{stem}.{ext}", "is an absolute path"),
        ("../{path}.{ext}", "has an empty, '.' or '..' segment"),
        ("{path}/../../x.{ext}", "has an empty, '.' or '..' segment"),
        ("a//{path}.{ext}", "has an empty, '.' or '..' segment"),
        ("{path}/.{ext}/", "has an empty, '.' or '..' segment"),
        ("x\x01{path}.{ext}", "contains control characters"),
        ("x\\{path}.{ext}", "contains a backslash"),
        (".tmp/{path}.{ext}", "OUT/.tmp/"),
        ("objects/{path}.{ext}", "OUT/objects/"),
        ("batches/{stem}.{ext}", "OUT/batches/"),
        ("{path}" + "x" * 260 + ".{ext}", "over 255 bytes"),
    ],
)
def test_a_template_that_could_leave_out_or_write_into_thumbctls_folders_is_refused(
    template: str, problem: str
) -> None:
    with pytest.raises(NameTemplateError, match=problem.replace(".", r"\.").replace("(", r"\(")) as raised:
        assign_names(template, [NamedItem("rooms/sofa.jpg (1:1)", fields())])
    assert repr(template) in str(raised.value) or problem in str(raised.value)


@pytest.mark.parametrize(
    "template, items",
    [
        ("{stem}.{ext}", [NamedItem("a/x.jpg (1:1)", fields("a/x")), NamedItem("b/x.jpg (1:1)", fields("b/x"))]),
        ("{path}.{ext}", [NamedItem("x.jpg (1:1)", fields()), NamedItem("x.jpg (4:3)", fields(ratio="4x3"))]),
        (  # two sizes a small source collapses to one width, without --upscale
            "{path}.{width}.{ext}",
            [
                NamedItem("x.jpg (1:1) 320", fields(size=320, width=300)),
                NamedItem("x.jpg (1:1) 640", fields(size=640, width=300)),
            ],
        ),
        ("thumb.jpg", [NamedItem("a.jpg (1:1)", fields("a")), NamedItem("b.jpg (1:1)", fields("b"))]),
    ],
)
def test_two_items_with_one_name_reject_the_template_naming_both(template: str, items: list[NamedItem]) -> None:
    with pytest.raises(NameTemplateError, match="gives two items the same name") as raised:
        assign_names(template, items)
    assert f"{items[0].label} and {items[1].label}" in str(raised.value)


# -- submit -------------------------------------------------------------------------------------------


def record(cli, source: Path, out: Path, *extra: str):
    """``submit --detach``: (its result, its JSON document)."""
    result = cli("submit", source, "--out", out, "--detach", "--json", *extra)
    return result, json.loads(result.stdout) if result.stdout.strip() else None


def render(source: Path, out: Path, *extra: str, states: tuple[str, ...] = ("succeeded",)) -> dict:
    """The document of a submit whose batch ended in one of ``states`` (``succeeded``: a foreground
    run's exit 0), the batch rendered in this process, on the ledger of THUMBCTL_DB."""
    return submit_here(Thumbctl(os.environ["THUMBCTL_DB"]), source, "--out", out, "-w", "1", *extra, states=states)


def test_the_default_names_are_todays(cli, photos: Path, out_dir: Path) -> None:
    render(photos, out_dir, "-r", "1:1", "-r", "16:9")
    names = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*.jpg") if "objects" not in p.parts)
    assert names == [
        "coffee.16x9.jpg",
        "coffee.1x1.jpg",
        "garden.16x9.jpg",
        "garden.1x1.jpg",
        "rooms/kitchen.16x9.jpg",
        "rooms/kitchen.1x1.jpg",
        "rooms/living.16x9.jpg",
        "rooms/living.1x1.jpg",
    ]


def test_a_template_names_the_thumbnails_and_changes_the_request(cli, photos: Path, out_dir: Path) -> None:
    template = "{ratio}/{stem}-{width}x{height}.{ext}"
    batch = render(photos, out_dir, "-r", "4:3", "--size", "200", "--name", template)
    names = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*.jpg") if "objects" not in p.parts)
    assert names == [f"4x3/{stem}-200x150.jpg" for stem in ("coffee", "garden", "kitchen", "living")]
    for name in names:
        with Image.open(out_dir / name) as image:
            assert image.size == (200, 150)
    other = render(photos, out_dir, "-r", "4:3", "--size", "200")
    assert other["batch_id"] != batch["batch_id"]  # another request, not a replay


@pytest.mark.parametrize(
    "template, message",
    [
        ("../{path}.{ext}", "has an empty, '.' or '..' segment"),
        ("/abs/{path}.{ext}", "is an absolute path"),
        ("{stem}.{ratio}.{ext}", "same name 'kitchen.1x1.jpg': more/kitchen.png (1:1) and rooms/kitchen.webp (1:1)"),
        ("{path}.{ext}", "gives two items the same name 'coffee.jpg': coffee.png (1:1) and coffee.png (4:3)"),
    ],
)
def test_a_template_that_escapes_or_collides_rejects_the_batch_with_65(
    cli, photos: Path, out_dir: Path, template: str, message: str
) -> None:
    (photos / "more").mkdir()
    make_image(photos / "more" / "kitchen.png", (100, 100), "PNG", seed=4)
    result, doc = record(cli, photos, out_dir, "-r", "1:1", "-r", "4:3", "--name", template)
    assert result.exit_code == 65 and doc["error"]["code"] == "bad_name"
    assert message in doc["error"]["message"]
    assert not (out_dir / "batches").exists() or not list((out_dir / "batches").iterdir())


def test_a_template_with_an_unknown_field_is_a_usage_error(cli, photos: Path, out_dir: Path) -> None:
    result, _ = record(cli, photos, out_dir, "--name", "{stem}.{colour}")
    assert result.exit_code == 2 and "unknown field {colour}" in result.stderr


# -- never clobber ------------------------------------------------------------------------------------


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("what", ["file", "symlink"])
def test_a_file_thumbctl_did_not_publish_fails_the_item_name_taken_and_is_left_alone(
    cli_both, photos: Path, out_dir: Path, tmp_path: Path, what: str
) -> None:
    cli = cli_both
    mine = out_dir / "garden.1x1.jpg"
    out_dir.mkdir()
    if what == "file":
        mine.write_bytes(b"my own picture")
    else:
        (tmp_path / "elsewhere.jpg").write_bytes(b"my own picture")
        mine.symlink_to(tmp_path / "elsewhere.jpg")
    before = os.lstat(mine)
    batch = render(photos, out_dir, "-r", "1:1", states=("partial",))  # a foreground run exits 1
    assert (batch["counts"]["succeeded"], batch["counts"]["failed"]) == (3, 1)
    assert [(f["item_id"], f["error_code"], f["detail"]) for f in batch["failures"]] == [
        (
            "garden.jpeg",
            "name_taken",
            f"{mine} is a file thumbctl did not publish; it is left as it is (--overwrite replaces it)",
        )
    ]
    after = os.lstat(mine)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (tmp_path / "elsewhere.jpg" if what == "symlink" else mine).read_bytes() == b"my own picture"
    status = json.loads(cli("status", batch["batch_id"], "--items", "--json").stdout)
    garden = next(i for i in status["items"] if i["item_id"] == "garden.jpeg")
    assert garden["state"] == "failed" and garden["error_code"] == "name_taken"
    codes = json.loads(cli("codes", "--json").stdout)["item_error_codes"]
    assert codes["name_taken"]["transient"] is False


def test_overwrite_replaces_a_file_thumbctl_did_not_publish_and_counts_it(cli, photos: Path, out_dir: Path) -> None:
    mine = out_dir / "garden.1x1.jpg"
    out_dir.mkdir()
    mine.write_bytes(b"my own picture")
    batch = render(photos, out_dir, "-r", "1:1", "--overwrite")
    assert (batch["state"], batch["overwritten"], batch["replaced"]) == ("succeeded", 1, 0)
    with Image.open(mine) as image:
        assert image.size == (200, 200)


def test_a_later_batch_replaces_an_earlier_batchs_thumbnail_and_counts_it(
    cli_both, photos: Path, out_dir: Path
) -> None:
    cli = cli_both
    big = render(photos, out_dir, "-r", "1:1", "--size", "128")
    assert big["replaced"] == 0
    second = cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--size", "64")
    assert second.exit_code == 0
    assert "replaced 4 thumbnails an earlier batch published under the same name" in second.stdout
    small = json.loads(cli("status", "--json").stdout)
    small = json.loads(cli("status", small["batches"][0]["batch_id"], "--json").stdout)
    assert (small["state"], small["replaced"], small["overwritten"]) == ("succeeded", 4, 0)
    with Image.open(out_dir / "coffee.1x1.jpg") as image:
        assert image.size == (64, 64)


def test_reconcile_repair_keeps_each_name_with_the_batch_that_wrote_it_last(
    cli, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    render(photos, out_dir, "-r", "1:1", "--size", "128")
    newer = render(photos, out_dir, "-r", "1:1", "--size", "64")
    name = out_dir / "coffee.1x1.jpg"
    name.unlink()
    for _ in range(2):  # a second repair finds nothing to flip back
        assert cli("reconcile", "--repair").exit_code == 0
        with Image.open(name) as image:
            assert image.size == (64, 64)
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert find_problems(ledger) == []
        items = {i.item_id: i for i in ledger.views.items(newer["batch_id"])}
        assert is_copy_of(name, items["coffee.png"].object_path)


def test_a_template_without_the_size_for_several_sizes_rejects_the_batch(cli, photos: Path, out_dir: Path) -> None:
    result, doc = record(cli, photos, out_dir, "-r", "1:1", "--size", "64,128", "--name", "{path}.{ratio}.{ext}")
    assert result.exit_code == 65 and doc["error"]["code"] == "bad_name"
    assert "64 px" in doc["error"]["message"] and "128 px" in doc["error"]["message"]


def test_several_sizes_and_formats_are_named_by_a_template_with_their_fields(cli, photos: Path, out_dir: Path) -> None:
    doc = render(
        photos, out_dir, "-r", "1:1", "--size", "64,128", "--format", "webp,jpeg", "--name", "{stem}-{size}.{ext}"
    )
    assert doc["total"] == 16
    names = sorted(
        p.name for p in out_dir.rglob("*") if p.is_file() and not {"objects", "batches", "thumbctl.json"} & set(p.parts)
    )
    assert names == sorted(
        f"{stem}-{size}.{ext}"
        for stem in ("coffee", "garden", "kitchen", "living")
        for size in (64, 128)
        for ext in ("webp", "jpg")
    )
