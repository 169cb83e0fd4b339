"""Benchmark: what "the rest" of a whole ``thumbctl submit`` is made of, part by part.

``bench/e2e.py`` splits the whole command into start-up, imaging alone and "the rest". This
script says what the rest is: it runs the real command,
``python -m thumbctl submit FOLDER --out OUT --db LEDGER -w 1 -q`` into a fresh ledger and OUT,
pinned to one CPU core as ``bench/e2e.py`` pins it, with a timer wrapped around each function
named in :data:`WORKER_PARTS` and :data:`SUPERVISOR_PARTS` (installed in the command's own
process before anything runs; the worker, a fork of it, inherits them). Each timer adds up the
calls, the wall time and the CPU time of the thread that made the call. A worker's writer and
heartbeat threads are reported together, as the worker's CPU minus its main thread's.

Nested parts are not subtracted from each other except where the table says so ("decode" is
shown without the source's second read, which it calls). ``--runs`` commands are run; the table
gives the median of each figure over them.

``--encodes N`` also times, in this process, the encode and the verification of the three
default outputs of the first N sources of the folder, progressive (as thumbctl writes them) and
baseline, medians per output: what the progressive output the issue keeps costs.

``--tree DIR`` times the thumbctl of another checkout (an earlier one: parts it does not have are
left out of its table). ``--smoke`` runs once, with no ``--encodes``: it checks the script only.

Run it from the repository root::

    python bench/restparts.py [--corpus ../shared/corpus] [--folder photos] [--runs 3] [--core 0] [--encodes 34]
                              [--tree DIR]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: (label, module, attribute, what it is): timed in the worker process.
WORKER_PARTS = (
    (
        "decode",
        "thumbctl.engine.decoding",
        "decode_claim",
        "imaging: the source decoded at the scales its outputs need",
    ),
    ("crop analysis", "thumbctl.engine.rendering", "Rendering.analyse", "imaging"),
    ("resample and encode", "thumbctl.engine.claimrun", "ClaimRun._rendered", "imaging"),
    (
        "read and digest again",
        "thumbctl.engine.decoding",
        "read_verified_source",
        "the source checked against submit's digest",
    ),
    ("verification", "thumbctl.engine.delivery", "verify_output", "every new output decoded"),
    ("publish", "thumbctl.engine.delivery", "Delivery.publish", "the publish transaction: object, name, succeeded"),
    ("placeholders", "thumbctl.engine.rendering", "Rendering.placeholder", "dominant colour and LQIP"),
    ("checkpoints", "thumbctl.engine.claimrun", "ClaimRun._checkpoint", "fault point, lease and cancel check"),
    ("claims", "thumbctl.ledger.queue", "Queue.claim", "ledger round trip"),
    ("stage marks", "thumbctl.ledger.queue", "Queue.start_stage", "ledger round trip"),
    ("preview", "thumbctl.engine.delivery", "Delivery.write_preview", "the contact sheet's preview of each source"),
)
#: The same for the command's own process.
SUPERVISOR_PARTS = (
    ("worker fork", "thumbctl.engine.runner", "prepare_workers", "the standby worker forked"),
    ("intake", "thumbctl.intake.submission", "prepare_submission", "scan, read, digest and probe every source"),
    ("the batch", "thumbctl.engine.runner", "run_batch", "supervising the worker, then manifest and sheet"),
    ("manifest", "thumbctl.engine.runner", "_manifest_error", "OUT/batches/<batch>.json"),
    ("contact sheet", "thumbctl.engine.runner", "_write_sheet", "OUT/batches/<batch>.html"),
)
#: A part whose time includes another's: shown without it.
CONTAINS = {"decode": "read and digest again"}


# -- the child: the command with its parts timed ------------------------------------------


def timed(totals: dict[str, list[float]], label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            entry = totals.setdefault(label, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - wall
            entry[2] += time.thread_time() - cpu

    return wrapper


def install(parts: tuple[tuple[str, str, str, str], ...], totals: dict[str, list[float]]) -> None:
    """Wrap each part's function; a part the checkout does not have (an earlier one) is left out."""
    for label, module_name, attribute, _ in parts:
        owner: Any = importlib.import_module(module_name)
        *classes, name = attribute.split(".")
        for class_name in classes:
            owner = getattr(owner, class_name, None)
        function = getattr(owner, name, None)
        if callable(function):
            setattr(owner, name, timed(totals, label, function))


