"""Every command through the real CLI on both ledger backends: the same JSON, exit codes and errors.

The scenario runs ``thumbctl … --db LEDGER`` in this process (Typer's runner, the worker pool of a
foreground run forked from it as a command's process forks it) on real photos, once on a
SQLite file and once on a fresh PostgreSQL database (``ledger_url``; the PostgreSQL cases skip only
when ``THUMBCTL_TEST_PG`` is unset), asserts each command's exit code and document, and compares the
two transcripts after ids, times and paths are normalised. The PostgreSQL URL carries a password,
which must appear in no output, no file under OUT and no ledger row.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from thumbctl.config.ledgerurl import is_server_url, masked

from harness import Lines, until
from harness import Thumbctl as Harness
from pg import SKIP_REASON, create_database, drop_database, with_database
from support import make_image

REPO = Path(__file__).resolve().parent.parent
ORIENTATION = REPO / "tests" / "data" / "orientation"
SECRET = "s3cr3t-x"
DRIVER_HINT = "pip install 'thumbctl[postgres]'"
COMMANDS_THAT_OPEN_THE_LEDGER = [
    ["submit", "{photos}", "--out", "{out}", "--detach"],
    ["work", "--until-idle"],
    ["status"],
    ["status", "b_x", "--items"],
    ["events", "b_x"],
    ["cancel", "b_x", "--wait"],
    ["retry", "b_x"],
    ["reconcile", "--repair"],
    ["gc", "--older-than", "30d"],
    ["stats"],
    ["sheet", "b_x"],
]
JSON_COMMANDS = {"submit", "status", "events", "cancel", "retry", "reconcile", "gc", "stats", "sheet", "config"}


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` for its user (the test server trusts its socket, so any password works)."""
    parts = urlsplit(url)
    user, host = parts.netloc.rsplit("@", 1) if "@" in parts.netloc else ("postgres", parts.netloc)
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:{password}@{host}"))


@dataclass
class Run:
    args: list[str]
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def doc(self) -> dict:
        return json.loads(self.stdout)


class Thumbctl(Harness):
    """thumbctl in this process (:meth:`Harness.invoke`), every run kept for checks; with
    ``fresh``, ``python -m thumbctl`` in a new interpreter instead, for an environment whose
    ``PYTHONPATH`` changes what imports (a ``psycopg`` that is missing)."""

    def __init__(self, db: str, env: dict[str, str], *, fresh: bool = False) -> None:
        super().__init__(db, base=env)
        self.fresh = fresh
        self.runs: list[Run] = []

    def environment(self, fault: str | None = None, **extra: str | None) -> dict[str, str]:
        """The ledger goes by ``--db``: THUMBCTL_DB only where ``env`` sets it."""
        return super().environment(fault, **{"THUMBCTL_DB": (self.base or {}).get("THUMBCTL_DB"), **extra})

    def __call__(self, *args: object, db: bool = True, as_json: bool = True, timeout: float = 120) -> Run:
        """Run ``thumbctl ARGS --db DB``, with ``--json`` where the command prints a document."""
        argv = [str(a) for a in args]
        if db:
            argv += ["--db", str(self.db)]
        if as_json and argv[0] in JSON_COMMANDS:
            argv.append("--json")
        started = time.monotonic()
        done = self.run(*argv, timeout=timeout) if self.fresh else self.invoke(*argv)
        run = Run(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)
        self.runs.append(run)
        assert "Traceback" not in run.stderr, run.stderr
        return run


def cli_env(tmp_path: Path, *front: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUMBCTL_") or k.startswith("THUMBCTL_TEST_")}
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in front), str(REPO)])
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    env["THUMBCTL_STORE"] = str(tmp_path / "store")  # a PostgreSQL ledger has no default store
    return env


@pytest.fixture
def pictures(tmp_path: Path) -> Path:
    return make_pictures(tmp_path)


def make_pictures(folder: Path) -> Path:
    """Three real photos in ``folder/pictures``: two JPEGs from the orientation set and a generated PNG."""
    root = folder / "pictures"
    root.mkdir()
    shutil.copy(ORIENTATION / "Landscape_1.jpg", root / "landscape.jpg")
    shutil.copy(ORIENTATION / "Portrait_2.jpg", root / "portrait.jpg")
    make_image(root / "garden.png", (96, 64), "PNG", seed=3)
    return root


def ledger_target(ledger_url: str) -> str:
    """The ``--db`` a scenario uses: a server URL gets a password, which must never be shown."""
    return with_password(ledger_url, SECRET) if is_server_url(ledger_url) else ledger_url


# -- the scenario ---------------------------------------------------------------------------------


