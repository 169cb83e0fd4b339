from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest
from PIL import Image

from thumbctl.core.models import ItemView
from thumbctl.core.proc import HOST_ID_ENV, host_id, owner_id, owner_is_dead
from thumbctl.core.profile import Ratio
from thumbctl.imaging import verify_output
from thumbctl.storage import fsafe
from thumbctl.storage.fsafe import OutsideOutput, host_tag, temp_writer
from thumbctl.storage.objects import (
    LocalObjectStore,
    Published,
    Verifier,
    object_files,
    put_object,
    remove_empty_shard,
    remove_object,
)
from thumbctl.storage.outputs import LocalOutputTarget, probe_writable, write_json_atomically, write_page
from thumbctl.storage.publishing import restore_at
from thumbctl.storage.thumbnails import shown_output, thumbnail_problem

from support import tree_snapshot

Place = LocalOutputTarget | LocalObjectStore


def as_store(place: Place) -> LocalObjectStore:
    """The store rooted where ``place`` is (these tests often put OUT and STORE in one folder, as the
    earlier layout did)."""
    return LocalObjectStore(place.root)


def object_at(layout: Place, key: str, extension: str) -> str:
    """An object's path in a store rooted where ``layout`` is."""
    return as_store(layout).object_path(key, extension)


def restore_thumbnail(layout: LocalOutputTarget, object_path: str, friendly: str, *, replace: bool) -> str:
    """Reconcile's restore of a thumbnail, through the interfaces: the store gives the object's file,
    the name rules place a copy of it at the name."""
    with LocalObjectStore.of_object(object_path).source(os.path.basename(object_path)) as source:
        return restore_at(layout, os.path.relpath(friendly, layout.root), friendly, source, replace=replace)


def write_temp(place: Place, data: bytes, extension: str) -> str:
    return fsafe.write_temp(place.root, place.tmp_dir, data, extension)


def temp_files(place: Place) -> list[fsafe.StoredFile]:
    return fsafe.temp_files(place.root, place.tmp_dir)


def checked_folder(place: Place, folder: str, *, create: bool) -> bool:
    return fsafe.checked_folder(place.root, folder, create=create)


def symlinked_folder(place: Place, folder: str) -> str | None:
    return fsafe.symlinked_folder(place.root, folder)


def remove_stored_file(place: Place, path: str) -> int:
    return fsafe.remove_file(place.root, path)


