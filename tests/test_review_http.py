"""``thumbctl review`` over plain HTTP: what it refuses (token, Host, Origin, paths, bad requests, a
stale version) changes nothing; an Apply records the fix in the ledger and the fix file and renders
the photo's names again through a batch; Approve feeds the "changed" listing; Ctrl-C exits 130."""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest

from conftest import SAMPLE_IMAGES
from harness import Thumbctl, until
from inprocess import submit_here
from reviewing import Answer, Review, reviewing


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Thumbctl, Path, Path]:
    """A shop folder of three photos rendered at 1:1 and 16:9 into OUT."""
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("orientation/Landscape_6.jpg", "orientation/Portrait_3.jpg", "public-domain/sk-coffee.png"):
        (photos / Path(name).name).write_bytes((SAMPLE_IMAGES / name).read_bytes())
    cli = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults")
    out = tmp_path / "out"
    submit_here(cli, photos, "--out", out, "--ratio", "1:1,16:9")
    return cli, photos, out


def focus_rows(cli: Thumbctl) -> list[tuple]:
    with sqlite3.connect(cli.db) as db:
        return db.execute("SELECT source_digest, ratio, focus_x, focus_y FROM focus_points").fetchall()


def batch_count(cli: Thumbctl) -> int:
    with sqlite3.connect(cli.db) as db:
        return db.execute("SELECT count(*) FROM batches").fetchone()[0]


def applying(review: Review, photo: dict, changes: dict) -> Answer:
    """An Apply of ``changes`` to ``photo`` as the page shown it (its version)."""
    return review.post(f"api/photos/{photo['id']}/apply", {"version": photo["version"], "changes": changes})


def first_photo(review: Review) -> dict:
    return review.photos()["photos"][0]


def wait_rendered(review: Review, batches: list[str]) -> None:
    def finished() -> bool:
        return all(review.get(f"api/batches/{b}").json()["state"] == "succeeded" for b in batches)

    until(finished, "the Apply's batch to succeed", timeout=90, every=0.1)


def test_requests_without_the_token_or_from_elsewhere_are_refused_and_change_nothing(shop) -> None:
    cli, photos, out = shop
    with reviewing(cli, out) as review:
        photo = first_photo(review)
        apply = f"api/photos/{photo['id']}/apply"
        change = {"version": photo["version"], "changes": {"1:1": [0.1, 0.1]}}
        refused = {
            "no token": review.get("/api/photos"),
            "another token": review.get("/" + "x" * len(review.token) + "/api/photos"),
            "the token's prefix": review.get("/" + review.token[:-1] + "/api/photos"),
            "a rebinding host": review.get("api/photos", Host=f"attacker.example:{review.host.split(':')[1]}"),
            "another port": review.get("api/photos", Host="127.0.0.1:1"),
            "a cross-site post": review.post(apply, change, Origin="http://attacker.example"),
            "a post without origin": review.post(apply, change, Origin=None),
            "a cross-site read": review.get("api/photos", Origin="http://attacker.example"),
            "no token, post": review.request("POST", "/api/photos/" + photo["id"] + "/apply", change),
        }
        for what, answer in refused.items():
            assert answer.status == 403, (what, answer.status, answer.body)
            assert b'"forbidden"' in answer.body, what
        no_host = review.get("api/photos", Host=None)  # HTTP/1.1 without Host: refused by the server itself
        assert no_host.status == 400 and b"photos" not in no_host.body
        assert review.get("api/photos", Host=f"localhost:{review.host.split(':')[1]}").status == 200
    assert focus_rows(cli) == []
    assert not (photos / "thumbctl-focus.json").exists()
    assert batch_count(cli) == 1


