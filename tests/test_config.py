"""Settings resolution: precedence, file discovery, errors, `thumbctl config`, profiles in requests, help."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import platformdirs.windows
import pytest
import typer
from platformdirs.macos import MacOS
from platformdirs.unix import Unix
from platformdirs.windows import Windows
from typer.testing import CliRunner

from thumbctl import Ledger
from thumbctl.cli import app
from thumbctl.config.options import RunOptions, SubmitOptions, lease_seconds
from thumbctl.config.resolve import (
    ENVIRONMENT_KEYS,
    KEYS,
    display_value,
    find_config_file,
    format_seconds,
    load_config_file,
    resolve_ledger_path,
    resolve_settings,
)
from thumbctl.config.settings import busy_policy
from thumbctl.config.userdirs import config_dir, default_ledger_path, old_default_ledger_path, state_dir
from thumbctl.core.encoders import DEFAULT_EFFORT, DEFAULT_QUALITY
from thumbctl.core.errors import ConfigError, UsageError
from thumbctl.core.proc import host_id
from thumbctl.core.profile import Ratio
from thumbctl.core.retries import BusyPolicy
from thumbctl.core.scanrules import ScanRules

SHOP_AND_LISTING = """\
[defaults]
workers = 2

[profiles.shop]
ratios = ["1:1", "4:5"]
size = 1024
format = "webp"