def write_record(path: str, process: str, totals: dict[str, list[float]], started: float) -> None:
    own = resource.getrusage(resource.RUSAGE_SELF)
    main = resource.getrusage(resource.RUSAGE_THREAD)
    record = {
        "process": process,
        "parts": totals,
        "cpu": own.ru_utime + own.ru_stime,
        "main_thread_cpu": main.ru_utime + main.ru_stime,
        "wall": time.perf_counter() - started,
    }
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


def child(record_path: str, argv: list[str]) -> None:
    """Run the CLI on ``argv`` with every part timed; each process appends its totals to ``record_path``."""
    started = time.perf_counter()
    supervisor: dict[str, list[float]] = {}
    install(SUPERVISOR_PARTS, supervisor)  # before the CLI is imported: it may bind them by name
    worker: dict[str, list[float]] = {}
    install(WORKER_PARTS, worker)
    import thumbctl.cli
    import thumbctl.engine.worker
    import thumbctl.engine.workerproc

    run_worker = thumbctl.engine.worker.run_worker

    def timed_worker(*args: Any, **kwargs: Any) -> Any:
        begun = time.perf_counter()
        try:
            return run_worker(*args, **kwargs)
        finally:
            write_record(record_path, "worker", worker, begun)

    thumbctl.engine.workerproc.run_worker = timed_worker
    sys.argv = ["thumbctl", *argv]
    try:
        thumbctl.cli.main()
    finally:
        write_record(record_path, "supervisor", supervisor, started)


# -- the parent: runs and the table ------------------------------------------------------


