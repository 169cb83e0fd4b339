"""The commands the docs give for publishing OUT never copy thumbctl's temp files (``OUT/.tmp``)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import Thumbctl
from inprocess import submit_here

DOCS = Path(__file__).resolve().parent.parent / "docs"


def documented(doc: str, command: str) -> list[str]:
    """The inline commands of ``docs/<doc>`` that start with ``command``."""
    return [span for span in re.findall(r"`([^`\n]+)`", (DOCS / doc).read_text()) if span.startswith(command)]


def test_the_documented_rsync_line_copies_no_temp_file(tmp_path: Path, photos: Path) -> None:
    if shutil.which("rsync") is None:  # required in CI (the env var CI set: .ci/run installs it)
        if os.environ.get("CI"):
            pytest.fail("rsync is required in CI: .ci/run installs it (apt-get install -y rsync)")
        pytest.skip("rsync is not installed")
    shop, www = tmp_path / "shop", tmp_path / "www"
    th = Thumbctl(tmp_path / "ledger.db")
    source = tmp_path / "shop-photos"
    shutil.copytree(photos, source)
    shutil.copytree(photos, source / "shoes" / "batches")  # a sub-folder of the shop named batches
    batch_id = submit_here(th, source, "--out", shop, "--workers", "1")["batch_id"]
    assert th.invoke("sheet", batch_id).returncode == 0  # OUT as a foreground run leaves it, its page too
    leftover = shop / ".tmp" / "4242-777-0123abcd-0123456789ab.copy"  # what a crashed worker leaves
    leftover.parent.mkdir(exist_ok=True)
    leftover.write_bytes(b"half a thumbnail")
    [line] = documented("sellers.md", "rsync ")
    args = [{"shop/": f"{shop}/", "www:/srv/img/": f"{www}/"}.get(arg, arg) for arg in shlex.split(line)]
    assert subprocess.run(args, capture_output=True, check=False).returncode == 0
    copied = {p.relative_to(www).as_posix() for p in www.rglob("*")}
    assert not any(part.startswith((".tmp", "batches")) for part in copied), copied
    thumbnails = {p.relative_to(shop).as_posix() for p in shop.rglob("*.jpg") if "batches/b_" not in p.as_posix()}
    assert any(name.startswith("shoes/batches/") for name in thumbnails)
    assert thumbnails <= copied, sorted(thumbnails - copied)


def test_every_documented_publish_command_leaves_temp_files_out() -> None:
    syncs = documented("sellers.md", "aws s3 sync ")
    assert syncs and all("--exclude '.tmp/*'" in line for line in syncs)
    assert all("--exclude /.tmp/" in line for line in documented("sellers.md", "rsync "))
    ci = (DOCS / "ci.md").read_text()
    assert "!thumbs/.tmp" in ci.split("actions/upload-artifact", 1)[1].split("```", 1)[0]
