"""The option set: -h everywhere, --db/--json/-q/-v on the root and on commands, one meaning per short
flag, BATCH positional (with --batch kept), completion values, help panels and help length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from thumbctl.cli import app, main
from thumbctl.config.resolve import KEYS, KEYS_BY_NAME
from thumbctl.config.settings import ALL_KEYS

from inprocess import render_here
from support import make_image

GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)  # type: ignore[attr-defined]


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run thumbctl in-process from tmp_path; THUMBCTL_DB names a ledger that does not exist, so a
    command that ignored --db would fail."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THUMBCTL_DB", str(tmp_path / "not-this.db"))
    runner = CliRunner()

    def run(*args: object, env: dict[str, str] | None = None):
        return runner.invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)

    return run


@pytest.fixture
def rendered(invoke, photos: Path, tmp_path: Path) -> tuple[Path, str]:
    """A ledger (not the THUMBCTL_DB one) holding one rendered batch: (its path, the batch id),
    rendered in this process."""
    db = tmp_path / "ledger.db"
    result = invoke("submit", photos, "--out", tmp_path / "out", "--db", db, "--detach", "--json")
    assert result.exit_code == 0, result.stderr
    batch_id = json.loads(result.stdout)["batch_id"]
    render_here(db, batch_id)
    return db, batch_id


# -- -h and usage lines ------------------------------------------------------------------------


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_dash_h_is_help_on_the_root_and_every_command(invoke, command: str | None) -> None:
    result = invoke(*filter(None, [command]), "-h")
    assert result.exit_code == 0
    usage = result.stdout.splitlines()[0]
    assert usage.startswith(f"Usage: thumbctl {command or ''}".rstrip())
    assert "{" not in usage and "[[" not in usage


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("submit", "Usage: thumbctl submit [OPTIONS] SOURCE"),
        ("status", "Usage: thumbctl status [OPTIONS] [BATCH]"),
        ("work", "Usage: thumbctl work [OPTIONS] [BATCH]"),
        ("stats", "Usage: thumbctl stats [OPTIONS] [BATCH]"),
        ("events", "Usage: thumbctl events [OPTIONS] BATCH"),
    ],
)
def test_usage_lines_read_as_typed(invoke, command: str, usage: str) -> None:
    assert invoke(command, "--help").stdout.splitlines()[0] == usage


# -- root and command-level --db, --json, -q ------------------------------------------------------

#: Each command line (BATCH and PHOTOS filled in), run with the common flags before and after the command.
COMMAND_LINES = [
    ["status"],
    ["status", "BATCH"],
    ["status", "BATCH", "--items"],
    ["events", "BATCH"],
    ["cancel", "BATCH"],
    ["retry", "BATCH", "--detach"],
    ["sheet", "BATCH", "-o", "review.html"],
    ["stats", "BATCH"],
    ["reconcile"],
    ["gc", "--older-than", "30d", "--dry-run"],
    ["work", "--until-idle", "-w", "1"],
    ["config"],
    ["codes"],
    ["submit", "PHOTOS", "--out", "OUT", "--detach", "--no-sheet"],
]


def _filled(line: list[str], batch_id: str, tmp_path: Path, photos: Path) -> list[str]:
    names = {"BATCH": batch_id, "PHOTOS": str(photos), "OUT": str(tmp_path / "out")}
    return [names.get(word, word) for word in line]


def _comparable(command: str, stdout: str) -> object:
    """stats looks at the clock and reconcile remembers what it decoded: their documents are compared by shape."""
    doc = json.loads(stdout)
    return sorted(doc) if command in ("stats", "reconcile") else doc


@pytest.mark.parametrize("line", COMMAND_LINES, ids=lambda line: "-".join(w.lower() for w in line[:2]))
def test_root_db_and_json_mean_what_they_mean_on_the_command(
    invoke, rendered: tuple[Path, str], tmp_path: Path, photos: Path, line: list[str]
) -> None:
    db, batch_id = rendered
    args = _filled(line, batch_id, tmp_path, photos)
    before = invoke("--db", db, "--json", *args)
    after = invoke(*args, "--db", db, "--json")
    assert before.exit_code == after.exit_code == 0, (before.stderr, after.stderr)
    assert _comparable(line[0], before.stdout) == _comparable(line[0], after.stdout)
    assert not (tmp_path / "not-this.db").exists()


@pytest.mark.parametrize("line", [["status", "BATCH"], ["events", "BATCH"], ["codes"], ["config"], ["work", "-w", "1"]])
def test_root_quiet_is_the_command_quiet(
    invoke, rendered: tuple[Path, str], tmp_path: Path, photos: Path, line: list[str]
) -> None:
    db, batch_id = rendered
    args = _filled(line, batch_id, tmp_path, photos)
    if args[0] == "work":
        args.append("--until-idle")
    before, after = invoke("-q", "--db", db, *args), invoke(*args, "-q", "--db", db)
    assert (before.exit_code, before.stdout, before.stderr) == (after.exit_code, after.stdout, after.stderr)
    loud = invoke(*args, "--db", db)
    assert (loud.stdout + loud.stderr) != (after.stdout + after.stderr)


def test_the_command_db_wins_over_the_root_db(invoke, rendered: tuple[Path, str], tmp_path: Path) -> None:
    db, batch_id = rendered
    result = invoke("--db", tmp_path / "other.db", "status", batch_id, "--db", db, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["batch_id"] == batch_id
    missing = invoke("--db", db, "status", batch_id, "--db", tmp_path / "other.db", "--json")
    assert missing.exit_code == 2 and json.loads(missing.stdout)["error"]["code"] == "no_ledger"


def test_a_root_db_is_a_flag_in_config_and_wins_over_the_environment(invoke, tmp_path: Path) -> None:
    settings = json.loads(invoke("--db", tmp_path / "x.db", "config", "--json").stdout)["settings"]
    assert settings["db"] == {"value": str(tmp_path / "x.db"), "source": "flag"}
    settings = json.loads(invoke("config", "--json").stdout)["settings"]
    assert settings["db"] == {"value": str(tmp_path / "not-this.db"), "source": "env THUMBCTL_DB"}


def test_work_json_prints_one_document(invoke, rendered: tuple[Path, str]) -> None:
    db, _ = rendered
    result = invoke("work", "--until-idle", "-w", "1", "--db", db, "--json")
    finished = {"succeeded": 0, "failed": 0, "cancelled": 0}
    expected = {"interrupted": False, "crashes": 0, "finished": finished}
    assert result.exit_code == 0 and json.loads(result.stdout) == expected


# -- BATCH positional, --batch kept ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["work", "stats"])
def test_batch_is_positional_on_work_and_stats_and_batch_is_an_alias(
    invoke, rendered: tuple[Path, str], command: str
) -> None:
    db, batch_id = rendered
    extra = ["--until-idle", "-w", "1"] if command == "work" else []
    positional = invoke(command, batch_id[:8], *extra, "--db", db, "--json")
    alias = invoke(command, "--batch", batch_id[:8], *extra, "--db", db, "--json")
    assert positional.exit_code == alias.exit_code == 0, (positional.stderr, alias.stderr)
    assert _comparable(command, positional.stdout) == _comparable(command, alias.stdout)
    if command == "stats":
        assert json.loads(positional.stdout)["batch_id"] == batch_id
    both = invoke(command, batch_id, "--batch", "b_other", *extra, "--db", db)
    assert both.exit_code == 2 and "name different batches" in both.stderr
    assert "--batch" not in invoke(command, "--help").stdout


def test_stats_of_an_unknown_batch_names_it(invoke, rendered: tuple[Path, str]) -> None:
    db, _ = rendered
    result = invoke("stats", "b_nosuch", "--db", db, "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "batch_not_found"


# -- short flags ---------------------------------------------------------------------------------


def _short_flags() -> dict[str, set[str]]:
    """Every short option of the root and every command -> the long options it stands for."""
    meanings: dict[str, set[str]] = {}
    for command in [GROUP, *GROUP.commands.values()]:  # type: ignore[attr-defined]
        for param in (p for p in command.params if p.param_type_name == "option"):
            opts = [*param.opts, *param.secondary_opts]
            longs = {o for o in opts if o.startswith("--")}
            for short in (o for o in opts if not o.startswith("--")):
                meanings.setdefault(short, set()).update(longs)
    return meanings


def test_each_short_flag_has_one_meaning_across_every_command() -> None:
    meanings = _short_flags()
    assert {short: longs for short, longs in meanings.items() if len(longs) != 1} == {}
    assert meanings["-o"] == {"--output"} and meanings["-q"] == {"--quiet"} and meanings["-v"] == {"--verbose"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_db_and_its_common_flags_where_they_mean_something(command: str) -> None:
    opts = {o for param in GROUP.commands[command].params for o in param.opts}  # type: ignore[attr-defined]
    assert "--db" in opts
    assert "--json" in opts and "-q" in opts
    if command in ("submit", "work", "retry", "status"):
        assert "-v" in opts


# -- completion ----------------------------------------------------------------------------------


def complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers for the last word of ``words`` (empty when it ends in a space)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    variables = {"_THUMBCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword), **(env or {})}
    result = CliRunner().invoke(app, [], env=variables, prog_name="thumbctl")
    assert result.exit_code == 0, result.output
    return result.stdout.split()


@pytest.mark.parametrize(
    ("words", "offered"),
    [
        ("thumbctl submit photos --crop ", ["smart", "entropy", "center"]),
        ("thumbctl config --crop e", ["entropy"]),
        ("thumbctl status b_1 --state f", ["failed"]),
        ("thumbctl status b_1 --state ", ["queued", "running", "succeeded", "failed", "cancelled"]),
        ("thumbctl submit photos -r 16", ["16:9"]),
        ("thumbctl submit photos --ratio 3", ["3:2", "3:4"]),
        ("thumbctl submit photos --format a", ["avif"]),
        ("thumbctl submit photos --format avif,", ["avif,jpeg", "avif,webp", "avif,png"]),
        ("thumbctl submit photos --format webp,jpeg,p", ["webp,jpeg,png"]),
    ],
)
def test_completion_offers_the_values_of_closed_and_open_sets(words: str, offered: list[str]) -> None:
    assert complete(words) == offered


def test_batch_ids_complete_from_the_ledger_named_by_db(rendered: tuple[Path, str], tmp_path: Path) -> None:
    db, batch_id = rendered
    assert complete(f"thumbctl --db {db} events ") == [batch_id]
    assert complete(f"thumbctl cancel --db {db} {batch_id[:4]}") == [batch_id]
    assert complete(f"thumbctl status --db {db} b_nosuch") == []
    assert complete("thumbctl stats ", {"THUMBCTL_DB": str(db)}) == [batch_id]


@pytest.mark.parametrize("ledger", ["missing.db", "garbage.db"])
def test_batch_completion_never_fails_the_shell(tmp_path: Path, ledger: str) -> None:
    (tmp_path / "garbage.db").write_bytes(b"not a database at all" * 100)
    assert complete(f"thumbctl events --db {tmp_path / ledger} ") == []


# -- the settings, declared once -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "settings"),
    [
        ("submit", [key.name for key in KEYS if key.flag]),
        ("config", [key.name for key in KEYS if key.flag]),
        ("retry", ["workers", "item_timeout", "sheet", "max_failures", "db", "store"]),
        ("work", ["workers", "item_timeout", "max_failures", "db", "store"]),
        ("reconcile", ["db", "store"]),
        ("gc", ["db", "store"]),
        ("status", ["db"]),
    ],
)
def test_each_command_takes_the_settings_that_apply_to_it(command: str, settings: list[str]) -> None:
    params = GROUP.commands[command].params  # type: ignore[attr-defined]
    envvars = {param.envvar for param in params if param.envvar}
    taken = [key.name for key in KEYS if key.env in envvars]
    assert taken == settings


def test_setting_options_read_their_env_var_and_show_defaults_in_the_docs_units(invoke) -> None:
    text = " ".join(invoke("submit", "--help").stdout.split())
    assert "--max-pixels COUNT Pixel limit per source. Default: 100M." in text
    assert "--max-bytes BYTES Byte limit per source. Default: 100MiB." in text
    assert "--crop [smart|entropy|center]" in text and "--format [jpeg|webp|avif|png][,...]" in text
    assert KEYS_BY_NAME["max_pixels"].env not in text  # the environment is listed once, in the root help


def test_a_ratio_list_in_one_flag_and_an_env_list_are_read_alike(invoke) -> None:
    flag = json.loads(invoke("config", "-r", "4:5,1:1", "--json").stdout)["settings"]["ratios"]
    env = json.loads(invoke("config", "--json", env={"THUMBCTL_RATIOS": "4:5 1:1"}).stdout)["settings"]["ratios"]
    assert flag == {"value": ["4:5", "1:1"], "source": "flag"}
    assert env == {"value": ["4:5", "1:1"], "source": "env THUMBCTL_RATIOS"}


# -- help: panels, and the environment and exit codes once -----------------------------------------


def test_submit_help_groups_its_options_in_panels(invoke) -> None:
    lines = invoke("submit", "--help").stdout.splitlines()
    sections = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert sections == [
        "Arguments:",
        "Options:",
        "Output options:",
        "Render options:",
        "Limits options:",
        "Workers options:",
        "Admission options:",
        "Common options:",
    ]


# submit: +5 for per-format --quality and --effort, whose help names each format's range and default, +1 for
# --delete-excluded, +4 for --sizes and --base-url; the command list: +1 for release, +1 for catalogue; the
# root's environment variables: +2 for THUMBCTL_MARKUP_SIZES and THUMBCTL_BASE_URL
@pytest.mark.parametrize(("command", "most"), [(None, 95), ("submit", 121), ("events", 21), ("status", 35)])
def test_help_length_is_bounded(command: str | None, most: int) -> None:
    result = CliRunner().invoke(app, [*filter(None, [command]), "--help"], env={"COLUMNS": "100"})
    lines = result.stdout.splitlines()
    assert len(lines) <= most
    assert ("Exit codes:" in result.stdout) == (command is None)
    assert ("THUMBCTL_MAX_PIXELS" in result.stdout) == (command is None)


# -- numbers too long to convert ------------------------------------------------------------------

HUGE = "1" * 5000
#: Options parsed by their command rather than by the settings table or Typer: each is a duration.
DURATION_OPTIONS = {"older_than", "grace", "window", "admission_wait", "settle", "poll_interval", "changed"}
#: Options parsed by their command that hold two numbers, ``X,Y``.
POINT_OPTIONS = {"at"}
#: Options whose value is text, never a number.
TEXT_OPTIONS = {
    "key", "include", "exclude", "profile", "batch_option", "item", "output", "prometheus", "sort", "state", "root",
}  # fmt: skip


def _numeric_key(key) -> bool:  # noqa: ANN001 - a settings table Key
    """Whether the setting holds a number (or numbers): it parses one of a few numeric samples to a non-text value."""
    for sample in ("7", "7s", "7:1"):
        try:
            value = key.parse(sample)
        except Exception:  # noqa: BLE001 - a sample of the wrong shape
            continue
        return not isinstance(value, str | Path) and value is not None
    return False


def _huge_values(option, key) -> list[str]:  # noqa: ANN001 - a Click option, a settings table Key or None
    if key is not None and key.name == "ratios":
        return [f"{HUGE}:1", f"1:{HUGE}"]
    if option.name in POINT_OPTIONS:
        return [f"{HUGE},0.5", f"0.5,-{HUGE}"]
    return [HUGE, f"-{HUGE}", f"{HUGE}s"]


def _numeric_options() -> list[tuple[str, str, str]]:
    """(command, flag, value) for every numeric option of every command, read from the commands themselves."""
    found = []
    for name in COMMANDS:
        for option in GROUP.commands[name].params:  # type: ignore[attr-defined]
            if option.param_type_name != "option" or option.is_flag:
                continue
            key = KEYS_BY_NAME.get(option.name) or next((k for k in KEYS if k.param_name == option.name), None)
            annotation = option.type_descriptor.annotation
            if key is not None:
                numeric = _numeric_key(key)
            elif annotation in (int, float) or option.name in DURATION_OPTIONS | POINT_OPTIONS:
                numeric = True
            else:
                assert option.name in TEXT_OPTIONS, f"{name} {option.opts[0]}: say whether it takes a number"
                numeric = False
            if numeric:
                found += [(name, option.opts[0], value) for value in _huge_values(option, key)]
    return found


NUMERIC_OPTIONS = _numeric_options()


def test_the_numeric_options_found_include_the_known_ones() -> None:
    flags = {(name, flag) for name, flag, _ in NUMERIC_OPTIONS}
    for flag in ("--size", "--quality", "--workers", "--attempts", "--max-items", "--ratio", "--max-pixels"):
        assert ("submit", flag) in flags
    assert {("status", "--limit"), ("gc", "--older-than"), ("work", "--workers")} <= flags


@pytest.mark.parametrize(
    ("command", "flag", "value"), NUMERIC_OPTIONS, ids=[f"{c}{f}={v[:2]}…{v[-2:]}" for c, f, v in NUMERIC_OPTIONS]
)
def test_a_number_of_5000_digits_in_any_flag_is_a_usage_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    flag: str,
    value: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THUMBCTL_DB", str(tmp_path / "ledger.db"))
    (tmp_path / "photos").mkdir()
    make_image(tmp_path / "photo.png", (32, 24), "PNG")
    given = {
        "submit": ["photos"],
        "watch": ["photos"],
        "events": ["b_00"],
        "retry": ["b_00"],
        "cancel": ["b_00"],
        "sheet": ["b_00"],
        "focus": ["photo.png"],
    }
    required = {"gc": ["--older-than", "30d"], "focus": ["--ratio", "1:1"]}.get(command, [])
    required = [] if flag in required else required
    with pytest.raises(SystemExit) as ended:
        main([command, *given.get(command, []), *required, flag, value])
    stderr = capsys.readouterr().err
    assert ended.value.code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error ["), stderr
    assert flag in lines[0]


NUMERIC_KEYS = [key for key in ALL_KEYS if _numeric_key(key)]


@pytest.mark.parametrize("key", NUMERIC_KEYS, ids=[key.env for key in NUMERIC_KEYS])
@pytest.mark.parametrize("command", [["config"], ["submit", "photos", "--detach"]], ids=lambda c: c[0])
def test_a_number_of_5000_digits_in_any_variable_is_a_config_error(
    invoke,
    tmp_path: Path,
    key,
    command: list[str],  # noqa: ANN001 - a settings table Key
) -> None:
    (tmp_path / "photos").mkdir()
    value = f"{HUGE}:1" if key.name == "ratios" else HUGE
    result = invoke(*command, env={key.env: value})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error [config_error] {key.env}: ") and len(result.stderr.splitlines()) == 1


URL_REFUSED = "(URLs are not supported yet)"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["submit", "{photos}", "--out", "https://cdn.example.com/x"],
            {},
            "--out: 'https://cdn.example.com/x' is a URL (https://); it must be a local folder or s3://bucket/prefix",
        ),
        (
            ["submit", "{photos}", "--store", "gs://bucket/objects"],
            {},
            "--store: 'gs://bucket/objects' is a URL (gs://); it must be a local folder or s3://bucket/prefix",
        ),
        (
            ["status", "--db", "sqlite:///x.db"],
            {},
            "--db: 'sqlite:///x.db' is a URL (sqlite://); it must be a local file or a postgresql:// URL",
        ),
        (
            ["submit", "{photos}"],
            {"THUMBCTL_OUT": "ftp://b/o"},
            "THUMBCTL_OUT: 'ftp://b/o' is a URL (ftp://); it must be a local folder or s3://bucket/prefix",
        ),
    ],
    ids=["out", "store", "db", "env-out"],
)
def test_a_url_where_a_local_path_is_needed_is_refused_and_nothing_is_made(
    invoke, photos: Path, tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    argv = [a.format(photos=photos) for a in args]
    before = sorted(p.name for p in tmp_path.iterdir())
    result = (
        invoke(*argv, "--db", tmp_path / "l.db", "--json", env=env)
        if argv[0] == "submit"
        else invoke(*argv, "--json", env=env)
    )
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {
        "error": {
            "code": "url_not_supported",
            "message": f"{message} {URL_REFUSED}",
            "transient": False,
            "exit_code": 2,
        }
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no https: folder, no ledger
    human = invoke(*argv, "--db", tmp_path / "l.db", env=env) if argv[0] == "submit" else invoke(*argv, env=env)
    assert (human.exit_code, human.stdout, human.stderr) == (
        2,
        "",
        f"error [url_not_supported] {message} {URL_REFUSED}\n",
    )


@pytest.mark.parametrize("flag", ["--out", "--store"])
@pytest.mark.parametrize("url", ["s3://b/thumbs", "s3://Bucket/thumbs", "s3://bucket/a/../b"])
def test_an_s3_location_that_names_no_bucket_prefix_is_refused_and_no_local_folder_is_made(
    invoke, photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("submit", photos, flag, url, "--db", tmp_path / "l.db", "--detach", "--json")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["exit_code"]) == ("bad_location", 2)
    assert error["message"].startswith(f"{flag}: {url!r}: ")
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "l.db").exists()


def test_a_url_as_source_points_to_a_manifest(invoke, tmp_path: Path) -> None:
    result = invoke("submit", "https://example.com/a.jpg", "--db", tmp_path / "l.db", "--detach", "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"] == {
        "code": "url_not_supported",
        "message": "SOURCE: 'https://example.com/a.jpg' is a URL; list URL sources in a manifest (.json, .jsonl, "
        ".csv) and submit that",
        "transient": False,
        "exit_code": 2,
    }
    assert not (tmp_path / "l.db").exists()


def test_a_postgresql_url_is_still_a_ledger(invoke) -> None:
    settings = json.loads(invoke("config", "--db", "postgresql://shop@db.example/thumbs", "--json").stdout)["settings"]
    assert settings["db"] == {"value": "postgresql://shop@db.example/thumbs", "source": "flag"}


@pytest.mark.parametrize(
    ("args", "built"),
    [
        (["status", "b_1"], ["status"]),
        (["--db", "x.db", "-q", "--json", "submit", "photos"], ["submit"]),
        (["--db=x.db", "events", "b_1"], ["events"]),
        (["--help"], COMMANDS),
        (["--version"], COMMANDS),
        (["statu"], COMMANDS),
        ([], COMMANDS),
    ],
)
def test_a_command_line_builds_only_the_command_it_names(args: list[str], built: list[str]) -> None:
    from thumbctl.cli.app import app_for

    assert sorted(typer.main.get_command(app_for(args)).commands) == sorted(built)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_built_alone_has_the_same_help_as_in_the_whole_app(command: str) -> None:
    from thumbctl.cli.app import app_for

    alone = CliRunner().invoke(app_for([command]), [command, "--help"], prog_name="thumbctl")
    whole = CliRunner().invoke(app, [command, "--help"], prog_name="thumbctl")
    assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output) == (0, whole.output)
