"""The documentation is true: every command it shows runs, every snippet parses, the CLI reference is current.

How the documented commands are run, file by file (README.md and each docs/*.md), in the order
they appear, in one fresh workspace per file (``sample_images/`` and a copy of it as ``photos/``;
HOME and the XDG folders inside the workspace, so the default ledger is new):

- ```` ```console ````, ```` ```sh ````, ```` ```shell ```` and ```` ```bash ```` blocks: every line
  ``thumbctl …``, ``$ thumbctl …`` or ``$ VAR=value thumbctl …`` runs in bash (``pipefail``), with
  ``thumbctl`` being this tree; so does every ``sqlite-utils …`` line (:data:`TOOLS`: the CLI
  installed with thumbctl's dependency). In ``console`` blocks, ``$`` lines whose first word is a
  setup command (:data:`SETUP_COMMANDS`: ``echo``, ``mkdir``, …) run too; lines without ``$`` are
  output. Any other command (``systemctl``, ``datasette``, ``psql``, …) is shown, not run.
- ```` ```cron ```` blocks: the command after the five time fields, from ``thumbctl`` on.
- ```` ```ini ```` blocks (systemd units) are parsed with configparser; an ``ExecStart`` running
  ``thumbctl work`` runs with ``--until-idle`` added (the service itself runs until stopped).
- ``thumbctl watch`` (in any of these) runs until its first round's line on stdout, then gets
  Ctrl-C and must exit 130 (or the code of a ``# exit N`` comment). It runs with ``--settle
  0.1s`` added unless the line sets ``--settle``: the files of the workspace are not being written,
  so the first round only waits out the settle time (2 s by default; ``tests/test_watch.py`` tests
  the rule). ``thumbctl review`` likewise runs until its address on stdout, with ``--no-browser``.
- ```` ```yaml ```` blocks (the CI job) are parsed by :func:`parse_yaml`, a small parser of the
  block-style subset the docs use (no PyYAML dependency); the job's structure is checked and each
  ``run:`` line starting with ``thumbctl`` runs with the job's ``env``.
- ```` ```toml ```` blocks are loaded by thumbctl's own config loader (unknown keys fail);
  ```` ```json ````/```` ```jsonl ````/```` ```csv ```` blocks must parse. A block whose info string
  has ``title="PATH"`` is written to PATH in the workspace, so the commands after it can use it.
- A ```` ```json ```` block right after a command run with ``--json`` is that command's documented
  output: its keys must be the keys of the real output, recursively (a ``"…"`` key marks a map of
  open-ended keys: only the keys shown are compared).
- ```` ```python ```` blocks run as scripts in the workspace.

Placeholders and expectations: ``BATCH`` is replaced by the newest batch of the ledger the line
uses (its ``--db``, else ``THUMBCTL_DB``, else the default), looked up with ``status --json`` run in
this process (Typer's test runner, in the workspace's folder and environment). A
line passes when it exits 0, or the code named by a trailing ``# exit N`` comment. Absolute example
paths (:data:`PATH_MAP`) are mapped into the workspace. Files in :data:`NEEDS_POSTGRES` run with
``THUMBCTL_DB`` set to a fresh database on ``THUMBCTL_TEST_PG`` and are skipped without it; files in
:data:`NEEDS_S3` with the AWS variables of the test process's S3 server (its bucket ``thumbs``).
"""

from __future__ import annotations