def test_no_path_from_a_request_reaches_the_file_system(shop, tmp_path: Path) -> None:
    cli, _, out = shop
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve me")
    with reviewing(cli, out) as review:
        photos = review.photos()["photos"]
        one, other = photos[0], photos[1]
        other_name = other["ratios"][0]["names"][0]["name"]
        attempts = [
            "static/..%2f..%2f..%2fpyproject.toml",
            "static/../../pyproject.toml",
            "static/review.html",  # the page is served at the root only, not by name
            "static/%2e%2e/app.py",
            f"img/{one['id']}/thumbnail?name=../../secret.txt",
            f"img/{one['id']}/thumbnail?name={secret}",
            f"img/{one['id']}/thumbnail?name={other_name}",  # another photo's name
            "img/" + "0" * 64 + "/preview",
            f"img/{one['id']}/thumbnail?name=batches/catalogue.html",
        ]
        for path in attempts:
            answer = review.get(path)
            assert answer.status == 404, (path, answer.status)
            assert answer.headers["content-type"] == "application/json", path
            assert b"do not serve me" not in answer.body and b"[build-system]" not in answer.body
        name = one["ratios"][0]["names"][0]["name"]
        served = review.get(f"img/{one['id']}/thumbnail?name={name}")
        assert served.status == 200 and served.body == (out / name).read_bytes()
        assert served.headers["content-type"] == "image/jpeg"
        assert review.get("static/geometry.js").headers["content-type"].startswith("text/javascript")
        page = review.get("")
        assert page.status == 200 and b"thumbctl review" in page.body
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"changes": {"1:1": [1.5, 0.2]}}, 400, "0..1"),
        ({"changes": {"1:1": ["a", 0.2]}}, 400, "0..1"),
        ({"changes": {"1:1": [0.2]}}, 400, "0..1"),
        ({"changes": {"1:1": [True, 0.2]}}, 400, "0..1"),
        ({"changes": {"3:2": [0.2, 0.2]}}, 400, "no thumbnail at 3:2"),
        ({"changes": {}}, 400, "nothing to apply"),
        ({"changes": [0.2, 0.2]}, 400, "changes"),
        ({"version": "0000000000000000", "changes": {"1:1": [0.2, 0.2]}}, 409, "changed since"),
        ({"changes": {"\ud800": [0.2, 0.2]}}, 400, "no thumbnail at"),
    ],
)
def test_bad_requests_get_a_clear_error_and_change_nothing(shop, body: dict, status: int, says: str) -> None:
    cli, photos, out = shop
    before = sorted(p.read_bytes() for p in out.rglob("*.jpg"))
    with reviewing(cli, out) as review:
        photo = first_photo(review)
        sent = {"version": photo["version"], **body}
        answer = review.post(f"api/photos/{photo['id']}/apply", sent)
        assert answer.status == status, answer.body
        assert says in answer.json()["error"]["message"]
        unknown = {"version": photo["version"], "changes": {"1:1": [0.5, 0.5]}}
        assert review.post("api/photos/" + "f" * 64 + "/apply", unknown).status == 404
        assert review.request("POST", f"api/photos/{photo['id']}/apply", raw=b"{not json").status == 400
        big = {"version": photo["version"], "changes": {"1:1": [0.5, 0.5]}, "pad": "x" * 70_000}
        assert review.post(f"api/photos/{photo['id']}/apply", big).status == 413
        plain = review.post(f"api/photos/{photo['id']}/apply", sent, **{"Content-Type": "text/plain"})
        assert plain.status == 415
        assert review.get("api/photos?below=2").status == 400
        assert review.get("api/photos?shown=everything").status == 400
        assert review.get("api/batches/b_0000").status == 404
    assert focus_rows(cli) == []
    assert not (photos / "thumbctl-focus.json").exists()
    assert batch_count(cli) == 1
    assert sorted(p.read_bytes() for p in out.rglob("*.jpg")) == before


def test_apply_fixes_the_crop_in_the_ledger_and_fix_file_and_renders_only_that_ratio(shop) -> None:
    cli, photos, out = shop
    with reviewing(cli, out) as review:
        photo = next(p for p in review.photos()["photos"] if p["source"] == "Landscape_6.jpg")
        names = {r["ratio"]: r["names"][0]["name"] for r in photo["ratios"]}
        before = {ratio: (out / name).read_bytes() for ratio, name in names.items()}
        answer = review.post(
            f"api/photos/{photo['id']}/apply", {"version": photo["version"], "changes": {"1:1": [0.1, 0.5]}}
        )
        assert answer.status == 200, answer.body
        applied = answer.json()
        assert applied["names"] == 1 and applied["fix_file"]["problem"] is None
        wait_rendered(review, applied["batches"])
        after = review.get(f"api/photos/{photo['id']}").json()
        square = next(r for r in after["ratios"] if r["ratio"] == "1:1")
        assert square["focus"] == [0.1, 0.5] and square["policy"] == "focus" and square["rendered"] is True
        assert square["window"][0] == 0  # centred at 10% of the width: pushed to the left edge
        assert (out / names["1:1"]).read_bytes() != before["1:1"]
        assert (out / names["16:9"]).read_bytes() == before["16:9"]
    fixes = json.loads((photos / "thumbctl-focus.json").read_text())["photos"]
    assert [(f["path"], f["focus"]) for f in fixes] == [("Landscape_6.jpg", {"1:1": [0.1, 0.5]})]
    assert focus_rows(cli) == [(photo["id"], "1:1", 0.1, 0.5)]
    again = submit_here(cli, photos, "--out", out, "--ratio", "1:1,16:9")
    assert again["counts"].get("succeeded") == 6 and again["replayed"] is False
    catalogue = cli.json("catalogue", out)["entries"]
    assert {e["name"]: e["focus"] for e in catalogue}[names["1:1"]] == [0.1, 0.5]


