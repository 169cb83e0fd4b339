from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.core.profile import Ratio
from thumbctl.sources.manifest import ManifestEntry, ManifestError, parse_manifest_text, read_manifest

ENTRIES = [
    ManifestEntry(source="a.jpg"),
    ManifestEntry(source="rooms/b.png", id="listing-7/b", ratios=(Ratio(1, 1), Ratio(3, 2))),
    ManifestEntry(source="c.webp", focus=(0.25, 0.75), alt='A blue mug, "Nordic", 250 ml'),
]


def as_json(entries: list[ManifestEntry], top_ratios: list[str] | None = None) -> str:
    items = []
    for e in entries:
        obj: dict = {"source": e.source}
        if e.id is not None:
            obj["id"] = e.id
        if e.ratios is not None:
            obj["ratios"] = [str(r) for r in e.ratios]
        if e.focus is not None:
            obj["focus"] = list(e.focus)
        if e.alt:
            obj["alt"] = e.alt
        items.append(obj)
    return json.dumps({"items": items, "ratios": top_ratios} if top_ratios else items)


def as_jsonl(entries: list[ManifestEntry]) -> str:
    return "\n".join(json.dumps(obj) for obj in json.loads(as_json(entries))) + "\n"


def as_csv(entries: list[ManifestEntry]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["id", "source", "ratios", "focus_x", "focus_y", "alt"])
    for e in entries:
        fx, fy = e.focus if e.focus else ("", "")
        writer.writerow([e.id or "", e.source, " ".join(str(r) for r in e.ratios or ()), fx, fy, e.alt])
    return buf.getvalue()


@pytest.mark.parametrize(("render", "suffix"), [(as_json, ".json"), (as_jsonl, ".jsonl"), (as_csv, ".csv")])
def test_three_formats_parse_to_the_same_entries(render, suffix: str) -> None:
    assert list(parse_manifest_text(render(ENTRIES), suffix).entries) == ENTRIES


def test_json_object_form_carries_batch_ratios() -> None:
    manifest = parse_manifest_text(as_json(ENTRIES, ["4:5"]), ".json")
    assert manifest.ratios == (Ratio(4, 5),)
    assert len(manifest.entries) == 3


def test_csv_with_only_a_source_column_crlf_and_blank_lines() -> None:
    manifest = parse_manifest_text("source\r\na.jpg\r\n\r\nb.jpg\r\n", ".csv")
    assert [e.source for e in manifest.entries] == ["a.jpg", "b.jpg"]


def test_jsonl_skips_blank_lines() -> None:
    manifest = parse_manifest_text('{"source": "a.jpg"}\n\n   \n{"source": "b.jpg"}', ".jsonl")
    assert [e.source for e in manifest.entries] == ["a.jpg", "b.jpg"]