import configparser
import contextlib
import csv
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from thumbctl.cli.app import app
from thumbctl.config.resolve import ENVIRONMENT_KEYS, KEYS, load_config_file

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_LIMIT = 8 * 1024
#: The map of the code and the measured figures describe the current state, briefly; their history is in git.
CURRENT_STATE_DOCS = ("architecture.md", "benchmarks.md")
CURRENT_STATE_LIMIT = 500
HISTORY_NARRATION = re.compile(r"\b(?:issue \d+|(?:first|second|third|fourth|fifth) pass)\b", re.IGNORECASE)
GUIDES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
NEEDS_POSTGRES = {"scaling-out.md"}
#: Files whose commands use s3:// locations: run with the AWS variables of the test S3 server.
NEEDS_S3 = {"scaling-out.md"}
SETUP_COMMANDS = {"echo", "mkdir", "cp", "touch", "printf", "rm", "ls", "cat"}
#: The commands a documented line may start with to run: thumbctl, and the sqlite-utils CLI it installs.
TOOLS = ("thumbctl", "sqlite-utils")
RUNS = re.compile(rf"^([A-Z_][A-Z0-9_]*=\S*\s+)*({'|'.join(map(re.escape, TOOLS))})(\s|$)")
#: Absolute paths of examples -> folders of the workspace.
PATH_MAP = {"/mnt/shop/": "mnt/shop/", "/var/lib/node_exporter/textfile/": "textfile/", "/run/": "run/"}
COMMAND_TIMEOUT = 600
WATCH_SETTLE = "0.1s"
QUICK_START = [
    "python3 -m venv .venv && . .venv/bin/activate && pip install -q . && thumbctl submit sample_images --out thumbs",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -q '.[test]' && pytest",
]


# -- reading the docs ---------------------------------------------------------------------------


@dataclass
class Block:
    lang: str
    title: str | None
    text: str
    line: int


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a markdown file, in order."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w[\w+-]*)?(.*)$", lines[i])
        if not fence:
            i += 1
            continue
        indent, lang, rest = fence.group(1), (fence.group(2) or ""), fence.group(3)
        title = re.search(r'title="([^"]+)"', rest)
        start, body = i + 1, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        found.append(Block(lang.lower(), title.group(1) if title else None, "\n".join(body), start))
        i += 1
    return found


def command_lines(block: Block) -> list[str]:
    """The lines of a shell or console block that run (continuations joined)."""
    joined: list[str] = []
    for raw in block.text.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if block.lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:].strip()
            first = line.split()[0] if line.split() else ""
            if first in SETUP_COMMANDS:
                joined.append(line)
                continue
        if RUNS.match(line):
            joined.append(line)
    return joined


def cron_commands(block: Block) -> list[str]:
    commands = []
    for line in block.text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split(None, 5)
        assert len(fields) == 6, f"cron line needs five time fields and a command: {line!r}"
        for spec in fields[:5]:
            assert re.fullmatch(r"[\d*,/-]+", spec), f"bad cron time field {spec!r} in {line!r}"
        if "thumbctl " in fields[5]:
            commands.append(fields[5][fields[5].index("thumbctl ") :])
    return commands


def expected_exit(line: str) -> int:
    marked = re.search(r"#\s*exit\s+(\d+)\s*$", line)
    return int(marked.group(1)) if marked else 0


# -- a small YAML reader (block style: mappings, sequences, scalars, | blocks) ----------------------


def parse_yaml(text: str) -> Any:
    """Parse the block-style YAML subset a CI workflow uses; raises ValueError naming the line."""
    reader = _Yaml(text)
    value = reader.node()
    reader.skip()
    if reader.i < len(reader.lines):
        raise ValueError(f"line {reader.lines[reader.i][2]}: unexpected content")
    return value