[profiles.listing]
ratios = ["3:2", "16:9"]
size = 1600
"""

# key, CLI parameter name, flag value, env text, TOML literal, then the expected value from
# the flag, the env, the file and the default. Every layer differs from the one below it.
PRECEDENCE = [
    ("out", "out", Path("f"), "e", '"t"', Path("f"), Path("e"), Path("t"), Path("thumbs")),
    (
        "ratios",
        "ratio",
        ["3:2"],
        "4:5,1:1",
        '["16:9"]',
        (Ratio(3, 2),),
        (Ratio(4, 5), Ratio(1, 1)),
        (Ratio(16, 9),),
        (Ratio(1, 1), Ratio(4, 3), Ratio(16, 9)),
    ),
    ("size", "size", 100, "200", "300", 100, 200, 300, 512),
    ("format", "fmt", "png", "webp", '"avif"', "png", "webp", "avif", "jpeg"),
    ("quality", "quality", 50, "60", '"avif:70"', dict.fromkeys(DEFAULT_QUALITY, 50))
    + (dict.fromkeys(DEFAULT_QUALITY, 60), {**DEFAULT_QUALITY, "avif": 70}, DEFAULT_QUALITY),
    ("effort", "effort", 3, "webp:5", "{ avif = 6 }", {"webp": 3, "avif": 3}, {**DEFAULT_EFFORT, "webp": 5})
    + ({**DEFAULT_EFFORT, "avif": 6}, DEFAULT_EFFORT),
    ("crop", "crop", "center", "entropy", '"center"', "center", "entropy", "center", "smart"),
    ("upscale", "upscale", True, "no", "true", True, False, True, False),
    ("background", "background", "#000000", "#111111", '"#222222"', "#000000", "#111111", "#222222", "#ffffff"),
    ("fit", "fit", "contain", "cover", '"contain"', "contain", "cover", "contain", "cover"),
    ("trim", "trim", True, "yes", "true", True, True, True, False),
    ("trim_tolerance", "trim_tolerance", 5, "10", "40", 5, 10, 40, 24),
    ("name", "name", "{stem}.{ext}", "{path}-{size}.{ext}", '"{ratio}/{path}.{ext}"')
    + ("{stem}.{ext}", "{path}-{size}.{ext}", "{ratio}/{path}.{ext}", None),
    ("markup_sizes", "sizes", "50vw", "33vw", '"25vw"', "50vw", "33vw", "25vw", None),
    (
        "base_url",
        "base_url",
        "/a",
        "https://cdn.example.com/b",
        '"/c/"',
        "/a/",
        "https://cdn.example.com/b/",
        "/c/",
        None,
    ),  # noqa: E501
    ("documents", "documents", Path("f"), "e", '"t"', Path("f"), Path("e"), Path("t"), None),
    ("attempts", "attempts", 5, "6", "7", 5, 6, 7, 3),
    ("deadline", "deadline", "30m", "1h", '"2h"', 1800.0, 3600.0, 7200.0, None),
    ("workers", "workers", 1, "2", "3", 1, 2, 3, 0),
    ("item_timeout", "item_timeout", "10s", "20s", "30", 10.0, 20.0, 30.0, 300.0),
    ("sheet", "sheet", False, "yes", "false", False, True, False, True),
    ("max_failures", "max_failures", 1, "2", "3", 1, 2, 3, 0),
    ("max_pixels", "max_pixels", "1M", "2M", "3000000", 1_000_000, 2_000_000, 3_000_000, 100_000_000),
    ("max_bytes", "max_bytes", "1k", "2KiB", '"3k"', 1000, 2048, 3000, 104_857_600),
    (
        "allow_urls",
        "allow_url",
        ["https://a.example/"],
        "https://b.example/p/,http://c.example",
        '["https://d.example/x/"]',
        ("https://a.example/",),
        ("https://b.example/p/", "http://c.example/"),
        ("https://d.example/x/",),
        (),
    ),
    (
        "allow_networks",
        "allow_network",
        ["10.0.0.0/8"],
        "127.0.0.2 fd00::/8",
        '["192.168.1.0/24"]',
        ("10.0.0.0/8",),
        ("127.0.0.2/32", "fd00::/8"),
        ("192.168.1.0/24",),
        (),
    ),
    ("download_timeout", "download_timeout", "5s", "10s", '"1m"', 5.0, 10.0, 60.0, 60.0),
    ("max_items", "max_items", 10, "20", "30", 10, 20, 30, 100_000),
    ("max_runnable", "max_runnable", 10, "20", "30", 10, 20, 30, 1_000_000),
    ("queue_age_objective", "queue_age_objective", "1h", "2h", '"0"', 3600.0, 7200.0, 0.0, 86400.0),
    ("db", "db", Path("f.db"), "e.db", '"t.db"', Path("f.db"), Path("e.db"), Path("t.db"), None),
    ("store", "store", Path("f"), "e", '"t"', Path("f"), Path("e"), Path("t"), None),
    ("s3_endpoint", "s3_endpoint", "http://f:1", "http://e:2", '"http://t:3"')
    + ("http://f:1", "http://e:2", "http://t:3", None),
    ("s3_region", "s3_region", "f", "e", '"t"', "f", "e", "t", None),
    ("s3_profile", "s3_profile", "f", "e", '"t"', "f", "e", "t", None),
    ("s3_cache_control_objects", "s3_cache_control_objects", "f", "e", '"t"')
    + ("f", "e", "t", "public, max-age=31536000, immutable"),
    ("s3_cache_control_names", "s3_cache_control_names", "f", "e", '"t"', "f", "e", "t", "public, max-age=300"),
]

S3_KEYS = "s3_endpoint, s3_region, s3_profile, s3_cache_control_objects, s3_cache_control_names"


def test_precedence_cases_cover_every_setting() -> None:
    assert [case[0] for case in PRECEDENCE] == [key.name for key in KEYS]


@pytest.mark.parametrize("layers", [("flag", "env", "file"), ("env", "file"), ("file",), ()], ids=str)
@pytest.mark.parametrize("case", PRECEDENCE, ids=[case[0] for case in PRECEDENCE])
def test_flag_beats_env_beats_file_beats_default(case: tuple, layers: tuple[str, ...], tmp_path: Path) -> None:
    name, param, flag, env_text, toml, from_flag, from_env, from_file, default = case
    config = tmp_path / "thumbctl.toml"
    flags = {param: flag} if "flag" in layers else {}
    env = {f"THUMBCTL_{name.upper()}": env_text} if "env" in layers else {}
    if "file" in layers:
        config.write_text(f"[defaults]\n{name} = {toml}\n")
    setting = resolve_settings(flags, env, tmp_path).values[name]
    if name == "db":
        default = Path(os.environ["XDG_STATE_HOME"]) / "thumbctl" / "ledger.db"  # the state folder, not the config one
    expected = {
        "flag": (from_flag, "flag"),
        "env": (from_env, f"env THUMBCTL_{name.upper()}"),
        "file": (from_file, f"file {config} [defaults]"),
        "default": (default, "default"),
    }[layers[0] if layers else "default"]
    assert (setting.value, setting.source) == expected


def test_a_profile_beats_defaults_and_is_chosen_by_flag_or_env(tmp_path: Path) -> None:
    config = tmp_path / "thumbctl.toml"
    config.write_text(SHOP_AND_LISTING)
    plain = resolve_settings({}, {}, tmp_path)
    assert (plain.profile, plain["size"], plain.values["workers"].source) == (None, 512, f"file {config} [defaults]")
    shop = resolve_settings({"profile": "shop"}, {"THUMBCTL_PROFILE": "listing"}, tmp_path)
    assert (shop.profile, shop.profile_source) == ("shop", "flag")
    assert shop.values["size"].value == 1024 and shop.values["size"].source == f"file {config} [profiles.shop]"
    assert shop["workers"] == 2 and shop["format"] == "webp"
    listing = resolve_settings({}, {"THUMBCTL_PROFILE": "listing"}, tmp_path)
    assert (listing.profile, listing.profile_source, listing["size"]) == ("listing", "env THUMBCTL_PROFILE", 1600)
    assert listing["ratios"] == (Ratio(3, 2), Ratio(16, 9)) and listing["format"] == "jpeg"


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("deadline", "0", 0.0),
        ("deadline", 90, 90.0),
        ("item_timeout", 1.5, 1.5),
        ("upscale", "ON", True),
        ("upscale", "0", False),
        ("ratios", "1:1 2:2 16:9", (Ratio(1, 1), Ratio(16, 9))),
        ("max_bytes", "64MiB", 64 * 1024 * 1024),
        ("max_pixels", 5, 5),
        ("out", "~/thumbs", Path.home() / "thumbs"),
    ],
)
def test_values_parse_from_text_and_from_toml_types(key: str, raw: object, expected: object, tmp_path: Path) -> None:
    param = {"ratios": "ratio"}.get(key, key)
    assert resolve_settings({param: raw}, {}, tmp_path)[key] == expected


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.0, "0"), (300.0, "5m"), (86400.0, "24h"), (90.0, "90s"), (1.5, "1.5s")]
)
def test_durations_are_shown_as_typed(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_values_are_displayed_as_a_person_types_them() -> None:
    assert display_value("ratios", (Ratio(1, 1), Ratio(4, 5))) == "1:1 4:5"
    assert display_value("workers", 0) == "0 (one per CPU)"
    assert (display_value("deadline", None), display_value("upscale", False)) == ("none", "false")


# -- discovery --------------------------------------------------------------------------------


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(current folder, per-user config file) with XDG_CONFIG_HOME under tmp_path."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    user_file = tmp_path / "xdg" / "thumbctl" / "config.toml"
    user_file.parent.mkdir(parents=True)
    return cwd, user_file


def test_no_config_file_is_fine(folders: tuple[Path, Path]) -> None:
    cwd, _ = folders
    assert find_config_file({}, cwd) is None
    assert resolve_settings({}, {}, cwd).config_file is None


def test_the_user_file_is_used_without_a_local_one(folders: tuple[Path, Path]) -> None:
    cwd, user_file = folders
    user_file.write_text("[defaults]\nsize = 300\n")
    settings = resolve_settings({}, {}, cwd)
    assert settings.config_file == user_file and settings["size"] == 300


def test_the_local_file_wins_over_the_user_file(folders: tuple[Path, Path]) -> None:
    cwd, user_file = folders
    user_file.write_text("[defaults]\nsize = 300\n")
    (cwd / "thumbctl.toml").write_text("[defaults]\nsize = 400\n")
    settings = resolve_settings({}, {}, cwd)
    assert settings.config_file == cwd / "thumbctl.toml" and settings["size"] == 400


def test_thumbctl_config_names_the_file(folders: tuple[Path, Path], tmp_path: Path) -> None:
    cwd, _ = folders
    (cwd / "thumbctl.toml").write_text("[defaults]\nsize = 400\n")
    named = tmp_path / "elsewhere.toml"
    named.write_text("[defaults]\nsize = 500\n")
    settings = resolve_settings({}, {"THUMBCTL_CONFIG": str(named)}, cwd)
    assert settings.config_file == named and settings["size"] == 500
    with pytest.raises(ConfigError, match="THUMBCTL_CONFIG: no such file"):
        find_config_file({"THUMBCTL_CONFIG": str(tmp_path / "missing.toml")}, cwd)


def test_without_xdg_config_home_the_user_file_is_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    user_file = tmp_path / ".config" / "thumbctl" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('[defaults]\ndb = "~/ledgers/main.db"\n')
    assert find_config_file({}, tmp_path / "elsewhere") == user_file
    assert resolve_ledger_path(None, {}, tmp_path / "elsewhere") == tmp_path / "ledgers" / "main.db"
    assert resolve_ledger_path(None, {"THUMBCTL_DB": "env.db"}, tmp_path) == Path("env.db")
    assert resolve_ledger_path(Path("flag.db"), {"THUMBCTL_DB": "env.db"}, tmp_path) == Path("flag.db")


@pytest.mark.parametrize(
    ("env", "state", "config"),
    [
        ({"XDG_STATE_HOME": "/var/lib/me", "XDG_CONFIG_HOME": "/etc/me"}, "/var/lib/me/thumbctl", "/etc/me/thumbctl"),
        ({}, "~/.local/state/thumbctl", "~/.config/thumbctl"),
        ({"XDG_STATE_HOME": "", "XDG_CONFIG_HOME": ""}, "~/.local/state/thumbctl", "~/.config/thumbctl"),
        ({"XDG_STATE_HOME": "st", "XDG_CONFIG_HOME": "rel/c"}, "~/.local/state/thumbctl", "~/.config/thumbctl"),
    ],
)
def test_the_folders_on_linux_and_the_bsds_follow_xdg(
    env: dict[str, str], state: str, config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default ledger in the state folder, the user's config file in the config folder; a relative
    (or empty) XDG variable is ignored, as the XDG spec says."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert state_dir(Unix) == Path(state).expanduser()
    assert config_dir(Unix) == Path(config).expanduser()
    if sys.platform.startswith("linux"):
        assert default_ledger_path() == Path(state).expanduser() / "ledger.db"
        assert old_default_ledger_path() == Path(config).expanduser() / "ledger.db"


def test_the_folders_on_macos_are_in_application_support(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    expected = tmp_path / "Library" / "Application Support" / "thumbctl"
    assert state_dir(MacOS) == expected and config_dir(MacOS) == expected


def test_the_folders_on_windows_have_no_author_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state folder is the local one, the config folder the roaming one (as Click had it)."""
    folders = {"CSIDL_LOCAL_APPDATA": "C:/Users/me/AppData/Local", "CSIDL_APPDATA": "C:/Users/me/AppData/Roaming"}
    monkeypatch.setattr(platformdirs.windows, "get_win_folder", folders.__getitem__)
    assert state_dir(Windows) == Path("C:/Users/me/AppData/Local/thumbctl")
    assert config_dir(Windows) == Path("C:/Users/me/AppData/Roaming/thumbctl")


