"""Repair restores, never overwrites; a run cleans up after the run it replaces.

A name a user changed (other bytes, a symlink) is reported and left by ``reconcile --repair``
(restored only with ``--restore-modified``); ``thumbctl release`` hands a name over for good; what a
crash leaves (temp files, a thumbnail at a name before its commit) is thumbctl's and is cleared or
recorded, while a user's file in a temp folder is never touched.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import test_reconcile
from test_reconcile import Clock, kinds, work

from thumbctl import Ledger
from thumbctl.core.models import ItemView
from thumbctl.upkeep.gc import collect_garbage
from thumbctl.upkeep.reconcile import find_problems, reconcile

from harness import Thumbctl, all_gone
from inprocess import json_here, render_here, submit_here
from support import accept, is_copy_of

HOUR = 3600.0
# reconcile's fixtures: a ledger on each backend, moved in time by ``clock``, and a rendered batch
clock, led, rendered = test_reconcile.clock, test_reconcile.led, test_reconcile.rendered
#: thumbctl's temp file names, as docs/architecture.md gives them: ``<pid>-<ticks>-<host tag>-<random>.<ext>``.
TEMP_NAME = re.compile(r"^\d+-(\d+|x)-[0-9a-f]{8}-[0-9a-f]{12}\.")


def edit_in_place(item: ItemView, other: ItemView) -> None:
    with open(item.friendly_path, "r+b") as fh:
        fh.seek(os.path.getsize(item.friendly_path) // 2)
        fh.write(b"\x00\xff\x00")


def replace_with_another_picture(item: ItemView, other: ItemView) -> None:
    os.unlink(item.friendly_path)
    shutil.copy(other.object_path, item.friendly_path)


def symlink_elsewhere(item: ItemView, other: ItemView) -> None:
    os.unlink(item.friendly_path)
    os.symlink(other.friendly_path, item.friendly_path)


def what_is_at(path: str) -> tuple[str, bytes]:
    if os.path.islink(path):
        return "link", os.readlink(path).encode()
    return "file", Path(path).read_bytes()


@pytest.mark.parametrize("change", [edit_in_place, replace_with_another_picture, symlink_elsewhere])
def test_repair_reports_a_changed_name_and_leaves_it(led: Ledger, rendered, change) -> None:
    items = led.views.items(rendered.batch_id)
    item, other = items[4], items[0]
    change(item, other)
    before = what_is_at(item.friendly_path)
    report = reconcile(led, repair=True)
    [finding] = report.findings
    assert (finding.kind, finding.repaired, finding.path) == ("thumbnail_modified", False, item.friendly_path)
    assert "--restore-modified" in finding.detail and not report.clean
    assert what_is_at(item.friendly_path) == before  # the user's change stands
    restored = reconcile(led, repair=True, restore_modified=True)  # asked for explicitly
    assert [(f.kind, f.repaired) for f in restored.findings] == [("thumbnail_modified", True)]
    assert is_copy_of(item.friendly_path, item.object_path)
    assert find_problems(led) == []


def test_repair_restores_a_missing_name(led: Ledger, rendered) -> None:
    item = led.views.items(rendered.batch_id)[2]
    os.unlink(item.friendly_path)
    assert [(f.kind, f.repaired) for f in reconcile(led, repair=True).findings] == [("friendly_link_missing", True)]
    assert is_copy_of(item.friendly_path, item.object_path)


def test_the_cron_line_reports_an_edit_and_names_the_command_that_restores_it(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    th = Thumbctl(tmp_path / "ledger.db")
    submit_here(th, photos, "--out", out_dir)
    edited = next(out_dir.rglob("*.jpg"))
    edited.write_bytes(b"my own picture")
    for _ in range(2):  # every 15 minutes: the same finding, the file untouched
        cron = th.invoke("reconcile", "--repair", "-q")
        assert cron.returncode == 1, cron.stderr
        assert "thumbnail_modified" in cron.stdout and "--restore-modified" in cron.stdout
        assert edited.read_bytes() == b"my own picture"


# -- release -----------------------------------------------------------------------------------------


def test_a_released_name_is_never_reported_restored_replaced_or_removed(
    led: Ledger, rendered, photos: Path, out_dir: Path
) -> None:
    from thumbctl.upkeep.release import ALREADY, RELEASED, UNKNOWN, release_names

    items = led.views.items(rendered.batch_id)
    mine, untouched = items[4], items[1]
    edit_in_place(mine, items[0])
    edited = Path(mine.friendly_path).read_bytes()
    dry = release_names(led, [mine.friendly_path, untouched.friendly_path], dry_run=True)
    assert [n.state for n in dry.names] == [RELEASED, RELEASED]
    assert kinds(find_problems(led)) == ["thumbnail_modified"]  # a dry run changes nothing
    done = release_names(led, [mine.friendly_path, untouched.friendly_path, str(out_dir / "nothing.jpg")])
    assert [n.state for n in done.names] == [RELEASED, RELEASED, UNKNOWN]
    assert [n.state for n in release_names(led, [mine.friendly_path]).names] == [ALREADY]
    assert reconcile(led, repair=True, restore_modified=True).findings == ()
    assert Path(mine.friendly_path).read_bytes() == edited
    os.unlink(untouched.friendly_path)  # gone: still the user's to put back, not thumbctl's
    assert reconcile(led, repair=True).findings == ()
    assert not os.path.lexists(untouched.friendly_path)
    again = accept(led, photos, out_dir, key="again")  # the same photos: the same names
    work(led)
    failed = {i.friendly_path: i for i in led.views.items(again.batch_id) if i.state == "failed"}
    assert set(failed) == {mine.friendly_path, untouched.friendly_path}
    assert all(i.error_code == "name_taken" and "thumbctl release" in i.error_detail for i in failed.values())
    assert Path(mine.friendly_path).read_bytes() == edited and not os.path.lexists(untouched.friendly_path)
    assert find_problems(led) == []


def test_release_from_the_command_line_is_dry_runnable(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    th = Thumbctl(tmp_path / "ledger.db")
    submit_here(th, photos, "--out", out_dir)
    name = next(out_dir.rglob("*.jpg"))
    name.write_bytes(b"retouched by hand")
    dry = json_here(th, "release", name, "--dry-run")
    assert [(n["name"], n["state"]) for n in dry["names"]] == [(str(name), "released")]
    assert th.invoke("reconcile", "-q").returncode == 1
    assert th.invoke("release", name).returncode == 0
    assert th.invoke("reconcile", "--repair", "-q").returncode == 0
    assert name.read_bytes() == b"retouched by hand"
    assert th.invoke("release", out_dir / "never.jpg").returncode == 1


# -- temp folders ------------------------------------------------------------------------------------


def test_a_users_file_in_a_temp_folder_is_never_touched(
    led: Ledger, clock: Clock, rendered, out_dir: Path, store_dir: Path
) -> None:
    mine = [out_dir / ".tmp" / "userfile.txt", store_dir / ".tmp" / "notes.copy"]
    for path in mine:
        path.parent.mkdir(exist_ok=True)
        path.write_text("mine")
        os.utime(path, (1, 1))  # decades old
    clock.offset = 2 * HOUR
    assert reconcile(led, repair=True).findings == ()
    assert collect_garbage(led, 0.0).temp_files_removed == 0
    assert all(path.read_text() == "mine" for path in mine)


# -- a crash mid-publish ------------------------------------------------------------------------------


def crashed_in(th: Thumbctl, checkpoint: str) -> None:
    """``work`` paused at ``checkpoint``, then killed (-9, every process): a crash mid-publish."""
    run = th.start("work", "--until-idle", "--workers", "1", fault=f"pause:{checkpoint}:once")
    paused = th.paused(checkpoint, process=run)
    run.kill()
    assert all_gone(paused) == []


def thumbctl_temp_files(*folders: Path) -> list[Path]:
    return [p for folder in folders if folder.is_dir() for p in folder.iterdir() if TEMP_NAME.match(p.name)]


def test_a_name_a_crash_left_before_its_commit_is_not_a_users_edit(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    th = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults")
    submit_here(th, photos, "--out", out_dir)
    assert th.invoke("submit", photos, "--out", out_dir, "--quality", "60", "--detach", "-q").returncode == 0
    crashed_in(th, "name_published")  # a newer render's bytes at a name the ledger still gives the first batch
    with Ledger(tmp_path / "ledger.db") as ledger:
        found = kinds(find_problems(ledger))
    assert "thumbnail_modified" not in found and set(found) == {"dead_worker_lease"}
    assert th.invoke("reconcile", "--repair", "-q").returncode == 0
    with Ledger(tmp_path / "ledger.db") as ledger:
        newest = ledger.views.batches(1)[0]
    render_here(tmp_path / "ledger.db", newest.batch_id)  # the next work, in this process
    with Ledger(tmp_path / "ledger.db") as ledger:
        newest = ledger.views.batch(newest.batch_id)
        assert newest.state == "succeeded"
        assert all(is_copy_of(i.friendly_path, i.object_path) for i in ledger.views.items(newest.batch_id))
        assert find_problems(ledger) == []


@pytest.mark.parametrize("next_run", ["work", "submit"])
def test_the_next_run_removes_the_temp_files_of_a_crashed_one(
    tmp_path: Path, photos: Path, out_dir: Path, next_run: str
) -> None:
    store = tmp_path / "ledger.store"
    th = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults")
    submit = ("submit", photos, "--out", out_dir, "--workers", "1", "-q")
    assert th.invoke(*submit, "--detach").returncode == 0
    crashed_in(th, "before_publish")  # the object staged in STORE/.tmp, the thumbnail's copy in OUT/.tmp
    left = thumbctl_temp_files(out_dir / ".tmp", store / ".tmp")
    assert {p.parent.parent for p in left} == {out_dir, store}
    userfile = out_dir / ".tmp" / "userfile.txt"
    userfile.write_text("mine")
    done = th.run(*submit) if next_run == "submit" else th.run("work", "--until-idle", "-q")
    assert done.returncode == 0, done.stderr
    assert thumbctl_temp_files(out_dir / ".tmp", store / ".tmp") == []
    assert userfile.read_text() == "mine"
