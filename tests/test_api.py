"""The one-call API renders a batch end to end, on either ledger backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import thumbctl
from thumbctl import IdempotencyConflict, Profile, SubmitOptions, parse_ratios, render
from thumbctl.core.errors import StoreRequired
from thumbctl.core.models import BatchView
from thumbctl.engine.session import SubmitSession

from inprocess import render_here


def test_render_submits_and_renders_every_item(photos: Path, out_dir: Path, ledger_url: str, tmp_path: Path) -> None:
    options = SubmitOptions(out_dir=out_dir, profile=Profile(ratios=tuple(parse_ratios("1:1,4:3")), size=96))
    if ledger_url.startswith("postgresql://"):
        with pytest.raises(StoreRequired):  # a PostgreSQL ledger has no store beside it
            render(photos, options, db=ledger_url, workers=2)
    batch = render(photos, options, db=ledger_url, workers=2, store=tmp_path / "store")
    assert (batch.state, batch.total, batch.counts["succeeded"]) == ("succeeded", 8, 8)
    printed = "{'queued': 0, 'running': 0, 'succeeded': 8, 'failed': 0, 'cancelled': 0}"
    assert (str(batch.state), repr(batch.state), repr(batch.counts)) == ("succeeded", "'succeeded'", printed)
    manifest = out_dir / "batches" / f"{batch.batch_id}.json"
    assert manifest.exists()
    with thumbctl.Ledger(ledger_url) as ledger:
        items = ledger.views.items(batch.batch_id)
    assert {item.state for item in items} == {"succeeded"}
    for item in items:
        assert item.object_path.startswith(f"{tmp_path / 'store'}/objects/")
        with Image.open(item.friendly_path) as image:
            assert max(image.size) == 96


def rendered_here(source: Path, options: SubmitOptions, db: Path) -> BatchView:
    """What ``render(source, options, db=db)`` records (its session, detached), rendered in this
    process; the finished batch."""
    batch = SubmitSession(db, options).run(source, detach=True).batch
    render_here(db, batch.batch_id)
    with thumbctl.Ledger(db) as ledger:
        return ledger.views.batch(batch.batch_id)


def test_render_again_replays_the_batch_without_rendering_anything(photos: Path, out_dir: Path, tmp_path: Path) -> None:
    options = SubmitOptions(out_dir=out_dir, profile=Profile(size=64))
    first = rendered_here(photos, options, tmp_path / "l.db")
    assert first.state == "succeeded"
    again = render(photos, options, db=tmp_path / "l.db", workers=1)  # terminal already: no worker is started
    assert again.batch_id == first.batch_id and again.replayed and again.state == "succeeded"


def test_render_raises_the_documented_errors(photos: Path, out_dir: Path, tmp_path: Path) -> None:
    rendered_here(photos, SubmitOptions(out_dir=out_dir, key="K", profile=Profile(size=64)), tmp_path / "l.db")
    with pytest.raises(IdempotencyConflict) as caught:  # refused before any worker is started
        render(photos, SubmitOptions(out_dir=out_dir, key="K", profile=Profile(size=80)), db=tmp_path / "l.db")
    assert caught.value.exit_code == 3


def test_importing_thumbctl_and_naming_render_loads_neither_pillow_nor_the_pool() -> None:
    script = (
        "import sys, thumbctl\n"
        "thumbctl.render\n"
        "heavy = ('PIL', 'multiprocessing', 'sqlite_utils', 'thumbctl.engine.pool')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_a_program_without_a_main_guard_renders_and_runs_once(photos: Path, tmp_path: Path, how: str) -> None:
    """Worker processes never re-run the calling program (a script, or one read from stdin)."""
    program = (
        "from pathlib import Path\n"
        "from thumbctl import Profile, SubmitOptions, render\n"
        "print('program ran')\n"
        f"batch = render({str(photos)!r}, SubmitOptions(out_dir=Path('out'), profile=Profile(size=64)), workers=2)\n"
        "print(batch.state)\n"
    )
    script = tmp_path / "program.py"
    script.write_text(program)
    args, stdin = ([sys.executable, str(script)], None) if how == "script" else ([sys.executable, "-"], program)
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["program ran", "succeeded"]


def test_render_without_db_uses_the_ledger_the_command_line_uses(
    photos: Path, out_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not ledger.db in the current folder: THUMBCTL_DB when set, else the per-user state folder,
    so `thumbctl status` (no --db) lists the batch."""
    from typer.testing import CliRunner

    from thumbctl.cli import app

    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("THUMBCTL_DB", raising=False)
    monkeypatch.delenv("THUMBCTL_CONFIG", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    expected = tmp_path / "state" / "thumbctl" / "ledger.db"
    assert thumbctl.default_ledger() == expected
    batch = render(photos, SubmitOptions(out_dir=out_dir, profile=Profile(size=64)), workers=1)
    assert batch.state == "succeeded" and expected.is_file()
    assert sorted(p.name for p in work.iterdir()) == []
    listed = CliRunner().invoke(app, ["status", "--json"], catch_exceptions=False)
    assert [b["batch_id"] for b in json.loads(listed.stdout)["batches"]] == [batch.batch_id]
    monkeypatch.setenv("THUMBCTL_DB", str(tmp_path / "named.db"))
    assert thumbctl.default_ledger() == tmp_path / "named.db"