def test_layout_paths_stay_inside_out(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    key = "ab" + "0" * 62
    assert object_at(layout, key, "jpg") == str(tmp_path / "objects" / "ab" / f"{key}.jpg")
    assert layout.friendly_path("rooms/sofa", Ratio(16, 9), "webp") == str(tmp_path / "rooms" / "sofa.16x9.webp")
    assert layout.batch_manifest_path("b_1") == str(tmp_path / "batches" / "b_1.json")
    assert layout.batch_sheet_path("b_1") == str(tmp_path / "batches" / "b_1.html")
    assert layout.tmp_dir == str(tmp_path / ".tmp")


def judged_damaged(existing: BinaryIO) -> str | None:
    """A verifier that finds every existing object damaged (for tests that write no real image)."""
    return "does not decode"


def store_object(layout: Place, data: bytes, obj: str, verify: Verifier = judged_damaged) -> Published:
    return put_object(as_store(layout), write_temp(layout, data, "jpg"), obj, verify=verify)


def test_publish_object_is_create_if_absent_and_tolerates_duplicates(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    obj = object_at(layout, "cd" + "1" * 62, "jpg")
    assert store_object(layout, b"same bytes", obj) == Published("created")
    inode = os.stat(obj).st_ino
    assert store_object(layout, b"same bytes", obj) == Published("duplicate")  # duplicate delivery is success
    assert os.stat(obj).st_ino == inode and not os.listdir(layout.tmp_dir)


def jpeg_bytes(quality: int, size: tuple[int, int] = (40, 30), comment: bytes = b"") -> bytes:
    stream = io.BytesIO()
    Image.new("RGB", size, (200, 80, 40)).save(stream, "JPEG", quality=quality, comment=comment)
    return stream.getvalue()


def as_40x30_jpeg(existing: BinaryIO) -> str | None:
    return verify_output(existing, "jpeg", 40, 30)


def same_size_variant(data: bytes) -> bytes:
    """Other bytes of the same length that still decode: one byte of the JPEG comment changed."""
    at = data.index(b"variant") + len(b"variant")
    return data[:at] + b"2" + data[at + 1 :]


@pytest.mark.parametrize("size", ["other", "same"])
def test_an_existing_object_with_other_bytes_that_verifies_is_kept(tmp_path: Path, size: str) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    obj = object_at(layout, "cd" + "1" * 62, "jpg")
    ours = jpeg_bytes(50, comment=b"variant1")
    theirs = jpeg_bytes(95) if size == "other" else same_size_variant(ours)  # another host's codec, say
    store_object(layout, theirs, obj)
    before = Path(obj).read_bytes()
    published = store_object(layout, ours, obj, as_40x30_jpeg)
    assert published == Published("kept") and published.note.startswith("object_mismatch: ")
    assert Path(obj).read_bytes() == before and not os.listdir(layout.tmp_dir)


@pytest.mark.parametrize(
    ("existing", "reason"),
    [
        (jpeg_bytes(95)[:200], "does not decode as jpeg"),
        (jpeg_bytes(95, (30, 30)), "is 30x30, expected 40x30"),
        (b"", "does not decode as jpeg"),
    ],
    ids=["truncated", "wrong-size", "empty"],
)
def test_an_existing_object_that_fails_verification_is_replaced(tmp_path: Path, existing: bytes, reason: str) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    obj = object_at(layout, "ef" + "2" * 62, "jpg")
    store_object(layout, existing, obj)
    published = store_object(layout, jpeg_bytes(50), obj, as_40x30_jpeg)
    assert published.outcome == "replaced" and published.reason.startswith(reason)
    assert published.note.startswith(f"object_replaced: the existing object {reason}")
    assert Path(obj).read_bytes() == jpeg_bytes(50) and not os.listdir(layout.tmp_dir)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_an_object_name_taken_by_no_regular_file_is_replaced_or_refused(tmp_path: Path, kind: str) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    obj = object_at(layout, "ef" + "2" * 62, "jpg")
    os.makedirs(os.path.dirname(obj))
    if kind == "fifo":
        os.mkfifo(obj)  # never opened for a read that could block
        published = store_object(layout, jpeg_bytes(50), obj, as_40x30_jpeg)
        assert published == Published("replaced", "was not a regular file")
        assert Path(obj).read_bytes() == jpeg_bytes(50)
    else:
        os.mkdir(obj)
        with pytest.raises(OSError):
            store_object(layout, jpeg_bytes(50), obj, as_40x30_jpeg)
        assert os.path.isdir(obj)
    assert not os.listdir(layout.tmp_dir)


def test_restore_thumbnail_puts_a_copy_of_its_own_and_leaves_no_temp(tmp_path: Path) -> None:
    store = LocalObjectStore(str(tmp_path / "store"))
    layout = LocalOutputTarget(str(tmp_path / "out"))
    a = store.object_path("aa" + "3" * 62, "jpg")
    b = store.object_path("bb" + "4" * 62, "jpg")
    store_object(store, b"A", a)
    store_object(store, b"B", b)
    friendly = f"{layout.root}/rooms/sofa.1x1.jpg"
    restore_thumbnail(layout, a, friendly, replace=True)
    restore_thumbnail(layout, a, friendly, replace=True)
    assert Path(friendly).read_bytes() == b"A" and not os.path.samefile(friendly, a)
    restore_thumbnail(layout, b, friendly, replace=True)
    assert Path(friendly).read_bytes() == b"B"
    assert not os.path.exists(layout.tmp_dir) or os.listdir(layout.tmp_dir) == []
    assert os.stat(a).st_nlink == os.stat(b).st_nlink == os.stat(friendly).st_nlink == 1


def test_batch_manifest_is_written_atomically(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    write_json_atomically(layout, layout.batch_manifest_path("b_1"), {"ok": True})
    assert json.loads(Path(layout.batch_manifest_path("b_1")).read_text()) == {"ok": True}
    assert not os.path.exists(layout.tmp_dir)  # OUT/.tmp exists only while files are being written


def published_item(tmp_path: Path, state: str = "succeeded") -> ItemView:
    """A succeeded item whose object and friendly name exist, linked, under tmp_path/out."""
    layout = LocalOutputTarget(str(tmp_path / "out"))
    obj = object_at(layout, "ab" + "5" * 62, "jpg")
    store_object(layout, b"pixels", obj)
    friendly = layout.friendly_path("sofa", Ratio(1, 1), "jpg")
    restore_thumbnail(layout, obj, friendly, replace=True)
    return ItemView("sofa.jpg", "/src/sofa.jpg", "1:1", state, 1, None, None, "ab", obj, friendly, "t")


def test_shown_output_is_the_friendly_name_while_it_links_to_the_object(tmp_path: Path) -> None:
    item = published_item(tmp_path)
    assert shown_output(item) == item.friendly_path


@pytest.mark.parametrize("change", ["relinked", "removed"])
def test_shown_output_falls_back_to_the_object_when_the_friendly_name_moved_on(tmp_path: Path, change: str) -> None:
    item = published_item(tmp_path)
    os.unlink(item.friendly_path)
    if change == "relinked":
        Path(item.friendly_path).write_bytes(b"a later batch's output")
    assert shown_output(item) == item.object_path


@pytest.mark.parametrize("state", ["failed", "queued", "cancelled"])
def test_shown_output_is_none_without_a_success(tmp_path: Path, state: str) -> None:
    assert shown_output(published_item(tmp_path, state)) is None


def test_shown_output_is_none_when_the_object_is_gone(tmp_path: Path) -> None:
    item = published_item(tmp_path)
    os.unlink(item.friendly_path)
    os.unlink(item.object_path)
    assert shown_output(item) is None


@pytest.mark.parametrize("inside", [True, False], ids=["inside-out", "elsewhere"])
def test_write_page_replaces_the_file_atomically_and_leaves_no_temp(tmp_path: Path, inside: bool) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    target = Path(layout.batch_sheet_path("b_1")) if inside else tmp_path / "review" / "sheet.html"
    target.parent.mkdir(parents=True)
    target.write_text("old")
    write_page(layout, str(target), "<p>é</p>")
    assert target.read_text(encoding="utf-8") == "<p>é</p>"
    assert os.listdir(target.parent) == [target.name]
    assert not os.path.exists(layout.tmp_dir)


def test_write_page_needs_the_folder_unless_asked_to_create_it(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError):
        write_page(layout, str(tmp_path / "missing" / "sheet.html"), "x")
    assert not (tmp_path / "missing").exists()
    write_page(layout, layout.batch_sheet_path("b_1"), "x", create_folder=True)
    assert Path(layout.batch_sheet_path("b_1")).read_text() == "x"


def test_write_page_refuses_a_directory(tmp_path: Path) -> None:
    (tmp_path / "taken.html").mkdir()
    with pytest.raises(IsADirectoryError):
        write_page(LocalOutputTarget(str(tmp_path / "out")), str(tmp_path / "taken.html"), "x")
    assert os.listdir(tmp_path) == ["taken.html"]


def test_temp_names_carry_their_writer(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    path = write_temp(layout, b"x", "jpg")
    [found] = temp_files(layout)
    assert found.path == path and found.size == 1
    assert temp_writer(found.name) == owner_id() and not owner_is_dead(temp_writer(found.name))


def test_a_same_named_host_with_another_identity_does_not_own_our_temp_files(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"4242-99-{host_tag()}-{'a' * 12}.jpg"
    assert temp_writer(name) == f"{host_id()}:4242:99"
    monkeypatch.setenv(HOST_ID_ENV, "host-b")
    assert temp_writer(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "4242-0123456789ab.jpg",  # the older <pid>-<random> scheme
        f"4242-99-{'0' * 8}-{'a' * 12}.jpg",  # written on another host
        "notes.txt",
    ],
)
def test_temp_names_without_a_known_writer_give_none(name: str) -> None:
    assert host_tag() != "0" * 8
    assert temp_writer(name) is None


def test_object_files_lists_only_names_that_fit_the_layout(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    key = "ab" + "5" * 62
    store_object(layout, b"A", object_at(layout, key, "jpg"))
    (tmp_path / "objects" / "ab" / "stray.jpg").write_bytes(b"?")
    (tmp_path / "objects" / "cd").mkdir()
    (tmp_path / "objects" / "cd" / f"{key}.jpg").write_bytes(b"wrong shard")
    assert [(k, f.path) for k, f in object_files(as_store(layout))] == [(key, object_at(layout, key, "jpg"))]
    assert list(object_files(LocalObjectStore(str(tmp_path / "nowhere")))) == []


def test_thumbnail_problem(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path))
    a = object_at(layout, "aa" + "6" * 62, "jpg")
    b = object_at(layout, "bb" + "7" * 62, "jpg")
    store_object(layout, b"A", a)
    store_object(layout, b"B", b)
    friendly = str(tmp_path / "x.1x1.jpg")
    assert thumbnail_problem(a, friendly) == "missing"
    restore_thumbnail(layout, b, friendly, replace=True)
    assert thumbnail_problem(a, friendly) == "modified"
    restore_thumbnail(layout, a, friendly, replace=True)
    assert thumbnail_problem(a, friendly) is None
    os.unlink(friendly)
    os.symlink(a, friendly)
    assert thumbnail_problem(a, friendly) == "wrong"
    os.unlink(friendly)
    os.link(a, friendly)  # a hard link of the earlier layout is the object's own file too
    assert thumbnail_problem(a, friendly) is None


def test_removing_an_object_frees_its_bytes_and_leaves_its_thumbnails(tmp_path: Path) -> None:
    store = LocalObjectStore(str(tmp_path / "store"))
    layout = LocalOutputTarget(str(tmp_path / "out"))
    obj = store.object_path("ee" + "8" * 62, "jpg")
    store_object(store, b"12345", obj)
    kept = f"{layout.root}/kept.1x1.jpg"
    restore_thumbnail(layout, obj, kept, replace=True)
    assert remove_object(store, obj) == 5
    assert Path(kept).read_bytes() == b"12345" and not os.path.exists(obj)
    assert remove_stored_file(layout, kept) == 5
    assert remove_stored_file(layout, kept) == 0


@pytest.mark.parametrize("outside", ["../elsewhere.jpg", "/elsewhere/x.jpg", "."])
def test_remove_stored_file_refuses_anything_outside_out(tmp_path: Path, outside: str) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    with pytest.raises(ValueError, match="not inside"):
        remove_stored_file(layout, os.path.join(layout.root, outside))


# -- symlinks inside OUT: nothing is written, linked, renamed or removed through one ---------------


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder outside OUT holding a user's file, with the names thumbctl would write."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "keep.1x1.jpg").write_text("precious user data")
    (folder / "b_1.json").write_text("precious user data")
    (folder / "b_1.html").write_text("precious user data")
    return folder


def symlink_in_out(layout: LocalOutputTarget, name: str, target: Path) -> None:
    link = Path(layout.root) / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def _publish(layout: LocalOutputTarget) -> None:
    store_object(layout, b"A", object_at(layout, "aa" + "3" * 62, "jpg"))


def _link(layout: LocalOutputTarget) -> None:
    obj = object_at(layout, "aa" + "3" * 62, "jpg")
    store_object(layout, b"A", obj)
    restore_thumbnail(layout, obj, f"{layout.root}/evil/keep.1x1.jpg", replace=True)


def _remove(layout: LocalOutputTarget) -> None:
    remove_stored_file(layout, f"{layout.root}/evil/keep.1x1.jpg")


@pytest.mark.parametrize(
    ("linked", "operation"),
    [
        (".tmp", lambda layout: write_temp(layout, b"A", "jpg")),
        ("objects", _publish),
        ("objects/aa", _publish),
        ("evil", _link),
        ("evil", _remove),
        ("batches", lambda layout: write_json_atomically(layout, layout.batch_manifest_path("b_1"), {"x": 1})),
        ("batches", lambda layout: write_page(layout, layout.batch_sheet_path("b_1"), "x", create_folder=True)),
        ("batches", lambda layout: write_page(layout, layout.batch_sheet_path("b_1"), "x")),
    ],
    ids=["temp", "object", "object-shard", "friendly-name", "remove", "manifest", "page-created", "page"],
)
def test_nothing_goes_through_a_symlinked_folder_in_out(
    tmp_path: Path, victim: Path, linked: str, operation: Callable[[LocalOutputTarget], object]
) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    symlink_in_out(layout, linked, victim)
    before = tree_snapshot(victim)
    with pytest.raises(OutsideOutput, match=rf"{re.escape(layout.root)}/{re.escape(linked)} is a symlink"):
        operation(layout)
    assert tree_snapshot(victim) == before


def test_a_symlink_deep_in_a_friendly_path_is_found_before_any_folder_is_made(tmp_path: Path, victim: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    symlink_in_out(layout, "a/evil", victim)
    before = tree_snapshot(victim)
    with pytest.raises(OutsideOutput):
        checked_folder(layout, f"{layout.root}/a/evil/b/c", create=True)
    assert tree_snapshot(victim) == before and not (victim / "b").exists()
    assert symlinked_folder(layout, f"{layout.root}/a/evil/b") == f"{layout.root}/a/evil"
    assert symlinked_folder(layout, f"{layout.root}/a/other") is None


def test_an_out_folder_that_became_a_symlink_is_refused(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "out").symlink_to(victim, target_is_directory=True)
    before = tree_snapshot(victim)
    with pytest.raises(OutsideOutput):
        write_temp(LocalOutputTarget(str(tmp_path / "out")), b"A", "jpg")
    assert tree_snapshot(victim) == before


@pytest.mark.parametrize("out_exists", [True, False], ids=["out-there", "out-missing"])
@pytest.mark.parametrize("operation", [lambda layout: write_temp(layout, b"A", "jpg"), _link], ids=["temp", "link"])
def test_a_folder_above_out_that_became_a_symlink_is_refused(
    tmp_path: Path, victim: Path, out_exists: bool, operation: Callable[[LocalOutputTarget], object]
) -> None:
    """OUT's path was resolved at submit; a parent of it swapped for a symlink afterwards would
    move every write (and the making of a missing OUT) to wherever the link points."""
    layout = LocalOutputTarget(str(tmp_path / "parent" / "out"))
    if out_exists:
        (victim / "out").mkdir()
    (tmp_path / "parent").symlink_to(victim, target_is_directory=True)
    before = tree_snapshot(victim)
    with pytest.raises(OutsideOutput, match=rf"{re.escape(str(tmp_path / 'parent'))} is a symlink"):
        operation(layout)
    assert tree_snapshot(victim) == before


def test_a_file_where_a_folder_of_out_belongs_is_named_in_the_error(tmp_path: Path) -> None:
    """Callers report ``strerror`` alone (an item's detail, submit's refusal): it must say which folder."""
    layout = LocalOutputTarget(str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".tmp").write_text("a file")
    with pytest.raises(NotADirectoryError) as refused:
        write_temp(layout, b"A", "jpg")
    assert refused.value.strerror == f"{layout.tmp_dir} is not a folder"


def test_checked_folder_makes_missing_folders_as_real_ones(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    assert checked_folder(layout, f"{layout.root}/a/b", create=False) is False
    assert not (tmp_path / "out").exists()
    assert checked_folder(layout, f"{layout.root}/a/b", create=True) is True
    assert (tmp_path / "out" / "a" / "b").is_dir() and not (tmp_path / "out" / "a").is_symlink()
    with pytest.raises(ValueError, match="not inside"):
        checked_folder(layout, str(tmp_path / "elsewhere"), create=True)


@pytest.mark.parametrize("at", ["victim", "object"])
def test_a_symlink_at_the_object_name_is_replaced_not_written_through(tmp_path: Path, victim: Path, at: str) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    obj = object_at(layout, "aa" + "3" * 62, "jpg")
    os.makedirs(os.path.dirname(obj))
    (victim / "same.jpg").write_bytes(b"A")  # the same bytes: must still not count as the object
    os.symlink(victim / "same.jpg" if at == "victim" else victim / "keep.1x1.jpg", obj)
    before = tree_snapshot(victim)
    assert store_object(layout, b"A", obj, as_40x30_jpeg) == Published("replaced", "was not a regular file")
    assert not os.path.islink(obj) and Path(obj).read_bytes() == b"A"
    assert tree_snapshot(victim) == before


@pytest.mark.parametrize("points_to", ["victim", "object"])
def test_a_symlink_at_the_friendly_name_is_replaced_by_a_copy(tmp_path: Path, victim: Path, points_to: str) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    obj = object_at(layout, "aa" + "3" * 62, "jpg")
    store_object(layout, b"A", obj)
    friendly = f"{layout.root}/keep.1x1.jpg"
    os.symlink(victim / "keep.1x1.jpg" if points_to == "victim" else obj, friendly)
    before = tree_snapshot(victim)
    restore_thumbnail(layout, obj, friendly, replace=True)
    assert not os.path.islink(friendly) and Path(friendly).read_bytes() == b"A"
    assert os.stat(friendly).st_ino != os.stat(obj).st_ino
    assert tree_snapshot(victim) == before


@pytest.mark.parametrize("linked", [".tmp", "objects", "objects/aa"])
def test_listing_never_follows_a_symlinked_folder(tmp_path: Path, victim: Path, linked: str) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    key = "aa" + "3" * 62
    (victim / "aa").mkdir()
    (victim / "aa" / f"{key}.jpg").write_bytes(b"looks like an object")
    (victim / f"{key}.jpg").write_bytes(b"looks like an object")
    symlink_in_out(layout, linked, victim if linked != "objects/aa" else victim / "aa")
    assert temp_files(layout) == [] and list(object_files(as_store(layout))) == []


def test_gc_removal_drops_the_emptied_shard_folder_only(tmp_path: Path) -> None:
    layout = LocalOutputTarget(str(tmp_path / "out"))
    first, second = object_at(layout, "aa" + "3" * 62, "jpg"), object_at(layout, "aa" + "4" * 62, "jpg")
    for obj in (first, second):
        store_object(layout, b"A", obj)
    assert remove_object(as_store(layout), first) == 1
    assert os.listdir(os.path.dirname(first)) == [os.path.basename(second)]
    assert remove_object(as_store(layout), second) == 1
    assert os.listdir(f"{layout.root}/objects") == []
    assert remove_empty_shard(as_store(layout), f"{layout.root}/objects/aa") is False  # already gone
    with pytest.raises(ValueError, match="not a shard folder"):
        remove_empty_shard(as_store(layout), f"{layout.root}/.tmp")


def test_the_writability_probe_leaves_no_trace(tmp_path: Path) -> None:
    probe_writable(LocalOutputTarget(str(tmp_path / "a" / "b" / "out")))
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "out"
    (existing / ".tmp").mkdir(parents=True)
    probe_writable(LocalOutputTarget(str(existing)))
    assert [p.name for p in existing.rglob("*")] == [".tmp"]
