"""Helpers shared by the tests: image makers and the invariant checks of DESIGN section 8."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from PIL import Image

from thumbctl import Ledger
from thumbctl.models import ITEM_STATES


def make_image(path: Path, size: tuple[int, int], fmt: str, *, seed: int = 0, mode: str = "RGB") -> Path:
    """Write a real, distinct image (noise with a gradient) of ``size`` in ``fmt``."""
    rng = random.Random(seed)
    image = Image.new(mode, size)
    w, h = size
    pixels = [
        tuple(((x * 255 // max(w, 1)) + rng.randrange(40)) % 256 for _ in range(len(mode)))
        for y in range(h)
        for x in range(w)
    ]
    image.putdata(pixels if len(mode) > 1 else [p[0] for p in pixels])
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, fmt)
    return path


def check_invariants(ledger: Ledger) -> None:
    """Invariant 1, from the views and straight from the rows: total = sum of counts."""
    with sqlite3.connect(ledger.path) as raw:
        rows = dict(raw.execute("SELECT batch_id, total FROM batches").fetchall())
        for batch_id, total in rows.items():
            counted = raw.execute("SELECT count(*) FROM items WHERE batch_id = ?", (batch_id,)).fetchone()[0]
            assert counted == total, f"{batch_id}: {counted} item rows, total {total}"
            view = ledger.batch(batch_id)
            assert set(view.counts) == set(ITEM_STATES)
            assert sum(view.counts.values()) == view.total == total
