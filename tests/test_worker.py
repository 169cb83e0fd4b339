"""The worker pipeline in-process: render, verify, publish, and every failure path."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from thumbctl import Ledger, Profile
from thumbctl.cli import app
from thumbctl.core.faults import Faults, parse_faults
from thumbctl.core.profile import Limits, Ratio
from thumbctl.core.retries import Backoff
from thumbctl.engine.worker import WorkerConfig, idle_waits, run_worker
from thumbctl.ledger.queue import CLAIM_SHARED_ITEMS
from thumbctl.review.markup import write_batch_manifest

from support import accept, check_invariants, is_copy_of, make_image, objects_in, tree_snapshot


def work(ledger: Ledger, batch_id: str | None = None) -> int:
    config = WorkerConfig(str(ledger.path), batch_id=batch_id, backoff=Backoff(base=0.01, cap=0.02), poll_seconds=0.01)
    return run_worker(config, threading.Event(), Faults(""))


def test_a_batch_renders_to_objects_and_thumbnails_of_their_own_and_nothing_else(
    ledger: Ledger, photos: Path, out_dir: Path, store_dir: Path
):
    batch = accept(ledger, photos, out_dir)
    assert work(ledger) == 4  # one claim per source, all ratios decoded once
    view = ledger.views.batch(batch.batch_id)
    assert view.state == "succeeded" and view.counts["succeeded"] == 12
    check_invariants(ledger)
    for item in ledger.views.items(batch.batch_id):
        assert is_copy_of(item.friendly_path, item.object_path)
        w, h = (int(v) for v in item.ratio.split(":"))
        with Image.open(item.object_path) as image:
            assert max(image.size) <= 512 and abs(image.width * h - image.height * w) <= max(w, h)
        assert item.object_path.startswith(f"{store_dir}/objects/")
    files = {p.relative_to(out_dir).parts[0] for p in out_dir.rglob("*") if p.is_file()}
    assert not (out_dir / "objects").exists() and not (out_dir / ".tmp").exists()
    assert files <= {
        "rooms",
        "coffee.1x1.jpg",
        "coffee.4x3.jpg",
        "coffee.16x9.jpg",
        "garden.1x1.jpg",
        "garden.4x3.jpg",
        "garden.16x9.jpg",
    }


#: (size, ratio) -> item -> output size. Sources: coffee.png 600x400, garden.jpeg 200x320,
#: rooms/kitchen.webp 320x200, rooms/living.jpg 1800x1200. Smaller crops are not upscaled.
EXPECTED_SIZES = {
    (512, Ratio(1, 1)): {
        "coffee.png": (400, 400),
        "garden.jpeg": (200, 200),
        "rooms/kitchen.webp": (200, 200),
        "rooms/living.jpg": (512, 512),
    },
    (100, Ratio(16, 9)): {
        "coffee.png": (100, 56),
        "garden.jpeg": (100, 56),
        "rooms/kitchen.webp": (100, 56),
        "rooms/living.jpg": (100, 56),
    },
    (64, Ratio(3, 1)): {
        "coffee.png": (64, 21),
        "garden.jpeg": (64, 21),
        "rooms/kitchen.webp": (64, 21),
        "rooms/living.jpg": (64, 21),
    },
    (300, Ratio(1, 7)): {
        "coffee.png": (43, 300),
        "garden.jpeg": (43, 300),
        "rooms/kitchen.webp": (29, 200),
        "rooms/living.jpg": (43, 300),
    },
}


@pytest.mark.parametrize(("size", "ratio"), list(EXPECTED_SIZES))
def test_outputs_have_exact_dimensions(ledger: Ledger, photos: Path, out_dir: Path, size: int, ratio: Ratio):
    batch = accept(ledger, photos, out_dir, profile=Profile(ratios=(ratio,), size=size))
    work(ledger)
    made = {}
    for item in ledger.views.items(batch.batch_id):
        with Image.open(item.object_path) as image:
            made[item.item_id] = image.size
    assert made == EXPECTED_SIZES[size, ratio]


def test_an_output_is_the_same_bytes_whichever_ratios_it_was_rendered_with(
    ledger: Ledger, photos: Path, tmp_path: Path
):
    """One derivative key, one set of bytes: the other ratios of a request (which change how
    far the shared decode may be reduced) must not change an output."""
    made = {}
    for name, ratios in (
        ("alone", (Ratio(16, 9),)),
        ("with-square", (Ratio(1, 1), Ratio(16, 9))),
        ("with-tall", (Ratio(1, 5), Ratio(16, 9))),
    ):
        batch = accept(ledger, photos, tmp_path / name, profile=Profile(ratios=ratios))
        work(ledger)
        made[name] = {
            (item.item_id, item.derivative_key): Path(item.object_path).read_bytes()
            for item in ledger.views.items(batch.batch_id)
            if item.ratio == "16:9"
        }
    assert len(made["alone"]) == 4
    assert made["alone"] == made["with-square"] == made["with-tall"]


def test_a_source_changed_after_submit_fails_source_changed(ledger: Ledger, photos: Path, out_dir: Path):
    batch = accept(ledger, photos, out_dir)
    make_image(photos / "garden.jpeg", (200, 320), "JPEG", seed=42)
    (photos / "coffee.png").unlink()
    work(ledger)
    view = ledger.views.batch(batch.batch_id)
    assert view.state == "partial"
    assert {(f.item_id, f.error_code) for f in view.failures} == {
        ("garden.jpeg", "source_changed"),
        ("coffee.png", "source_missing"),
    }


def test_a_truncated_photo_fails_corrupt_image_at_render(ledger: Ledger, tmp_path: Path, out_dir: Path):
    src = tmp_path / "src"
    src.mkdir()
    data = (Path(__file__).parent.parent / "sample_images" / "public-domain" / "sk-rocket.jpg").read_bytes()
    (src / "cut.jpg").write_bytes(data[: len(data) // 2])
    make_image(src / "ok.png", (50, 40), "PNG")
    batch = accept(ledger, src, out_dir)
    assert batch.counts["queued"] == 6  # the header is intact: admitted
    work(ledger)
    view = ledger.views.batch(batch.batch_id)
    assert {(f.item_id, f.error_code) for f in view.failures} == {("cut.jpg", "corrupt_image")}
    assert view.counts["succeeded"] == 3
    events = [e for e in ledger.views.events(batch.batch_id, item_id="cut.jpg") if e.to_state == "failed"]
    assert len(events) == 3 and all(e.attempt == 1 for e in events)  # permanent: never retried


def test_an_encoded_output_that_does_not_verify_is_never_published(
    ledger: Ledger, tmp_path: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """Verification reads the encoded bytes in memory while the temp file is written: bytes that
    fail it are removed again, never linked, and each item fails as the crash it is."""
    import thumbctl.engine.rendering as rendering

    src = tmp_path / "src"
    src.mkdir()
    make_image(src / "one.jpg", (300, 200), "JPEG")
    encode = rendering.encode
    monkeypatch.setattr(rendering, "encode", lambda *args, **kwargs: encode(*args, **kwargs)[:-200])  # a truncated JPEG
    batch = accept(ledger, src, out_dir, max_attempts=2)
    work(ledger)
    view = ledger.views.batch(batch.batch_id)
    assert {f.error_code for f in view.failures} == {"worker_crashed"} and view.counts["failed"] == 3
    assert all("the encoded output does not decode as jpeg" in f.detail for f in view.failures)
    assert not [p for p in out_dir.rglob("*") if p.is_file() and p.parent.name != "batches"]


def test_identical_photos_share_one_object(ledger: Ledger, photos: Path, out_dir: Path, store_dir: Path):
    (photos / "copy.png").write_bytes((photos / "coffee.png").read_bytes())
    batch = accept(ledger, photos, out_dir)
    work(ledger)
    items = ledger.views.items(batch.batch_id)
    assert ledger.views.batch(batch.batch_id).state == "succeeded"
    assert len({i.derivative_key for i in items}) == 12
    assert len(objects_in(store_dir)) == 12
    copy, coffee = out_dir / "copy.1x1.jpg", out_dir / "coffee.1x1.jpg"
    assert copy.read_bytes() == coffee.read_bytes() and not os.path.samefile(copy, coffee)  # one object, two files


def test_one_photo_behind_many_item_ids_is_encoded_once_per_key_per_claim(
    ledger: Ledger, tmp_path: Path, out_dir: Path, store_dir: Path
):
    """300 SKUs, one photo, two ratios: 600 items, two derivative keys. Each claim takes the keys
    still queued plus at most CLAIM_SHARED_ITEMS items sharing them, encodes each key once and
    publishes it for every item; each item still gets its own friendly name and ``succeeded`` event."""
    src = tmp_path / "src"
    make_image(src / "photo.jpg", (120, 90), "JPEG")
    entries = [json.dumps({"id": f"sku{n}", "source": "photo.jpg"}) for n in range(300)]
    (src / "m.jsonl").write_text("\n".join(entries) + "\n")
    batch = accept(ledger, src / "m.jsonl", out_dir, profile=Profile(ratios=(Ratio(1, 1), Ratio(16, 9)), size=64))
    claims = work(ledger)
    items = ledger.views.items(batch.batch_id)
    assert ledger.views.batch(batch.batch_id).counts["succeeded"] == 600
    assert CLAIM_SHARED_ITEMS == 64 and claims == 10  # 5 claims of both keys (2 + 64), then 5 of the other (1 + 64)
    events = ledger.views.events(batch.batch_id)
    claimed_keys = {(e.at, e.ratio) for e in events if e.to_state == "running"}  # a claim's events share `at`
    encoded = [i for i in items if not i.result["shared_render"]]
    assert len(encoded) == len(claimed_keys) == 15  # one encode per key per claim, not one per item
    assert all("encode_ms" in i.result["timings"] for i in encoded)
    assert not any("encode_ms" in i.result["timings"] for i in items if i.result["shared_render"])
    assert len({i.friendly_path for i in items}) == 600 and len(objects_in(store_dir)) == 2
    assert all(is_copy_of(i.friendly_path, i.object_path) for i in items)
    succeeded = [e for e in events if e.to_state == "succeeded"]
    assert len(succeeded) == len({(e.item_id, e.ratio) for e in succeeded}) == 600
    check_invariants(ledger)


def test_resubmitting_reuses_objects_and_renders_only_the_changed_photo(ledger: Ledger, photos: Path, out_dir: Path):
    first = accept(ledger, photos, out_dir)
    work(ledger)
    make_image(photos / "garden.jpeg", (200, 320), "JPEG", seed=7)
    (out_dir / "coffee.1x1.jpg").unlink()
    second = accept(ledger, photos, out_dir)
    assert second.batch_id != first.batch_id
    assert second.counts == {"queued": 3, "running": 0, "succeeded": 9, "failed": 0, "cancelled": 0}
    created = [e for e in ledger.views.events(second.batch_id) if e.from_state is None]
    assert sum(e.dedup for e in created) == 9 and all(e.to_state == "succeeded" for e in created if e.dedup)
    assert (out_dir / "coffee.1x1.jpg").exists()  # a reused object gets its friendly name back
    work(ledger)
    claimed = [e for e in ledger.views.events(second.batch_id) if e.to_state == "running"]
    assert {e.item_id for e in claimed} == {"garden.jpeg"}
    check_invariants(ledger)


def test_a_batch_whose_outputs_all_exist_is_finished_at_acceptance(ledger: Ledger, photos: Path, out_dir: Path):
    accept(ledger, photos, out_dir)
    work(ledger)
    again = accept(ledger, photos, out_dir, key="another-key")
    assert again.state == "succeeded" and not again.replayed
    assert Path(again.manifest_path).exists()


def test_a_damaged_object_is_not_reused(ledger: Ledger, photos: Path, out_dir: Path):
    first = accept(ledger, photos, out_dir)
    work(ledger)
    victim = ledger.views.items(first.batch_id)[0]
    Path(victim.object_path).write_bytes(b"\xff\xd8\xff garbage")
    second = accept(ledger, photos, out_dir, key="again")
    assert second.counts["queued"] == 1
    work(ledger)
    check_invariants(ledger)


def test_fault_rules_parse_and_reject_typos():
    assert parse_faults("crash:before_publish:0.3, pause:after_link") == (
        parse_faults("crash:before_publish:0.3")[0],
        parse_faults("pause:after_link")[0],
    )
    assert parse_faults("crash:after_commit:once")[0].once
    for bad in ("crash", "explode:before_publish", "crash:during_lunch", "crash:before_publish:x"):
        with pytest.raises(ValueError):
            parse_faults(bad)


def test_backoff_is_capped_and_jittered():
    backoff = Backoff(base=1.0, cap=8.0)
    for attempt in range(1, 12):
        samples = [backoff.delay_for(attempt) for _ in range(50)]
        assert all(0 <= s <= min(8.0, 2 ** (attempt - 1)) for s in samples)
        assert len(set(samples)) > 1


def test_a_replay_restores_missing_friendly_names_of_reused_outputs(ledger: Ledger, photos: Path, out_dir: Path):
    accept(ledger, photos, out_dir)
    work(ledger)
    reused = accept(ledger, photos, out_dir, key="reuse")
    assert reused.state == "succeeded"
    (out_dir / "coffee.4x3.jpg").unlink()
    again = accept(ledger, photos, out_dir, key="reuse")
    assert again.replayed and (out_dir / "coffee.4x3.jpg").exists()


def test_a_replay_does_no_image_work(ledger: Ledger, photos: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch):
    accept(ledger, photos, out_dir)
    work(ledger)
    import thumbctl.intake.reuse as reuse

    def no_image_work(*args, **kwargs):
        raise AssertionError("a replay must not open outputs")

    monkeypatch.setattr(reuse, "verify_output", no_image_work)
    again = accept(ledger, photos, out_dir)
    assert again.replayed and again.state == "succeeded"


@pytest.mark.parametrize(("linked", "failing"), [(".tmp", 12), ("rooms", 6), ("store/.tmp", 12), ("store/objects", 12)])
def test_a_folder_of_out_swapped_for_a_symlink_fails_its_items_at_once_and_writes_nothing_there(
    ledger: Ledger, photos: Path, out_dir: Path, store_dir: Path, tmp_path: Path, linked: str, failing: int
):
    batch = accept(ledger, photos, out_dir)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "living.1x1.jpg").write_text("precious user data")
    out_dir.mkdir(exist_ok=True)
    base, linked = (store_dir, linked.removeprefix("store/")) if linked.startswith("store/") else (out_dir, linked)
    if (base / linked).is_dir():
        shutil.rmtree(base / linked)
    (base / linked).symlink_to(victim, target_is_directory=True)
    before = tree_snapshot(victim)
    work(ledger)
    assert tree_snapshot(victim) == before
    items = ledger.views.items(batch.batch_id)
    failed = [i for i in items if i.state == "failed"]
    assert len(failed) == failing
    assert {(i.error_code, i.attempt) for i in failed} == {("path_outside_root", 1)}  # permanent: never retried
    assert all(f"{base / linked} is a symlink" in (i.error_detail or "") for i in failed)
    assert all(i.state == "succeeded" for i in items if i not in failed)


#: (source, focus) -> ratio -> the window centred on the focal point as nearly as the edges allow,
#: worked by hand. Wide: rooms/living.jpg, 1800x1200 upright; 1:1 is 1200x1200, 16:9 1800x1012.
#: Tall: garden.jpeg, 200x320; 1:1 is 200x200, 16:9 200x112. E.g. wide, (0.5, 0.5), 1:1:
#: left = 900 - 600 = 300; tall, (1, 1), 16:9: top = min(320 - 56, 320 - 112) = 208.
FOCUS_WINDOWS = {
    ("rooms/living.jpg", (0, 0)): {"1:1": [0, 0, 1200, 1200], "16:9": [0, 0, 1800, 1012]},
    ("rooms/living.jpg", (1, 1)): {"1:1": [600, 0, 1800, 1200], "16:9": [0, 188, 1800, 1200]},
    ("rooms/living.jpg", (0.5, 0.5)): {"1:1": [300, 0, 1500, 1200], "16:9": [0, 94, 1800, 1106]},
    ("garden.jpeg", (0, 0)): {"1:1": [0, 0, 200, 200], "16:9": [0, 0, 200, 112]},
    ("garden.jpeg", (1, 1)): {"1:1": [0, 120, 200, 320], "16:9": [0, 208, 200, 320]},
    ("garden.jpeg", (0.5, 0.5)): {"1:1": [0, 60, 200, 260], "16:9": [0, 104, 200, 216]},
}
SOURCE_SIZES = {"rooms/living.jpg": (1800, 1200), "garden.jpeg": (200, 320)}
SHAPES = {"rooms/living.jpg": "wide", "garden.jpeg": "tall"}


def items_json(ledger: Ledger, batch_id: str) -> dict[tuple[str, str], dict]:
    """What ``status BATCH --items --json`` prints, keyed by (item id, ratio)."""
    result = CliRunner().invoke(app, ["status", batch_id, "--items", "--json", "--db", str(ledger.path)])
    assert result.exit_code == 0, result.stderr
    return {(i["item_id"], i["ratio"]): i for i in json.loads(result.stdout)["items"]}


def test_a_manifest_focus_places_the_window_on_the_point(ledger: Ledger, photos: Path, out_dir: Path):
    """The window is centred on the item's focal point as nearly as the edges allow, whatever the
    policy; the same source without a focus is smart-cropped, as a different object."""
    entries = [{"id": f"{shape}/smart", "source": source} for source, shape in SHAPES.items()]
    for source, (fx, fy) in FOCUS_WINDOWS:
        entries.append({"id": f"{SHAPES[source]}/{fx},{fy}", "source": source, "focus": [fx, fy]})
    (photos / "m.jsonl").write_text("\n".join(json.dumps(entry) for entry in entries) + "\n")
    batch = accept(ledger, photos / "m.jsonl", out_dir, profile=Profile(ratios=(Ratio(1, 1), Ratio(16, 9)), size=96))
    work(ledger)
    items = items_json(ledger, batch.batch_id)
    assert len(items) == 16 and {i["state"] for i in items.values()} == {"succeeded"}
    for (source, (fx, fy)), windows in FOCUS_WINDOWS.items():
        src_w, src_h = SOURCE_SIZES[source]
        for ratio, expected in windows.items():
            item = items[f"{SHAPES[source]}/{fx},{fy}", ratio]
            assert item["result"]["crop"] == {"box": expected, "score": 1.0, "policy": "focus"}
            left, top, right, bottom = expected
            assert left <= fx * src_w <= right and top <= fy * src_h <= bottom
            smart = items[f"{SHAPES[source]}/smart", ratio]
            assert smart["result"]["crop"]["policy"] == "smart"
            same_window = smart["result"]["crop"]["box"] == expected
            same_bytes = Path(item["object_path"]).read_bytes() == Path(smart["object_path"]).read_bytes()
            assert same_bytes == same_window, (source, (fx, fy), ratio)


# -- sources swapped after submit ---------------------------------------------------------


def outcomes(ledger: Ledger, batch_id: str) -> set[tuple[str, str | None, int]]:
    return {(i.state, i.error_code, i.attempt) for i in ledger.views.items(batch_id)}


def failed_events(ledger: Ledger, batch_id: str) -> int:
    return sum(1 for e in ledger.views.events(batch_id) if e.to_state == "failed")


def test_a_source_folder_swapped_for_a_symlink_after_submit_is_not_read_through_it(
    ledger: Ledger, tmp_path: Path, out_dir: Path
):
    """The folder outside holds the very same photo, so a render through the link would
    pass the digest check: only the open's refusal keeps it out."""
    src = tmp_path / "src"
    make_image(src / "sub" / "a.jpg", (64, 48), "JPEG")
    batch = accept(ledger, src, out_dir)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(src / "sub", elsewhere)
    (src / "sub").rename(src / "sub.orig")
    (src / "sub").symlink_to(elsewhere, target_is_directory=True)
    work(ledger)
    assert outcomes(ledger, batch.batch_id) == {("failed", "path_outside_root", 1)}
    assert failed_events(ledger, batch.batch_id) == 3  # permanent: each item failed once, never retried
    assert all("sub is now a symlink" in (i.error_detail or "") for i in ledger.views.items(batch.batch_id))
    assert not (out_dir / "objects").exists() or not list((out_dir / "objects").rglob("*.jpg"))


