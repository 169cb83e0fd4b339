"""Which stream carries what (DESIGN section 2): results on stdout; progress, warnings, hints and
errors on stderr; plain text without control codes on a pipe, whichever stream a terminal is on.

Every command runs as a real process against a real ledger: stdout and stderr are separate
pipes, or one of them is a pseudo-terminal (the empty ledger's hint is read in this process).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_IMAGES
from harness import Thumbctl
from support import make_image

ANSI = "\x1b["
#: What Rich writes on a terminal: colours, and the live view's cursor moves.
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@dataclass(frozen=True)
class Made:
    """A ledger holding three real batches, each for the commands that change it."""

    root: Path
    env: dict[str, str]
    photos: Path
    out: Path
    main: str  # partial: 2 succeeded, 1 failed corrupt_image at render; only read or replayed
    retried: str  # partial like main; `retry --detach` puts its failed item back
    cancelled: str  # detached; `cancel` ends it

    def argv(self, template: tuple[str, ...]) -> list[str]:
        names = {"B": self.main, "R": self.retried, "C": self.cancelled, "photos": str(self.photos)}
        names |= {"out": str(self.out), "root": str(self.root)}
        return [part.format(**names) for part in template]


def clean_env(root: Path, db: Path) -> dict[str, str]:
    """This tree's thumbctl on ``db``, with no setting, colour switch or config file of the machine."""
    dropped = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "PYTHONUNBUFFERED")
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUMBCTL_") and k not in dropped}
    env |= {"PYTHONPATH": str(REPO), "THUMBCTL_DB": str(db), "XDG_CONFIG_HOME": str(root / "config-home")}
    env |= {"THUMBCTL_STATS_INTERVAL": "0.5", "TERM": "xterm-256color"}
    return env