def run_scenario(thumbctl: Thumbctl, pictures: Path, out: Path, tmp_path: Path) -> list[tuple[str, int, object]]:
    """Every command once (most of them as a user meets them), asserting exit codes and documents;
    returns the transcript (label, exit code, document) for the comparison between backends."""
    transcript: list[tuple[str, int, object]] = []

    def record(label: str, run: Run, doc: object | None = None) -> object:
        doc = run.doc if doc is None else doc
        transcript.append((label, run.code, doc))
        return doc

    submit = ["submit", pictures, "--out", out, "-r", "1:1", "-r", "4:3", "--size", "64", "--key", "K", "--detach"]
    first = record("submit", thumbctl(*submit))
    assert (first["state"], first["total"], first["replayed"]) == ("queued", 6, False), first
    assert first["counts"] == {"queued": 6, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
    bid = first["batch_id"]
    again = record("submit replay", thumbctl(*submit))
    assert (again["batch_id"], again["replayed"]) == (bid, True) and transcript[-1][1] == 0
    conflict = thumbctl(*submit[:-1], "--size", "80", "--detach")
    record("submit conflict", conflict)
    assert conflict.code == 3 and conflict.doc["error"]["code"] == "idempotency_conflict"
    assert conflict.doc["error"]["exit_code"] == 3 and conflict.doc["error"]["transient"] is False
    assert len(conflict.stderr.splitlines()) == 1 and "[idempotency_conflict]" in conflict.stderr

    garden = pictures / "garden.png"
    original = garden.read_bytes()
    make_image(garden, (96, 64), "PNG", seed=4)  # changed after submit: its two items fail
    work = thumbctl("work", "--until-idle", "-w", "1", "-q")
    assert (work.code, work.stdout) == (0, "")
    partial = record("status partial", thumbctl("status", bid))
    assert partial["state"] == "partial"
    assert partial["counts"] == {"queued": 0, "running": 0, "succeeded": 4, "failed": 2, "cancelled": 0}
    assert {(f["item_id"], f["ratio"], f["error_code"]) for f in partial["failures"]} == {
        ("garden.png", "1:1", "source_changed"),
        ("garden.png", "4:3", "source_changed"),
    }
    items = record("status --items", thumbctl("status", bid, "--items"))
    assert list(items) == ["batch_id", "items"] and items["batch_id"] == bid
    assert sorted((i["item_id"], i["ratio"], i["state"]) for i in items["items"]) == [
        ("garden.png", "1:1", "failed"),
        ("garden.png", "4:3", "failed"),
        ("landscape.jpg", "1:1", "succeeded"),
        ("landscape.jpg", "4:3", "succeeded"),
        ("portrait.jpg", "1:1", "succeeded"),
        ("portrait.jpg", "4:3", "succeeded"),
    ]
    failed_only = record("status --state failed", thumbctl("status", bid, "--state", "failed"))
    assert [i["item_id"] for i in failed_only["items"]] == ["garden.png", "garden.png"]

    garden.write_bytes(original)
    retried = record("retry", thumbctl("retry", bid, "-w", "1"))
    assert transcript[-1][1] == 0 and retried["state"] == "succeeded"
    assert retried["counts"] == {"queued": 0, "running": 0, "succeeded": 6, "failed": 0, "cancelled": 0}
    watched = record("status --watch", thumbctl("status", bid, "--watch"))
    assert watched["state"] == "succeeded" and watched["failures"] == []

    events = thumbctl("events", bid)
    assert events.code == 0 and list(events.doc) == ["events"]
    listed = events.doc["events"]
    assert [e["seq"] for e in listed] == sorted({e["seq"] for e in listed})  # commit order, no repeats
    record("events", events, per_item_history(listed))
    garden_history = per_item_history(listed)["garden.png 1:1"]
    assert garden_history == [
        [None, "queued", 0, None, None],
        ["queued", "running", 1, None, None],
        ["running", "failed", 1, "source_changed", f"{garden} changed since it was submitted"],
        ["failed", "queued", 1, None, "retry requested"],
        ["queued", "running", 1, None, None],
        ["running", "succeeded", 1, None, None],
    ]
    one = record("events --item", thumbctl("events", bid, "--item", "landscape.jpg"))
    assert {e["item_id"] for e in one["events"]} == {"landscape.jpg"} and len(one["events"]) == 6

    victim = next(i for i in items["items"] if i["item_id"] == "portrait.jpg" and i["ratio"] == "1:1")
    os.unlink(victim["object_path"])
    found = record("reconcile", thumbctl("reconcile"))
    assert transcript[-1][1] == 1 and [f["kind"] for f in found["findings"]] == ["object_missing"]
    assert found["findings"][0]["path"] == victim["object_path"] and found["clean"] is False
    repaired = record("reconcile --repair", thumbctl("reconcile", "--repair"))
    assert transcript[-1][1] == 0 and repaired["clean"] is True and repaired["findings"][0]["repaired"] is True
    assert thumbctl("work", "--until-idle", "-w", "1", "-q").code == 0
    assert os.path.exists(victim["object_path"])
    clean = record("reconcile after work", thumbctl("reconcile"))
    assert transcript[-1][1] == 0 and clean["findings"] == []

    prom = tmp_path / "metrics.prom"
    report = thumbctl("stats", "--prometheus", prom)
    assert report.code == 0 and report.doc["counts"]["admitted"] == 6
    record("stats", report, stats_facts(report.doc))
    metrics = prom.read_text()
    assert 'thumbctl_queue_items{state="runnable"} 0' in metrics and "thumbctl_items_admitted_total 6" in metrics
    record("stats --prometheus", report, sorted({line.split("{")[0].split()[0] for line in metrics.splitlines()}))
    per_batch = thumbctl("stats", "--batch", bid[:8])
    record("stats --batch", per_batch, stats_facts(per_batch.doc))
    sheet = record("sheet", thumbctl("sheet", bid))
    assert (sheet["sources"], sheet["items"], sheet["succeeded"], sheet["failed"]) == (3, 6, 6, 0)
    assert Path(sheet["path"]).is_file()

    config = thumbctl("config")
    setting = config.doc["settings"]["db"]
    assert setting == {"value": masked(thumbctl.db), "source": "flag"}
    record("config db", config, setting)
    by_env = thumbctl("config", db=False)
    assert by_env.doc["settings"]["db"] == {"value": masked(thumbctl.db), "source": "env THUMBCTL_DB"}

    second = tmp_path / "second"
    second.mkdir()
    shutil.copy(ORIENTATION / "Landscape_3.jpg", second / "one.jpg")
    shutil.copy(ORIENTATION / "Portrait_4.jpg", second / "two.jpg")
    other = record("submit second", thumbctl("submit", second, "--out", out, "-r", "16:9", "--key", "K2", "--detach"))
    cancelled = record("cancel --wait", thumbctl("cancel", other["batch_id"], "--wait"))
    assert transcript[-1][1] == 0 and cancelled["state"] == "cancelled"
    assert cancelled["counts"]["cancelled"] == 2 and cancelled["cancel_requested_at"]
    again_cancelled = record("cancel again", thumbctl("cancel", other["batch_id"]))
    assert again_cancelled["state"] == "cancelled"
    resumed = record("retry cancelled", thumbctl("retry", other["batch_id"], "--detach"))
    assert transcript[-1][1] == 0 and resumed["resumed_from"] == other["batch_id"]
    assert (resumed["idempotency_key"], resumed["counts"]["queued"]) == ("K2", 2)
    record("cancel resumed", thumbctl("cancel", resumed["batch_id"], "--wait"))
    missing = record("status unknown", thumbctl("status", "b_doesnotexist"))
    assert transcript[-1][1] == 2 and missing["error"]["code"] == "batch_not_found"
    assert missing["error"]["message"] == f"no batch 'b_doesnotexist' in {masked(thumbctl.db)}"

    dry = record("gc --dry-run", thumbctl("gc", "--older-than", "0s", "--dry-run"))
    expiring = sorted([bid, other["batch_id"], resumed["batch_id"]])
    assert dry["dry_run"] is True and sorted(dry["expired_batches"]) == expiring
    kept = record("gc 30d", thumbctl("gc", "--older-than", "30d"))
    assert kept["expired_batches"] == [] and kept["objects_removed"] == 0
    thumbnails = thumbnails_in(out)
    assert len(thumbnails) == 6
    cron = thumbctl("gc", "--older-than", "0s", "-q", as_json=False)  # the documented cron line, at any age
    assert (cron.code, cron.stdout, cron.stderr) == (0, "", "")
    gone = record("gc 0s", thumbctl("gc", "--older-than", "0s"))
    assert transcript[-1][1] == 0 and gone["expired_batches"] == [] and gone["errors"] == []
    assert thumbnails_in(out) == thumbnails  # every thumbnail byte for byte, though every batch expired
    listing = record("status list", thumbctl("status"))
    assert [b["expired_at"] is not None for b in listing["batches"]] == [True, True, True]
    listing_by_env = thumbctl("status", db=False)
    assert listing_by_env.code == 0 and listing_by_env.doc == listing

    make_image(garden, (96, 64), "PNG", seed=5)  # a later submit renders its names anew: still thumbctl's
    later = record("submit after gc", thumbctl(*submit[:-3], "--key", "K3", "-w", "1"))
    assert transcript[-1][1] == 0 and later["state"] == "succeeded" and later["replaced"] == 2
    assert thumbnails_in(out) != thumbnails and set(thumbnails_in(out)) == set(thumbnails)
    return transcript


def thumbnails_in(out: Path) -> dict[str, str]:
    """Every thumbnail in OUT (not its batch documents nor the site manifest) with the sha256 of its bytes."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in out.rglob("*")
        if p.is_file() and p.relative_to(out).parts[0] not in ("batches", ".tmp", "thumbctl.json")
    }


def per_item_history(events: list[dict]) -> dict[str, list[list[object]]]:
    """Each item's transitions in order (the order between items depends on timing, not the backend)."""
    history: dict[str, list[list[object]]] = {}
    for e in events:
        key = f"{e['item_id']} {e['ratio']}" if e["item_id"] else "batch"
        history.setdefault(key, []).append([e["from_state"], e["to_state"], e["attempt"], e["error_code"], e["detail"]])
    return history


def stats_facts(doc: dict) -> dict[str, object]:
    """What of a stats report is the same on every run: its keys, queue and counts (not rates or timings)."""
    return {
        "keys": sorted(doc),
        "queue": {k: v for k, v in doc["queue"].items() if k != "oldest_runnable_age_seconds"},
        "counts": doc["counts"],
        "retries": sorted(doc["retries"]),
        "per_ratio": sorted(doc["per_ratio"]) if isinstance(doc["per_ratio"], dict) else doc["per_ratio"],
        "dedup_hits": doc["dedup_hits"],
        "timing_stages": sorted(doc["timings_ms"]),
    }


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
_BATCH = re.compile(r"\bb_[0-9a-f]{16}\b")
_WORKER = re.compile(r"[\w.-]+~[0-9a-f]+:\d+:\d+")
#: Fields that differ from run to run whatever the backend: the request digest covers the sources'
#: paths (another tmp folder), ages and timings are measured.
_VOLATILE = {
    "request_digest": lambda v: "<digest>" if v else v,
    "queue_age_seconds": lambda v: v if v is None else "<age>",
    "timings": lambda v: sorted(v) if isinstance(v, dict) else v,
    # the documents gc reclaims name their ledger (a contact sheet's fix lines give its --db)
    "bytes_reclaimed": lambda v: "<bytes>" if isinstance(v, int) and v > 0 else v,
}


def normalised(value: object, replacements: dict[str, str], ids: dict[str, str]) -> object:
    """``value`` with times, batch ids, workers and the test's own paths and ledger name replaced."""
    if isinstance(value, dict):
        return {k: _VOLATILE[k](v) if k in _VOLATILE else normalised(v, replacements, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v, replacements, ids) for v in value]
    if not isinstance(value, str):
        return value
    for old, new in replacements.items():
        value = value.replace(old, new)
    value = _TIME.sub("<time>", value)
    value = _WORKER.sub("<worker>", value)
    return _BATCH.sub(lambda m: ids.setdefault(m.group(0), f"<batch{len(ids)}>"), value)


def normalised_transcript(transcript: list[tuple[str, int, object]], root: Path, db: str) -> list[object]:
    replacements = {masked(db): "<db>", str(root): "<root>"}
    ids: dict[str, str] = {}
    return [[label, code, normalised(doc, replacements, ids)] for label, code, doc in transcript]


# -- every command on each backend ---------------------------------------------------------------


#: The scenarios run some forty commands (those that render fork a worker pool): more than the suite's
#: per-test guard on a loaded 2-core machine, though nothing in them waits on time.
SCENARIO_TIMEOUT = pytest.mark.timeout(480)


@dataclass
class Scenario:
    """The scenario as it ran on one backend: its commands, its folder, its ledger, its transcript."""

    thumbctl: Thumbctl
    root: Path
    ledger_url: str
    transcript: list[tuple[str, int, object]]


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Scenario]:
    """The scenario's run on each backend in this test process, made by :func:`scenario_on`: the
    test of each backend checks it."""
    return {}