def test_two_tabs_applying_to_one_photo_the_second_sees_a_conflict(shop) -> None:
    cli, photos, out = shop
    with reviewing(cli, out) as review:
        first_tab = first_photo(review)
        second_tab = dict(first_tab)
        url = f"api/photos/{first_tab['id']}/apply"
        won = review.post(url, {"version": first_tab["version"], "changes": {"1:1": [0.2, 0.3]}})
        assert won.status == 200
        lost = review.post(url, {"version": second_tab["version"], "changes": {"1:1": [0.9, 0.9]}})
        assert lost.status == 409 and lost.json()["error"]["code"] == "review_conflict"
        wait_rendered(review, won.json()["batches"])
    assert focus_rows(cli) == [(first_tab["id"], "1:1", 0.2, 0.3)]
    assert json.loads((photos / "thumbctl-focus.json").read_text())["photos"][0]["focus"] == {"1:1": [0.2, 0.3]}


def test_approve_leaves_a_photo_out_of_the_changed_listing_until_it_changes(shop) -> None:
    cli, _, out = shop
    with reviewing(cli, out) as review:
        assert review.photos("?shown=changed")["total"] == 3
        photo = first_photo(review)
        approved = review.post(f"api/photos/{photo['id']}/approve", {"version": photo["version"]})
        assert approved.status == 200 and approved.json()["changed"] is False
        listed = review.photos("?shown=changed")
        assert listed["total"] == 2 and photo["id"] not in {p["id"] for p in listed["photos"]}
        applied = review.post(
            f"api/photos/{photo['id']}/apply", {"version": photo["version"], "changes": {"16:9": [0.5, 0.1]}}
        )
        wait_rendered(review, applied.json()["batches"])
        assert photo["id"] in {p["id"] for p in review.photos("?shown=changed")["photos"]}
    with reviewing(cli, out) as review:  # the next review starts from what changed since
        assert review.photos("?shown=changed")["total"] == 3


def test_listing_is_paged_filtered_and_worst_first(shop) -> None:
    cli, _, out = shop
    with reviewing(cli, out) as review:
        whole = review.photos()
        scores = [p["score"] for p in whole["photos"]]
        assert scores == sorted(scores) and whole["ratios"] == ["16:9", "1:1"]
        pages = [review.photos(f"?limit=1&offset={n}")["photos"][0]["id"] for n in range(3)]
        assert pages == [p["id"] for p in whole["photos"]]
        low = review.photos(f"?shown=low&below={scores[1]}")
        assert [p["id"] for p in low["photos"]] == [whole["photos"][0]["id"]]


def test_ctrl_c_exits_130_and_says_which_apply_batches_stay_queued(shop) -> None:
    cli, _, out = shop
    with reviewing(cli, out, THUMBCTL_FAULT="pause:before_encode") as review:
        photo = first_photo(review)
        applied = review.post(
            f"api/photos/{photo['id']}/apply", {"version": photo["version"], "changes": {"1:1": [0.3, 0.3]}}
        )
        batch = applied.json()["batches"][0]
        cli.paused("before_encode")
        review.process.interrupt()
        code = review.process.wait(30)
        _, stderr = review.process.communicate(10)
        said = review.out.rest() + stderr
        assert code == 130, said
        assert "Traceback" not in said
        assert "1 Apply batch not finished" in said and "thumbctl work --until-idle" in said
    cli.release()
    done = cli.run("work", "--until-idle", "-w", "1")
    assert done.returncode == 0, done.stderr
    assert cli.json("status", batch)["state"] == "succeeded"