@pytest.mark.parametrize(
    ("text", "suffix", "fragment"),
    [
        ("{not json", ".json", "invalid JSON"),
        ('{"things": []}', ".json", "unknown top-level"),
        ('{"ratios": ["1:1"]}', ".json", '"items"'),
        ('"a.jpg"', ".json", "list of items"),
        ('["a.jpg"]', ".json", "item 1"),
        ('[{"id": "x"}]', ".json", '"source"'),
        ('[{"source": ""}]', ".json", '"source"'),
        ('[{"source": "a.jpg", "id": 7}]', ".json", '"id"'),
        ('[{"source": "a.jpg", "focal": [0.5, 0.5]}]', ".json", "unknown field"),
        ('[{"source": "a.jpg", "ratios": ["4:x"]}]', ".json", "bad ratio"),
        ('[{"source": "a.jpg", "ratios": []}]', ".json", "ratios"),
        ('[{"source": "a.jpg", "focus": [1.5, 0]}]', ".json", "focus"),
        ('[{"source": "a.jpg", "focus": [0.5]}]', ".json", "focus"),
        ('[{"source": "a.jpg", "focus": [true, 0]}]', ".json", "focus"),
        ('{"source": "a.jpg"}\n{oops', ".jsonl", "line 2"),
        ('["a.jpg"]', ".jsonl", "line 1"),
        ("", ".csv", "empty"),
        ("id,path\nx,a.jpg\n", ".csv", "unknown column"),
        ("id\nx\n", ".csv", '"source"'),
        ("source,focus_x\na.jpg,0.5\n", ".csv", "focus_y"),
        ("source,source\na.jpg,b.jpg\n", ".csv", "repeats"),
        ("source,ratios\na.jpg,1:1,extra\n", ".csv", "line 2"),
        ("source,ratios\na.jpg,1:0\n", ".csv", "bad ratio"),
        ("source,focus_x,focus_y\na.jpg,left,0.5\n", ".csv", "numbers"),
        ("source,focus_x,focus_y\na.jpg,0.5,2\n", ".csv", "focus"),
        ('source\n"a.jpg\n', ".csv", "CSV"),
        ("[]", ".yaml", "unknown manifest type"),
    ],
)
def test_malformed_manifests_name_the_problem(text: str, suffix: str, fragment: str) -> None:
    with pytest.raises(ManifestError, match=None) as info:
        parse_manifest_text(text, suffix)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        (
            '{"items": [{"id": "a\\ud800b", "source": "raw/p.jpg"}]}',
            ".json",
            "item 1: \"id\" is not valid UTF-8 text: 'a\\ud800b'",
        ),
        (
            '[{"source": "a.jpg"}, {"source": "raw/\\udcffx.jpg"}]',
            ".json",
            "item 2: \"source\" is not valid UTF-8 text: 'raw/\\udcffx.jpg'",
        ),
        ('[{"source": "a.jpg", "\\udc80": 1}]', ".json", "item 1: a field name is not valid UTF-8 text: '\\udc80'"),
        (
            '{"ratios": ["1:1", "\\ud800"], "items": []}',
            ".json",
            "top level: \"ratios\" is not valid UTF-8 text: '\\ud800'",
        ),
        (
            '{"source": "a.jpg"}\n\n{"source": "b.jpg", "ratios": ["\\udfff"]}\n',
            ".jsonl",
            "line 3: \"ratios\" is not valid UTF-8 text: '\\udfff'",
        ),
        ("id,source\nx,a.jpg\ny\ud800,b.jpg\n", ".csv", "line 3: \"id\" is not valid UTF-8 text: 'y\\ud800'"),
        ("id,sou\udcffrce\n", ".csv", "line 1 (header): a field name is not valid UTF-8 text: 'sou\\udcffrce'"),
    ],
)
def test_text_that_is_not_utf8_rejects_the_manifest_naming_where(text: str, suffix: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest_text(text, suffix)
    assert str(info.value) == message
    assert str(info.value).isascii()


DEEP = 5000  # Python's JSON parser raises RecursionError near 1,000


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ("[" * DEEP + "]" * DEEP, ".json", "the JSON is nested more than 8 levels deep (a manifest needs 4 at most)"),
        (
            '{"items": [], "ratios": ' + "[" * DEEP + "]" * DEEP + "}",
            ".json",
            "the JSON is nested more than 8 levels deep (a manifest needs 4 at most)",
        ),
        (
            '{"source": "a.jpg"}\n' + "[" * DEEP + "]" * DEEP + "\n",
            ".jsonl",
            "line 2 is nested more than 8 levels deep (a manifest needs 4 at most)",
        ),
        (
            '[{"source": "a.jpg", "focus": ' + "[" * 500 + "]" * 500 + "}]",
            ".json",
            "item 1 is nested more than 8 levels deep (a manifest needs 4 at most)",
        ),
        (
            '[{"source": "a.jpg"}, {"source": "a\\u0000.jpg", "id": "b"}]',
            ".json",
            "item 2: \"source\" contains a NUL character, which no path can hold: 'a\\x00.jpg'",
        ),
        (
            '{"source": "sub\\u0000/../../etc/passwd"}\n',
            ".jsonl",
            "line 1: \"source\" contains a NUL character, which no path can hold: 'sub\\x00/../../etc/passwd'",
        ),
        (
            "id,source\nx,a.jpg\ny,b\x00.jpg\n",
            ".csv",
            "line 3: \"source\" contains a NUL character, which no path can hold: 'b\\x00.jpg'",
        ),
    ],
    ids=["json-deep", "json-deep-ratios", "jsonl-deep", "json-deep-focus", "json-nul", "jsonl-nul", "csv-nul"],
)
def test_deep_nesting_and_a_nul_in_a_source_reject_the_manifest(text: str, suffix: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest_text(text, suffix)
    assert str(info.value) == message


@given(st.text(max_size=300), st.sampled_from([".json", ".jsonl", ".csv"]))
def test_any_text_parses_or_raises_manifest_error(text: str, suffix: str) -> None:
    try:
        manifest = parse_manifest_text(text, suffix)
    except ManifestError:
        return
    for entry in manifest.entries:
        assert isinstance(entry.source, str) and entry.source


sources = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30).filter(
    lambda s: s.strip() == s and s.strip()
)
ratios = st.lists(
    st.sampled_from([Ratio(1, 1), Ratio(4, 3), Ratio(16, 9), Ratio(2, 3)]), min_size=1, max_size=3, unique=True
)
focus = st.tuples(st.sampled_from([0.0, 0.125, 0.5, 1.0]), st.sampled_from([0.0, 0.25, 1.0]))
entries = st.lists(
    st.builds(
        ManifestEntry,
        source=sources,
        id=st.none() | sources,
        ratios=st.none() | ratios.map(tuple),
        focus=st.none() | focus,
        alt=st.just("") | sources,
    ),
    min_size=1,
    max_size=8,
)