def make_zero_device(path: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")


@pytest.mark.parametrize(
    ("swap", "code"),
    [
        (lambda src: ((src / "sub").rename(src / "sub.orig"), (src / "sub").symlink_to("/dev")), "path_outside_root"),
        (lambda src: ((src / "sub" / "zero").unlink(), make_zero_device(src / "sub" / "zero")), "unsupported_format"),
        (lambda src: ((src / "sub" / "zero").unlink(), os.mkfifo(src / "sub" / "zero")), "unsupported_format"),
    ],
    ids=["folder-linked-to-dev", "device", "fifo"],
)
def test_a_source_swapped_for_something_endless_fails_at_once_without_reading_it(
    ledger: Ledger, tmp_path: Path, out_dir: Path, swap, code: str
):
    """``sub/zero`` becomes /dev/zero (through a linked folder, or a device node in place)
    or a FIFO: the worker neither reads without end nor waits for a writer."""
    src = tmp_path / "src"
    make_image(src / "sub" / "zero", (64, 48), "PNG")
    (src / "m.jsonl").write_text('{"source": "sub/zero"}\n')
    batch = accept(ledger, src / "m.jsonl", out_dir)
    swap(src)
    fifo = src / "sub" / "zero"
    unblock = threading.Timer(30, lambda: os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)))
    unblock.start()  # should a read block on the FIFO, a writer ends it and the test fails instead of hanging
    started = time.monotonic()
    try:
        work(ledger)
    finally:
        unblock.cancel()
    assert time.monotonic() - started < 20
    assert outcomes(ledger, batch.batch_id) == {("failed", code, 1)}
    assert failed_events(ledger, batch.batch_id) == 3


