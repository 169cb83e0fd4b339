"""Benchmark: bytes, perceptual score and encode time per format, quality and effort; the defaults.

Workload: every photo of a folder (default ``../shared/corpus/photos``), framed as thumbctl frames
it (``--ratio``, default 1:1, smart crop, ``--size`` 640 px on the longest side): ``probe``,
``decode_source``, ``CropAnalysis``, ``choose`` and ``resample``, exactly what a worker does. That
resampled image is the reference; each format x quality x effort of the grid encodes it with
thumbctl's ``encode`` (JPEG: q85, progressive, optimised Huffman tables, 4:2:0, the reference
format), and each output is decoded and scored against the reference with SSIMULACRA2.

Encode time is one ``encode`` call per output, ``--repeat`` times (the median), all encodes of a
photo interleaved, in this one process (one thread: thumbctl's AVIF encode is single-threaded, as
a worker process is), before any scoring starts. Scores are computed afterwards by ``--jobs``
processes of ``--metric-python``: an interpreter with the ``ssimulacra2`` package (numpy, scipy),
kept out of thumbctl's own environment, e.g. ``python -m venv /tmp/metric && /tmp/metric/bin/pip
install ssimulacra2 pillow``.

Per configuration the table gives the medians over photos of bytes, score and encode ms, and the
median over photos of its bytes / JPEG q85's bytes of the same photo. The targets, checked at the
defaults of ``thumbctl.core.encoders``: median score within 2 points of JPEG q85's; bytes AVIF <= 0.70 x
JPEG, WebP <= 0.85 x JPEG; AVIF encode ms <= 2 x WebP's. It also prints the configuration this run
would choose: per format the smallest median bytes among those within the score target (WebP first,
then AVIF among those within the time target against that WebP).

Run it from the repository root::

    python bench/quality.py --metric-python /tmp/metric/bin/python [--folder ../shared/corpus/photos]
        [--size 640] [--ratio 1:1] [--repeat 1] [--jobs 2] [--webp 80,85,90/4,5,6] [--avif 60,65,70,75,80/1,2,4]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from imaging import MAX_PIXELS, REPO, code_version, command_line, shown_path, source_files
from PIL import Image

from thumbctl.core.encoders import DEFAULT_EFFORT, DEFAULT_QUALITY, EFFORT_RANGES, avif_speed
from thumbctl.core.profile import parse_ratio
from thumbctl.imaging import CropAnalysis, decode_scale, decode_source, encode, output_geometry, probe, resample

#: The grid: format -> (qualities, efforts). JPEG q85 is the reference.
GRID: dict[str, tuple[tuple[int, ...], tuple[int | None, ...]]] = {
    "jpeg": ((85,), (None,)),
    "webp": ((80, 85, 90), (4, 5, 6)),
    "avif": ((60, 65, 70, 75, 80), (1, 2, 4)),
}
SCORE_POINTS = 2.0
BYTES_TARGET = {"webp": 0.85, "avif": 0.70}
TIME_TARGET = 2.0  # AVIF ms / WebP ms


@dataclass(frozen=True)
class Config:
    fmt: str
    quality: int
    effort: int | None

    @property
    def label(self) -> str:
        if self.fmt == "avif":
            return f"avif q{self.quality} effort {self.effort} (speed {avif_speed(self.effort or 0)})"
        if self.fmt == "webp":
            return f"webp q{self.quality} effort {self.effort} (method {self.effort})"
        return f"{self.fmt} q{self.quality}"


@dataclass
class Measured:
    bytes: list[int] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)  # bytes / the photo's JPEG bytes
    score: list[float] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(getattr(self, name))


REFERENCE = Config("jpeg", 85, None)
CONFIGS = [Config(fmt, q, e) for fmt, (qs, es) in GRID.items() for e in es for q in qs]


def framed(path: Path, size: int, ratio_text: str) -> Image.Image:
    """The photo as thumbctl frames it at ``ratio`` and ``size`` (smart crop), before encoding."""
    data = path.read_bytes()
    info = probe(io.BytesIO(data), data[:32], MAX_PIXELS)
    geometry = output_geometry(info.width, info.height, parse_ratio(ratio_text), size, False)
    decoded = decode_source(data, info.format, MAX_PIXELS, decode_scale(info.width, info.height, size))
    box = CropAnalysis(decoded.image, decoded.width, decoded.height, "smart").choose(geometry, None).box
    return resample(decoded, box, geometry.out_w, geometry.out_h)


def encode_all(image: Image.Image, repeat: int) -> dict[Config, tuple[bytes, float]]:
    times: dict[Config, list[float]] = {config: [] for config in CONFIGS}
    outputs: dict[Config, bytes] = {}
    for _ in range(repeat):
        for config in CONFIGS:
            start = time.perf_counter()
            outputs[config] = encode(image, config.fmt, config.quality, effort=config.effort)
            times[config].append((time.perf_counter() - start) * 1000)
    return {config: (outputs[config], statistics.median(times[config])) for config in CONFIGS}


def measure(folder: Path, size: int, ratio: str, repeat: int, work: Path) -> tuple[dict[Config, Measured], list]:
    results = {config: Measured() for config in CONFIGS}
    pairs: list[tuple[Config, str, str]] = []
    for n, path in enumerate(source_files(folder)):
        image = framed(path, size, ratio)
        reference = work / f"{n}.png"
        image.save(reference)
        encoded = encode_all(image, repeat)
        jpeg_bytes = len(encoded[REFERENCE][0])
        for i, (config, (data, ms)) in enumerate(encoded.items()):
            out = work / f"{n}-{i}.{config.fmt}"
            out.write_bytes(data)
            results[config].bytes.append(len(data))
            results[config].ms.append(ms)
            results[config].ratio.append(len(data) / jpeg_bytes)
            pairs.append((config, str(reference), str(out)))
        print(f"encoded {path.name}", file=sys.stderr)
    return results, pairs


def score_all(pairs: list[tuple[Config, str, str]], python: str, jobs: int, results: dict[Config, Measured]) -> None:
    chunks = [pairs[i::jobs] for i in range(jobs)]
    procs = [
        subprocess.Popen([python, "-c", SCORER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in chunks
    ]
    for proc, chunk in zip(procs, chunks, strict=True):
        assert proc.stdin is not None
        proc.stdin.write(json.dumps([[ref, out] for _, ref, out in chunk]))
        proc.stdin.close()
    for proc, chunk in zip(procs, chunks, strict=True):
        assert proc.stdout is not None
        scores = json.loads(proc.stdout.read())
        if proc.wait() != 0:
            sys.exit("the metric process failed")
        for (config, _, _), score in zip(chunk, scores, strict=True):
            results[config].score.append(score)


#: Run by ``--metric-python``: read [[reference, output], ...] on stdin, print their SSIMULACRA2 scores.
SCORER = """
import io, json, sys
from PIL import Image
from ssimulacra2 import compute_ssimulacra2
scores = []
for reference, output in json.load(sys.stdin):
    decoded = io.BytesIO()
    Image.open(output).convert("RGB").save(decoded, "PNG")
    decoded.seek(0)
    scores.append(compute_ssimulacra2(reference, decoded))