@given(entries)
def test_generated_manifests_round_trip_in_every_format(generated: list[ManifestEntry]) -> None:
    for render, suffix in ((as_json, ".json"), (as_jsonl, ".jsonl"), (as_csv, ".csv")):
        assert list(parse_manifest_text(render(generated), suffix).entries) == generated


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("id,source\nx,a.jpg\n".encode("utf-16"), "it is UTF-16 text; save it as UTF-8"),
        (b"id,source\nx,caf\xe9.jpg\n", "it is not UTF-8 text (byte 15); save it as UTF-8"),
    ],
    ids=["utf-16", "latin-1"],
)
def test_a_manifest_file_that_is_not_utf8_says_how_to_fix_it(tmp_path: Path, raw: bytes, message: str) -> None:
    path = tmp_path / "items.csv"
    path.write_bytes(raw)
    with pytest.raises(ManifestError) as info:
        read_manifest(path)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "suffix", "where"),
    [
        ('{"source": "a.jpg", "size": ' + "1" * 5000 + "}\n", ".jsonl", "line 1"),
        ('[{"source": "a.jpg", "size": ' + "1" * 5000 + "}]", ".json", "the JSON"),
    ],
)
def test_an_integer_of_5000_digits_is_a_manifest_error(text: str, suffix: str, where: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(text, suffix)
    assert str(caught.value) == f"{where} holds an integer of more than 4300 digits"


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ('[{"source": "a.jpg", "alt": 7}]', ".json", 'item 1: "alt" must be a string'),
        ('[{"source": "a.jpg", "alt": "' + "x" * 1001 + '"}]', ".json", '"alt" is 1001 characters long; at most 1000'),
        ("source,alt\na.jpg," + "y" * 1001 + "\n", ".csv", 'line 2: "alt" is 1001 characters long'),
        ('{"source": "a.jpg", "alt": "a\\u0000b"}\n', ".jsonl", 'line 1: "alt" contains a NUL character'),
    ],
)
def test_an_alt_that_is_not_short_text_rejects_the_manifest(text: str, suffix: str, message: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        parse_manifest_text(text, suffix)


def test_alt_is_trimmed_and_empty_when_not_given() -> None:
    (given, absent) = parse_manifest_text(
        '[{"source": "a.jpg", "alt": "  Mug <b> & co  "}, {"source": "b.jpg"}]', ".json"
    ).entries
    assert (given.alt, absent.alt) == ("Mug <b> & co", "")
