"""``thumbctl watch``: a folder submitted again whenever its files settle.

The settle rules are checked on the library with a clock the test moves (no waiting); the command
in real processes, where each step waits on something observable: a round's line on stdout, a
"waiting" line, or the watcher paused at ``watch_unsettled`` (:mod:`thumbctl.core.faults`). While the
test changes several files at once the watcher is stopped (SIGSTOP), so it sees them together.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from thumbctl import Ledger, render
from thumbctl.config.options import RunOptions, SubmitOptions
from thumbctl.core.profile import Profile, Ratio
from thumbctl.engine.runner import SilentObserver
from thumbctl.engine.watch import Settling, Watcher, WatchOptions

from harness import Background, Lines, Thumbctl
from support import Clock, check_invariants, make_image

pytestmark = pytest.mark.timeout(120)

SQUARE = Profile(ratios=(Ratio(1, 1),))


# -- the settle rules, on a clock the test moves ------------------------------------------------


def test_a_round_waits_until_every_file_has_kept_its_size_and_time_for_the_settle_time() -> None:
    clock = Clock(100.0)
    settling = Settling(settle=2.0)
    settling.observe({"a.jpg": (10, 1)}, clock())
    assert not settling.due(clock()) and settling.next_check(clock()) == 2.0
    clock.now += 1.9
    assert not settling.due(clock())
    clock.now += 0.1
    assert settling.due(clock())
    settling.submitted = dict(settling.seen)
    assert not settling.due(clock()) and settling.next_check(clock()) is None

    for grown in range(11, 20):  # a file that keeps growing: never due, and said so with its age
        clock.now += 1.5
        settling.observe({"a.jpg": (10, 1), "big.jpg": (grown, grown)}, clock())
        assert not settling.due(clock())
    [waiting] = settling.unsettled(clock())
    assert waiting.path == "big.jpg" and waiting.changing_for == pytest.approx(1.5 * 8)
    clock.now += 2.0
    assert settling.due(clock())
    settling.submitted = dict(settling.seen)

    clock.now += 10
    settling.observe({"big.jpg": (19, 19)}, clock())  # a.jpg deleted: the listing changed
    assert not settling.due(clock()) and settling.unsettled(clock()) == []
    clock.now += 2.0
    assert settling.due(clock())


class Recorder:
    """A watch observer that keeps what it is told."""

    def __init__(self) -> None:
        self.waits: list[list[str]] = []
        self.rounds: list = []

    def watching(self, *args: object) -> None:
        pass

    def waiting(self, unsettled) -> None:  # noqa: ANN001
        self.waits.append([u.path for u in unsettled])

    def round_submitted(self, *args: object) -> None:
        pass

    def run_progress(self, batch_id: str) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(SilentObserver())

    def round_finished(self, done) -> None:  # noqa: ANN001
        self.rounds.append(done)

    def round_refused(self, number: int, error: Exception) -> None:
        raise AssertionError(f"round {number} refused: {error}")


def test_a_half_written_jpeg_is_never_submitted_only_the_whole_one(ledger_url: str, tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    make_image(photos / "old.jpg", (300, 200), "JPEG", seed=1)
    whole = make_image(tmp_path / "new.jpg", (320, 240), "JPEG", seed=2).read_bytes()
    clock, recorder = Clock(), Recorder()
    options = SubmitOptions(out_dir=tmp_path / "out", store_dir=tmp_path / "store", profile=SQUARE)
    watcher = Watcher(
        photos, ledger_url, options, RunOptions(workers=1), WatchOptions(settle=2.0), recorder, clock=clock
    )

    assert watcher.check() is None
    clock.now += 2.0
    first = watcher.check()
    assert first is not None and first.batch.state == "succeeded" and first.report.sources == 1

    part = photos / "new.jpg"
    part.write_bytes(whole[: len(whole) // 2])  # half a JPEG, its writer still at work
    for _ in range(3):
        assert watcher.check() is None and recorder.waits[-1] == ["new.jpg"]
        clock.now += 1.5
        with part.open("ab") as f:  # a little more, each time before the settle time is up
            f.write(b"\0")
    assert watcher.check() is None
    part.write_bytes(whole)
    assert watcher.check() is None
    clock.now += 1.9
    assert watcher.check() is None
    with Ledger(ledger_url) as ledger:  # nothing of the partial file was recorded
        assert [b.batch_id for b in ledger.views.batches(10)] == [first.batch.batch_id]
    clock.now += 0.1
    second = watcher.check()
    assert second is not None and second.batch.state == "succeeded" and second.report.read == 1
    with Ledger(ledger_url) as ledger:
        check_invariants(ledger)
    assert (tmp_path / "out" / "new.1x1.jpg").read_bytes() == reference_thumbnail(tmp_path, whole)
    assert watcher.check() is None and len(recorder.rounds) == 2  # nothing changed since


def reference_thumbnail(tmp_path: Path, photo: bytes, name: str = "new.jpg") -> bytes:
    """The 1:1 thumbnail a plain submit of ``photo`` publishes, in a ledger and OUT of its own."""
    folder = tmp_path / "reference" / hashlib.sha256(photo).hexdigest()[:12]
    (folder / "in").mkdir(parents=True)
    (folder / "in" / name).write_bytes(photo)
    options = SubmitOptions(out_dir=folder / "out", profile=SQUARE)
    assert render(folder / "in", options, db=folder / "ledger.db", workers=1).state == "succeeded"
    return (folder / "out" / name.rsplit(".", 1)[0]).with_suffix(".1x1.jpg").read_bytes()


def test_a_file_that_never_stops_growing_holds_the_round_back_and_is_named_every_5_s(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    growing = photos / "upload.jpg"
    clock, recorder = Clock(), Recorder()
    options = SubmitOptions(out_dir=tmp_path / "out", store_dir=tmp_path / "store", profile=SQUARE)
    db = tmp_path / "ledger.db"
    watcher = Watcher(photos, db, options, RunOptions(workers=1), WatchOptions(settle=2.0), recorder, clock=clock)
    for step in range(40):  # 40 s of a file growing a little every second
        growing.write_bytes(b"\xff\xd8" + b"\0" * step)
        assert watcher.check() is None
        clock.now += 1.0
    [waiting] = watcher.settling.unsettled(clock())
    # there at the first scan, so settled until seen changing: from the second scan, 39 s ago
    assert (waiting.path, waiting.changing_for) == ("upload.jpg", 39.0)
    assert recorder.waits == [["upload.jpg"]] * 8  # at the start, then every 5 s
    assert recorder.rounds == [] and not db.exists()


def test_files_there_before_the_watch_are_not_named_as_settling_unless_they_change(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    for n in range(14):
        make_image(photos / f"p{n}.jpg", (64, 48), "JPEG", seed=n)
    clock, recorder = Clock(), Recorder()
    options = SubmitOptions(out_dir=tmp_path / "out", store_dir=tmp_path / "store", profile=SQUARE)
    db = tmp_path / "ledger.db"
    watcher = Watcher(photos, db, options, RunOptions(workers=1), WatchOptions(settle=2.0), recorder, clock=clock)
    assert watcher.check() is None  # the first round waits for a quiet folder...
    assert recorder.waits == [] and watcher.settling.unsettled(clock()) == []  # ...naming none of the 14
    make_image(photos / "p3.jpg", (64, 48), "JPEG", seed=99)  # touched after the watch started
    clock.now += 1.0
    assert watcher.check() is None
    assert recorder.waits == [["p3.jpg"]]


# -- the command, in real processes -------------------------------------------------------------


class Watch(Thumbctl):
    """A ledger (SQLite, or the PostgreSQL URL given), a store, a folder of photos and OUT."""

    def __init__(self, tmp_path: Path, db: str | None = None, **kwargs: object) -> None:
        super().__init__(db or tmp_path / "ledger.db", store=tmp_path / "store", faults=tmp_path / "faults", **kwargs)
        self.tmp = tmp_path
        self.photos = tmp_path / "photos"
        self.out = tmp_path / "out"
        make_image(self.photos / "garden.jpg", (300, 200), "JPEG", seed=1)
        make_image(self.photos / "rooms" / "kitchen.png", (200, 300), "PNG", seed=2)
        make_image(self.photos / "rooms" / "hall.webp", (256, 256), "WEBP", seed=3)

    def watch(self, *args: object, fault: str | None = None, **extra: str | None) -> tuple[Background, Lines, Lines]:
        proc = self.start(
            "watch", self.photos, "--out", self.out, "--settle", "0.3s", "--ratio", "1:1", "-w", "1", *args,
            fault=fault, **extra,
        )  # fmt: skip
        return proc, Lines(proc.proc.stdout), proc.follow_stderr()  # type: ignore[arg-type]

    def names(self) -> set[str]:
        """The thumbnails in OUT (not its batch documents nor the site manifest)."""
        documents = {"batches", "thumbctl.json"}
        return {str(p.relative_to(self.out)) for p in self.out.rglob("*.*") if not documents & set(p.parts)}

    def check(self) -> None:
        with Ledger(self.db) as ledger:
            check_invariants(ledger)


@contextlib.contextmanager
def frozen(proc: Background) -> Iterator[None]:
    """The watcher stopped while the test changes files, so it sees every change at once."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def round_doc(out: Lines, number: int) -> dict:
    return json.loads(out.wait_for(f'{{"round": {number},'))


