from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

import thumbctl
from thumbctl import Ledger, Limits
from thumbctl.cli import app, main
from thumbctl.core.display import score_text

from conftest import SAMPLE_IMAGES
from harness import Thumbctl
from inprocess import render_here, submit_here
from support import (
    CENTRED_WINDOWS,
    PHOTO_SIZES,
    is_copy_of,
    make_image,
    objects_in,
    request,
    tree_snapshot,
    window_size,
)

SAMPLE_ONE = SAMPLE_IMAGES / "public-domain"

BATCH_FIELDS = {
    "batch_id",
    "state",
    "replayed",
    "idempotency_key",
    "request_digest",
    "total",
    "counts",
    "created_at",
    "updated_at",
    "cancel_requested_at",
    "finished_at",
    "out_dir",
    "manifest_path",
    "failures",
}
ITEM_FIELDS = {
    "item_id",
    "source",
    "ratio",
    "size",
    "format",
    "state",
    "attempt",
    "error_code",
    "derivative_key",
    "object_path",
    "friendly_path",
    "updated_at",
}
EVENT_FIELDS = {
    "at",
    "batch_id",
    "item_id",
    "size",
    "format",
    "ratio",
    "from_state",
    "to_state",
    "attempt",
    "worker",
    "error_code",
    "seq",
    "dedup",
}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run thumbctl in-process against a ledger in tmp_path; returns the click Result."""
    monkeypatch.setenv("THUMBCTL_DB", str(tmp_path / "ledger.db"))
    monkeypatch.delenv("THUMBCTL_OUT", raising=False)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def work_here(batch_id: str) -> None:
    """What ``thumbctl work --until-idle`` renders of a detached batch, rendered in this process
    (tests/inprocess) on the ledger of THUMBCTL_DB."""
    render_here(os.environ["THUMBCTL_DB"], batch_id)


def render_doc(*args: object, states: tuple[str, ...] = ("succeeded",)) -> dict:
    """The finished document of a ``submit ARGS``, the batch recorded and rendered in this process
    (tests/inprocess) on the ledger of THUMBCTL_DB; ``succeeded``: the foreground run's exit 0,
    ``partial`` or ``failed``: its exit 1."""
    return submit_here(Thumbctl(os.environ["THUMBCTL_DB"]), *args, states=states)


#: The states of a batch whose foreground run exits 1 (``--max-failures`` 0): some or all of it failed.
EXIT_1 = ("partial", "failed")


def submit_json(cli, photos: Path, out: Path, *extra: str) -> tuple[int, dict | None, str]:
    result = cli("submit", photos, "--out", out, "--detach", "--json", *extra)
    doc = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, doc, result.stderr


def test_submit_json_prints_the_batch_object(cli, photos: Path, out_dir: Path) -> None:
    code, doc, _ = submit_json(cli, photos, out_dir)
    assert code == 0
    assert BATCH_FIELDS <= set(doc)
    assert (doc["total"], doc["state"], doc["replayed"]) == (12, "queued", False)
    assert doc["counts"] == {"queued": 12, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
    assert doc["out_dir"] == str(out_dir) and doc["manifest_path"] == f"{out_dir}/batches/{doc['batch_id']}.json"
    assert doc["created_at"].endswith("Z") and doc["finished_at"] is None


def test_replay_and_conflict_exit_codes(cli, photos: Path, out_dir: Path) -> None:
    _, first, _ = submit_json(cli, photos, out_dir, "--key", "K")
    code, again, _ = submit_json(cli, photos, out_dir, "--key", "K")
    assert code == 0 and again["replayed"] is True and again["batch_id"] == first["batch_id"]
    code, doc, err = submit_json(cli, photos, out_dir, "--key", "K", "--size", "300")
    assert code == 3 and doc["error"]["code"] == "idempotency_conflict" and doc["error"]["exit_code"] == 3
    assert "idempotency_conflict" in err and first["batch_id"] in err
    listing = json.loads(cli("status", "--json").stdout)
    assert [b["batch_id"] for b in listing["batches"]] == [first["batch_id"]]


def test_failed_sources_are_listed_with_their_codes(cli, photos: Path, out_dir: Path) -> None:
    (photos / "notes.jpg").write_text("text, not a photo")
    code, doc, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    assert code == 0
    assert doc["total"] == 5 and doc["counts"]["failed"] == 1
    assert doc["failures"] == [
        {
            "item_id": "notes.jpg",
            "ratio": "1:1",
            "size": 512,
            "format": "jpeg",
            "error_code": "unsupported_format",
            "detail": "not an image of a supported format",
        }
    ]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--ratio", "4:x"], 2, "bad ratio"),
        (["--format", "tga"], 2, "unknown format"),
        (["--deadline", "soon"], 2, "bad duration"),
        (["--max-pixels", "lots"], 2, "bad count"),
        (["--max-items", "5"], 65, "too_many_items"),
        (["--max-runnable", "5"], 65, "adds 12 runnable items, over the limit of 5 (--max-runnable)"),
    ],
)
def test_submit_error_exit_codes(cli, photos: Path, out_dir: Path, args: list[str], code: int, message: str) -> None:
    exit_code, doc, err = submit_json(cli, photos, out_dir, *args)
    assert exit_code == code and doc is not None and doc["error"]["exit_code"] == code  # --json: an error document
    assert message in err


def test_submit_rejects_a_malformed_manifest_with_65(cli, photos: Path, out_dir: Path) -> None:
    (photos / "m.jsonl").write_text('{"source": "coffee.png"}\n{"source": oops}\n')
    code, doc, err = submit_json(cli, photos / "m.jsonl", out_dir)
    assert code == 65 and doc["error"]["code"] == "malformed_manifest"
    assert "malformed_manifest" in err and "line 2" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 5000 + "]" * 5000, "the JSON is nested more than 8 levels deep (a manifest needs 4 at most)"),
        (
            '[{"source": "coffee.png\\u0000.jpg", "id": "coffee"}]',
            "item 1: \"source\" contains a NUL character, which no path can hold: 'coffee.png\\x00.jpg'",
        ),
    ],
    ids=["nested", "nul"],
)
def test_a_deeply_nested_manifest_or_a_nul_in_a_source_is_rejected_with_65(
    cli, photos: Path, out_dir: Path, content: str, message: str
) -> None:
    (photos / "m.json").write_text(content)
    code, doc, err = submit_json(cli, photos / "m.json", out_dir)
    assert code == 65
    assert doc == {
        "error": {
            "code": "malformed_manifest",
            "message": f"malformed manifest m.json: {message}",
            "transient": False,
            "exit_code": 65,
        }
    }
    assert err.strip().splitlines() == [f"error [malformed_manifest] malformed manifest m.json: {message}"]
    assert json.loads(cli("status", "--json").stdout) == {"batches": []}


def test_json_carries_the_true_source_of_a_name_with_a_newline(cli, tmp_path: Path, out_dir: Path) -> None:
    """``new<LF>line.jpg`` and a file really named ``new%0Aline.jpg``: their sources differ and are exact."""
    src = tmp_path / "src"
    make_image(src / "new\nline.jpg", (16, 16), "JPEG")
    make_image(src / "new%0Aline.jpg", (16, 16), "JPEG", seed=1)
    code, batch, _ = submit_json(cli, src, out_dir, "-r", "1:1")
    assert code == 0
    items = json.loads(cli("status", batch["batch_id"], "--items", "--json").stdout)["items"]
    by_id = {i["item_id"]: (i["source"], i["state"], i["error_code"]) for i in items}
    assert by_id == {
        ".unsafe/new%0Aline.jpg": (f"{src}/new\nline.jpg", "failed", "unsafe_name"),
        "new%0Aline.jpg": (f"{src}/new%0Aline.jpg", "queued", None),
    }


def test_submit_usage_errors(cli, photos: Path, out_dir: Path, tmp_path: Path) -> None:
    assert cli("submit", tmp_path / "missing", "--out", out_dir, "--detach").exit_code == 2
    (tmp_path / "list.txt").write_text("a.jpg")
    assert cli("submit", tmp_path / "list.txt", "--out", out_dir, "--detach").exit_code == 2
    assert cli("submit", photos, "--out", photos, "--detach").exit_code == 2


def test_status_items_events_and_cancel_json(cli, photos: Path, out_dir: Path) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir)
    batch_id = batch["batch_id"]

    status = cli("status", batch_id[:10], "--json")
    assert status.exit_code == 0 and json.loads(status.stdout)["batch_id"] == batch_id

    items = json.loads(cli("status", batch_id, "--items", "--json").stdout)
    assert items["batch_id"] == batch_id and len(items["items"]) == 12
    assert all(ITEM_FIELDS <= set(i) for i in items["items"])

    cancel = cli("cancel", batch_id, "--json")
    assert cancel.exit_code == 0
    cancelled = json.loads(cancel.stdout)
    assert cancelled["state"] == "cancelled" and cancelled["counts"]["cancelled"] == 12

    events = json.loads(cli("events", batch_id, "--json").stdout)["events"]
    assert all(EVENT_FIELDS <= set(e) for e in events)
    batch_events = [e for e in events if e["item_id"] is None]
    assert [e["to_state"] for e in batch_events] == ["cancel_requested"]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)

    only = json.loads(cli("status", batch_id, "--items", "--state", "cancelled", "--json").stdout)
    assert len(only["items"]) == 12
    item_events = json.loads(cli("events", batch_id, "--item", "coffee.png", "--json").stdout)["events"]
    assert {e["item_id"] for e in item_events} == {"coffee.png"}

    listing = json.loads(cli("status", "--json").stdout)
    assert "failures" not in listing["batches"][0]


def test_status_of_an_unknown_batch_is_a_usage_error(cli, tmp_path: Path) -> None:
    missing = cli("status", "b_doesnotexist", "--json")
    assert missing.exit_code == 2 and "no_ledger" in missing.stderr and not (tmp_path / "ledger.db").exists()
    Ledger(tmp_path / "ledger.db").close()
    result = cli("status", "b_doesnotexist", "--json")
    assert result.exit_code == 2 and "batch_not_found" in result.stderr
    assert json.loads(result.stdout) == {
        "error": {
            "code": "batch_not_found",
            "message": f"no batch 'b_doesnotexist' in {tmp_path / 'ledger.db'}",
            "transient": False,
            "exit_code": 2,
        }
    }


def test_results_go_to_stdout_and_the_notice_before_a_run_to_stderr(cli, photos: Path, out_dir: Path) -> None:
    """A detached submit's summary is its result; before a foreground run it is a notice, and
    the run's own summary is the result (DESIGN section 2)."""
    result = cli("submit", photos, "--out", out_dir, "--detach")
    assert result.exit_code == 0 and result.stderr.startswith("created ledger ")
    assert len(result.stderr.splitlines()) == 1
    assert "Accepted batch" in result.stdout
    batch_id = json.loads(cli("status", "--json").stdout)["batches"][0]["batch_id"]
    db = os.environ["THUMBCTL_DB"]  # not the default ledger: the command names it
    assert result.stdout.splitlines()[-1] == f"  render it with: thumbctl work {batch_id} --until-idle --db {db}"
    assert "Replayed existing batch" in cli("submit", photos, "--out", out_dir, "--detach").stdout
    listed = cli("status")
    assert listed.stderr == "" and "queued 0/12" in " ".join(listed.stdout.split())
    run = cli("submit", photos, "--out", out_dir, "-w", "1", "--stats-interval", "60")
    assert run.exit_code == 0
    assert "Replayed existing batch" in run.stderr and "Replayed existing batch" not in run.stdout
    assert run.stdout.splitlines()[0].endswith(" succeeded") and "thumbnails in " in run.stdout