def photo_folder(folder: Path, seed: int) -> Path:
    """Two photos and one JPEG cut short: a sound header, so it is accepted and fails when rendered."""
    folder.mkdir(parents=True)
    shutil.copy(SAMPLE_IMAGES / "public-domain" / "sk-coffee.png", folder / "coffee.png")
    make_image(folder / "garden.jpeg", (200, 320), "JPEG", seed=seed)
    whole = make_image(folder / "whole.jpg", (320, 200), "JPEG", seed=seed + 1).read_bytes()
    (folder / "whole.jpg").unlink()
    (folder / "cut.jpg").write_bytes(whole[: len(whole) // 3])
    return folder


def piped(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thumbctl", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    root = tmp_path_factory.mktemp("streams")
    env = clean_env(root, root / "ledger.db")
    ids = []
    for n, extra in enumerate(([], [], ["--detach"])):
        folder = photo_folder(root / f"photos{n}", seed=10 * n)
        args = ["submit", str(folder), "--out", str(root / f"out{n}"), "-r", "1:1", "-w", "1", "--json", *extra]
        done = piped(env, args)
        assert done.returncode == (0 if extra else 1), done.stderr
        ids.append(json.loads(done.stdout)["batch_id"])
    return Made(root, env, root / "photos0", root / "out0", *ids)


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    code: int
    result: str  # on stdout, never on stderr
    diagnostic: str | None = None  # on stderr, never on stdout

    def __str__(self) -> str:
        return " ".join(self.argv)


#: One or more cases for every command. ``{B}`` and the like are filled in from :class:`Made`.
CASES = [
    # the end of a foreground run is its result; the replay notice before it is not
    Case(("submit", "{photos}", "--out", "{out}", "-r", "1:1", "-w", "1"), 1, "Batch {B} partial", "Replayed existing"),
    Case(("submit", "{photos}", "--out", "{out}", "-r", "1:1", "--detach"), 0, "Replayed existing batch {B}"),
    Case(("submit", "{root}/nowhere", "--out", "{out}"), 2, "", "error [source_not_found]"),
    Case(("work", "--until-idle", "-w", "1"), 0, "Workers finished", "work: runnable"),
    Case(("status",), 0, "{B}"),
    Case(("status", "{B}"), 0, "{B}  partial  3/3 done"),
    Case(("status", "{B}", "--items"), 0, "cut.jpg"),
    Case(("status", "{B}", "--watch"), 0, "{B}  partial", "{B} partial 3/3 done"),
    Case(("status", "{B}", "--html"), 0, "<picture>"),
    Case(("status", "b_nope"), 2, "", "error [batch_not_found]"),
    Case(("events", "{B}"), 0, "running → failed"),
    Case(("events", "{B}", "--item", "cut.jpg"), 0, "corrupt_image"),
    Case(("events", "b_nope"), 2, "", "error [batch_not_found]"),
    Case(("retry", "{R}", "--detach"), 0, "Requeued"),
    Case(("cancel", "{C}"), 0, "Batch {C} is "),
    Case(("cancel", "b_nope"), 2, "", "error [batch_not_found]"),
    Case(("stats",), 0, "queue: runnable"),
    Case(("stats", "--prometheus", "{root}/metrics.prom"), 0, "Prometheus metrics written to {root}/metrics.prom"),
    Case(("stats", "--window", "soon"), 2, "", "error [usage]"),
    Case(("codes",), 0, "timeout              permanent"),
    Case(("config",), 0, "config file: "),
    Case(("config", "--size", "0"), 2, "", "error ["),
    Case(("sheet", "{B}", "-o", "{root}/review.html"), 0, "{root}/review.html"),
    Case(("sheet", "b_nope"), 2, "", "error [batch_not_found]"),
    Case(("reconcile",), 0, "clean: no findings"),
    Case(("gc", "--older-than", "30d", "--dry-run"), 0, "would expire 0 batches"),
    Case(("gc",), 2, "", "error [usage]"),
    Case(("--version",), 0, "thumbctl "),
    Case(("--help",), 0, "Usage: thumbctl"),
    Case(("events", "--help"), 0, "Usage: thumbctl events"),
]

#: The commands that print one JSON document with --json.
JSON_CASES = [c for c in CASES if c.argv[0] not in ("work", "--version", "--help") and "--help" not in c.argv]
JSON_CASES = [c for c in JSON_CASES if "--html" not in c.argv and "--prometheus" not in c.argv]


def filled(made: Made, case: Case) -> tuple[list[str], str, str | None]:
    names = {"B": made.main, "R": made.retried, "C": made.cancelled, "root": str(made.root)}
    diagnostic = case.diagnostic.format(**names) if case.diagnostic else None
    return made.argv(case.argv), case.result.format(**names), diagnostic


@pytest.mark.parametrize("case", CASES, ids=str)
def test_on_pipes_the_result_is_on_stdout_the_rest_on_stderr_and_neither_has_control_codes(
    made: Made, case: Case
) -> None:
    argv, result, diagnostic = filled(made, case)
    done = piped(made.env, argv)
    assert done.returncode == case.code, (done.stdout, done.stderr)
    if result:
        assert result in done.stdout and result not in done.stderr, (done.stdout, done.stderr)
    else:  # an error: nothing on stdout
        assert done.stdout == ""
    if diagnostic:
        assert diagnostic in done.stderr and diagnostic not in done.stdout, (done.stdout, done.stderr)
    else:  # a result and nothing to say beside it
        assert done.stderr == ""
    if case.code not in (0, 1):  # an error is one line on stderr, naming its code
        assert done.stderr.startswith("error [") and len(done.stderr.splitlines()) == 1
    assert ANSI not in done.stdout and ANSI not in done.stderr
    assert "\r" not in done.stdout and "\r" not in done.stderr


@pytest.mark.parametrize("case", JSON_CASES, ids=str)
def test_with_json_stdout_is_one_document_and_an_error_is_also_one_line_on_stderr(made: Made, case: Case) -> None:
    argv, _, _ = filled(made, case)
    done = piped(made.env, [*argv, "--json"])
    assert done.returncode == case.code, (done.stdout, done.stderr)
    doc = json.loads(done.stdout)  # the whole of stdout, one document
    if case.code in (0, 1):
        assert "error" not in doc
        assert done.stderr == ""  # no notice, progress or summary beside the document
    else:
        assert doc["error"]["exit_code"] == case.code
        assert done.stderr == f"error [{doc['error']['code']}] {doc['error']['message']}\n"
    assert ANSI not in done.stdout + done.stderr


def run_on_terminal(env: dict[str, str], argv: list[str], terminal: str) -> tuple[int, str, str]:
    """Run thumbctl with ``terminal`` ("stdout" or "stderr") on a pseudo-terminal and the other
    stream a pipe; return the exit code and what each stream got."""
    main_fd, child_fd = os.openpty()
    os.set_blocking(main_fd, True)
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, terminal: child_fd}
    env = {**env, "COLUMNS": "200", "LINES": "50"}
    proc = subprocess.Popen([sys.executable, "-m", "thumbctl", *argv], stdin=subprocess.DEVNULL, env=env, **streams)
    os.close(child_fd)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main_fd)
    piped_text = (proc.stderr if terminal == "stdout" else proc.stdout).read().decode()  # type: ignore[union-attr]
    code = proc.wait(timeout=120)
    on_terminal = b"".join(chunks).decode().replace("\r\n", "\n")
    return (code, on_terminal, piped_text) if terminal == "stdout" else (code, piped_text, on_terminal)


TERMINAL_CASES = [c for c in CASES if c.argv[0] not in ("--version", "--help") and "--help" not in c.argv]


@pytest.mark.parametrize("case", TERMINAL_CASES, ids=str)
def test_with_stdout_on_a_terminal_the_result_is_still_there_and_stderr_stays_plain(made: Made, case: Case) -> None:
    argv, result, diagnostic = filled(made, case)
    code, out, err = run_on_terminal(made.env, argv, "stdout")
    assert code == case.code, (out, err)
    shown = CONTROL.sub("", out)
    if result:
        assert result in shown, shown  # colour allowed here
        assert result not in err
    if diagnostic:
        assert diagnostic in err and diagnostic not in shown
    assert ANSI not in err


@pytest.mark.parametrize(
    ("template", "code", "result"),
    [
        pytest.param(("submit", "{photos}", "--out", "{out}", "-r", "1:1"), 1, "Batch {B} partial", id="submit"),
        pytest.param(("status", "{B}"), 0, "{B}  partial  3/3 done", id="status"),
        pytest.param(("events", "{B}"), 0, "running → failed", id="events"),
        pytest.param(("codes",), 0, "timeout              permanent", id="codes"),
    ],
)
def test_with_stderr_on_a_terminal_stdout_on_a_pipe_stays_plain(
    made: Made, template: tuple[str, ...], code: int, result: str
) -> None:
    """Each stream decides for itself: a terminal on stderr does not bring colour into a pipe."""
    done, out, err = run_on_terminal(made.env, made.argv(template), "stderr")
    assert done == code, (out, err)
    assert result.format(B=made.main) in out and ANSI not in out and "\r" not in out


def test_events_piped_to_wc_counts_the_events_and_codes_piped_to_grep_finds_the_code(made: Made) -> None:
    events = json.loads(piped(made.env, ["events", made.main, "--json"]).stdout)["events"]
    lines = piped(made.env, ["events", made.main]).stdout.splitlines()
    assert len(lines) == 1 + len(events)  # a header, then one line an event
    codes = [line for line in piped(made.env, ["codes"]).stdout.splitlines() if "timeout" in line]
    assert [line.split()[:2] for line in codes] == [["source_timeout", "transient"], ["timeout", "permanent"]]


def test_a_foreground_submit_with_stderr_discarded_prints_only_the_run_summary(made: Made, tmp_path: Path) -> None:
    """`thumbctl submit … 2>/dev/null`: where the thumbnails are, the sheet's link, the counts."""
    folder = photo_folder(tmp_path / "fresh", seed=99)
    out = tmp_path / "out"
    done = piped(made.env, ["submit", str(folder), "--out", str(out), "-r", "1:1", "-w", "1"])
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    batch_id = lines[0].split()[1]
    sheet = (Path(os.path.realpath(out)) / "batches" / "catalogue.html").as_uri()  # the catalogue's, changes first
    assert lines[0] == f"Batch {batch_id} partial"
    assert lines[1] == "  succeeded 2, failed 1"
    assert lines[-2].startswith(f"  thumbnails in {os.path.realpath(out)}, manifest ")
    assert lines[-1] == f"  contact sheet {sheet}"
    assert "Accepted batch" in done.stderr and " done (" in done.stderr  # the notice and the progress
    assert "Accepted batch" not in done.stdout and " done (" not in done.stdout


def test_an_empty_ledger_lists_nothing_on_stdout_and_says_how_to_start_on_stderr(tmp_path: Path) -> None:
    """Run in this process: which stream says what, with neither a terminal (as on pipes)."""
    done = Thumbctl(tmp_path / "ledger.db", base=clean_env(tmp_path, tmp_path / "ledger.db")).invoke("status")
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr.startswith("No batches yet.")