class _Yaml:
    def __init__(self, text: str) -> None:
        self.lines: list[tuple[int, str, int]] = []
        for number, raw in enumerate(text.splitlines(), 1):
            lead = raw[: len(raw) - len(raw.lstrip())]
            if "\t" in lead:
                raise ValueError(f"line {number}: tab in indentation")
            self.lines.append((len(lead), raw.strip(), number))
        self.i = 0

    def skip(self) -> None:
        while self.i < len(self.lines) and (not self.lines[self.i][1] or self.lines[self.i][1].startswith("#")):
            self.i += 1

    def node(self) -> Any:
        self.skip()
        indent, text, _ = self.lines[self.i]
        return self.sequence(indent) if text == "-" or text.startswith("- ") else self.mapping(indent)

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while True:
            self.skip()
            if self.i >= len(self.lines) or self.lines[self.i][0] < indent:
                return out
            at, text, number = self.lines[self.i]
            if at > indent:
                raise ValueError(f"line {number}: unexpected indentation")
            if text.startswith("- "):
                return out
            key, colon, rest = text.partition(":")
            if not colon or (rest and not rest.startswith(" ")) or not key.strip():
                raise ValueError(f"line {number}: expected 'key: value', got {text!r}")
            if key.strip() in out:
                raise ValueError(f"line {number}: duplicate key {key.strip()!r}")
            self.i += 1
            out[key.strip()] = self.value(_uncommented(rest.strip()), indent)

    def value(self, rest: str, indent: int) -> Any:
        if rest in ("|", "|-", ">", ">-"):
            return self.text_block(indent)
        if rest:
            return _scalar(rest)
        self.skip()
        if self.i < len(self.lines):
            at, text, _ = self.lines[self.i]
            if at > indent or (at == indent and text.startswith("- ")):
                return self.node()
        return None

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while True:
            self.skip()
            if self.i >= len(self.lines):
                return out
            at, text, number = self.lines[self.i]
            if at < indent or not (text == "-" or text.startswith("- ")):
                if at > indent:
                    raise ValueError(f"line {number}: unexpected indentation")
                return out
            body = text[1:].strip()
            if re.match(r"^[\w.-]+:(\s|$)", body):
                self.lines[self.i] = (indent + 2, body, number)  # "- key: v" opens a mapping
                out.append(self.mapping(indent + 2))
            else:
                self.i += 1
                out.append(_scalar(_uncommented(body)))

    def text_block(self, indent: int) -> str:
        body: list[tuple[int, str]] = []
        while self.i < len(self.lines) and (not self.lines[self.i][1] or self.lines[self.i][0] > indent):
            body.append(self.lines[self.i][:2])
            self.i += 1
        return "\n".join(text for _, text in body).strip("\n")


def _uncommented(value: str) -> str:
    if value[:1] in "\"'":
        return value
    return value.split(" #", 1)[0].rstrip()


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    if value[:1] in "[{":
        raise ValueError(f"flow collections are not used in these docs: {value!r}")
    return value


# -- running ------------------------------------------------------------------------------------


