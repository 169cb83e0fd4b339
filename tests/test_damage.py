"""A damaged row (a stored value cut short or garbled while the ledger file is sound) is a coded
error with a way out, never a traceback, on either backend.

Each stored JSON or text value of each table is damaged by hand beside the ledger's API; the
commands run in this process through Typer's test runner (``Thumbctl.invoke``). Listings show
the other rows and mark the damaged one (a warning on stderr), a command that needs the value
exits 74 ``ledger_corrupt`` naming table, row and column, ``reconcile`` reports ``damaged_row``
and ``--repair`` fails a damaged item ``ledger_corrupt`` so ``retry`` renders it again.
``bench/damage.py`` runs every command against every damaged column as real processes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from thumbctl import Ledger

from harness import Thumbctl
from inprocess import render_here, submit_here
from support import raw_rows, raw_write

#: The stored JSON documents, ratios and locations thumbctl parses (thumbctl.ledger.damage.PARSED_COLUMNS).
PARSED_COLUMNS = (
    ("batches", "profile"),
    ("batches", "limits"),
    ("batches", "out_dir"),
    ("items", "result"),
    ("items", "ratio"),
    ("items", "object_path"),
)
#: Columns that name a file or folder by absolute path: a garbled one is a path elsewhere, which
#: the commands report as such; they are not swept here.
PATH_COLUMNS = {("batches", "source_root"), ("batches", "manifest_path"),
                ("items", "friendly_path"), ("items", "source"),
                ("names", "friendly_path"), ("names", "out_dir"), ("names", "object_path"),
                ("names", "source_root"), ("names", "source"), ("meta", "value"), ("stat_cache", "path"),
                ("object_checks", "object_path")}  # fmt: skip
#: Keys: a garbled one is another key (``batch_not_found``, exit 2), which is not damage anyone could see.
KEY_COLUMNS = {("batches", "batch_id"), ("batches", "idempotency_key"), ("items", "batch_id"), ("items", "item_id"),
               ("events", "batch_id"), ("names", "batch_id"), ("meta", "name"), ("focus_points", "batch_id"),
               ("focus_points", "source_digest")}  # fmt: skip
#: The commands a user runs on a ledger: ``{b}`` is the batch, ``{sheet}`` a page to write.
COMMANDS = (
    ("status", "{b}", "--items", "--json"),
    ("status", "{b}", "--items"),
    ("status", "{b}", "--json"),
    ("status", "--json"),
    ("status", "{b}", "--html"),
    ("events", "{b}", "--json"),
    ("stats", "--json"),
    ("reconcile", "--json"),
    ("reconcile", "--repair", "--json"),
    ("sheet", "{b}", "-o", "{sheet}"),
    ("cancel", "{b}", "--json"),
    ("retry", "{b}", "--detach", "--json"),
)


def text_columns(db: Path) -> list[tuple[str, str]]:
    """Every TEXT column of every table of the ledger, but keys and paths."""
    with sqlite3.connect(db) as raw:
        tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        found = [
            (table, column[1])
            for table in tables
            if not table.startswith("sqlite_")
            for column in raw.execute(f"PRAGMA table_info({table})")
            if column[2].upper() == "TEXT"
        ]
    return [c for c in found if c not in PATH_COLUMNS and c not in KEY_COLUMNS]


def truncated(value: str, at: float) -> str:
    return value[: int(len(value) * at)]


def garbled(value: str, at: float, junk: str) -> str:
    cut = int(len(value) * at)
    return value[:cut] + junk + value[cut + 1 :]


DAMAGES: dict[str, Callable[[str, float, str], str]] = {
    "truncate": lambda value, at, junk: truncated(value, at),
    "garble": garbled,
    "other JSON": lambda value, at, junk: json.dumps([junk]),
}


def damage(ledger: Ledger, table: str, column: str, how: str, at: float, junk: str) -> tuple[str, str] | None:
    """Damage ``column`` of one row of ``table`` that holds a value; (row key, new value), or None
    when no row holds one. The events' append-only trigger is lifted for the write (SQLite)."""
    key = "seq" if table == "events" else "rowid" if ledger.backend == "sqlite" else _pg_key(table)
    rows = raw_rows(ledger, f"SELECT {key}, {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY 1")
    if not rows:
        return None
    row, value = rows[len(rows) // 2]
    new = DAMAGES[how](str(value), at, junk)
    if table == "events":
        _rewrite_event(ledger, column, new, row)
    else:
        raw_write(ledger, f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (new, row))
    return str(row), new


def _pg_key(table: str) -> str:
    return {"batches": "batch_id", "items": "id", "names": "friendly_path", "meta": "name"}.get(table, "ctid")


def _rewrite_event(ledger: Ledger, column: str, new: str, seq: object) -> None:
    if ledger.backend == "sqlite":
        with contextlib.closing(sqlite3.connect(ledger.path, isolation_level=None)) as raw:
            trigger = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'events_append_only'").fetchone()[0]
            raw.execute("BEGIN")
            raw.execute("DROP TRIGGER events_append_only")
            try:
                raw.execute(f"UPDATE events SET {column} = ? WHERE seq = ?", (new, seq))
            finally:
                raw.execute(trigger)
                raw.execute("COMMIT")
    else:
        raw_write(ledger, "ALTER TABLE events DISABLE TRIGGER USER")
        try:
            raw_write(ledger, f"UPDATE events SET {column} = ? WHERE seq = ?", (new, seq))
        finally:
            raw_write(ledger, "ALTER TABLE events ENABLE TRIGGER USER")


def run(thumbctl: Thumbctl, command: tuple[str, ...], batch_id: str, sheet: Path) -> tuple[int, str, str]:
    args = [part.format(b=batch_id, sheet=sheet) for part in command]
    done = thumbctl.invoke(*args)
    stderr = without_exit(done.stderr)
    assert "Traceback" not in stderr, (args, stderr)
    return done.returncode, done.stdout, stderr


def without_exit(stderr: str) -> str:
    """``stderr`` less the test runner's own trace of the command's ``SystemExit`` (its exit code)."""
    lines = stderr.rstrip().splitlines()
    if lines and lines[-1].startswith("SystemExit:"):
        return stderr.partition("Traceback (most recent call last):")[0]
    return stderr


@pytest.fixture(scope="module")
def submitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A SQLite ledger with one finished batch (photos of three formats, two ratios, a focus
    point set), made once (rendered in this process, tests/inprocess); each example works on a
    copy of its file."""
    root = tmp_path_factory.mktemp("damage")
    photos = root / "photos"
    photos.mkdir()
    for name in ("living.jpg", "coffee.png"):
        shutil.copy(_sample(name), photos / name)
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"x" * 64)
    thumbctl = Thumbctl(root / "ledger.db", store=root / "store")
    done = submit_here(thumbctl, photos, "--out", root / "out", "--ratio", "1:1", "--ratio", "4:3", states=("partial",))
    return root / "ledger.db", done["batch_id"]  # partial: broken.jpg fails


def _sample(name: str) -> Path:
    from conftest import SAMPLE_IMAGES

    return {"living.jpg": SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg"}.get(
        name, SAMPLE_IMAGES / "public-domain" / "sk-coffee.png"
    )


def ledger_copy(db: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / "ledger.db"
    for leftover in (copy, folder / "ledger.db-wal", folder / "ledger.db-shm"):
        leftover.unlink(missing_ok=True)
    shutil.copy(db, copy)
    return copy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_value_never_ends_in_a_traceback(
    submitted: tuple[Path, str], tmp_path: Path, data: st.DataObject
) -> None:
    db, batch_id = submitted
    copy = ledger_copy(db, tmp_path / "copy")
    table, column = data.draw(st.sampled_from(text_columns(copy)), label="column")
    how = data.draw(st.sampled_from(sorted(DAMAGES)), label="damage")
    at = data.draw(st.floats(0.0, 0.99), label="where")
    junk = data.draw(st.sampled_from(['"', "}", "{", "\\", "\ufffd", "\u00e9", ":", " "]), label="junk")
    command = data.draw(st.sampled_from(COMMANDS), label="command")
    with Ledger(copy) as ledger:
        try:
            damaged = damage(ledger, table, column, how, at, junk)
        except sqlite3.IntegrityError:
            reject()  # the schema refuses that value (a CHECK, NOT NULL or UNIQUE constraint)
    thumbctl = Thumbctl(copy, store=db.parent / "store")
    code, stdout, stderr = run(thumbctl, command, batch_id, tmp_path / "sheet.html")
    assert code in (0, 1, 2, 74), (command, code, stderr)
    if "--json" in command and stdout:
        json.loads(stdout)
    if damaged is not None and (table, column) in PARSED_COLUMNS and code == 74:
        assert f"the ledger's {table} row" in stderr and f"damaged {column}" in stderr, stderr


@pytest.mark.parametrize("column", [f"{table}.{column}" for table, column in PARSED_COLUMNS])
def test_reconcile_reports_each_damaged_column_on_postgresql(column: str, pg_url: str, photos: Path, tmp_path: Path):
    """On a PostgreSQL ledger: every command runs, and reconcile reports the damaged row (a JSON
    document cut short; a ratio or location replaced by other JSON: half a path is still a path)."""
    table, name = column.split(".")
    thumbctl = Thumbctl(pg_url, store=tmp_path / "store")
    batch_id = submit_here(thumbctl, photos, "--out", tmp_path / "out", "--ratio", "1:1")["batch_id"]
    with Ledger(pg_url) as ledger:
        how = "truncate" if name in ("profile", "limits", "result") else "other JSON"
        assert damage(ledger, table, name, how, 0.5, "") is not None
    findings = json.loads(run(thumbctl, ("reconcile", "--json"), batch_id, tmp_path / "s.html")[1])["findings"]
    assert [(f["kind"], f["batch_id"]) for f in findings] == [("damaged_row", batch_id)]
    assert f"has a damaged {name}" in findings[0]["detail"]
    for command in COMMANDS:
        code, _, _ = run(thumbctl, command, batch_id, tmp_path / "sheet.html")
        assert code in (0, 1, 74), command


def test_a_listing_shows_the_other_items_and_marks_the_damaged_one(ledger_url: str, photos: Path, tmp_path: Path):
    thumbctl = Thumbctl(ledger_url, store=tmp_path / "store")
    batch = submit_here(thumbctl, photos, "--out", tmp_path / "out", "--ratio", "1:1")
    with Ledger(ledger_url) as ledger:
        row, _ = raw_rows(ledger, "SELECT id, result FROM items ORDER BY id")[1]
        raw_write(ledger, "UPDATE items SET result = substr(result, 1, 40) WHERE id = ?", (row,))
    code, stdout, stderr = run(thumbctl, ("status", "{b}", "--items", "--json"), batch["batch_id"], tmp_path)
    assert code == 0
    items = json.loads(stdout)["items"]
    assert len(items) == 4 and [i["state"] for i in items] == ["succeeded"] * 4
    marked = [i for i in items if "damaged" in i]
    assert [m["damaged"]["table"] for m in marked] == ["items"] and marked[0]["damaged"]["column"] == "result"
    assert marked[0]["damaged"]["row"] == str(row)
    assert f"warning: the ledger's items row {row} has a damaged result" in stderr
    assert all(i["result"] for i in items if "damaged" not in i)
    human = run(thumbctl, ("status", "{b}", "--items"), batch["batch_id"], tmp_path)
    assert human[0] == 0 and human[1].count("damaged") == 2  # the error column and the note
    assert run(thumbctl, ("status", "{b}"), batch["batch_id"], tmp_path)[0] == 0
    code, _, stderr = run(thumbctl, ("stats", "--json", "--window", "1d"), batch["batch_id"], tmp_path)
    assert code == 0 and f"warning: the ledger's items row {row} has a damaged result" in stderr
    code, stdout, stderr = run(
        thumbctl, ("sheet", "{b}", "-o", "{sheet}", "--json"), batch["batch_id"], tmp_path / "s.html"
    )
    assert code == 0 and f"warning: the ledger's items row {row} has a damaged result" in stderr
    assert [d["row"] for d in json.loads(stdout)["damaged"]] == [str(row)]
    page = (tmp_path / "s.html").read_text()
    assert f"the ledger&#x27;s items row {row} has a damaged result" in page and page.count("ledger_corrupt") == 1


def test_repair_fails_the_damaged_item_and_retry_renders_it_again(ledger_url: str, photos: Path, tmp_path: Path):
    thumbctl = Thumbctl(ledger_url, store=tmp_path / "store")
    batch_id = submit_here(thumbctl, photos, "--out", tmp_path / "out", "--ratio", "1:1")["batch_id"]
    with Ledger(ledger_url) as ledger:
        row, item_id = raw_rows(ledger, "SELECT id, item_id FROM items ORDER BY id")[2]
        raw_write(ledger, "UPDATE items SET result = substr(result, 1, 40) WHERE id = ?", (row,))
    found = json.loads(run(thumbctl, ("reconcile", "--json"), batch_id, tmp_path)[1])["findings"]
    assert [(f["kind"], f["item_id"], f["repaired"]) for f in found] == [("damaged_row", item_id, False)]
    code, stdout, _ = run(thumbctl, ("reconcile", "--repair", "--json"), batch_id, tmp_path)
    assert code == 0 and [f["repaired"] for f in json.loads(stdout)["findings"]] == [True]
    with Ledger(ledger_url) as ledger:
        item = next(i for i in ledger.views.items(batch_id) if i.item_id == item_id)
        assert (item.state, item.error_code, item.result) == ("failed", "ledger_corrupt", None)
        last = ledger.views.events(batch_id, item_id=item_id)[-1]
        assert (last.to_state, last.error_code) == ("failed", "ledger_corrupt")
        assert f"items row {row} has a damaged result" in (last.detail or "")
    assert json.loads(run(thumbctl, ("reconcile", "--json"), batch_id, tmp_path)[1])["findings"] == []
    retried = thumbctl.invoke("retry", batch_id, "--detach", "--json")
    assert retried.returncode == 0, retried.stderr
    render_here(ledger_url, batch_id)  # what the foreground retry renders
    with Ledger(ledger_url) as ledger:
        assert ledger.views.batch(batch_id).state == "succeeded"  # the foreground retry's exit 0
        item = next(i for i in ledger.views.items(batch_id) if i.item_id == item_id)
        assert item.state == "succeeded" and item.result and item.result["width"]


def test_a_run_that_needs_a_damaged_batch_document_exits_74_naming_it(ledger_url: str, photos: Path, tmp_path: Path):
    thumbctl = Thumbctl(ledger_url, store=tmp_path / "store")
    batch_id = submit_here(thumbctl, photos, "--out", tmp_path / "out", "--ratio", "1:1")["batch_id"]
    with Ledger(ledger_url) as ledger:
        raw_write(ledger, "UPDATE batches SET profile = substr(profile, 1, 30)")
        raw_write(ledger, "UPDATE items SET state = 'failed', error_code = 'worker_crashed' WHERE id = 1")
    done = thumbctl.run("retry", batch_id, "--json", "-w", "1")
    assert done.returncode == 74, done.stderr
    assert "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "ledger_corrupt"
    assert error["damaged_row"] == {"table": "batches", "row": batch_id, "column": "profile"}
    assert f"the ledger's batches row {batch_id} has a damaged profile" in done.stderr


@pytest.mark.parametrize(
    ("table", "column"),
    [("items", "result"), ("items", "error_detail"), ("items", "source"), ("batches", "profile"), ("events", "detail")],
)
def test_bytes_stored_in_a_text_column_are_ledger_corrupt_never_a_traceback(
    submitted: tuple[Path, str], tmp_path: Path, table: str, column: str
) -> None:
    """SQLite keeps a value's storage class: ``SET error_detail = x'c3'`` leaves a BLOB where text is
    read (it gave tracebacks from status, sheet, cancel and retry)."""
    db, batch_id = submitted
    copy = ledger_copy(db, tmp_path / "copy")
    with sqlite3.connect(copy, isolation_level=None) as raw:
        raw.execute("DROP TRIGGER events_append_only")
        last = f"(SELECT max(rowid) FROM {table} WHERE batch_id = ? AND {column} IS NOT NULL)"
        raw.execute(f"UPDATE {table} SET {column} = x'c3ff' WHERE rowid = {last}", (batch_id,))
    thumbctl = Thumbctl(copy, store=db.parent / "store")
    for command in COMMANDS:
        code, _, stderr = run(thumbctl, command, batch_id, tmp_path / "sheet.html")
        assert code in (0, 1, 74), (command, code, stderr)
        if code == 74:
            text = " ".join(stderr.split())
            assert "[ledger_corrupt]" in text and "holds bytes (a BLOB), not text" in text, (command, stderr)


@pytest.mark.parametrize("at", ["later", "2999-01-01T00:00:0", "2999-13-45T99:99:99.999999Z"])
def test_a_damaged_event_time_never_ends_work_in_a_traceback(submitted: tuple[Path, str], tmp_path: Path, at: str):
    """``work`` counts the completions of its window from the event log's times: one that sorts into
    the window but does not parse (``later``, a time cut short) ended it in a traceback."""
    db, batch_id = submitted
    copy = ledger_copy(db, tmp_path / "copy")
    with sqlite3.connect(copy, isolation_level=None) as raw:
        raw.execute("DROP TRIGGER events_append_only")
        raw.execute("UPDATE events SET at = '2000-01-01T00:00:00.000000Z'")  # the rest out of the window
        last = "(SELECT max(seq) FROM events WHERE to_state = 'succeeded')"
        raw.execute(f"UPDATE events SET at = ? WHERE seq = {last}", (at,))
    done = Thumbctl(copy, store=db.parent / "store").run("work", "--until-idle", "-w", "1")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("table", "column", "value", "detail"),
    [
        ("batches", "profile", None, "none is stored"),
        ("batches", "profile", "{}", "its 'upscale' is missing, not a bool"),
        ("batches", "profile", '{"upscale": "no", "crop": "smart", "background": "#fff"}', "is a str, not a bool"),
        ("items", "size", "big", "'big' is no whole number"),
        ("items", "source_width", "wide", "'wide' is no whole number"),
    ],
)
def test_a_value_of_the_wrong_shape_is_a_damaged_row_for_reconcile(
    submitted: tuple[Path, str], tmp_path: Path, table: str, column: str, value: str | None, detail: str
) -> None:
    """A profile that parses but lacks what a render needs, or a number that is text (SQLite keeps
    any type), ended reconcile in a traceback (exit 1, which cron reads as findings). It is a
    ``damaged_row`` finding that ``--repair`` leaves as it is: no guessed default re-renders
    anything, and every other command exits with a code."""
    db, batch_id = submitted
    copy = ledger_copy(db, tmp_path / "copy")
    key = "batch_id" if table == "batches" else "id"
    with sqlite3.connect(copy, isolation_level=None) as raw:
        where = "WHERE state = 'succeeded'" if table == "items" else ""
        row = raw.execute(f"SELECT max({key}) FROM {table} {where}").fetchone()[0]
        raw.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (value, row))
    thumbctl = Thumbctl(copy, store=db.parent / "store")
    for command in (("reconcile", "--json"), ("reconcile", "--repair", "--json")):
        code, stdout, _ = run(thumbctl, command, batch_id, tmp_path / "sheet.html")
        damaged = [f for f in json.loads(stdout)["findings"] if f["kind"] == "damaged_row"]
        assert code == 1 and len(damaged) == 1, (command, stdout)
        assert f"the ledger's {table} row {row} has a damaged {column}" in damaged[0]["detail"]
        assert detail in damaged[0]["detail"] and damaged[0]["repaired"] is False
    with sqlite3.connect(copy) as raw:
        assert raw.execute("SELECT count(*) FROM items WHERE state = 'queued'").fetchone()[0] == 0
    for command in COMMANDS:
        code, _, stderr = run(thumbctl, command, batch_id, tmp_path / "sheet.html")
        assert code in (0, 1, 74), (command, code, stderr)


@pytest.mark.parametrize(
    ("state", "column", "value"),
    [
        ("running", "lease_expires_at", "soon"),
        ("running", "lease_expires_at", "2999-13-45T99:99:99.999999Z"),
        ("queued", "not_before", "later"),
    ],
)
def test_a_damaged_time_is_a_finding_and_holds_no_item_for_ever(
    submitted: tuple[Path, str], tmp_path: Path, state: str, column: str, value: str
) -> None:
    """A lease expiry or retry time that does not parse sorts after every real time: its item stayed
    running (or waiting) for ever, ``work --until-idle`` never ended and reconcile found nothing. It
    is a ``damaged_row`` finding and counts as passed, so work takes the item up again."""
    db, batch_id = submitted
    copy = ledger_copy(db, tmp_path / "copy")
    with sqlite3.connect(copy, isolation_level=None) as raw:
        row = raw.execute("SELECT max(id) FROM items WHERE state = 'succeeded'").fetchone()[0]
        lease = "lease_owner = 'elsewhere:1', lease_token = 't'," if state == "running" else ""
        raw.execute(
            f"UPDATE items SET state = ?, {lease} {column} = ?, result = NULL WHERE id = ?", (state, value, row)
        )
    thumbctl = Thumbctl(copy, store=db.parent / "store")
    code, stdout, _ = run(thumbctl, ("reconcile", "--json"), batch_id, tmp_path / "sheet.html")
    damaged = [f for f in json.loads(stdout)["findings"] if f["kind"] == "damaged_row"]
    assert code == 1 and len(damaged) == 1, stdout
    assert f"the ledger's items row {row} has a damaged {column}" in damaged[0]["detail"]
    done = thumbctl.run("work", "--until-idle", "-w", "1", timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    with sqlite3.connect(copy) as raw:
        assert raw.execute("SELECT state, result IS NOT NULL FROM items WHERE id = ?", (row,)).fetchone() == (
            "succeeded",
            1,
        )
    code, stdout, _ = run(thumbctl, ("reconcile", "--json"), batch_id, tmp_path / "sheet.html")
    assert [f for f in json.loads(stdout)["findings"] if f["kind"] == "damaged_row"] == []


@pytest.mark.parametrize(
    ("update", "commands", "code", "said"),
    [
        (
            "UPDATE batches SET total = 'ten'",
            [("status", "{b}"), ("status", "{b}", "--json"), ("status", "--json")],
            74,
            "batches row {b} has a damaged total ('ten' is no whole number)",
        ),
        (
            "UPDATE batches SET cancel_requested_at = 'now'",
            [("stats", "--json"), ("stats", "--prometheus", "{sheet}")],
            0,
            "",
        ),
        (
            "UPDATE focus_points SET focus_y = 'x'",
            [("focus", "{photo}"), ("focus", "{photo}", "--json")],
            74,
            "has a damaged focus_y ('x' is no number)",
        ),
    ],
    ids=["total", "cancel_requested_at", "focus_y"],
)
def test_a_value_of_the_wrong_type_is_a_coded_error_never_a_traceback(
    submitted: tuple[Path, str], tmp_path: Path, update: str, commands: list[tuple[str, ...]], code: int, said: str
) -> None:
    """SQLite keeps a value of any type in any column: a total, a cancel time or a crop fix's
    coordinate that is text gave TypeError and ValueError tracebacks from status, stats and focus.
    A command that needs the value exits 74 naming it; a figure does without it."""
    db, batch_id = submitted
    copy = ledger_copy(db, tmp_path / "copy")
    thumbctl = Thumbctl(copy, store=db.parent / "store")
    photo = _sample("living.jpg")
    assert thumbctl.invoke("focus", photo, "--ratio", "1:1", "--at", "0.5,0.5").returncode == 0
    with sqlite3.connect(copy, isolation_level=None) as raw:
        raw.execute(update)
    for command in commands:
        args = tuple(part.replace("{photo}", str(photo)) for part in command)
        found, _, stderr = run(thumbctl, args, batch_id, tmp_path / "metrics.prom")
        assert found == code, (command, stderr)
        assert "[ledger_corrupt]" in stderr if code == 74 else True
        assert said.format(b=batch_id) in " ".join(stderr.split()), stderr
    if "focus_y" in update:
        cleared = thumbctl.invoke("focus", photo, "--ratio", "1:1", "--clear")
        assert cleared.returncode == 0, cleared.stderr
        assert thumbctl.invoke("focus", photo).returncode == 0
