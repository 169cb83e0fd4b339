"""The catalogue port on every backend (``[sqlite]``, ``[postgres]``, ``[memory]``): a render's window
is kept with its derivative key, reused outputs carry it, a name's ``changed_at`` moves only when
other bytes are published there, and the review page's approvals are kept per OUT and photo."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from thumbctl import Ledger, Limits
from thumbctl.core.catalogue import CatalogueEntry
from thumbctl.ledger.queue import Publication

from support import Clock, open_ledger, request

CROP = {"box": [5, 0, 35, 30], "score": 0.42, "policy": "smart"}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(contract_ledger_url: str, clock: Clock) -> Iterator[Ledger]:
    with open_ledger(contract_ledger_url, clock=clock) as led:
        yield led


def render_all(ledger: Ledger, version: str = "v1") -> None:
    """Claim and publish every queued item, each with a render result holding a window."""
    while (claim := ledger.queue.claim("w")) is not None:
        for item in claim.items:
            result = {"width": 40, "height": 30, "crop": CROP, "dominant_colour": "#abcdef"}
            assert ledger.queue.publish(claim, item, lambda: Publication(None, version), result=result) == "succeeded"


def entries(ledger: Ledger) -> dict[str, CatalogueEntry]:
    return {entry.name: entry for entry in ledger.catalogue.entries("/out")}


def test_a_rendered_name_is_listed_with_its_window_score_and_placeholder(ledger: Ledger) -> None:
    ledger.intake.accept_batch(request("first", sources=1), Limits())
    render_all(ledger)
    listed = entries(ledger)
    assert sorted(listed) == ["/out/f01:1", "/out/f04:3"]
    entry = listed["/out/f01:1"]
    assert (entry.crop, entry.score, entry.placeholder) == (CROP, 0.42, {"dominant_colour": "#abcdef"})
    assert (entry.source, entry.source_digest, entry.ratio, entry.version) == ("/src/img0.jpg", "0" * 64, "1:1", "v1")
    assert ledger.catalogue.outs() == [("/out", 2)] and ledger.catalogue.entries("/elsewhere") == []


def test_a_reused_output_carries_the_window_of_the_render_that_made_it(ledger: Ledger, clock: Clock) -> None:
    ledger.intake.accept_batch(request("first", sources=1), Limits())
    render_all(ledger)
    made_at = entries(ledger)["/out/f01:1"].changed_at
    clock.now += 60
    again = request("again", sources=1)
    reusing = replace(again, items=tuple(replace(i, state="succeeded", dedup=True) for i in again.items))
    batch = ledger.intake.accept_batch(reusing, Limits())
    assert all((i.result or {}).get("crop") == CROP for i in ledger.views.items(batch.batch_id))
    for item in ledger.views.items(batch.batch_id):  # the reusing batch publishes the same bytes there
        ledger.queue.record_name_version(batch.batch_id, item.friendly_path or "", "v1")
    entry = entries(ledger)["/out/f01:1"]
    assert entry.batch_id == batch.batch_id and entry.crop == CROP and entry.changed_at == made_at


def test_changed_at_moves_when_other_bytes_are_published_at_the_name(ledger: Ledger, clock: Clock) -> None:
    ledger.intake.accept_batch(request("first", sources=1), Limits())
    render_all(ledger, "v1")
    made_at = entries(ledger)["/out/f01:1"].changed_at
    clock.now += 60
    ledger.intake.accept_batch(request("retouched", sources=1), Limits())
    render_all(ledger, "v2")
    entry = entries(ledger)["/out/f01:1"]
    assert entry.version == "v2" and entry.changed_at > made_at


def test_approvals_are_kept_per_out_and_photo(ledger: Ledger, clock: Clock) -> None:
    assert ledger.catalogue.reviews("/out") == {}
    first = ledger.catalogue.record_review("/out", "a" * 64)
    clock.now += 60
    ledger.catalogue.record_review("/out|b", "c" * 64)  # an OUT whose name holds the separator
    again = ledger.catalogue.record_review("/out", "a" * 64)
    assert again > first
    assert ledger.catalogue.reviews("/out") == {"a" * 64: again}
    assert ledger.catalogue.reviews("/out|b") == {"c" * 64: again}
    assert ledger.catalogue.reviews("/ou") == {}


def test_names_in_flight_are_those_an_unfinished_item_of_the_out_will_publish(ledger: Ledger) -> None:
    ledger.intake.accept_batch(request("first", sources=1), Limits())
    names = ["/out/f01:1", "/out/f04:3", "/out/not-a-name"]
    assert ledger.catalogue.names_in_flight("/out", names) == {"/out/f01:1", "/out/f04:3"}
    assert ledger.catalogue.names_in_flight("/elsewhere", names) == set()
    claim = ledger.queue.claim("w")  # running is in flight too
    assert claim is not None and ledger.catalogue.names_in_flight("/out", names) == {"/out/f01:1", "/out/f04:3"}
    for item in claim.items:
        ledger.queue.publish(claim, item, lambda: Publication(None, "v1"), result={"width": 4, "height": 3})
    render_all(ledger)
    assert ledger.catalogue.names_in_flight("/out", names) == set()