@pytest.fixture
def no_watchfiles(tmp_path: Path) -> str:
    """A PYTHONPATH on which ``import watchfiles`` fails, as without the extra installed."""
    stub = tmp_path / "stub" / "watchfiles"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('watchfiles is not installed here')\n")
    return os.pathsep.join([str(stub.parent), os.environ.get("PYTHONPATH", "")])


@pytest.mark.parametrize("wake_up", ["watchfiles", "polling"])
def test_dropped_changed_renamed_and_deleted_photos_are_followed_and_mirrored(
    tmp_path: Path, wake_up: str, request: pytest.FixtureRequest
) -> None:
    env = Watch(tmp_path)
    extra = {"PYTHONPATH": request.getfixturevalue("no_watchfiles")} if wake_up == "polling" else {}
    proc, out, err = env.watch("--delete", "--json", "--poll-interval", "0.2s", **extra)
    how = "polling every 0.2s (watchfiles is not installed)" if wake_up == "polling" else "(watchfiles;"
    assert how in err.wait_for("watching ")
    first = round_doc(out, 1)
    assert first["batch"]["state"] == "succeeded" and first["sources"] == {"submitted": 3, "read": 3, "unchanged": 0}
    assert env.names() == {"garden.1x1.jpg", "rooms/kitchen.1x1.jpg", "rooms/hall.1x1.jpg"}
    hall = (env.out / "rooms" / "hall.1x1.jpg").read_bytes()

    with frozen(proc):
        make_image(env.photos / "porch.jpg", (400, 300), "JPEG", seed=4)  # dropped in
        make_image(env.photos / "garden.jpg", (300, 200), "JPEG", seed=5)  # changed
        os.rename(env.photos / "rooms" / "hall.webp", env.photos / "rooms" / "lobby.webp")  # renamed
        (env.photos / "rooms" / "kitchen.png").unlink()  # deleted
    second = round_doc(out, 2)
    assert second["batch"]["state"] == "succeeded"
    assert second["sources"] == {"submitted": 3, "read": 3, "unchanged": 0}
    assert sorted(second["mirrored"]["removed"]) == [
        str(env.out / "rooms" / "hall.1x1.jpg"),
        str(env.out / "rooms" / "kitchen.1x1.jpg"),
    ]
    assert env.names() == {"garden.1x1.jpg", "porch.1x1.jpg", "rooms/lobby.1x1.jpg"}
    assert (env.out / "rooms" / "lobby.1x1.jpg").read_bytes() == hall  # a rename renders nothing new
    garden = (env.photos / "garden.jpg").read_bytes()
    assert (env.out / "garden.1x1.jpg").read_bytes() == reference_thumbnail(tmp_path, garden, "garden.jpg")

    with frozen(proc):
        make_image(env.photos / "shed.jpg", (300, 300), "JPEG", seed=6)
    third = round_doc(out, 3)  # the round before was the last: nothing ran for OUT's own writes
    assert third["sources"] == {"submitted": 4, "read": 1, "unchanged": 3}
    proc.interrupt()
    assert proc.wait(timeout=60) == 130
    assert "Traceback" not in err.rest()
    env.check()