print(json.dumps(scores))
"""


def table(results: dict[Config, Measured]) -> str:
    ref = results[REFERENCE]
    rows = [
        "| format, quality, effort | median bytes | bytes / JPEG q85 | SSIMULACRA2 | vs JPEG | encode ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for config, m in results.items():
        delta = m.median("score") - ref.median("score")
        rows.append(
            f"| {config.label} | {m.median('bytes'):,.0f} | {m.median('ratio'):.2f} | {m.median('score'):.1f} "
            f"| {delta:+.1f} | {m.median('ms'):.0f} |"
        )
    return "\n".join(rows)


def within_score(results: dict[Config, Measured], config: Config) -> bool:
    return results[config].median("score") >= results[REFERENCE].median("score") - SCORE_POINTS


def choose(results: dict[Config, Measured]) -> dict[str, Config]:
    """The smallest median bytes within the score target: WebP, then AVIF within the time target
    against that WebP (or, when none is, the fastest within the score target)."""
    webp = min(
        (c for c in results if c.fmt == "webp" and within_score(results, c)), key=lambda c: results[c].median("ratio")
    )
    limit = TIME_TARGET * results[webp].median("ms")
    avifs = [c for c in results if c.fmt == "avif" and within_score(results, c)]
    timely = [c for c in avifs if results[c].median("ms") <= limit]
    avif = (
        min(timely, key=lambda c: results[c].median("ratio"))
        if timely
        else min(avifs, key=lambda c: results[c].median("ms"))
    )
    return {"webp": webp, "avif": avif}


def target_rows(results: dict[Config, Measured], chosen: dict[str, Config]) -> str:
    ref = results[REFERENCE]
    rows = [
        "| format | setting | score vs JPEG (target >= -2) | bytes / JPEG (target) "
        "| encode ms (AVIF target <= 2x WebP) |",
        "|---|---|---:|---:|---:|",
    ]
    for fmt, config in chosen.items():
        m = results[config]
        delta = m.median("score") - ref.median("score")
        ok = delta >= -SCORE_POINTS and m.median("ratio") <= BYTES_TARGET[fmt]
        ms = f"{m.median('ms'):.0f}"
        if fmt == "avif":
            ms += f" = {m.median('ms') / results[chosen['webp']].median('ms'):.2f}x WebP"
            ok = ok and m.median("ms") <= TIME_TARGET * results[chosen["webp"]].median("ms")
        rows.append(
            f"| {fmt} | {config.label} | {delta:+.1f} | {m.median('ratio'):.2f} (<= {BYTES_TARGET[fmt]}) "
            f"| {ms} | {'met' if ok else 'missed'} |"
        )
    rows[0] += " all |"
    rows[1] += "---|"
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, default=Path("../shared/corpus/photos"))
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--ratio", default="1:1")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--metric-python", default=sys.executable)
    for fmt in ("webp", "avif"):
        qualities, efforts = (",".join(str(v) for v in values) for values in GRID[fmt])
        parser.add_argument(
            f"--{fmt}", default=f"{qualities}/{efforts}", help="QUALITIES/EFFORTS (default %(default)s)"
        )
    args = parser.parse_args()
    for fmt in ("webp", "avif"):
        qualities, efforts = getattr(args, fmt).split("/")
        GRID[fmt] = (tuple(map(int, qualities.split(","))), tuple(map(int, efforts.split(","))))
    CONFIGS[:] = [Config(fmt, q, e) for fmt, (qs, es) in GRID.items() for e in es for q in qs]
    folder = args.folder if args.folder.is_absolute() else REPO / args.folder
    with tempfile.TemporaryDirectory(prefix="thumbctl-quality-") as work:
        results, pairs = measure(folder, args.size, args.ratio, args.repeat, Path(work))
        score_all(pairs, args.metric_python, args.jobs, results)
    photos = len(results[REFERENCE].bytes)
    print(f"`{command_line()}`: {photos} photos of {shown_path(folder)}, {args.ratio} smart crop at {args.size} px, ")
    print(f"{code_version()}, nproc {os.cpu_count()}; medians over photos.\n")
    print(table(results))
    defaults = {fmt: Config(fmt, DEFAULT_QUALITY[fmt], DEFAULT_EFFORT[fmt]) for fmt in EFFORT_RANGES}
    if all(config in results for config in defaults.values()):
        print("\nthumbctl's defaults against the targets:\n")
        print(target_rows(results, defaults))
    print("\nWhat this run would choose:\n")
    print(target_rows(results, choose(results)))


if __name__ == "__main__":
    main()
