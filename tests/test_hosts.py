"""Hosts that do not share a disk: a worker whose host lacks the local store or OUT a PostgreSQL
ledger recorded fails the claim with a coded error and never makes a fresh local folder there.

Two process trees with their own host identities (``THUMBCTL_HOST_ID``, test only) share the
ledger: host A records the batch with ``submit --detach``; host B, which does not see the folder
(here: it was moved away after the submit), runs ``work``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import Thumbctl

DETAIL = "a local {what} must be a folder every worker host sees at the same path (or use {flag} s3://bucket/prefix)"


@pytest.mark.parametrize("missing", ["store", "out"])
def test_a_worker_whose_host_lacks_the_recorded_folder_fails_its_claim(
    pg_url: str, photos: Path, tmp_path: Path, missing: str
) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    host_a = Thumbctl(pg_url, store=store, host="host-a")
    host_b = Thumbctl(pg_url, host="host-b")
    batch = host_a.json("submit", photos, "--out", out, "-r", "1:1", "--detach")
    assert batch["counts"]["queued"] == 4 and out.is_dir() and (store / "ledger-id").is_file()
    folder = store if missing == "store" else out
    folder.rename(tmp_path / "elsewhere")

    worked = host_b.run("work", "--until-idle", "-w", "1")
    assert worked.returncode == 0, worked.stderr
    assert not folder.exists()  # nothing rendered into a fresh folder of that name
    status = host_b.json("status", batch["batch_id"])
    code = f"{missing}_not_on_host"
    assert (status["state"], status["counts"]["failed"]) == ("failed", 4)
    assert {f["error_code"] for f in status["failures"]} == {code}
    what, flag = ("store", "--store") if missing == "store" else ("OUT", "--out")
    assert all(f["detail"].endswith(DETAIL.format(what=what, flag=flag)) for f in status["failures"])
