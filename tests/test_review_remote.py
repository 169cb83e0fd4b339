"""The review page over remote photos and remote outputs: an OUT, a store and a source prefix in a
bucket (SeaweedFS), and photos given by URL in a manifest. Apply renders the names in the bucket or
OUT again and writes the fix file at the photos' root."""

from __future__ import annotations

import json
from pathlib import Path

from test_url_sources import COFFEE, SAMPLES, URL_FLAGS, write_manifest

from harness import Thumbctl, until
from httpserver import Answer, HttpServer
from inprocess import submit_here
from reviewing import Review, reviewing
from s3 import WeedServer, get_raw, put_raw, raw_store

LANDSCAPE = (SAMPLES.parent / "orientation" / "Landscape_6.jpg").read_bytes()


def apply_and_wait(review: Review, photo: dict, changes: dict) -> dict:
    answer = review.post(f"api/photos/{photo['id']}/apply", {"version": photo["version"], "changes": changes})
    assert answer.status == 200, answer.body
    applied = answer.json()

    def finished() -> bool:
        return all(review.get(f"api/batches/{b}").json()["state"] == "succeeded" for b in applied["batches"])

    until(finished, "the Apply's batch to succeed", timeout=90, every=0.1)
    return applied


def test_an_out_a_store_and_photos_in_a_bucket(s3_server: WeedServer, s3_url: str, tmp_path: Path) -> None:
    bucket = raw_store(s3_server)
    prefix = s3_url.split("/", 3)[3]
    put_raw(bucket, f"{prefix}/shop/living.jpg", LANDSCAPE, "image/jpeg")
    put_raw(bucket, f"{prefix}/shop/coffee.png", COFFEE, "image/png")
    cli = Thumbctl(tmp_path / "ledger.db", store=None, env={"THUMBCTL_STORE": f"{s3_url}/store"})
    site = f"{s3_url}/site"
    submit_here(cli, f"{s3_url}/shop/", "--out", site, *URL_FLAGS)
    name_key = f"{prefix}/site/living.1x1.jpg"
    before, _ = get_raw(bucket, name_key)
    with reviewing(cli, site) as review:
        photo = next(p for p in review.photos()["photos"] if p["source"].endswith("living.jpg"))
        assert review.get(f"img/{photo['id']}/thumbnail?name=living.1x1.jpg").body == before
        assert review.get(f"img/{photo['id']}/preview").status == 200
        applied = apply_and_wait(review, photo, {"1:1": [0.05, 0.5]})
        assert applied["fix_file"]["problem"] is None
        after, _ = get_raw(bucket, name_key)
        assert after != before
        assert review.get(f"img/{photo['id']}/thumbnail?name=living.1x1.jpg").body == after
    fixes = json.loads(get_raw(bucket, f"{prefix}/shop/thumbctl-focus.json")[0])["photos"]
    assert [(f["path"], f["focus"]) for f in fixes] == [("living.jpg", {"1:1": [0.05, 0.5]})]


def test_photos_given_by_url_in_a_manifest(http_server: HttpServer, tmp_path: Path) -> None:
    url, _ = http_server.route("living.jpg", *[Answer(body=LANDSCAPE)] * 4)
    manifest = write_manifest(tmp_path / "m", [{"id": "living", "source": url}])
    cli = Thumbctl(tmp_path / "ledger.db")
    out = tmp_path / "out"
    submit_here(cli, manifest, "--out", out, *URL_FLAGS)
    before = (out / "living.1x1.jpg").read_bytes()
    with reviewing(cli, out) as review:
        (photo,) = review.photos()["photos"]
        apply_and_wait(review, photo, {"1:1": [0.95, 0.5]})
    assert (out / "living.1x1.jpg").read_bytes() != before
    fixes = json.loads((tmp_path / "m" / "thumbctl-focus.json").read_text())["photos"]
    assert [(f["path"], f["focus"]) for f in fixes] == [(url, {"1:1": [0.95, 0.5]})]


def test_a_postgresql_ledger(pg_url: str, tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "living.jpg").write_bytes(LANDSCAPE)
    cli = Thumbctl(pg_url, store=tmp_path / "store")
    out = tmp_path / "out"
    submit_here(cli, photos, "--out", out, "-r", "1:1,16:9")
    before = (out / "living.16x9.jpg").read_bytes()
    with reviewing(cli, out) as review:
        (photo,) = review.photos()["photos"]
        apply_and_wait(review, photo, {"16:9": [0.5, 0.95]})
        now = review.photos()["photos"][0]
        assert next(r for r in now["ratios"] if r["ratio"] == "16:9")["policy"] == "focus"
        approved = review.post(f"api/photos/{photo['id']}/approve", {"version": now["version"]})
        assert approved.status == 200 and approved.json()["changed"] is False
    assert (out / "living.16x9.jpg").read_bytes() != before
    assert json.loads((photos / "thumbctl-focus.json").read_text())["photos"][0]["focus"] == {"16:9": [0.5, 0.95]}
