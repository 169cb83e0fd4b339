from __future__ import annotations

import gc
import io
import json
import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from thumbctl import Ledger, Limits
from thumbctl.core.errors import LedgerCorrupt
from thumbctl.core.models import EventView, ItemView
from thumbctl.report.listing import WIDTH_SAMPLE, WRITE_ROWS, item_note
from thumbctl.report.reporter import Reporter

from support import request

FRIENDLY = "/out/rooms/sofa.1x1.jpg"


@pytest.mark.parametrize(
    ("state", "detail", "note"),
    [
        ("succeeded", None, FRIENDLY),
        ("queued", None, FRIENDLY),  # where the output will be
        ("running", None, FRIENDLY),
        ("queued", "worker vm:1:2 is gone", FRIENDLY),  # requeued: it is on its way there again
        ("failed", "jpeg data does not decode", "jpeg data does not decode"),  # no output: say why
        ("cancelled", "the batch was cancelled", "the batch was cancelled"),
        ("failed", None, ""),  # never a name that was not written
    ],
)
def test_the_items_table_shows_an_output_or_why_there_is_none(state: str, detail: str | None, note: str) -> None:
    item = ItemView(
        "rooms/sofa.jpg", "/src/rooms/sofa.jpg", "1:1", state, 1, None, detail, "k", "/out/o", FRIENDLY, "t"
    )
    assert item_note(item) == note


# -- the long listings: streamed, one JSON document, one line per row -----------------------


def event(seq: int, item_id: str | None = "rooms/sofa.jpg", **fields: object) -> EventView:
    values: dict = {
        "seq": seq,
        "at": "2024-05-01T12:00:00.000001Z",
        "batch_id": "b_0123456789abcdef",
        "item_id": item_id,
        "ratio": "1:1" if item_id else None,
        "size": 640 if item_id else None,
        "format": "webp" if item_id else None,
        "from_state": "queued",
        "to_state": "running",
        "attempt": 1,
        "worker": "w:1:1",
        "error_code": None,
        "detail": None,
        "dedup": False,
    }
    return EventView(**{**values, **fields})


def item(item_id: str, state: str = "succeeded", **fields: object) -> ItemView:
    values: dict = {
        "item_id": item_id,
        "source": f"/src/{item_id}",
        "ratio": "1:1",
        "state": state,
        "attempt": 1,
        "error_code": None,
        "error_detail": None,
        "derivative_key": "k",
        "object_path": "/out/o",
        "friendly_path": f"/out/{item_id}.1x1.jpg",
        "updated_at": "t",
        "result": None,
    }
    return ItemView(**{**values, **fields})


def listed(json_mode: bool, show: Callable[[Reporter], None]) -> str:
    out = io.StringIO()
    show(Reporter(json_mode=json_mode, stdout=out, diagnostics=Console(file=io.StringIO())))
    return out.getvalue()


CROP = {"crop": {"policy": "smart", "score": 0.8125, "box": [310, 0, 1510, 1200]}, "width": 512, "height": 512}
ITEMS = [
    item("rooms/sofa.jpg", result=CROP),
    item('odd "name"\nwith a break.jpg', "failed", error_code="corrupt_image", error_detail="bad\tdata", result=None),
    item("日本/写真.jpg", "queued"),
]
EVENTS = [
    event(1, from_state=None, to_state="queued"),
    event(2),
    event(3, None, to_state="cancel_requested"),
    event(4, ratio="1:1", size=320, format="jpeg"),
]


@pytest.mark.parametrize(
    ("key", "head", "elements"),
    [
        ("events", {}, EVENTS),
        ("events", {}, []),
        ("items", {"batch_id": "b_1"}, ITEMS),
        ("items", {"batch_id": "b_1"}, []),
    ],
)
def test_a_streamed_json_listing_is_the_document_the_whole_list_made(key: str, head: dict, elements: list) -> None:
    if key == "events":
        streamed = listed(True, lambda r: r.events(iter(elements)))
    else:
        streamed = listed(True, lambda r: r.items("b_1", iter(elements)))
    whole = listed(True, lambda r: r.emit_json({**head, key: [e.to_json() for e in elements]}))
    assert json.loads(streamed) == json.loads(whole)
    lines = streamed.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and streamed.endswith("}\n")
    if elements:  # one element a line, so `grep` and `head` see whole elements
        assert [json.loads(line.strip().rstrip(",")) for line in lines[-2 - len(elements) : -2]] == [
            e.to_json() for e in elements
        ]


@pytest.mark.parametrize("before_fault", [0, 3, 1200])
def test_a_json_listing_cut_short_by_a_ledger_fault_is_still_one_document(before_fault: int) -> None:
    """A fault met in the first rows leaves only the error document; one met later ends the
    listing's document with an ``error`` member after the rows written (whole chunks of
    WRITE_ROWS): stdout always parses, and says what happened."""
    fault = LedgerCorrupt("the ledger is damaged")

    def events() -> Iterator[EventView]:
        yield from (event(n) for n in range(1, before_fault + 1))
        raise fault

    out = io.StringIO()
    reporter = Reporter(json_mode=True, stdout=out, diagnostics=Console(file=io.StringIO()))
    with pytest.raises(LedgerCorrupt):
        reporter.events(events())
    reporter.error(fault)  # as the CLI's one error handler does
    written = before_fault // WRITE_ROWS * WRITE_ROWS
    listed = {"events": [event(n).to_json() for n in range(1, written + 1)]} if written else {}
    assert json.loads(out.getvalue()) == {**listed, **fault.to_json()}


