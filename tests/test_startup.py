"""Start-up: what importing thumbctl and the reading commands load, and that no process outlives a run.

Each check runs a fresh interpreter (``python -c``), since this test process has long since
imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thumbctl import Ledger

from support import make_image

REPO = Path(__file__).resolve().parent.parent

#: Never imported by ``import thumbctl`` nor by the commands that only read or cancel.
HEAVY = ("PIL", "multiprocessing", "sqlite_utils")


def driver(watched: tuple[str, ...]) -> str:
    """Code that runs the CLI in-process, then prints which of ``watched`` it imported."""
    return f"""
import json, sys
from thumbctl.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({{"code": code, "loaded": sorted(m for m in {watched!r} if m in sys.modules)}}), file=sys.stderr)
"""


#: Runs the CLI in-process, then prints which of the heavy modules it imported.
DRIVER = driver(HEAVY)


def python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=environ, timeout=120)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return python("-m", "thumbctl", *args)


@pytest.fixture
def batch(tmp_path: Path) -> tuple[Path, str]:
    """A ledger with one recorded (detached) batch of one photo: its path and the batch id."""
    make_image(tmp_path / "one" / "a.jpg", (64, 48), "JPEG")
    db = tmp_path / "ledger.db"
    result = cli("submit", str(tmp_path / "one"), "--out", str(tmp_path / "out"), "--db", str(db), "--detach", "--json")
    assert result.returncode == 0, result.stderr
    return db, json.loads(result.stdout)["batch_id"]


def test_import_thumbctl_loads_no_heavy_module_and_resolves_public_names_on_use() -> None:
    probe = (
        "import json, sys, thumbctl\n"
        f"before = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "names = [thumbctl.Ledger.__name__, thumbctl.SubmitOptions.__name__, thumbctl.prepare_submission.__name__]\n"
        "print(json.dumps({'before': before, 'names': names, 'version': thumbctl.__version__,\n"
        "                  'all': all(hasattr(thumbctl, n) for n in thumbctl.__all__)}))\n"
    )
    result = python("-c", probe)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "before": [],
        "names": ["Ledger", "SubmitOptions", "prepare_submission"],
        "version": "0.1.0",
        "all": True,
    }


def test_an_unknown_attribute_of_thumbctl_is_an_attribute_error() -> None:
    result = python("-c", "import thumbctl; thumbctl.no_such_name")
    assert result.returncode == 1
    assert "AttributeError: module 'thumbctl' has no attribute 'no_such_name'" in result.stderr


@pytest.mark.parametrize(
    "command",
    [("status", "{batch}"), ("status",), ("status", "{batch}", "--json"), ("events", "{batch}"), ("cancel", "{batch}")],
    ids=["status-batch", "status-list", "status-json", "events", "cancel"],
)
def test_reading_and_cancelling_import_neither_pillow_nor_multiprocessing_nor_sqlite_utils(
    batch: tuple[Path, str], command: tuple[str, ...]
) -> None:
    db, batch_id = batch
    args = [part.format(batch=batch_id) for part in command]
    result = python("-c", DRIVER, *args, "--db", str(db))
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": []}


def test_a_new_ledger_is_created_complete_without_sqlite_utils(tmp_path: Path) -> None:
    """A new ledger is created at the newest schema at once: sqlite-utils is imported only where an
    old ledger's migrations run (``tests/test_ledger_fresh_schema.py``). Its first writing command
    finds no output folder in the old layout and records so: the layout migration is never loaded."""
    make_image(tmp_path / "one" / "a.jpg", (64, 48), "JPEG")
    db = tmp_path / "fresh.db"
    args = ["submit", str(tmp_path / "one"), "--out", str(tmp_path / "out"), "--db", str(db), "--detach"]
    result = python("-c", driver((*HEAVY, "thumbctl.upkeep.legacy_layout")), *args)
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["code"] == 0
    assert "sqlite_utils" not in report["loaded"] and "thumbctl.upkeep.legacy_layout" not in report["loaded"]
    assert cli("status", "--db", str(db), "--json").returncode == 0
    with Ledger(db, read_only=True) as ledger:
        assert ledger.upkeep.layout_settled()


@pytest.mark.parametrize(
    "command",
    [("submit", "-q"), ("submit", "--json"), ("status", "--json"), ("cancel", "{batch}", "-q")],
    ids=["submit-quiet", "submit-json", "status-json", "cancel-quiet"],
)
def test_a_command_that_writes_no_line_for_people_loads_neither_rich_nor_email(
    tmp_path: Path, batch: tuple[Path, str], command: tuple[str, ...]
) -> None:
    """Rich's consoles are made when a line for people is first written: with -q or --json a
    command that has nothing to report never imports Rich (a third of its start); HTTP dates
    are parsed (``email.utils``) only for URL sources."""
    db, batch_id = batch
    name, *rest = (part.format(batch=batch_id) for part in command)
    where = [str(tmp_path / "one"), "--out", str(tmp_path / "out2"), "-w", "1"] if name == "submit" else []
    result = python("-c", driver(("rich", "email.utils")), name, *where, *rest, "--db", str(db))
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": []}
    if command == ("submit", "--json"):
        assert json.loads(result.stdout)["counts"]["succeeded"] == 3
    elif command[-1] == "--json":
        assert isinstance(json.loads(result.stdout), dict)


def test_a_quiet_run_that_fails_says_why_in_one_line_and_nothing_else(tmp_path: Path) -> None:
    """The consoles are made only when a line is written: with -q, a run whose items fail still
    says why on stderr, in exactly one line, and writes nothing on stdout."""
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    args = ["submit", str(tmp_path / "one"), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "l.db"), "-q"]
    result = cli(*args)
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("3 of 3 failed (exit 1); thumbctl status b_")


def processes_in_group(pgid: int) -> list[str]:
    """Command lines of the live processes whose process group is ``pgid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it exited meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


@pytest.mark.parametrize("workers", ["1", "2"])
def test_no_process_outlives_submit(tmp_path: Path, workers: str) -> None:
    """Workers, the fork server and the resource tracker are all gone when submit returns."""
    for n in range(3):
        make_image(tmp_path / "photos" / f"p{n}.jpg", (64, 48), "JPEG", seed=n)
    args = ["submit", str(tmp_path / "photos"), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "l.db")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "thumbctl", *args, "-q", "-w", workers],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        process_group=0,  # its own group: whatever it starts is found by the group id, its pid
    )
    assert proc.wait(timeout=120) == 0
    assert processes_in_group(proc.pid) == []


@pytest.mark.parametrize("case", ["rejected", "replay_of_a_finished_batch"])
def test_no_process_outlives_a_submit_whose_workers_never_get_a_batch(tmp_path: Path, case: str) -> None:
    """The workers forked as submit begins wait for a batch; when none comes (the submission is
    rejected, or replays a finished batch) they are ended before submit returns."""
    photos = tmp_path / "photos"
    photos.mkdir()
    if case == "rejected":
        (photos / "notes.txt").write_text("no image here")
    else:
        make_image(photos / "p.jpg", (64, 48), "JPEG", seed=1)
    args = ["submit", str(photos), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "l.db"), "-q", "-w", "2"]
    command = [sys.executable, "-m", "thumbctl", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if case != "rejected":
        assert subprocess.run(command, env=env, timeout=120).returncode == 0
    proc = subprocess.Popen(command, env=env, process_group=0)
    assert proc.wait(timeout=120) == (65 if case == "rejected" else 0)
    assert processes_in_group(proc.pid) == []
