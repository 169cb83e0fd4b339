"""Make the contact sheet of a batch with cover, contain and trimmed tiles, and a screenshot of it.

Draws a product shot (an object on a near-white, slightly noisy background, JPEG-compressed), lists
it twice in a manifest (once ``cover``, once ``contain``) beside a photo of ``sample_images`` asked
``contain``, submits the manifest with ``--trim`` at 1:1 and 16:9, and writes the batch's contact
sheet; with Chromium on the PATH it also saves a screenshot. Run from the repository root::

    python bench/fit_sheet.py [-o docs/fit-sheet.png]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]


def product_shot(size: tuple[int, int] = (1200, 900)) -> bytes:
    rng = random.Random(7)
    noise = Image.frombytes("L", size, bytes(rng.randrange(244, 255) for _ in range(size[0] * size[1])))
    image = Image.merge("RGB", (noise, noise, noise))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((420, 210, 760, 700), 40, fill=(36, 99, 160))  # a bottle
    draw.rectangle((540, 120, 640, 215), fill=(30, 30, 30))  # its cap
    draw.rectangle((450, 380, 730, 520), fill=(240, 200, 60))  # its label
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=88)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "fit-sheet.png")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fit-sheet-"))
    try:
        src = work / "src"
        src.mkdir()
        (src / "bottle.jpg").write_bytes(product_shot())
        shutil.copy(ROOT / "sample_images" / "public-domain" / "sk-coffee.png", src / "coffee.png")
        items = [
            {"id": "bottle-cover", "source": "bottle.jpg"},
            {"id": "bottle-contain", "source": "bottle.jpg", "fit": "contain"},
            {"id": "coffee-contain", "source": "coffee.png", "fit": "contain"},
        ]
        (src / "shop.json").write_text(json.dumps(items))
        command = [sys.executable, "-m", "thumbctl", "--db", str(work / "l.db"), "submit", str(src / "shop.json")]
        command += ["--out", str(work / "out"), "-r", "1:1", "-r", "16:9", "--size", "320", "--trim", "-q"]
        subprocess.run(command, check=True)
        sheet = next((work / "out" / "batches").glob("*.html"))
        print(f"contact sheet: {sheet}")
        browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
        if browser is None:
            print("no Chromium on the PATH: no screenshot")
            return
        shot = work / "sheet.png"
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--hide-scrollbars", f"--screenshot={shot}",
             "--window-size=1100,1260", sheet.as_uri()],
            check=True, capture_output=True,
        )  # fmt: skip
        Image.open(shot).convert("RGB").save(args.output, optimize=True)
        print(f"screenshot: {args.output}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
