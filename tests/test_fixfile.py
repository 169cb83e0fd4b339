"""The fix file as a document: what ``thumbctl focus`` writes reads back the same, sorted and one
line per photo; anything else is refused with the line that is wrong, and a file thumbctl did not
write is never taken for one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.core.errors import UsageError
from thumbctl.core.fixes import FixFileState, StaleFix, path_key
from thumbctl.intake.fixfile import FixEntry, FixFile, parse_fix_file

RATIOS = st.sampled_from(["1:1", "4:3", "3:4", "16:9", "4:5", "7:3"])  # as the ledger writes them
UNIT = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
PATHS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=30)
ENTRIES = st.builds(
    FixEntry,
    path=PATHS,
    digest=st.text("0123456789abcdef", min_size=64, max_size=64),
    width=st.none() | st.integers(1, 100_000),
    height=st.none() | st.integers(1, 100_000),
    phash=st.none() | st.text("0123456789abcdef", min_size=16, max_size=16),
    focus=st.dictionaries(RATIOS, st.tuples(UNIT, UNIT), min_size=1, max_size=3),
)


def file_of(entries: list[FixEntry]) -> FixFile:
    file = FixFile()
    for entry in entries:
        file = file.with_entry(entry)
    return file


@given(st.lists(ENTRIES, max_size=8))
def test_what_is_written_reads_back_the_same_and_writes_the_same_bytes_again(entries: list[FixEntry]) -> None:
    file = file_of(entries)
    data = file.render()
    again = parse_fix_file(data, "f")
    assert again == file
    assert again.render() == data
    assert [e.path for e in again.entries] == sorted({e.path for e in entries})


@given(st.lists(ENTRIES, min_size=1, max_size=8))
def test_each_photo_is_one_line_so_a_fix_changes_one_line_of_a_diff(entries: list[FixEntry]) -> None:
    file = file_of(entries)
    lines = file.render().decode().splitlines()
    photo_lines = [line for line in lines if line.startswith('    {"path"')]
    assert len(photo_lines) == len(file.entries)
    changed = file.with_entry(FixEntry(file.entries[0].path, "0" * 64, focus={"1:1": (0.5, 0.5)}))
    diff = set(changed.render().decode().splitlines()) ^ set(lines)
    assert len(diff) == 2  # the old line and the new one


def test_an_entry_without_a_fix_leaves_the_file() -> None:
    file = file_of([FixEntry("a.jpg", "1" * 64, focus={"4:3": (0.1, 0.2)})])
    assert file.with_entry(FixEntry("a.jpg", "1" * 64)).entries == ()


GOOD = {"path": "a.jpg", "digest": "ab" * 32, "width": 10, "height": 20, "focus": {"4:3": [0.1, 0.2]}}


@pytest.mark.parametrize(
    ("photo", "fragment"),
    [
        ({**GOOD, "focus": {"4:3": [1.5, 0.2]}}, "[x, y] with both in 0..1"),
        ({**GOOD, "focus": {"4:3": [0.1]}}, "[x, y] with both in 0..1"),
        ({**GOOD, "focus": {"4:3": ["0.1", 0.2]}}, "[x, y] with both in 0..1"),
        ({**GOOD, "focus": {"4-3": [0.1, 0.2]}}, "is not one ratio"),
        ({**GOOD, "focus": [0.1, 0.2]}, '"focus" must map ratios'),
        ({**GOOD, "width": -3}, "whole numbers of pixels"),
        ({**GOOD, "width": True}, "whole numbers of pixels"),
        ({**GOOD, "phash": "xyz"}, "16 hex digits"),
        ({key: v for key, v in GOOD.items() if key != "digest"}, 'needs "path" (text) and "digest"'),
        ({**GOOD, "digest": "not-a-digest"}, "64 hex digits"),
        ("a.jpg", "must be an object"),
    ],
)
def test_a_damaged_entry_is_refused_by_its_number_and_what_is_wrong(photo: object, fragment: str) -> None:
    data = json.dumps({"generator": "thumbctl", "version": 1, "photos": [GOOD, photo]}).encode()
    with pytest.raises(UsageError) as raised:
        parse_fix_file(data, "shop/thumbctl-focus.json")
    assert raised.value.code == "bad_focus_file"
    assert "shop/thumbctl-focus.json: photo 2" in str(raised.value) and fragment in str(raised.value)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"{not json", "bad_focus_file"),
        (b"\xff\xfe", "bad_focus_file"),
        (b'{"generator": "thumbctl", "version": 2, "photos": []}', "bad_focus_file"),
        (b'{"generator": "thumbctl", "version": 1, "photos": {}}', "bad_focus_file"),
        (b'{"photos": []}', "focus_file_taken"),
        (b"[]", "focus_file_taken"),
        (b'{"generator": "someone else", "version": 1, "photos": []}', "focus_file_taken"),
    ],
)
def test_a_file_that_is_not_a_fix_file_of_thumbctl_is_refused(data: bytes, code: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_fix_file(data, "f")
    assert raised.value.code == code


@pytest.mark.parametrize(
    ("root", "source", "key"),
    [
        ("/shop", "/shop/a/b.jpg", "a/b.jpg"),
        ("/shop/", "/shop/b.jpg", "b.jpg"),
        ("/shop", "/shopping/b.jpg", "/shopping/b.jpg"),
        ("s3://bucket/photos", "s3://bucket/photos/x/y.jpg", "x/y.jpg"),
        ("/shop", "https://u:secret@cdn.example/a.jpg", "https://cdn.example/a.jpg"),
    ],
)
def test_a_photo_is_named_by_its_path_below_the_root_or_its_url_without_secrets(
    root: str, source: str, key: str
) -> None:
    assert path_key(root, source) == key


@given(
    st.frozensets(st.tuples(st.text("0123456789abcdef", min_size=4, max_size=8), RATIOS), max_size=5),
    st.dictionaries(
        st.text("0123456789abcdef", min_size=4, max_size=8),
        st.builds(StaleFix, PATHS, st.lists(RATIOS, max_size=3).map(tuple), st.sampled_from(["picture_changed"])),
        max_size=3,
    ),
)
def test_the_ledger_reads_back_the_state_it_kept_of_a_fix_file(applied: frozenset, stale: dict) -> None:
    state = FixFileState(applied, stale)
    assert FixFileState.from_text(state.to_text()) == state


@pytest.mark.parametrize("text", [None, "", "{", "[]", '{"applied": 3}', '{"stale": {"d": {}}}'])
def test_a_state_that_does_not_read_is_empty_never_an_error(text: str | None) -> None:
    assert FixFileState.from_text(text) == FixFileState()


def test_removing_the_last_photos_line_leaves_a_file_that_still_reads() -> None:
    file = file_of([FixEntry(p, str(n) * 64, focus={"1:1": (0.5, 0.5)}) for n, p in enumerate(["a.jpg", "b.jpg"])])
    lines = file.render().decode().splitlines()
    edited = "\n".join(line for line in lines if '"b.jpg"' not in line)  # "a.jpg"'s line keeps its comma
    assert edited.count('{"path"') == 1 and "},\n  ]" in edited
    assert [e.path for e in parse_fix_file(edited.encode(), "f").entries] == ["a.jpg"]


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 5000,
        b"[" * 1000 + b"]" * 1000,
        b'{"generator": "thumbctl", "version": 1, "photos": [{"path": "a", "width": ' + b"1" * 5000 + b"}]}",
        b'{"generator": "thumbctl", "version": ' + b"[0," * 300 + b"0" + b"]" * 300 + b', "photos": []}',
        b'{"generator": "thumbctl", "version": true, "photos": []}',
        b'{"generator": "thumbctl", "version": 1.0, "photos": []}',
    ],
    ids=["unclosed", "deep", "huge number", "long version", "version true", "version 1.0"],
)
def test_a_hostile_file_is_refused_in_one_short_line(data: bytes) -> None:
    with pytest.raises(UsageError) as raised:
        parse_fix_file(data, "f")
    assert raised.value.code in ("bad_focus_file", "focus_file_taken")
    assert len(str(raised.value)) < 400 and "\n" not in str(raised.value)