def test_empty_ledger_status(cli) -> None:
    result = cli("status", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == {"batches": []}


@pytest.mark.parametrize("command", ["submit", "work", "status", "events", "cancel", "retry", "codes"])
def test_every_command_has_help(cli, command: str) -> None:
    result = cli(command, "--help")
    assert result.exit_code == 0
    assert "Usage" in result.stdout


def test_top_level_help_lists_exit_codes(cli) -> None:
    text = cli("--help").stdout
    for code in ("0", "1", "2", "3", "4", "65", "75", "130"):
        assert f" {code} " in text.replace("\n", " ")


def test_codes_json_lists_every_item_code(cli) -> None:
    doc = json.loads(cli("codes", "--json").stdout)
    assert {"unsupported_format", "corrupt_image", "too_many_pixels", "path_outside_root"} <= set(
        doc["item_error_codes"]
    )
    assert doc["exit_codes"]["75"].startswith("temporarily unavailable")


def test_ctrl_c_during_retry_admission_exits_130_and_records_nothing(
    photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    harness = Thumbctl(tmp_path / "ledger.db")
    base = ["submit", photos, "--out", out_dir, "--detach"]
    assert harness.invoke(*base).returncode == 0
    proc = subprocess.Popen(  # the Ctrl-C goes to a real process
        harness.command(*base, "--size", "200", "--max-runnable", "12", "--retry-admission", "--json"),
        env=harness.environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first_line = proc.stderr.readline()  # printed when the first refusal is about to be retried
    assert "admission_refused" in first_line
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130 and json.loads(out)["error"]["code"] == "interrupted"
    assert "nothing was recorded" in err and "Traceback" not in err
    assert len(harness.json("status")["batches"]) == 1


def test_cancel_wait_returns_once_the_batch_is_terminal(cli, photos: Path, out_dir: Path) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir)
    result = cli("cancel", batch["batch_id"], "--wait", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["state"] == "cancelled"


def test_foreground_submit_renders_and_exits_by_outcome(cli, photos: Path, out_dir: Path) -> None:
    (photos / "notes.jpg").write_text("text")
    result = cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--json")
    assert result.exit_code == 1  # partial: one source is not an image
    doc = json.loads(result.stdout)
    assert doc["state"] == "partial" and doc["counts"]["succeeded"] == 4
    manifest = json.loads(Path(doc["manifest_path"]).read_text())
    assert {i["item_id"] for i in manifest["items"] if i["state"] == "succeeded"} == {
        "coffee.png",
        "garden.jpeg",
        "rooms/kitchen.webp",
        "rooms/living.jpg",
    }
    assert manifest["paths"] == "out" and not Path(manifest["source_root"]).is_absolute()  # no local path in OUT
    succeeded = [i for i in manifest["items"] if i["state"] == "succeeded"]
    assert all((Path(doc["out_dir"]) / i["friendly_path"]).exists() for i in succeeded)
    again = cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--json")
    assert again.exit_code == 1 and json.loads(again.stdout)["replayed"] is True


def test_retry_requeues_failed_renders_only_and_renders_them(cli, photos: Path, out_dir: Path) -> None:
    original = (photos / "garden.jpeg").read_bytes()
    (photos / "notes.jpg").write_text("not a photo")  # refused at submit: retry leaves it failed
    _, batch, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    batch_id = batch["batch_id"]
    (photos / "garden.jpeg").write_bytes(original[:-10] + b"0123456789")  # changed after submit
    work_here(batch_id)
    failed = json.loads(cli("status", batch_id, "--json").stdout)["failures"]
    assert {(f["item_id"], f["error_code"]) for f in failed} == {
        ("garden.jpeg", "source_changed"),
        ("notes.jpg", "unsupported_format"),
    }
    (photos / "garden.jpeg").write_bytes(original)
    result = cli("retry", batch_id, "-w", "1", "--detach", "--json")
    assert result.exit_code == 0, result.stderr
    work_here(batch_id)
    doc = json.loads(cli("status", batch_id, "--json").stdout)
    assert doc["state"] in EXIT_1  # partial: the refused source stays failed
    assert doc["counts"] == {"queued": 0, "running": 0, "succeeded": 4, "failed": 1, "cancelled": 0}
    events = json.loads(cli("events", batch_id, "--json").stdout)["events"]
    retried = [e for e in events if e["from_state"] == "failed" and e["to_state"] == "queued"]
    assert [(e["item_id"], e["detail"]) for e in retried] == [("garden.jpeg", "retry requested")]
    claims = [e["item_id"] for e in events if e["to_state"] == "running"]
    assert claims.count("garden.jpeg") == 2 and claims.count("coffee.png") == 1  # completed work not redone


def test_retry_of_a_cancelled_batch_resumes_it(cli, photos: Path, out_dir: Path) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir)
    cli("cancel", batch["batch_id"])
    result = cli("retry", batch["batch_id"], "--detach", "--json")
    assert result.exit_code == 0, result.stderr
    resumed = json.loads(result.stdout)
    assert resumed["resumed_from"] == batch["batch_id"] and resumed["counts"]["queued"] == batch["total"]
    assert f"resuming cancelled batch {batch['batch_id']} as {resumed['batch_id']}" in result.stderr


def test_status_watch_follows_a_batch_until_it_is_terminal(cli, photos: Path, out_dir: Path) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir)
    cli("cancel", batch["batch_id"])
    result = cli("status", batch["batch_id"], "--watch", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["state"] == "cancelled"


def registered_commands() -> list[str]:
    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_every_command_has_help_text_and_a_place_in_the_readme(cli) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for name in registered_commands():
        command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
        assert command.help and len(command.help.strip()) > 20, name
        assert f"thumbctl {name}" in readme, f"README does not document `thumbctl {name}`"


def test_quiet_prints_nothing_but_errors(cli, photos: Path, out_dir: Path) -> None:
    result = cli("submit", photos, "--out", out_dir, "-q")
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    bad = cli("status", "b_nope", "-q")
    assert bad.exit_code == 2 and bad.stderr.startswith("error [batch_not_found]")


def test_verbose_lists_every_failure(cli, photos: Path, out_dir: Path) -> None:
    (photos / "notes.jpg").write_text("not a photo")
    result = cli("submit", photos, "--out", out_dir, "-v", "--stats-interval", "60")
    assert result.exit_code == 1
    for ratio in ("1:1", "4:3", "16:9"):
        assert f"unsupported_format notes.jpg {ratio}: not an image of a supported format" in result.stdout
    assert "x3: e.g." not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert any(" running " in line or " done (" in line for line in lines)  # plain progress lines off a terminal
    assert "\x1b" not in result.stderr


def run_in_terminal(args: list[str], env: dict[str, str]) -> bytes:
    """Run thumbctl with a pseudo-terminal as stdout and stderr; return what it wrote."""
    main, child = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "thumbctl", *args], stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=env
        )
        os.close(child)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=60) == 0
        return b"".join(chunks)
    finally:
        os.close(main)


def test_colour_on_a_terminal_unless_no_color(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "THUMBCTL_DB")}
    env.update(TERM="xterm-256color", COLUMNS="120")
    db = tmp_path / "l.db"
    args = ["status", "--db", str(db)]
    CliRunner().invoke(app, ["submit", str(SAMPLE_ONE), "--out", str(tmp_path / "out"), "--db", str(db), "-q"])
    coloured = run_in_terminal(args, env)
    plain = run_in_terminal(args, {**env, "NO_COLOR": "1"})
    assert b"\x1b[3" in coloured  # a foreground colour
    assert b"\x1b[3" not in plain and b"succeeded" in plain


