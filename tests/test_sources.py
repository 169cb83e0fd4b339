from __future__ import annotations

import io
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from thumbctl.core.errors import ItemFailure
from thumbctl.core.scanrules import ScanRules
from thumbctl.sources.scan import SourceFolder, digest_bounded, open_source, read_source, resolve_source, scan_directory

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


def make_char_device(path: Path) -> None:
    """A character device like /dev/zero (1, 5) at ``path``: endless zeros to whoever reads it."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")


def swap_for_link(path: Path, target: Path) -> None:
    """Move ``path`` aside and put a symlink to ``target`` in its place, as an attacker would."""
    path.rename(path.with_name(path.name + ".orig"))
    path.symlink_to(target, target_is_directory=target.is_dir())


def test_open_source_reads_a_regular_file_below_the_root(tree: Path) -> None:
    with open_source(str(tree), str(tree / "sub" / "deeper" / "c.webp")) as stream:
        assert stream.read() == (tree / "sub" / "deeper" / "c.webp").read_bytes()
    assert read_source(str(tree), str(tree / "a.jpg"), 10**6) == (tree / "a.jpg").read_bytes()


def replaced(path: Path, make: Callable[[Path], object]) -> None:
    """Remove what is at ``path`` and let ``make`` put something else there."""
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    make(path)


OUTSIDE, NOT_A_FILE, GONE = "path_outside_root", "unsupported_format", "source_missing"

#: (what happens to the tree after its paths were checked, the source then opened, its code)
SWAPS: dict[str, tuple[Callable[[Path, Path], None], str, str]] = {
    "folder -> link out": (lambda root, out: swap_for_link(root / "sub", out), "sub/B.PNG", OUTSIDE),
    "deeper -> link out": (lambda root, out: swap_for_link(root / "sub/deeper", out), "sub/deeper/c.webp", OUTSIDE),
    "folder -> link inside": (lambda root, out: swap_for_link(root / "sub", root / "sub2"), "sub/B.PNG", OUTSIDE),
    "folder -> link to /dev": (lambda root, out: swap_for_link(root / "sub", Path("/dev")), "sub/zero", OUTSIDE),
    "file -> link": (lambda root, out: swap_for_link(root / "a.jpg", out / "B.PNG"), "a.jpg", OUTSIDE),
    "root -> link": (lambda root, out: swap_for_link(root, root.with_name("root2")), "a.jpg", OUTSIDE),
    "parent -> link": (lambda root, out: swap_for_link(root.parent, root.parent.with_name("moved")), "a.jpg", OUTSIDE),
    "file -> FIFO": (lambda root, out: replaced(root / "a.jpg", os.mkfifo), "a.jpg", NOT_A_FILE),
    "file -> device": (lambda root, out: replaced(root / "a.jpg", make_char_device), "a.jpg", NOT_A_FILE),
    "file -> folder": (lambda root, out: replaced(root / "a.jpg", Path.mkdir), "a.jpg", NOT_A_FILE),
    "folder -> file": (lambda root, out: replaced(root / "sub", lambda p: p.write_text("x")), "sub/B.PNG", GONE),
    "gone": (lambda root, out: (root / "a.jpg").unlink(), "a.jpg", GONE),
}


@pytest.mark.parametrize("case", list(SWAPS))
def test_open_source_follows_no_symlink_and_opens_regular_files_only(tmp_path: Path, case: str) -> None:
    """Whatever replaced a component after submit, the open fails at once with a stable code
    and reads nothing through a symlink (the trees outside hold readable copies)."""
    base = tmp_path / "base"
    base.mkdir()
    tree = base / "root"
    make_image(tree / "a.jpg", (8, 8), "JPEG")
    make_image(tree / "sub" / "B.PNG", (8, 8), "PNG")
    make_image(tree / "sub" / "deeper" / "c.webp", (8, 8), "WEBP")
    shutil.copytree(tree / "sub", tree / "sub2")
    shutil.copytree(tree, tree.with_name("root2"))
    outside = tmp_path / "outside"
    shutil.copytree(tree / "sub", outside)
    setup, given, code = SWAPS[case]
    recorded = str(tree / given)  # the real paths as submit records them
    setup(tree, outside)
    started = time.monotonic()
    with pytest.raises(ItemFailure) as info:
        read_source(str(tree), recorded, 10**6)
    assert info.value.code == code, info.value.detail
    assert time.monotonic() - started < 5


def test_one_source_folder_opens_many_sources_and_still_refuses_links_below_it(tree: Path, tmp_path: Path) -> None:
    with SourceFolder(str(tree)) as folder:
        with folder.open(str(tree / "a.jpg")) as first:
            assert first.read() == (tree / "a.jpg").read_bytes()
        swap_for_link(tree / "sub", tmp_path)
        with pytest.raises(ItemFailure) as info:
            folder.open(str(tree / "sub" / "B.PNG"))
        assert info.value.code == "path_outside_root"
        with folder.open(str(tree / "sub.orig" / "B.PNG")) as moved:
            assert moved.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("given", ["/elsewhere/a.jpg", "{root}", "{root}/../x.jpg", "{root}2/a.jpg"])
def test_open_source_refuses_paths_not_below_the_root(tree: Path, given: str) -> None:
    with pytest.raises(ItemFailure) as info:
        open_source(str(tree), given.format(root=tree))
    assert info.value.code == "path_outside_root"


def test_reads_stop_one_byte_past_the_limit(tree: Path) -> None:
    size = (tree / "a.jpg").stat().st_size
    with pytest.raises(ItemFailure) as info:
        read_source(str(tree), str(tree / "a.jpg"), size - 1)
    assert info.value.code == "too_large"
    stream = io.BytesIO(b"x" * 100)
    with pytest.raises(ItemFailure) as info:
        digest_bounded(stream, 10, "grown.jpg")
    assert info.value.code == "too_large" and stream.tell() == 11
    assert digest_bounded(io.BytesIO(b"x" * 10), 10, "same.jpg") == digest_bounded(io.BytesIO(b"x" * 10), 99, "x")
