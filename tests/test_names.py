from __future__ import annotations

import os
from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.sources.itemids import (
    MAX_SEGMENT_BYTES,
    UNSAFE_PREFIX,
    UnsafeItemId,
    check_item_id,
    escaped_name,
    friendly_stems,
    unsafe_name_id,
)

#: Relative paths (as bytes) no item id can hold, and the id each one gets.
UNSAFE = [
    (b"bad\xffname.jpg", ".unsafe/bad%FFname.jpg"),
    (b"tab\tname.jpg", ".unsafe/tab%09name.jpg"),
    (b"new\nline.jpg", ".unsafe/new%0Aline.jpg"),
    (b"back\\slash.jpg", ".unsafe/back%5Cslash.jpg"),
    (b"50%\x7f.jpg", ".unsafe/50%25%7F.jpg"),
    (b"c1\xc2\x85.jpg", ".unsafe/c1%C2%85.jpg"),
    (b"\xe2\x82.jpg", ".unsafe/%E2%82.jpg"),
    (b"caf\xc3\xa9/\xff.png", ".unsafe/caf\u00e9/%FF.png"),
]


def fs_name(raw: bytes) -> str:
    """The ``str`` the file system gives for a name of these bytes."""
    return os.fsdecode(raw)


def unescaped(item_id: str) -> bytes:
    """The bytes of the relative path an unshortened escaped id spells."""
    head, _, rest = item_id.partition("/")
    assert head == UNSAFE_PREFIX
    return b"/".join(unquote_to_bytes(segment) for segment in rest.split("/"))


@pytest.mark.parametrize(("raw", "expected"), UNSAFE)
def test_unsafe_names_get_an_escaped_id_that_spells_them(raw: bytes, expected: str) -> None:
    item_id = unsafe_name_id(fs_name(raw))
    assert item_id == expected
    assert check_item_id(item_id) == item_id
    assert unescaped(item_id) == raw


@pytest.mark.parametrize(
    ("text", "expected"),
    [("bad\udcffname.jpg", "bad%FFname.jpg"), ("ok/tab\t%.jpg", "ok/tab%09%25.jpg"), ("plain.jpg", "plain.jpg")],
)
def test_escaped_name_writes_only_what_an_id_may_not_hold_as_escapes(text: str, expected: str) -> None:
    assert escaped_name(text) == expected


def test_an_overlong_segment_is_cut_and_ends_in_a_digest_of_its_bytes() -> None:
    first = unsafe_name_id("L" * 230 + "a.jpg")
    second = unsafe_name_id("L" * 230 + "b.jpg")
    assert first != second
    for item_id in (first, second):
        segment = item_id.split("/")[1]
        assert len(segment.encode()) == MAX_SEGMENT_BYTES
        assert segment.startswith("L" * 150) and segment[-18:-16] == "%~"
        assert check_item_id(item_id) == item_id


def test_a_cut_never_splits_an_escape_or_a_character() -> None:
    name = "\u00e9\t" * 150
    segment = unsafe_name_id(name).split("/")[1]
    kept = unquote_to_bytes(segment[: segment.index("%~")]).decode()  # a split character would not decode
    assert len(segment.encode()) <= MAX_SEGMENT_BYTES
    assert len(kept) > 60 and name.startswith(kept)  # a split escape would stay as "%0" text


names = st.binary(min_size=1, max_size=300).filter(lambda raw: b"/" not in raw and b"\0" not in raw)


@given(names, names)
def test_different_names_never_share_an_id_and_every_id_is_safe(a: bytes, b: bytes) -> None:
    first, second = unsafe_name_id(fs_name(a)), unsafe_name_id(fs_name(b))
    assert check_item_id(first) == first and check_item_id(second) == second
    assert (first == second) == (a == b)


def test_names_that_look_alike_once_escaped_keep_apart() -> None:
    raws = [b"a\xff\t", b"a%FF\t", b"a%25FF\t", b"a\\\t", b"a%5C\t", b"a\xff\xfe\t", b"a\xff%FE\t"]
    ids = {unsafe_name_id(fs_name(raw)) for raw in raws}
    assert len(ids) == len(raws)


@pytest.mark.parametrize(("raw", "expected"), [(b".", ".unsafe/%2E"), (b"..", ".unsafe/%2E%2E")])
def test_dot_segments_are_spelled_out(raw: bytes, expected: str) -> None:
    assert unsafe_name_id(fs_name(raw)) == expected


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
        "bad\udcffname.jpg",
        "a\ud800b",
    ],
)
def test_unsafe_ids_are_refused(item_id: str) -> None:
    with pytest.raises(UnsafeItemId):
        check_item_id(item_id)


@pytest.mark.parametrize(
    ("item_id", "reason"),
    [
        ("bad\udcffname.jpg", "is not valid UTF-8"),
        ("a/\ud800.jpg", "is not valid UTF-8"),
        ("tab\t.jpg", "contains control characters"),
        ("back\\slash.jpg", "contains a backslash"),
        ("x" * 201, "has a segment over 200 bytes"),
        ("", "is empty"),
    ],
)
def test_a_refused_id_says_why(item_id: str, reason: str) -> None:
    with pytest.raises(UnsafeItemId) as info:
        check_item_id(item_id)
    assert info.value.reason == reason
    str(info.value).encode("utf-8")  # the message itself is printable text


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