def cli_env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUMBCTL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["NO_COLOR"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    return env


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(folder: Path, tree: Path) -> dict[str, Any]:
    """One timed submit into a fresh ledger and OUT: the records of both processes, wall and CPU."""
    work = Path(tempfile.mkdtemp(prefix="thumbctl-rest-"))
    try:
        records = work / "records.jsonl"
        argv = ["submit", str(folder), "--out", str(work / "out"), "--db", str(work / "ledger.db"), "-w", "1", "-q"]
        cpu, started = children_cpu(), time.perf_counter()
        command = [sys.executable, __file__, "--child", str(records), *argv]
        done = subprocess.run(command, capture_output=True, text=True, env=cli_env(tree), cwd=work)
        wall, cpu = time.perf_counter() - started, children_cpu() - cpu
        if done.returncode != 0:
            sys.exit(f"FAILED (exit {done.returncode}): {' '.join(argv)}\n{done.stderr}")
        found = {r["process"]: r for r in map(json.loads, records.read_text().splitlines())}
        if set(found) != {"worker", "supervisor"}:
            sys.exit(f"FAILED: records of {sorted(found)} only")
        return {"wall": wall, "cpu": cpu, **found}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def part_figure(run: dict[str, Any], process: str, label: str, index: int) -> float:
    """One figure of a part in one run (0 calls, 1 wall, 2 CPU), without the part it contains."""
    parts = run[process]["parts"]
    own = parts.get(label, [0, 0.0, 0.0])[index]
    inner = CONTAINS.get(label)
    return own - parts.get(inner, [0, 0.0, 0.0])[index] if inner else own


def part_rows(runs: list[dict[str, Any]]) -> list[tuple[str, str, int | None, float, float, str]]:
    """(process, part, calls, CPU s, wall s, note), medians over ``runs``; calls None for a row of
    threads, which is no function's calls."""
    rows: list[tuple[str, str, int | None, float, float, str]] = []
    for process, parts in (("worker", WORKER_PARTS), ("supervisor", SUPERVISOR_PARTS)):
        for label, _, _, note in parts:
            calls = int(statistics.median(r[process]["parts"].get(label, [0])[0] for r in runs))
            cpu = statistics.median(part_figure(r, process, label, 2) for r in runs)
            wall = statistics.median(part_figure(r, process, label, 1) for r in runs)
            shown = f"{label} (without the {CONTAINS[label]})" if label in CONTAINS else label
            rows.append((process, shown, calls, cpu, wall, note))
    others = statistics.median(r["worker"]["cpu"] - r["worker"]["main_thread_cpu"] for r in runs)
    rows.append(("worker", "writer and heartbeat threads", None, others, others, "two fsynced files per item"))
    return rows


def parts_table(runs: list[dict[str, Any]]) -> str:
    lines = ["| process | part | calls | CPU s | wall s | what it is |", "|---|---|---:|---:|---:|---|"]
    for process, label, calls, cpu, wall, note in part_rows(runs):
        if calls == 0:
            lines.append(f"| {process} | {label} | | not timed | not timed | {note} (not called by name here) |")
        else:
            lines.append(f"| {process} | {label} | {calls or ''} | {cpu:.3f} | {wall:.3f} | {note} |")
    for process in ("worker", "supervisor"):
        cpu = statistics.median(r[process]["cpu"] for r in runs)
        wall = statistics.median(r[process]["wall"] for r in runs)
        lines.append(f"| {process} | the whole process | | {cpu:.3f} | {wall:.3f} | |")
    cpu = statistics.median(r["cpu"] for r in runs)
    wall = statistics.median(r["wall"] for r in runs)
    lines.append(f"| command | the whole command | | {cpu:.3f} | {wall:.3f} | |")
    return "\n".join(lines)


# -- progressive against baseline output ---------------------------------------------------


def encode_costs(files: list[Path], repeat: int = 3) -> str:
    """Median milliseconds per output of the encode and the verification, progressive and baseline."""
    from imaging import QUALITY, resampled_outputs  # bench/imaging.py: this checkout's thumbctl

    from thumbctl.imaging import encode, verify_output

    images = [image for path in files for image in resampled_outputs(path)]
    lines = ["| JPEG | outputs | encode ms per output | verification ms per output | bytes per output |"]
    lines.append("|---|---:|---:|---:|---:|")
    for progressive in (True, False):
        encode_ms, verify_ms, sizes = [], [], []
        for image in images:
            best_encode = best_verify = float("inf")
            for _ in range(repeat):
                started = time.perf_counter()
                data = encode(image, "jpeg", QUALITY, progressive=progressive)
                best_encode = min(best_encode, time.perf_counter() - started)
                started = time.perf_counter()
                problem = verify_output(io.BytesIO(data), "jpeg", image.width, image.height)
                best_verify = min(best_verify, time.perf_counter() - started)
                if problem:
                    sys.exit(f"FAILED: an output {problem}")
            encode_ms.append(best_encode * 1000)
            verify_ms.append(best_verify * 1000)
            sizes.append(len(data))
        name = "progressive, optimised tables (thumbctl)" if progressive else "baseline, optimised tables"
        lines.append(
            f"| {name} | {len(images)} | {statistics.median(encode_ms):.2f} | {statistics.median(verify_ms):.2f} "
            f"| {statistics.median(sizes):.0f} |"
        )
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    from imaging import add_corpus_option

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_corpus_option(parser)
    parser.add_argument("--folder", default="photos", help="a sub-folder of the corpus (default photos)")
    parser.add_argument("--runs", type=int, default=3, help="timed commands (default 3)")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to (default 0)")
    parser.add_argument("--encodes", type=int, default=0, help="also time encodes of this many sources' outputs")
    parser.add_argument("--tree", type=Path, help="a checkout of thumbctl to time instead of this one")
    parser.add_argument("--smoke", action="store_true", help="one run, no --encodes: checks the script only")
    args = parser.parse_args()
    if args.runs < 1 or args.encodes < 0:
        parser.error("--runs must be at least 1 and --encodes not negative")
    return args


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # the timed command: imports nothing but the checkout's thumbctl
        child(sys.argv[2], sys.argv[3:])
        return
    args = parse_args()
    from imaging import code_version, command_line, pin, shown_path, source_files

    folder = (REPO / args.corpus / args.folder).resolve()
    if not folder.is_dir():
        sys.exit(f"no folder {folder}")
    tree = (args.tree or REPO).resolve()
    if not (tree / "thumbctl" / "__init__.py").is_file():
        sys.exit(f"--tree {tree} is not a checkout of thumbctl")
    pin(args.core)
    runs = [one_run(folder, tree) for _ in range(1 if args.smoke else args.runs)]
    print(f"Command: `{command_line()}`\n")
    print(f"Folder: `{shown_path(folder)}/`, {len(source_files(folder))} sources; pinned to core {args.core}\n")
    code = code_version(tree)
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; code: {code}; medians of {len(runs)} run(s)\n")
    print(parts_table(runs) + "\n")
    if args.encodes and not args.smoke:
        print(encode_costs(source_files(folder)[: args.encodes]) + "\n")


if __name__ == "__main__":
    main()
