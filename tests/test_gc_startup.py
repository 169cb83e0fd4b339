"""What ``thumbctl gc`` loads: retention runs from cron beside ``reconcile`` and needs neither a codec
nor the publisher, the move of the old output layout, nor the contact sheet's markup.

The check runs a fresh interpreter (``python -c``), since this test process has long since
imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from thumbctl.cli import app

from support import make_image

REPO = Path(__file__).resolve().parent.parent

#: What ``gc`` never needs: Pillow, the publisher, reconcile's checks, the layout migration, the sheet's markup.
NOT_FOR_GC = (
    "PIL",
    "thumbctl.publishing.publisher",
    "thumbctl.upkeep.reconcile",
    "thumbctl.upkeep.legacy_layout",
    "thumbctl.review.markup",
)

DRIVER = f"""
import json, sys
from thumbctl.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({{"code": code, "loaded": sorted(m for m in {NOT_FOR_GC!r} if m in sys.modules)}}), file=sys.stderr)
"""


def test_gc_loads_no_codec_publisher_migration_or_markup(tmp_path: Path) -> None:
    make_image(tmp_path / "one" / "a.jpg", (64, 48), "JPEG")
    db = tmp_path / "ledger.db"
    submitted = CliRunner().invoke(
        app, ["submit", str(tmp_path / "one"), "--out", str(tmp_path / "out"), "--db", str(db), "--detach", "-q"]
    )
    assert submitted.exit_code == 0, submitted.output
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, "gc", "--older-than", "30d", "--json", "--db", str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": []}, result.stderr