def test_ctrl_c_with_nothing_pending_exits_130_without_a_traceback(shop) -> None:
    cli, _, out = shop
    with reviewing(cli, out) as review:
        review.process.interrupt()
        assert review.process.wait(30) == 130
        _, stderr = review.process.communicate(10)
        said = review.out.rest() + stderr
        assert "Traceback" not in said and "error" not in said and "stopped: nothing was applied" in said
        assert "contact sheet" not in said


def stopped(review: Review) -> str:
    """What ``thumbctl review`` says once Ctrl-C stopped it (exit 130)."""
    review.process.interrupt()
    assert review.process.wait(30) == 130
    _, stderr = review.process.communicate(10)
    return review.out.rest() + stderr


def test_after_its_applies_the_review_writes_the_catalogue_sheet_again_the_changed_photo_first(shop) -> None:
    cli, _, out = shop
    sheet = out / "batches" / "catalogue.html"
    sheet.unlink(missing_ok=True)
    with reviewing(cli, out) as review:
        photo = next(p for p in review.photos()["photos"] if p["source"] == "Portrait_3.jpg")
        wait_rendered(review, applying(review, photo, {"1:1": [0.5, 0.2]}).json()["batches"])
        assert not sheet.exists(), "written once, when the review stops"
        said = stopped(review)
    assert "stopped: every Apply was rendered" in said and f"contact sheet {sheet.as_uri()}" in said
    page = sheet.read_text()
    assert "<b>1</b> changed by this run, shown first" in page and "<b>1</b> thumbnails with a crop fix" in page
    assert page.index("Portrait_3") < min(page.index(other) for other in ("Landscape_6", "sk-coffee"))
    with reviewing(cli, out, THUMBCTL_SHEET="false") as review:
        photo = next(p for p in review.photos()["photos"] if p["source"] == "Portrait_3.jpg")
        wait_rendered(review, applying(review, photo, {"1:1": [0.5, 0.8]}).json()["batches"])
        said = stopped(review)
    assert "contact sheet" not in said and sheet.read_text() == page


def test_review_without_out_names_the_outs_to_choose_from(shop, tmp_path: Path) -> None:
    cli, photos, out = shop
    submit_here(cli, photos, "--out", tmp_path / "other")
    done = cli.run("review", "--no-browser")
    assert done.returncode == 2
    assert str(out) in done.stderr and str(tmp_path / "other") in done.stderr and "Traceback" not in done.stderr


def test_a_missing_review_extra_gives_a_one_line_hint(shop, tmp_path: Path) -> None:
    cli, _, out = shop
    hidden = tmp_path / "hidden"
    (hidden / "starlette").mkdir(parents=True)
    (hidden / "starlette" / "__init__.py").write_text("raise ImportError('No module named starlette')\n")
    done = cli.run("review", out, "--no-browser", PYTHONPATH=str(hidden))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "pip install '.[review]'" in done.stderr and "review_unavailable" in done.stderr


def test_an_apply_is_cancellable_and_its_batch_is_never_resumed_nor_a_mirror_s_baseline(shop) -> None:
    cli, photos, out = shop
    name = out / "Landscape_6.1x1.jpg"
    before = name.read_bytes()
    with reviewing(cli, out, THUMBCTL_FAULT="pause:before_encode") as review:
        photo = next(p for p in review.photos()["photos"] if p["source"] == "Landscape_6.jpg")
        batch = applying(review, photo, {"1:1": [0.2, 0.5]}).json()["batches"][0]
        cli.paused("before_encode")
        shown = review.get(f"api/photos/{photo['id']}").json()
        again = applying(review, shown, {"1:1": [0.9, 0.5]})  # two renders of one name in flight: refused
        assert again.status == 409 and "still rendering" in again.json()["error"]["message"]
        cancelled = review.post(f"api/batches/{batch}/cancel", {})
        assert cancelled.status == 200 and cancelled.json()["cancel_requested_at"] is not None
        cli.release()
        until(lambda: review.get(f"api/batches/{batch}").json()["state"] == "cancelled", "the cancel to settle")
        square = next(r for r in review.get(f"api/photos/{photo['id']}").json()["ratios"] if r["ratio"] == "1:1")
        assert square["focus"] == [0.2, 0.5] and square["rendered"] is False  # the fix kept, shown as not rendered
    assert name.read_bytes() == before, "a cancelled Apply publishes nothing"
    retried = cli.run("retry", batch)
    assert retried.returncode == 2 and "apply the fix again in thumbctl review" in retried.stderr
    assert batch_count(cli) == 2, "retry of a review batch resumes nothing"
    mirrored = cli.run("submit", photos, "--out", out, "--ratio", "1:1,16:9", "--delete", "--json")
    assert mirrored.returncode == 0, mirrored.stderr
    assert json.loads(mirrored.stdout)["mirrored"]["removed"] == []
    assert sorted(p.name for p in out.glob("*.jpg")) == sorted(
        f"{stem}.{ratio}.jpg" for stem in ("Landscape_6", "Portrait_3", "sk-coffee") for ratio in ("1x1", "16x9")
    )