def test_events_are_lines_under_a_header_on_stdout() -> None:
    text = listed(False, lambda r: r.events(iter(EVENTS)))
    assert text == (
        "seq  at                           item            ratio  "
        "size  format  transition                 attempt  worker  "
        "error\n"
        "1    2024-05-01T12:00:00.000001Z  rooms/sofa.jpg  1:1    640   webp    ∅ → queued                 1      "
        "  w:1:1\n"
        "2    2024-05-01T12:00:00.000001Z  rooms/sofa.jpg  1:1    640   webp    queued → running           1      "
        "  w:1:1\n"
        "3    2024-05-01T12:00:00.000001Z  (batch)                              queued → cancel_requested  1      "
        "  w:1:1\n"
        "4    2024-05-01T12:00:00.000001Z  rooms/sofa.jpg  1:1    320   jpeg    queued → running           1      "
        "  w:1:1\n"
    )


def test_items_are_one_line_each_without_control_characters() -> None:
    text = listed(False, lambda r: r.items("b_1", iter(ITEMS)))
    assert text == (
        "item                         ratio  state      attempt  error          crop                          output\n"
        "rooms/sofa.jpg               1:1    succeeded  1                       smart 0.81 @ 310,0 1200x1200  "
        "/out/rooms/sofa.jpg.1x1.jpg\n"
        'odd "name" with a break.jpg  1:1    failed     1        corrupt_image  '
        "                              bad data\n"
        "日本/写真.jpg                1:1    queued     1                                                     "
        "/out/日本/写真.jpg.1x1.jpg\n"
    )


def test_columns_are_sized_on_the_first_rows_and_a_longer_one_later_widens_only_its_line() -> None:
    rows = [event(n, f"p{n}.jpg") for n in range(1, WIDTH_SAMPLE + 1)] + [event(999, "a-much-longer-name.jpg")]
    lines = listed(False, lambda r: r.events(iter(rows))).splitlines()
    assert len(lines) == 1 + len(rows)
    assert lines[1].index("1:1") == lines[WIDTH_SAMPLE].index("1:1")
    assert lines[-1].split() == ["999", "2024-05-01T12:00:00.000001Z", "a-much-longer-name.jpg", "1:1", "640",
                                 "webp", "queued", "→", "running", "1", "w:1:1"]  # fmt: skip


def test_quiet_lists_nothing() -> None:
    out = io.StringIO()
    Reporter(quiet=True, stdout=out, diagnostics=Console(file=io.StringIO())).events(iter(EVENTS))
    assert out.getvalue() == ""


def test_on_a_terminal_the_lines_are_styled_unless_no_color() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for no_color, coloured in ((False, True), (True, False)):
        out = Terminal()
        results = Console(file=out, no_color=no_color, soft_wrap=True)
        Reporter(results=results, diagnostics=Console(file=io.StringIO())).items("b_1", iter(ITEMS))
        assert ("\x1b[3" in out.getvalue()) is coloured  # a foreground colour
        assert len(out.getvalue().splitlines()) == 1 + len(ITEMS)


@pytest.fixture(scope="module")
def ledgers(built_once: Callable[[str, Callable[[Path], dict]], dict]) -> dict[int, tuple[Path, str]]:
    """Ledgers of one batch of 2,000 and of 10,000 items (two ratios a source), built once for the run:
    a listing that kept its rows would take about 5 MB more for the larger, 20 times the margin."""
    return built_once("listing-ledgers-2k-10k", build_listing_ledgers)


def build_listing_ledgers(folder: Path) -> dict[int, tuple[Path, str]]:
    made = {}
    for sources in (1_000, 5_000):
        path = folder / f"lists{sources}.db"
        with Ledger(path) as ledger:
            made[2 * sources] = (path, ledger.intake.accept_batch(request(sources=sources), Limits()).batch_id)
    return made


def listing_peak(path: Path, batch_id: str, listing: str, json_mode: bool) -> int:
    """Peak bytes Python allocates while listing the batch as the CLI does, into /dev/null."""
    with Ledger(path, read_only=True) as ledger, open(os.devnull, "w") as null:
        reporter = Reporter(json_mode=json_mode, stdout=null, diagnostics=Console(file=io.StringIO()))
        gc.collect()  # both listings start from no garbage, whatever ran earlier in this process
        tracemalloc.start()
        try:
            if listing == "events":
                with ledger.views.streamed_events(batch_id) as events:
                    reporter.events(events)
            else:
                with ledger.views.streamed_items(batch_id) as items:
                    reporter.items(batch_id, items)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


@pytest.mark.parametrize("json_mode", [True, False], ids=["json", "lines"])
@pytest.mark.parametrize("listing", ["events", "items"])
def test_a_listing_takes_no_more_memory_for_10k_items_than_for_2k(ledgers, listing: str, json_mode: bool) -> None:
    small, large = (listing_peak(*ledgers[n], listing, json_mode) for n in (2_000, 10_000))
    assert large < small + 256 * 1024, (small, large)
