"""Per-format quality and effort: parsing, the keys they give, the encode the worker does with them,
and the flags, variables and profiles that set them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from thumbctl import Ledger
from thumbctl.core.encoders import (
    DEFAULT_EFFORT,
    DEFAULT_QUALITY,
    EFFORT_RANGES,
    EncoderSettingError,
    parse_effort,
    parse_quality,
    recorded_encoder,
)
from thumbctl.core.keys import derivative_key, digest_json
from thumbctl.core.profile import PIPELINE_VERSION, Profile, Ratio, SettingError
from thumbctl.imaging import decode_source, resample
from thumbctl.imaging.encode import SRGB_PROFILE, encode

from harness import Thumbctl
from inprocess import json_here, render_here, submit_here
from support import make_image, raw_rows, raw_write

DIGEST = "cd" * 32
QUALITY_RANGES = {fmt: (1, 100) for fmt in DEFAULT_QUALITY}


# -- parsing -----------------------------------------------------------------------------------


def _per_format(ranges: dict[str, tuple[int, int]]) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries({}, optional={fmt: st.integers(low, high) for fmt, (low, high) in ranges.items()})


@given(values=_per_format(QUALITY_RANGES), spaces=st.sampled_from(["", " "]), upper=st.booleans())
def test_named_qualities_set_those_formats_and_the_others_keep_their_defaults(
    values: dict[str, int], spaces: str, upper: bool
) -> None:
    text = f",{spaces}".join(f"{fmt.upper() if upper else fmt}:{spaces}{q}" for fmt, q in values.items())
    if not values:
        return
    assert parse_quality(text) == {**DEFAULT_QUALITY, **values}
    assert parse_quality(values) == {**DEFAULT_QUALITY, **values}  # a TOML table


@given(values=_per_format(EFFORT_RANGES))
def test_named_efforts_set_those_formats(values: dict[str, int]) -> None:
    if values:
        assert parse_effort(",".join(f"{fmt}:{e}" for fmt, e in values.items())) == {**DEFAULT_EFFORT, **values}


@given(st.integers(1, 100))
def test_one_quality_sets_every_format(quality: int) -> None:
    assert parse_quality(quality) == parse_quality(str(quality)) == dict.fromkeys(DEFAULT_QUALITY, quality)


@given(
    st.one_of(
        st.text(max_size=30).filter(lambda t: not t.strip().lstrip("+-").isdigit()),
        st.integers().filter(lambda n: not 1 <= n <= 100),
        st.sampled_from(["png:80", "gif:1", "jpeg:0", "webp:101", "jpeg:85,jpeg:80", "jpeg", "jpeg:", ":85", "a:b"]),
    )
)
def test_anything_else_is_refused_with_a_message(raw: object) -> None:
    with pytest.raises(EncoderSettingError) as caught:
        parse_quality(raw)
    assert "\n" not in str(caught.value) and str(caught.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("7", "webp effort must be 0..6, got 7"),
        ("avif:11", "avif effort must be 0..10, got 11"),
        ("jpeg:3", "effort: unknown format 'jpeg'; formats with a effort: webp, avif"),
        ("webp=x", "effort: bad entry 'webp=x': expected FORMAT:N, e.g. webp:6,avif:4"),
    ],
)
def test_bad_efforts_say_why(raw: str, message: str) -> None:
    with pytest.raises(EncoderSettingError, match=f"^{message}$"):
        parse_effort(raw)


def test_a_profile_refuses_a_bad_quality_as_a_setting_error() -> None:
    with pytest.raises(SettingError, match="^jpeg quality must be 1..100, got 101$"):
        Profile(quality=101)


# -- keys --------------------------------------------------------------------------------------


def key_before(fmt: str, quality: int = 85, size: int = 512) -> str:
    """The key a derivative had before settings were per format: one quality in every key."""
    encoder = {
        "size": size,
        "format": fmt,
        "quality": quality,
        "crop": "smart",
        "crop_version": 3,
        "upscale": False,
        "background": "#ffffff",
        "pipeline": PIPELINE_VERSION,
    }
    return digest_json({"source": DIGEST, "ratio": "1:1", "focus": None, "encoder": encoder})


def key(**profile: object) -> str:
    return derivative_key(DIGEST, Ratio(1, 1), Profile(**profile), None)


def test_jpeg_at_q85_keeps_its_key_whatever_the_other_formats_settings() -> None:
    assert key() == key(format="jpeg") == key_before("jpeg")
    assert key(quality={"webp": 50, "avif": 30}, effort=0) == key_before("jpeg")
    assert key(quality=70) == key_before("jpeg", 70)


def test_png_keeps_its_key_and_no_quality_changes_it() -> None:
    assert key(format="png") == key(format="png", quality=40) == key(format="png", effort=6) == key_before("png")


@pytest.mark.parametrize(("fmt", "earlier"), [("webp", {"webp": 4}), ("avif", {"avif": 2})])
def test_webp_and_avif_keep_their_keys_at_the_earlier_effort(fmt: str, earlier: dict[str, int]) -> None:
    assert key(format=fmt, quality=85, effort=earlier) == key_before(fmt)
    assert key(format=fmt, quality=60, effort=earlier) == key_before(fmt, 60)
    other = "avif" if fmt == "webp" else "webp"
    assert key(format=fmt, quality={fmt: 85, other: 10}, effort={**earlier, other: 0}) == key_before(fmt)


@pytest.mark.parametrize(("fmt", "effort", "native"), [("webp", 6, {"method": 6}), ("avif", 4, {"speed": 6})])
def test_another_effort_enters_the_key_as_the_encoders_own_setting(fmt: str, effort: int, native: dict) -> None:
    profile = Profile(format=fmt, quality=85, effort={fmt: effort})
    assert profile.encoder_settings["quality"] == 85
    assert {k: profile.encoder_settings[k] for k in native} == native
    assert "effort" not in profile.encoder_settings
    assert key(format=fmt, quality=85, effort={fmt: effort}) != key_before(fmt)


def test_a_key_holds_only_its_own_formats_settings() -> None:
    base = {"format": ("jpeg", "webp", "avif"), "quality": {"jpeg": 80, "webp": 70, "avif": 50}, "effort": 3}
    changed = {**base, "quality": {"jpeg": 80, "webp": 70, "avif": 51}}
    for fmt in ("jpeg", "webp"):
        a = Profile(**base).variant(512, fmt)
        b = Profile(**changed).variant(512, fmt)
        assert derivative_key(DIGEST, Ratio(1, 1), a, None) == derivative_key(DIGEST, Ratio(1, 1), b, None)
    a, b = Profile(**base).variant(512, "avif"), Profile(**changed).variant(512, "avif")
    assert derivative_key(DIGEST, Ratio(1, 1), a, None) != derivative_key(DIGEST, Ratio(1, 1), b, None)


# -- what a batch records, and the encode the worker does with it --------------------------------


def test_a_set_records_each_formats_quality_and_the_efforts_that_changed() -> None:
    profile = Profile(format=("avif", "webp", "jpeg"), quality={"webp": 70, "avif": 50}, effort={"webp": 6, "avif": 2})
    recorded = json.loads(json.dumps(profile.encoder_settings))
    assert recorded["quality"] == {"jpeg": DEFAULT_QUALITY["jpeg"], "webp": 70, "avif": 50}
    assert (recorded["method"], "speed" in recorded) == (6, False)
    assert [recorded_encoder(recorded, fmt) for fmt in ("avif", "webp", "jpeg")] == [(50, 2), (70, 6), (85, None)]


def test_a_batch_recorded_before_per_format_settings_encodes_as_it_did() -> None:
    earlier = {"size": 512, "format": ["webp", "avif", "png"], "quality": 70, "crop": "smart"}
    assert [recorded_encoder(earlier, fmt) for fmt in ("webp", "avif", "png")] == [(70, 4), (70, 2), (70, None)]


def _direct(image: Image.Image, fmt: str, **settings: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, icc_profile=SRGB_PROFILE, **settings)
    return buf.getvalue()


def test_encode_uses_the_effort_on_each_encoders_own_scale() -> None:
    image = Image.effect_mandelbrot((96, 64), (-2, -1, 1, 1), 40).convert("RGB")
    assert encode(image, "webp", 70, effort=6) == _direct(image, "WEBP", quality=70, method=6, exact=False)
    assert encode(image, "webp", 70) == _direct(image, "WEBP", quality=70, method=4, exact=False)
    assert encode(image, "avif", 50, effort=3) == _direct(image, "AVIF", quality=50, speed=7, max_threads=1)
    assert encode(image, "avif", 50) == _direct(image, "AVIF", quality=50, speed=8, max_threads=1)


def _expected_outputs(source: Path, settings: dict[str, dict[str, object]]) -> dict[str, bytes]:
    """What the worker must write for a 1:1 centre crop of ``source`` at its own size, by a direct encode."""
    data = source.read_bytes()
    decoded = decode_source(data, "png", 10**8, 1.0)
    image = resample(decoded, (0, 0, decoded.width, decoded.height), decoded.width, decoded.height)
    names = {"webp": "WEBP", "avif": "AVIF", "jpeg": "JPEG"}
    return {fmt: _direct(image, names[fmt], **kwargs) for fmt, kwargs in settings.items()}


def _outputs(out: Path) -> dict[str, bytes]:
    thumbnails = [path for path in out.glob("*.*") if path.suffix != ".json"]  # not the site manifest
    return {path.suffix.lstrip(".").replace("jpg", "jpeg"): path.read_bytes() for path in thumbnails}


def test_the_worker_encodes_each_format_with_its_own_settings(tmp_path: Path) -> None:
    make_image(tmp_path / "photos" / "square.png", (64, 64), "PNG", seed=3)
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(
        cli, tmp_path / "photos", "--out", tmp_path / "out", "-r", "1:1", "--size", "64", "--crop", "center",
        "--format", "webp,avif,jpeg", "--quality", "webp:70,avif:50", "--effort", "webp:6,avif:3", "--workers", "1",
    )  # fmt: skip
    expected = _expected_outputs(
        tmp_path / "photos" / "square.png",
        {
            "webp": {"quality": 70, "method": 6, "exact": False},
            "avif": {"quality": 50, "speed": 7, "max_threads": 1},
            "jpeg": {"quality": 85, "progressive": True, "optimize": True, "subsampling": "4:2:0"},
        },
    )
    assert _outputs(tmp_path / "out") == expected


def test_a_batch_recorded_before_the_upgrade_renders_exactly_as_before(tmp_path: Path) -> None:
    """A queued batch whose profile has one whole quality and no efforts (as recorded before
    per-format settings) is rendered by a worker of now with that quality and the fixed efforts."""
    make_image(tmp_path / "photos" / "square.png", (64, 64), "PNG", seed=4)
    cli = Thumbctl(tmp_path / "ledger.db")
    args = ("-r", "1:1", "--size", "64", "--crop", "center", "--format", "webp,avif")
    done = cli.invoke("submit", tmp_path / "photos", "--out", tmp_path / "out", *args, "--quality", "70", "--detach")
    assert done.returncode == 0, done.stderr
    with Ledger(tmp_path / "ledger.db") as ledger:
        (batch,) = ledger.views.batches()
        profile = {
            "ratios": ["1:1"], "size": 64, "format": ["webp", "avif"], "quality": 70, "crop": "center",
            "crop_version": 1, "upscale": False, "background": "#ffffff", "pipeline": PIPELINE_VERSION,
        }  # fmt: skip
        raw_write(ledger, "UPDATE batches SET profile = ? WHERE batch_id = ?", (json.dumps(profile), batch.batch_id))
    render_here(tmp_path / "ledger.db", batch.batch_id)  # the worker of now, in this process
    expected = _expected_outputs(
        tmp_path / "photos" / "square.png",
        {"webp": {"quality": 70, "method": 4, "exact": False}, "avif": {"quality": 70, "speed": 8, "max_threads": 1}},
    )
    assert _outputs(tmp_path / "out") == expected


# -- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--quality", "jpeg:85,gif:3"], {}, "--quality: quality: unknown format 'gif'; formats with a quality: "
         "jpeg, webp, avif"),
        (["--quality", "webp:0"], {}, "--quality: webp quality must be 1..100, got 0"),
        (["--effort", "avif:12"], {}, "--effort: avif effort must be 0..10, got 12"),
        (["--effort", "fast"], {}, "--effort: effort: bad entry 'fast': expected FORMAT:N, e.g. webp:6,avif:4"),
        ([], {"THUMBCTL_EFFORT": "webp:9"}, "THUMBCTL_EFFORT: webp effort must be 0..6, got 9"),
    ],
)  # fmt: skip
def test_bad_values_are_one_line_and_exit_2(tmp_path: Path, args: list[str], env: dict, message: str) -> None:
    cli = Thumbctl(tmp_path / "ledger.db", env=env)
    # refused before anything is recorded: with --detach (no workers started) the refusal is the same
    done = cli.invoke("submit", tmp_path, "--out", tmp_path / "out", *args, "--detach", "--json")
    code = "config_error" if env else "usage"
    assert (done.returncode, json.loads(done.stdout)["error"]["code"]) == (2, code)
    assert done.stderr == f"error [{code}] {message}\n"


def test_config_shows_the_effective_values_per_format(tmp_path: Path) -> None:
    (tmp_path / "thumbctl.toml").write_text('[profiles.shop]\nquality = "webp:78"\neffort = { avif = 5 }\n')
    cli = Thumbctl(tmp_path / "ledger.db", env={"THUMBCTL_CONFIG": str(tmp_path / "thumbctl.toml")})
    shown = cli.invoke("config", "--profile", "shop")
    assert shown.returncode == 0, shown.stderr
    quality = ",".join(f"{fmt}:{q}" for fmt, q in {**DEFAULT_QUALITY, "webp": 78}.items())
    effort = ",".join(f"{fmt}:{e}" for fmt, e in {**DEFAULT_EFFORT, "avif": 5}.items())
    packed = "".join(shown.stdout.split())  # the table may wrap a long value
    assert f"quality{quality}" in packed and f"effort{effort}" in packed
    settings = json.loads(cli.invoke("config", "--profile", "shop", "--json").stdout)["settings"]
    assert settings["quality"]["value"] == {**DEFAULT_QUALITY, "webp": 78}
    assert settings["effort"]["value"] == {**DEFAULT_EFFORT, "avif": 5}


# -- after an upgrade: which formats render again, and why -------------------------------------


def _recorded_before_per_format_settings(db: str, batch_id: str) -> None:
    """Give a finished batch the profile a release before per-format settings recorded: one quality."""
    with Ledger(db) as ledger:
        ((text,),) = raw_rows(ledger, "SELECT profile FROM batches WHERE batch_id = ?", (batch_id,))
        profile = {**json.loads(text), "quality": 85}
        raw_write(ledger, "UPDATE batches SET profile = ? WHERE batch_id = ?", (json.dumps(profile), batch_id))


def submit_rendered(cli: Thumbctl, *args: object) -> dict:
    """The JSON summary of ``submit ARGS`` (its ``renders_again``) recorded with ``--detach`` in this
    process, with the counts of its batch once rendered here (as a foreground run's summary has)."""
    done = cli.invoke("submit", *args, "--detach")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    render_here(cli.db, summary["batch_id"])
    return summary | {"counts": json_here(cli, "status", summary["batch_id"])["counts"]}


def test_the_summary_says_which_formats_render_again_and_why(ledger_url: str, tmp_path: Path) -> None:
    make_image(tmp_path / "photos" / "a.png", (80, 60), "PNG", seed=5)
    make_image(tmp_path / "photos" / "b.png", (60, 80), "PNG", seed=6)
    cli = Thumbctl(ledger_url, store=tmp_path / "store")
    args = ("--out", tmp_path / "out", "-r", "1:1", "--size", "48", "--format", "webp,avif,jpeg,png", "--json")
    first = submit_rendered(cli, tmp_path / "photos", *args, "--quality", "85", "--effort", "webp:4,avif:2")
    assert "renders_again" not in first
    _recorded_before_per_format_settings(ledger_url, first["batch_id"])

    summary = submit_rendered(
        cli, tmp_path / "photos", *args, "--quality", "webp:71,avif:85,jpeg:85", "--effort", "avif:2"
    )
    changes = [{"format": "webp", "outputs": 2, "reason": "settings_changed"}]
    changes[0] |= {"before": {"quality": 85, "effort": 4}, "after": {"quality": 71, "effort": DEFAULT_EFFORT["webp"]}}
    assert summary["renders_again"] == changes
    assert summary["counts"]["succeeded"] == 8  # avif, jpeg and png were reused

    pinned = ("--quality", "webp:73,avif:85", "--effort", "avif:2")
    shown = cli.invoke("submit", tmp_path / "photos", *args[:-1], *pinned, "--detach")
    assert shown.returncode == 0, shown.stderr
    assert "  webp: 2 outputs render again: webp settings changed (quality 71 -> 73)\n" in shown.stdout
    assert "avif:" not in shown.stdout
    with Ledger(ledger_url) as ledger:
        (latest,) = ledger.views.batches(1)
    render_here(ledger_url, latest.batch_id)
    assert json_here(cli, "status", latest.batch_id)["state"] == "succeeded"

    # every format at its defaults: those that differ from the earlier ones (whose objects the first
    # batch made) render again
    upgraded = submit_rendered(cli, tmp_path / "photos", *args)
    earlier = {"webp": (73, DEFAULT_EFFORT["webp"]), "avif": (85, 2)}
    expected = [
        {"format": fmt, "outputs": 2, "reason": "defaults_changed"}
        | {
            "before": {"quality": q, "effort": e},
            "after": {"quality": DEFAULT_QUALITY[fmt], "effort": DEFAULT_EFFORT[fmt]},
        }
        for fmt, (q, e) in earlier.items()
        if (DEFAULT_QUALITY[fmt], DEFAULT_EFFORT[fmt]) != (85, {"webp": 4, "avif": 2}[fmt])
    ]
    assert upgraded.get("renders_again", []) == expected