def test_the_whole_file_is_validated_when_loaded(tmp_path: Path) -> None:
    config = tmp_path / "thumbctl.toml"
    config.write_text(SHOP_AND_LISTING)
    loaded = load_config_file(config)
    assert loaded.defaults == {"workers": 2}
    assert loaded.profiles["shop"] == {"ratios": (Ratio(1, 1), Ratio(4, 5)), "size": 1024, "format": "webp"}
    config.write_text(SHOP_AND_LISTING + '\n[profiles.unused]\nformat = "tga"\n')
    with pytest.raises(ConfigError, match=r"\[profiles.unused\] format: unknown format 'tga'"):
        resolve_settings({"profile": "shop"}, {}, tmp_path)


def test_a_bad_flag_value_is_a_usage_error_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="^--size: size must be 1..16384 px, got 0$") as caught:
        resolve_settings({"size": 0}, {}, tmp_path)
    assert not isinstance(caught.value, ConfigError)


# -- the command line -------------------------------------------------------------------------


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run thumbctl in-process from tmp_path (where thumbctl.toml is looked for)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THUMBCTL_DB", str(tmp_path / "ledger.db"))
    runner = CliRunner()

    def invoke(*args: object):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


ALLOWED = (
    "out, ratios, size, format, quality, effort, crop, upscale, background, fit, trim, trim_tolerance, name, "
    "markup_sizes, base_url, documents, attempts, deadline, workers, item_timeout, sheet, max_failures, max_pixels, "
    "max_bytes, allow_urls, allow_networks, download_timeout, max_items, max_runnable, queue_age_objective"
)


