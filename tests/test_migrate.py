"""The one-time migration of ledgers and output folders made by older commits (thumbctl.upkeep.legacy_layout),
and the check before each writing command that runs it (thumbctl.upkeep.migrate).

Every case is a real ledger and two output folders written by the thumbctl of commit 07c431e or
98391af (tests/fixtures/make_legacy_layouts.py), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from thumbctl import Ledger
from thumbctl.cli import app
from thumbctl.upkeep.legacy_layout import MigrationReport, migrate_legacy_layout
from thumbctl.upkeep.migrate import needs_migration

from harness import Thumbctl
from inprocess import render_here, submit_here
from legacy import CASES, LegacyCase, replayable, unpack_case

CHECKPOINTS = (
    "migrate_mid_move",
    "migrate_after_move",
    "migrate_after_ledger",
    "migrate_after_copy",
    "migrate_after_unlink",
)
#: Objects of the fixtures: 9 in out1 (three sources x 1:1, 16:9, 4:3), 3 in out2 (the same 1:1 ones).
MOVED, DUPLICATES, THUMBNAILS, ITEMS = 9, 3, 12, 15


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> LegacyCase:
    """One legacy case unpacked into tmp_path (a PostgreSQL case into a fresh database)."""
    pg_url = request.getfixturevalue("pg_url") if request.param.endswith("postgres") else None
    return unpack_case(request.param, tmp_path / "legacy", pg_url)


def store_of(case: LegacyCase) -> Path:
    return case.root / "ledger.store"


def invoke(case: LegacyCase, *args: str):
    return CliRunner().invoke(app, [*args, "--db", case.db], catch_exceptions=False)


def writing(case: LegacyCase, *args: str):
    """A command that writes; a PostgreSQL ledger names its store (it has no default one)."""
    return invoke(case, *args, *(("--store", str(store_of(case))) if case.backend == "postgres" else ()))


def render(case: LegacyCase, *args: object, states: tuple[str, ...]) -> dict:
    """A writing ``submit ARGS`` (see :func:`writing`) recorded and rendered in this process
    (tests/inprocess): its finished document."""
    store = ("--store", store_of(case)) if case.backend == "postgres" else ()
    return submit_here(Thumbctl(case.db), *args, *store, states=states)


def status_docs(case: LegacyCase) -> dict[str, object]:
    """``status BATCH --json`` and ``status BATCH --items --json`` of every batch."""
    with Ledger(case.db, read_only=True) as ledger:
        batch_ids = sorted(b.batch_id for b in ledger.views.batches(limit=100))
    docs: dict[str, object] = {}
    for batch_id in batch_ids:
        for extra in ((), ("--items",)):
            result = invoke(case, "status", batch_id, *extra, "--json")
            assert result.exit_code == 0, result.stderr
            docs[f"{batch_id}{extra}"] = json.loads(result.stdout)
    return docs


def relocated(doc: object, case: LegacyCase) -> object:
    """``doc`` with every object path in an OUT/objects written as the same path in the store."""
    text = json.dumps(doc)
    for out in case.outs:
        text = text.replace(f"{out}/objects/", f"{store_of(case)}/objects/")
    return json.loads(text)


def thumbnails(case: LegacyCase) -> dict[str, str]:
    """sha256 of every thumbnail in the output folders (not the batch files, not objects/)."""
    found = {}
    for out in case.outs:
        for path in out.rglob("*.jpg"):
            if "objects" not in path.relative_to(out).parts:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def migrate(case: LegacyCase) -> MigrationReport:
    with Ledger(case.db) as ledger:
        return migrate_legacy_layout(ledger, store_of(case))


def assert_migrated(case: LegacyCase, before: dict[str, object], pictures: dict[str, str]) -> None:
    """The state every completed migration must leave, whatever happened on the way."""
    assert status_docs(case) == relocated(before, case)
    assert thumbnails(case) == pictures
    for path in pictures:
        assert os.lstat(path).st_nlink == 1, path
    for out in case.outs:
        assert not (out / "objects").exists() and not (out / ".tmp").exists()
        batch_files = {p.name for p in (out / "batches").iterdir()}
        assert all(name.endswith((".json", ".html")) for name in batch_files)
        for manifest in (out / "batches").glob("*.json"):
            paths = [item["object_path"] for item in json.loads(manifest.read_text())["items"]]  # relative to OUT
            objects = [os.path.normpath(os.path.join(out, p)) for p in paths]
            assert paths and all(p.startswith(f"{store_of(case)}/objects/") for p in objects)
    with Ledger(case.db) as ledger:
        assert not needs_migration(ledger)
        for batch in ledger.views.batches(limit=100):
            for item in ledger.views.items(batch.batch_id):
                assert item.object_path.startswith(f"{store_of(case)}/objects/{item.derivative_key[:2]}/")
                assert os.lstat(item.object_path).st_nlink == 1 and os.path.isfile(item.object_path)
                preview = (item.result or {}).get("preview")
                assert preview is None or (preview.startswith(f"{store_of(case)}/") and os.path.isfile(preview))
    staging = store_of(case) / ".tmp"
    assert not staging.exists() or not any(staging.iterdir())


def test_migration_moves_every_object_into_the_store_and_leaves_only_thumbnails(case: LegacyCase) -> None:
    before, pictures = status_docs(case), thumbnails(case)
    assert len(pictures) == THUMBNAILS and all(os.lstat(p).st_nlink == 2 for p in pictures)

    report = migrate(case)

    counts = (report.objects_moved, report.duplicates_dropped, report.thumbnails_copied)
    assert counts == (MOVED, DUPLICATES, THUMBNAILS)
    assert (report.items_relocated, report.folders) == (ITEMS, [str(out) for out in case.outs])
    assert (report.conflicts, report.left, report.refused) == ([], [], [])
    assert_migrated(case, before, pictures)
    store_files = {p.relative_to(store_of(case)) for p in store_of(case).rglob("*") if p.is_file()}
    assert len([p for p in store_files if not p.name.endswith(".preview.jpg")]) == MOVED


def test_a_second_run_changes_nothing(case: LegacyCase) -> None:
    migrate(case)
    stamps = file_stamps(case)

    again = migrate(case)

    assert again.to_json() == MigrationReport(str(store_of(case))).to_json() and not again.changed
    assert file_stamps(case) == stamps


def file_stamps(case: LegacyCase) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every file in the output folders and the store."""
    files = [p for folder in (*case.outs, store_of(case)) for p in folder.rglob("*") if p.is_file()]
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}


