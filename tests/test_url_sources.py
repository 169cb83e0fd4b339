"""Sources by URL through ``thumbctl submit``: a manifest of http sources served by the tests' own
server (tests/httpserver.py), the good ones rendered, each hostile one failed with its code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import Thumbctl
from httpserver import NETWORK, Answer, HttpServer, gzip_bomb, redirect
from s3 import BUCKET, WeedServer, put_raw, raw_store

SAMPLES = Path(__file__).resolve().parent.parent / "sample_images" / "public-domain"
COFFEE = (SAMPLES / "sk-coffee.png").read_bytes()
#: The flags every run here takes: only the tests' server is reachable, downloads end within 5 s,
#: and no source may be over 1 MB.
URL_FLAGS = ("--allow-network", NETWORK, "--download-timeout", "5s", "--max-bytes", "1MB", "-r", "1:1", "-w", "1")


def write_manifest(folder: Path, items: list[dict[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.json"
    path.write_text(json.dumps({"items": items}))
    return path


def hostile_items(server: HttpServer) -> dict[str, tuple[str, str]]:
    """id -> (URL, the item code its source must fail with)."""

    def url(name: str, *answers: Answer) -> str:
        return server.route(name, *answers)[0]

    chain = url("end.png", Answer(body=COFFEE))
    for n in range(6):
        chain = url(f"hop{n}", redirect(chain))
    return {
        "drip": (url("drip.png", Answer(body=COFFEE[:400], drip=0.02)), "source_timeout"),
        "no-length": (url("endless.png", Answer(stream_bytes=5_000_000, chunked=True)), "too_large"),
        "long-length": (url("big.png", Answer(stream_bytes=5_000_000)), "too_large"),
        # the bomb's 50 kB come through as they are (not an image), never its 50 MB inflated (too_large)
        "bomb": (url("bomb.png", Answer(body=gzip_bomb(50_000_000), headers={"Content-Encoding": "gzip"})),
                 "unsupported_format"),
        "to-loopback": (url("lo.png", redirect(server.url("/x.png", "127.0.0.1"))), "source_forbidden_address"),
        "to-metadata": (url("md.png", redirect("http://169.254.169.254/latest/meta-data/")),
                        "source_forbidden_address"),
        "six-redirects": (chain, "source_http_error"),
        "missing": (url("gone.png", Answer(404)), "source_missing"),
        "down": (url("down.png", Answer(503)), "source_unreachable"),
        "localhost": (server.url(url("a.png", Answer(body=COFFEE)).split(str(server.port), 1)[1], "localhost"),
                      "source_forbidden_address"),
    }  # fmt: skip


def test_a_manifest_of_url_sources_renders_the_good_ones_and_fails_each_hostile_one_with_its_code(
    http_server: HttpServer, ledger_url: str, tmp_path: Path
) -> None:
    good = {
        "plain": http_server.route("coffee.png", Answer(body=COFFEE))[0],
        "flaky": http_server.route("flaky.png", Answer(503), Answer(body=COFFEE))[0],
        "busy": http_server.route("busy.png", Answer(429, headers={"Retry-After": "1"}), Answer(body=COFFEE))[0],
    }
    hostile = hostile_items(http_server)
    items = [{"id": i, "source": u} for i, u in good.items()] + [
        {"id": i, "source": u} for i, (u, _) in hostile.items()
    ]
    manifest = write_manifest(tmp_path / "m", items)
    cli = Thumbctl(ledger_url, store=tmp_path / "store")
    done = cli.run("submit", manifest, "--out", tmp_path / "out", "--json", *URL_FLAGS)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["state"] == "partial" and doc["counts"]["succeeded"] == len(good)
    assert {f["item_id"]: f["error_code"] for f in doc["failures"]} == {i: code for i, (_, code) in hostile.items()}
    names = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").glob("*.jpg"))
    assert names == ["busy.1x1.jpg", "flaky.1x1.jpg", "plain.1x1.jpg"]
    plain = json.loads(cli.run("status", doc["batch_id"], "--items", "--json").stdout)
    sources = {item["item_id"]: item["source"] for item in plain["items"]}
    assert sources["plain"] == good["plain"]


def test_a_source_whose_bytes_change_before_the_worker_reads_it_fails_source_changed(
    http_server: HttpServer, tmp_path: Path
) -> None:
    url, route = http_server.route("coffee.png", Answer(body=COFFEE))
    manifest = write_manifest(tmp_path / "m", [{"source": url}])
    cli = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults")
    run = cli.start("submit", manifest, "--out", tmp_path / "out", "--json", *URL_FLAGS, fault="pause:before_decode")
    cli.paused("before_decode", process=run)
    route.answers = [Answer(body=(SAMPLES.parent / "orientation" / "Landscape_6.jpg").read_bytes())]
    cli.release()
    out, _ = run.communicate()
    assert run.returncode == 1
    assert json.loads(out)["failures"][0]["error_code"] == "source_changed"
    status = json.loads(cli.run("status", "--json").stdout)["batches"][0]
    assert status["state"] == "failed"
    items = json.loads(cli.run("status", status["batch_id"], "--items", "--json").stdout)["items"]
    assert [item["error_code"] for item in items] == ["source_changed"]
    assert route.requests == 2


@pytest.mark.parametrize("validators", [{"ETag": '"v1"'}, {"Last-Modified": "Tue, 01 Dec 2026 10:00:00 GMT"}])
def test_a_resubmit_asks_again_and_reads_no_body_while_the_validators_match(
    http_server: HttpServer, tmp_path: Path, validators: dict[str, str]
) -> None:
    """The re-submit's answer drips its body for 20 s: read, it would end in source_timeout."""
    same = Answer(body=COFFEE, headers=validators)
    url, route = http_server.route("coffee.png", same, Answer(body=COFFEE, headers=validators, drip=0.01))
    manifest = write_manifest(tmp_path / "m", [{"id": "coffee.png", "source": url}])
    cli = Thumbctl(tmp_path / "ledger.db")
    first = cli.run("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS)
    assert first.returncode == 0, first.stderr
    again = cli.run("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS)
    assert again.returncode == 0, again.stderr
    assert "Replayed existing batch" in again.stdout and "sources read 0, unchanged (stat cache) 1" in again.stdout
    assert route.requests == 2
    route.answers = [Answer(body=COFFEE + b"\0", headers=validators)]
    changed = cli.run("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS)
    assert changed.returncode == 0 and "Accepted batch" in changed.stdout, changed.stdout
    assert "sources read 1, unchanged (stat cache) 0" in changed.stdout


def test_s3_sources_of_a_manifest_are_read_from_the_bucket_and_cached_by_etag(
    s3_server: WeedServer, s3_url: str, tmp_path: Path
) -> None:
    store = raw_store(s3_server)
    prefix = s3_url.split("/", 3)[3]
    put_raw(store, f"{prefix}/photos/coffee.png", COFFEE, "image/png")
    put_raw(store, f"{prefix}/photos/big.png", COFFEE * 2, "image/png")
    items = [
        {"source": f"{s3_url}/photos/coffee.png"},
        {"id": "gone", "source": f"{s3_url}/photos/gone.png"},
        {"id": "big", "source": f"{s3_url}/photos/big.png"},
    ]
    manifest = write_manifest(tmp_path / "m", items)
    cli = Thumbctl(tmp_path / "ledger.db")
    limit = str(len(COFFEE) + 1)
    done = cli.run("submit", manifest, "--out", tmp_path / "out", "--json", *URL_FLAGS, "--max-bytes", limit)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert {f["item_id"]: f["error_code"] for f in doc["failures"]} == {"gone": "source_missing", "big": "too_large"}
    coffee_id = f"{BUCKET}/{prefix}/photos/coffee.png"
    assert (tmp_path / "out" / BUCKET / prefix / "photos" / "coffee.1x1.jpg").is_file(), coffee_id
    again = cli.run("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS, "--max-bytes", limit)
    assert "Replayed existing batch" in again.stdout and "sources read 0, unchanged (stat cache) 1" in again.stdout


def test_submit_of_an_s3_prefix_scans_it_as_a_folder(s3_server: WeedServer, s3_url: str, tmp_path: Path) -> None:
    store = raw_store(s3_server)
    prefix = s3_url.split("/", 3)[3]
    put_raw(store, f"{prefix}/shop/coffee.png", COFFEE, "image/png")
    put_raw(store, f"{prefix}/shop/rooms/living.JPG", (SAMPLES.parent / "orientation" / "Landscape_6.jpg").read_bytes())
    put_raw(store, f"{prefix}/shop/notes.txt", b"not a photo")
    put_raw(store, f"{prefix}/shop/.cache/x.png", COFFEE)
    put_raw(store, f"{prefix}/elsewhere.png", COFFEE)
    cli = Thumbctl(tmp_path / "ledger.db")
    done = cli.run("submit", f"{s3_url}/shop/", "--out", tmp_path / "out", "--json", *URL_FLAGS)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["state"], doc["total"]) == ("succeeded", 2)
    names = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.jpg"))
    assert names == ["coffee.1x1.jpg", "rooms/living.1x1.jpg"]
    items = json.loads(cli.run("status", doc["batch_id"], "--items", "--json").stdout)["items"]
    assert sorted(item["source"] for item in items) == [f"{s3_url}/shop/coffee.png", f"{s3_url}/shop/rooms/living.JPG"]
    missing = cli.run("submit", "s3://no-such-bucket-here/x/", "--out", tmp_path / "out", "--json", *URL_FLAGS)
    assert missing.returncode == 2 and json.loads(missing.stdout)["error"]["code"] == "bucket_missing", missing.stdout


def test_s3_sources_use_the_thumbctl_s3_endpoint_over_the_aws_one(
    s3_server: WeedServer, s3_url: str, tmp_path: Path
) -> None:
    """The AWS variable points at a port nothing listens on: the scan and the reads reach the bucket
    only through THUMBCTL_S3_ENDPOINT, as the store and OUT do."""
    store = raw_store(s3_server)
    prefix = s3_url.split("/", 3)[3]
    put_raw(store, f"{prefix}/shop/coffee.png", COFFEE, "image/png")
    cli = Thumbctl(tmp_path / "ledger.db")
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "THUMBCTL_S3_ENDPOINT": s3_server.endpoint}
    done = cli.run("submit", f"{s3_url}/shop/", "--out", tmp_path / "out", "--json", *URL_FLAGS, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (json.loads(done.stdout)["state"], json.loads(done.stdout)["total"]) == ("succeeded", 1)
    assert (tmp_path / "out" / "coffee.1x1.jpg").is_file()