def test_an_apply_waits_for_a_render_of_its_names_started_by_another_review(shop) -> None:
    cli, _, out = shop
    with reviewing(cli, out, THUMBCTL_FAULT="pause:before_encode") as first, reviewing(cli, out) as second:
        photo = next(p for p in first.photos()["photos"] if p["source"] == "Landscape_6.jpg")
        batch = applying(first, photo, {"1:1": [0.2, 0.5]}).json()["batches"]
        cli.paused("before_encode")
        shown = second.get(f"api/photos/{photo['id']}").json()
        square = next(r for r in shown["ratios"] if r["ratio"] == "1:1")
        assert square["rendering"] is True and square["rendered"] is False
        refused = applying(second, shown, {"1:1": [0.9, 0.5]})  # the older render would publish last
        assert refused.status == 409 and "still rendering" in refused.json()["error"]["message"]
        assert [r for r in shown["ratios"] if r["ratio"] == "16:9"][0]["rendering"] is False
        cli.release()
        wait_rendered(first, batch)
        after = second.get(f"api/photos/{photo['id']}").json()
        square = next(r for r in after["ratios"] if r["ratio"] == "1:1")
        assert (square["rendering"], square["rendered"], square["focus"]) == (False, True, [0.2, 0.5])
        assert applying(second, after, {"1:1": [0.9, 0.5]}).status == 200


def test_a_request_cut_short_or_a_ledger_gone_gets_an_answer_never_a_traceback(shop, tmp_path: Path) -> None:
    cli, _, out = shop
    with reviewing(cli, out) as review:
        photo = first_photo(review)
        with socket.create_connection((review.host.split(":")[0], int(review.host.split(":")[1]))) as cut:
            cut.sendall(
                f"POST /{review.token}/api/photos/{photo['id']}/apply HTTP/1.1\r\nHost: {review.host}\r\n"
                f"Origin: {review.origin}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{".encode()
            )
        assert review.photos()["total"] == 3  # the server goes on
        assert review.request("PUT", "api/photos", headers={"Origin": review.origin}).status == 405
        moved = tmp_path / "moved.db"
        Path(cli.db).rename(moved)
        gone = review.get("api/photos")
        assert gone.status == 400 and gone.json()["error"]["code"] == "no_ledger"
        assert not Path(cli.db).exists(), "no new, empty ledger is made"
        moved.rename(cli.db)
        review.process.interrupt()
        assert review.process.wait(30) == 130
        _, stderr = review.process.communicate(10)
    said = review.out.rest() + stderr
    assert "Traceback" not in said and "Exception" not in said and "ERROR" not in said, said


def portrait_with_a_fix(review: Review) -> dict:
    """Portrait_3.jpg with its 1:1 crop fixed at the top and rendered: the photo as shown then."""
    photo = next(p for p in review.photos()["photos"] if p["source"] == "Portrait_3.jpg")
    wait_rendered(review, applying(review, photo, {"1:1": [0.5, 0.02]}).json()["batches"])
    return review.get(f"api/photos/{photo['id']}").json()


def test_reset_returns_a_ratio_to_the_smart_crop(shop) -> None:
    cli, photos, out = shop
    name = out / "Portrait_3.1x1.jpg"
    smart = name.read_bytes()
    with reviewing(cli, out) as review:
        fixed = portrait_with_a_fix(review)
        assert name.read_bytes() != smart
        wait_rendered(review, applying(review, fixed, {"1:1": None}).json()["batches"])
        square = next(r for r in review.get(f"api/photos/{fixed['id']}").json()["ratios"] if r["ratio"] == "1:1")
        assert square["focus"] is None and square["policy"] == "smart"
    assert name.read_bytes() == smart
    assert all(row[2] is None for row in focus_rows(cli))  # kept as cleared, so the next submit is a new request
    assert json.loads((photos / "thumbctl-focus.json").read_text())["photos"] == []


