"""Ctrl-C after the last item of a foreground run settled, while the run is still ending: there is
nothing left to cancel, and the run must not say it recorded a cancel (it once printed
"Cancel recorded … at None" and then a succeeded batch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import Thumbctl
from support import make_image

pytestmark = pytest.mark.timeout(120)


def test_ctrl_c_after_every_item_settled_records_no_cancel_and_says_so(tmp_path: Path) -> None:
    thumbctl = Thumbctl(tmp_path / "ledger.db", faults=tmp_path / "faults", timeout=90)
    make_image(tmp_path / "photos" / "p.jpg", (300, 200), "JPEG", seed=1)
    proc = thumbctl.start(
        "submit",
        tmp_path / "photos",
        "--out",
        tmp_path / "out",
        "--ratio",
        "1:1",
        "-w",
        "1",
        fault="pause:after_commit",
    )
    err = proc.follow_stderr()
    thumbctl.paused("after_commit", process=proc)  # the only item is succeeded, the run not yet ended
    proc.interrupt()
    err.wait_for("nothing to cancel")
    thumbctl.release()
    assert proc.wait(timeout=60) == 130
    text = err.rest()
    assert "Traceback" not in text and "at None" not in text and "cancel is recorded" not in text, text
    assert text.strip().splitlines()[-1].startswith("error [interrupted] "), text
    [batch] = thumbctl.json("status", codes=None)["batches"]
    assert batch["state"] == "succeeded" and batch["cancel_requested_at"] is None