def test_a_source_grown_over_the_byte_limit_after_submit_fails_too_large(ledger: Ledger, tmp_path: Path, out_dir: Path):
    src = tmp_path / "src"
    photo = make_image(src / "a.png", (64, 48), "PNG")
    batch = accept(ledger, src, out_dir, limits=Limits(max_bytes=photo.stat().st_size + 10))
    with photo.open("ab") as fh:
        fh.write(b"\0" * 100)
    work(ledger)
    assert outcomes(ledger, batch.batch_id) == {("failed", "too_large", 1)}


def test_idle_waits_start_short_and_double_up_to_the_poll_period():
    waits = idle_waits(0.25)
    assert [next(waits) for _ in range(6)] == [0.02, 0.04, 0.08, 0.16, 0.25, 0.25]
    assert next(idle_waits(0.01)) == 0.01


def no_delay(attempt: int) -> float:
    return 0.0


def test_a_worker_that_ran_dry_notices_the_end_of_the_batch_long_before_its_poll_period(
    ledger: Ledger, photos: Path, out_dir: Path, tmp_path: Path
):
    """At the end of a batch one worker finds nothing to claim while another still renders the
    last source; once that source is settled the idle worker must stop at once, not a whole poll
    period (here a minute) later."""
    batch = accept(ledger, photos, out_dir)
    held = None
    while claim := ledger.queue.claim("elsewhere:1:1", batch_id=batch.batch_id):
        if held is None:
            held = claim  # stays running, "in another worker", while the worker below runs dry
        else:
            ledger.queue.fail(claim, [i.row for i in claim.items], "corrupt_image", "not this test's concern", no_delay)
    config = WorkerConfig(str(ledger.path), batch_id=batch.batch_id, poll_seconds=60.0)
    faults = Faults("pause:ran_dry:once", str(tmp_path))
    done = threading.Event()
    thread = threading.Thread(target=lambda: (run_worker(config, threading.Event(), faults), done.set()))
    thread.start()
    while not list(tmp_path.glob("paused-ran_dry-*")):  # the worker found nothing to claim
        assert thread.is_alive()
        time.sleep(0.01)
    ledger.queue.fail(held, [i.row for i in held.items], "corrupt_image", "the last source settles", no_delay)
    (tmp_path / "release").touch()
    finished = done.wait(timeout=20)
    thread.join(timeout=70)
    assert finished


