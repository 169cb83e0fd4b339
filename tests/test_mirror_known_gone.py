"""The mirror removes a name only when its source is known to be gone: a folder the scan could not
read (permission, vanished during the scan), a folder that is now a symlink, and a photo that
``--include``/``--exclude`` leave out keep their thumbnails, for ``submit --delete`` and
``watch --delete`` alike; ``--delete-excluded`` removes the left-out ones.

Permissions bite only without root's powers: the commands run under ``setpriv`` without
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (the uid stays, so the ledger and OUT stay theirs), and the
hypothesis test scans in a child process that has become ``nobody``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import Lines, Thumbctl
from inprocess import submit_here
from support import make_image

pytestmark = pytest.mark.timeout(180)

SETPRIV = shutil.which("setpriv")
#: What keeps root from reading a mode 000 folder, dropped for the command and every process it starts.
DROPPED = "-dac_override,-dac_read_search"
NOBODY = 65534

needs_permissions = pytest.mark.skipif(
    os.geteuid() == 0 and SETPRIV is None,
    reason="running as root without setpriv (util-linux): a folder's mode would not stop the scan",
)


class Unprivileged(Thumbctl):
    """``python -m thumbctl`` that file modes bind: as root, under ``setpriv`` without the
    capabilities that override them."""

    @staticmethod
    def command(*args: object) -> list[str]:
        command = Thumbctl.command(*args)
        if os.geteuid() != 0:
            return command
        return [str(SETPRIV), f"--inh-caps={DROPPED}", f"--bounding-set={DROPPED}", "--", *command]


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A photo folder (``a.jpg``, ``sub/b.jpg``, ``sub/c.jpg``, ``gone/d.jpg``, ``raw/r.jpg``) and
    its OUT; every folder is made readable again at the end."""
    src = Path(os.path.realpath(tmp_path)) / "photos"
    for seed, name in enumerate(("a.jpg", "sub/b.jpg", "sub/c.jpg", "gone/d.jpg", "raw/r.jpg")):
        make_image(src / name, (60, 40), "JPEG", seed=seed)
    yield src, src.parent / "out"
    for folder, _, _ in os.walk(src):
        os.chmod(folder, 0o755)