def test_an_apply_whose_batch_document_cannot_be_written_still_records_and_files_its_fix(shop, tmp_path) -> None:
    cli, photos, out = shop
    name = out / "Portrait_3.1x1.jpg"
    smart = name.read_bytes()
    with reviewing(cli, out) as review:
        fixed = portrait_with_a_fix(review)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        shutil.rmtree(out / "batches")
        (out / "batches").symlink_to(elsewhere)  # batch documents can no longer be written in OUT
        reset = applying(review, fixed, {"1:1": None})  # the smart crop's outputs exist: finished at once
        assert reset.status == 200, reset.body
        assert len(reset.json()["problems"]) == 1 and "batch manifest not written" in reset.json()["problems"][0]
        wait_rendered(review, reset.json()["batches"])
    assert name.read_bytes() == smart and list(elsewhere.iterdir()) == []
    assert all(row[2] is None for row in focus_rows(cli))
    assert json.loads((photos / "thumbctl-focus.json").read_text())["photos"] == []


def test_the_page_carries_its_first_listing_with_every_name_escaped(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    hostile = "<script>x</script>'\"&.jpg".replace("/", "∕")
    (photos / hostile).write_bytes((SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg").read_bytes())
    cli = Thumbctl(tmp_path / "ledger.db")
    submit_here(cli, photos, "--out", tmp_path / "out", "--ratio", "1:1")
    with reviewing(cli, tmp_path / "out") as review:
        page = review.get("").body.decode()
    start = page.index('<script type="application/json" id="first">') + len(
        '<script type="application/json" id="first">'
    )
    block = page[start : page.index("</script>", start)]
    assert "<" not in block and ">" not in block
    first = json.loads(block)
    assert first["total"] == 1 and first["photos"][0]["source"] == hostile


def test_an_apply_renders_every_size_and_format_of_the_ratio_again(tmp_path: Path) -> None:
    """Names of a set (sizes × formats, efforts and qualities per format): each key rebuilt as submit
    builds it, each rendered again with the fix."""
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "wide.jpg").write_bytes((SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg").read_bytes())
    cli = Thumbctl(tmp_path / "ledger.db")
    out = tmp_path / "out"
    flags = ("--ratio", "1:1", "--size", "160,320", "--format", "webp,png,avif,jpeg", "--quality", "webp:70")
    submit_here(cli, photos, "--out", out, *flags)
    before = {p.name: p.read_bytes() for p in out.glob("wide.*")}
    assert len(before) == 8
    with reviewing(cli, out) as review:
        (photo,) = review.photos()["photos"]
        answer = applying(review, photo, {"1:1": [0.05, 0.5]})
        assert answer.status == 200, answer.body
        assert answer.json()["names"] == 8
        wait_rendered(review, answer.json()["batches"])
    after = {p.name: p.read_bytes() for p in out.glob("wide.*")}
    assert sorted(after) == sorted(before) and all(after[name] != before[name] for name in before)
    again = submit_here(cli, photos, "--out", out, *flags)  # the fixed outputs are reused: nothing renders
    assert {p.name: p.read_bytes() for p in out.glob("wide.*")} == after and again["state"] == "succeeded"


def test_a_name_whose_key_cannot_be_rebuilt_is_refused_and_nothing_changes(shop) -> None:
    cli, photos, out = shop
    with sqlite3.connect(cli.db) as db:  # as a name rendered by another version of thumbctl leaves it
        tampered = "UPDATE items SET derivative_key = 'f' || substr(derivative_key, 2) WHERE friendly_path LIKE ?"
        db.execute(tampered, ("%Landscape_6.1x1%",))
    with reviewing(cli, out) as review:
        photo = next(p for p in review.photos()["photos"] if p["source"] == "Landscape_6.jpg")
        answer = applying(review, photo, {"1:1": [0.1, 0.5]})
        assert answer.status == 400 and answer.json()["error"]["code"] == "name_not_rebuilt"
        assert "submit its folder again" in answer.json()["error"]["message"]
    assert focus_rows(cli) == [] and batch_count(cli) == 1
    assert not (photos / "thumbctl-focus.json").exists()
