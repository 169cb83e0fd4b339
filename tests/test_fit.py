"""Fit modes: ``contain`` (the whole photo on the ratio's canvas, padded), ``--trim`` (a near-uniform
border removed, found once per source on the analysis copy), ``{fit}`` names, and ``cover``, the
default, with the keys and bytes it always had. Sources are product shots drawn here: an object of
known bounds on a white, slightly noisy background, saved as a JPEG."""

from __future__ import annotations

import hashlib
import io
import json
import random
import threading
from pathlib import Path

import pytest
from PIL import Image, ImageChops, ImageDraw
from typer.testing import CliRunner

from thumbctl import Ledger, Profile
from thumbctl.cli import app
from thumbctl.core.faults import Faults
from thumbctl.core.keys import derivative_key
from thumbctl.core.profile import Ratio, SettingError
from thumbctl.core.retries import Backoff
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.imaging import ANALYSIS_REFERENCE_SIZE, CropAnalysis, SourceDecoder, decode_scale, encode, resample
from thumbctl.imaging.crop import output_geometry
from thumbctl.imaging.fit import canvas_size, fit_geometry, place, trim_box

from support import accept

DIGEST = "ab" * 32
#: The object drawn on each product shot: (left, top, right, bottom), right and bottom exclusive.
OBJECT = (310, 180, 650, 590)
SOURCE_SIZE = (1000, 750)
RED = (190, 30, 40)


def product_shot(
    size: tuple[int, int] = SOURCE_SIZE, box: tuple[int, int, int, int] = OBJECT, *, seed: int = 1
) -> bytes:
    """A red object with a darker stripe on near-white noise (246..254), JPEG-compressed."""
    rng = random.Random(seed)
    background = Image.frombytes("L", size, bytes(rng.randrange(246, 255) for _ in range(size[0] * size[1])))
    image = Image.merge("RGB", (background, background, background))
    draw = ImageDraw.Draw(image)
    draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=RED)
    draw.rectangle((box[0], box[1], box[0] + 20, box[3] - 1), fill=(90, 10, 20))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=88)
    return buffer.getvalue()


def write_shot(folder: Path, name: str = "shoe.jpg", **kwargs) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(product_shot(**kwargs))
    return path


def work(ledger: Ledger) -> None:
    config = WorkerConfig(str(ledger.path), backoff=Backoff(base=0.01, cap=0.02), poll_seconds=0.01)
    run_worker(config, threading.Event(), Faults(""))


def results(ledger: Ledger, batch_id: str) -> dict[str, dict]:
    """Each succeeded item's result by its thumbnail's name (relative to OUT)."""
    items = ledger.views.items(batch_id)
    assert all(item.state == "succeeded" for item in items), [(i.item_id, i.error_code) for i in items]
    return {Path(item.friendly_path).name: {**item.result, "key": item.derivative_key} for item in items}


def red_bounds(image: Image.Image) -> tuple[int, int, int, int] | None:
    """The bounds of the reddish pixels (the object) of an output."""
    red, green, _ = image.convert("RGB").split()
    return ImageChops.subtract(red, green).point(lambda v: 255 if v > 60 else 0).getbbox()


# -- trim ---------------------------------------------------------------------------------------------


