"""Make a contact sheet of centre vs smart crops, for reviewing the smart crop by eye.

Renders every photo of a folder at the given ratios with the ``center`` and
the ``smart`` policies (the real pipeline, in-process) and lays them out side
by side, with the smart window's score. Run from the repository root::

    python bench/crop_sheet.py [FOLDER] [-o docs/smart-vs-center.jpg] [--ratio 1:1 --ratio 9:16]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from PIL import Image, ImageDraw

from thumbctl.core.profile import Ratio, parse_ratio
from thumbctl.imaging import CropAnalysis, decode_scale, decode_source, output_geometry, probe, resample

TILE = 150
LIMIT = 100_000_000


def crops(path: Path, ratio: Ratio) -> list[tuple[str, Image.Image, float]]:
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], LIMIT)
    geometry = output_geometry(info.width, info.height, ratio, TILE, False)
    decoded = decode_source(data, info.format, LIMIT, decode_scale(info.width, info.height, TILE))
    out = []
    for policy in ("center", "smart"):
        choice = CropAnalysis(decoded.image, decoded.width, decoded.height, policy).choose(geometry, None)
        out.append((policy, resample(decoded, choice.box, geometry.out_w, geometry.out_h), choice.score))
    return out


def tile(name: str, ratio: Ratio, rendered: list[tuple[str, Image.Image, float]]) -> Image.Image:
    width = sum(image.width for _, image, _ in rendered) + 10 * len(rendered)
    canvas = Image.new("RGB", (width, TILE + 34), "white")
    draw = ImageDraw.Draw(canvas)
    draw.text((2, 1), f"{name[:34]} {ratio}", fill="black")
    x = 0
    for policy, image, score in rendered:
        canvas.paste(image, (x, 16))
        draw.text((x + 2, TILE + 19), policy if policy == "center" else f"{policy} {score:.2f}", fill="black")
        x += image.width + 10
    return canvas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="sample_images")
    parser.add_argument("-o", "--output", default="docs/smart-vs-center.jpg")
    parser.add_argument("--ratio", action="append", default=None)
    args = parser.parse_args()
    ratios = [parse_ratio(r) for r in (args.ratio or ["1:1", "9:16"])]
    photos = sorted(p for p in Path(args.folder).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    tiles = [tile(p.name, r, crops(p, r)) for p in photos for r in ratios]
    columns = 4
    cell_w = max(t.width for t in tiles) + 12
    cell_h = max(t.height for t in tiles) + 8
    rows = (len(tiles) + columns - 1) // columns
    sheet = Image.new("RGB", (columns * cell_w, rows * cell_h), "white")
    for i, t in enumerate(tiles):
        sheet.paste(t, ((i % columns) * cell_w, (i // columns) * cell_h))
    sheet.save(args.output, quality=82, optimize=True)
    print(f"wrote {args.output}: {len(tiles)} tiles")


if __name__ == "__main__":
    main()
