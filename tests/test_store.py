from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.settings import Ratio
from thumbctl.store import OutputLayout, UnsafeItemId, check_item_id, friendly_stems


@pytest.mark.parametrize("item_id", ["a.jpg", "rooms/living room.jpg", "ünïcode/фото.png", ".hidden/x.jpg", "a..b.jpg"])
def test_safe_ids_pass(item_id: str) -> None:
    assert check_item_id(item_id) == item_id


@pytest.mark.parametrize(
    "item_id",
    [
        "",
        "/abs.jpg",
        "../x.jpg",
        "a/../../x.jpg",
        "a/./b.jpg",
        "a//b.jpg",
        "a/",
        "x\n.jpg",
        "tab\t.jpg",
        "back\\slash.jpg",
        ".tmp/x.jpg",
        "..",
        "x" * 201 + ".jpg",
    ],
)
def test_unsafe_ids_are_refused(item_id: str) -> None:
    with pytest.raises(UnsafeItemId):
        check_item_id(item_id)


def test_friendly_stems_resolve_collisions_in_sorted_order() -> None:
    stems = friendly_stems(["b/a.png", "b/a.jpg", "c", "c.jpg", "d.tar.gz", ".hidden"])
    assert stems == {
        "b/a.jpg": "b/a",
        "b/a.png": "b/a.png",
        "c": "c",
        "c.jpg": "c.jpg",
        "d.tar.gz": "d.tar",
        ".hidden": ".hidden",
    }


safe_segment = st.text(st.sampled_from("abc.xyz-_"), min_size=1, max_size=6).filter(lambda s: s not in {".", ".."})
safe_ids = st.lists(safe_segment, min_size=1, max_size=3).map("/".join)


@given(st.lists(safe_ids, unique=True, min_size=1, max_size=12))
def test_friendly_stems_never_collide(item_ids: list[str]) -> None:
    stems = friendly_stems(item_ids)
    assert len(set(stems.values())) == len(item_ids)


def test_layout_paths_stay_inside_out(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path))
    key = "ab" + "0" * 62
    assert layout.object_path(key, "jpg") == str(tmp_path / "objects" / "ab" / f"{key}.jpg")
    assert layout.friendly_path("rooms/sofa", Ratio(16, 9), "webp") == str(tmp_path / "rooms" / "sofa.16x9.webp")
    assert layout.batch_manifest_path("b_1") == str(tmp_path / "batches" / "b_1.json")
    assert layout.tmp_dir == str(tmp_path / ".tmp")
