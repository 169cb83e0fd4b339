"""Crop fixes persist: a focus point remembered per (source content, ratio), set by a manifest's
``focus`` or ``thumbctl focus``, cleared by ``"focus": null`` or ``--clear``, and used by every later
submit of the folder; a submit that changes the bytes at a published name counts it (``replaced``)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl import Ledger, Limits
from thumbctl.core.errors import UsageError
from thumbctl.core.fixes import FocusChange
from thumbctl.intake.focus import parse_point, plan_focus
from thumbctl.sources.manifest import parse_manifest_text

from conftest import SAMPLE_IMAGES
from harness import Thumbctl
from inprocess import json_here, submit_here
from support import make_image, request

SMART = "-r", "4:3,1:1", "-w", "1"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A seller's folder: a landscape photo whose 4:3 and 1:1 crops a fix can move, and another."""
    root = tmp_path / "photos"
    root.mkdir()
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg", root / "sofa.jpg")
    shutil.copy(SAMPLE_IMAGES / "public-domain" / "sk-coffee.png", root / "coffee.png")
    return root


@pytest.fixture
def cli(ledger_url: str, tmp_path: Path) -> Thumbctl:
    return Thumbctl(ledger_url, store=tmp_path / "store")


def submit(cli: Thumbctl, source: Path, out: Path, *args: str) -> dict:
    """The finished batch's document, recorded and rendered in this process."""
    return submit_here(cli, source, "--out", out, *SMART, *args)