@pytest.mark.parametrize("checkpoint", CHECKPOINTS)
def test_a_migration_killed_at_any_checkpoint_completes_on_the_next_run(
    case: LegacyCase, checkpoint: str, tmp_path: Path
) -> None:
    before, pictures = status_docs(case), thumbnails(case)
    code = (
        "import sys; from thumbctl import Ledger; from thumbctl.upkeep.legacy_layout import migrate_legacy_layout\n"
        "with Ledger(sys.argv[1]) as ledger: migrate_legacy_layout(ledger, sys.argv[2])\n"
    )
    env = {**os.environ, "THUMBCTL_FAULT": f"crash:{checkpoint}", "THUMBCTL_FAULT_DIR": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", code, case.db, str(store_of(case))], env=env, capture_output=True)
    assert killed.returncode == 137, killed.stderr

    report = migrate(case)

    assert report.folders and not (report.conflicts or report.left or report.refused)
    assert_migrated(case, before, pictures)


def test_read_only_commands_work_on_a_ledger_not_migrated_yet(case: LegacyCase) -> None:
    with Ledger(case.db, read_only=True) as ledger:
        batch_id = ledger.views.batches(limit=1)[0].batch_id
    for args in (("status", "--json"), ("status", batch_id, "--items", "--json"), ("events", batch_id), ("stats",)):
        result = invoke(case, *args)
        assert result.exit_code == 0, (args, result.stderr)
        assert "one-time layout migration" not in result.stderr
    assert all((out / "objects").is_dir() for out in case.outs)


@pytest.mark.parametrize("command", ["submit", "retry", "reconcile", "gc", "work"])
def test_the_first_command_that_writes_migrates_and_says_so_once(case: LegacyCase, command: str) -> None:
    with Ledger(case.db, read_only=True) as ledger:
        batch_id = ledger.views.batches(limit=1)[0].batch_id
    args = {
        "submit": ("submit", str(case.root / "src"), "--out", str(case.root / "out3"), "--size", "40", "--detach"),
        "retry": ("retry", batch_id, "--detach"),
        "reconcile": ("reconcile",),
        "gc": ("gc", "--older-than", "3650d"),
        "work": ("work", "--until-idle", "--workers", "1"),
    }

    store_args: tuple[str, ...] = ()
    if case.backend == "postgres":  # a server ledger has no default store: nothing moves until one is named
        refused = invoke(case, *args[command], "--json")
        assert refused.exit_code == 2, refused.stderr
        assert json.loads(refused.stdout)["error"]["code"] == "store_required"
        assert "still hold objects/ (the old layout)" in refused.stderr
        assert all((out / "objects").is_dir() for out in case.outs)
        store_args = ("--store", str(store_of(case)))

    first = invoke(case, *args[command], *store_args)
    second = invoke(case, *args[command], *store_args)

    outs = ", ".join(f"{out}/objects" for out in case.outs)
    line = (
        f"moved {MOVED} objects from {outs} to {store_of(case)} (one-time layout migration; {DUPLICATES} "
        f"duplicates dropped; {THUMBNAILS} thumbnails are now their own files)"
    )
    assert first.stderr.splitlines().count(line) == 1, first.stderr
    assert "one-time layout migration" not in second.stderr
    assert not any((out / "objects").exists() for out in case.outs)


def test_once_no_old_layout_is_left_the_ledger_records_it_and_writing_commands_look_at_no_folder(
    case: LegacyCase,
) -> None:
    """The check is recorded by the first writing command that finds no output folder in the old
    layout (not by the one that moved them); from then on a writing command reads that record only:
    an ``objects/`` folder made in an OUT afterwards is not looked at."""
    settled = []
    for _ in range(2):
        result = writing(case, "gc", "--older-than", "3650d")
        assert result.exit_code == 0, result.stderr
        with Ledger(case.db, read_only=True) as ledger:
            settled.append(ledger.upkeep.layout_settled())
    assert settled == [False, True]

    (case.outs[0] / "objects" / "ab").mkdir(parents=True)
    result = writing(case, "gc", "--older-than", "3650d")

    assert result.exit_code == 0, result.stderr
    assert "one-time layout migration" not in result.stderr
    assert (case.outs[0] / "objects" / "ab").is_dir()


def test_once_its_note_is_deleted_the_next_writing_command_looks_again(case: LegacyCase) -> None:
    """Undoing the migration by hand ends by deleting the ledger's note (docs/operations.md): the next
    writing command looks at the output folders again and moves what it finds."""
    if case.backend != "sqlite":
        pytest.skip("the documented statement is run on a SQLite ledger")
    for _ in range(2):
        assert writing(case, "gc", "--older-than", "3650d").exit_code == 0
    (case.outs[0] / "objects" / "ab").mkdir(parents=True)

    with contextlib.closing(sqlite3.connect(case.db)) as db, db:
        db.execute("DELETE FROM meta WHERE name = 'layout'")
    result = writing(case, "gc", "--older-than", "3650d")

    assert result.exit_code == 0, result.stderr
    assert not (case.outs[0] / "objects").exists()


def test_the_python_api_migrates_as_the_command_line_does(case: LegacyCase) -> None:
    """``thumbctl.api.render`` settles the store as every writing command does: a PostgreSQL ledger
    without a store is refused before anything moves, and the old layout moves once."""
    from thumbctl.api import render
    from thumbctl.config.options import SubmitOptions
    from thumbctl.core.errors import StoreRequired

    before, pictures = status_docs(case), thumbnails(case)
    options = SubmitOptions(out_dir=case.root / "out3")
    if case.backend == "postgres":
        with pytest.raises(StoreRequired, match="still hold objects/"):
            render(case.root / "src", options, db=case.db, workers=1)
        assert all((out / "objects").is_dir() for out in case.outs)
    batch = render(case.root / "src", options, db=case.db, workers=1, store=store_of(case))
    assert batch.state == "succeeded"
    assert not any((out / "objects").exists() for out in case.outs)
    assert thumbnails(case) == pictures
    assert {key: doc for key, doc in status_docs(case).items() if key in before} == relocated(before, case)


def test_a_symlinked_objects_folder_is_refused_not_followed(case: LegacyCase) -> None:
    elsewhere = case.root / "elsewhere"
    (case.outs[1] / "objects").rename(elsewhere)
    (case.outs[1] / "objects").symlink_to(elsewhere)
    outside = {str(p): p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}

    report = migrate(case)

    assert report.refused == [str(case.outs[1])] and report.folders == [str(case.outs[0])]
    assert (case.outs[1] / "objects").is_symlink()
    assert {str(p): p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == outside
    assert not (case.outs[0] / "objects").exists()


def test_a_refused_folder_is_tried_again_by_every_writing_command(case: LegacyCase) -> None:
    elsewhere = case.root / "elsewhere"
    (case.outs[1] / "objects").rename(elsewhere)
    (case.outs[1] / "objects").symlink_to(elsewhere)

    for _ in range(2):
        result = writing(case, "gc", "--older-than", "3650d")
        assert result.exit_code == 0, result.stderr

    with Ledger(case.db, read_only=True) as ledger:
        assert not ledger.upkeep.layout_settled()
        assert needs_migration(ledger)


def test_a_file_named_objects_is_refused(case: LegacyCase) -> None:
    shutil.rmtree(case.outs[1] / "objects")
    (case.outs[1] / "objects").write_bytes(b"not a folder")

    report = migrate(case)

    assert report.refused == [str(case.outs[1])] and report.folders == [str(case.outs[0])]
    assert (case.outs[1] / "objects").read_bytes() == b"not a folder"


def test_an_object_the_store_holds_with_other_bytes_is_set_aside_and_no_item_stays_in_out(case: LegacyCase) -> None:
    victim = sorted(p for p in (case.outs[0] / "objects").rglob("*.jpg") if ".preview." not in p.name)[0]
    old_bytes = victim.read_bytes()
    taken = store_of(case) / "objects" / victim.parent.name / victim.name
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"other bytes under the same derivative key")
    linked = [p for p in case.outs[0].glob("*.jpg") if p.samefile(victim)]

    report = migrate(case)

    assert report.objects_moved == MOVED - 1 and len(report.conflicts) == 1
    aside = Path(report.conflicts[0])
    assert aside.parent.parent.parent == store_of(case) / "conflicts" and aside.name == victim.name
    assert aside.read_bytes() == old_bytes
    assert not (case.outs[0] / "objects").exists()
    assert linked and all(p.read_bytes() == old_bytes and os.lstat(p).st_nlink == 1 for p in linked)
    with Ledger(case.db) as ledger:
        assert not needs_migration(ledger)
        paths = {item.object_path for b in ledger.views.batches(limit=100) for item in ledger.views.items(b.batch_id)}
        assert str(taken) in paths and all(p.startswith(f"{store_of(case)}/objects/") for p in paths)
    assert taken.read_bytes() == b"other bytes under the same derivative key"


def test_items_whose_object_is_not_a_regular_file_still_move_to_the_store(case: LegacyCase) -> None:
    odd = sorted(p for p in (case.outs[0] / "objects").rglob("*.jpg") if ".preview." not in p.name)[0]
    odd.unlink()
    odd.symlink_to("/dev/null")

    report = migrate(case)

    assert report.left == [str(odd)] and odd.is_symlink()
    with Ledger(case.db) as ledger:
        paths = {item.object_path for b in ledger.views.batches(limit=100) for item in ledger.views.items(b.batch_id)}
    assert all(p.startswith(f"{store_of(case)}/objects/") for p in paths)
    assert str(store_of(case) / "objects" / odd.parent.name / odd.name) in paths


def test_a_file_of_the_user_at_a_thumbnail_name_is_never_touched(case: LegacyCase) -> None:
    name = case.outs[0] / "photo1.1x1.jpg"
    name.unlink()
    name.write_bytes(b"the user's own file")
    inode = name.stat().st_ino

    migrate(case)

    assert name.read_bytes() == b"the user's own file" and name.stat().st_ino == inode


def test_a_store_on_another_filesystem_gets_copies(case: LegacyCase, tmp_path: Path) -> None:
    mount = tmp_path / "other-fs"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        pictures = thumbnails(case)
        with Ledger(case.db) as ledger:
            report = migrate_legacy_layout(ledger, mount / "store")
            batches = ledger.views.batches(limit=100)
            objects = {item.object_path for b in batches for item in ledger.views.items(b.batch_id)}
        counts = (report.objects_moved, report.duplicates_dropped, report.thumbnails_copied)
        assert counts == (MOVED, DUPLICATES, THUMBNAILS)
        assert len(objects) == MOVED and all(path.startswith(f"{mount}/store/objects/") for path in objects)
        assert all(os.lstat(path).st_nlink == 1 for path in objects)
        assert all(os.stat(path).st_dev != os.stat(case.root).st_dev for path in objects)
        assert thumbnails(case) == pictures and all(os.lstat(path).st_nlink == 1 for path in pictures)
        assert not any((out / "objects").exists() for out in case.outs)
        assert not any((mount / "store" / ".tmp").iterdir())
    finally:
        subprocess.run(["umount", str(mount)], check=True)


# -- with the store outside OUT: the old batches go on working ---------------------------------------


def test_after_migration_reconcile_is_clean_and_the_old_batch_replays(case: LegacyCase, tmp_path: Path) -> None:
    replayable(case, tmp_path / "scratch.db")
    migrate(case)
    pictures = thumbnails(case)
    with Ledger(case.db, read_only=True) as ledger:
        first = sorted(ledger.views.batches(limit=100), key=lambda b: (b.created_at, b.batch_id))[0]

    reconciled = writing(case, "reconcile", "--json")
    assert reconciled.exit_code == 0, reconciled.stdout
    out, ratios = case.runs[0]
    ratio_args = [arg for ratio in ratios for arg in ("--ratio", ratio)]
    doc = render(
        case, case.root / "src", "--out", case.root / out, *ratio_args, "--size", case.size, states=("succeeded",)
    )
    assert (doc["batch_id"], doc["replayed"]) == (first.batch_id, True)
    assert thumbnails(case) == pictures


def test_after_migration_a_new_batch_into_the_same_folder_never_clobbers(case: LegacyCase) -> None:
    migrate(case)
    mine = case.outs[0] / "photo2.16x9.jpg"
    mine.unlink()
    mine.write_bytes(b"the user's own file")
    args = ("--out", case.outs[0], "--ratio", "16:9", "--ratio", "1:1", "--size", "48")
    render(case, case.root / "src", *args, states=("partial", "failed"))  # a foreground run exits 1: name_taken
    assert mine.read_bytes() == b"the user's own file"
    assert not (case.outs[0] / "objects").exists()
    for path in thumbnails(case):
        assert os.lstat(path).st_nlink == 1


def test_an_object_missing_before_migration_is_rendered_again_into_the_store(case: LegacyCase) -> None:
    gone = sorted(p for p in (case.outs[0] / "objects").rglob("*.jpg") if ".preview." not in p.name)[0]
    names = [p for p in case.outs[0].glob("*.jpg") if p.samefile(gone)]
    for path in (gone, *names):  # the derivative is gone, object and thumbnails
        path.unlink()
    in_store = store_of(case) / "objects" / gone.parent.name / gone.name

    migrate(case)
    with Ledger(case.db) as ledger:
        paths = {item.object_path for b in ledger.views.batches(limit=100) for item in ledger.views.items(b.batch_id)}
    assert str(in_store) in paths and all(p.startswith(f"{store_of(case)}/objects/") for p in paths)
    assert not in_store.exists()

    repaired = writing(case, "reconcile", "--repair", "--json")
    assert repaired.exit_code == 0, repaired.stdout  # every finding repaired: the item is queued again
    kinds = {(f["kind"], f["path"]) for f in json.loads(repaired.stdout)["findings"]}
    assert ("object_missing", str(in_store)) in kinds
    (batch_id,) = {f["batch_id"] for f in json.loads(repaired.stdout)["findings"] if f["kind"] == "object_missing"}
    render_here(case.db, batch_id)  # what `work --until-idle` renders, in this process

    assert in_store.is_file() and os.lstat(in_store).st_nlink == 1
    assert names and all(p.read_bytes() == in_store.read_bytes() and os.lstat(p).st_nlink == 1 for p in names)
    assert not any((out / "objects").exists() for out in case.outs)
    clean = writing(case, "reconcile", "--json")
    assert clean.exit_code == 0, clean.stdout


def test_a_store_of_another_ledger_is_refused_before_anything_moves(case: LegacyCase, tmp_path: Path) -> None:
    from thumbctl.publishing.stores import bind_store

    with Ledger(str(tmp_path / "other.db")) as other:
        bind_store(other, store_of(case))

    refused = invoke(case, "reconcile", "--store", str(store_of(case)), "--json")

    assert refused.exit_code == 2, refused.stdout
    assert json.loads(refused.stdout)["error"]["code"] == "store_taken"
    assert all((out / "objects").is_dir() for out in case.outs)
    assert not (store_of(case) / "objects").exists()


def test_a_dry_run_of_gc_does_not_migrate(case: LegacyCase) -> None:
    result = writing(case, "gc", "--older-than", "3650d", "--dry-run")

    assert result.exit_code == 0, result.stderr
    assert "one-time layout migration" not in result.stderr
    assert all((out / "objects").is_dir() for out in case.outs)


def test_an_s3_store_is_refused_for_the_move_and_nothing_moves(case: LegacyCase, s3_url: str) -> None:
    refused = invoke(case, "reconcile", "--store", s3_url, "--json")

    assert refused.exit_code == 2, refused.stdout
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "bad_store"
    assert "local --store folder" in error["message"]
    assert all((out / "objects").is_dir() for out in case.outs)
