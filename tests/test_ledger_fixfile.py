"""What the ledger keeps of a root's fix file, on every backend (``[sqlite]``, ``[postgres]``,
``[memory]``): each update replaces only what it says of its own photos, so two commands (two
connections) never lose each other's record; and the roots that read a source, newest first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from thumbctl import Ledger
from thumbctl.core.fixes import FixFileState, FixFileUpdate, StaleFix

from support import Clock, open_ledger


@pytest.fixture
def ledger(contract_ledger_url: str) -> Iterator[Ledger]:
    with open_ledger(contract_ledger_url, clock=Clock()) as led:
        yield led


def test_an_update_replaces_what_the_record_said_of_its_photos_only(ledger: Ledger, contract_ledger_url: str) -> None:
    root = "/shop/photos"
    assert ledger.intake.fix_file_state(root) == FixFileState()
    ledger.intake.update_fix_file_state(
        root, FixFileUpdate(frozenset({"a", "b"}), frozenset({("a", "1:1"), ("b", "4:3")}))
    )
    with open_ledger(contract_ledger_url, clock=Clock()) as other:  # another command, another connection
        stale = {"c": StaleFix("c.jpg", ("1:1",), "picture_changed")}
        other.intake.update_fix_file_state(
            root, FixFileUpdate(frozenset({"b", "c"}), frozenset({("c", "16:9")}), stale)
        )
    state = ledger.intake.fix_file_state(root)
    assert state.applied == {("a", "1:1"), ("c", "16:9")}  # b's fix is gone from the file, a's stays
    assert state.stale == stale
    assert ledger.intake.fix_file_state("/another/root") == FixFileState()