@dataclass
class Workspace:
    root: Path
    env: dict[str, str]
    last: tuple[str, str] | None = None  # (line, stdout) of the last command run with --json
    ran: int = 0

    def run(self, line: str, *, where: str, extra_env: dict[str, str] | None = None) -> None:
        line = self.with_paths(line)
        if re.search(r"\bBATCH\b", line):
            line = re.sub(r"\bBATCH\b", self.newest_batch(line, extra_env), line)
        env = {**self.env, **(extra_env or {})}
        if re.match(r"^([A-Z_][A-Z0-9_]*=\S*\s+)*thumbctl\s+(watch|review)\b", line):
            self.run_until_stopped(line, env, where)
            return
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        want = expected_exit(line)
        assert done.returncode == want, (
            f"{where}: `{line}` exited {done.returncode}, the docs say {want}\n"
            f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
        )
        self.ran += 1
        self.last = (line, done.stdout) if "--json" in line.split("#")[0] else None

    def run_until_stopped(self, line: str, env: dict[str, str], where: str) -> None:
        """``thumbctl watch`` and ``thumbctl review`` run until stopped: here until their first line
        on stdout (a watch's first round, the review's address), then Ctrl-C, after which they exit
        130 (or the code the docs name). A review opens no browser here."""
        command, _, comment = line.partition(" #")
        review = re.search(r"\bthumbctl\s+review\b", command) is not None
        if review and "--no-browser" not in command:
            command += " --no-browser"
        if not review and "--settle" not in command:
            command += f" --settle {WATCH_SETTLE}"
        line = command + (f" #{comment}" if comment else "")
        proc = subprocess.Popen(
            ["bash", "-o", "pipefail", "-c", f"exec {line}"],
            cwd=self.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            first = proc.stdout.readline() if proc.stdout else ""
            os.killpg(proc.pid, signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=COMMAND_TIMEOUT)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        want = expected_exit(line) or 130
        started = r'^(Review of |\{"url": )' if review else r'^(round 1:|\{"round": 1,)'
        assert re.match(started, first) and proc.returncode == want, (
            f"{where}: `{line}` exited {proc.returncode} after {first!r}, the docs say it starts, then {want}\n"
            f"stdout: {stdout[-2000:]}\nstderr: {stderr[-2000:]}"
        )
        self.ran += 1
        self.last = None

    def with_paths(self, line: str) -> str:
        for example, local in PATH_MAP.items():
            if example in line:
                (self.root / local).mkdir(parents=True, exist_ok=True)
                line = line.replace(example, f"{self.root}/{local}")
        return line

    def newest_batch(self, line: str, extra_env: dict[str, str] | None) -> str:
        tokens = shlex.split(line.split(" #")[0])
        db = tokens[tokens.index("--db") + 1] if "--db" in tokens else None
        env: dict[str, str | None] = {name: None for name in os.environ}
        env.update({**self.env, **(extra_env or {})})
        with contextlib.chdir(self.root):
            done = CliRunner().invoke(app, ["status", "--json", *(["--db", db] if db else [])], env=env)
        assert done.exit_code == 0, f"`status --json` for `{line}` exited {done.exit_code}: {done.stderr}"
        batches = json.loads(done.stdout)["batches"]
        assert batches, f"`{line}` needs a BATCH but the ledger has none"
        return max(batches, key=lambda batch: batch["created_at"])["batch_id"]

    def write(self, relative: str, text: str) -> None:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")


def make_workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copytree(ROOT / "sample_images", root / "sample_images")
    shutil.copytree(ROOT / "sample_images", root / "photos")
    shutil.copytree(ROOT / "sample_images", root / "mnt/shop/photos")  # the shared folder of scaling-out.md
    home = tmp_path / "home"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, module in (("thumbctl", "thumbctl"), ("sqlite-utils", "sqlite_utils")):
        wrapper = bin_dir / tool
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        wrapper.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("THUMBCTL_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local/state"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local/share"),
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
        NO_COLOR="1",
    )
    return Workspace(root, env)


def compare_shapes(documented: Any, actual: Any, where: str = "$") -> list[str]:
    """Differences between the keys of a documented JSON example and a real output, recursively."""
    if isinstance(documented, dict) and isinstance(actual, dict):
        problems = []
        if "…" not in documented:
            missing, extra = set(actual) - set(documented), set(documented) - set(actual)
            problems += [f"{where}: the output has {key!r}, the docs do not" for key in sorted(missing)]
            problems += [f"{where}: the docs show {key!r}, the output has not" for key in sorted(extra)]
        for key in set(documented) & set(actual):
            problems += compare_shapes(documented[key], actual[key], f"{where}.{key}")
        return problems
    if isinstance(documented, list) and isinstance(actual, list) and documented and actual:
        return compare_shapes(documented[0], actual[0], f"{where}[0]")
    return []


def check_ci_job(workflow: Any, where: str) -> tuple[dict[str, str], list[str]]:
    """The job caches the ledger and the store it uses; returns its env and its thumbctl run lines."""
    assert isinstance(workflow, dict) and "on" in workflow and isinstance(workflow.get("jobs"), dict), where
    (job,) = workflow["jobs"].values()
    assert job.get("runs-on") and isinstance(job.get("steps"), list), f"{where}: a job needs runs-on and steps"
    env = {key: str(value) for key, value in (job.get("env") or {}).items()}
    caches = [step for step in job["steps"] if str(step.get("uses", "")).startswith("actions/cache@")]
    assert caches, f"{where}: the job must cache the ledger and the store with actions/cache"
    cached = [path.strip() for step in caches for path in str(step["with"]["path"]).splitlines()]
    assert all(step["with"].get("key") for step in caches), f"{where}: actions/cache needs a key"
    runs = [
        line.strip()
        for step in job["steps"]
        for line in str(step.get("run", "")).splitlines()
        if line.strip().startswith("thumbctl ")
    ]
    assert runs, f"{where}: the job runs no thumbctl command"

    def inside_cache(path: str) -> bool:
        return any(path == c or path.startswith(c.rstrip("/") + "/") for c in cached)

    assert inside_cache(env.get("THUMBCTL_DB", "")), f"{where}: THUMBCTL_DB must lie in a cached path {cached}"
    for line in runs:
        tokens = shlex.split(line.split(" >")[0])
        if "--store" in tokens:
            store = tokens[tokens.index("--store") + 1]
            assert inside_cache(store), f"{where}: --store {store} must lie in a cached path {cached}"
    return env, runs


def run_doc(path: Path, space: Workspace) -> None:
    name = path.relative_to(ROOT).as_posix()
    for block in blocks(path):
        where = f"{name}:{block.line}"
        if block.lang in ("console", "sh", "shell", "bash"):
            for line in command_lines(block):
                space.run(line, where=where)
        elif block.lang == "cron":
            for line in cron_commands(block):
                space.run(line, where=where)
        elif block.lang == "ini":
            run_unit(block, space, where)
        elif block.lang == "yaml":
            env, runs = check_ci_job(parse_yaml(block.text), where)
            for line in runs:
                space.run(line, where=where, extra_env=env)
        elif block.lang == "toml":
            check_toml(block, space, where)
        elif block.lang in ("json", "jsonl", "csv"):
            check_data(block, space, where)
        elif block.lang == "python":
            run_python(block, space, where)


def run_python(block: Block, space: Workspace, where: str) -> None:
    """A Python example runs on its own: in an empty folder of its own, with the workspace's
    environment (its HOME and per-user folders), and leaves nothing but what it made there."""
    folder = space.root.parent / f"python_{block.line}"
    folder.mkdir()
    script = space.root.parent / f"snippet_{block.line}.py"
    script.write_text(block.text + "\n")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=folder, env=space.env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{where}: the Python example failed\n{done.stderr[-3000:]}"
    assert not {"ledger.db", "ledger.store"} & {p.name for p in folder.iterdir()}, (
        f"{where}: the Python example left a ledger in the current folder"
    )
    space.ran += 1


def run_unit(block: Block, space: Workspace, where: str) -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(block.text)
    assert {"Unit", "Service", "Install"} <= set(unit.sections()), f"{where}: a unit needs [Unit], [Service], [Install]"
    command = unit["Service"]["ExecStart"]
    assert "thumbctl " in command, f"{where}: ExecStart does not run thumbctl"
    line = command[command.index("thumbctl ") :]
    if " work" in line and "--until-idle" not in line:
        line += " --until-idle"
    space.run(line, where=where)


def check_toml(block: Block, space: Workspace, where: str) -> None:
    target = space.root / (block.title or f"snippet_{block.line}.toml")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block.text + "\n")
    load_config_file(target)  # raises ConfigError on bad TOML, an unknown key or a bad value
    if block.title is None:
        target.unlink()


