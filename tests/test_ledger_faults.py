"""Real ledger faults: a full disk, a read-only mount, damaged pages, a deleted ledger, a held write lock.

Every fault is made for real (a small tmpfs, a read-only bind mount, bytes overwritten in a
ledger file, ``PRAGMA max_page_count``, a second connection in ``BEGIN IMMEDIATE``); tests
that need ``mount`` skip, with the reason, where it is not permitted. Each fault must end a
command with one line naming a stable code, its exit code (75 transient, 74 damaged or gone)
and, with ``--json``, an error document on stdout; never a traceback, never a worker crash.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from thumbctl import Ledger, Limits
from thumbctl.core.errors import (
    EXIT_CODE_MEANINGS,
    ExitCode,
    LedgerBusy,
    LedgerCorrupt,
    LedgerFull,
    LedgerGone,
    LedgerIOError,
)
from thumbctl.core.retries import BusyPolicy

from harness import Thumbctl, alive, in_timed_sleep, until
from support import check_invariants, make_image, own_sqlite_connection, raw_write, request

pytestmark = pytest.mark.timeout(120)


# -- real faults ------------------------------------------------------------------------


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def _mounted(mount: list[str], where: Path) -> None:
    try:
        _mount(*mount, str(where))
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        pytest.skip(f"mount is not permitted here ({str(detail).strip()}); this test needs root")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A fresh 8 MiB tmpfs: a disk that can really be filled."""
    where = tmp_path / "small-disk"
    where.mkdir()
    _mounted(["-t", "tmpfs", "-o", "size=8m", "tmpfs"], where)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def read_only_view(folder: Path, view: Path) -> None:
    """``view`` shows ``folder`` through a read-only bind mount (unmounted by the caller)."""
    view.mkdir()
    _mounted(["--bind", str(folder)], view)
    try:
        _mount("-o", "remount,bind,ro", str(view))
    except subprocess.CalledProcessError as exc:
        subprocess.run(["umount", "-l", str(view)], check=False)
        pytest.skip(f"a read-only remount is not permitted here ({exc.stderr.strip()})")


def fill(folder: Path) -> Path:
    """Fill the file system holding ``folder`` until (almost) no block is free."""
    filler = folder / "filler"
    with open(filler, "wb") as out:
        try:
            while os.statvfs(folder).f_bfree * os.statvfs(folder).f_frsize > 16 * 1024:
                out.write(b"\0" * 4096)
                out.flush()
        except OSError:
            pass
    return filler


