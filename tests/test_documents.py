"""``--documents``: the batch manifests and contact sheets go to a folder or bucket prefix of the
user's choosing (a private one beside a public site bucket), never into OUT; OUT keeps the
thumbnails and the site manifest; the sheets there link to the thumbnails, by the site's URL when
OUT has a ``--base-url``; gc expires them where they are."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

from thumbctl.config.s3location import parse_s3

from harness import Thumbctl
from inprocess import json_here
from s3 import keys, raw_store

RUN = ("-r", "1:1", "--size", "96", "-w", "1")


def listed(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_the_documents_go_where_asked_and_out_keeps_only_what_the_site_needs(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    cli = Thumbctl(tmp_path / "ledger.db")
    private = tmp_path / "private"
    done = cli.invoke("submit", photos, "--out", out_dir, "--documents", private, *RUN, "--json")
    assert done.returncode == 0, done.stderr
    batch = json.loads(done.stdout)
    assert batch["manifest_path"] == f"{private.resolve()}/batches/{batch['batch_id']}.json"
    assert batch["sheet"] == f"{private.resolve()}/batches/catalogue.html"
    assert not (out_dir / "batches").exists() and "thumbctl.json" in listed(out_dir)
    assert listed(private) == sorted(
        [f"batches/{batch['batch_id']}.json", f"batches/{batch['batch_id']}.html", "batches/catalogue.html"]
    )
    page = (private / "batches" / "catalogue.html").read_text(encoding="utf-8")
    for src in re.findall(r'<img[^>]+src="(\.\.[^"]+)"', page):
        assert (private / "batches" / src).resolve().is_file(), src  # every tile's link reaches its thumbnail

    again = cli.invoke("submit", photos, "--out", out_dir, "--documents", private, *RUN, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["replayed"], again.stderr  # its manifest found there
    sheet = cli.invoke("sheet", "--out", out_dir)  # the catalogue's sheet of OUT goes where its documents go
    assert sheet.returncode == 0 and str(private) in sheet.stdout, sheet.stdout
    gc = cli.invoke("gc", "--older-than", "0s", "--json")
    assert gc.returncode == 0, gc.stderr
    assert listed(private) == ["batches/catalogue.html"]  # the expired batch's manifest and sheet


def test_documents_inside_out_or_the_store_are_refused(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    cli = Thumbctl(tmp_path / "ledger.db", store=tmp_path / "store")
    for inside in (out_dir / "docs", tmp_path / "store" / "docs"):
        done = cli.invoke("submit", photos, "--out", out_dir, "--documents", inside, *RUN)
        assert done.returncode == 2 and "error [bad_out_dir] --documents" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not list(out_dir.rglob("*.jpg")), "nothing rendered"


def test_a_public_site_bucket_gets_no_batch_document(tmp_path: Path, photos: Path, s3_url: str, s3_server) -> None:
    site, private = f"{s3_url}/site", f"{s3_url}/private"
    cli = Thumbctl(tmp_path / "ledger.db", store=tmp_path / "store")
    base = "https://cdn.example/img/"
    done = cli.run("submit", photos, "--out", site, "--documents", private, "--base-url", base, *RUN, "--json")
    assert done.returncode == 0, done.stderr
    batch = json.loads(done.stdout)
    bucket = raw_store(s3_server)
    site_keys = keys(bucket, parse_s3(site).key(""))
    assert site_keys and not [k for k in site_keys if "/batches/" in k]
    assert any(k.endswith("/thumbctl.json") for k in site_keys)
    private_keys = keys(bucket, parse_s3(private).key(""))
    assert sorted(k.rsplit("/", 1)[-1] for k in private_keys) == sorted(
        [f"{batch['batch_id']}.json", f"{batch['batch_id']}.html", "catalogue.html"]
    )
    page = bucket.get(parse_s3(private).key("batches/catalogue.html")).bytes().to_bytes().decode()
    tiles = re.findall(r'<img[^>]+src="(https://[^"]+)"', page)
    assert tiles and all(t.startswith(base) for t in tiles)  # a private page shows the public thumbnails


def test_nothing_written_into_out_names_a_folder_of_the_machine(tmp_path: Path, photos: Path, out_dir: Path) -> None:
    """The batch manifest, both sheets and the site manifest: local paths relative to OUT, or ``~/…``
    under the home folder (the fix lines, pasted anywhere), never in full."""
    cli = Thumbctl(tmp_path / "ledger.db", env={"HOME": str(tmp_path)})
    done = cli.invoke("submit", photos, "--out", out_dir, *RUN, "--json")
    assert done.returncode == 0, done.stderr
    documents = [p for p in out_dir.rglob("*") if p.is_file() and p.suffix in (".json", ".html")]
    assert {p.name for p in documents} >= {
        "thumbctl.json",
        "catalogue.html",
        f"{json.loads(done.stdout)['batch_id']}.json",
    }
    for document in documents:
        text = document.read_text(encoding="utf-8")
        assert str(tmp_path) not in text, (document.name, text[text.find(str(tmp_path)) - 80 :][:200])
    manifest = json.loads(next(p for p in documents if p.parent.name == "batches" and p.suffix == ".json").read_text())
    assert manifest["paths"] == "out" and (out_dir / manifest["items"][0]["friendly_path"]).is_file()


def test_fix_lines_of_photos_outside_home_run_in_the_folder_that_holds_the_root(
    tmp_path: Path, photos: Path, out_dir: Path
) -> None:
    """Outside the home folder, a page in OUT names the photo and the ledger from the folder that holds
    the source root, and says so; pasted there, the line works."""
    home = tmp_path / "home"
    home.mkdir()
    cli = Thumbctl(tmp_path / "ledger.db", env={"HOME": str(home)})
    done = cli.invoke("submit", photos, "--out", out_dir, *RUN, "--json")
    assert done.returncode == 0, done.stderr
    for document in (p for p in out_dir.rglob("*") if p.suffix in (".json", ".html")):
        assert str(tmp_path) not in document.read_text(encoding="utf-8"), document.name
    page = (out_dir / "batches" / "catalogue.html").read_text(encoding="utf-8")
    assert "run them in the folder that holds photos/" in page
    line = html.unescape(re.search(r"thumbctl focus photos/garden\.jpeg [^<]*", page).group(0))
    assert line.endswith(" --db ledger.db")
    pasted = subprocess.run(
        ["bash", "-c", line.replace("thumbctl ", f"{sys.executable} -m thumbctl ", 1)],
        cwd=tmp_path,
        env=cli.environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert pasted.returncode == 0, pasted.stderr
    assert json_here(cli, "focus", photos / "garden.jpeg")["focus_points"]
