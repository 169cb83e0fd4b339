"""Sources by URL through ``thumbctl submit``: a manifest of http sources served by the tests' own
server (tests/httpserver.py), the good ones rendered, each hostile one failed with its code."""

from __future__ import annotations

import contextlib
import html
import json
import shlex
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from harness import Thumbctl
from httpserver import NETWORK, Answer, HttpServer, gzip_bomb, redirect
from inprocess import json_here, render_here, submit_here
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
    doc = submit_here(cli, manifest, "--out", tmp_path / "out", *URL_FLAGS, states=("partial",))
    assert doc["state"] == "partial" and doc["counts"]["succeeded"] == len(good)
    assert {f["item_id"]: f["error_code"] for f in doc["failures"]} == {i: code for i, (_, code) in hostile.items()}
    names = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").glob("*.jpg"))
    assert names == ["busy.1x1.jpg", "flaky.1x1.jpg", "plain.1x1.jpg"]
    plain = json_here(cli, "status", doc["batch_id"], "--items")
    sources = {item["item_id"]: item["source"] for item in plain["items"]}
    assert sources["plain"] == good["plain"]


def test_a_source_whose_bytes_change_before_the_worker_reads_it_fails_source_changed(
    http_server: HttpServer, tmp_path: Path
) -> None:
    url, route = http_server.route("coffee.png", Answer(body=COFFEE))
    manifest = write_manifest(tmp_path / "m", [{"source": url}])
    cli = Thumbctl(tmp_path / "ledger.db")
    recorded = json_here(cli, "submit", manifest, "--out", tmp_path / "out", *URL_FLAGS, "--detach")
    route.answers = [Answer(body=(SAMPLES.parent / "orientation" / "Landscape_6.jpg").read_bytes())]
    render_here(cli.db, recorded["batch_id"])
    assert json_here(cli, "status", recorded["batch_id"])["failures"][0]["error_code"] == "source_changed"
    status = json_here(cli, "status")["batches"][0]
    assert status["state"] == "failed"
    items = json_here(cli, "status", status["batch_id"], "--items")["items"]
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
    first = cli.invoke("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS)
    assert first.returncode == 0, first.stderr
    again = cli.invoke("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS)
    assert again.returncode == 0, again.stderr
    assert "Replayed existing batch" in again.stdout and "sources read 0, unchanged (stat cache) 1" in again.stdout
    assert route.requests == 2
    route.answers = [Answer(body=COFFEE + b"\0", headers=validators)]
    changed = cli.invoke("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS)
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
    doc = submit_here(cli, manifest, "--out", tmp_path / "out", *URL_FLAGS, "--max-bytes", limit, states=("partial",))
    assert {f["item_id"]: f["error_code"] for f in doc["failures"]} == {"gone": "source_missing", "big": "too_large"}
    coffee_id = f"{BUCKET}/{prefix}/photos/coffee.png"
    assert (tmp_path / "out" / BUCKET / prefix / "photos" / "coffee.1x1.jpg").is_file(), coffee_id
    again = cli.invoke("submit", manifest, "--out", tmp_path / "out", "--detach", *URL_FLAGS, "--max-bytes", limit)
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
    doc = submit_here(cli, f"{s3_url}/shop/", "--out", tmp_path / "out", *URL_FLAGS)
    assert (doc["state"], doc["total"]) == ("succeeded", 2)
    names = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.jpg"))
    assert names == ["coffee.1x1.jpg", "rooms/living.1x1.jpg"]
    items = json_here(cli, "status", doc["batch_id"], "--items")["items"]
    assert sorted(item["source"] for item in items) == [f"{s3_url}/shop/coffee.png", f"{s3_url}/shop/rooms/living.JPG"]
    missing = cli.invoke("submit", "s3://no-such-bucket-here/x/", "--out", tmp_path / "out", "--json", *URL_FLAGS,
                         "--detach")  # fmt: skip
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


SECRETS = ("hunter2", "SIGSECRET", "CREDSECRET", "TOKSECRET")


def every_output(cli: Thumbctl, batch_id: str, out: Path, tmp_path: Path) -> dict[str, str]:
    """What a user can read of a batch: status and events in every form, the batch manifest, the sheet."""
    shown = {}
    for name, args in {
        "status": ("status",),
        "status --json": ("status", "--json"),
        "status --items": ("status", batch_id, "--items"),
        "status --items --json": ("status", batch_id, "--items", "--json"),
        "status --html": ("status", batch_id, "--html"),
        "events": ("events", batch_id),
        "events --json": ("events", batch_id, "--json"),
        "stats --json": ("stats", "--json"),
        "sheet": ("sheet", batch_id, "--output", tmp_path / "sheet.html"),
    }.items():
        done = cli.invoke(*args)
        shown[name] = done.stdout + done.stderr
    shown["manifest"] = (out / "batches" / f"{batch_id}.json").read_text()
    shown["sheet page"] = (tmp_path / "sheet.html").read_text()
    return shown


def test_credentials_are_refused_and_signed_queries_reach_the_server_but_are_never_shown(
    http_server: HttpServer, tmp_path: Path
) -> None:
    """A URL with ``user:password@`` fails ``source_forbidden_address`` and is recorded without the
    credentials; a signed URL is downloaded with its query at submit and again by the worker, and
    neither secret appears in anything thumbctl prints or writes for people to read, failures at
    submit and in the worker included."""
    plain, _ = http_server.route("a.png", Answer(body=COFFEE))
    query = "?X-Amz-Credential=CREDSECRET&X-Amz-Signature=SIGSECRET&token=TOKSECRET&w=1"
    signed, signed_route = http_server.route("b.png", Answer(body=COFFEE))
    broken, broken_route = http_server.route("c.png", Answer(body=COFFEE[:300]))
    other = (SAMPLES.parent / "orientation" / "Landscape_6.jpg").read_bytes()
    changed, changed_route = http_server.route("d.png", Answer(body=COFFEE), Answer(body=other))
    items = [
        {"id": "cred", "source": plain.replace("http://", "http://seller:hunter2@")},
        {"id": "signed", "source": signed + query},
        {"id": "broken", "source": broken + query},
        {"id": "changed", "source": changed + query},
    ]
    out = tmp_path / "out"
    cli = Thumbctl(tmp_path / "ledger.db")
    done = cli.run("submit", write_manifest(tmp_path / "m", items), "--out", out, "--json", *URL_FLAGS)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    failures = {f["item_id"]: f["error_code"] for f in doc["failures"]}
    assert failures["cred"] == "source_forbidden_address" and "signed" not in failures, failures
    assert failures["changed"] == "source_changed" and changed_route.requests == 2, failures  # failed in the worker
    assert signed_route.requests == 2 and all("X-Amz-Signature=SIGSECRET" in t for t in signed_route.request_targets)
    assert broken_route.requests >= 1
    shown = every_output(cli, doc["batch_id"], out, tmp_path)
    shown["submit"] = done.stdout + done.stderr
    leaks = [(name, secret) for name, text in shown.items() for secret in SECRETS if secret in text]
    assert leaks == [], leaks
    listed = json.loads(shown["status --items --json"])["items"]
    sources = {item["item_id"]: item["source"] for item in listed}
    assert sources["cred"] == plain
    assert sources["signed"] == signed + "?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&token=REDACTED&w=1"
    assert b"hunter2" not in (tmp_path / "ledger.db").read_bytes()


def test_download_timeout_bounds_a_header_drip_at_submit_and_in_the_worker(
    http_server: HttpServer, tmp_path: Path
) -> None:
    """One source drips its headers at submit, the other only when the worker downloads it again:
    both end at --download-timeout (2 s), not at --item-timeout (60 s)."""
    at_intake, _ = http_server.route("intake.png", Answer(header_drip=0.2))
    in_worker, route = http_server.route("worker.png", Answer(body=COFFEE), Answer(header_drip=0.2))
    items = [{"id": "intake", "source": at_intake}, {"id": "worker", "source": in_worker}]
    cli = Thumbctl(tmp_path / "ledger.db")
    flags = (*URL_FLAGS, "--download-timeout", "2s", "--item-timeout", "60s", "--attempts", "1")
    started = time.monotonic()
    doc = submit_here(cli, write_manifest(tmp_path / "m", items), "--out", tmp_path / "out", *flags, states=("failed",))
    elapsed = time.monotonic() - started
    failures = {f["item_id"]: (f["error_code"], f["detail"]) for f in doc["failures"]}
    assert failures["intake"][0] == "source_timeout", failures
    worker_code, worker_detail = failures["worker"]
    assert worker_code == "attempts_exhausted" and worker_detail.startswith("source_timeout"), failures
    assert route.requests == 2
    assert elapsed < 12, elapsed
    events = json_here(cli, "events", doc["batch_id"], "--item", "worker")
    at = {e["to_state"]: datetime.fromisoformat(e["at"].replace("Z", "+00:00")) for e in events["events"]}
    assert (at["failed"] - at["running"]).total_seconds() < 2 + 1, at  # the claim, then the deadline plus a second


SIGNED = "https://cdn.example.com/a.jpg?X-Amz-Credential=CREDSECRET&X-Amz-Signature=SIGSECRET&w=1"
WITH_CREDENTIALS = "https://seller:hunter2@cdn.example.com/b.jpg"


def _old_url_rows(execute: Callable[[str, tuple], object]) -> None:
    """A batch of an earlier version: an item that failed on its credentials, a queued one with a
    signed URL, events and a name that hold both, and the stat cache's row of the first."""
    at = "2024-01-01T00:00:00.000000Z"
    execute(
        "INSERT INTO batches (batch_id, idempotency_key, request_digest, total, source_root, out_dir, manifest_path, "
        "max_attempts, limits, created_at) VALUES ('b_old', 'k', 'd', 2, '/m', '/out', '/out/batches/b_old.json', 3, "
        "'{}', ?)",
        (at,),
    )
    failed = f"{WITH_CREDENTIALS}: a URL with credentials is not downloaded (was {SIGNED})"
    for item_id, source, state, detail in (("b", WITH_CREDENTIALS, "failed", failed), ("a", SIGNED, "queued", None)):
        execute(
            "INSERT INTO items (batch_id, item_id, ratio, size, format, source, state, error_code, error_detail, "
            "created_at, updated_at) VALUES ('b_old', ?, '1:1', 320, 'jpeg', ?, ?, ?, ?, ?, ?)",
            (item_id, source, state, "source_forbidden_address" if detail else None, detail, at, at),
        )
        execute(
            "INSERT INTO events (at, batch_id, item_row, to_state, detail, dedup) "
            "SELECT ?, 'b_old', id, ?, ?, 0 FROM items WHERE item_id = ?",
            (at, state, f"{source} then {SIGNED} ends", item_id),
        )
    execute(
        "INSERT INTO names (friendly_path, out_dir, object_path, source, ratio, size, format, batch_id, published_at) "
        "VALUES ('/out/b.1x1.jpg', '/out', 'o', ?, '1:1', 320, 'jpeg', 'b_old', ?)",
        (WITH_CREDENTIALS, at),
    )
    execute("INSERT INTO stat_cache (path, size) VALUES (?, 1)", (WITH_CREDENTIALS,))


def _sqlite_before_url_secrets(path: str) -> str:
    import sqlite3

    import sqlite_utils

    from thumbctl.ledger.schema import MIGRATIONS, _v16_url_secrets

    mine = next(version for version, migrate in MIGRATIONS if migrate is _v16_url_secrets)
    conn = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(conn)
    conn.execute("BEGIN")
    for version, migrate in MIGRATIONS:
        if version < mine:
            migrate(db)
    _old_url_rows(conn.execute)
    conn.execute(f"PRAGMA user_version = {mine - 1}")
    conn.execute("COMMIT")
    conn.close()
    return path


def _postgres_before_url_secrets(url: str) -> str:
    import psycopg

    from thumbctl.ledger.pgschema import _V10, MIGRATIONS

    mine = next(version for version, statements in MIGRATIONS if statements is _V10)
    with psycopg.connect(url, autocommit=False) as conn:
        for version, statements in MIGRATIONS:
            for statement in statements if version < mine else ():
                conn.execute(statement)
        conn.execute("CREATE TABLE thumbctl_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO thumbctl_schema (version) VALUES (%s)", (mine - 1,))
        _old_url_rows(lambda sql, params: conn.execute(sql.replace("?", "%s"), params))
    return url


def test_the_migration_removes_credentials_and_redacts_signed_queries_already_recorded(
    ledger_url: str, tmp_path: Path
) -> None:
    """Both backends: credentials leave every source and detail, a detail's signed query is
    redacted, and the queued item keeps its signed source, which its worker downloads with."""
    from thumbctl import Ledger

    from support import raw_rows

    if "://" in ledger_url:
        _postgres_before_url_secrets(ledger_url)
    else:
        _sqlite_before_url_secrets(ledger_url)
    with Ledger(ledger_url) as ledger:
        items = dict(raw_rows(ledger, "SELECT item_id, source FROM items"))
        details = [d for (d,) in raw_rows(ledger, "SELECT error_detail FROM items WHERE error_detail IS NOT NULL")]
        events = [d for (d,) in raw_rows(ledger, "SELECT detail FROM events ORDER BY seq")]
        names = [s for (s,) in raw_rows(ledger, "SELECT source FROM names")]
        cached = raw_rows(ledger, "SELECT path FROM stat_cache")
    plain = "https://cdn.example.com/b.jpg"
    shown = "https://cdn.example.com/a.jpg?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&w=1"
    assert items == {"b": plain, "a": SIGNED}
    assert details == [f"{plain}: a URL with credentials is not downloaded (was {shown})"]
    assert events == [f"{plain} then {shown} ends", f"{shown} then {shown} ends"]
    assert names == [plain] and cached == []


def test_a_detail_is_recorded_without_a_urls_secrets(ledger_url: str) -> None:
    """Whatever message a failure carries, the ledger records it without credentials or signed-query
    secrets: at admission, and when a worker fails an item (both backends)."""
    from dataclasses import replace

    from thumbctl import Ledger, Limits

    from support import new_batch, raw_rows

    said = f"could not read {WITH_CREDENTIALS} nor {SIGNED} here"
    shown = (
        "could not read https://cdn.example.com/b.jpg nor "
        "https://cdn.example.com/a.jpg?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&w=1 here"
    )
    batch = new_batch("k", "d", queued=1, failed=1)
    items = tuple(replace(item, error_detail=said) if item.error_code else item for item in batch.items)
    with Ledger(ledger_url) as ledger:
        ledger.intake.accept_batch(replace(batch, items=items), Limits())
        claim = ledger.queue.claim("w1")
        ledger.queue.fail(claim, [i.row for i in claim.items], "corrupt_image", said, lambda attempt: 0.0)
        details = [d for (d,) in raw_rows(ledger, "SELECT error_detail FROM items ORDER BY id")]
        events = [d for (d,) in raw_rows(ledger, "SELECT detail FROM events WHERE detail IS NOT NULL")]
    assert details == [shown, shown] and events and set(events) == {shown}


def test_a_fix_line_copied_from_the_sheet_works_as_pasted_for_a_url_source(
    http_server: HttpServer, tmp_path: Path
) -> None:
    """The sheet's ``thumbctl focus URL … --db LEDGER`` line, run as it is, remembers the fix for the
    content the batch read (nothing is downloaded again); a URL no batch read is a clear error."""
    url, route = http_server.route("coffee.png", Answer(body=COFFEE))
    manifest = write_manifest(tmp_path / "m", [{"source": url}])
    cli = Thumbctl(tmp_path / "ledger.db")
    done = submit_here(cli, manifest, "--out", tmp_path / "out", *URL_FLAGS)
    json_here(cli, "sheet", done["batch_id"])
    page = (tmp_path / "out" / "batches" / f"{done['batch_id']}.html").read_text(encoding="utf-8")
    (line,) = {part.split(">", 1)[1].split("</code>")[0] for part in page.split('class="recrop"')[1:]}
    pasted = shlex.split(html.unescape(line))
    # the ledger named from the folder that holds the manifest's folder, as the page says
    assert pasted[:2] == ["thumbctl", "focus"] and pasted[2] == url and pasted[-2:] == ["--db", "ledger.db"]
    assert "run them in the folder that holds m/" in page
    requests = route.requests
    with contextlib.chdir(tmp_path):
        fixed = json_here(Thumbctl(tmp_path / "elsewhere.db"), *pasted[1:])  # the line names its ledger itself
    assert fixed["set"] == ["1:1"] and route.requests == requests
    (entry,) = json_here(cli, "catalogue", tmp_path / "out")["entries"]
    assert entry["focus"] == [float(v) for v in pasted[pasted.index("--at") + 1].split(",")]
    unknown = cli.invoke("focus", http_server.url("/never.png"), "--ratio", "1:1", "--at", "0.5,0.5", "--json")
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["code"] == "source_not_found"