def check_data(block: Block, space: Workspace, where: str) -> None:
    if block.lang == "json":
        value = json.loads(block.text)
        if space.last is not None and block.title is None:
            line, stdout = space.last
            problems = compare_shapes(value, json.loads(stdout))
            assert not problems, f"{where}: the JSON example of `{line}` differs:\n" + "\n".join(problems)
            space.last = None
    elif block.lang == "jsonl":
        for line in block.text.splitlines():
            json.loads(line)
    else:
        rows = list(csv.reader(io.StringIO(block.text)))
        assert rows and all(len(row) == len(rows[0]) for row in rows), f"{where}: CSV rows differ in length"
    if block.title:
        space.write(block.title, block.text)


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_every_documented_command_runs(path: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    runnable = any(b.lang in ("console", "sh", "shell", "bash", "cron", "ini", "yaml", "python") for b in blocks(path))
    if not runnable:
        pytest.skip(f"{path.name} shows no command")
    space = make_workspace(tmp_path)
    if path.name in NEEDS_POSTGRES:
        space.env["THUMBCTL_DB"] = request.getfixturevalue("pg_url")
    if path.name in NEEDS_S3:
        space.env = {k: v for k, v in space.env.items() if not k.startswith("AWS_")}
        space.env.update(request.getfixturevalue("s3_server").env())
        space.env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    run_doc(path, space)


def test_the_cli_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_cli_reference", DOCS / "gen_cli_reference.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    current = (DOCS / "cli.md").read_text() if (DOCS / "cli.md").exists() else ""
    assert current == generator.reference(), "docs/cli.md is stale: run python docs/gen_cli_reference.py"


def test_the_readme_is_short_and_starts_people_off() -> None:
    readme = (ROOT / "README.md").read_text()
    size = len(readme.encode())
    assert size <= README_LIMIT, f"README.md is {size} bytes; keep it under {README_LIMIT} and move detail to docs/"
    assert "](docs/contact-sheet.png)" in readme and (DOCS / "contact-sheet.png").exists()
    shell = [block.text for block in blocks(ROOT / "README.md") if block.lang == "sh"]
    shell_lines = [line for text in shell for line in text.splitlines()]
    assert shell_lines[:2] == QUICK_START, "the quick start must stay the two commands that install and run"
    assert QUICK_START[1].replace("pytest", 'pytest "$@"') in (ROOT / ".ci" / "run").read_text()


def test_the_readme_has_the_three_command_tour() -> None:
    (tour,) = [b for b in blocks(ROOT / "README.md") if b.lang == "console"]
    commands = [line.split()[1] for line in command_lines(tour)]
    assert commands == ["submit", "sheet", "status"]


@pytest.mark.parametrize("name", CURRENT_STATE_DOCS)
def test_architecture_and_benchmarks_stay_under_500_lines_and_tell_no_history(name: str) -> None:
    text = (DOCS / name).read_text()
    lines = len(text.splitlines())
    assert lines <= CURRENT_STATE_LIMIT, (
        f"docs/{name} is {lines} lines; keep it at most {CURRENT_STATE_LIMIT}: the current state, the history is in git"
    )
    narrated = sorted({found.group(0).lower() for found in HISTORY_NARRATION.finditer(text)})
    assert not narrated, f"docs/{name} tells its history ({narrated}): state the current rule or figure instead"


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    found = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return found


def links(path: Path) -> Iterator[tuple[str, str]]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"^[a-z]+:", target):
            file, _, anchor = target.partition("#")
            yield file, anchor


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_every_link_between_the_docs_resolves(path: Path) -> None:
    for file, anchor in links(path):
        target = (path.parent / file).resolve() if file else path
        assert target.exists(), f"{path.name} links to {file}, which does not exist"
        if anchor:
            assert anchor in anchors(target), f"{path.name} links to {file}#{anchor}, a heading that does not exist"


