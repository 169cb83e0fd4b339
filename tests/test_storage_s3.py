"""What only the S3 store and output target do (the contracts run in test_storage_objects.py and
test_storage_outputs.py): headers, the create-if-absent race, retries whose answer was lost,
conditional removal, coded errors, and where the settings come from. Against the real test server."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import obstore
import pytest

from thumbctl.config.s3location import S3Options
from thumbctl.core.errors import BadS3Settings, BucketForbidden, BucketMissing, ExitCode, StorageUnreachable
from thumbctl.storage import s3client
from thumbctl.storage.locations import object_store_at, output_target_at, parse_s3
from thumbctl.storage.objects import Published
from thumbctl.storage.ownership import LEDGER_ID_FILE, claimed_owner, store_owner
from thumbctl.storage.s3 import S3ObjectStore, S3OutputTarget

from faultproxy import FaultMix, FaultProxy
from harness import until
from s3 import (
    ACCESS_KEY,
    BUCKET,
    SECRET_KEY,
    WeedServer,
    free_ports,
    get_raw,
    keys,
    listening_ports,
    put_raw,
    raw_store,
)

KEYS = 40
WRITERS = 16
OBJECT_CC = "public, max-age=31536000, immutable"
NAME_CC = "public, max-age=300"


def sound(existing: BinaryIO) -> str | None:
    return None


def key(n: int) -> str:
    return f"{n:02x}" + f"{n:02x}" * 31


def store_at(url: str) -> S3ObjectStore:
    store = object_store_at(url)
    assert isinstance(store, S3ObjectStore)
    return store


#: Writers of one swapped document racing in the swap test: each conflict is one more try (at most 5).
SWAP_WRITERS = 5


def target_at(url: str) -> S3OutputTarget:
    target = output_target_at(url)
    assert isinstance(target, S3OutputTarget)
    return target


# -- the server ------------------------------------------------------------------------------------


def test_the_test_server_refuses_an_unsigned_request(s3_server: WeedServer, s3_url: str) -> None:
    store_at(s3_url).put(f"{key(1)}.jpg", b"pixels", verify=sound)
    from obstore.exceptions import PermissionDeniedError

    anonymous = raw_store(s3_server, skip_signature=True)
    with pytest.raises(PermissionDeniedError):
        get_raw(anonymous, parse_s3(s3_url).key(f"objects/01/{key(1)}.jpg"))
    with pytest.raises(PermissionDeniedError):
        put_raw(anonymous, parse_s3(s3_url).key("anonymous.jpg"), b"x")
    url = f"{s3_server.endpoint}/{BUCKET}/{parse_s3(s3_url).key(f'objects/01/{key(1)}.jpg')}"
    assert http_answer(url).status == 403
    assert keys(raw_store(s3_server), parse_s3(s3_url).prefix) == [parse_s3(s3_url).key(f"objects/01/{key(1)}.jpg")]


def test_the_test_server_listens_only_on_the_free_ports_it_was_given(s3_server: WeedServer) -> None:
    """No default port (9333, 8888, 8333, the admin's 23646, Iceberg's 8181, 9101, gRPC's +10000):
    two test processes each run a server of their own side by side."""
    given = set(s3_server.ports.values())
    with contextlib.suppress(AssertionError):  # the admin server may open its ports a moment after S3 serves
        until(lambda: listening_ports(s3_server.process.pid) == given, "every given port listening", timeout=10)
    assert listening_ports(s3_server.process.pid) == given


# -- paths ----------------------------------------------------------------------------------------------


def test_paths_are_the_local_arithmetic_under_the_url(s3_url: str) -> None:
    store, target = store_at(s3_url), target_at(s3_url + "/out")
    assert store.root == s3_url and target.root == s3_url + "/out"
    assert store.object_path(key(1), "jpg") == store.path_of(f"{key(1)}.jpg") == f"{s3_url}/objects/01/{key(1)}.jpg"
    assert store.preview_path(store.path_of(f"{key(1)}.jpg")) == f"{s3_url}/objects/01/{key(1)}.preview.jpg"
    assert S3ObjectStore.of_object(store.path_of(f"{key(1)}.jpg"), S3Options()) == store
    with pytest.raises(ValueError):
        S3ObjectStore.of_object(f"{s3_url}/out/a.jpg", S3Options())
    assert target.batch_manifest_path("b_1") == f"{s3_url}/out/batches/b_1.json"
    assert target.name_of(target.path_of("rooms/sofa.1x1.jpg")) == "rooms/sofa.1x1.jpg"
    with pytest.raises(ValueError):
        target.name_of(f"{s3_url}/elsewhere.jpg")


# -- headers, as a standard client sees them --------------------------------------------------------


def http_answer(url: str, method: str = "GET") -> http.client.HTTPResponse:
    """The answer of one plain HTTP request to ``url`` (no signature of its own), its body read."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=30)
    try:
        connection.request(method, f"{parts.path}?{parts.query}" if parts.query else parts.path)
        answer = connection.getresponse()
        answer.read()
        return answer
    finally:
        connection.close()


def signed_headers(server: WeedServer, key: str) -> dict[str, str]:
    """The response headers of a HEAD by a standard HTTP client through a presigned URL (SigV4),
    lower-cased names."""
    url = obstore.sign(raw_store(server), "HEAD", key, datetime.timedelta(seconds=60))
    answer = http_answer(url, "HEAD")
    assert answer.status == 200, (answer.status, answer.reason)
    return {name.lower(): value.strip() for name, value in answer.getheaders()}


def test_every_object_carries_its_content_type_and_cache_control(s3_server: WeedServer, s3_url: str) -> None:
    store, target = store_at(s3_url), target_at(s3_url + "/out")
    location = parse_s3(s3_url)
    expected = {}
    for extension, media in (
        ("jpg", "image/jpeg"),
        ("webp", "image/webp"),
        ("avif", "image/avif"),
        ("png", "image/png"),
    ):
        store.put(f"{key(1)}.{extension}", b"bytes", verify=sound)
        expected[location.key(f"objects/01/{key(1)}.{extension}")] = (media, OBJECT_CC)
        target.publish(f"rooms/sofa.{extension}", b"bytes")
        expected[location.key(f"out/rooms/sofa.{extension}")] = (media, NAME_CC)
    target.write_document("batches/b_1.json", b"{}\n")
    target.write_document("batches/b_1.html", b"<p>sheet</p>")
    expected[location.key("out/batches/b_1.json")] = ("application/json", NAME_CC)
    expected[location.key("out/batches/b_1.html")] = ("text/html", NAME_CC)
    for each, (media, cache) in expected.items():
        headers = signed_headers(s3_server, each)
        assert (headers["content-type"], headers["cache-control"]) == (media, cache), each


def test_cache_control_follows_the_options(s3_server: WeedServer, s3_url: str) -> None:
    options = S3Options(cache_control_objects="max-age=60", cache_control_names="no-cache")
    object_store_at(s3_url, options).put(f"{key(1)}.jpg", b"x", verify=sound)
    output_target_at(s3_url, options).publish("a.jpg", b"x")
    location = parse_s3(s3_url)
    assert signed_headers(s3_server, location.key(f"objects/01/{key(1)}.jpg"))["cache-control"] == "max-age=60"
    assert signed_headers(s3_server, location.key("a.jpg"))["cache-control"] == "no-cache"


def test_an_object_keeps_the_sha256_of_its_bytes_in_its_metadata_and_stat_gives_it(
    s3_server: WeedServer, s3_url: str
) -> None:
    store_at(s3_url).put(f"{key(1)}.jpg", b"pixels", verify=sound)
    found = get_raw(raw_store(s3_server), parse_s3(s3_url).key(f"objects/01/{key(1)}.jpg"))
    assert found is not None
    assert found[1]["sha256"] == hashlib.sha256(b"pixels").hexdigest()
    put_raw(raw_store(s3_server), parse_s3(s3_url).key(f"objects/02/{key(2)}.jpg"), b"a user's object")
    theirs = store_at(s3_url).stat(f"{key(2)}.jpg")
    assert theirs is not None and theirs.size == len(b"a user's object") and theirs.checksum is None


# -- the create-if-absent race ---------------------------------------------------------------------------


def test_concurrent_puts_of_one_key_create_it_exactly_once(s3_server: WeedServer, s3_url: str) -> None:
    """40 keys, each put by 16 writers, all 640 released at once: one ``created`` per key, 15
    ``duplicate`` (SeaweedFS before 4.48 let every writer of a key succeed). The server makes the
    writers of one key wait for each other, so the keys race side by side rather than in turn."""
    store = store_at(s3_url)
    start = threading.Barrier(KEYS * WRITERS)

    def write(n: int) -> tuple[int, str]:
        start.wait()
        return n, store.put(f"{key(n)}.jpg", f"object {n}".encode() * 100, verify=lambda existing: "not ours").outcome

    with ThreadPoolExecutor(KEYS * WRITERS) as pool:
        outcomes = Counter(pool.map(write, [n for n in range(KEYS) for _ in range(WRITERS)]))
    assert {n: outcomes[(n, "created")] for n in range(KEYS)} == dict.fromkeys(range(KEYS), 1)
    assert {n: outcomes[(n, "duplicate")] for n in range(KEYS)} == dict.fromkeys(range(KEYS), WRITERS - 1)
    for n in range(KEYS):
        assert store.read(f"{key(n)}.jpg", 1 << 20) == f"object {n}".encode() * 100


def test_a_swapped_document_ends_at_the_newest_generation_whatever_the_order_of_its_writers(s3_url: str) -> None:
    """Five writers of generations 1-5 released at once (the site manifest's swap, ``If-Match``):
    the newest stands, whichever wrote last; a document thumbctl did not write is never replaced."""
    from thumbctl.review.sitemanifest import TAKEN, Decision

    out = target_at(f"{s3_url}/swap-{uuid.uuid4().hex[:8]}")
    start = threading.Barrier(SWAP_WRITERS)

    def document(generation: int) -> dict[str, object]:
        return {"generator": "thumbctl", "generation": generation, "ledger": "L"}

    def write(generation: int) -> str | None:
        start.wait()
        return out.swap_document("thumbctl.json", Decision(generation, "L", document), 1 << 20)

    with ThreadPoolExecutor(SWAP_WRITERS) as pool:
        list(pool.map(write, range(1, SWAP_WRITERS + 1)))
    assert json.loads(out.read_document("thumbctl.json", 1 << 20) or b"")["generation"] == SWAP_WRITERS
    out.write_document("thumbctl.json", b"a user's own file")
    assert out.swap_document("thumbctl.json", Decision(99, "L", document), 1 << 20) == TAKEN
    assert out.read_document("thumbctl.json", 1 << 20) == b"a user's own file"


# -- retries ----------------------------------------------------------------------------------------------


def answer_lost_once(monkeypatch: pytest.MonkeyPatch, status: int = 503) -> list[str]:
    """The next PUT is applied but its answer is lost (the client sees a ``status``); later ones pass."""
    from obstore.exceptions import GenericError

    real = s3client.put
    calls: list[str] = []

    def put(store, key, data, attributes, mode):  # noqa: ANN001, ANN202
        calls.append(key)
        e_tag = real(store, key, data, attributes, mode)
        if len(calls) == 1:
            raise GenericError(f"Server returned non-2xx status code: {status} Service Unavailable")
        return e_tag

    monkeypatch.setattr(s3client, "put", put)
    return calls


def test_a_publish_whose_answer_was_lost_is_ours_when_retried(monkeypatch: pytest.MonkeyPatch, s3_url: str) -> None:
    target = target_at(s3_url)
    calls = answer_lost_once(monkeypatch)
    version = target.publish("a.jpg", b"ours")
    assert len(calls) == 2  # the retry met a 412: our own bytes, so the publish succeeded
    assert target.version_of("a.jpg") == version and target.read("a.jpg", 10) == b"ours"


def test_a_replace_whose_answer_was_lost_is_ours_when_retried(monkeypatch: pytest.MonkeyPatch, s3_url: str) -> None:
    target = target_at(s3_url)
    first = target.publish("a.jpg", b"first")
    calls = answer_lost_once(monkeypatch)
    second = target.replace("a.jpg", b"second", version=first)
    assert len(calls) == 2 and second != first and target.version_of("a.jpg") == second


def test_a_put_whose_answer_was_lost_finds_its_own_bytes(monkeypatch: pytest.MonkeyPatch, s3_url: str) -> None:
    store = store_at(s3_url)
    calls = answer_lost_once(monkeypatch)
    assert store.put(f"{key(1)}.jpg", b"pixels", verify=lambda existing: "never asked").outcome == "duplicate"
    assert len(calls) == 2 and store.read(f"{key(1)}.jpg", 10) == b"pixels"


def test_a_conditional_conflict_is_retried(monkeypatch: pytest.MonkeyPatch, s3_url: str) -> None:
    from obstore.exceptions import PreconditionError

    real = s3client.put
    calls: list[str] = []

    def put(store, key, data, attributes, mode):  # noqa: ANN001, ANN202
        calls.append(key)
        if len(calls) == 1:
            raise PreconditionError("Server returned non-2xx status code: 409 Conflict: ConditionalRequestConflict")
        return real(store, key, data, attributes, mode)

    monkeypatch.setattr(s3client, "put", put)
    assert store_at(s3_url).put(f"{key(1)}.jpg", b"pixels", verify=sound).outcome == "created"
    assert len(calls) == 2


def test_a_conditional_write_whose_first_try_outlasted_the_window_is_still_tried_again() -> None:
    """The retry window (retry_seconds) runs from the first failure: a first try that hung longer
    than the window still gets a second one, after the short jitter; a 5xx leaves it uncertain."""
    from obstore.exceptions import GenericError

    ended: list[float] = []

    def write() -> str:
        if not ended:
            time.sleep(0.4)  # a first try slower than the whole window
        ended.append(time.monotonic())
        if len(ended) == 1:
            raise GenericError("Server returned non-2xx status code: 503 Service Unavailable")
        return "etag"

    assert s3client.conditional(write, retry_seconds=0.2) == ("etag", True)
    assert len(ended) == 2 and ended[1] - ended[0] >= 0.02


def test_a_conditional_write_failing_on_every_try_ends_once_the_window_has_passed() -> None:
    from obstore.exceptions import GenericError

    tries: list[float] = []

    def write() -> str:
        tries.append(time.monotonic())
        raise GenericError("Server returned non-2xx status code: 503 Service Unavailable")

    with pytest.raises(GenericError):
        s3client.conditional(write, retry_seconds=0.3)
    ended = time.monotonic()
    assert len(tries) >= 2 and 0.3 <= ended - tries[0] < 0.3 + 2.0 + 1.0  # the window, one wait (at most 2 s), slack


def test_a_publish_over_someone_elses_object_is_refused_even_after_a_lost_answer(
    monkeypatch: pytest.MonkeyPatch, s3_server: WeedServer, s3_url: str
) -> None:
    put_raw(raw_store(s3_server), parse_s3(s3_url).key("a.jpg"), b"ours")  # the same bytes, not our publish
    answer_lost_once(monkeypatch, status=500)
    with pytest.raises(FileExistsError):
        target_at(s3_url).publish("a.jpg", b"ours")


# -- removal ---------------------------------------------------------------------------------------------


def test_a_delete_is_conditional_on_the_etag(s3_server: WeedServer, s3_url: str) -> None:
    target = target_at(s3_url)
    target.publish("a.jpg", b"ours")
    location = parse_s3(s3_url)
    client = s3client.client(location, S3Options())
    theirs = put_raw(raw_store(s3_server), location.key("a.jpg"), b"edited after our check")
    assert (
        s3client.delete_if_match(location, client, location.key("a.jpg"), '"0123456789abcdef0123456789abcdef"') is False
    )
    assert target.read("a.jpg", 100) == b"edited after our check"
    assert s3client.delete_if_match(location, client, location.key("a.jpg"), theirs) is True
    assert target.read("a.jpg", 100) is None


# -- coded errors ---------------------------------------------------------------------------------------


def test_a_missing_bucket_is_a_coded_error(s3_env: dict[str, str]) -> None:
    store, target = store_at("s3://no-such-bucket/p"), target_at("s3://no-such-bucket/p")
    for attempt in (
        lambda: store.put(f"{key(1)}.jpg", b"x", verify=sound),
        lambda: list(store.names()),
        lambda: target.publish("a.jpg", b"x"),
        lambda: target.write_document("batches/b.json", b"{}"),
    ):
        with pytest.raises(BucketMissing) as caught:
            attempt()
        assert caught.value.code == "bucket_missing" and caught.value.exit_code == ExitCode.USAGE
        assert "no-such-bucket" in caught.value.message


def test_a_probe_proves_the_location_writable_and_leaves_nothing(s3_server: WeedServer, s3_url: str) -> None:
    store_at(s3_url).probe()
    target_at(s3_url + "/out").probe()
    assert keys(raw_store(s3_server), parse_s3(s3_url).prefix) == []
    with pytest.raises(BucketMissing):
        target_at("s3://no-such-bucket/out").probe()


def test_a_wrong_secret_is_a_coded_error_that_shows_no_credential(
    monkeypatch: pytest.MonkeyPatch, s3_env: dict[str, str], s3_url: str
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store, target = store_at(s3_url), target_at(s3_url)
    for attempt in (
        lambda: store.put(f"{key(1)}.jpg", b"x", verify=sound),
        lambda: store.stat(f"{key(1)}.jpg"),
        lambda: list(target.names()),
        lambda: target.read("a.jpg", 10),
        target.probe,
    ):
        with pytest.raises(BucketForbidden) as caught:
            attempt()
        assert caught.value.code == "bucket_forbidden" and caught.value.exit_code == ExitCode.USAGE
        assert "not-the-secret" not in str(caught.value) and ACCESS_KEY not in str(caught.value)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_an_unreachable_endpoint_is_a_transient_coded_error(s3_env: dict[str, str], s3_url: str) -> None:
    closed = free_ports(1)[0]
    options = S3Options(endpoint=f"http://127.0.0.1:{closed}", retry_seconds=0.5)
    store, target = object_store_at(s3_url, options), output_target_at(s3_url, options)
    for attempt in (
        lambda: store.put(f"{key(1)}.jpg", b"x", verify=sound),
        lambda: target.version_of("a.jpg"),
    ):
        with pytest.raises(StorageUnreachable) as caught:
            attempt()
        assert caught.value.code == "storage_unreachable" and caught.value.transient
        assert caught.value.exit_code == ExitCode.UNAVAILABLE and isinstance(caught.value, OSError)


# -- settings --------------------------------------------------------------------------------------------


def test_settings_come_from_the_options_then_the_variables_then_the_profile(tmp_path: Path) -> None:
    credentials, config = tmp_path / "credentials", tmp_path / "config"
    credentials.write_text(
        "[default]\naws_access_key_id = filekey\naws_secret_access_key = filesecret\n"
        "[shop]\naws_access_key_id = shopkey\naws_secret_access_key = shopsecret\n"
    )
    config.write_text(
        "[default]\nregion = eu-west-1\n[profile shop]\nregion = eu-central-1\n"
        "endpoint_url = http://files.example:9000\n"
    )
    files = {"AWS_SHARED_CREDENTIALS_FILE": str(credentials), "AWS_CONFIG_FILE": str(config)}
    from_files = s3client.settings_of(S3Options(), files)
    assert (from_files.access_key_id, from_files.region, from_files.endpoint) == ("filekey", "eu-west-1", None)
    shop = s3client.settings_of(S3Options(), {**files, "AWS_PROFILE": "shop"})
    assert (shop.access_key_id, shop.secret_access_key, shop.region, shop.endpoint) == (
        "shopkey",
        "shopsecret",
        "eu-central-1",
        "http://files.example:9000",
    )
    variables = {
        **files,
        "AWS_PROFILE": "shop",
        "AWS_ACCESS_KEY_ID": "envkey",
        "AWS_SECRET_ACCESS_KEY": "envsecret",
        "AWS_SESSION_TOKEN": "token",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ENDPOINT_URL": "http://general:1",
        "AWS_ENDPOINT_URL_S3": "http://s3only:2/",
    }
    from_env = s3client.settings_of(S3Options(), variables)
    assert (from_env.access_key_id, from_env.session_token, from_env.region, from_env.endpoint) == (
        "envkey",
        "token",
        "us-west-2",
        "http://s3only:2",
    )
    chosen = s3client.settings_of(S3Options(endpoint="http://mine:3", region="ap-south-1", profile="shop"), variables)
    assert (chosen.access_key_id, chosen.region, chosen.endpoint) == ("shopkey", "ap-south-1", "http://mine:3")
    assert "envsecret" not in repr(from_env) and "token" not in repr(from_env)
    assert s3client.settings_of(S3Options(), {}).region == "us-east-1"


# -- the ledger a store belongs to --------------------------------------------------------------------


def test_the_first_of_ledgers_claiming_a_store_at_once_owns_it(s3_server: WeedServer, s3_url: str) -> None:
    store = store_at(s3_url)
    assert store_owner(store) is None
    claimants = [f"{n:032x}" for n in range(8)]
    start = threading.Barrier(len(claimants))

    def claim(own_id: str) -> tuple[str, str]:
        start.wait()
        return claimed_owner(store, own_id, f"ledger {own_id[-1]}")

    with ThreadPoolExecutor(len(claimants)) as pool:
        owners = set(pool.map(claim, claimants))
    assert len(owners) == 1 and next(iter(owners))[0] in claimants
    assert store_owner(store) == next(iter(owners))
    assert keys(raw_store(s3_server), parse_s3(s3_url).prefix) == [parse_s3(s3_url).key(LEDGER_ID_FILE)]
    assert list(store.names()) == []


def test_credentials_from_a_profile_of_the_shared_files_reach_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, s3_url: str
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[shop]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "shop")
    store = store_at(s3_url)
    assert store.put(f"{key(1)}.jpg", b"pixels", verify=sound).outcome == "created"
    credentials.write_text(f"[shop]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = wrong\n")
    with pytest.raises(BucketForbidden):
        object_store_at(s3_url, S3Options(profile="shop")).stat(f"{key(1)}.jpg")


def test_a_subprocess_reaches_the_bucket_through_the_aws_variables(
    s3_server: WeedServer, s3_env: dict[str, str], s3_url: str
) -> None:
    """What a command started by a test gets: the standard variables of ``s3_env``, nothing else."""
    script = (
        "import sys\nfrom thumbctl.storage.locations import output_target_at\n"
        "print(output_target_at(sys.argv[1]).publish('a.jpg', b'from a child'))"
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")} | s3_env
    done = subprocess.run([sys.executable, "-c", script, s3_url], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert get_raw(raw_store(s3_server), parse_s3(s3_url).key("a.jpg"))[0] == b"from a child"
    assert target_at(s3_url).version_of("a.jpg") == done.stdout.strip()


@pytest.mark.parametrize(
    "endpoint",
    ["not a url", "ftp://files.example", "http://[::1", "http://host:99999", "http://user:secret@host", "http://h/x"],
)
def test_an_endpoint_that_is_no_http_url_of_a_host_is_a_coded_error(endpoint: str) -> None:
    with pytest.raises(BadS3Settings) as caught:
        object_store_at("s3://thumbs/p", S3Options(endpoint=endpoint)).stat(f"{key(1)}.jpg")
    assert caught.value.code == "bad_s3_settings" and caught.value.exit_code == ExitCode.USAGE
    assert "secret" not in caught.value.message and "user" not in caught.value.message
    assert s3client.settings_of(S3Options(endpoint="https://s3.example:9000/")).endpoint == "https://s3.example:9000"


# -- retries through an outage --------------------------------------------------------------------


@pytest.fixture
def outage(s3_server: WeedServer) -> Iterator[FaultProxy]:
    """A fault proxy in front of the test server: set its ``first`` to make an outage of that many requests."""
    with FaultProxy(s3_server.endpoint) as proxy:
        yield proxy


def test_a_write_and_a_read_ride_out_an_outage_inside_the_retry_window(
    s3_env: dict[str, str], s3_url: str, outage: FaultProxy
) -> None:
    options = S3Options(endpoint=outage.endpoint, retry_seconds=30)
    store = object_store_at(s3_url, options)
    outage.set_faults(FaultMix(first=4))  # the create-if-absent PUT is answered 503 four times
    assert store.put(f"{key(7)}.jpg", b"pixels", verify=sound) == Published("created")
    outage.set_faults(FaultMix(first=outage.counts["outage"] + 4))  # and then the GET
    assert store.read(f"{key(7)}.jpg", 100) == b"pixels"
    assert outage.counts["outage"] == 8


def test_an_outage_longer_than_the_retry_window_is_storage_unreachable(
    s3_env: dict[str, str], s3_url: str, outage: FaultProxy
) -> None:
    store = object_store_at(s3_url, S3Options(endpoint=outage.endpoint, retry_seconds=0.5))
    outage.set_faults(FaultMix(first=10**6))
    with pytest.raises(StorageUnreachable) as caught:
        store.put(f"{key(8)}.jpg", b"pixels", verify=sound)
    assert "503" in caught.value.message and outage.counts["outage"] >= 2  # retried, then gave up