# -- derivative sets: ratios x sizes x formats -----------------------------------------------


def test_a_set_of_sizes_and_formats_gives_one_named_file_per_ratio_size_and_format(
    ledger: Ledger, photos: Path, out_dir: Path
):
    profile = Profile(ratios=(Ratio(1, 1), Ratio(16, 9)), size=(64, 128), format=("webp", "jpeg"))
    batch = accept(ledger, photos, out_dir, profile=profile)
    assert batch.total == 4 * 2 * 2 * 2
    work(ledger)
    assert ledger.views.batch(batch.batch_id).counts["succeeded"] == 32
    check_invariants(ledger)
    names = {
        f"{stem}.{ratio}.{size}.{ext}"
        for stem in ("coffee", "garden", "rooms/kitchen", "rooms/living")
        for ratio in ("1x1", "16x9")
        for size in (64, 128)
        for ext in ("webp", "jpg")
    }
    files = {p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if p.is_file()}
    published = {f for f in files if not f.startswith(("objects/", "batches/"))}
    assert published == names
    for item in ledger.views.items(batch.batch_id):
        w, h = (int(v) for v in item.ratio.split(":"))
        expected = (item.size, round(item.size * h / w))
        ext = {"webp": "webp", "jpeg": "jpg"}[item.format]
        assert item.friendly_path == f"{out_dir}/{item.item_id.rsplit('.', 1)[0]}.{w}x{h}.{item.size}.{ext}"
        with Image.open(item.friendly_path) as image:
            assert (image.format.lower(), image.size) == (item.format, expected)
        assert {"size": item.size, "format": item.format}.items() <= item.to_json().items()
    manifest_path = write_batch_manifest(ledger.views.batch(batch.batch_id), ledger.views.items(batch.batch_id))
    manifest = json.loads(Path(manifest_path).read_text())
    assert sorted((i["item_id"], i["ratio"], i["size"], i["format"]) for i in manifest["items"]) == sorted(
        (i.item_id, i.ratio, i.size, i.format) for i in ledger.views.items(batch.batch_id)
    )