def test_a_file_still_being_written_is_held_back_until_it_is_whole_and_settled(tmp_path: Path) -> None:
    env = Watch(tmp_path)
    whole = make_image(tmp_path / "new.jpg", (320, 240), "JPEG", seed=7).read_bytes()
    proc, out, err = env.watch(fault="pause:watch_unsettled")  # it pauses whenever a file is settling
    out.wait_for("round 1:")  # the photos there before it started were not: the first round never paused

    with frozen(proc):
        (env.photos / "new.jpg").write_bytes(whole[: len(whole) // 2])
    env.paused("watch_unsettled", process=proc)  # it saw the half JPEG, and is held right there
    assert "waiting for 1 file to settle: new.jpg" in err.wait_for("waiting for 1 file")
    assert [b["batch_id"] for b in env.json("status")["batches"]] == [first_batch(env)]
    assert "new.1x1.jpg" not in env.names()
    (env.photos / "new.jpg").write_bytes(whole)  # the writer finishes
    env.release()
    line = out.wait_for("round 2:")
    assert "4 sources submitted, 1 new or changed, 3 unchanged; 0 items failed" in line
    assert (env.out / "new.1x1.jpg").read_bytes() == reference_thumbnail(tmp_path, whole)
    proc.interrupt()
    assert proc.wait(timeout=60) == 130


def first_batch(env: Watch) -> str:
    return env.json("status")["batches"][-1]["batch_id"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_ctrl_c_during_a_round_cancels_it_durably_and_the_next_watch_resumes_it(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    env = Watch(tmp_path, request.getfixturevalue("pg_url") if backend == "postgres" else None)
    proc, out, err = env.watch("--json", fault="pause:before_publish:once")
    env.paused("before_publish", process=proc)
    proc.interrupt()
    err.wait_for("Cancel recorded")
    env.release()
    assert proc.wait(timeout=60) == 130
    [interrupted] = [json.loads(line) for line in out.rest().splitlines()]
    assert interrupted["round"] == 1 and interrupted["interrupted"] is True
    batch_id = interrupted["batch"]["batch_id"]
    status = env.json("status", batch_id)  # exit 0: the batch reads back whole
    assert status["state"] == "cancelled" and status["counts"]["running"] == 0
    assert "Traceback" not in err.rest()
    env.check()

    proc, out, err = env.watch("--json")  # the same watch again: the cancelled batch is resumed
    resumed = round_doc(out, 1)
    assert resumed["batch"]["resumed_from"] == batch_id and resumed["batch"]["state"] == "succeeded"
    proc.interrupt()
    assert proc.wait(timeout=60) == 130
    env.check()


def test_poll_is_used_when_asked_and_a_service_manager_s_sigterm_stops_it_as_ctrl_c(tmp_path: Path) -> None:
    env = Watch(tmp_path)
    proc, out, err = env.watch("--poll")
    assert "polling every 1s (--poll)" in err.wait_for("watching ")
    out.wait_for("round 1:")
    os.killpg(proc.pid, signal.SIGTERM)  # `systemctl stop`: SIGTERM to every process of the unit
    assert proc.wait(timeout=60) == 130
    assert "stopped after 1 round" in err.rest()


def test_a_watch_of_no_folder_is_a_one_line_usage_error(tmp_path: Path) -> None:
    env = Watch(tmp_path)
    missing = env.invoke("watch", tmp_path / "nowhere", "--out", env.out)
    assert (missing.returncode, missing.stderr) == (
        2,
        f"error [source_not_found] DIR {tmp_path}/nowhere does not exist\n",
    )
    a_file = env.invoke("watch", env.photos / "garden.jpg", "--out", env.out)
    assert a_file.returncode == 2
    assert a_file.stderr.startswith("error [bad_source] DIR ") and "is not a folder" in a_file.stderr
    bucket = env.invoke("watch", "s3://bucket/photos", "--out", env.out)
    assert bucket.returncode == 2 and bucket.stderr.startswith("error [bad_source] DIR: 's3://bucket/photos'")
    settle = env.invoke("watch", env.photos, "--out", env.out, "--settle", "soon")
    assert settle.returncode == 2 and "--settle" in settle.stderr and "bad duration" in settle.stderr


def test_out_inside_the_folder_is_left_out_of_the_scan_as_submit_does(tmp_path: Path) -> None:
    env = Watch(tmp_path)
    inside = env.photos / "thumbs"
    proc = env.start("watch", env.photos, "--out", inside, "--settle", "0.3s", "--ratio", "1:1", "-w", "1")
    out = Lines(proc.proc.stdout)  # type: ignore[arg-type]
    assert "3 sources submitted" in out.wait_for("round 1:")
    sheets = (inside / "batches").resolve().as_uri()
    assert out.wait_for("contact sheet").strip() == f"contact sheet {sheets}/catalogue.html"
    with frozen(proc):
        make_image(env.photos / "porch.jpg", (400, 300), "JPEG", seed=4)
    assert "4 sources submitted, 1 new or changed, 3 unchanged" in out.wait_for("round 2:")
    assert "contact sheet file://" in out.wait_for("contact sheet")  # each round links its page
    proc.interrupt()
    assert proc.wait(timeout=60) == 130
    assert (inside / "porch.1x1.jpg").exists()