def submit(env: Thumbctl, src: Path, out: Path, *args: object) -> tuple[int, dict]:
    done = env.run("submit", src, "--out", out, "-r", "1:1", "-w", "1", "--json", *args)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def thumbnails(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*.jpg") if "batches" not in p.parts)


ALL = ["a.1x1.jpg", "gone/d.1x1.jpg", "raw/r.1x1.jpg", "sub/b.1x1.jpg", "sub/c.1x1.jpg"]


@needs_permissions
def test_a_folder_the_scan_cannot_read_keeps_its_thumbnails_and_the_command_exits_1(
    tmp_path: Path, shop: tuple[Path, Path]
) -> None:
    src, out = shop
    env = Unprivileged(tmp_path / "ledger.db")
    assert submit(env, src, out)[0] == 0 and thumbnails(out) == ALL
    os.unlink(src / "sub" / "c.jpg")  # gone, but in a folder that cannot be read: not known to be gone
    shutil.rmtree(src / "gone")  # known to be gone
    os.chmod(src / "sub", 0)
    unread = {"path": str(src / "sub"), "code": "io_error", "detail": "Permission denied"}

    dry = env.run("submit", src, "--out", out, "-r", "1:1", "--delete", "--dry-run")
    assert dry.stdout.splitlines() == [
        "submit (--dry-run) would render 0 thumbnails",
        "mirror (--dry-run) would remove 1 thumbnail",
        f"  would remove {out}/gone/d.1x1.jpg",
        f"  would keep {out}/sub/b.1x1.jpg: {src}/sub could not be read (Permission denied)",
        f"  would keep {out}/sub/c.1x1.jpg: {src}/sub could not be read (Permission denied)",
    ]
    assert dry.returncode == 1 and f"could not read {src}/sub: Permission denied" in dry.stderr

    code, doc = submit(env, src, out, "--delete")
    assert doc["mirrored"]["removed"] == [f"{out}/gone/d.1x1.jpg"]
    assert (code, doc["state"], doc["scan_errors"]) == (1, "succeeded", [unread])
    assert [(k["path"], k["reason"]) for k in doc["mirrored"]["kept"]] == [
        (f"{out}/sub/b.1x1.jpg", "scan_error"),
        (f"{out}/sub/c.1x1.jpg", "scan_error"),
    ]
    assert thumbnails(out) == ["a.1x1.jpg", "raw/r.1x1.jpg", "sub/b.1x1.jpg", "sub/c.1x1.jpg"]

    human = env.run("submit", src, "--out", out, "-r", "1:1", "-w", "1", "--delete")
    assert human.returncode == 1
    assert f"not read {src}/sub (Permission denied): its photos are not in this batch" in human.stdout
    assert f"mirror: kept 2 thumbnails whose folder {src}/sub could not be read (Permission denied)" in human.stdout
    quiet = env.run("submit", src, "--out", out, "-r", "1:1", "-w", "1", "--delete", "-q")
    assert quiet.returncode == 1 and "1 folder of the source could not be read (exit 1)" in quiet.stderr

    os.chmod(src / "sub", 0o755)  # readable again: now c.jpg is known to be gone
    code, doc = submit(env, src, out, "--delete")
    assert (code, doc["scan_errors"], doc["mirrored"]["removed"]) == (0, [], [f"{out}/sub/c.1x1.jpg"])


def test_a_folder_that_vanishes_during_the_scan_is_a_scan_error_not_an_absence(
    tmp_path: Path, shop: tuple[Path, Path]
) -> None:
    src, out = shop
    for folder in ("gone", "raw"):
        shutil.rmtree(src / folder)
    env = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults")
    submit_here(env, src, "--out", out, "-r", "1:1")
    assert thumbnails(out) == ["a.1x1.jpg", "sub/b.1x1.jpg", "sub/c.1x1.jpg"]
    run = env.start(
        "submit", src, "--out", out, "-r", "1:1", "-w", "1", "--delete", "--json", fault="pause:scan_folder:once"
    )
    env.paused("scan_folder", process=run)  # the root is listed, sub not yet
    shutil.rmtree(src / "sub")
    env.release()
    stdout, stderr = run.communicate()
    doc = json.loads(stdout)
    assert run.returncode == 1, stderr
    assert doc["scan_errors"] == [
        {"path": str(src / "sub"), "code": "source_missing", "detail": "it vanished during the scan"}
    ]
    assert (doc["state"], doc["mirrored"]["removed"]) == ("succeeded", [])
    assert {k["reason"] for k in doc["mirrored"]["kept"]} == {"scan_error"}
    assert thumbnails(out) == ["a.1x1.jpg", "sub/b.1x1.jpg", "sub/c.1x1.jpg"]


def test_photos_left_out_by_exclude_keep_their_thumbnails_unless_delete_excluded(
    tmp_path: Path, shop: tuple[Path, Path]
) -> None:
    src, out = shop
    env = Thumbctl(tmp_path / "ledger.db")
    submit_here(env, src, "--out", out, "-r", "1:1")
    code, doc = submit(env, src, out, "--exclude", "raw/*", "--delete")
    assert (code, doc["mirrored"]["removed"]) == (0, [])
    assert doc["mirrored"]["kept"] == [
        {
            "path": f"{out}/raw/r.1x1.jpg",
            "reason": "excluded",
            "detail": f"{src}/raw/r.jpg is left out by --include/--exclude (--delete-excluded removes it)",
        }
    ]
    assert thumbnails(out) == ALL

    alone = env.invoke("submit", src, "--out", out, "--exclude", "raw/*", "--delete-excluded")
    assert alone.returncode == 2 and "give it with --delete" in alone.stderr
    dry = env.invoke(
        "submit", src, "--out", out, "-r", "1:1", "--exclude", "raw/*", "--delete", "--delete-excluded", "--dry-run"
    )
    assert dry.stdout.splitlines() == [
        "submit (--dry-run) would render 0 thumbnails",
        "mirror (--dry-run) would remove 1 thumbnail",
        f"  would remove {out}/raw/r.1x1.jpg",
    ]
    code, doc = submit(env, src, out, "--exclude", "raw/*", "--delete", "--delete-excluded")
    assert (code, doc["mirrored"]["removed"], doc["mirrored"]["kept"]) == (0, [f"{out}/raw/r.1x1.jpg"], [])
    events = env.json("events", doc["batch_id"])
    assert [e["error_code"] for e in events["events"] if e["to_state"] == "removed"] == ["mirror_excluded"]


def test_a_sub_folder_now_a_symlink_is_not_scanned_and_keeps_its_thumbnails(
    tmp_path: Path, shop: tuple[Path, Path]
) -> None:
    src, out = shop
    env = Thumbctl(tmp_path / "ledger.db")
    submit_here(env, src, "--out", out, "-r", "1:1")
    moved = tmp_path / "elsewhere"
    os.rename(src / "sub", moved)
    os.unlink(moved / "c.jpg")  # even a photo gone from behind the link is not known to be gone
    os.symlink(moved, src / "sub")
    done = env.run("submit", src, "--out", out, "-r", "1:1", "-w", "1", "--delete")
    assert thumbnails(out) == ALL
    assert done.returncode == 0, done.stderr
    assert "folders not scanned (symlinks to folders are never followed): sub" in done.stderr
    assert f"mirror: kept 2 thumbnails whose folder {src}/sub is a symlink, not scanned" in done.stdout
    code, doc = submit(env, src, out, "--delete", "--delete-dropped", "--delete-excluded")
    assert (code, doc["mirrored"]["removed"]) == (0, [])
    assert [(k["path"], k["reason"]) for k in doc["mirrored"]["kept"]] == [
        (f"{out}/sub/b.1x1.jpg", "not_scanned"),
        (f"{out}/sub/c.1x1.jpg", "not_scanned"),
    ]


@needs_permissions
def test_watch_delete_removes_nothing_while_a_folder_cannot_be_read(tmp_path: Path, shop: tuple[Path, Path]) -> None:
    src, out = shop
    env = Unprivileged(tmp_path / "ledger.db")
    args = ("--poll", "--poll-interval", "0.1s", "--settle", "0.3s", "-r", "1:1", "-w", "1", "--delete", "--json")
    proc = env.start("watch", src, "--out", out, *args)
    rounds = Lines(proc.proc.stdout)  # type: ignore[arg-type]

    def next_round(number: int) -> dict:
        return json.loads(rounds.wait_for(f'{{"round": {number},'))

    try:
        first = next_round(1)
        assert first["batch"]["state"] == "succeeded" and thumbnails(out) == ALL
        os.chmod(src / "sub", 0)  # an unreadable moment
        second = next_round(2)
        assert (second["batch"]["state"], second["mirrored"]["removed"]) == ("succeeded", [])
        assert second["scan_errors"] == [{"path": str(src / "sub"), "code": "io_error", "detail": "Permission denied"}]
        assert {k["reason"] for k in second["mirrored"]["kept"]} == {"scan_error"}
        assert thumbnails(out) == ALL
        os.chmod(src / "sub", 0o755)
        third = next_round(3)
        assert (third["scan_errors"], third["mirrored"]["removed"], third["sources"]["submitted"]) == ([], [], 5)
        assert thumbnails(out) == ALL
    finally:
        proc.interrupt()
        proc.communicate()


# -- the rule over random trees ---------------------------------------------------------------

KINDS = ("plain", "removed", "unreadable", "excluded", "symlinked")


def as_nobody(work: Callable[[], object]) -> object:
    """``work()``, run by a child process that became ``nobody`` (as root; else by this process),
    so file modes bind it; its JSON result."""
    if os.geteuid() != 0:
        return work()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            with os.fdopen(write_end, "w") as stream:
                json.dump(work(), stream)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as stream:
        text = stream.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and text, "the child that scans as nobody failed"
    return json.loads(text)


folders = st.lists(
    st.tuples(st.sampled_from(KINDS), st.lists(st.booleans(), min_size=1, max_size=3), st.booleans()),
    min_size=1,
    max_size=5,
)


@needs_permissions
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=folders, loose=st.lists(st.booleans(), min_size=1, max_size=3), delete_excluded=st.booleans())
def test_the_mirror_removes_exactly_the_names_whose_source_is_positively_absent(
    layout: list[tuple[str, list[bool], bool]], loose: list[bool], delete_excluded: bool
) -> None:
    """Each folder is plain, removed, unreadable (mode 000), excluded (``--exclude 'x*/*'``) or a
    symlink to where it was moved; each photo in it (and each photo at the top, ``loose``) may be
    deleted, and a folder may have a sub-folder of the same kind. A name goes exactly when its
    photo is deleted and no folder on its path is unreadable or a symlink, or when its photo is
    there, excluded, and ``delete_excluded``."""
    from thumbctl.core.scanrules import ScanRules
    from thumbctl.sources.scan import scan_directory
    from thumbctl.upkeep.mirror import FolderView, Reason

    base = Path(tempfile.mkdtemp(prefix="thumbctl-mirror-"))
    os.chmod(base, 0o755)
    root, away = base / "photos", base / "away"
    rules = ScanRules(exclude=("x*/*",))
    published: list[str] = []
    expected_gone: set[str] = set()
    try:
        root.mkdir()
        for n in range(len(loose)):
            published.append(f"p{n}.jpg")
            (root / f"p{n}.jpg").write_bytes(b"a photo")
        later: list[Callable[[], None]] = [
            lambda n=n: os.unlink(root / f"p{n}.jpg") for n, gone in enumerate(loose) if gone
        ]
        expected_gone.update(f"p{n}.jpg" for n, gone in enumerate(loose) if gone)
        for index, (kind, photos, nested) in enumerate(layout):
            name = f"{'x' if kind == 'excluded' else 'f'}{index}"
            depths = [name, f"{name}/inner"] if nested else [name]
            for folder in depths:
                for n, deleted in enumerate(photos):
                    rel = f"{folder}/p{n}.jpg"
                    (root / rel).parent.mkdir(parents=True, exist_ok=True)
                    (root / rel).write_bytes(b"a photo")
                    published.append(rel)
                    if kind == "removed" or deleted:
                        later.append(lambda rel=rel: os.unlink(root / rel))
                    positively_absent = kind in ("plain", "removed", "excluded") and (kind == "removed" or deleted)
                    excluded_there = kind == "excluded" and not deleted and delete_excluded
                    if positively_absent or excluded_there:
                        expected_gone.add(rel)
            if kind == "unreadable":
                later.append(lambda name=name: os.chmod(root / name, 0))
            elif kind == "symlinked":
                later.append(lambda name=name: linked_back(root / name, away / name))
            elif kind == "removed":
                later.append(lambda name=name: shutil.rmtree(root / name))
        away.mkdir()
        for change in later:  # a folder's deleted photos first, then the folder's own fate
            change()

        def judge() -> dict[str, str]:
            scan = scan_directory(root, rules)
            present = {c.item_id for c in scan.candidates}
            folder = FolderView(str(root), rules, tuple(scan.errors), tuple(str(root / s) for s in scan.symlinked))
            verdicts = {}
            for rel in published:
                if rel in present:
                    verdicts[rel] = "wanted"
                    continue
                verdict = folder.verdict(rel, excluded=delete_excluded)
                verdicts[rel] = str(verdict) if isinstance(verdict, Reason) else f"kept {verdict[0]}"
            return verdicts

        verdicts = as_nobody(judge)
        assert isinstance(verdicts, dict)
        removed = {rel for rel, verdict in verdicts.items() if verdict in ("source_gone", "excluded")}
        assert removed == expected_gone, verdicts
    finally:
        for folder, _, _ in os.walk(base):
            os.chmod(folder, stat.S_IRWXU)
        shutil.rmtree(base)


def linked_back(folder: Path, away: Path) -> None:
    """A photo library moved away and linked back from its old place."""
    os.rename(folder, away)
    os.symlink(away, folder)