def test_each_source_is_decoded_once_per_dct_scale_and_analysed_once(
    ledger: Ledger, photos: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """rooms/living.jpg (1800x1200 upright, stored on its side) needs three DCT scales for 64,
    128 and 1280 px (1/8, 1/4 and 1/1, the last shared with the analysis copy); the other sources
    one decode each. Two formats (one with alpha, one without) and three ratios decode nothing more."""
    from thumbctl.imaging import decode

    trace: list[tuple[str, str, tuple[int, int]]] = []
    monkeypatch.setattr(decode, "TRACE", trace)
    batch = accept(ledger, photos, out_dir, profile=Profile(size=(64, 128, 1280), format=("webp", "jpeg")))
    work(ledger)
    assert ledger.views.batch(batch.batch_id).counts["succeeded"] == 4 * 3 * 3 * 2
    decodes = [(Path(label).name, size) for kind, label, size in trace if kind == "decode"]
    analyses = [Path(label).name for kind, label, _ in trace if kind == "analysis"]
    assert sorted(analyses) == ["coffee.png", "garden.jpeg", "kitchen.webp", "living.jpg"]
    assert len(decodes) == len(set(decodes))  # never the same source at the same scale twice
    assert sorted(size for name, size in decodes if name == "living.jpg") == [(150, 225), (300, 450), (1200, 1800)]
    assert sorted(name for name, _ in decodes if name != "living.jpg") == ["coffee.png", "garden.jpeg", "kitchen.webp"]


def test_a_2x_output_shows_the_framing_of_its_1x(ledger: Ledger, photos: Path, out_dir: Path):
    profile = Profile(ratios=(Ratio(4, 3), Ratio(16, 9), Ratio(1, 3)), size=(100, 200), crop="smart")
    batch = accept(ledger, photos, out_dir, profile=profile)
    work(ledger)
    by_size: dict[int, dict[tuple[str, str], dict]] = {100: {}, 200: {}}
    for item in ledger.views.items(batch.batch_id):
        assert item.state == "succeeded" and item.result is not None
        by_size[item.size][item.item_id, item.ratio] = item.result
    assert by_size[100].keys() == by_size[200].keys()
    for key, small in by_size[100].items():
        large = by_size[200][key]
        assert large["crop"]["box"] == small["crop"]["box"], key  # the same window, scaled
        if key[1] == "4:3" and not large["source_smaller_than_target"]:
            assert (large["width"], large["height"]) == (2 * small["width"], 2 * small["height"])


def test_a_derivative_is_the_same_bytes_whatever_sizes_and_formats_are_asked_beside_it(
    ledger: Ledger, photos: Path, tmp_path: Path
):
    made = {}
    for name, size, fmt in (("alone", 128, "jpeg"), ("in-a-set", (64, 128, 1280), ("jpeg", "webp"))):
        batch = accept(ledger, photos, tmp_path / name, profile=Profile(ratios=(Ratio(16, 9),), size=size, format=fmt))
        work(ledger)
        made[name] = {
            (item.item_id, item.derivative_key): Path(item.object_path).read_bytes()
            for item in ledger.views.items(batch.batch_id)
            if item.size == 128 and item.format == "jpeg"
        }
    assert len(made["alone"]) == 4 and made["alone"] == made["in-a-set"]


def test_sizes_that_collapse_on_a_small_source_keep_the_names_asked_for(ledger: Ledger, photos: Path, out_dir: Path):
    """garden.jpeg is 200x320: without --upscale 256 and 512 both give its 200x200 square, under
    two names (the size asked for), each saying the source was smaller."""
    batch = accept(ledger, photos, out_dir, profile=Profile(ratios=(Ratio(1, 1),), size=(256, 512)))
    work(ledger)
    garden = [item for item in ledger.views.items(batch.batch_id) if item.item_id == "garden.jpeg"]
    assert sorted(Path(item.friendly_path).name for item in garden) == ["garden.1x1.256.jpg", "garden.1x1.512.jpg"]
    for item in garden:
        assert item.result["source_smaller_than_target"] is True
        assert (item.result["width"], item.result["height"]) == (200, 200)
    names = [item.friendly_path for item in ledger.views.items(batch.batch_id)]
    assert len(names) == len(set(names)) == 8
