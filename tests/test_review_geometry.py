"""The review page's preview is the render's window: ``thumbctl/web/static/geometry.js`` gives what
:mod:`thumbctl.imaging.window` gives over a hypothesis table of photo sizes, ratios, fits, trims,
focus points and clicks, run in the system's Chromium; and that function is the window a render
with the fix crops, at any size, with or without upscaling."""

from __future__ import annotations

import math
from importlib import resources

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thumbctl.core.profile import Ratio
from thumbctl.imaging.crop import focus_box, output_geometry
from thumbctl.imaging.window import fixed_window, focus_at

from reviewing import browser

GEOMETRY = resources.files("thumbctl.web").joinpath("static/geometry.js").read_text()

RUN_TABLE = """async ([source, cases]) => {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const geometry = await import(url);
  return cases.map((c) => [
    geometry.fixedWindow(c.w, c.h, c.ratio, c.fit, c.trim, c.focus),
    geometry.focusAt(c.point, c.w, c.h, c.trim),
  ]);
}"""

unit = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 0.25, 0.125]), st.floats(0, 1, allow_nan=False))


@st.composite
def cases(draw: st.DrawFn) -> dict:
    w = draw(st.one_of(st.integers(1, 64), st.integers(1, 12000)))
    h = draw(st.one_of(st.integers(1, 64), st.integers(1, 12000)))
    rw, rh = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    g = math.gcd(rw, rh)
    trim = None
    if draw(st.booleans()):
        left, right = sorted(draw(st.lists(st.integers(0, w), min_size=2, max_size=2, unique=True)) or [0, w])
        top, bottom = sorted(draw(st.lists(st.integers(0, h), min_size=2, max_size=2, unique=True)) or [0, h])
        trim = [left, top, right, bottom] if right > left and bottom > top else None
    return {
        "w": w,
        "h": h,
        "ratio": f"{rw // g}:{rh // g}",
        "fit": draw(st.sampled_from(["cover", "cover", "contain"])),
        "trim": trim,
        "focus": [draw(unit), draw(unit)],
        "point": [draw(unit), draw(unit)],
    }


def python_answer(case: dict) -> list:
    w, h, trim = case["w"], case["h"], tuple(case["trim"]) if case["trim"] else None
    rw, rh = map(int, case["ratio"].split(":"))
    window = fixed_window(w, h, Ratio(rw, rh), case["fit"], trim, tuple(case["focus"]))
    return [list(window), list(focus_at(tuple(case["point"]), w, h, trim))]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory):
    with browser(tmp_path_factory.mktemp("chromium")) as chromium:
        opened = chromium.new_page()
        opened.goto("about:blank")
        yield opened


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(table=st.lists(cases(), min_size=1, max_size=100))
def test_the_page_computes_the_same_window_as_the_render(page, table: list[dict]) -> None:
    assert page.evaluate(RUN_TABLE, [GEOMETRY, table]) == [python_answer(case) for case in table]


def test_edge_cases_agree(page) -> None:
    table = [  # noqa: E501 - one case a line
        {"w": 1078, "h": 1600, "ratio": "16:9", "fit": "cover", "trim": None, "focus": [0.5, 0.2], "point": [0.5, 0.2]},
        {"w": 3, "h": 2, "ratio": "1:1", "fit": "cover", "trim": None, "focus": [0.5, 0.5], "point": [1, 1]},
        {"w": 5, "h": 4, "ratio": "1:1", "fit": "cover", "trim": None, "focus": [0.1, 0.5], "point": [0.5, 0.5]},
        {"w": 9, "h": 9, "ratio": "2:1", "fit": "cover", "trim": [1, 2, 8, 7], "focus": [1, 1], "point": [0.05, 0.95]},
        {
            "w": 800,
            "h": 600,
            "ratio": "4:3",
            "fit": "contain",
            "trim": [10, 0, 790, 600],
            "focus": [0, 0],
            "point": [0, 0],
        },
    ]
    assert page.evaluate(RUN_TABLE, [GEOMETRY, table]) == [python_answer(case) for case in table]


@given(
    w=st.integers(1, 9000),
    h=st.integers(1, 9000),
    rw=st.integers(1, 30),
    rh=st.integers(1, 30),
    size=st.integers(1, 4096),
    upscale=st.booleans(),
    focus=st.tuples(unit, unit),
)
def test_a_fix_s_window_does_not_depend_on_the_size_or_upscaling(w, h, rw, rh, size, upscale, focus) -> None:
    """What the render crops with a fix (the window of its output geometry, centred on the fix) is
    :func:`fixed_window`'s box, whatever size is asked and whether the photo may be enlarged."""
    ratio = Ratio(rw // math.gcd(rw, rh), rh // math.gcd(rw, rh))
    rendered = focus_box(w, h, output_geometry(w, h, ratio, size, upscale), focus)
    assert fixed_window(w, h, ratio, "cover", None, focus) == rendered


def test_a_click_centres_the_window_on_it_as_nearly_as_the_edges_allow() -> None:
    ratio = Ratio(1, 1)
    assert fixed_window(400, 200, ratio, "cover", None, focus_at((0.5, 0.5), 400, 200, None)) == (100, 0, 300, 200)
    assert fixed_window(400, 200, ratio, "cover", None, focus_at((0.01, 0.5), 400, 200, None)) == (0, 0, 200, 200)
    trim = (100, 0, 300, 200)  # a trimmed photo: the window stays inside the trimmed box
    assert fixed_window(400, 200, ratio, "cover", trim, focus_at((0.9, 0.5), 400, 200, trim)) == trim
