from __future__ import annotations

import pytest

from thumbctl.models import ItemView
from thumbctl.reporter import item_note

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