@pytest.fixture(scope="session")
def transcripts_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """Where each backend's normalised transcript is written once its scenario has run, for the
    parity test: a folder every test process of this run shares (each backend test may run in
    another process, in parallel), or this process's own when there is one."""
    if worker_id == "master":
        return tmp_path_factory.mktemp("transcripts")
    shared = tmp_path_factory.getbasetemp().parent / f"transcripts-{os.environ['PYTEST_XDIST_TESTRUNUID']}"
    shared.mkdir(exist_ok=True)
    return shared


@contextlib.contextmanager
def backend_lock(folder: Path, backend: str) -> Iterator[None]:
    """Held while one process runs (or reads) ``backend``'s scenario: another waits for it, never
    runs it twice at once."""
    with open(folder / f"{backend}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def scenario_pg_url(pg_admin_url: str | None) -> Iterator[str]:
    """A fresh database on the test server for the PostgreSQL run of the scenario, dropped with the module."""
    if pg_admin_url is None:
        pytest.skip(SKIP_REASON)
    url = create_database(pg_admin_url)
    yield url
    drop_database(pg_admin_url, url)


def scenario_on(
    scenarios: dict[str, Scenario], backend: str, request: pytest.FixtureRequest, factory: pytest.TempPathFactory
) -> Scenario:
    """The scenario run on ``backend`` (``sqlite`` or ``postgres``), running it if it has not run in
    this process yet; its normalised transcript is then written to :func:`transcripts_dir`."""
    if backend not in scenarios:
        folder = request.getfixturevalue("transcripts_dir")
        with backend_lock(folder, backend):
            root = factory.mktemp("scenario")  # as long a path on both backends: byte counts compare equal
            ledger_url = str(root / "ledger.db") if backend == "sqlite" else request.getfixturevalue("scenario_pg_url")
            db = ledger_target(ledger_url)
            thumbctl = Thumbctl(db, {**cli_env(root), "THUMBCTL_DB": db})
            transcript = run_scenario(thumbctl, make_pictures(root), root / "out", root)
            scenarios[backend] = Scenario(thumbctl, root, ledger_url, transcript)
            written = folder / f"{backend}.json.part"
            written.write_text(json.dumps(normalised_transcript(transcript, root, db)))
            written.rename(folder / f"{backend}.json")
    return scenarios[backend]


def transcript_of(
    scenarios: dict[str, Scenario], backend: str, request: pytest.FixtureRequest, factory: pytest.TempPathFactory
) -> list[object]:
    """``backend``'s normalised transcript: as written by the process that ran its scenario (waiting
    while one runs it), else from running it here."""
    folder = request.getfixturevalue("transcripts_dir")
    with backend_lock(folder, backend):
        if (folder / f"{backend}.json").exists():
            return json.loads((folder / f"{backend}.json").read_text())
    scenario_on(scenarios, backend, request, factory)
    return json.loads((folder / f"{backend}.json").read_text())


@SCENARIO_TIMEOUT
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_every_command_gives_the_documented_json_and_exit_code(
    backend: str,
    scenarios: dict[str, Scenario],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    run = scenario_on(scenarios, backend, request, tmp_path_factory)  # asserts each command's code and document
    assert_secret_nowhere(run.thumbctl, run.root, run.ledger_url)  # OUT, the manifests, the sheet, the metrics file


@SCENARIO_TIMEOUT
def test_both_backends_print_the_same_json(
    scenario_pg_url: str,
    scenarios: dict[str, Scenario],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    sqlite, postgres = (transcript_of(scenarios, b, request, tmp_path_factory) for b in ("sqlite", "postgres"))
    assert [step[0] for step in sqlite] == [step[0] for step in postgres]
    for left, right in zip(sqlite, postgres, strict=True):
        assert left == right, "\n".join(difflib.unified_diff(shown(left), shown(right), "sqlite", "postgresql"))


def shown(step: object) -> list[str]:
    return json.dumps(step, indent=1, sort_keys=True).splitlines()


def test_watch_and_cancel_wait_follow_a_batch_another_process_renders(
    ledger_url: str, pictures: Path, tmp_path: Path
) -> None:
    """A worker paused at its publish holds a running item: ``status --watch`` and ``cancel --wait``
    keep waiting (the cancel already recorded) until it lets go, then both print the cancelled batch."""
    db = ledger_target(ledger_url)
    thumbctl = Thumbctl(db, cli_env(tmp_path))
    bid = thumbctl("submit", pictures, "--out", tmp_path / "out", "-r", "1:1", "--detach").doc["batch_id"]
    worker = Harness(db, base=thumbctl.environment(), faults=tmp_path / "faults", env={"THUMBCTL_DB": None})
    work = worker.start("work", "--until-idle", "-w", "1", "-q", "--db", db, fault="pause:before_publish")
    watch = thumbctl.start("status", bid, "--watch", "--json", "--db", db)
    worker.paused("before_publish", process=work)
    waiter = thumbctl.start("cancel", bid, "--wait", "--json", "--db", db)
    until(
        lambda: any(e["to_state"] == "cancel_requested" for e in thumbctl("events", bid).doc["events"]),
        "the cancel to be recorded",
    )
    assert (waiter.running(), watch.running()) == (True, True)  # an item is still running: neither may return
    worker.release()
    outputs = [process.communicate(timeout=60) for process in (waiter, watch, work)]
    (cancelled, _), (watched, _), (_, work_err) = outputs
    assert (waiter.returncode, watch.returncode, work.returncode) == (0, 0, 0), work_err
    for doc in (json.loads(cancelled), json.loads(watched)):
        assert doc["batch_id"] == bid and doc["state"] == "cancelled"
        assert doc["counts"] == {"queued": 0, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 3}
    events = thumbctl("events", bid).doc["events"]
    assert not [e for e in events if e["to_state"] == "succeeded"]  # the paused publish saw the cancel


def assert_secret_nowhere(thumbctl: Thumbctl, folder: Path, ledger_url: str) -> None:
    """The password of the ledger URL is in no output of any command, no file under ``folder`` (OUT
    or above), no ledger row."""
    for run in thumbctl.runs:
        assert SECRET not in run.stdout and SECRET not in run.stderr, run.args
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    if is_server_url(ledger_url):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
            for table in tables:
                leaks = conn.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", (f"%{SECRET}%",))
                assert leaks.fetchone()[0] == 0, table


def test_human_output_and_errors_never_show_the_password(pg_url: str, pictures: Path, tmp_path: Path) -> None:
    db = with_password(pg_url, SECRET)
    thumbctl = Thumbctl(db, cli_env(tmp_path))
    out = tmp_path / "out"
    submit = ["submit", pictures, "--out", out, "-r", "1:1", "-w", "1"]
    bid = thumbctl(*submit).doc["batch_id"]
    assert thumbctl(*submit, "-v", as_json=False).code == 0
    readers = [["status"], ["status", bid, "-v"], ["status", bid, "--items"], ["events", bid], ["stats"], ["config"]]
    writers = [["sheet", bid], ["reconcile", "--repair"], ["work", "--until-idle", "-v"], ["gc", "--older-than", "0s"]]
    for args in readers + writers:
        assert thumbctl(*args, as_json=False).code == 0, args
    for args in (["status", "b_nope"], ["events", "b_nope"], ["cancel", "b_nope"], ["retry", "b_nope"]):
        unknown = thumbctl(*args, as_json=False)
        assert unknown.code == 2
        assert unknown.stderr.splitlines() == [f"error [batch_not_found] no batch 'b_nope' in {masked(db)}"]
    assert_secret_nowhere(thumbctl, tmp_path, pg_url)


# -- a missing driver, a server that is down or refuses the login ----------------------------------


@pytest.fixture
def without_driver(tmp_path: Path) -> Path:
    """A folder whose ``psycopg`` fails to import, put first on the path: an install without the extra."""
    front = tmp_path / "no-driver"
    (front / "psycopg").mkdir(parents=True)
    (front / "psycopg" / "__init__.py").write_text("raise ImportError(\"No module named 'psycopg'\")\n")
    return front


@pytest.mark.parametrize("args", COMMANDS_THAT_OPEN_THE_LEDGER, ids=lambda a: " ".join(a[:2]))
def test_a_postgresql_url_without_the_driver_is_one_line_naming_the_extra(
    args: list[str], without_driver: Path, pictures: Path, tmp_path: Path
) -> None:
    url = f"postgresql://shop:{SECRET}@db.example/thumbs"
    thumbctl = Thumbctl(url, cli_env(tmp_path, without_driver), fresh=True)
    argv = [a.format(photos=pictures, out=tmp_path / "out") for a in args]
    human = thumbctl(*argv, "-q", as_json=False)
    assert human.code == 2 and human.stdout == ""
    assert human.stderr.splitlines() == [
        f"error [postgres_driver_missing] a PostgreSQL ledger needs the driver: {DRIVER_HINT}"
    ]
    if argv[0] in JSON_COMMANDS:
        doc = thumbctl(*argv).doc
        assert doc == {
            "error": {
                "code": "postgres_driver_missing",
                "message": f"a PostgreSQL ledger needs the driver: {DRIVER_HINT}",
                "transient": False,
                "exit_code": 2,
            }
        }
    assert not (tmp_path / "out").exists()
    assert SECRET not in human.stderr


def test_config_shows_a_postgresql_url_masked_even_without_the_driver(without_driver: Path, tmp_path: Path) -> None:
    url = f"postgresql://shop:{SECRET}@db.example/thumbs"
    doc = Thumbctl(url, cli_env(tmp_path, without_driver), fresh=True)("config").doc
    assert doc["settings"]["db"] == {"value": "postgresql://shop:***@db.example/thumbs", "source": "flag"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable_message(url: str, reason: str) -> str:
    return (
        f"the PostgreSQL ledger {masked(url)} cannot be reached ({reason}): check that the server runs and "
        "accepts this user, then run the command again"
    )


def assert_unavailable(run: Run, url: str) -> str:
    """Exit 75, ``ledger_unavailable`` (transient) as one line on stderr (and JSON on stdout where the
    command prints JSON), the password masked; returns the message."""
    assert run.code == 75, run.stderr
    assert SECRET not in run.stdout + run.stderr
    (line,) = run.stderr.splitlines()
    prefix = "error [ledger_unavailable] "
    assert line.startswith(f"{prefix}the PostgreSQL ledger {masked(url)} cannot be reached ("), line
    message = line[len(prefix) :]
    if run.args[0] in JSON_COMMANDS:
        assert run.doc == {
            "error": {"code": "ledger_unavailable", "message": message, "transient": True, "exit_code": 75}
        }
    else:
        assert run.stdout == ""
    return message


@pytest.mark.parametrize("args", COMMANDS_THAT_OPEN_THE_LEDGER, ids=lambda a: " ".join(a[:2]))
def test_a_server_that_is_down_is_ledger_unavailable_at_once(args: list[str], pictures: Path, tmp_path: Path) -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/thumbs"  # nothing listens there
    thumbctl = Thumbctl(url, cli_env(tmp_path))
    run = thumbctl(*[a.format(photos=pictures, out=tmp_path / "out") for a in args])
    assert "Connection refused" in assert_unavailable(run, url)
    assert run.seconds < 10  # no busy wait: a refused connection is reported at once


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers: a server that hangs (or a dropped route)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_server_that_never_answers_is_given_the_busy_timeout_to_connect(silent_server: int, tmp_path: Path) -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{silent_server}/thumbs"
    env = {**cli_env(tmp_path), "THUMBCTL_BUSY_TIMEOUT": "2"}
    run = Thumbctl(url, env)("status")
    assert assert_unavailable(run, url) == unavailable_message(url, "connection timeout expired")
    assert 2 <= run.seconds < 8  # one connect timeout, not the whole busy wait (THUMBCTL_BUSY_WAIT, 20 s)


@pytest.mark.parametrize("wrong", ["role", "database"])
def test_a_login_the_server_refuses_is_a_configuration_error_with_the_password_masked(
    wrong: str, pg_admin_url: str | None, pictures: Path, tmp_path: Path
) -> None:
    """An unknown role or database is exit 2, ``ledger_login_refused``, permanent: cron would
    retry a 75 for ever."""
    if pg_admin_url is None:
        pytest.skip("needs THUMBCTL_TEST_PG")
    url = with_password(pg_admin_url, SECRET)
    if wrong == "role":
        parts = urlsplit(url)
        url = urlunsplit(parts._replace(netloc=parts.netloc.replace("postgres:", "no_such_role_x:", 1)))
    else:
        url = with_database(url, "no_such_database_x")
    thumbctl = Thumbctl(url, cli_env(tmp_path))
    for args in (["status"], ["submit", pictures, "--out", tmp_path / "out", "--detach"], ["work", "--until-idle"]):
        run = thumbctl(*args)
        assert run.code == 2, run.stderr
        assert SECRET not in run.stdout + run.stderr
        (line,) = run.stderr.splitlines()
        prefix = f"error [ledger_login_refused] the PostgreSQL server refused the login to {masked(url)} ("
        assert line.startswith(prefix) and f'"no_such_{wrong}_x" does not exist' in line, line
        assert line.endswith("): check the user, password and database in --db (or THUMBCTL_DB)")
        message = line[len("error [ledger_login_refused] ") :]
        if args[0] in JSON_COMMANDS:
            assert run.doc == {
                "error": {"code": "ledger_login_refused", "message": message, "transient": False, "exit_code": 2}
            }
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["--help", "submit --help", "status --help", "work --help", "config --help"])
def test_help_says_how_to_select_postgresql(command: str, tmp_path: Path) -> None:
    run = Thumbctl("", cli_env(tmp_path))(*command.split(), db=False, as_json=False)
    assert run.code == 0 and "postgresql://user@host/dbname" in run.stdout and DRIVER_HINT.split()[-1] in run.stdout


def test_the_docs_document_the_postgresql_ledger_and_its_error_codes() -> None:
    guide = (REPO / "docs" / "scaling-out.md").read_text()
    assert "`--db postgresql://user@host/dbname`" in guide and DRIVER_HINT in guide
    exit_codes = (REPO / "docs" / "json.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert "`postgres_driver_missing`" in exit_codes.split("| 2 |", 1)[1].split("\n", 1)[0]
    assert "`ledger_unavailable`" in exit_codes.split("| 75 |", 1)[1].split("\n", 1)[0]
    assert "`ledger_login_refused`" in exit_codes.split("| 2 |", 1)[1].split("\n", 1)[0]


def test_config_shows_the_store_the_ledger_recorded_or_that_one_is_required(
    ledger_url: str, pictures: Path, tmp_path: Path
) -> None:
    """Without --store: a fresh PostgreSQL ledger needs one ("required"), a SQLite one has its
    default beside it; once a submit named a store, both show the one they recorded."""
    env = {k: v for k, v in cli_env(tmp_path).items() if k != "THUMBCTL_STORE"}
    thumbctl = Thumbctl(ledger_target(ledger_url), env)
    postgres = is_server_url(ledger_url)
    if postgres:
        # the ledger's schema is created by the first command that opens it
        assert thumbctl("status").code == 0
    fresh = thumbctl("config")
    assert fresh.code == 0
    if postgres:
        expected = {"value": None, "source": "required: give --store (a PostgreSQL ledger has no default)"}
    else:
        expected = {"value": None, "source": "default"}
    assert fresh.doc["settings"]["store"] == expected
    (line,) = [line for line in thumbctl("config", as_json=False).stdout.splitlines() if line.startswith("store ")]
    shown = "required" if postgres else "beside the ledger (ledger.store)"
    assert line.split() == ["store", *shown.split(), *expected["source"].split()]
    store = tmp_path / "objects"
    assert thumbctl("submit", pictures, "--out", tmp_path / "out", "--store", store, "--detach").code == 0
    recorded = thumbctl("config")
    assert recorded.doc["settings"]["store"] == {"value": str(store), "source": "recorded in the ledger"}
    (line,) = [line for line in thumbctl("config", as_json=False).stdout.splitlines() if line.startswith("store ")]
    assert line.split() == ["store", str(store), "recorded", "in", "the", "ledger"]


@pytest.mark.parametrize(
    ("reason", "refused"),
    [
        ('connection failed: FATAL:  password authentication failed for user "shop"', True),
        ('connection failed: FATAL:  no pg_hba.conf entry for host "10.0.0.5", user "shop", database "thumbs"', True),
        ('connection failed: FATAL:  role "shop" is not permitted to log in', True),
        ("connection failed: fe_sendauth: no password supplied", True),
        ("connection failed: FATAL:  the database system is starting up", False),
        ("connection failed: FATAL:  sorry, too many clients already", False),
        ("connection failed: Connection refused", False),
    ],
)
def test_which_connection_errors_are_a_refused_login(reason: str, refused: bool) -> None:
    from types import SimpleNamespace

    from thumbctl.ledger.postgres import PostgresBackend

    url = f"postgresql://shop:{SECRET}@db.example/thumbs"
    error = PostgresBackend._refused(SimpleNamespace(url=url, name=masked(url)), Exception(f"{reason} {SECRET}"))
    assert (error is not None) == refused
    if error is not None:
        assert (error.code, error.exit_code, error.transient) == ("ledger_login_refused", 2, False)
        assert SECRET not in error.message and reason in error.message


def test_a_batch_id_is_taken_by_a_unique_hex_prefix_without_its_b_and_an_ambiguous_one_is_refused(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like a git short id: ``9450`` names b_9450…, ``94`` is too short, ``9451`` starts two batches."""
    from thumbctl import Ledger, Limits
    from thumbctl.ledger import intake as acceptance

    from support import request

    ids = iter(["b_94500000000000aa", "b_9451000000000001", "b_9451000000000002"])
    monkeypatch.setattr(acceptance, "new_batch_id", lambda: next(ids))
    with Ledger(ledger_url) as ledger:
        for key in ("A", "B", "C"):
            ledger.intake.accept_batch(request(key, sources=1), Limits())
    thumbctl = Thumbctl(ledger_target(ledger_url), cli_env(tmp_path))
    for prefix in ("9450", "94500000000000AA", "b_9450"):
        found = thumbctl("status", prefix)
        assert (found.code, found.doc["batch_id"]) == (0, "b_94500000000000aa"), prefix
    for command in (["status"], ["events"], ["cancel"], ["retry"], ["stats"], ["sheet"]):
        refused = thumbctl(*command, "9451")
        assert refused.code == 2, (command, refused.stderr)
        message = (
            "batch id prefix '9451' is ambiguous: b_9451000000000001, b_9451000000000002 and maybe more start "
            "with it; give more of the id"
        )
        assert refused.doc == {
            "error": {"code": "batch_id_ambiguous", "message": message, "transient": False, "exit_code": 2}
        }
        assert refused.stderr == f"error [batch_id_ambiguous] {message}\n"
    short = thumbctl("status", "94")
    assert (short.code, short.doc["error"]["code"]) == (2, "batch_not_found")
    assert thumbctl("status", "9452").doc["error"]["message"].startswith("no batch '9452' in ")


def test_events_follow_prints_each_event_as_it_commits_as_json_lines_until_the_batch_is_final(
    ledger_url: str, pictures: Path, tmp_path: Path
) -> None:
    """`events B --follow --json` started before any work: one JSON object a line, the renders'
    events as they commit, then exit 0 once the batch is final, the same events `events --json` lists."""
    thumbctl = Thumbctl(ledger_target(ledger_url), cli_env(tmp_path))
    batch_id = thumbctl("submit", pictures, "--out", tmp_path / "out", "-r", "1:1", "--detach").doc["batch_id"]
    follower = thumbctl.start("events", batch_id[2:10], "--follow", "--json", "--db", thumbctl.db)
    lines = Lines(follower.proc.stdout)  # type: ignore[arg-type]
    lines.wait_for('"to_state": "queued"')  # it has read the log as it stood before any work
    assert thumbctl("work", "--until-idle", "-w", "1", as_json=False).code == 0
    assert follower.wait(60) == 0
    followed = [json.loads(line) for line in lines.rest().splitlines()]
    assert followed == thumbctl("events", batch_id).doc["events"]
    assert [e["to_state"] for e in followed].count("succeeded") == 3


def with_query_password(url: str, password: str) -> str:
    """``url`` with ``password`` given as libpq's ``?password=`` parameter, not in the user part."""
    return f"{url}{'&' if '?' in url else '?'}password={password}"


def test_a_password_given_as_a_query_parameter_is_masked_like_one_in_the_user_part(
    pg_admin_url: str | None, tmp_path: Path
) -> None:
    if pg_admin_url is None:
        pytest.skip("needs THUMBCTL_TEST_PG")
    url = with_query_password(pg_admin_url, SECRET)
    shown = masked(url)
    assert shown == with_query_password(pg_admin_url, "***")
    thumbctl = Thumbctl(url, cli_env(tmp_path))
    assert thumbctl("config").doc["settings"]["db"] == {"value": shown, "source": "flag"}
    assert shown in thumbctl("config", as_json=False).stdout
    refused = Thumbctl(
        with_query_password(with_database(pg_admin_url, "no_such_database_x"), SECRET), cli_env(tmp_path)
    )
    run = refused("status")
    assert run.code == 2 and run.doc["error"]["code"] == "ledger_login_refused"
    assert "no_such_database_x?" in run.stderr and "password=***" in run.stderr
    for done in thumbctl.runs + refused.runs:
        assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("name", ["PASSWORD", "Password", "SSLPassword"])
def test_a_secret_parameter_in_another_case_is_masked_too(name: str, pg_admin_url: str | None, tmp_path: Path) -> None:
    """libpq refuses ``?PASSWORD=``; the config listing and the error saying so showed it in clear."""
    if pg_admin_url is None:
        pytest.skip("needs THUMBCTL_TEST_PG")
    url = f"{pg_admin_url}{'&' if '?' in pg_admin_url else '?'}{name}={SECRET}"
    thumbctl = Thumbctl(url, cli_env(tmp_path))
    assert thumbctl("config").doc["settings"]["db"]["value"].endswith(f"{name}=***")
    thumbctl("config", as_json=False)
    assert thumbctl("status").code == 2
    for done in thumbctl.runs:
        assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "option",
    [
        "sslmode=bogus",
        "target_session_attrs=nowhere",
        "options=-c%20statement_timeout%3Dbogus",  # the server refuses it: it was ledger_unavailable, 75
        "options=-c%20no_such_setting_x%3D1",
    ],
)
def test_a_connection_option_libpq_refuses_is_a_configuration_error(
    option: str, pg_admin_url: str | None, tmp_path: Path
) -> None:
    """Exit 2, ``bad_ledger_url``: retrying the same URL (as cron would after a 75) can never succeed."""
    if pg_admin_url is None:
        pytest.skip("needs THUMBCTL_TEST_PG")
    url = with_query_password(f"{pg_admin_url}{'&' if '?' in pg_admin_url else '?'}{option}", SECRET)
    thumbctl = Thumbctl(url, cli_env(tmp_path))
    for args in (["status"], ["work", "--until-idle"]):
        run = thumbctl(*args)
        assert run.code == 2, run.stderr
        (line,) = run.stderr.splitlines()
        assert line.startswith(f"error [bad_ledger_url] --db {masked(url)}: a connection option is refused ("), line
        assert option.split("=")[0] in line and SECRET not in run.stdout + run.stderr
    assert thumbctl.runs[0].doc["error"] == {
        "code": "bad_ledger_url",
        "message": thumbctl.runs[0].stderr.splitlines()[0][len("error [bad_ledger_url] ") :],
        "transient": False,
        "exit_code": 2,
    }