@pytest.mark.parametrize(
    ("toml", "env", "args", "message"),
    [
        (
            "[defaults]\nsize = \n",
            {},
            [],
            "{file}: not valid TOML: Invalid value (at line 2, column 8)",
        ),
        (
            "[defaults]\nsise = 3\n",
            {},
            [],
            f"{{file}} [defaults]: unknown key 'sise'; allowed keys: {ALLOWED}, db, store, {S3_KEYS}",
        ),
        (
            "[profiles.shop]\nsise = 3\n",
            {},
            [],
            f"{{file}} [profiles.shop]: unknown key 'sise'; allowed keys: {ALLOWED}",
        ),
        (
            '[profiles.shop]\ndb = "x.db"\n',
            {},
            [],
            "{file} [profiles.shop]: unknown key 'db'; db belongs in [defaults] (one ledger for every profile)",
        ),
        ("size = 3\n", {}, [], "{file}: unknown table or key 'size'; the file holds [defaults] and [profiles.NAME]"),
        ("[profiles]\nshop = 3\n", {}, [], "{file} [profiles.shop]: must be a table"),
        ("profiles = 3\n", {}, [], "{file}: profiles must be tables, [profiles.NAME]"),
        ("[profiles.shop]\nsize = 0\n", {}, [], "{file} [profiles.shop] size: size must be 1..16384 px, got 0"),
        ('[defaults]\nsize = "big"\n', {}, [], "{file} [defaults] size: must be a whole number, got 'big'"),
        (
            "[defaults]\nratios = 3\n",
            {},
            [],
            "{file} [defaults] ratios: ratios must be a list like ['1:1', '16:9'], got 3",
        ),
        ("[defaults]\nupscale = 1\n", {}, [], "{file} [defaults] upscale: must be true or false, got 1"),
        (SHOP_AND_LISTING, {}, ["--profile", "nope"], "{file}: no profile 'nope'; profiles defined: listing, shop"),
        (
            SHOP_AND_LISTING,
            {"THUMBCTL_PROFILE": "nope"},
            [],
            "{file}: no profile 'nope'; profiles defined: listing, shop",
        ),
        (None, {"THUMBCTL_SIZE": "big"}, [], "THUMBCTL_SIZE: must be a whole number, got 'big'"),
        (None, {"THUMBCTL_WORKERS": "-1"}, [], "THUMBCTL_WORKERS: must be at least 0, got -1"),
        (None, {"THUMBCTL_ATTEMPTS": "-2"}, [], "THUMBCTL_ATTEMPTS: must be 1..100, got -2"),
        (None, {"THUMBCTL_SIZE": "-5"}, [], "THUMBCTL_SIZE: size must be 1..16384 px, got -5"),
        ('[defaults]\nmax_items = "-3"\n', {}, [], "{file} [defaults] max_items: must be at least 1, got -3"),
        (None, {"THUMBCTL_UPSCALE": "maybe"}, [], "THUMBCTL_UPSCALE: must be true or false, got 'maybe'"),
        (
            None,
            {"THUMBCTL_ITEM_TIMEOUT": "soon"},
            [],
            "THUMBCTL_ITEM_TIMEOUT: bad duration 'soon': use e.g. 90s, 15m, 2h, 30d",
        ),
        (None, {"THUMBCTL_CONFIG": "missing.toml"}, [], "THUMBCTL_CONFIG: no such file missing.toml"),
    ],
)
def test_config_errors_exit_2_with_one_line_naming_the_origin(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str | None, env: dict, args: list, message: str
) -> None:
    if toml is not None:
        (tmp_path / "thumbctl.toml").write_text(toml)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = run("config", "--json", *args)
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "config_error"
    assert result.stderr == f"error [config_error] {message.format(file=tmp_path / 'thumbctl.toml')}\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[defaults]\nworkers = 2 # caf\xe9\n", "not valid TOML: not UTF-8 text (at line 2, column 18)"),
        (
            b"[defaults]\nsize = " + b"[" * 2000 + b"]" * 2000 + b"\n",
            "not valid TOML: arrays or tables nested too deeply",
        ),
        (b"x = " + b"{a=" * 2000 + b"1" + b"}" * 2000 + b"\n", "not valid TOML: arrays or tables nested too deeply"),
    ],
    ids=["latin-1", "nested-arrays", "nested-tables"],
)
@pytest.mark.parametrize("command", [["config"], ["submit", "photos", "--detach"]], ids=lambda c: c[0])
def test_a_config_file_that_cannot_be_parsed_is_a_config_error_naming_it(
    run, tmp_path: Path, content: bytes, message: str, command: list[str]
) -> None:
    (tmp_path / "thumbctl.toml").write_bytes(content)
    result = run(*command)
    assert result.exit_code == 2
    assert result.stderr == f"error [config_error] {tmp_path / 'thumbctl.toml'}: {message}\n"


