"""Mirror mode (``submit --delete``): OUT follows the folder, and nothing but thumbctl's own
unchanged thumbnails of photos no longer there ever leaves it."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from thumbctl import Ledger, SubmitOptions, prepare_submission, submit
from thumbctl.cli import app
from thumbctl.core.faults import Faults
from thumbctl.core.profile import Profile, Ratio
from thumbctl.core.retries import Backoff
from thumbctl.core.scanrules import ScanRules
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.storage.outputs import LocalOutputTarget
from thumbctl.upkeep.mirror import FolderView, mirror_batch, plan_mirror

from support import accept, check_invariants, is_copy_of, make_image, tree_snapshot

SQUARE = Profile(ratios=(Ratio(1, 1), Ratio(4, 3)))


@pytest.fixture
def led(ledger_url: str):
    with Ledger(ledger_url) as ledger:
        yield ledger
        check_invariants(ledger)


def prepared(ledger: Ledger, source: Path, out: Path, profile: Profile = SQUARE, key: str | None = None):
    options = SubmitOptions(out_dir=out, store_dir=out.parent / "ledger.store", profile=profile, key=key)
    return prepare_submission(source, options, ledger), options


def rendered(ledger: Ledger, source: Path, out: Path, profile: Profile = SQUARE, key: str | None = None) -> str:
    """Submit ``source`` and render it; returns the batch id."""
    batch = accept(ledger, source, out, store_dir=out.parent / "ledger.store", profile=profile, key=key)
    config = WorkerConfig(str(ledger.path), backoff=Backoff(base=0.001, cap=0.001), poll_seconds=0.01)
    run_worker(config, threading.Event(), Faults(""))
    assert ledger.views.batch(batch.batch_id).state == "succeeded"
    return batch.batch_id


def seen(source: Path) -> FolderView:
    """What a scan of ``source`` that read every folder sees (these tests' folders are all readable)."""
    return FolderView(os.path.realpath(source), ScanRules())


def files_in(folder: Path) -> dict[str, str]:
    """The files under ``folder`` but batch documents and the site manifest, with their bytes' digests."""
    return {
        k: v
        for k, v in tree_snapshot(folder).items()
        if not k.startswith(("batches", ".")) and k != "thumbctl.json" and " " not in v
    }


def removal_events(ledger: Ledger, batch_id: str) -> list[tuple[str | None, str | None]]:
    return [(e.error_code, e.detail) for e in ledger.views.events(batch_id) if e.to_state == "removed"]


def test_the_mirror_removes_the_names_of_removed_and_renamed_photos_and_nothing_else(
    led: Ledger, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    rendered(led, photos, out_dir)
    other = tmp_path / "other"  # a second folder publishing into the same OUT
    other.mkdir()
    make_image(other / "poster.jpg", (300, 200), "JPEG", seed=5)
    rendered(led, other, out_dir)
    (out_dir / "mine.jpg").write_bytes(b"the user's own file")
    (out_dir / "rooms" / "notes.txt").write_text("the user's notes")

    shutil.rmtree(photos / "rooms")  # two photos removed
    os.rename(photos / "garden.jpeg", photos / "garden-2.jpeg")  # one renamed
    edited = out_dir / "rooms" / "living.1x1.jpg"
    edited.write_bytes(b"retouched by hand")
    gone = sorted(
        str(out_dir / name)
        for name in (
            "rooms/living.4x3.jpg",
            "rooms/kitchen.1x1.jpg",
            "rooms/kitchen.4x3.jpg",
            "garden.1x1.jpg",
            "garden.4x3.jpg",
        )
    )
    before = files_in(out_dir)
    kept = {k: v for k, v in before.items() if str(out_dir / k) not in gone}

    ready, _ = prepared(led, photos, out_dir)
    plan = plan_mirror(led, ready.batch, seen(photos))
    assert (plan.dry_run, sorted(plan.removed), plan.kept_edited, plan.kept_dropped) == (True, gone, (str(edited),), ())
    assert files_in(out_dir) == before  # a dry run removes nothing

    batch_id = rendered(led, photos, out_dir)
    done = mirror_batch(led, batch_id, seen(photos))
    assert (done.dry_run, sorted(done.removed), done.kept_edited, done.skipped) == (False, gone, (str(edited),), None)
    assert not any(os.path.exists(path) for path in gone)
    now = files_in(out_dir)
    assert {k: now[k] for k in kept} == kept  # the edited thumbnail, the other folder's, the user's files
    assert {"garden-2.1x1.jpg", "garden-2.4x3.jpg", "poster.1x1.jpg", "mine.jpg"} <= set(now)
    assert (
        sorted(detail.split(":")[0].removeprefix("mirror removed ") for _, detail in removal_events(led, batch_id))
        == gone
    )
    assert {code for code, _ in removal_events(led, batch_id)} == {"mirror_source_gone"}
    assert all(led.views.publishes_at(path) == [] for path in gone)  # their records are forgotten
    assert mirror_batch(led, batch_id, seen(photos)).removed == ()  # once is enough


def test_an_emptied_folder_goes_with_its_last_thumbnail(led: Ledger, photos: Path, out_dir: Path) -> None:
    rendered(led, photos, out_dir)
    shutil.rmtree(photos / "rooms")
    done = mirror_batch(led, rendered(led, photos, out_dir), seen(photos))
    assert len(done.removed) == 4 and not (out_dir / "rooms").exists()
    assert sorted(os.listdir(out_dir)) == [
        "batches",
        "coffee.1x1.jpg",
        "coffee.4x3.jpg",
        "garden.1x1.jpg",
        "garden.4x3.jpg",
    ]


def test_a_dropped_ratio_goes_only_with_delete_dropped(led: Ledger, photos: Path, out_dir: Path) -> None:
    rendered(led, photos, out_dir)
    square = Profile(ratios=(Ratio(1, 1),))
    four_three = sorted(str(p) for p in out_dir.rglob("*.4x3.jpg"))
    assert len(four_three) == 4
    batch_id = rendered(led, photos, out_dir, square)
    kept = mirror_batch(led, batch_id, seen(photos))
    assert (kept.removed, sorted(kept.kept_dropped)) == ((), four_three)
    assert all(os.path.exists(path) for path in four_three)
    assert (
        sorted(plan_mirror(led, prepared(led, photos, out_dir, square)[0].batch, seen(photos), dropped=True).removed)
        == four_three
    )
    done = mirror_batch(led, batch_id, seen(photos), dropped=True)
    assert (sorted(done.removed), done.kept_dropped) == (four_three, ())
    assert not any(os.path.exists(path) for path in four_three)
    assert {code for code, _ in removal_events(led, batch_id)} == {"mirror_dropped"}
    for item in led.views.items(batch_id):
        assert is_copy_of(item.friendly_path, item.object_path)


def test_names_a_manifest_in_the_folder_published_under_ids_of_its_own_are_untouched(
    led: Ledger, photos: Path, out_dir: Path
) -> None:
    rendered(led, photos, out_dir)
    manifest = photos / "listing.jsonl"
    manifest.write_text('{"id": "listing/front", "source": "coffee.png", "ratios": ["1:1"]}\n')
    rendered(led, manifest, out_dir)
    listing = out_dir / "listing" / "front.1x1.jpg"
    manifest.unlink()
    os.unlink(photos / "coffee.png")
    done = mirror_batch(led, rendered(led, photos, out_dir), seen(photos))
    assert sorted(done.removed) == [str(out_dir / "coffee.1x1.jpg"), str(out_dir / "coffee.4x3.jpg")]
    assert listing.is_file()


def test_nothing_is_removed_after_a_batch_that_did_not_succeed(led: Ledger, photos: Path, out_dir: Path) -> None:
    rendered(led, photos, out_dir)
    os.unlink(photos / "coffee.png")
    (photos / "broken.jpg").write_text("not a photo")
    ready, options = prepared(led, photos, out_dir)
    assert (
        plan_mirror(led, ready.batch, seen(photos)).skipped
        == "some sources cannot be rendered, so the batch would not succeed"
    )
    batch = submit(led, ready, options.limits)
    config = WorkerConfig(str(led.path), backoff=Backoff(base=0.001, cap=0.001), poll_seconds=0.01)
    run_worker(config, threading.Event(), Faults(""))
    done = mirror_batch(led, batch.batch_id, seen(photos))
    assert (done.removed, done.skipped) == ((), "the batch is partial")
    assert (out_dir / "coffee.1x1.jpg").is_file()


def test_a_removal_the_filesystem_refuses_is_reported_and_the_name_stays(
    led: Ledger, photos: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered(led, photos, out_dir)
    os.unlink(photos / "coffee.png")
    batch_id = rendered(led, photos, out_dir)

    def refuse(*args: object, **kwargs: object) -> bool:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(LocalOutputTarget, "remove", refuse)
    done = mirror_batch(led, batch_id, seen(photos))
    names = [str(out_dir / "coffee.1x1.jpg"), str(out_dir / "coffee.4x3.jpg")]
    assert (done.removed, done.errors) == ((), tuple(f"{name}: Permission denied" for name in names))
    assert all(os.path.exists(name) and led.views.publishes_at(name) for name in names)
    monkeypatch.undo()
    assert sorted(mirror_batch(led, batch_id, seen(photos)).removed) == names


# -- the command line ----------------------------------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("THUMBCTL_DB", str(tmp_path / "ledger.db"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_submit_delete_dry_run_lists_what_delete_then_renders_and_removes(cli, photos: Path, out_dir: Path) -> None:
    assert cli("submit", photos, "--out", out_dir, "-r", "1:1", "-w", "1", "-q").exit_code == 0
    os.unlink(photos / "coffee.png")
    make_image(photos / "new.jpg", (320, 240), "JPEG", seed=7)
    before = files_in(out_dir)
    dry = cli("submit", photos, "--out", out_dir, "-r", "1:1", "--delete", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stdout
    gone, new = str(out_dir / "coffee.1x1.jpg"), str(out_dir / "new.1x1.jpg")
    assert json.loads(dry.stdout) == {
        "mirrored": {
            "dry_run": True,
            "rendered": [new],  # the three photos still there reuse their outputs
            "removed": [gone],
            "kept_edited": [],
            "kept_dropped": [],
            "skipped": None,
            "errors": [],
            "kept": [],
        },
        "scan_errors": [],
    }
    assert files_in(out_dir) == before
    human = cli("submit", photos, "--out", out_dir, "-r", "1:1", "--delete", "--dry-run")
    assert human.stdout == (
        f"submit (--dry-run) would render 1 thumbnail\n  would render {new}\n"
        f"mirror (--dry-run) would remove 1 thumbnail\n  would remove {gone}\n"
    )
    done = cli("submit", photos, "--out", out_dir, "-r", "1:1", "--delete", "-w", "1", "--json")
    assert done.exit_code == 0
    doc = json.loads(done.stdout)
    assert doc["state"] == "succeeded" and doc["mirrored"]["removed"] == [gone] and not doc["mirrored"]["dry_run"]
    assert not os.path.exists(gone) and os.path.exists(new) and len(files_in(out_dir)) == 4
    again = cli("submit", photos, "--out", out_dir, "-r", "1:1", "--delete", "--dry-run", "--json")
    assert json.loads(again.stdout)["mirrored"]["rendered"] == []  # a replay renders nothing


def test_mirror_usage_errors_exit_2(cli, photos: Path, out_dir: Path) -> None:
    alone = cli("submit", photos, "--out", out_dir, "--dry-run")
    assert alone.exit_code == 2 and "--dry-run lists what --delete would remove" in alone.stderr
    detached = cli("submit", photos, "--out", out_dir, "--delete", "--detach")
    assert detached.exit_code == 2 and "cannot be used with --detach" in detached.stderr
    assert not out_dir.exists()


def test_delete_mirrors_a_folder_not_a_manifest(cli, photos: Path, out_dir: Path) -> None:
    manifest = photos / "listing.jsonl"
    manifest.write_text('{"source": "coffee.png"}\n')
    result = cli("submit", manifest, "--out", out_dir, "--delete")
    assert result.exit_code == 2 and "SOURCE must be a folder" in result.stderr