def test_trim_finds_the_object_within_one_output_pixel(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    """The trimmed box (source pixels, found on the analysis copy) lies around the drawn object, no
    more than one output pixel away on any side, and never inside it."""
    write_shot(tmp_path / "src")
    profile = Profile(ratios=(Ratio(1, 1),), size=512, fit="contain", trim=True)
    batch = accept(ledger, tmp_path / "src", out_dir, profile=profile)
    work(ledger)
    result = results(ledger, batch.batch_id)["shoe.1x1.contain.jpg"]
    left, top, right, bottom = result["trim"]
    placed = result["placed"]
    per_source_pixel = (placed[2] - placed[0]) / (right - left)  # output pixels per source pixel
    assert left <= OBJECT[0] and top <= OBJECT[1] and right >= OBJECT[2] and bottom >= OBJECT[3]
    gaps = (OBJECT[0] - left, OBJECT[1] - top, right - OBJECT[2], bottom - OBJECT[3])
    assert max(gaps) * per_source_pixel <= 1.0, (result["trim"], gaps, per_source_pixel)


def test_a_source_of_one_colour_is_not_trimmed() -> None:
    flat = Image.new("RGB", (300, 200), (255, 255, 255))
    assert trim_box(flat, 1200, 800, 24) == (0, 0, 1200, 800)


def test_trim_keeps_a_border_that_is_not_uniform() -> None:
    """A photo whose edges differ beyond the tolerance keeps its whole frame."""
    gradient = Image.linear_gradient("L").resize((256, 192)).convert("RGB")
    assert trim_box(gradient, 1024, 768, 24) == (0, 0, 1024, 768)


def test_the_tolerance_decides_what_counts_as_border() -> None:
    image = Image.new("RGB", (200, 100), (255, 255, 255))
    ImageDraw.Draw(image).rectangle((50, 20, 149, 79), fill=(235, 235, 235))  # a faint grey card
    assert trim_box(image, 200, 100, 10) == (50, 20, 150, 80)
    assert trim_box(image, 200, 100, 30) == (0, 0, 200, 100)


# -- contain ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio", [Ratio(1, 1), Ratio(16, 9), Ratio(4, 5)])
def test_contain_keeps_every_pixel_of_an_object_that_spans_the_photo(
    ledger: Ledger, tmp_path: Path, out_dir: Path, ratio: Ratio
) -> None:
    """An object from edge to edge: cover cuts it at 1:1 and 4:5; contain shows all of it, scaled by
    the placement's factor, inside the canvas of the requested size, padded with white."""
    wide = (0, 250, 1000, 500)
    write_shot(tmp_path / "src", box=wide)
    batch = accept(ledger, tmp_path / "src", out_dir, profile=Profile(ratios=(ratio,), size=400, fit="contain"))
    work(ledger)
    name = f"shoe.{ratio.slug}.contain.jpg"
    result = results(ledger, batch.batch_id)[name]
    image = Image.open(out_dir / name)
    assert image.size == canvas_size(ratio, 400) == (result["width"], result["height"])
    scale = (result["placed"][2] - result["placed"][0]) / SOURCE_SIZE[0]
    expected = [round(v * scale) + offset for v, offset in zip(wide, result["placed"][:2] * 2, strict=True)]
    found = red_bounds(image)
    assert found is not None and all(abs(a - b) <= 1 for a, b in zip(found, expected, strict=True)), (found, expected)
    assert found[0] <= result["placed"][0] + 1 and found[2] >= result["placed"][2] - 1  # nothing cut
    corner = image.convert("RGB").getpixel((0, 0)) if result["placed"][:2] != [0, 0] else None
    assert corner is None or min(corner) >= 245


def test_contain_never_enlarges_a_small_source_without_upscale(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    """The canvas keeps the requested size; the photo sits at its own size in the middle."""
    write_shot(tmp_path / "src", size=(300, 200), box=(100, 50, 200, 150))
    profile = Profile(ratios=(Ratio(1, 1),), size=512, fit="contain")
    batch = accept(ledger, tmp_path / "src", out_dir, profile=profile)
    work(ledger)
    result = results(ledger, batch.batch_id)["shoe.1x1.contain.jpg"]
    assert (result["width"], result["height"]) == (512, 512)
    assert result["placed"] == [106, 156, 406, 356] and result["source_smaller_than_target"] is True
    assert place((0, 0, 300, 200), (512, 512), upscale=True).placed == (0, 85, 512, 426)
    listing = cli_run(str(ledger.path), "status", batch.batch_id, "--items").stdout
    assert "contain 1.00 @ 0,0 300x200, smaller than asked: 300x200 on the canvas" in listing
    # reconcile and the reuse of outputs judge the object by the canvas, not by a cover's 200x200
    assert cli_run(str(ledger.path), "reconcile", "--json").exit_code == 0
    again = accept(ledger, tmp_path / "src", tmp_path / "again", profile=profile)
    (item,) = ledger.views.items(again.batch_id)
    assert item.state == "succeeded" and item.result["reused"] is True and item.result["fit"] == "contain"


@pytest.mark.parametrize("fmt", ["png", "webp"])
def test_transparent_padding_is_transparent(ledger: Ledger, tmp_path: Path, out_dir: Path, fmt: str) -> None:
    write_shot(tmp_path / "src")
    profile = Profile(ratios=(Ratio(16, 9),), size=320, format=fmt, fit="contain", trim=True, background="transparent")
    batch = accept(ledger, tmp_path / "src", out_dir, profile=profile)
    work(ledger)
    name = f"shoe.16x9.contain.{fmt}"
    result = results(ledger, batch.batch_id)[name]
    image = Image.open(out_dir / name)
    assert image.mode == "RGBA"
    alpha = image.getchannel("A")
    assert alpha.getbbox() == tuple(result["placed"])  # everything outside the photo is clear
    left, top, right, bottom = result["placed"]
    assert alpha.crop((left, top, right, bottom)).getextrema() == (255, 255)
    assert alpha.getpixel((0, 0)) == 0 and alpha.getpixel((image.width - 1, image.height - 1)) == 0


# -- cover: keys and bytes as before --------------------------------------------------------------------


def test_cover_keeps_the_keys_it_always_had() -> None:
    """The key pinned before fit existed (tests/test_keys.py) is the key of an explicit cover."""
    pinned = "9cdb97d7a321ec3b3a61fe4fa0d9154b5502c80b96f432188b7b845565cae784"
    assert derivative_key(DIGEST, Ratio(16, 9), Profile(fit="cover", trim=False), None) == pinned
    assert "fit" not in Profile().encoder_settings and "trim" not in Profile().encoder_settings
    contain = derivative_key(DIGEST, Ratio(16, 9), Profile(fit="contain"), None)
    trimmed = derivative_key(DIGEST, Ratio(16, 9), Profile(trim=True), None)
    looser = derivative_key(DIGEST, Ratio(16, 9), Profile(trim=True, trim_tolerance=40), None)
    assert len({pinned, contain, trimmed, looser}) == 4


@pytest.mark.parametrize(
    ("crop", "focus"), [("smart", None), ("entropy", None), ("center", None), ("smart", (0.2, 0.8))]
)
def test_cover_renders_the_bytes_the_earlier_pipeline_did(
    ledger: Ledger, tmp_path: Path, out_dir: Path, crop: str, focus: tuple[float, float] | None
) -> None:
    """Every cover output is byte for byte what the pipeline before fit made: the analysis copy's
    crop analysis, the window of each ratio, resample, encode (written out here step by step)."""
    data = product_shot()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "shoe.jpg").write_bytes(data)
    manifest = tmp_path / "src" / "m.json"
    manifest.write_text(json.dumps([{"source": "shoe.jpg", "focus": list(focus) if focus else None}]))
    batch = accept(ledger, manifest, out_dir, profile=Profile(crop=crop, size=(320, 512)))
    work(ledger)
    w, h = SOURCE_SIZE
    for item in ledger.views.items(batch.batch_id):
        profile = Profile(crop=crop, size=item.size)
        decoder = SourceDecoder(data, "jpeg", 10**8)
        copy = decoder.analysis_copy(decode_scale(w, h, ANALYSIS_REFERENCE_SIZE))
        geometry = output_geometry(w, h, Ratio(*map(int, item.ratio.split(":"))), item.size, False)
        box = CropAnalysis(copy, w, h, crop).choose(geometry, focus).box
        expected = encode(
            resample(decoder.decoded(decode_scale(w, h, item.size)), box, geometry.out_w, geometry.out_h), "jpeg", 85
        )
        assert Path(item.friendly_path).read_bytes() == expected, (item.ratio, item.size)
        assert item.result["output_sha256"] == hashlib.sha256(expected).hexdigest()
        assert item.derivative_key == derivative_key(
            hashlib.sha256(data).hexdigest(), Ratio(*map(int, item.ratio.split(":"))), profile, focus
        )
        assert "fit" not in item.result and "trim" not in item.result and "placed" not in item.result


def test_a_trimmed_cover_frames_inside_the_trimmed_box(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    """Cover with --trim takes its window inside the trimmed box, at the size an untrimmed cover has."""
    write_shot(tmp_path / "src")
    batch = accept(ledger, tmp_path / "src", out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=256, trim=True))
    work(ledger)
    result = results(ledger, batch.batch_id)["shoe.1x1.jpg"]
    trim, window = result["trim"], result["crop"]["box"]
    assert trim[0] <= window[0] and trim[1] <= window[1] and window[2] <= trim[2] and window[3] <= trim[3]
    assert window[3] - window[1] == trim[3] - trim[1] or window[2] - window[0] == trim[2] - trim[0]
    assert (result["width"], result["height"]) == (256, 256) and "fit" not in result
    image = Image.open(out_dir / "shoe.1x1.jpg").convert("RGB")
    assert min(image.getpixel((128, 128))) < 200 and image.getpixel((128, 128))[0] > 150  # all object, no white


def test_fit_geometry_of_cover_is_output_geometry() -> None:
    for size in (64, 512, 2000):
        assert fit_geometry(1000, 750, Ratio(4, 5), size, False, "cover") == output_geometry(
            1000, 750, Ratio(4, 5), size, False
        )


# -- manifests, names and the command line ------------------------------------------------------------


def cli_run(db: str, *args: object):
    return CliRunner().invoke(app, ["--db", db, *[str(a) for a in args]], catch_exceptions=False)


def test_a_manifest_asks_contain_for_one_item_through_submit(ledger_url: str, tmp_path: Path) -> None:
    """On both ledgers: the main image contained (its own name and key), the others covered as
    before; status --json shows what each kept; a replay is the same batch; reconcile finds all sound."""
    src = tmp_path / "src"
    write_shot(src, "main.jpg")
    write_shot(src, "side.jpg", seed=2)
    manifest = src / "shop.json"
    manifest.write_text(json.dumps({"items": [{"source": "main.jpg", "fit": "contain"}, {"source": "side.jpg"}]}))
    out, store = tmp_path / "out", tmp_path / "store"
    args = ("submit", manifest, "--out", out, "--store", store, "-r", "1:1", "--size", "200", "-w", "1", "--json")
    first = cli_run(ledger_url, *args)
    assert first.exit_code == 0, first.output
    batch = json.loads(first.stdout)
    names = sorted(p.name for p in out.glob("*.jpg"))
    assert names == ["main.1x1.contain.jpg", "side.1x1.jpg"]
    assert Image.open(out / "main.1x1.contain.jpg").size == (200, 200)
    status = cli_run(ledger_url, "status", batch["batch_id"], "--items", "--json")
    items = {Path(i["friendly_path"]).name: i for i in json.loads(status.stdout)["items"]}
    assert items["main.1x1.contain.jpg"]["result"]["fit"] == "contain"
    assert items["main.1x1.contain.jpg"]["result"]["placed"][0] == 0  # 4:3 fills the width of 1:1
    assert "fit" not in items["side.1x1.jpg"]["result"]
    again = cli_run(ledger_url, *args)
    assert again.exit_code == 0 and json.loads(again.stdout)["batch_id"] == batch["batch_id"]
    reconcile = cli_run(ledger_url, "reconcile", "--json")
    assert reconcile.exit_code == 0, reconcile.output


def test_a_csv_manifest_has_a_fit_column(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    src = tmp_path / "src"
    write_shot(src, "a.jpg")
    write_shot(src, "b.jpg", seed=3)
    (src / "m.csv").write_text("source,fit\na.jpg,contain\nb.jpg,\n")
    accept(ledger, src / "m.csv", out_dir, profile=Profile(ratios=(Ratio(16, 9),), size=128))
    work(ledger)
    assert sorted(p.name for p in out_dir.glob("*.jpg")) == ["a.16x9.contain.jpg", "b.16x9.jpg"]


def test_two_fits_of_one_source_and_ratio_get_two_names(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    """The default names tell the fits apart; a template that would give both one name is refused
    (exit 65, bad_name); {fit} in a template keeps them apart."""
    src = tmp_path / "src"
    write_shot(src, "x.jpg")
    (src / "m.json").write_text(
        json.dumps([{"id": "a/x.jpg", "source": "x.jpg"}, {"id": "b/x.jpg", "source": "x.jpg", "fit": "contain"}])
    )
    db = str(tmp_path / "l.db")
    common = ("submit", src / "m.json", "--out", out_dir, "-r", "1:1", "--size", "64", "--detach", "--json")
    refused = cli_run(db, *common, "--name", "{stem}.{ratio}.{ext}")
    assert refused.exit_code == 65 and json.loads(refused.stdout)["error"]["code"] == "bad_name"
    assert "the same name 'x.1x1.jpg'" in json.loads(refused.stdout)["error"]["message"]
    kept = cli_run(db, *common, "--name", "{stem}.{fit}.{ext}")
    assert kept.exit_code == 0, kept.output
    items = cli_run(db, "status", json.loads(kept.stdout)["batch_id"], "--items", "--json")
    names = sorted(Path(i["friendly_path"]).name for i in json.loads(items.stdout)["items"])
    assert names == ["x.contain.jpg", "x.cover.jpg"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--fit", "fill"), 2, "unknown fit 'fill'"),
        (("--trim-tolerance", "256"), 2, "must be 0..255"),
        (("--background", "clear"), 2, "#rrggbb or transparent"),
        (("--background", "transparent"), 2, "jpeg has none"),
        (("--background", "transparent", "--format", "png,jpeg"), 2, "jpeg has none"),
    ],
)
def test_bad_fit_settings_exit_2_with_one_line(tmp_path: Path, args: tuple[str, ...], code: int, message: str) -> None:
    write_shot(tmp_path / "src")
    result = cli_run(str(tmp_path / "l.db"), "submit", tmp_path / "src", "--out", tmp_path / "out", "--detach", *args)
    assert result.exit_code == code and message in result.stderr, result.output
    assert "Traceback" not in result.output and not (tmp_path / "l.db").exists()


def test_transparent_jpeg_has_its_own_code(tmp_path: Path) -> None:
    write_shot(tmp_path / "src")
    args = ("submit", tmp_path / "src", "--out", tmp_path / "out", "--background", "transparent", "--json")
    result = cli_run(str(tmp_path / "l.db"), *args)
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "transparent_needs_alpha"


def test_a_manifest_with_an_unknown_fit_is_refused(tmp_path: Path) -> None:
    write_shot(tmp_path / "src")
    (tmp_path / "src" / "m.json").write_text(json.dumps([{"source": "shoe.jpg", "fit": "stretch"}]))
    # refused before anything is recorded: with --detach (no workers started) the refusal is the same
    args = ("submit", tmp_path / "src" / "m.json", "--out", tmp_path / "o", "--detach", "--json")
    result = cli_run(str(tmp_path / "l.db"), *args)
    error = json.loads(result.stdout)["error"]
    assert (
        result.exit_code == 65 and error["code"] == "malformed_manifest" and "item 1: unknown fit" in error["message"]
    )


def test_profile_checks_fit_settings() -> None:
    with pytest.raises(SettingError, match="unknown fit"):
        Profile(fit="fill")
    with pytest.raises(SettingError, match="trim tolerance"):
        Profile(trim_tolerance=-1)
    assert Profile(format="webp", background="transparent").encoder_settings["background"] == "transparent"


def test_the_contact_sheet_draws_what_each_fit_kept(ledger: Ledger, tmp_path: Path, out_dir: Path) -> None:
    from thumbctl.review.sheet import write_contact_sheet

    src = tmp_path / "src"
    write_shot(src, "a.jpg")
    write_shot(src, "b.jpg", seed=4)
    (src / "m.json").write_text(json.dumps([{"source": "a.jpg", "fit": "contain"}, {"source": "b.jpg"}]))
    batch = accept(ledger, src / "m.json", out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=128, trim=True))
    work(ledger)
    page = Path(write_contact_sheet(ledger, batch.batch_id).path).read_text()
    assert page.count('class="window contain"') == 1 and page.count('class="window"') == 1
    assert page.count('class="trimmed"') == 2 and page.count('class="placed"') == 1
    assert "contain · whole photo" in page and "trimmed to" in page
    assert page.count("thumbctl focus") == 1  # a focus point frames cover only


def test_the_default_names_add_fit_only_for_contain() -> None:
    from thumbctl.core.naming import default_template

    assert default_template(1) == default_template(1, "cover") == "{path}.{ratio}.{ext}"
    assert default_template(3, "cover") == "{path}.{ratio}.{size}.{ext}"
    assert default_template(1, "contain") == "{path}.{ratio}.{fit}.{ext}"
    assert default_template(3, "contain") == "{path}.{ratio}.{size}.{fit}.{ext}"