def thumbnails(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.jpg"))}


def test_a_fix_by_command_survives_later_submits_of_the_folder(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = submit(cli, shop, out)
    assert (first["counts"]["succeeded"], first["replaced"]) == (4, 0)
    smart = thumbnails(out)

    fixed = json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "4:3", "--at", "0.05,0.95")
    assert fixed["source"] == str(shop / "sofa.jpg") and fixed["set"] == ["4:3"] and fixed["cleared"] == []
    assert [(p["ratio"], p["focus"], p["batch_id"]) for p in fixed["focus_points"]] == [("4:3", [0.05, 0.95], None)]

    make_image(shop / "unrelated.jpg", (300, 200), "JPEG", seed=5)
    second = submit(cli, shop, out)
    assert second["batch_id"] != first["batch_id"] and second["replaced"] == 1
    after_fix = thumbnails(out)
    assert after_fix["sofa.4x3.jpg"] != smart["sofa.4x3.jpg"]
    assert {k: v for k, v in after_fix.items() if k != "sofa.4x3.jpg" and k in smart} == {
        k: v for k, v in smart.items() if k != "sofa.4x3.jpg"
    }

    make_image(shop / "another.jpg", (200, 300), "JPEG", seed=6)
    third = submit(cli, shop, out)
    assert third["replaced"] == 0 and third["counts"]["succeeded"] == 8
    assert thumbnails(out)["sofa.4x3.jpg"] == after_fix["sofa.4x3.jpg"]  # byte-identical: the fix stayed

    cleared = json_here(cli, "focus", shop / "sofa.jpg", "--clear")
    assert (cleared["cleared"], cleared["focus_points"]) == (["4:3"], [])
    (shop / "unrelated.jpg").unlink()
    verbose = cli.run("submit", shop, "--out", out, *SMART, "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert "replaced 1 thumbnail an earlier batch published under the same name" in verbose.stdout
    assert f"replaced {out / 'sofa.4x3.jpg'}" in verbose.stdout
    assert thumbnails(out)["sofa.4x3.jpg"] == smart["sofa.4x3.jpg"]


def test_a_manifest_focus_is_remembered_and_null_forgets_it(cli: Thumbctl, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    submit(cli, shop, out)
    smart = thumbnails(out)

    (shop / "fix.jsonl").write_text(json.dumps({"source": "sofa.jpg", "focus": [0.95, 0.05]}) + "\n")
    fix = submit(cli, shop / "fix.jsonl", out)
    assert fix["replaced"] == 2  # the manifest's focus applies to each ratio of the item
    fixed = thumbnails(out)
    assert fixed["sofa.4x3.jpg"] != smart["sofa.4x3.jpg"] and fixed["sofa.1x1.jpg"] != smart["sofa.1x1.jpg"]
    shown = json_here(cli, "focus", shop / "sofa.jpg")
    assert [(p["ratio"], p["focus"], p["batch_id"]) for p in shown["focus_points"]] == [
        ("1:1", [0.95, 0.05], fix["batch_id"]),
        ("4:3", [0.95, 0.05], fix["batch_id"]),
    ]

    make_image(shop / "unrelated.jpg", (300, 200), "JPEG", seed=5)
    again = submit(cli, shop, out)
    assert again["replaced"] == 0
    now = thumbnails(out)
    assert (now["sofa.4x3.jpg"], now["sofa.1x1.jpg"]) == (fixed["sofa.4x3.jpg"], fixed["sofa.1x1.jpg"])

    (shop / "fix.jsonl").unlink()
    (shop / "unfix.jsonl").write_text(json.dumps({"source": "sofa.jpg", "ratios": ["4:3"], "focus": None}) + "\n")
    unfix = submit(cli, shop / "unfix.jsonl", out)
    assert (unfix["total"], unfix["replaced"]) == (1, 1)
    assert thumbnails(out)["sofa.4x3.jpg"] == smart["sofa.4x3.jpg"]
    left = json_here(cli, "focus", shop / "sofa.jpg")
    assert [p["ratio"] for p in left["focus_points"]] == ["1:1"]  # only the item's ratios were cleared

    make_image(shop / "another.jpg", (200, 300), "JPEG", seed=6)
    last = submit(cli, shop, out)
    assert last["replaced"] == 0
    final = thumbnails(out)
    assert (final["sofa.4x3.jpg"], final["sofa.1x1.jpg"]) == (smart["sofa.4x3.jpg"], fixed["sofa.1x1.jpg"])


def test_clearing_or_setting_a_fix_again_is_never_a_replay_of_an_earlier_batch(
    cli: Thumbctl, shop: Path, tmp_path: Path
) -> None:
    out, sofa = tmp_path / "out", shop / "sofa.jpg"
    first = submit(cli, shop, out)
    smart = thumbnails(out)["sofa.4x3.jpg"]
    json_here(cli, "focus", sofa, "--ratio", "4:3", "--at", "0.05,0.95")
    fixed = submit(cli, shop, out)
    fixed_bytes = thumbnails(out)["sofa.4x3.jpg"]
    assert fixed["replaced"] == 1 and fixed_bytes != smart

    assert json_here(cli, "focus", sofa, "--clear")["cleared"] == ["4:3"]
    unfixed = submit(cli, shop, out)  # the same folder and settings as the first submit
    assert unfixed["batch_id"] != first["batch_id"] and not unfixed["replayed"]
    assert unfixed["replaced"] == 1 and thumbnails(out)["sofa.4x3.jpg"] == smart

    json_here(cli, "focus", sofa, "--ratio", "4:3", "--at", "0.05,0.95")
    refixed = submit(cli, shop, out)
    assert refixed["batch_id"] != fixed["batch_id"] and refixed["replaced"] == 1
    assert thumbnails(out)["sofa.4x3.jpg"] == fixed_bytes

    same = json_here(cli, "focus", sofa, "--ratio", "4:3", "--at", "0.05,0.95")  # as it is: nothing changes
    assert same["focus_points"] == json_here(cli, "focus", sofa)["focus_points"]
    replay = submit(cli, shop, out)
    assert (replay["batch_id"], replay["replayed"], replay["replaced"]) == (refixed["batch_id"], True, 1)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["{photos}/missing.jpg"], "source_not_found"),
        (["{photos}"], "bad_source"),
        (["{photos}/notes.jpg", "--ratio", "4:3", "--at", "0.5,0.5"], "unsupported_format"),
        (["{photos}/sofa.jpg", "--ratio", "4:0", "--at", "0.5,0.5"], "bad_ratio"),
        (["{photos}/sofa.jpg", "--ratio", "4:3", "--at", "1.5,0.5"], "bad_focus"),
        (["{photos}/sofa.jpg", "--ratio", "4:3", "--at", "nan,0.5"], "bad_focus"),
        (["{photos}/sofa.jpg", "--ratio", "4:3", "--at", "0.5"], "bad_focus"),
        (["{photos}/sofa.jpg", "--at", "0.5,0.5"], "bad_ratio"),
        (["{photos}/sofa.jpg", "--ratio", "4:3", "--at", "0.5,0.5", "--clear"], "usage"),
    ],
)
def test_the_command_refuses_with_one_line_and_exit_2(shop: Path, tmp_path: Path, args: list[str], code: str) -> None:
    (shop / "notes.jpg").write_text("not a photo")
    cli = Thumbctl(tmp_path / "ledger.db")
    filled = [a.replace("{photos}", str(shop)) for a in args]
    done = cli.invoke("focus", *filled)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"[{code}]" in done.stderr, done.stderr
    as_json = cli.invoke("focus", *filled, "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["code"] == code
    assert not (tmp_path / "ledger.db").exists()  # refused before any ledger is opened


def test_listing_needs_a_ledger_and_creates_none(shop: Path, tmp_path: Path) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    done = cli.invoke("focus", shop / "sofa.jpg", "--json")
    assert done.returncode == 2 and json.loads(done.stdout)["error"]["code"] == "no_ledger"
    assert not (tmp_path / "ledger.db").exists()
    assert json_here(cli, "focus", shop / "sofa.jpg", "--ratio", "1:1", "--at", "0,1")["set"] == ["1:1"]
    human = cli.invoke("focus", shop / "sofa.jpg")
    assert human.returncode == 0 and "1:1    --at 0,1" in human.stdout and "by thumbctl focus" in human.stdout


@given(st.floats(0, 1), st.floats(0, 1))
def test_a_point_in_range_parses_to_itself(x: float, y: float) -> None:
    assert parse_point(f"{x!r},{y!r}") == (x, y)
    assert parse_point(f" {x!r} , {y!r} ") == (x, y)


@given(st.text(max_size=30) | st.tuples(st.floats(), st.floats()).map(lambda p: f"{p[0]!r},{p[1]!r}"))
def test_anything_else_is_refused_as_bad_focus(text: str) -> None:
    try:
        x, y = parse_point(text)
    except UsageError as exc:
        assert exc.code == "bad_focus" and exc.exit_code == 2
    else:
        assert all(math.isfinite(v) and 0 <= v <= 1 for v in (x, y)) and text.count(",") == 1


def test_a_manifest_tells_a_focus_from_null_from_none() -> None:
    text = "\n".join(
        json.dumps(line)
        for line in ({"source": "a.jpg", "focus": [0.1, 0.2]}, {"source": "b.jpg", "focus": None}, {"source": "c.jpg"})
    )
    a, b, c = parse_manifest_text(text, ".jsonl").entries
    assert (a.focus, a.clear_focus) == ((0.1, 0.2), False)
    assert (b.focus, b.clear_focus) == (None, True)
    assert (c.focus, c.clear_focus) == (None, False)


def test_a_manifest_that_sets_and_clears_one_fix_records_the_last_in_item_order() -> None:
    from thumbctl.core.fixes import FocusPoint
    from thumbctl.core.profile import Ratio
    from thumbctl.sources.entries import SourceEntry

    square = (Ratio(1, 1),)
    entries = [
        (SourceEntry("b", "b.jpg", square, clear_focus=True), "d1"),
        (SourceEntry("a", "a.jpg", square, (0.2, 0.3)), "d1"),
        (SourceEntry("c", "c.jpg", square), "d1"),
        (SourceEntry("x", "x.jpg", square), "d2"),
    ]
    plan = plan_focus(entries, [FocusPoint("d2", "1:1", (0.7, 0.7), "t"), FocusPoint("d1", "1:1", (0.5, 0.5), "t")])
    assert [(c.source_digest, c.ratio, c.focus) for c in plan.changes] == [("d1", "1:1", None)]
    assert [plan.focus_of(entry, digest, square[0]) for entry, digest in entries] == [
        None,
        (0.2, 0.3),
        (0.5, 0.5),  # within the batch, the fix remembered before
        (0.7, 0.7),
    ]


def test_the_ledger_records_fixes_with_the_batch_and_keeps_cleared_ones_without_a_point(ledger_url: str) -> None:
    digest = f"{0:064d}"
    changes = (FocusChange(digest, "1:1", (0.25, 0.75)), FocusChange(digest, "4:3", None))
    with Ledger(ledger_url) as ledger:
        batch = ledger.intake.accept_batch(request(focus_changes=changes), Limits())
        points = {p.ratio: p for p in ledger.intake.focus_points([digest, "other"])}
        assert (points["1:1"].focus, points["1:1"].batch_id) == ((0.25, 0.75), batch.batch_id)
        assert (points["4:3"].focus, points["4:3"].batch_id) == (None, batch.batch_id)
        ledger.intake.change_focus([FocusChange(digest, "1:1", None), FocusChange(digest, "16:9", (0.0, 1.0))])
        after = {p.ratio: (p.focus, p.batch_id) for p in ledger.intake.focus_points([digest])}
        assert after == {"1:1": (None, None), "4:3": (None, batch.batch_id), "16:9": ((0.0, 1.0), None)}
        replay = ledger.intake.accept_batch(request(focus_changes=changes), Limits())
        assert replay.replayed and replay.batch_id == batch.batch_id  # a replay's manifest fixes stand again
        assert {p.ratio: p.focus for p in ledger.intake.focus_points([digest])}["1:1"] == (0.25, 0.75)
