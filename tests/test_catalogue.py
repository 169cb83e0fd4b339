"""``thumbctl catalogue``: every live name of an OUT, whichever batch made it, with the crop window
and score of the render that made it (reused or not), its crop fix, and when its bytes changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from thumbctl import Ledger
from thumbctl.core.display import score_text

from conftest import SAMPLE_IMAGES
from harness import Thumbctl
from inprocess import json_here, submit_here

ONE_RATIO = ("-r", "1:1", "-r", "4:3", "--size", "96")


def entries_by_name(document: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in document["entries"]}


def two_runs(tmp_path: Path, photos: Path, out_dir: Path) -> tuple[Thumbctl, dict, dict]:
    """A first batch over the photos, then one more photo: the second batch reuses every old output."""
    cli = Thumbctl(tmp_path / "ledger.db")
    first = submit_here(cli, photos, "--out", out_dir, *ONE_RATIO)
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Portrait_8.jpg", photos / "new.jpg")
    return cli, first, submit_here(cli, photos, "--out", out_dir, *ONE_RATIO)


def test_every_live_name_has_one_record_with_the_window_and_score_of_the_render_that_made_it(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli, first, second = two_runs(tmp_path, photos, out_dir)
    with Ledger(tmp_path / "ledger.db") as ledger:
        made = {i.friendly_path: i for i in ledger.views.items(first["batch_id"])}
        reused = ledger.views.items(second["batch_id"])
    assert sum(bool((i.result or {}).get("reused")) for i in reused) == len(made) == 8  # 4 photos x 2 ratios
    listed = json_here(cli, "catalogue", out_dir)
    assert listed["out"] == str(out_dir.resolve())
    entries = entries_by_name(listed)
    assert len(entries) == 10 and {"new.1x1.jpg", "new.4x3.jpg"} <= set(entries)
    for path, item in made.items():  # the old photos: reused by the second batch, windows of the first's render
        entry = entries[str(Path(path).relative_to(out_dir.resolve()))]
        assert entry["crop"] == item.result["crop"] and entry["score"] == item.result["crop"]["score"]
        assert entry["changed_at"] < second["created_at"] and entry["batch_id"] == second["batch_id"]  # same bytes
        assert entry["placeholder"]["dominant_colour"].startswith("#") and entry["focus"] is None
        assert entry["source_digest"] and entry["path"] == path and entry["ratio"] == item.ratio
    assert all(isinstance(e["score"], float) and e["width"] and e["height"] for e in entries.values())


def test_changed_lists_only_the_names_whose_bytes_changed_after_a_batch_or_a_time(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli, first, _ = two_runs(tmp_path, photos, out_dir)
    since_first = json_here(cli, "catalogue", out_dir, "--changed", first["batch_id"])
    assert sorted(entries_by_name(since_first)) == ["new.1x1.jpg", "new.4x3.jpg"]
    json_here(cli, "gc", "--older-than", "0s")  # expiring the batches does not move when they changed OUT
    assert json_here(cli, "catalogue", out_dir, "--changed", first["batch_id"]) == since_first
    assert len(json_here(cli, "catalogue", out_dir, "--changed", "1h")["entries"]) == 10
    assert json_here(cli, "catalogue", out_dir, "--changed", "2999-01-01")["entries"] == []
    bad = cli.invoke("catalogue", out_dir, "--changed", "last tuesday", "--json")
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"]["code"] == "bad_since"


def test_sort_by_score_puts_the_worst_crop_first_and_the_table_names_each_thumbnail(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(cli, photos, "--out", out_dir, *ONE_RATIO)
    scores = [e["score"] for e in json_here(cli, "catalogue", out_dir, "--sort", "score")["entries"]]
    assert scores == sorted(scores) and len(scores) == 8
    table = cli.invoke("catalogue", out_dir, "--sort", "score")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split()[:5] == ["name", "ratio", "size", "format", "crop"] and len(lines) == 9
    assert score_text(scores[0]) in lines[1] and "8 live thumbnails" in table.stderr
    streamed = cli.invoke("catalogue", out_dir, "--jsonl")
    listed = json_here(cli, "catalogue", out_dir)["entries"]
    assert [json.loads(line) for line in streamed.stdout.splitlines()] == listed
    assert cli.invoke("catalogue", out_dir, "-q").stdout == ""


def test_a_crop_fix_shows_on_the_names_it_applies_to(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(cli, photos, "--out", out_dir, *ONE_RATIO)
    json_here(cli, "focus", photos / "coffee.png", "--ratio", "4:3", "--at", "0.2,0.5")
    entries = entries_by_name(json_here(cli, "catalogue", out_dir))
    assert entries["coffee.4x3.jpg"]["focus"] == [0.2, 0.5]
    assert entries["coffee.1x1.jpg"]["focus"] is None and entries["garden.4x3.jpg"]["focus"] is None


def test_the_out_is_the_one_given_the_configured_one_or_the_only_one(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(cli, photos, "--out", out_dir, *ONE_RATIO)
    assert json_here(cli, "catalogue")["out"] == str(out_dir.resolve())  # the only one
    other = tmp_path / "other"
    submit_here(cli, photos, "--out", other, "-r", "1:1", "--size", "64")
    ambiguous = cli.invoke("catalogue", "--json")
    assert ambiguous.returncode == 2
    error = json.loads(ambiguous.stdout)["error"]
    assert error["code"] == "out_required" and str(other.resolve()) in error["message"]
    configured = Thumbctl(tmp_path / "ledger.db", env={"THUMBCTL_OUT": str(other)})
    assert len(json_here(configured, "catalogue")["entries"]) == 4
    never = cli.invoke("catalogue", tmp_path / "never", "--json")  # a typo: no empty listing, the OUTs it has
    assert never.returncode == 2 and json.loads(never.stdout)["error"]["code"] == "no_catalogue"
    assert str(out_dir.resolve()) in json.loads(never.stdout)["error"]["message"]