def damage_pages(db: Path) -> None:
    """Overwrite the middle half of a checkpointed ledger file (page 1, the header, is kept)."""
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        fh.seek(max(4096, size // 4))
        fh.write(b"\xa5" * (size // 2))


def events_of(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as raw:
        return raw.execute("SELECT from_state, to_state, error_code, attempt FROM events").fetchall()


# -- the ledger --------------------------------------------------------------------------


def test_the_new_exit_code_is_documented() -> None:
    assert int(ExitCode.LEDGER_DAMAGED) == 74
    assert "ledger_corrupt" in EXIT_CODE_MEANINGS[ExitCode.LEDGER_DAMAGED]
    codes = (Path(__file__).resolve().parent.parent / "docs" / "json.md").read_text()
    assert "| 74 |" in codes and "ledger_corrupt" in codes and "ledger_gone" in codes


def test_a_ledger_at_its_page_limit_is_ledger_full_and_takes_the_batch_later(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        pages = own_sqlite_connection(ledger).execute("PRAGMA page_count").fetchone()[0]
        own_sqlite_connection(ledger).execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from now on
        with pytest.raises(LedgerFull) as raised:
            ledger.intake.accept_batch(request(sources=300), Limits())
        fault = raised.value
        assert (fault.code, int(fault.exit_code), fault.transient) == ("ledger_full", 75, True)
        assert ledger.views.batches() == []  # nothing half-written
        own_sqlite_connection(ledger).execute("PRAGMA max_page_count = 1073741823")  # space freed
        batch = ledger.intake.accept_batch(request(sources=300), Limits())
        assert batch.total == 600
        check_invariants(ledger, outputs=False)


def test_damaged_pages_are_ledger_corrupt_with_how_to_recover(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        batch_id = ledger.intake.accept_batch(request(sources=400), Limits()).batch_id
    damage_pages(db)
    with pytest.raises(LedgerCorrupt) as raised, Ledger(db) as ledger:
        ledger.views.items(batch_id)
        ledger.views.events(batch_id)
    fault = raised.value
    assert (fault.code, int(fault.exit_code), fault.transient) == ("ledger_corrupt", 74, False)
    assert '".recover"' in fault.message and "backup" in fault.message


def test_a_deleted_or_replaced_ledger_is_noticed_at_the_next_write(tmp_path: Path) -> None:
    folder = tmp_path / "ledgers"
    with Ledger(folder / "l.db") as ledger:
        batch_id = ledger.intake.accept_batch(request(), Limits()).batch_id
        shutil.rmtree(folder)
        with pytest.raises(LedgerGone, match="deleted"):
            ledger.intake.request_cancel(batch_id)
        with Ledger(folder / "l.db"):  # another ledger now at the same path
            pass
        with pytest.raises(LedgerGone, match="replaced") as raised:
            ledger.intake.request_cancel(batch_id)
    assert (raised.value.code, int(raised.value.exit_code)) == ("ledger_gone", 74)


def test_a_read_only_mount_can_be_read_but_not_written(tmp_path: Path) -> None:
    folder = tmp_path / "ledgers"
    with Ledger(folder / "l.db") as ledger:
        batch_id = ledger.intake.accept_batch(request(), Limits()).batch_id
    view = tmp_path / "ro"
    read_only_view(folder, view)
    try:
        with Ledger(view / "l.db", read_only=True) as ledger:
            assert ledger.views.batch(batch_id).total == 4
            assert len(ledger.views.events(batch_id)) == 4
        with pytest.raises(LedgerIOError) as raised, Ledger(view / "l.db") as ledger:
            ledger.intake.request_cancel(batch_id)
        assert (raised.value.code, int(raised.value.exit_code)) == ("ledger_io_error", 75)
        assert sorted(p.name for p in folder.iterdir()) == ["l.db"]  # nothing was created beside it
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


def hold_write_lock(db: Path) -> sqlite3.Connection:
    raw = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    raw.execute("BEGIN IMMEDIATE")
    return raw


def release_once_waited_on(holder: sqlite3.Connection, thread: int, seconds: float) -> None:
    """Roll ``holder`` back once this process's ``thread`` has been seen waiting for its lock (in
    SQLite's busy handler or the busy policy's pause) at two moments ``seconds`` apart."""
    first: list[float] = []

    def waited() -> bool:
        if in_timed_sleep(os.getpid(), thread):
            first[:] = first or [time.monotonic()]
            return time.monotonic() - first[0] >= seconds
        return False

    try:
        until(waited, f"the ledger to wait {seconds:g}s for the held lock")
    finally:
        holder.rollback()


def test_a_lock_held_past_busy_timeout_is_waited_out_within_the_bound(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    with Ledger(db, busy=BusyPolicy(timeout=0.05, bound=30)) as ledger:
        batch_id = ledger.intake.accept_batch(request(), Limits()).batch_id
        holder = hold_write_lock(db)
        waiter = threading.get_native_id()
        releaser = threading.Thread(target=release_once_waited_on, args=(holder, waiter, 0.5))
        releaser.start()  # the lock is held 10 busy_timeouts of this thread's wait, far inside the bound
        assert ledger.intake.request_cancel(batch_id).state == "cancelled"
        releaser.join()
        holder.close()


def test_a_lock_held_past_the_bound_is_ledger_busy(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    with Ledger(db, busy=BusyPolicy(timeout=0.05, bound=0.4)) as ledger:
        batch_id = ledger.intake.accept_batch(request(), Limits()).batch_id
        holder = hold_write_lock(db)
        started = time.monotonic()
        with pytest.raises(LedgerBusy):
            ledger.intake.request_cancel(batch_id)
        assert time.monotonic() - started >= 0.4
        holder.rollback()
        holder.close()


def test_a_released_claim_does_not_count_an_attempt(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        batch_id = ledger.intake.accept_batch(request(sources=1), Limits()).batch_id
        claim = ledger.queue.claim("w1")
        assert ledger.queue.release(claim, "ledger_busy: the claim was given back") == 2
        items = ledger.views.items(batch_id)
        assert {(i.state, i.attempt) for i in items} == {("queued", 0)}
        assert ledger.queue.claim("w2") is not None
        check_invariants(ledger, outputs=False)


# -- the CLI -----------------------------------------------------------------------------


class Cli(Thumbctl):
    """thumbctl in real processes on the ledger ``db``, with three photos and fault injection."""

    def __init__(self, tmp_path: Path, db: Path) -> None:
        super().__init__(db, faults=tmp_path / "faults", timeout=100)
        self.out = tmp_path / "out"
        self.photos = tmp_path / "photos"
        for n, size in enumerate([(300, 200), (200, 300), (256, 256)]):
            make_image(self.photos / f"p{n}.jpg", size, "JPEG", seed=n)

    def submit(self, *extra: str) -> str:
        done = self.run("submit", str(self.photos), "--out", str(self.out), "-r", "1:1", "--detach", "--json", *extra)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["batch_id"]


def one_error_line(stderr: str, code: str) -> None:
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error [")]
    assert len(errors) == 1 and errors[0].startswith(f"error [{code}] "), stderr


def error_document(stdout: str, code: str, exit_code: int, transient: bool) -> dict:
    doc = json.loads(stdout)["error"]
    assert (doc["code"], doc["exit_code"], doc["transient"]) == (code, exit_code, transient)
    return doc


def test_a_full_disk_stops_work_with_75_and_the_batch_finishes_once_space_is_freed(tmp_path: Path, tmpfs: Path) -> None:
    cli = Cli(tmp_path, tmpfs / "ledger.db")
    batch_id = cli.submit()
    work = cli.start("work", "--until-idle", "--workers", "1", fault="pause:before_publish")
    cli.paused("before_publish")  # a claim is in hand, its output rendered
    filler = fill(tmpfs)
    cli.release()
    _, stderr = work.communicate(timeout=100)
    assert work.returncode == 75
    one_error_line(stderr, "ledger_full")
    status = cli.run("status", batch_id, "--json")  # reading still works on the full disk
    assert status.returncode == 0 and json.loads(status.stdout)["counts"]["succeeded"] < 3
    refused = cli.run("submit", str(cli.photos), "--out", str(cli.out), "-r", "4:5", "--detach", "--json")
    assert refused.returncode == 75
    error_document(refused.stdout, "ledger_full", 75, True)
    one_error_line(refused.stderr, "ledger_full")

    filler.unlink()
    resumed = cli.run("work", "--until-idle")
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(cli.run("status", batch_id, "--json").stdout)
    assert final["state"] == "succeeded" and final["counts"]["failed"] == 0
    # The worker recorded no crash; the claim it could not give back on the full disk was rescued
    # by the next run, at the cost of one attempt at most.
    assert max(attempt for *_, attempt in events_of(cli.db)) <= 2


def test_a_damaged_ledger_is_74_for_every_command(tmp_path: Path) -> None:
    cli = Cli(tmp_path, tmp_path / "ledger.db")
    with Ledger(cli.db) as ledger:
        batch_id = ledger.intake.accept_batch(request(sources=400), Limits()).batch_id
    damage_pages(cli.db)
    for args in (
        ["status", batch_id, "--json"],
        ["events", batch_id, "--json"],
        ["cancel", batch_id, "--json"],
        ["stats", "--json"],
        ["submit", str(cli.photos), "--out", str(cli.out), "--detach", "--json"],
    ):
        done = cli.run(*args)
        assert done.returncode == 74, (args, done.stderr)
        doc = error_document(done.stdout, "ledger_corrupt", 74, False)
        assert '".recover"' in doc["message"]
        one_error_line(done.stderr, "ledger_corrupt")
    worked = cli.run("work", "--until-idle")
    assert worked.returncode == 74
    one_error_line(worked.stderr, "ledger_corrupt")


def test_text_that_is_not_utf8_in_a_ledger_row_is_74_naming_the_ledger_and_column(tmp_path: Path) -> None:
    """A SQLite-only fault: PostgreSQL checks the encoding of every text value it stores."""
    cli = Cli(tmp_path, tmp_path / "ledger.db")
    batch_id = cli.submit()
    assert cli.run("work", "--until-idle").returncode == 0
    with Ledger(cli.db) as ledger:
        raw_write(ledger, "UPDATE items SET ratio = CAST(x'31ff' AS TEXT) WHERE id = 1")
    for args in (
        ["status", batch_id, "--items"],
        ["events", batch_id],
        ["sheet", batch_id, "--output", str(tmp_path / "sheet.html")],
        ["stats", batch_id],
    ):
        done = cli.run(*args)
        assert done.returncode == 74, (args, done.stderr)
        one_error_line(done.stderr, "ledger_corrupt")
        assert f"the ledger {cli.db} is damaged (Could not decode to UTF-8 column 'ratio'" in done.stderr
        json_done = cli.run(*args, "--json")
        assert json_done.returncode == 74, (args, json_done.stderr)
        error_document(json_done.stdout, "ledger_corrupt", 74, False)


def test_a_worker_killed_by_sigbus_stops_work_with_a_coded_error_naming_the_ledger(tmp_path: Path) -> None:
    """SQLite maps the ledger's -shm file: when the file system will not back a page of it (the file
    made immutable, a failing disk), the worker touching it dies by SIGBUS. The run stops with
    ledger_io_error naming the ledger instead of killing worker after worker; the next run finishes."""
    cli = Cli(tmp_path, tmp_path / "ledger.db")
    batch_id = cli.submit()
    work = cli.run("work", "--until-idle", "--workers", "1", fault="sigbus:before_publish:once")
    assert work.returncode == 75, work.stderr
    one_error_line(work.stderr, "ledger_io_error")
    assert (
        f"error [ledger_io_error] the ledger {cli.db} cannot be written (a worker process was killed by SIGBUS: "
        in (work.stderr)
    )
    assert "ledger.db-shm could not be written" in work.stderr
    again = cli.run("work", "--until-idle")
    assert again.returncode == 0, again.stderr
    assert json.loads(cli.run("status", batch_id, "--json").stdout)["state"] == "succeeded"


def _chattr(flag: str, path: Path) -> None:
    try:
        subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"chattr {flag} is not permitted here ({getattr(exc, 'stderr', '') or exc}); this test needs root")


def test_a_shm_file_made_immutable_during_work_is_ledger_io_error_naming_it(tmp_path: Path) -> None:
    cli = Cli(tmp_path, tmp_path / "ledger.db")
    batch_id = cli.submit()
    work = cli.start("work", "--until-idle", "--workers", "1", fault="pause:before_publish")
    cli.paused("before_publish", process=work)
    shm = tmp_path / "ledger.db-shm"
    _chattr("+i", shm)
    try:
        cli.release()
        code, stderr = work.finish()
    finally:
        _chattr("-i", shm)
    assert code == 75, stderr
    one_error_line(stderr, "ledger_io_error")
    assert f"the ledger {cli.db} cannot be written (" in stderr and "ledger.db-shm" in stderr
    again = cli.run("work", "--until-idle")
    assert again.returncode == 0, again.stderr
    assert json.loads(cli.run("status", batch_id, "--json").stdout)["state"] == "succeeded"


def reading_commands(batch_id: str, tmp_path: Path) -> list[list[str]]:
    """The commands that only read the ledger, each with --json."""
    return [
        ["status", "--json"],
        ["status", batch_id, "--json"],
        ["events", batch_id, "--json"],
        ["stats", "--json"],
        ["sheet", batch_id, "--output", str(tmp_path / "sheet.html"), "--json"],
    ]


def test_reading_commands_work_on_a_read_only_mount(tmp_path: Path) -> None:
    folder = tmp_path / "ledgers"
    cli = Cli(tmp_path, folder / "ledger.db")
    batch_id = cli.submit()
    assert cli.run("work", "--until-idle").returncode == 0
    view = tmp_path / "ro"
    read_only_view(folder, view)
    try:
        cli.db = view / "ledger.db"
        for args in reading_commands(batch_id, tmp_path):
            done = cli.run(*args)
            assert done.returncode == 0, (args, done.stderr)
        refused = cli.run("cancel", batch_id, "--json")
        assert refused.returncode == 75
        error_document(refused.stdout, "ledger_io_error", 75, True)
        one_error_line(refused.stderr, "ledger_io_error")
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


def test_reading_commands_work_on_a_full_disk_the_ledger_was_closed_on(tmp_path: Path, tmpfs: Path) -> None:
    """A ledger closed cleanly (no -wal, no -shm) on a disk that then filled: SQLite cannot make
    the files a WAL reader needs, so a reading command opens it read-only instead."""
    cli = Cli(tmp_path, tmpfs / "ledger.db")
    batch_id = cli.submit()
    assert cli.run("work", "--until-idle").returncode == 0
    assert not Path(f"{cli.db}-wal").exists()
    fill(tmpfs)
    for args in reading_commands(batch_id, tmp_path):
        done = cli.run(*args)
        assert done.returncode == 0, (args, done.stderr)
    assert json.loads(cli.run("status", batch_id, "--json").stdout)["counts"]["succeeded"] == 3
    refused = cli.run("cancel", batch_id, "--json")
    assert refused.returncode == 75
    error_document(refused.stdout, "ledger_full", 75, True)
    one_error_line(refused.stderr, "ledger_full")


def test_a_ledger_folder_deleted_during_submit_ends_74_not_succeeded(tmp_path: Path) -> None:
    folder = tmp_path / "ledgers"
    cli = Cli(tmp_path, folder / "ledger.db")
    submit = cli.start(
        "submit", str(cli.photos), "--out", str(cli.out), "-r", "1:1", "--workers", "1", "--json",
        fault="pause:before_publish",
    )  # fmt: skip
    cli.paused("before_publish")
    shutil.rmtree(folder)
    cli.release()
    stdout, stderr = submit.communicate(timeout=100)
    assert submit.returncode == 74
    error_document(stdout, "ledger_gone", 74, False)
    one_error_line(stderr, "ledger_gone")
    assert "succeeded" not in stdout + stderr


def waited_on_the_lock(cli: Cli, workers: list[int], checkpoint: str, seconds: float) -> None:
    """Wait until each of ``workers``, gone on from ``checkpoint``, has been seen waiting for the
    held write lock at two moments ``seconds`` apart. Past the checkpoint a worker's only timed
    sleep is SQLite's busy handler or the busy policy's pause between tries (its heartbeat waits on
    an event), and it cannot get further while the lock is held."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}

    def waited() -> bool:
        now = time.monotonic()
        paused = set(cli.paused_pids(checkpoint))
        for pid in workers:
            assert alive(pid), f"worker {pid} ended while the lock was held"
            if pid not in paused and in_timed_sleep(pid):
                first.setdefault(pid, now)
                last[pid] = now
        return len(first) == len(workers) and all(last[pid] - first[pid] >= seconds for pid in workers)

    until(waited, f"workers {workers} to wait {seconds:g}s on the held lock")


def test_a_write_lock_held_past_busy_timeout_fails_no_item(tmp_path: Path) -> None:
    cli = Cli(tmp_path, tmp_path / "ledger.db")
    submit = cli.start(
        "submit", str(cli.photos), "--out", str(cli.out), "-r", "1:1", "-r", "4:5", "--workers", "2",
        fault="pause:before_publish", THUMBCTL_BUSY_TIMEOUT="0.1",
    )  # fmt: skip
    workers = cli.paused("before_publish", count=2, process=submit)
    holder = hold_write_lock(cli.db)
    cli.release()
    waited_on_the_lock(cli, workers, "before_publish", seconds=0.5)  # 5 busy timeouts, each worker at its publish
    holder.rollback()
    holder.close()
    _, stderr = submit.communicate(timeout=100)
    assert submit.returncode == 0, stderr
    events = events_of(cli.db)
    assert {to for _, to, _, _ in events} == {"queued", "running", "succeeded"}
    assert all(code is None for _, _, code, _ in events)
    assert max(attempt for *_, attempt in events) == 1


def test_a_foreground_run_survives_a_busy_rescue(tmp_path: Path) -> None:
    cli = Cli(tmp_path, tmp_path / "ledger.db")
    submit = cli.start(
        "submit", str(cli.photos), "--out", str(cli.out), "-r", "1:1", "--workers", "1",
        fault="pause:before_encode,crash:before_encode:once", THUMBCTL_BUSY_TIMEOUT="0.05", THUMBCTL_BUSY_WAIT="0.3",
    )  # fmt: skip
    stderr = submit.follow_stderr()
    cli.paused("before_encode", process=submit)  # past the decode stage's last write, so the crash is the next thing
    holder = hold_write_lock(cli.db)
    cli.release()  # the worker dies at before_encode; its supervisor rescues its lease into the held lock
    # The supervisor reports the death once its rescue has returned; with the lock still held, the
    # rescue can only have given up past the busy bound.
    stderr.wait_for("started a replacement")
    assert cli.fired("before_encode")
    holder.rollback()
    holder.close()
    assert submit.wait(timeout=100) == 0, stderr.rest()
    assert "Traceback" not in stderr.rest()
    rescued = [(f, t, code) for f, t, code, _ in events_of(cli.db) if code == "worker_crashed"]
    assert rescued == [("running", "queued", "worker_crashed")]  # the dead worker's item, rescued after all


@pytest.mark.parametrize("variable", ["THUMBCTL_BUSY_TIMEOUT", "THUMBCTL_BUSY_WAIT"])
@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf", "1e400", "90000"])
def test_a_bad_busy_setting_is_a_config_error_naming_it(tmp_path: Path, variable: str, value: str) -> None:
    cli = Cli(tmp_path, tmp_path / "ledger.db")
    cli.submit()
    for args in (["status", "--json"], ["work", "--until-idle"]):
        done = cli.run(*args, **{variable: value})
        assert done.returncode == 2, (args, done.stderr)
        one_error_line(done.stderr, "config_error")
        assert variable in done.stderr and repr(value) in done.stderr
    error_document(cli.run("status", "--json", **{variable: value}).stdout, "config_error", 2, False)
    assert cli.run("status", "--json", **{variable: "0.5"}).returncode == 0
