"""The review page in the system's Chromium, as a seller uses it: click a focus point and see the
preview move before anything renders, Apply and wait for the render, then find the new thumbnail at
its name and the point in the fix file; drag a window; approve and undo from the keyboard.

``THUMBCTL_DOCS_SCREENSHOT=1`` also writes the screenshot docs/sellers.md shows (docs/review.png).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from thumbctl.core.profile import Ratio
from thumbctl.imaging.window import fixed_window, focus_at

from conftest import REPO, SAMPLE_IMAGES
from harness import Thumbctl, until
from inprocess import submit_here
from reviewing import browser, reviewing
from support import make_image

SCREENSHOT = REPO / "docs" / "review.png"
expect.set_options(timeout=20_000)  # a page's answer, on a machine busy with the rest of the suite
PHOTOS = ("orientation/Landscape_6.jpg", "unsplash/brendon-van-zyl-O9vNYbNVtpM.jpg", "public-domain/sk-coffee.png")


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Thumbctl, Path, Path]:
    photos = tmp_path / "shop"
    photos.mkdir()
    for name in PHOTOS:
        shutil.copy(SAMPLE_IMAGES / name, photos / Path(name).name)
    cli = Thumbctl(tmp_path / "ledger.db")
    out = tmp_path / "thumbs"
    submit_here(cli, photos, "--out", out, "--ratio", "1:1,4:3,16:9")
    return cli, photos, out


def box_of(page, selector: str) -> list[int]:
    return [int(v) for v in page.locator(selector).get_attribute("data-box").split(",")]


def click_photo_at(page, x: float, y: float) -> None:
    shown = page.locator("#source").bounding_box()
    page.mouse.click(shown["x"] + shown["width"] * x, shown["y"] + shown["height"] * y)


def test_click_a_focus_point_preview_apply_and_the_thumbnail_and_fix_file_follow(shop, tmp_path: Path) -> None:
    cli, photos, out = shop
    with reviewing(cli, out, HOME=str(tmp_path)) as review, browser(tmp_path / "home") as chromium:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(review.url)
        page.wait_for_selector("#windows .window")
        page.locator("#photos li", has_text="Landscape_6.jpg").click()
        expect(page.locator("#title")).to_have_text("Landscape_6.jpg")
        photo = review.get(f"api/photos/{page.locator('#photos li.current').get_attribute('data-id')}").json()
        square = next(r for r in photo["ratios"] if r["ratio"] == "1:1")
        name = square["names"][0]["name"]
        before = (out / name).read_bytes()

        page.check("input[name=target][value='1:1']")
        click_photo_at(page, 0.12, 0.5)
        preview = ".crop[data-ratio='1:1'] .preview"
        page.wait_for_selector(preview)
        moved = box_of(page, preview)
        assert moved != square["window"], "the preview shows the window the click gives, before any render"
        assert moved == box_of(page, "#windows .window[data-ratio='1:1']")
        size = photo["width"], photo["height"]
        wanted = fixed_window(*size, Ratio(1, 1), "cover", None, focus_at((0.12, 0.5), *size, None))
        assert abs(moved[0] - wanted[0]) <= 0.01 * photo["width"] and moved[1] == wanted[1]
        assert page.locator(".crop[data-ratio='16:9'] .preview").count() == 0  # only the target ratio

        rendered = page.locator(".crop[data-ratio='1:1'] img.rendered").get_attribute("src")
        page.keyboard.press("Enter")  # Apply, though the ratio was just chosen with the mouse
        page.keyboard.press("Enter")  # pressed twice: one Apply, no conflict
        expect(page.locator("#progress")).to_have_text(re.compile("^Rendered"), timeout=90_000)
        expect(page.locator("#alert")).to_be_hidden()
        assert len(cli.json("status")["batches"]) == 2  # the submit's and one Apply
        assert (out / name).read_bytes() != before, "the thumbnail at the name was rendered again"
        expect(page.locator(".crop[data-ratio='1:1'] img.rendered")).not_to_have_attribute("src", rendered)
        whole = urlsplit(page.locator(".crop[data-ratio='1:1'] a").get_attribute("href"))  # at its own size
        assert review.get(f"{whole.path}?{whole.query}").body == (out / name).read_bytes()
        held = json.loads((photos / "thumbctl-focus.json").read_text())["photos"]
        (entry,) = [e for e in held if e["path"] == "Landscape_6.jpg"]
        x, y = entry["focus"]["1:1"]
        assert abs(x - 0.12) < 0.01 and abs(y - 0.5) < 0.01 and set(entry["focus"]) == {"1:1"}
        after = review.get(f"api/photos/{photo['id']}").json()
        assert next(r for r in after["ratios"] if r["ratio"] == "1:1")["window"] == moved

        if os.environ.get("THUMBCTL_DOCS_SCREENSHOT"):  # the worst photo: its 16:9 crop cuts the bird
            page.locator("#photos li").first.click()
            expect(page.locator("#title")).to_have_text("brendon-van-zyl-O9vNYbNVtpM.jpg")
            page.check("input[name=target][value='16:9']")
            click_photo_at(page, 0.45, 0.33)
            page.wait_for_selector(".crop[data-ratio='16:9'] .preview")
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))
            page.click("#discard")
            page.locator("#photos li", has_text="Landscape_6.jpg").click()

        page.keyboard.press("j")  # each photo undoes only its own applies
        expect(page.locator("#title")).not_to_have_text("Landscape_6.jpg")
        expect(page.locator("#undo")).to_be_disabled()
        page.keyboard.press("k")
        expect(page.locator("#title")).to_have_text("Landscape_6.jpg")
        expect(page.locator("#undo")).to_be_enabled()
        page.keyboard.press("u")  # undo the last apply: the smart crop again

        def fixes_held() -> list[dict]:
            return [e["focus"] for e in json.loads((photos / "thumbctl-focus.json").read_text())["photos"]]

        until(lambda: all("1:1" not in focus for focus in fixes_held()), "the fix file without the undone fix")
        until(lambda: (out / name).read_bytes() == before, "the smart crop's thumbnail back at the name")
        expect(page.locator("#title")).to_have_text("Landscape_6.jpg")
        expect(page.locator(".crop[data-ratio='1:1'] h3")).to_contain_text("smart crop", timeout=30_000)
        expect(page.locator("#progress")).to_have_text("Undone: rendered as before, 1 thumbnail")
        assert errors == []


def drag_at(page, photo: dict, point: tuple[float, float], dx: float, dy: float) -> None:
    """Press at ``point`` (pixels of the upright photo) and drag by (dx, dy) screen pixels."""
    shown = page.locator("#source").bounding_box()
    x = shown["x"] + point[0] * shown["width"] / photo["width"]
    y = shown["y"] + point[1] * shown["height"] / photo["height"]
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y + dy, steps=5)
    page.mouse.up()


def test_drag_a_window_approve_and_filter_what_changed_from_the_keyboard(shop, tmp_path: Path) -> None:
    cli, _, out = shop
    with reviewing(cli, out) as review, browser(tmp_path / "home") as chromium:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(review.url)
        page.wait_for_selector("#windows .window")
        first = page.locator("#title").text_content()
        page.locator("#photos li", has_text="Landscape_6.jpg").click()
        expect(page.locator("#title")).to_have_text("Landscape_6.jpg")
        photo = review.get(f"api/photos/{page.locator('#photos li.current').get_attribute('data-id')}").json()
        square, wide = (box_of(page, f"#windows .window[data-ratio='{r}']") for r in ("1:1", "16:9"))
        both = ((square[0] + square[2]) / 2, (wide[1] + wide[3]) / 2)  # in both windows; the 1:1 one on top
        assert square[0] < both[0] < square[2] and square[1] < both[1] < square[3] and wide[0] <= both[0] <= wide[2]

        page.check("input[name=target][value='16:9']")  # the chosen ratio's window moves, not the one on top
        drag_at(page, photo, both, 0, 60 if wide[1] < photo["height"] - wide[3] else -60)  # where it has room
        dragged = box_of(page, "#windows .window[data-ratio='16:9']")
        assert dragged[1] != wide[1] and dragged[3] - dragged[1] == wide[3] - wide[1]  # moved, never resized
        assert box_of(page, "#windows .window[data-ratio='1:1']") == square
        assert box_of(page, ".crop[data-ratio='16:9'] .preview") == dragged
        assert page.locator(".crop[data-ratio='1:1'] .preview").count() == 0
        page.click("#discard")
        assert page.locator(".preview").count() == 0

        page.check("input[name=target][value='1:1']")  # the same press, the 1:1 chosen: the 1:1 moves
        drag_at(page, photo, both, -80 if square[0] > photo["width"] - square[2] else 80, 0)
        assert box_of(page, "#windows .window[data-ratio='1:1']")[0] != square[0]
        assert box_of(page, "#windows .window[data-ratio='16:9']") == wide
        assert page.locator(".crop[data-ratio='16:9'] .preview").count() == 0
        page.click("#discard")
        page.locator("#photos li").first.click()
        expect(page.locator("#title")).to_have_text(first)

        assert page.locator("#count").text_content().startswith("3 of 3")
        page.keyboard.press("a")  # approve: the next photo comes up
        expect(page.locator("#title")).not_to_have_text(first)
        page.select_option("#shown", "changed")
        expect(page.locator("#count")).to_have_text(re.compile("^2 of 3"))
        titles = page.locator("#photos li .name").all_text_contents()
        assert first not in titles
        page.keyboard.press("j")
        expect(page.locator("#title")).to_have_text(titles[1])
        page.keyboard.press("k")
        expect(page.locator("#title")).to_have_text(titles[0])


def test_the_list_loads_its_next_page_as_it_is_scrolled(tmp_path: Path) -> None:
    photos = tmp_path / "many"
    photos.mkdir()
    for n in range(45):
        make_image(photos / f"p{n:02d}.png", (64, 48), "PNG", seed=n)
    cli = Thumbctl(tmp_path / "ledger.db")
    out = tmp_path / "thumbs"
    submit_here(cli, photos, "--out", out, "--ratio", "1:1")
    with reviewing(cli, out) as review, browser(tmp_path / "home") as chromium:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(review.url)
        expect(page.locator("#count")).to_have_text("45 of 45 photos")
        expect(page.locator("#photos li")).to_have_count(40)  # the first page
        expect(page.locator("#more")).to_have_text("More photos load as you scroll…")
        page.locator("#photos li").first.hover()
        page.mouse.wheel(0, 10_000)  # the list scrolled to its end, as a person scrolls it
        expect(page.locator("#photos li")).to_have_count(45)
        expect(page.locator("#more")).to_have_text("")
        page.locator("#photos li").last.click()
        expect(page.locator("#title")).to_have_text(page.locator("#photos li .name").last.text_content() or "")


def test_a_cancelled_apply_keeps_its_fix_the_next_renders_it_and_an_edited_thumbnail_is_kept(tmp_path: Path) -> None:
    photos = tmp_path / "shop"
    photos.mkdir()
    shutil.copy(SAMPLE_IMAGES / PHOTOS[0], photos / "Landscape_6.jpg")
    cli = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults")
    out = tmp_path / "thumbs"
    submit_here(cli, photos, "--out", out, "--ratio", "1:1")
    name = out / "Landscape_6.1x1.jpg"
    before = name.read_bytes()
    with (
        reviewing(cli, out, THUMBCTL_FAULT="pause:before_encode") as review,
        browser(tmp_path / "home") as chromium,
    ):
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(review.url)
        page.wait_for_selector("#windows .window")
        click_photo_at(page, 0.12, 0.5)
        page.click("#apply")
        cli.paused("before_encode")
        page.click("#cancel")
        cli.release()
        expect(page.locator("#progress")).to_have_text(re.compile("^Render cancelled"), timeout=90_000)
        assert name.read_bytes() == before, "a cancelled Apply publishes nothing"
        heading = page.locator(".crop[data-ratio='1:1'] h3")
        expect(heading).to_contain_text("not rendered")
        expect(page.locator("#apply")).to_be_enabled()  # nothing pending: Apply renders the recorded fix
        page.keyboard.press("Enter")
        expect(page.locator("#progress")).to_have_text(re.compile("^Rendered 1 thumbnail"), timeout=90_000)
        expect(heading).to_contain_text("your fix at 0.1")
        expect(heading).not_to_contain_text("not rendered")
        expect(page.locator("#apply")).to_be_disabled()
        expect(page.locator("#undo")).to_be_enabled()  # the first Apply's: back to the smart crop
        assert name.read_bytes() != before

        edited = name.read_bytes() + b"retouched by hand"
        name.write_bytes(edited)  # a thumbnail the seller edited is never overwritten by an Apply
        click_photo_at(page, 0.8, 0.5)
        page.keyboard.press("Enter")
        expect(page.locator("#progress")).to_have_text(re.compile(r"^Render failed \(name_taken: "), timeout=90_000)
        expect(page.locator("#progress")).to_contain_text("thumbctl did not publish")
        expect(heading).to_contain_text("not rendered")
    assert name.read_bytes() == edited


def rgb(hex_colour: str) -> str:
    red, green, blue = (int(hex_colour[n : n + 2], 16) for n in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def test_filters_answered_late_never_replace_the_list_and_colours_match_the_contact_sheet(shop, tmp_path: Path) -> None:
    cli, _, out = shop
    assert cli.run("sheet", "--out", out).returncode == 0
    legend = re.findall(
        r'<li><i style="--c:(#[0-9a-f]{6})"></i>([0-9:]+)</li>', (out / "batches/catalogue.html").read_text()
    )
    assert len(legend) == 3
    with reviewing(cli, out) as review, browser(tmp_path / "home") as chromium:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(review.url)
        page.wait_for_selector("#windows .window")
        for colour, ratio in legend:  # one colour per ratio on both pages
            style = page.locator(f"#windows .window[data-ratio='{ratio}']").get_attribute("style")
            assert f"border-color: {rgb(colour)}" in style, (ratio, style)

        low = review.photos("?shown=low")["total"]  # below 0.5, the default
        page.select_option("#shown", "low")
        expect(page.locator("#count")).to_have_text(f"{low} of 3 photos")
        page.locator("#below").fill("")
        page.locator("#below").blur()  # an empty threshold is the default, not 0
        expect(page.locator("#count")).to_have_text(f"{low} of 3 photos")
        page.select_option("#shown", "all")
        expect(page.locator("#count")).to_have_text("3 of 3 photos")

        held = []
        page.route(re.compile(r"api/photos\?.*shown=low"), lambda route: held.append(route))  # answers late
        page.select_option("#shown", "low")
        page.select_option("#shown", "all")
        expect(page.locator("#photos li")).to_have_count(3)
        assert len(held) == 1
        with page.expect_response(lambda response: "shown=low" in response.url):
            held[0].continue_()
        page.locator("#photos li").first.hover()  # the page has handled the late answer by now
        expect(page.locator("#count")).to_have_text("3 of 3 photos")
        expect(page.locator("#photos li")).to_have_count(3)

        page.select_option("#ratio-filter", "4:3")  # the list on one ratio: clicks fix that ratio
        expect(page.locator("input[name=target][value='4:3']")).to_be_checked()
        page.locator("#photos li").nth(1).click()
        expect(page.locator("input[name=target][value='4:3']")).to_be_checked()