def test_the_settings_table_names_every_setting() -> None:
    text = (DOCS / "configuration.md").read_text()
    table = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip(" `") for line in table.splitlines() if line.startswith("| `")]
    assert rows == [key.name for key in KEYS]


def test_the_environment_only_settings_and_every_variable_are_listed() -> None:
    text = (DOCS / "configuration.md").read_text()
    table = text.split("## Settings read from the environment only", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip(" `") for line in table.splitlines() if line.startswith("| `")]
    assert rows == [key.name for key in ENVIRONMENT_KEYS]
    variables = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("|")[1].strip(" `") for line in variables.splitlines() if line.startswith("| `")]
    assert {key.env for key in (*KEYS, *ENVIRONMENT_KEYS)} <= set(listed)
    assert {"THUMBCTL_MAX_FAILURES", "THUMBCTL_STORE", "THUMBCTL_BUSY_TIMEOUT", "THUMBCTL_HOST_ID"} <= set(listed)


def test_the_settings_tables_of_configuration_md_are_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_config_reference", DOCS / "gen_config_reference.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    current = (DOCS / "configuration.md").read_text()
    assert current == generator.regenerated(current), (
        "docs/configuration.md is stale: run python docs/gen_config_reference.py"
    )


@pytest.mark.parametrize(
    "text",
    [
        'on:\n  push:\n    paths:\n      - "photos/**"\njobs:\n  a:\n    steps:\n      - uses: x@1\n        with:\n'
        "          path: |\n            one\n            two\n      - run: echo hi  # comment\n",
    ],
)
def test_the_yaml_reader_reads_the_subset_the_docs_use(text: str) -> None:
    assert parse_yaml(text) == {
        "on": {"push": {"paths": ["photos/**"]}},
        "jobs": {"a": {"steps": [{"uses": "x@1", "with": {"path": "one\ntwo"}}, {"run": "echo hi"}]}},
    }


@pytest.mark.parametrize("text", ["a: 1\n  b: 2\n", "a:\n\tb: 1\n", "a: 1\na: 2\n", "just text\n"])
def test_the_yaml_reader_refuses_what_it_does_not_understand(text: str) -> None:
    with pytest.raises(ValueError):
        parse_yaml(text)
