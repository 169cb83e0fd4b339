"""Crop windows the catalogue does not know (thumbnails rendered before windows were recorded) are
chosen again by analysis alone when ``catalogue`` or ``sheet`` reads them: the same window the
render chose, recorded with the derivative, nothing rendered again; a source gone stays unknown."""

from __future__ import annotations

from pathlib import Path

from thumbctl import Ledger

from harness import Thumbctl
from inprocess import json_here, submit_here
from support import raw_write

RUN = ("-r", "1:1,16:9", "--size", "96")


def windows(cli: Thumbctl, out: Path) -> dict[str, object]:
    return {entry["name"]: entry["crop"] for entry in json_here(cli, "catalogue", out)["entries"]}


def forget_windows(db: str | Path) -> None:
    """The ledger as an early version left it: no render recorded a window."""
    with Ledger(db) as ledger:
        raw_write(ledger, "UPDATE derivatives SET result = '{}'")
        raw_write(ledger, 'UPDATE items SET result = \'{"width": 96, "height": 96}\'')


def test_unknown_windows_are_chosen_again_as_the_render_chose_them(
    ledger_url: str, photos: Path, out_dir: Path, tmp_path: Path
) -> None:
    cli = Thumbctl(ledger_url, store=tmp_path / "store")
    submit_here(cli, photos, "--out", out_dir, *RUN)
    rendered = windows(cli, out_dir)
    thumbnails = {p: p.read_bytes() for p in out_dir.glob("**/*.jpg")}
    assert rendered and all(crop is not None for crop in rendered.values())

    forget_windows(ledger_url)
    (photos / "garden.jpeg").unlink()  # its windows cannot be chosen again
    recomputed = windows(cli, out_dir)
    gone = {name for name in recomputed if name.startswith("garden.")}
    assert gone and all(recomputed[name] is None for name in gone)  # shown as unknown, never guessed
    assert {n: c for n, c in recomputed.items() if n not in gone} == {
        n: c for n, c in rendered.items() if n not in gone
    }
    assert {p: p.read_bytes() for p in out_dir.glob("**/*.jpg")} == thumbnails  # nothing rendered again

    written = json_here(cli, "sheet", "--out", out_dir)
    assert written["unknown"] == len(gone)
