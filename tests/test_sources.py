from __future__ import annotations

import os
from pathlib import Path

import pytest

from thumbctl.errors import ItemFailure
from thumbctl.sources import ScanRules, resolve_source, scan_directory

from support import make_image


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    make_image(root / "a.jpg", (8, 8), "JPEG")
    make_image(root / "sub" / "B.PNG", (8, 8), "PNG")
    make_image(root / "sub" / "deeper" / "c.webp", (8, 8), "WEBP")
    make_image(root / "raw-no-extension", (8, 8), "PNG")
    (root / "notes.txt").write_text("not an image")
    make_image(root / ".hidden.jpg", (8, 8), "JPEG")
    make_image(root / ".cache" / "x.jpg", (8, 8), "JPEG")
    return root


def ids(root: Path, rules: ScanRules | None = None, skip: Path | None = None) -> list[str]:
    result = scan_directory(root, rules or ScanRules(), lambda path: skip is not None and path == str(skip))
    return [c.item_id for c in result.candidates]


def test_scan_finds_image_names_recursively_sorted_and_skips_hidden(tree: Path) -> None:
    result = scan_directory(tree, ScanRules())
    assert [c.item_id for c in result.candidates] == ["a.jpg", "sub/B.PNG", "sub/deeper/c.webp"]
    assert result.ignored == 2  # notes.txt and raw-no-extension


def test_include_adds_and_exclude_removes(tree: Path) -> None:
    assert "raw-no-extension" in ids(tree, ScanRules(include=("raw-*",)))
    assert ids(tree, ScanRules(exclude=("sub/*",))) == ["a.jpg"]
    assert ids(tree, ScanRules(exclude=("*.webp",))) == ["a.jpg", "sub/B.PNG"]


def test_scan_skips_the_output_folder_inside_the_root(tree: Path) -> None:
    out = tree / "thumbs"
    make_image(out / "a.1x1.jpg", (8, 8), "JPEG")
    assert "thumbs/a.1x1.jpg" not in ids(tree, skip=out)
    assert "thumbs/a.1x1.jpg" in ids(tree)


def test_directory_symlinks_are_not_followed(tree: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    make_image(elsewhere / "secret.jpg", (8, 8), "JPEG")
    os.symlink(elsewhere, tree / "linked-dir")
    os.symlink(tree, tree / "sub" / "loop")
    assert all(not i.startswith(("linked-dir", "sub/loop")) for i in ids(tree))


def test_file_symlinks_are_candidates_resolved_later(tree: Path, tmp_path: Path) -> None:
    os.symlink(tree / "a.jpg", tree / "alias.jpg")
    os.symlink(tmp_path / "nowhere.jpg", tree / "dangling.jpg")
    assert {"alias.jpg", "dangling.jpg"} <= set(ids(tree))
    assert resolve_source(tree, "alias.jpg") == (tree / "a.jpg").resolve()


@pytest.mark.parametrize(
    "given",
    ["../outside.jpg", "sub/../../outside.jpg", "/etc/passwd", "./../root-sibling/x.jpg"],
)
def test_paths_outside_the_root_fail_before_any_access(tree: Path, given: str) -> None:
    with pytest.raises(ItemFailure) as info:
        resolve_source(tree, given)
    assert info.value.code == "path_outside_root"


def test_symlink_out_of_the_root_is_refused_without_opening_it(tree: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "trap.jpg"
    os.mkfifo(fifo)  # opening it for reading would block the test until its timeout
    os.symlink(fifo, tree / "trap.jpg")
    with pytest.raises(ItemFailure) as info:
        resolve_source(tree, "trap.jpg")
    assert info.value.code == "path_outside_root"


def test_absolute_path_inside_the_root_is_allowed(tree: Path) -> None:
    assert resolve_source(tree, str(tree / "sub" / "B.PNG")) == (tree / "sub" / "B.PNG").resolve()


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        (lambda root: None, "source_missing"),
        (lambda root: os.symlink(root / "gone.jpg", root / "x.jpg"), "source_missing"),
        (
            lambda root: (os.symlink(root / "y.jpg", root / "x.jpg"), os.symlink(root / "x.jpg", root / "y.jpg")),
            "io_error",
        ),
        (lambda root: (root / "x.jpg").mkdir(), "unsupported_format"),
    ],
    ids=["missing", "dangling", "loop", "directory"],
)
def test_unusable_sources_get_their_code(tree: Path, setup, code: str) -> None:
    setup(tree)
    with pytest.raises(ItemFailure) as info:
        resolve_source(tree, "x.jpg")
    assert info.value.code == code


def write_bytes_named(root: Path, rel: bytes) -> None:
    """A real file at the relative path ``rel``, given as bytes (names need not be UTF-8)."""
    path = os.path.join(os.fsencode(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write((root / "a.jpg").read_bytes())


@pytest.mark.parametrize(
    ("rel", "item_id", "reason"),
    [
        (b"bad\xffname.jpg", ".unsafe/bad%FFname.jpg", "is not valid UTF-8"),
        (b"tab\tname.jpg", ".unsafe/tab%09name.jpg", "contains control characters"),
        (b"new\nline.jpg", ".unsafe/new%0Aline.jpg", "contains control characters"),
        (b"back\\slash.jpg", ".unsafe/back%5Cslash.jpg", "contains a backslash"),
        (b"sub/\xfe\xff/x.jpg", ".unsafe/sub/%FE%FF/x.jpg", "is not valid UTF-8"),
        (b"L" * 201 + b".jpg", ".unsafe/" + "L" * 182 + "%~", "has a segment over 200 bytes"),
    ],
)
def test_a_name_that_cannot_be_an_id_is_a_candidate_with_an_escaped_id(
    tree: Path, rel: bytes, item_id: str, reason: str
) -> None:
    write_bytes_named(tree, rel)
    candidates = scan_directory(tree, ScanRules()).candidates
    odd = [c for c in candidates if c.unsafe is not None]
    assert len(odd) == 1 and odd[0].item_id.startswith(item_id) and odd[0].unsafe == reason
    assert os.fsencode(odd[0].path) == os.path.join(os.fsencode(tree), rel)
    assert [c.item_id for c in candidates if c.unsafe is None] == ["a.jpg", "sub/B.PNG", "sub/deeper/c.webp"]