@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        (["events", "--json"], b"{\n"),
        (
            ["events"],
            b"seq  at                           item       ratio  size  format  transition  attempt  worker  error\n",
        ),
        (["events", "--jsonl"], None),  # a whole JSON object
        (["status", "--items"], b"item       ratio  state   attempt  error  crop  output\n"),
    ],
)
def test_a_closed_pipe_ends_quietly(tmp_path: Path, args: list[str], first_line: bytes | None) -> None:
    """`thumbctl events B | head -1`: the listing stops where the reader went away, exit 0, nothing on stderr."""
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        batch = ledger.intake.accept_batch(request("big", sources=400, ratios=("1:1", "4:3", "16:9")), Limits())
    proc = subprocess.Popen(
        [sys.executable, "-m", "thumbctl", args[0], batch.batch_id, *args[1:], "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == first_line if first_line is not None else json.loads(line)["seq"] == 1
    proc.stdout.close()  # like `| head -1`
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None and proc.stderr.read() == b""


@pytest.mark.parametrize("args", [["events"], ["events", "--item", "coffee.png"], ["status", "--items"]])
def test_listings_are_results_on_stdout_one_line_a_row_and_json_is_the_whole_document(
    cli, photos: Path, out_dir: Path, args: list[str]
) -> None:
    """DESIGN section 2: the lines of `events` and `status --items` go to stdout (`| grep failed`
    works), nothing to stderr; with --json, the streamed document is the one the whole list makes."""
    batch_id = render_doc(photos, "--out", out_dir, "-w", "1", "-r", "1:1", "-r", "4:3")["batch_id"]
    with Ledger(Path(os.environ["THUMBCTL_DB"]), read_only=True) as ledger:
        if args[0] == "events":
            item = args[2] if len(args) > 1 else None
            expected = {"events": [e.to_json() for e in ledger.views.events(batch_id, item_id=item)]}
        else:
            expected = {"batch_id": batch_id, "items": [i.to_json() for i in ledger.views.items(batch_id)]}
    listed = cli(args[0], batch_id, *args[1:], "--json")
    assert (listed.exit_code, listed.stderr, json.loads(listed.stdout)) == (0, "", expected)
    human = cli(args[0], batch_id, *args[1:])
    assert (human.exit_code, human.stderr) == (0, "")
    header, *rows = human.stdout.splitlines()
    (key,) = set(expected) - {"batch_id"}
    assert len(rows) == len(expected[key]) and "\x1b" not in human.stdout
    if key == "events":
        assert header.split() == [
            "seq", "at", "item", "ratio", "size", "format", "transition", "attempt", "worker", "error"
        ]  # fmt: skip
        assert [row.split()[0] for row in rows] == [str(e["seq"]) for e in expected["events"]]
        assert [row.split()[4:6] for row in rows] == [[str(e["size"]), e["format"]] for e in expected["events"]]
        assert all(row.split()[8] == e["to_state"] for row, e in zip(rows, expected["events"], strict=True))
        lines = cli(args[0], batch_id, *args[1:], "--jsonl")
        assert (lines.exit_code, lines.stderr) == (0, "")
        assert [json.loads(line) for line in lines.stdout.splitlines()] == expected["events"]
        followed = cli(args[0], batch_id, *args[1:], "--follow")  # a final batch: the same lines, then exit 0
        assert (followed.exit_code, followed.stderr, followed.stdout) == (0, "", human.stdout)
    else:
        assert header.split() == ["item", "ratio", "state", "attempt", "error", "crop", "output"]
        assert [row.split()[:3] for row in rows] == [[i["item_id"], i["ratio"], i["state"]] for i in expected["items"]]


def test_events_jsonl_gives_an_error_as_one_line_too(cli, photos: Path, out_dir: Path) -> None:
    cli("submit", photos, "--out", out_dir, "--detach", "-q")
    result = cli("events", "b_0000000000000000", "--jsonl")
    assert (result.exit_code, result.stdout.count("\n")) == (2, 1)
    assert json.loads(result.stdout)["error"]["code"] == "batch_not_found"


def test_reconcile_and_gc_on_an_empty_ledger_are_clean(cli, tmp_path: Path) -> None:
    missing = cli("reconcile", "--json")
    assert missing.exit_code == 2 and json.loads(missing.stdout)["error"]["code"] == "no_ledger"
    assert not (tmp_path / "ledger.db").exists()  # a mistyped --db creates nothing
    Ledger(tmp_path / "ledger.db").close()
    result = cli("reconcile", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (
        0,
        {"findings": [], "clean": True, "objects": {"checked": 0, "decoded": 0, "unchanged": 0, "matched": 0}},
    )
    result = cli("gc", "--older-than", "30d", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "dry_run": False,
        "expired_batches": [],
        "objects_removed": 0,
        "temp_files_removed": 0,
        "manifests_removed": 0,
        "sheets_removed": 0,
        "bytes_reclaimed": 0,
        "errors": [],
    }


def test_reconcile_exits_1_while_findings_remain_and_0_once_repaired(cli, photos: Path, out_dir: Path) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    work_here(batch["batch_id"])
    item = json.loads(cli("status", batch["batch_id"], "--items", "--json").stdout)["items"][0]
    os.unlink(item["object_path"])
    finding = {
        "kind": "object_missing",
        "batch_id": batch["batch_id"],
        "item_id": item["item_id"],
        "ratio": "1:1",
        "path": item["object_path"],
        "detail": "the object is missing",
        "repaired": False,
    }
    found = cli("reconcile", "--json")
    assert (found.exit_code, json.loads(found.stdout)) == (
        1,
        {
            "findings": [finding],
            "clean": False,
            "objects": {"checked": 4, "decoded": 3, "unchanged": 0, "matched": 0},
        },
    )
    human = cli("reconcile")
    assert human.exit_code == 1 and human.stderr == ""
    assert f"object_missing {batch['batch_id']} {item['item_id']} 1:1: the object is missing" in human.stdout
    assert "4 objects checked: 3 unchanged since they last decoded, 1 found wrong without decoding" in human.stdout
    fixed = cli("reconcile", "--repair", "--json")
    assert (fixed.exit_code, json.loads(fixed.stdout)) == (
        0,
        {
            "findings": [{**finding, "repaired": True}],
            "clean": True,
            "objects": {"checked": 4, "decoded": 0, "unchanged": 3, "matched": 0},
        },
    )
    assert cli("reconcile").exit_code == 0
    work_here(batch["batch_id"])
    assert os.path.exists(item["object_path"]) and cli("reconcile").exit_code == 0


def test_gc_expires_batches_and_keeps_every_thumbnail_byte_for_byte(cli, photos: Path, out_dir: Path) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    work_here(batch["batch_id"])
    files = [p for p in out_dir.rglob("*") if p.is_file() and "batches" not in p.parts]
    thumbnails = {p: p.read_bytes() for p in files if p.name != "thumbctl.json"}
    manifest = out_dir / "batches" / f"{batch['batch_id']}.json"
    assert len(thumbnails) == 4 and manifest.is_file()
    dry = cli("gc", "--older-than", "0s", "--dry-run", "--json")
    assert dry.exit_code == 0
    planned = json.loads(dry.stdout)
    planned = {k: planned[k] for k in ("dry_run", "expired_batches", "objects_removed", "manifests_removed")}
    expected = {"dry_run": True, "expired_batches": [batch["batch_id"]], "objects_removed": 0, "manifests_removed": 1}
    assert planned == expected
    assert manifest.is_file()
    done = cli("gc", "--older-than", "0s")
    assert done.exit_code == 0 and done.stderr == ""
    assert f"expired 1 batch: {batch['batch_id']}" in done.stdout
    assert "removed 0 objects, 0 temp files, 1 manifest, 0 contact sheets (thumbnails are kept)" in done.stdout
    assert not manifest.exists()
    site = out_dir / "thumbctl.json"  # the site manifest stays too
    assert {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file() and p != site} == thumbnails
    assert site.is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gc"], "--older-than"),
        (["gc", "--older-than", "soon"], "bad duration"),
        (["reconcile", "--grace", "later"], "bad duration"),
    ],
)
def test_reconcile_and_gc_usage_errors_exit_2(cli, args: list[str], message: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2 and message in result.stderr


def test_quiet_reconcile_prints_only_the_findings_that_remain(cli, photos: Path, out_dir: Path) -> None:
    _, doc, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    work_here(doc["batch_id"])
    clean = cli("reconcile", "--repair", "-q")
    assert (clean.exit_code, clean.stdout, clean.stderr) == (0, "", "")
    store = Path(item_list(cli, doc["batch_id"])[0]["object_path"]).parents[2]  # STORE/objects/<xx>/<object>
    orphan = store / "objects" / "ab" / ("ab" + "0" * 62 + ".jpg")
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left behind")
    (out_dir / "rooms" / "living.1x1.jpg").unlink()
    left = cli("reconcile", "--repair", "-q")
    assert left.exit_code == 1 and left.stderr == ""
    assert left.stdout.splitlines() == [
        f"orphan_object: no item of a live batch and no published name references this object (11 bytes); "
        f"`thumbctl gc` removes it {orphan}"
    ]


STATS_FIELDS = {
    "at", "since", "window_seconds", "batch_id", "queue", "counts", "rates_per_second", "retries",
    "cancellations", "bytes_read", "bytes_written", "per_ratio", "dedup_hits", "timings_ms",
}  # fmt: skip


def test_every_json_command_prints_one_document_of_its_documented_shape(cli, photos: Path, out_dir: Path) -> None:
    (photos / "notes.jpg").write_text("not a photo")
    batch = render_doc(photos, "--out", out_dir, "-w", "1", states=EXIT_1)
    bid = batch["batch_id"]
    assert set(batch) >= BATCH_FIELDS and batch["failures"][0]["error_code"] == "unsupported_format"
    assert set(batch["failures"][0]) == {"item_id", "ratio", "size", "format", "error_code", "detail"}

    def doc(*args: str) -> dict:
        result = cli(*args, "--json")
        assert result.exit_code in (0, 1), result.stderr
        return json.loads(result.stdout)  # the whole of stdout is one JSON document

    assert set(doc("status", bid)) >= BATCH_FIELDS
    listing = doc("status")
    assert list(listing) == ["batches"] and set(listing["batches"][0]) >= BATCH_FIELDS - {"failures"}
    items = doc("status", bid, "--items")
    assert list(items) == ["batch_id", "items"] and all(set(i) >= ITEM_FIELDS for i in items["items"])
    events = doc("events", bid)
    assert list(events) == ["events"] and all(set(e) >= EVENT_FIELDS for e in events["events"])
    assert set(doc("retry", bid, "--detach")) >= BATCH_FIELDS
    assert set(doc("cancel", bid)) >= BATCH_FIELDS
    assert set(doc("stats")) == STATS_FIELDS
    assert set(doc("config")) >= {"config_file", "profile", "settings"}
    assert set(doc("sheet", bid)) >= {"batch_id", "path"}
    reconciled = doc("reconcile")
    assert set(reconciled) == {"findings", "clean", "objects"} and reconciled["findings"] == [] and reconciled["clean"]
    assert set(reconciled["objects"]) == {"checked", "decoded", "unchanged", "matched"}
    assert set(doc("gc", "--older-than", "30d", "--dry-run")) >= {"dry_run", "expired_batches", "bytes_reclaimed"}
    assert set(doc("codes")) == {"item_error_codes", "exit_codes"}


def test_status_watch_needs_a_batch(cli) -> None:
    result = cli("status", "--watch")
    assert result.exit_code == 2 and "need a BATCH" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status", "--bogus"], "No such option: --bogus"),
        (["status", "--limit", "0"], "Invalid value for '--limit'"),
        (["work", "--workers", "-1"], "--workers: must be at least 0, got -1"),
        (["gc"], "Missing option '--older-than'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["stats", "--window", "abc", "--json"], "bad duration 'abc'"),
    ],
)
def test_flag_errors_are_one_line_with_a_code_and_json_gets_a_document(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(args)
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert err.startswith("error [usage] ") and message in err and len(err.strip().splitlines()) == 1
    if "--json" in args:
        assert json.loads(out)["error"] == {"code": "usage", "message": err.strip()[14:], "transient": False,
                                            "exit_code": 2}  # fmt: skip
    else:
        assert out == ""


def test_bare_thumbctl_shows_the_help_and_version_works(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main([])
    assert ended.value.code == 2 and "Usage: thumbctl" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0 and capsys.readouterr().out == f"thumbctl {thumbctl.__version__}\n"


def test_read_only_commands_never_create_a_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "typo" / "ledgr.db"
    for args in (["events", "b_x"], ["stats"], ["reconcile"], ["cancel", "b_x"], ["retry", "b_x"], ["sheet", "b_x"],
                 ["work", "--until-idle"]):  # fmt: skip
        with pytest.raises(SystemExit) as ended:
            main([*args, "--db", str(typo)])
        assert ended.value.code == 2 and "error [no_ledger] no ledger at" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ended:
        main(["status", "--db", str(typo), "--json"])
    assert ended.value.code == 0 and json.loads(capsys.readouterr().out) == {"batches": []}
    assert not (tmp_path / "typo").exists()


def test_an_item_id_through_a_symlink_in_out_fails_and_nothing_outside_changes(cli, tmp_path: Path) -> None:
    out, victim, photos = tmp_path / "out", tmp_path / "victim", tmp_path / "man"
    out.mkdir()
    victim.mkdir()
    photos.mkdir()
    (out / "evil").symlink_to(victim, target_is_directory=True)
    (victim / "keep.1x1.jpg").write_text("precious user data")
    before = tree_snapshot(victim)
    (photos / "Portrait_1.jpg").write_bytes((SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg").read_bytes())
    for name, item_id in (("ev.json", "evil/x"), ("ev2.json", "evil/keep")):
        doc = {"ratios": ["1:1"], "items": [{"id": item_id, "source": "Portrait_1.jpg"}]}
        (photos / name).write_text(json.dumps(doc))
        finished = render_doc(photos / name, "--out", out, "-w", "1", states=("partial", "failed"))
        (failure,) = finished["failures"]
        assert failure == {
            "item_id": item_id,
            "ratio": "1:1",
            "size": 512,
            "format": "jpeg",
            "error_code": "path_outside_root",
            "detail": f"{out / 'evil'} is a symlink, which could lead out of the output folder; "
            "nothing is written through it",
        }
    repaired = cli("reconcile", "--repair", "--json")
    assert (repaired.exit_code, json.loads(repaired.stdout)["findings"]) == (0, [])
    assert tree_snapshot(victim) == before


def test_work_after_out_tmp_became_a_symlink_fails_the_items_and_reports_the_manifest(
    cli, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    victim = tmp_path / "victim"
    victim.mkdir()
    out_dir.mkdir(exist_ok=True)
    (out_dir / ".tmp").symlink_to(victim, target_is_directory=True)
    before = tree_snapshot(victim)
    result = cli("work", "--until-idle", "-w", "1", "-q")
    assert result.exit_code == 0 and result.stdout == ""  # work ran until idle; the items failed, see below
    warning = f"warning [io_error] batch manifest not written: {out_dir / 'batches'}"
    assert warning in result.stderr and f"{out_dir / '.tmp'} is a symlink" in result.stderr
    assert "Traceback" not in result.stderr
    status = json.loads(cli("status", batch["batch_id"], "--json").stdout)
    assert (status["state"], {f["error_code"] for f in status["failures"]}) == ("failed", {"path_outside_root"})
    assert tree_snapshot(victim) == before


def test_the_summary_does_not_name_a_manifest_that_was_not_written(cli, photos: Path, out_dir: Path) -> None:
    out_dir.mkdir()
    (out_dir / "batches").write_text("a file where the manifest's folder goes")
    result = cli("submit", str(photos), "--out", str(out_dir), "-r", "1:1", "-w", "1")
    assert result.exit_code == 0, result.stderr
    manifest = out_dir / "batches" / f"{result.stdout.split()[1]}.json"
    assert f"warning [io_error] batch manifest not written: {manifest}: " in result.stderr
    assert str(manifest) not in result.stdout
    assert f"  thumbnails in {out_dir}, the batch manifest was not written (see the warning)\n" in result.stdout


def test_a_batch_finished_at_acceptance_whose_manifest_cannot_be_written_is_a_warning(
    cli, photos: Path, out_dir: Path
) -> None:
    first = cli("submit", str(photos), "--out", str(out_dir), "-r", "1:1", "-w", "1", "--key", "first")
    assert first.exit_code == 0, first.stderr
    shutil.rmtree(out_dir / "batches")
    (out_dir / "batches").write_text("a file where the manifest's folder goes")
    again = cli("submit", str(photos), "--out", str(out_dir), "-r", "1:1", "--key", "second", "--json")
    assert again.exit_code == 0, again.stderr  # every output reused: the batch ended as it was accepted
    batch = json.loads(again.stdout)
    assert batch["state"] == "succeeded" and batch["counts"]["succeeded"] == 4  # the four photos, at 1:1
    assert f"warning [io_error] batch manifest not written: {out_dir / 'batches'}" in again.stderr
    assert "Traceback" not in again.stderr


# -- odd file names and reused outputs ----------------------------------------------------------


def copy_to_bytes_name(source: Path, folder: Path, name: bytes) -> None:
    with open(os.path.join(os.fsencode(folder), name), "wb") as fh:
        fh.write(source.read_bytes())


def test_odd_file_names_fail_alone_and_the_rest_of_the_folder_renders(cli, photos: Path, out_dir: Path) -> None:
    for name in (b"bad\xffname.jpg", b"tab\tname.jpg", b"new\nline.jpg", b"back\\slash.jpg"):
        copy_to_bytes_name(photos / "coffee.png", photos, name)
    doc = render_doc(photos, "--out", out_dir, "-w", "1", "-r", "1:1", states=EXIT_1)
    assert (doc["state"], doc["counts"]["succeeded"], doc["counts"]["failed"]) == ("partial", 4, 4)
    assert doc["failures"] == [
        {
            "item_id": f".unsafe/{shown}",
            "ratio": "1:1",
            "size": 512,
            "format": "jpeg",
            "error_code": "unsafe_name",
            "detail": f"the name {shown} (written with %XX escapes) {reason}: no item id can hold it",
        }
        for shown, reason in [
            ("back%5Cslash.jpg", "contains a backslash"),
            ("bad%FFname.jpg", "is not valid UTF-8"),
            ("new%0Aline.jpg", "contains control characters"),
            ("tab%09name.jpg", "contains control characters"),
        ]
    ]
    names = sorted(p.name for p in out_dir.iterdir() if p.is_file())
    assert names == ["coffee.1x1.jpg", "garden.1x1.jpg", "thumbctl.json"]
    assert len(list((out_dir / "rooms").iterdir())) == 2
    assert cli("reconcile").exit_code == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"items": [{"id": "a\\ud800b", "source": "coffee.png"}]}',
            "malformed manifest m.json: item 1: \"id\" is not valid UTF-8 text: 'a\\ud800b'",
        ),
        (
            '{"items": [{"source": "raw/\\udcffx.jpg"}]}',
            "malformed manifest m.json: item 1: \"source\" is not valid UTF-8 text: 'raw/\\udcffx.jpg'",
        ),
    ],
)
def test_a_manifest_holding_text_that_is_not_utf8_is_rejected_with_65(
    cli, photos: Path, out_dir: Path, content: str, message: str
) -> None:
    (photos / "m.json").write_text(content)
    code, doc, err = submit_json(cli, photos / "m.json", out_dir)
    assert code == 65 and doc is not None and doc["error"]["code"] == "malformed_manifest"
    assert err.strip().splitlines() == [f"error [malformed_manifest] {message}"]
    assert json.loads(cli("status", "--json").stdout) == {"batches": []}


def reused_submit(cli, source: Path, out: Path, *extra: str):
    return cli("submit", source, "--out", out, "-w", "1", "-r", "1:1", "--json", *extra)


def reused_here(
    cli, source: Path, out: Path, *extra: str, states: tuple[str, ...] = ("succeeded",)
) -> tuple[dict, str]:
    """What :func:`reused_submit` leaves, the batch recorded by ``submit --detach`` and rendered in
    this process (tests/inprocess): its finished document (with the submit's ``replayed``), whose
    state is one of ``states`` (``succeeded``: the foreground run's exit 0; :data:`EXIT_1`: its
    exit 1), and the submit's stderr."""
    recorded = cli("submit", source, "--out", out, "-w", "1", "-r", "1:1", "--detach", "--json", *extra)
    assert recorded.exit_code == 0, recorded.stderr
    submitted = json.loads(recorded.stdout)
    work_here(submitted["batch_id"])
    finished = {**json.loads(cli("status", submitted["batch_id"], "--json").stdout), "replayed": submitted["replayed"]}
    assert finished["state"] in states, finished
    return finished, recorded.stderr


def test_a_submit_that_reuses_outputs_takes_their_friendly_names_back(cli, tmp_path: Path, out_dir: Path) -> None:
    source = tmp_path / "src"
    make_image(source / "Portrait_0.jpg", (600, 800), "JPEG", seed=3)
    reused_here(cli, source, out_dir, "--size", "512")
    reused_here(cli, source, out_dir, "--size", "256")
    doc, stderr = reused_here(cli, source, out_dir, "--size", "512", "--key", "again")
    assert (doc["state"], doc["replayed"], doc["counts"]["succeeded"]) == ("succeeded", False, 1)
    assert stderr == ""
    item = json.loads(cli("status", doc["batch_id"], "--items", "--json").stdout)["items"][0]
    assert item["friendly_path"] == str(out_dir / "Portrait_0.1x1.jpg")
    assert is_copy_of(item["friendly_path"], item["object_path"])
    with Image.open(item["friendly_path"]) as image:
        assert image.size == (512, 512)
    clean = cli("reconcile", "--json")
    assert (clean.exit_code, json.loads(clean.stdout)) == (
        0,
        {"findings": [], "clean": True, "objects": {"checked": 2, "decoded": 2, "unchanged": 0, "matched": 0}},
    )


NOT_PUBLISHED = "is a file thumbctl did not publish; it is left as it is (--overwrite replaces it)"


def test_a_folder_at_a_thumbnails_name_fails_that_item_name_taken_until_it_is_gone(
    cli, tmp_path: Path, out_dir: Path
) -> None:
    source = tmp_path / "src"
    make_image(source / "Portrait_0.jpg", (600, 800), "JPEG", seed=3)
    reused_here(cli, source, out_dir, "--size", "512")
    reused_here(cli, source, out_dir, "--size", "256")
    blocked = out_dir / "Portrait_0.1x1.jpg"
    blocked.unlink()
    (blocked / "inside").mkdir(parents=True)
    batch, _ = reused_here(cli, source, out_dir, "--size", "512", "--key", "again", states=EXIT_1)
    assert (batch["state"], batch["counts"]["failed"]) == ("failed", 1)
    assert [(f["ratio"], f["error_code"], f["detail"]) for f in batch["failures"]] == [
        ("1:1", "name_taken", f"{blocked} {NOT_PUBLISHED}")
    ]
    assert (blocked / "inside").is_dir()
    shutil.rmtree(blocked)
    assert cli("retry", batch["batch_id"], "--detach", "-q").exit_code == 0
    work_here(batch["batch_id"])
    assert json.loads(cli("status", batch["batch_id"], "--json").stdout)["state"] == "succeeded"
    with Image.open(blocked) as image:
        assert image.size == (512, 512)


def transitions(cli, batch_id: str) -> list[tuple[str | None, str, str | None]]:
    events = json.loads(cli("events", batch_id, "--json").stdout)["events"]
    return [(e["from_state"], e["to_state"], e["error_code"]) for e in events]


def test_a_replay_after_out_was_removed_restores_the_thumbnails_from_the_store(
    cli, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    first = reused_submit(cli, photos, out_dir)
    assert first.exit_code == 0
    shutil.rmtree(out_dir)  # the store beside the ledger still holds every object: nothing is rendered
    again = reused_submit(cli, photos, out_dir)
    doc = json.loads(again.stdout)
    assert (again.exit_code, again.stderr, doc["replayed"], doc["state"]) == (0, "", True, "succeeded")
    for item in json.loads(cli("status", doc["batch_id"], "--items", "--json").stdout)["items"]:
        assert is_copy_of(item["friendly_path"], item["object_path"])
    assert not [t for t in transitions(cli, doc["batch_id"]) if t[2] == "object_missing"]
    assert not (out_dir / "objects").exists() and not (out_dir / ".tmp").exists()
    assert cli("reconcile").exit_code == 0

    shutil.rmtree(out_dir)
    shutil.rmtree(tmp_path / "ledger.store" / "objects")  # the objects gone too: rendered again
    again = reused_submit(cli, photos, out_dir)
    doc = json.loads(again.stdout)
    assert again.exit_code == 0, again.stderr
    assert (doc["batch_id"], doc["replayed"], doc["state"]) == (json.loads(first.stdout)["batch_id"], True, "succeeded")
    assert (doc["total"], doc["counts"]["succeeded"], sum(doc["counts"].values())) == (4, 4, 4)
    assert again.stderr.splitlines() == ["replay 4 outputs of this batch were missing; rendering them again"]
    for item in json.loads(cli("status", doc["batch_id"], "--items", "--json").stdout)["items"]:
        assert is_copy_of(item["friendly_path"], item["object_path"])
        with Image.open(item["friendly_path"]) as image:
            image.load()
    assert Path(doc["manifest_path"]).is_file()
    requeued = [t for t in transitions(cli, doc["batch_id"]) if t[2] == "object_missing"]
    assert requeued == [("succeeded", "queued", "object_missing")] * 4  # audited, as reconcile's requeue
    before = transitions(cli, doc["batch_id"])
    intact = reused_submit(cli, photos, out_dir)  # OUT is whole again: nothing is rendered twice
    assert (intact.exit_code, intact.stderr, json.loads(intact.stdout)["replayed"]) == (0, "", True)
    assert transitions(cli, doc["batch_id"]) == before
    assert cli("reconcile").exit_code == 0


def test_a_detached_replay_after_the_objects_were_removed_says_to_run_work(
    cli, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    reused_here(cli, photos, out_dir)
    shutil.rmtree(out_dir)
    shutil.rmtree(tmp_path / "ledger.store" / "objects")
    code, doc, err = submit_json(cli, photos, out_dir, "-r", "1:1")
    assert (code, doc["replayed"], doc["state"], doc["counts"]["queued"], doc["total"]) == (0, True, "queued", 4, 4)
    assert "4 outputs of this batch were missing; queued again: run `thumbctl work` to render them" in err
    work_here(doc["batch_id"])
    assert json.loads(cli("status", doc["batch_id"], "--json").stdout)["state"] == "succeeded"
    assert cli("reconcile").exit_code == 0


def test_a_replay_says_when_a_newer_batch_took_its_friendly_names(
    cli, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    older = json.loads(reused_submit(cli, photos, out_dir, "--key", "older").stdout)
    assert reused_submit(cli, photos, out_dir, "--key", "newer").exit_code == 0  # reuses the objects, takes the names
    replay = reused_submit(cli, photos, out_dir, "--key", "older")
    assert replay.exit_code == 0 and json.loads(replay.stdout)["replayed"] is True
    assert replay.stderr.splitlines() == [
        "replay 4 friendly names of this batch now show a newer batch's outputs (it rendered the same names "
        f"later); this batch's own files are its objects in the store, listed in {older['manifest_path']}"
    ]
    shutil.rmtree(out_dir)
    shutil.rmtree(tmp_path / "ledger.store" / "objects")
    restored = reused_submit(cli, photos, out_dir, "--key", "older")
    assert restored.exit_code == 0
    assert restored.stderr.splitlines() == ["replay 4 outputs of this batch were missing; rendering them again"]
    for item in json.loads(cli("status", older["batch_id"], "--items", "--json").stdout)["items"]:
        assert is_copy_of(item["friendly_path"], item["object_path"])  # rendered last: it owns the names


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a Linux /proc, where nothing can be created")
def test_an_output_folder_nobody_can_write_is_refused_before_anything_is_recorded(cli, photos: Path) -> None:
    result = cli("submit", photos, "--out", "/proc/thumbctl-out", "--detach", "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "bad_out_dir"
    assert "is not writable" in result.stderr
    assert json.loads(cli("status", "--json").stdout) == {"batches": []}


# -- what each render records: the crop window, and outputs smaller than asked -----------------


def items_of(cli, batch_id: str) -> dict[tuple[str, str], dict]:
    """``status BATCH --items --json``, keyed by (item id, ratio)."""
    result = cli("status", batch_id, "--items", "--json")
    assert result.exit_code == 0
    return {(i["item_id"], i["ratio"]): i for i in json.loads(result.stdout)["items"]}


def table_rows(cli, batch_id: str) -> dict[tuple[str, str], str]:
    """The rows of the human ``status BATCH --items`` table, keyed by (item id, ratio)."""
    result = cli("status", batch_id, "--items")
    assert result.exit_code == 0 and result.stderr == ""  # a listing is a result: stdout (DESIGN section 2)
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["item", "ratio", "state", "attempt", "error", "crop", "output"]
    return {(row.split()[0], row.split()[1]): row for row in rows}


def shown_crop(crop: dict) -> str:
    """What the items table shows for a recorded crop: policy, score to 2 places, corner, size."""
    width, height = window_size(crop["box"])
    return f"{crop['policy']} {score_text(crop['score'])} @ {crop['box'][0]},{crop['box'][1]} {width}x{height}"


@pytest.mark.parametrize("policy", ["smart", "entropy", "center"])
def test_every_render_records_its_crop_window_score_and_policy(cli, photos: Path, out_dir: Path, policy: str) -> None:
    ratios = ("-r", "1:1", "-r", "16:9", "-r", "2:3")
    batch_id = render_doc(photos, "--out", out_dir, "-w", "1", *ratios, "--size", "128", "--crop", policy)["batch_id"]
    items = items_of(cli, batch_id)
    assert set(items) == set(CENTRED_WINDOWS)
    for (item_id, ratio), item in items.items():
        crop = item["result"]["crop"]
        assert set(crop) == {"box", "score", "policy"} and crop["policy"] == policy
        left, top, right, bottom = crop["box"]
        src_w, src_h = PHOTO_SIZES[item_id]
        assert window_size(crop["box"]) == window_size(CENTRED_WINDOWS[item_id, ratio])  # exact ratio, largest
        assert 0 <= left < right <= src_w and 0 <= top < bottom <= src_h
        assert (left, right) == (0, src_w) or (top, bottom) == (0, src_h)
        assert isinstance(crop["score"], float) and crop["score"] == round(crop["score"], 4)
        if policy == "center":
            assert (crop["box"], crop["score"]) == (CENTRED_WINDOWS[item_id, ratio], 0.0)
        else:
            assert crop["score"] > 0
    rows = table_rows(cli, batch_id)
    assert set(rows) == set(items)
    for key, item in items.items():
        assert f"  {shown_crop(item['result']['crop'])}  " in rows[key]
        assert "smaller than asked" not in rows[key]  # --size 128: every window is larger


def test_the_items_table_shows_the_recorded_window_in_source_pixels(cli, photos: Path, out_dir: Path) -> None:
    render_doc(photos, "--out", out_dir, "-w", "1", "-r", "2:3", "--size", "128", "--crop", "center")
    (batch,) = json.loads(cli("status", "--json").stdout)["batches"]
    rows = table_rows(cli, batch["batch_id"])
    crop_cells = {item_id: " ".join(row.split()[4:9]) for (item_id, _), row in rows.items()}
    assert crop_cells == {
        "coffee.png": "center 0.00 @ 166,0 267x400",
        "garden.jpeg": "center 0.00 @ 0,10 200x300",
        "rooms/kitchen.webp": "center 0.00 @ 94,0 133x200",
        "rooms/living.jpg": "center 0.00 @ 500,0 800x1200",
    }


@pytest.fixture
def small_and_large(tmp_path: Path) -> Path:
    """A 640x427 photo and an 1800x1200 one (upright): only the first is smaller than --size 1024."""
    folder = tmp_path / "mixed"
    make_image(folder / "small.jpg", (640, 427), "JPEG", seed=5)
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg", folder / "large.jpg")
    return folder


@pytest.mark.parametrize(
    ("upscale", "small_sizes", "flag"),
    [
        ((), {"1:1": (427, 427), "16:9": (640, 360)}, True),  # the largest exact-ratio crops of 640x427
        (("--upscale",), {"1:1": (1024, 1024), "16:9": (1024, 576)}, False),
    ],
    ids=["not-enlarged", "upscale"],
)
def test_a_source_smaller_than_size_says_so_and_gives_its_largest_crop(
    cli, small_and_large: Path, out_dir: Path, upscale: tuple[str, ...], small_sizes: dict, flag: bool
) -> None:
    ratios = ("-r", "1:1", "-r", "16:9")
    doc = render_doc(small_and_large, "--out", out_dir, "-w", "1", *ratios, "--size", "1024", *upscale)
    items = items_of(cli, doc["batch_id"])
    expected = {("small.jpg", r): size for r, size in small_sizes.items()}
    expected |= {("large.jpg", "1:1"): (1024, 1024), ("large.jpg", "16:9"): (1024, 576)}
    assert set(items) == set(expected)
    for key, item in items.items():
        with Image.open(item["object_path"]) as image:
            assert image.size == (item["result"]["width"], item["result"]["height"]) == expected[key]
        smaller = item["result"].get("source_smaller_than_target")
        assert smaller is True if (flag and key[0] == "small.jpg") else smaller in (None, False)


SMALLER_HINT = "(source smaller than --size; --upscale enlarges)"

#: The crop column of ``status BATCH --items`` for ``small_and_large`` at --size 1024 --crop center:
#: 640x427 gives 427x427 (left round(320 - 213.5) = 106) and 640x360 (top round(213.5 - 180) = 34).
CENTRED_CELLS_AT_1024 = {
    ("small.jpg", "1:1"): "center 0.00 @ 106,0 427x427, smaller than asked: 427x427",
    ("small.jpg", "16:9"): "center 0.00 @ 0,34 640x360, smaller than asked: 640x360",
    ("large.jpg", "1:1"): "center 0.00 @ 300,0 1200x1200",
    ("large.jpg", "16:9"): "center 0.00 @ 0,94 1800x1012",
}


@pytest.mark.parametrize(
    ("ratios", "summary"),
    [
        (("-r", "1:1"), "  1 output is smaller than asked " + SMALLER_HINT),
        (("-r", "1:1", "-r", "16:9"), "  2 outputs are smaller than asked " + SMALLER_HINT),
    ],
    ids=["one-output", "two-outputs"],
)
def test_outputs_smaller_than_asked_are_named_in_the_run_summary_and_the_items_table(
    cli, small_and_large: Path, out_dir: Path, ratios: tuple[str, ...], summary: str
) -> None:
    run = ("--out", out_dir, "-w", "1", *ratios, "--size", "1024", "--crop", "center")
    result = cli("submit", small_and_large, *run)
    assert result.exit_code == 0
    assert summary in result.stdout.splitlines()
    (batch,) = json.loads(cli("status", "--json").stdout)["batches"]
    crop_cells = {key: " ".join(row.split()[4:-1]) for key, row in table_rows(cli, batch["batch_id"]).items()}
    assert crop_cells == {key: cell for key, cell in CENTRED_CELLS_AT_1024.items() if key[1] in ratios}
    enlarged = cli("submit", small_and_large, *run, "--upscale")
    assert enlarged.exit_code == 0 and "smaller than asked" not in enlarged.stdout + enlarged.stderr


def test_the_summary_counts_outputs_smaller_than_asked_over_the_whole_batch_reused_ones_too(
    cli, small_and_large: Path, out_dir: Path
) -> None:
    """A second submit of the folder with one photo added reuses the small photo's two outputs:
    the summary still counts them, and the items list shows their produced size."""
    run = ("--out", out_dir, "-w", "1", "-r", "1:1", "-r", "16:9", "--size", "1024", "--crop", "center")
    assert cli("submit", small_and_large, *run).exit_code == 0
    make_image(small_and_large / "added.jpg", (1600, 1200), "JPEG", seed=9)
    again = cli("submit", small_and_large, *run)
    assert again.exit_code == 0, again.stderr
    assert "  2 outputs are smaller than asked " + SMALLER_HINT in again.stdout.splitlines()
    batch_id = json.loads(cli("status", "--json").stdout)["batches"][0]["batch_id"]
    small = {k[1]: v for k, v in items_of(cli, batch_id).items() if k[0] == "small.jpg"}
    carried = ("dominant_colour", "lqip", "crop", "preview")  # from the render that made the output
    assert {ratio: {k: v for k, v in item["result"].items() if k not in carried} for ratio, item in small.items()} == {
        "1:1": {"width": 427, "height": 427, "source_smaller_than_target": True, "reused": True},
        "16:9": {"width": 640, "height": 360, "source_smaller_than_target": True, "reused": True},
    }
    assert all(item["result"]["lqip"].startswith("data:image/webp;base64,") for item in small.values())
    assert all(item["result"]["crop"]["policy"] == "center" for item in small.values())


# -- what a new user runs into ------------------------------------------------------


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_closed_pipe_neither_fails_nor_abandons_the_run(
    photos: Path, out_dir: Path, tmp_path: Path, closed: str
) -> None:
    """`thumbctl submit … | head` or `… 2>&1 | head`: the reader goes away; the work and the exit
    code stay as they were, and the other stream still gets its lines."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    db = tmp_path / "l.db"
    commands = (
        ["submit", str(photos), "--out", str(out_dir), "-w", "1", "-r", "1:1", "--stats-interval", "0.5"],
        ["status"],
        ["events", "b_nope"],  # its error line goes nowhere (or to stderr): exit 2 all the same
    )
    codes = []
    for args in commands:
        read_end, write_end = os.pipe()
        os.close(read_end)  # nobody reads this stream: the first line written meets a closed pipe
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, closed: write_end}
        proc = subprocess.Popen(
            [sys.executable, "-m", "thumbctl", *args, "--db", str(db)], stdin=subprocess.DEVNULL, env=env, **streams
        )
        os.close(write_end)
        out, err = proc.communicate(timeout=120)
        codes.append((proc.returncode, (err if closed == "stdout" else out).decode()))
    assert [code for code, _ in codes] == [0, 0, 2]
    if closed == "stderr":  # the results are all there
        assert codes[0][1].splitlines()[:2] == [f"Batch {codes[0][1].split()[1]} succeeded", "  succeeded 4"]
        assert " succeeded  4/4 " in codes[1][1] and codes[2][1] == ""
    else:  # the progress and the error are all there
        assert " succeeded 4/4 done" in codes[0][1] and codes[1][1] == ""
        assert codes[2][1].startswith("error [batch_not_found]")
    with Ledger(db) as ledger:
        (batch,) = ledger.views.batches()
        assert (batch.state, batch.counts["succeeded"]) == ("succeeded", 4)


@pytest.mark.parametrize("where", ["source", "out"])
def test_an_empty_source_or_out_is_a_usage_error_not_the_current_folder(
    cli, photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """`thumbctl submit "$PHOTOS" --out "$OUT"` with a variable unset must not scan or fill the current folder."""
    monkeypatch.chdir(photos)
    before = tree_snapshot(photos)
    args = ["", "--out", tmp_path / "out"] if where == "source" else [photos, "--out", ""]
    result = cli("submit", *args, "--detach", "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "usage"
    expected = "SOURCE is empty: name a folder" if where == "source" else "--out: must be a path, got ''"
    assert result.stderr.startswith(f"error [usage] {expected}")
    assert tree_snapshot(photos) == before and not (tmp_path / "out").exists()
    assert not (tmp_path / "ledger.db").exists()


def test_status_state_lists_those_items_with_why_they_failed(cli, photos: Path, out_dir: Path) -> None:
    whole = (photos / "rooms" / "living.jpg").read_bytes()
    (photos / "cut.jpg").write_bytes(whole[: len(whole) // 3])  # a sound header: it fails when rendered
    batch_id = render_doc(photos, "--out", out_dir, "-w", "1", "-r", "1:1", states=("partial",))["batch_id"]
    table = cli("status", batch_id, "--state", "failed")
    assert table.exit_code == 0 and table.stderr == ""
    (header, row) = table.stdout.splitlines()
    assert header.split() == ["item", "ratio", "state", "attempt", "error", "crop", "output"]
    assert row.split()[:5] == ["cut.jpg", "1:1", "failed", "1", "corrupt_image"]
    assert "jpeg data does not decode" in row and "cut.1x1.jpg" not in row and not (out_dir / "cut.1x1.jpg").exists()


def test_replaying_a_cancelled_batch_of_a_given_key_says_how_to_render_the_rest(
    cli, photos: Path, out_dir: Path
) -> None:
    _, batch, _ = submit_json(cli, photos, out_dir, "-r", "1:1", "--key", "first")
    assert cli("cancel", batch["batch_id"], "-q").exit_code == 0
    replay = cli("submit", photos, "--out", out_dir, "-r", "1:1", "-w", "1", "--key", "first")
    assert replay.exit_code == 4
    assert "this batch was cancelled at" in replay.stderr and "submit again with a new --key" in replay.stderr
    fresh = cli("submit", photos, "--out", out_dir, "-r", "1:1", "-w", "1", "--key", "again", "--json")
    assert fresh.exit_code == 0 and json.loads(fresh.stdout)["counts"]["succeeded"] == 4


def test_counts_in_the_submit_summary_are_spelled_for_one(cli, tmp_path: Path) -> None:
    folder = tmp_path / "one"
    make_image(folder / "a.png", (40, 30), "PNG")
    (folder / "notes.txt").write_text("not a photo")
    result = cli("submit", folder, "--out", tmp_path / "out", "-r", "1:1", "--detach")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert result.stderr.splitlines()[0] == f"created ledger {tmp_path / 'ledger.db'}"  # the ledger's first batch
    assert (
        lines[0].endswith(": 1 item from 1 source")
        and lines[1] == "  1 other file ignored (not image names, or excluded; see --include, --exclude)"
    )


def test_ctrl_c_while_reading_the_sources_says_nothing_was_recorded(
    cli, photos: Path, out_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("thumbctl.intake.submission.prepare_submission", interrupted)  # submit imports it when it runs
    result = cli("submit", photos, "--out", out_dir, "--json")
    assert result.exit_code == 130 and json.loads(result.stdout)["error"]["code"] == "interrupted"
    assert result.stderr == "error [interrupted] interrupted while reading the sources; nothing was recorded\n"
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert ledger.views.batches() == []


def test_submit_help_says_it_renders_and_how_it_exits(cli) -> None:
    text = " ".join(cli("submit", "--help").stdout.split())
    assert "then render it here until it is done (--detach: record only)" in text
    assert "4 when it was cancelled from elsewhere, 130 on Ctrl-C" in text
    assert "``" not in cli("codes", "--help").stdout


@pytest.mark.parametrize("same_ledger", [True, False], ids=["same-ledger", "other-ledger"])
def test_output_folders_inside_the_source_are_never_taken_for_sources(
    cli, photos: Path, tmp_path: Path, same_ledger: bool
) -> None:
    """Thumbnails must not become sources: a new --out inside the source folder leaves the
    earlier one out, whether this ledger made it or another one did (it is recognised by
    the batch manifests in its batches/)."""
    first = photos / "thumbs"
    render_doc(photos, "--out", first)
    assert len(list(first.rglob("*.jpg"))) == 12 and not (first / "objects").exists()  # thumbnails only
    db = [] if same_ledger else ["--db", tmp_path / "other.db"]
    code, doc, _ = submit_json(cli, photos, photos / "thumbs2", *db)
    assert (code, doc["total"]) == (0, 12)
    human = cli("submit", photos, "--out", photos / "thumbs3", "--detach", *db)
    assert human.exit_code == 0
    assert "Accepted batch" in human.stdout and "12 items from 4 sources" in human.stdout
    # one store serves every output folder of a ledger: thumbs2 reused thumbs' objects and was written at once
    left_out = "thumbs, thumbs2" if same_ledger else "thumbs"
    assert f"  output folders left out (thumbnails are never sources): {left_out}\n" in human.stdout


def test_the_batch_list_marks_expired_batches(cli, photos: Path, out_dir: Path) -> None:
    code, batch, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    assert code == 0
    work_here(batch["batch_id"])
    assert f"{batch['batch_id']} succeeded 4/4" in " ".join(cli("status").stdout.split())
    finished = json.loads(cli("status", batch["batch_id"], "--json").stdout)["finished_at"]
    assert cli("gc", "--older-than", "0s", "-q").exit_code == 0
    listed = " ".join(cli("status").stdout.split())
    assert f"{batch['batch_id']} succeeded (expired) 4/4" in listed
    expired = json.loads(cli("status", batch["batch_id"], "--json").stdout)
    assert expired["finished_at"] == finished and expired["expired_at"] > finished  # gc does not move when it finished


def test_the_command_a_detached_submit_suggests_renders_it_and_says_what_this_host_did(
    photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    detached = cli.invoke("submit", photos, "--out", out_dir, "-r", "1:1", "--detach")
    assert detached.returncode == 0
    suggested = detached.stdout.splitlines()[-1].removeprefix("  render it with: ")
    assert suggested.startswith("thumbctl work b_") and f"--db {tmp_path / 'ledger.db'}" in suggested
    done = cli.run(*suggested.split()[1:], "-w", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "Workers finished: 4 items done on this host (succeeded 4, failed 0, cancelled 0)."
    )
    again = cli.json(*suggested.split()[1:], "-w", "1")
    assert again["finished"] == {"succeeded": 0, "failed": 0, "cancelled": 0}  # nothing left: nothing done


def test_the_batch_list_shows_each_batchs_out(cli, photos: Path, tmp_path: Path) -> None:
    """Two batches of one folder to two OUTs are told apart by their OUT, written whole to a pipe
    however long the paths (a terminal cuts the table to its width)."""
    for out in ("shop", "site"):
        code, _, _ = submit_json(cli, photos, tmp_path / out, "-r", "1:1", "--detach")
        assert code == 0
    listed = cli("status", "--json")
    outs = {b["batch_id"]: b["out_dir"] for b in json.loads(listed.stdout)["batches"]}
    assert sorted(Path(out).name for out in outs.values()) == ["shop", "site"]
    table = cli("status").stdout
    assert table.splitlines()[0].split()[-1] == "out"
    for batch_id, out in outs.items():
        (row,) = [line for line in table.splitlines() if batch_id in line]
        assert row.split()[-1] == out, (row, out)


def test_events_of_an_unknown_item_and_watch_with_items_are_usage_errors(cli, photos: Path, out_dir: Path) -> None:
    code, batch, _ = submit_json(cli, photos, out_dir)
    bid = batch["batch_id"]
    unknown = cli("events", bid, "--item", "nope.jpg", "--json")
    assert unknown.exit_code == 2
    assert json.loads(unknown.stdout)["error"] == {
        "code": "item_not_found",
        "message": f"batch {bid} has no item 'nope.jpg' (see `thumbctl status {bid} --items`)",
        "transient": False,
        "exit_code": 2,
    }
    known = json.loads(cli("events", bid, "--item", "coffee.png", "--json").stdout)["events"]
    assert len(known) == 3 and {e["item_id"] for e in known} == {"coffee.png"}
    both = cli("status", bid, "--items", "--watch")
    assert both.exit_code == 2
    assert both.stderr == (
        "error [usage] --watch follows a batch's progress; it does not combine with --items or --state\n"
    )


@pytest.mark.parametrize("value", ["abc", "-1", "0.5", "1e9", "nan"])
def test_a_bad_lease_setting_is_refused_before_anything_is_recorded(
    cli, photos: Path, out_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("THUMBCTL_LEASE_SECONDS", value)
    code, doc, err = submit_json(cli, photos, out_dir)
    assert code == 2 and doc["error"]["code"] == "config_error" and "THUMBCTL_LEASE_SECONDS" in err
    assert not (tmp_path / "ledger.db").exists()


def test_submit_takes_lists_of_sizes_and_formats(cli, photos: Path, out_dir: Path) -> None:
    sets = ("--size", "64,128", "--format", "webp,jpeg")
    doc = render_doc(photos, "--out", out_dir, "-w", "1", "-r", "1:1", *sets)
    assert doc["total"] == 4 * 2 * 2 and doc["counts"]["succeeded"] == 16
    items = json.loads(cli("status", doc["batch_id"], "--items", "--json").stdout)["items"]
    assert sorted(Path(i["friendly_path"]).name for i in items if i["item_id"] == "coffee.png") == [
        "coffee.1x1.128.jpg",
        "coffee.1x1.128.webp",
        "coffee.1x1.64.jpg",
        "coffee.1x1.64.webp",
    ]
    manifest = json.loads(Path(doc["manifest_path"]).read_text())
    expected = {(size, fmt) for size in (64, 128) for fmt in ("webp", "jpeg")}
    assert {(i["size"], i["format"]) for i in manifest["items"]} == expected


# -- the default ledger: in the state folder, moved from the old place, created once ----------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME in tmp_path with no XDG folders set and no THUMBCTL_DB: the default ledger is used."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "THUMBCTL_DB", "THUMBCTL_OUT"):
        monkeypatch.delenv(name, raising=False)
    return home


NEW_PLACE = "~/.local/state/thumbctl/ledger.db"
OLD_PLACE = "~/.config/thumbctl/ledger.db"


def run_default(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def ledger_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("ledger.db*")) if folder.exists() else []


def test_the_first_submit_creates_the_default_ledger_in_the_state_folder_and_says_so_once(
    home: Path, photos: Path, out_dir: Path
) -> None:
    first = run_default("submit", photos, "--out", out_dir, "--detach", "--json")
    assert first.exit_code == 0 and json.loads(first.stdout)["state"] == "queued"  # stdout: the document only
    assert first.stderr == f"created ledger {NEW_PLACE}\n"
    assert (home / ".local" / "state" / "thumbctl" / "ledger.db").is_file()
    assert not (home / ".config" / "thumbctl").exists()  # the config folder holds no ledger
    again = run_default("submit", photos, "--out", out_dir, "--detach", "--key", "two")
    assert again.exit_code == 0 and "created ledger" not in again.stderr
    listed = run_default("status", "--json")
    assert listed.exit_code == 0 and len(json.loads(listed.stdout)["batches"]) == 2 and listed.stderr == ""


def test_a_ledger_created_under_quiet_is_not_announced_and_status_creates_none(home: Path, photos: Path) -> None:
    assert run_default("status", "--json").stderr == ""  # nothing submitted: no ledger made, nothing said
    assert not (home / ".local").exists()
    quiet = run_default("submit", photos, "--out", home / "out", "--detach", "-q")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")


def old_ledger_with_a_commit_in_its_wal(home: Path, photos: Path, out_dir: Path) -> str:
    """A ledger at the old default place whose last commit is only in its -wal file (its writer
    died before a checkpoint, as a killed worker leaves it); returns the batch id."""
    old = home / ".config" / "thumbctl" / "ledger.db"
    made = CliRunner().invoke(
        app, ["submit", str(photos), "--out", str(out_dir), "--detach", "--json", "--db", str(old)]
    )
    batch_id = json.loads(made.stdout)["batch_id"]
    files = [old, Path(f"{old}-wal"), Path(f"{old}-shm")]
    writer = sqlite3.connect(old, isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE batches SET idempotency_key = 'moved-with-its-wal'")
        left = {path: path.read_bytes() for path in files}  # the files as the writer's death leaves them
    finally:
        writer.close()  # the last connection checkpoints and removes the -wal: put back what a death leaves
    for path, content in left.items():
        path.write_bytes(content)
    assert Path(f"{old}-wal").stat().st_size > 0
    return batch_id


def test_a_ledger_at_the_old_default_place_is_moved_with_its_wal_and_that_is_said_once(
    home: Path, photos: Path, out_dir: Path
) -> None:
    batch_id = old_ledger_with_a_commit_in_its_wal(home, photos, out_dir)
    moved = run_default("status", batch_id, "--json")
    assert moved.exit_code == 0 and json.loads(moved.stdout)["idempotency_key"] == "moved-with-its-wal"
    assert moved.stderr == f"moved the ledger from {OLD_PLACE} to {NEW_PLACE}\n"
    assert ledger_files(home / ".config" / "thumbctl") == []  # with its -wal and -shm
    assert ledger_files(home / ".local" / "state" / "thumbctl") == ["ledger.db"]
    after = run_default("status", batch_id, "--json")
    assert after.exit_code == 0 and after.stderr == ""
    assert json.loads(after.stdout)["idempotency_key"] == "moved-with-its-wal"


def test_with_ledgers_at_both_places_the_new_one_is_used_and_the_old_one_named_each_command(
    home: Path, photos: Path, out_dir: Path
) -> None:
    new_batch = json.loads(run_default("submit", photos, "--out", out_dir, "--detach", "--json", "--key", "n").stdout)[
        "batch_id"
    ]
    old_batch = old_ledger_with_a_commit_in_its_wal(home, photos, out_dir)
    warning = f"a ledger at the old default place {OLD_PLACE} is ignored: the default ledger is {NEW_PLACE}"
    for _ in range(2):
        listed = run_default("status", "--json")
        assert [b["batch_id"] for b in json.loads(listed.stdout)["batches"]] == [new_batch]
        assert listed.stderr.count("\n") == 1 and listed.stderr.startswith(warning)
    assert ledger_files(home / ".config" / "thumbctl") == ["ledger.db", "ledger.db-shm", "ledger.db-wal"]
    assert run_default("status", old_batch, "--db", home / ".config" / "thumbctl" / "ledger.db").exit_code == 0


def test_a_ledger_open_in_another_process_is_used_in_place_and_moved_once_it_is_closed(
    home: Path, photos: Path, out_dir: Path
) -> None:
    batch_id = old_ledger_with_a_commit_in_its_wal(home, photos, out_dir)
    old = home / ".config" / "thumbctl" / "ledger.db"
    holder = subprocess.Popen(  # an idle reader, as a worker between claims is
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM batches')"
            ".fetchone(); print('open', flush=True); sys.stdin.read()",
            str(old),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        in_use = run_default("status", batch_id, "--json")
        assert in_use.exit_code == 0 and json.loads(in_use.stdout)["idempotency_key"] == "moved-with-its-wal"
        assert in_use.stderr.startswith(f"the ledger {OLD_PLACE} is open in another process")
        assert not (home / ".local" / "state" / "thumbctl" / "ledger.db").exists()
    finally:
        holder.communicate("", timeout=30)
    moved = run_default("status", batch_id, "--json")
    assert moved.stderr == f"moved the ledger from {OLD_PLACE} to {NEW_PLACE}\n"
    assert json.loads(moved.stdout)["idempotency_key"] == "moved-with-its-wal"


# -- --max-failures and the quiet summary -----------------------------------------------------------------------------


def refused_files(photos: Path, count: int) -> None:
    """``count`` text files named like photos: each item of them fails when submitted."""
    for n in range(count):
        (photos / f"notes{n}.jpg").write_text(f"not a photo {n}")


def truncated_files(photos: Path, count: int) -> None:
    """``count`` JPEGs cut short (a sound header, each cut elsewhere): each fails when rendered."""
    whole = (photos / "rooms" / "living.jpg").read_bytes()
    for n in range(count):
        (photos / f"cut{n}.jpg").write_bytes(whole[: len(whole) // 3 + 97 * n])


def only_batch_id(cli) -> str:
    (batch,) = json.loads(cli("status", "--json").stdout)["batches"]
    return batch["batch_id"]


@pytest.mark.parametrize(("limit", "code"), [(None, 1), ("0", 1), ("2", 1), ("3", 0), ("4", 0)])
def test_submit_exits_1_only_when_more_items_failed_than_max_failures(
    cli, photos: Path, out_dir: Path, limit: str | None, code: int
) -> None:
    refused_files(photos, 2)
    truncated_files(photos, 1)  # 3 failures: 1 more than 2, as many as 3, 1 fewer than 4
    extra = ["--max-failures", limit] if limit else []
    result = cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--json", *extra)
    doc = json.loads(result.stdout)
    assert (result.exit_code, doc["state"], doc["counts"]["failed"]) == (code, "partial", 3)
    assert doc["max_failures"] == int(limit or 0)


def test_max_failures_comes_from_the_environment_and_the_config_file(
    cli, photos: Path, out_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused_files(photos, 2)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "thumbctl.toml").write_text("[defaults]\nmax_failures = 1\n")
    assert cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--key", "file").exit_code == 1
    monkeypatch.setenv("THUMBCTL_MAX_FAILURES", "2")
    assert cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--key", "env").exit_code == 0


def test_quiet_prints_one_summary_line_on_a_non_zero_exit(cli, photos: Path, out_dir: Path) -> None:
    refused_files(photos, 1)
    result = cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "-q")
    batch_id = only_batch_id(cli)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"1 of 5 failed (exit 1); thumbctl status {batch_id}\n"
    again = cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "-q", "--max-failures", "1")
    assert (again.exit_code, again.stdout, again.stderr) == (0, "", "")  # within the budget: exit 0, nothing said


def test_quiet_retry_names_the_budget_it_went_over(cli, photos: Path, out_dir: Path) -> None:
    truncated_files(photos, 3)
    assert cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "-q").exit_code == 1
    batch_id = only_batch_id(cli)
    over = cli("retry", batch_id, "-w", "1", "-q", "--max-failures", "2")
    assert (over.exit_code, over.stdout) == (1, "")
    assert over.stderr == f"3 of 7 failed, more than --max-failures 2 (exit 1); thumbctl status {batch_id}\n"
    within = cli("retry", batch_id, "-w", "1", "--json", "--max-failures", "3")
    doc = json.loads(within.stdout)
    assert (within.exit_code, doc["counts"]["failed"], doc["max_failures"]) == (0, 3, 3)


@pytest.mark.parametrize(("limit", "code"), [(None, 0), ("2", 1), ("3", 0), ("4", 0)])
def test_work_exits_1_only_when_max_failures_is_set_and_more_items_failed_while_it_ran(
    cli, photos: Path, out_dir: Path, limit: str | None, code: int
) -> None:
    refused_files(photos, 1)  # failed at submit: not while work ran
    truncated_files(photos, 3)
    assert cli("submit", photos, "--out", out_dir, "-r", "1:1", "--detach", "-q").exit_code == 0
    extra = ["--max-failures", limit] if limit else []
    result = cli("work", "--until-idle", "-w", "1", "-q", *extra)
    assert (result.exit_code, result.stdout) == (code, "")
    expected = f"3 items failed while it ran, more than --max-failures {limit} (exit 1); thumbctl status\n"
    assert result.stderr == (expected if code else "")


# -- the object store: outside OUT, one per ledger; each thumbnail its own file -------------------


def item_list(cli, batch_id: str) -> list[dict]:
    return json.loads(cli("status", batch_id, "--items", "--json").stdout)["items"]


def sha(path: str | Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_cp_r_of_out_copies_each_thumbnail_once(cli, photos: Path, out_dir: Path, tmp_path: Path) -> None:
    code, doc, _ = submit_json(cli, photos, out_dir, "--size", "96,128", "--format", "webp,jpeg")
    assert code == 0
    work_here(doc["batch_id"])
    items = item_list(cli, doc["batch_id"])
    store = tmp_path / "ledger.store"  # the default: beside the ledger
    assert len(items) == 48 and all(i["object_path"].startswith(f"{store}/objects/") for i in items)
    assert not (out_dir / "objects").exists() and not (out_dir / ".tmp").exists()
    for item in items:
        thumb, obj = os.stat(item["friendly_path"]), os.stat(item["object_path"])
        assert thumb.st_nlink == 1 and obj.st_nlink == 1 and thumb.st_ino != obj.st_ino
        assert sha(item["friendly_path"]) == sha(item["object_path"])
    copy = tmp_path / "upload"
    shutil.copytree(out_dir, copy, symlinks=True)  # as `cp -r` copies: a symlink as a symlink, a hard link twice
    copied = sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file())
    thumbnails = sorted(Path(i["friendly_path"]).relative_to(out_dir) for i in items)
    assert [p for p in copied if p.parts[0] not in ("batches", "thumbctl.json")] == thumbnails  # each once
    assert {p.parts[0] for p in copied if p not in thumbnails} == {"batches", "thumbctl.json"}


def test_an_edited_thumbnail_leaves_the_store_intact_and_reconcile_restores_it(
    cli, photos: Path, out_dir: Path
) -> None:
    code, doc, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    assert code == 0
    work_here(doc["batch_id"])
    edited, deleted = item_list(cli, doc["batch_id"])[:2]
    object_before = sha(edited["object_path"])
    with open(edited["friendly_path"], "r+b") as fh:  # edited in place: same inode, other bytes
        fh.seek(100)
        fh.write(b"\x00" * 16)
    os.unlink(deleted["friendly_path"])
    assert sha(edited["object_path"]) == object_before  # the store is untouched

    found = cli("reconcile", "--json")
    assert found.exit_code == 1
    assert sorted((f["kind"], f["path"], f["repaired"]) for f in json.loads(found.stdout)["findings"]) == [
        ("friendly_link_missing", deleted["friendly_path"], False),
        ("thumbnail_modified", edited["friendly_path"], False),
    ]
    kept = cli("reconcile", "--repair", "--json")  # the missing one restored, the edited one left
    assert kept.exit_code == 1
    assert sorted((f["kind"], f["repaired"]) for f in json.loads(kept.stdout)["findings"]) == [
        ("friendly_link_missing", True),
        ("thumbnail_modified", False),
    ]
    fixed = cli("reconcile", "--repair", "--restore-modified", "--json")  # the edit undone, on request
    assert fixed.exit_code == 0 and all(f["repaired"] for f in json.loads(fixed.stdout)["findings"])
    assert json.loads(cli("reconcile", "--json").stdout)["findings"] == []
    for item in (edited, deleted):
        assert is_copy_of(item["friendly_path"], item["object_path"])
    assert not (out_dir / ".tmp").exists()
    text = cli("reconcile", "--repair")
    assert text.exit_code == 0 and "clean" in text.stdout


def test_a_later_batch_never_overwrites_an_edited_thumbnail_unless_asked(cli, tmp_path: Path, out_dir: Path) -> None:
    source = tmp_path / "src"
    make_image(source / "sofa.jpg", (600, 400), "JPEG", seed=3)
    reused_here(cli, source, out_dir, "--size", "128")
    thumb = out_dir / "sofa.1x1.jpg"
    with open(thumb, "r+b") as fh:
        fh.seek(50)
        fh.write(b"\xff" * 8)
    edited = thumb.read_bytes()
    taken, _ = reused_here(cli, source, out_dir, "--size", "96", states=EXIT_1)
    assert thumb.read_bytes() == edited
    assert taken["failures"][0]["error_code"] == "name_taken"
    forced, _ = reused_here(cli, source, out_dir, "--size", "64", "--overwrite")
    assert forced["overwritten"] == 1
    with Image.open(thumb) as image:
        assert image.size == (64, 64)


def test_commands_without_store_use_the_store_the_ledger_recorded(
    cli, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "my-store"
    assert cli("submit", photos, "--out", out_dir, "--store", store, "-w", "1", "-r", "1:1", "-q").exit_code == 0
    stray = store / "objects" / "ab" / f"{'ab' * 32}.jpg"
    make_image(stray, (8, 8), "JPEG")
    found = cli("reconcile", "--json")
    assert found.exit_code == 1
    assert [(f["kind"], f["path"]) for f in json.loads(found.stdout)["findings"]] == [("orphan_object", str(stray))]
    gone = cli("gc", "--older-than", "30d", "--json")
    assert gone.exit_code == 0 and not stray.exists() and len(objects_in(store)) == 4
    elsewhere = tmp_path / "one-off"
    assert cli("reconcile", "--store", elsewhere, "-q").exit_code == 0  # a store for this run only
    assert cli("gc", "--older-than", "30d", "--store", elsewhere, "-q").exit_code == 0
    assert cli("work", "--until-idle", "--store", elsewhere, "-q").exit_code == 0
    again = cli("submit", photos, "--out", out_dir, "-w", "1", "-r", "1:1", "--key", "again", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["state"] == "succeeded"
    assert len(objects_in(store)) == 4 and not (tmp_path / "ledger.store").exists()  # reused, not rendered anew
    assert not objects_in(elsewhere)


def test_a_submit_that_gives_the_ledger_another_store_says_so(cli, photos: Path, out_dir: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "first-store", tmp_path / "second-store"
    assert cli("submit", photos, "--out", out_dir, "--store", first, "--detach", "--json").exit_code == 0
    moved = cli("submit", photos, "--out", out_dir, "--store", second, "--detach", "--json")
    assert moved.exit_code == 0 and json.loads(moved.stdout)["replayed"]
    assert moved.stderr == (
        f"store this ledger used the store {first} until now and uses {second} from here on (--store): the objects "
        "in the earlier one are no longer reused, checked or collected; give its path as --store to go back\n"
    )
    assert cli("submit", photos, "--out", out_dir, "--store", second, "--detach", "--json").stderr == ""
    quiet = cli("submit", photos, "--out", out_dir, "--store", first, "--detach", "-q")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
    odd = cli("submit", photos, "--out", out_dir, "--store", tmp_path / "odd\x1b[2J", "--detach", "--json")
    assert odd.exit_code == 0 and f"uses {tmp_path}/odd?[2J from here on" in odd.stderr


def test_a_postgresql_ledger_needs_a_store(cli, pg_url: str, photos: Path, out_dir: Path, tmp_path: Path) -> None:
    for args in ([], ["--json"]):
        result = cli("submit", photos, "--out", out_dir, "--db", pg_url, "--detach", *args)
        assert result.exit_code == 2
        message = (
            "a PostgreSQL ledger needs --store DIR (or THUMBCTL_STORE, config key store): a folder on the "
            "filesystem every worker host shares, where the rendered objects are kept"
        )
        if args:
            assert json.loads(result.stdout)["error"] == {
                "code": "store_required",
                "message": message,
                "transient": False,
                "exit_code": 2,
            }
        else:
            assert result.stderr == f"error [store_required] {message}\n"
    for command in (["reconcile"], ["gc", "--older-than", "30d"]):
        result = cli(*command, "--db", pg_url, "--json")
        assert (result.exit_code, json.loads(result.stdout)["error"]["code"]) == (2, "store_required")
    store = tmp_path / "shared-store"
    done = submit_here(
        Thumbctl(pg_url), photos, "--out", out_dir, "--db", pg_url, "--store", store, "-w", "1", "-r", "1:1"
    )
    items = items_of_db(cli, pg_url, done["batch_id"])
    assert all(i["object_path"].startswith(f"{store}/objects/") for i in items)
    assert cli("reconcile", "--db", pg_url, "--store", store).exit_code == 0


def items_of_db(cli, db: str, batch_id: str) -> list[dict]:
    return json.loads(cli("status", batch_id, "--items", "--json", "--db", db).stdout)["items"]


def test_a_second_ledger_pointed_at_a_store_is_refused(cli, photos: Path, out_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert cli("submit", photos, "--out", out_dir, "--store", store, "--detach").exit_code == 0
    other = tmp_path / "other.db"
    for command in (["submit", photos, "--out", tmp_path / "out2", "--detach"], ["gc", "--older-than", "1d"]):
        refused = cli(*command, "--db", other, "--store", store, "--json")
        error = json.loads(refused.stdout)["error"]
        assert (refused.exit_code, error["code"]) == (2, "store_taken")
        assert str(tmp_path / "ledger.db") in error["message"] and str(other) in error["message"]
    text = cli("reconcile", "--db", other, "--store", store)
    assert text.exit_code == 2 and text.stderr.startswith(f"error [store_taken] the store {store} belongs to ledger ")
    cli("status", "--db", other)  # creates nothing: `work` needs a ledger that exists
    assert cli("submit", photos, "--out", tmp_path / "out3", "--db", other, "--detach").exit_code == 0
    assert cli("work", "--until-idle", "--db", other, "--store", store).exit_code == 2  # checked for work too
    assert not (tmp_path / "out2").exists()


def test_gc_removes_an_orphan_object_from_the_store_never_a_referenced_one(
    cli, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    code, doc, _ = submit_json(cli, photos, out_dir, "-r", "1:1")
    assert code == 0
    work_here(doc["batch_id"])
    referenced = {i["object_path"]: sha(i["object_path"]) for i in item_list(cli, doc["batch_id"])}
    orphan = tmp_path / "ledger.store" / "objects" / "ff" / ("f" * 64 + ".jpg")
    orphan.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(next(iter(referenced)), orphan)
    gc = cli("gc", "--older-than", "30d", "--json")
    assert gc.exit_code == 0 and json.loads(gc.stdout)["objects_removed"] == 1
    assert not orphan.exists() and not orphan.parent.exists()
    assert {path: sha(path) for path in referenced} == referenced
    assert cli("reconcile").exit_code == 0