def test_a_profile_without_a_config_file_is_an_error(run) -> None:
    result = run("config", "--profile", "shop")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error [config_error] profile 'shop' needs a config file, and none was found")


@pytest.mark.parametrize(
    "command",
    [
        ["submit", "photos", "--detach"],
        ["work", "--until-idle"],
        ["retry", "b_0000"],
        ["status"],
        ["events", "b_0000"],
        ["cancel", "b_0000"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_refuses_a_broken_config_file(run, tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "thumbctl.toml").write_text("[defaults]\nworkers = -1\n")
    result = run(*command)
    assert result.exit_code == 2
    where = f"{tmp_path / 'thumbctl.toml'} [defaults] workers"
    assert result.stderr == f"error [config_error] {where}: must be at least 0, got -1\n"


def test_config_json_shape(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "thumbctl.toml"
    config.write_text(SHOP_AND_LISTING.replace("workers = 2", f'workers = 2\ndb = "{tmp_path / "main.db"}"'))
    monkeypatch.delenv("THUMBCTL_DB")
    monkeypatch.setenv("THUMBCTL_QUALITY", "70")
    result = run("config", "--profile", "shop", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    shop, defaults = f"file {config} [profiles.shop]", f"file {config} [defaults]"
    assert json.loads(result.stdout) == {
        "config_file": str(config),
        "profile": "shop",
        "profile_source": "flag",
        "settings": {
            "out": {"value": "thumbs", "source": "default"},
            "ratios": {"value": ["1:1", "4:5"], "source": shop},
            "size": {"value": 1024, "source": shop},
            "format": {"value": "webp", "source": shop},
            "quality": {"value": {"jpeg": 70, "webp": 70, "avif": 70}, "source": "env THUMBCTL_QUALITY"},
            "effort": {"value": DEFAULT_EFFORT, "source": "default"},
            "crop": {"value": "smart", "source": "default"},
            "upscale": {"value": False, "source": "default"},
            "background": {"value": "#ffffff", "source": "default"},
            "fit": {"value": "cover", "source": "default"},
            "trim": {"value": False, "source": "default"},
            "trim_tolerance": {"value": 24, "source": "default"},
            "name": {"value": None, "source": "default"},
            "markup_sizes": {"value": None, "source": "default"},
            "base_url": {"value": None, "source": "default"},
            "documents": {"value": None, "source": "default"},
            "attempts": {"value": 3, "source": "default"},
            "deadline": {"value": None, "source": "default"},
            "workers": {"value": 2, "source": defaults},
            "item_timeout": {"value": 300.0, "source": "default"},
            "sheet": {"value": True, "source": "default"},
            "max_failures": {"value": 0, "source": "default"},
            "max_pixels": {"value": 100_000_000, "source": "default"},
            "max_bytes": {"value": 104_857_600, "source": "default"},
            "allow_urls": {"value": [], "source": "default"},
            "allow_networks": {"value": [], "source": "default"},
            "download_timeout": {"value": 60.0, "source": "default"},
            "max_items": {"value": 100_000, "source": "default"},
            "max_runnable": {"value": 1_000_000, "source": "default"},
            "queue_age_objective": {"value": 86400.0, "source": "default"},
            "db": {"value": str(tmp_path / "main.db"), "source": defaults},
            "store": {"value": None, "source": "default"},
            "s3_endpoint": {"value": None, "source": "default"},
            "s3_region": {"value": None, "source": "default"},
            "s3_profile": {"value": None, "source": "default"},
            "s3_cache_control_objects": {"value": "public, max-age=31536000, immutable", "source": "default"},
            "s3_cache_control_names": {"value": "public, max-age=300", "source": "default"},
            "busy_timeout": {"value": 5.0, "source": "default"},
            "busy_wait": {"value": 20.0, "source": "default"},
            "s3_retry": {"value": 20.0, "source": "default"},
            "lease_seconds": {"value": 30.0, "source": "default"},
            "host_id": {"value": None, "source": "default"},
        },
    }


def test_config_table_goes_to_stdout(run, tmp_path: Path) -> None:
    (tmp_path / "thumbctl.toml").write_text(SHOP_AND_LISTING)
    result = run("config", "--profile", "listing", "--db", tmp_path / "other.db")
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"config file: {tmp_path / 'thumbctl.toml'}", "profile: listing (flag)"]
    rows: dict[str, str] = {}
    name = ""
    for line in lines[3:]:  # a long path may wrap its cell: the rest of the row is on the next line
        if line.startswith(" "):
            rows[name] += " " + line.strip()
        else:
            name, rest = line.split(maxsplit=1)
            rows[name] = rest.rstrip()
    assert rows["ratios"].split() == ["3:2", "16:9", "file", str(tmp_path / "thumbctl.toml"), "[profiles.listing]"]
    assert rows["db"].split() == [str(tmp_path / "other.db"), "flag"]
    assert rows["item_timeout"].split() == ["5m", "default"]


HUGE = "1" * 5000
NUMBER_FLAGS = [
    "--size", "--quality", "--attempts", "--workers", "--max-failures", "--max-items", "--max-runnable",
    "--max-pixels", "--max-bytes", "--deadline", "--item-timeout", "--queue-age-objective",
]  # fmt: skip


@pytest.mark.parametrize("flag", NUMBER_FLAGS)
def test_a_number_of_5000_digits_in_a_flag_is_a_usage_error(run, flag: str) -> None:
    result = run("config", flag, HUGE)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error [usage] {flag}: ") and len(result.stderr.splitlines()) == 1


def test_a_ratio_of_5000_digits_is_a_usage_error(run) -> None:
    result = run("config", "--ratio", f"{HUGE}:1")
    assert result.exit_code == 2 and result.stderr.startswith("error [usage] --ratio: bad ratio '1111")
    assert "each side must be 1..10000" in result.stderr


@pytest.mark.parametrize("name", ["workers", "size", "max_pixels", "busy_timeout", "lease_seconds"])
def test_a_number_of_5000_digits_in_a_variable_is_a_config_error(
    run, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(f"THUMBCTL_{name.upper()}", HUGE)
    result = run("config")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error [config_error] THUMBCTL_{name.upper()}: ")


def test_a_number_of_5000_digits_in_the_file_is_a_config_error(run, tmp_path: Path) -> None:
    (tmp_path / "thumbctl.toml").write_text(f"[defaults]\nworkers = {HUGE}\n")
    result = run("config")
    assert result.exit_code == 2
    assert result.stderr == f"error [config_error] {tmp_path / 'thumbctl.toml'}: not valid TOML: a number is too long\n"


def test_config_shows_the_s3_endpoint_in_effect_and_where_it_comes_from(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "THUMBCTL_S3_ENDPOINT")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))

    def endpoint() -> dict:
        return json.loads(run("config", "--json").stdout)["settings"]["s3_endpoint"]

    assert endpoint() == {"value": None, "source": "default"}
    (tmp_path / "aws-config").write_text("[profile shop]\nendpoint_url = http://minio.shop:9000\n")
    monkeypatch.setenv("AWS_PROFILE", "shop")
    assert endpoint() == {"value": "http://minio.shop:9000", "source": "AWS profile shop"}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    assert endpoint() == {"value": "http://127.0.0.1:8333", "source": "env AWS_ENDPOINT_URL"}
    rows = {line.split()[0]: line.split()[1:] for line in run("config").stdout.splitlines()[3:]}
    assert rows["s3_endpoint"] == ["http://127.0.0.1:8333", "env", "AWS_ENDPOINT_URL"]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3.local:8333")
    assert endpoint() == {"value": "http://s3.local:8333", "source": "env AWS_ENDPOINT_URL_S3"}
    monkeypatch.setenv("THUMBCTL_S3_ENDPOINT", "http://own:9000")
    assert endpoint() == {"value": "http://own:9000", "source": "env THUMBCTL_S3_ENDPOINT"}


def test_the_environment_only_settings_are_shown_with_their_source(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THUMBCTL_BUSY_WAIT", "45")
    monkeypatch.setenv("THUMBCTL_LEASE_SECONDS", "  ")  # blank: unset, as it always was
    monkeypatch.setenv("THUMBCTL_HOST_ID", "host-b")
    settings = json.loads(run("config", "--json").stdout)["settings"]
    assert settings["busy_timeout"] == {"value": 5.0, "source": "default"}
    assert settings["busy_wait"] == {"value": 45.0, "source": "env THUMBCTL_BUSY_WAIT"}
    assert settings["lease_seconds"] == {"value": 30.0, "source": "default"}
    assert settings["host_id"] == {"value": "host-b", "source": "env THUMBCTL_HOST_ID"}
    rows = {line.split()[0]: line.split()[1:] for line in run("config").stdout.splitlines()[3:]}
    assert rows["busy_wait"] == ["45s", "env", "THUMBCTL_BUSY_WAIT"] and rows["lease_seconds"] == ["30s", "default"]
    assert host_id() == "host-b"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("THUMBCTL_BUSY_TIMEOUT", "abc", "must be a number of seconds from 0 to 86400, got 'abc'"),
        ("THUMBCTL_BUSY_WAIT", " 90000 ", "must be a number of seconds from 0 to 86400, got '90000'"),
        ("THUMBCTL_LEASE_SECONDS", "0.5", "must be a number of seconds from 1 to 86400, got '0.5'"),
        ("THUMBCTL_LEASE_SECONDS", "nan", "must be a number of seconds from 1 to 86400, got 'nan'"),
    ],
)
def test_a_bad_environment_only_setting_is_one_config_error_wherever_it_is_read(
    run, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = run("config")
    assert result.exit_code == 2 and result.stderr == f"error [config_error] {variable}: {message}\n"
    read = busy_policy if "BUSY" in variable else (lambda: lease_seconds(30.0))
    with pytest.raises(ConfigError, match=f"^{variable}: {re.escape(message)}$"):
        read()


def test_the_busy_bound_is_never_shorter_than_one_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THUMBCTL_BUSY_TIMEOUT", "3")
    monkeypatch.setenv("THUMBCTL_BUSY_WAIT", "1")
    assert busy_policy() == BusyPolicy(timeout=3.0, bound=3.0)
    monkeypatch.delenv("THUMBCTL_BUSY_WAIT")
    assert busy_policy() == BusyPolicy(timeout=3.0, bound=20.0)


def test_environment_only_settings_are_neither_file_keys_nor_flags(tmp_path: Path) -> None:
    config = tmp_path / "thumbctl.toml"
    config.write_text("[defaults]\nbusy_timeout = 5\n")
    with pytest.raises(ConfigError, match="unknown key 'busy_timeout'; allowed keys: out, ratios, size"):
        load_config_file(config)
    assert all(not key.flag for key in ENVIRONMENT_KEYS) and not {k.name for k in ENVIRONMENT_KEYS} & {
        k.name for k in KEYS
    }


def test_the_defaults_of_the_table_are_those_of_the_option_objects(tmp_path: Path) -> None:
    settings = resolve_settings({}, {}, tmp_path)
    assert settings.submit_options(key=None, rules=ScanRules()) == SubmitOptions()
    assert settings.run_options() == RunOptions()


def submit_batch(run, *args: object) -> dict:
    result = run("submit", *args, "--detach", "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_profile_makes_the_same_request_as_the_equivalent_flags(run, tmp_path: Path, photos: Path) -> None:
    out = tmp_path / "out"
    (tmp_path / "thumbctl.toml").write_text(
        f'[defaults]\nout = "{out}"\n\n[profiles.shop]\nratios = ["1:1", "4:5"]\nsize = 200\n'
        'format = "webp"\nquality = 70\ncrop = "center"\nmax_items = 50\n'
    )
    by_profile = submit_batch(run, photos, "--profile", "shop")
    assert by_profile["replayed"] is False and by_profile["total"] == 8 and by_profile["out_dir"] == str(out)
    flags = ["--out", out, "-r", "1:1", "-r", "4:5", "--size", "200", "--format", "webp", "--quality", "70"]
    by_flags = submit_batch(run, photos, *flags, "--crop", "center", "--max-items", "50")
    assert by_flags["replayed"] is True
    assert (by_flags["batch_id"], by_flags["request_digest"]) == (by_profile["batch_id"], by_profile["request_digest"])
    other = submit_batch(run, photos, "--profile", "shop", "--size", "300")
    assert other["batch_id"] != by_profile["batch_id"] and other["replayed"] is False


def test_work_takes_its_workers_from_the_profile(run, tmp_path: Path) -> None:
    (tmp_path / "thumbctl.toml").write_text("[profiles.cron]\nworkers = 1\n")
    Ledger(tmp_path / "ledger.db").close()
    assert run("work", "--until-idle", "--profile", "cron", "-q").exit_code == 0
    result = run("work", "--until-idle", "--profile", "nightly")
    assert result.exit_code == 2 and "profiles defined: cron" in result.stderr


# -- help -------------------------------------------------------------------------------------

COMMANDS = sorted(typer.main.get_command(app).commands)


def test_the_root_help_lists_the_environment_and_the_exit_codes(run) -> None:
    text = run("--help").stdout
    assert "THUMBCTL_CONFIG" in text and "THUMBCTL_PROFILE" in text
    assert all(key.env in text for key in KEYS if key.flag) and "THUMBCTL_S3_*" in text
    assert "Exit codes:" in text
    for code in ("0", "1", "2", "3", "4", "65", "75", "130"):
        assert f"\n    {code} " in text


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_help_leaves_the_environment_and_the_exit_codes_to_the_root_help(run, command: str) -> None:
    text = run(command, "--help").stdout
    assert "THUMBCTL_CONFIG" not in text and "Exit codes:" not in text


def test_config_command_and_shell_completion_are_listed(run) -> None:
    text = run("--help").stdout
    assert "config" in COMMANDS
    assert "--install-completion" in text and "--show-completion" in text


@pytest.mark.parametrize(
    ("words", "expected"),
    [("thumbctl con", "config\n"), ("thumbctl submit --pro", "--profile\n"), ("thumbctl config --js", "--json\n")],
)
def test_shell_completion_completes_commands_and_options(words: str, expected: str) -> None:
    env = {"_THUMBCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    result = CliRunner().invoke(app, [], env=env, prog_name="thumbctl")
    assert (result.exit_code, result.stdout) == (0, expected)


def test_config_takes_the_setting_flags_of_submit_and_shows_them_as_flags(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "thumbctl.toml").write_text('[profiles.shop]\nsize = 1024\nformat = "webp"\n')
    monkeypatch.setenv("THUMBCTL_QUALITY", "90")
    result = run("config", "--json", "--profile", "shop", "--size", "800", "-r", "3:2", "--max-items", "7")
    assert result.exit_code == 0, result.stderr
    settings = json.loads(result.stdout)["settings"]
    assert (settings["size"]["value"], settings["size"]["source"]) == (800, "flag")
    assert (settings["ratios"]["value"], settings["ratios"]["source"]) == (["3:2"], "flag")
    assert (settings["max_items"]["value"], settings["max_items"]["source"]) == (7, "flag")
    assert settings["format"]["source"].endswith("[profiles.shop]") and settings["format"]["value"] == "webp"
    assert (settings["quality"]["value"], settings["quality"]["source"]) == (
        {"jpeg": 90, "webp": 90, "avif": 90},
        "env THUMBCTL_QUALITY",
    )


@pytest.mark.parametrize(
    ("flags", "env", "file", "size", "fmt"),
    [
        ({"size": "640,320,640", "fmt": "avif, webp,jpeg"}, {}, "", (320, 640), ("avif", "webp", "jpeg")),
        ({}, {"THUMBCTL_SIZE": "320 640 1280", "THUMBCTL_FORMAT": "webp"}, "", (320, 640, 1280), "webp"),
        ({}, {}, "sizes = [1280, 320]\nformats = ['webp', 'jpeg']\n", (320, 1280), ("webp", "jpeg")),
        ({}, {}, "size = [512]\nformat = 'png'\n", 512, "png"),
    ],
)
def test_sizes_and_formats_take_lists_from_flags_env_and_profiles(
    tmp_path: Path, flags: dict, env: dict, file: str, size, fmt
) -> None:
    (tmp_path / "thumbctl.toml").write_text(f"[profiles.shop]\n{file}")
    settings = resolve_settings({"profile": "shop", **flags}, env, tmp_path)
    profile = settings.render_profile()
    assert (settings["size"], settings["format"]) == (size, fmt)
    assert (profile.sizes, profile.formats) == (
        size if isinstance(size, tuple) else (size,),
        fmt if isinstance(fmt, tuple) else (fmt,),
    )


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ("sizes = [320, 0]\n", "size must be 1..16384 px, got 0"),
        ("formats = ['webp', 'gif']\n", "unknown format 'gif'"),
        ("size = 320\nsizes = [640]\n", "give size or sizes, not both"),
    ],
)
def test_a_bad_list_of_sizes_or_formats_names_the_problem(tmp_path: Path, file: str, message: str) -> None:
    (tmp_path / "thumbctl.toml").write_text(f"[profiles.shop]\n{file}")
    with pytest.raises(ConfigError, match=message):
        resolve_settings({"profile": "shop"}, {}, tmp_path)
