"""Benchmark: the ledger on SQLite and on PostgreSQL, side by side in one run.

Cases, each on both backends:

* **Throughput**: claim -> publish -> commit with 1, 2 and 4 worker processes and the no-op render
  of :mod:`queue_scale` (each worker is handed, through :func:`thumbctl.engine.worker.run_worker`'s
  ``renderer`` argument, a pre-encoded valid JPEG of the requested geometry; no command or
  setting reaches it). Everything else is the real worker: claim, source read and hash, decode,
  temp file and its verification, the publish transaction, the heartbeat. Each timed run accepts
  one batch of ``--items`` items and runs the workers scoped to it until it is done, on a ledger
  whose queue holds ``--small`` (10,000) or ``--large`` (1,000,000) items: the per-item ledger cost
  must not grow with the queue.
* **Events lock** (PostgreSQL only): the same runs with the ledger-wide advisory lock that numbers
  events in commit order (``PostgresBackend.before_events``) skipped, by replacing that method in
  the forked worker processes from here; the difference is the lock's cost.
* **Submit**: ``Ledger.accept_batch`` of a ``--submit``-item (100,000) batch, the ledger's whole part
  of ``submit`` (one durable transaction: the items, their creation events, the batch view after).
* **Status**: ``python -m thumbctl status BATCH --json`` as a subprocess, on the batch of
  ``--large - --items`` items that fills the large ledger, and on the small ledger's, with the
  start-up floor (``thumbctl --version``) beside it.

Runs are interleaved (every case once per round, ``--repeat`` rounds); figures are medians. CPU
per item: the workers' own (``RUSAGE_CHILDREN``) and the PostgreSQL server's (the postmaster and
its children from ``/proc``, when the server runs on this machine); their sum bounds the rate two
cores can reach ("2-core bound"). "Machine cores busy" is every core's busy time over the run from
``/proc/stat``: the workers, the server and anything else running on the machine.

PostgreSQL: ``--pg URL`` names a server the benchmark may create and drop databases on; without
it, a throw-away cluster is created with ``initdb`` in a temporary folder and started on port
``--pg-port`` (54369) with the server's default settings (fsync on, synchronous_commit on), then
stopped and removed. Run from the repository root::

    python bench/backends.py [--pg URL] [--small 10000] [--large 1000000] [--items 2000] [--repeat 3]
    python bench/backends.py --smoke --pg URL     # tiny sizes, one round: checks the benchmark works
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import multiprocessing
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from queue_scale import accept, items, make_sources, noop_render  # noqa: E402
from resubmit import machine  # noqa: E402

from thumbctl import Ledger, Limits  # noqa: E402
from thumbctl.core.models import NewBatch  # noqa: E402
from thumbctl.engine.worker import WorkerConfig, run_worker  # noqa: E402

SCALING_TARGET = 1.6
FLAT_TARGET = 1.25
SETTINGS = ("server_version", "fsync", "synchronous_commit", "wal_level", "shared_buffers", "max_wal_size")


@dataclass(frozen=True)
class Variant:
    """A backend as measured: ``events_lock`` False skips PostgreSQL's commit-order lock."""

    label: str
    kind: str
    events_lock: bool = True


VARIANTS = (
    Variant("SQLite", "sqlite"),
    Variant("PostgreSQL", "postgresql"),
    Variant("PostgreSQL, events lock skipped", "postgresql", events_lock=False),
)


@dataclass
class Samples:
    rates: list[float] = field(default_factory=list)
    worker_cpu_ms: list[float] = field(default_factory=list)
    server_cpu_ms: list[float] = field(default_factory=list)
    machine_cores: list[float] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(getattr(self, name))


# -- PostgreSQL ----------------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def create_database(admin_url: str, tag: str) -> str:
    import psycopg

    name = f"thumbctl_bench_{tag}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path.lstrip("/")}" WITH (FORCE)')


def server_settings(admin_url: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        return ", ".join(f"{name} {conn.execute(f'SHOW {name}').fetchone()[0]}" for name in SETTINGS)


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def own_cluster(port: int) -> Iterator[str]:
    """A throw-away PostgreSQL cluster with default settings, on a Unix socket in a temp folder."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or "initdb"]
    bindir = Path(found[-1]).parent
    folder = Path(tempfile.mkdtemp(prefix="thumbctl-bench-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data, ctl = folder / "data", str(bindir / "pg_ctl")
    try:
        subprocess.run(
            _as_postgres([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
            check=True,
            capture_output=True,
        )
        options = f"-k {folder} -p {port} -c listen_addresses=''"
        subprocess.run(
            _as_postgres([ctl, "-D", str(data), "-l", str(folder / "log"), "-o", options, "-w", "start"]),
            check=True,
            capture_output=True,
        )
        try:
            yield f"postgresql://postgres@/postgres?host={folder}&port={port}"
        finally:
            subprocess.run(_as_postgres([ctl, "-D", str(data), "-m", "fast", "-w", "stop"]), capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- ledgers -------------------------------------------------------------------------------------


class Ledgers:
    """The ledgers of the run: one per backend and queue size; PostgreSQL ones are databases."""

    def __init__(self, work: Path, admin_url: str) -> None:
        self.work = work
        self.admin_url = admin_url
        self.databases: list[str] = []

    def new(self, kind: str, tag: str) -> str:
        if kind == "sqlite":
            folder = self.work / f"{kind}-{tag}"
            folder.mkdir()
            return str(folder / "ledger.db")
        url = create_database(self.admin_url, tag)
        self.databases.append(url)
        return url

    def drop_all(self) -> None:
        for url in self.databases:
            with contextlib.suppress(Exception):
                drop_database(self.admin_url, url)


def build_queue(db: str, queued: int, root: Path, out: Path, digest: str) -> str:
    """Accept one batch of ``queued`` items whose sources are never read (the timed workers claim
    only their own run's batch); returns its id. Run in a spawned process: its memory stays there."""
    with Ledger(db) as led:
        return accept(led, "fill", queued, root / "unread", out, digest)


def in_child(function, *args):  # noqa: ANN001, ANN002, ANN202 - a spawned helper process
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


# -- throughput ----------------------------------------------------------------------------------


def _no_events_lock(self: object) -> None:
    """Stands in for ``PostgresBackend.before_events`` in the benchmark's own worker processes."""


def worker_process(db: str, batch_id: str, events_lock: bool) -> None:
    if not events_lock:
        from thumbctl.ledger.postgres import PostgresBackend

        PostgresBackend.before_events = _no_events_lock  # type: ignore[method-assign]
    run_worker(WorkerConfig(db, batch_id=batch_id, item_timeout=0), threading.Event(), renderer=noop_render)


def server_pid(admin_url: str) -> int | None:
    """The postmaster's pid when the server runs on this machine and its data folder is readable."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        data = conn.execute("SHOW data_directory").fetchone()[0]
    with contextlib.suppress(OSError, ValueError):
        return int((Path(data) / "postmaster.pid").read_text().split()[0])
    return None


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds of the server so far: the postmaster, its live children (the connections'
    backends, the WAL writer, ...) and the children it has reaped."""
    if postmaster is None:
        return float("nan")
    total = 0.0
    for name in os.listdir("/proc"):  # not Path.glob: its stat of a process exiting meanwhile raises
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = Path("/proc", name, "stat").read_text().rsplit(")", 1)[1].split()
            pid, ppid = int(name), int(fields[1])
            if pid == postmaster:
                total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
            elif ppid == postmaster:
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def busy_jiffies() -> tuple[int, int]:
    """Busy and total jiffies of all cores so far (``/proc/stat``)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


class WaitSampler:
    """What the workers' server sessions are doing, sampled from ``pg_stat_activity`` every 50 ms
    while a PostgreSQL run goes on: running a statement (on CPU, or waiting on a lock or on I/O,
    by its wait event), or idle (waiting for the worker: in a transaction or between them)."""

    def __init__(self, url: str, counts: dict[str, int]) -> None:
        self.url = url
        self.counts = counts
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> WaitSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.done.wait(0.05):
                for state, kind, event in conn.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                ):
                    on_cpu = "active: on CPU" if kind is None else f"{kind}: {event}"
                    label = (state or "no state") if state != "active" else on_cpu
                    self.counts[label] = self.counts.get(label, 0) + 1


def timed_run(db: str, variant: Variant, workers: int, args: argparse.Namespace, tag: str, src: Path, digest: str):
    out = Path(args.work) / f"out-{tag}"
    # The run's store is OUT's own (the earlier layout); a worker of a server ledger checks that its
    # host sees it, so it exists before the first claim, as submit's binding of a store makes sure.
    (out / "objects").mkdir(parents=True)
    with Ledger(db) as led:
        batch_id = accept(led, tag, args.items, src, out, digest)
    context = multiprocessing.get_context("fork")
    before, busy0, server0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_jiffies(), server_cpu(args.postmaster)
    started = time.perf_counter()
    procs = [context.Process(target=worker_process, args=(db, batch_id, variant.events_lock)) for _ in range(workers)]
    waits = args.waits.setdefault((variant.label, workers), {})
    with WaitSampler(db, waits) if variant.kind == "postgresql" else contextlib.nullcontext():
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
    seconds = time.perf_counter() - started
    after, busy1, server1 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_jiffies(), server_cpu(args.postmaster)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cores = (busy1[0] - busy0[0]) / (busy1[1] - busy0[1]) * (os.cpu_count() or 1)
    with Ledger(db) as led:
        counts = led.views.batch(batch_id, with_failures=False).counts
    if counts["succeeded"] != args.items or any(p.exitcode for p in procs):
        sys.exit(f"{tag}: expected {args.items} succeeded, got {counts} (exit codes {[p.exitcode for p in procs]})")
    shutil.rmtree(out)
    server = 1000 * (server1 - server0) / args.items if variant.kind == "postgresql" else 0.0
    return args.items / seconds, 1000 * cpu / args.items, server, cores


# -- submit and status ---------------------------------------------------------------------------


def timed_submit(db: str, count: int, tag: str, root: Path, digest: str) -> float:
    """Seconds of ``accept_batch`` of ``count`` items (building the request is not timed)."""
    out = root.parent / f"out-{tag}"
    request = NewBatch(tag, f"digest-{tag}", str(root), str(out), {"size": 32}, items(count, tag, root, out, digest))
    with Ledger(db) as led:
        started = time.perf_counter()
        led.intake.accept_batch(request, Limits(max_items=count, max_runnable=100_000_000))
        return time.perf_counter() - started


def timed_command(argv: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUMBCTL_")}
    env.update(PYTHONPATH=str(REPO), NO_COLOR="1")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "thumbctl", *argv], capture_output=True, env=env, cwd=cwd)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"thumbctl {shlex.join(argv)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed


# -- the run -------------------------------------------------------------------------------------


@dataclass
class Results:
    throughput: dict[tuple[str, int, int], Samples] = field(default_factory=dict)
    submit: dict[str, list[float]] = field(default_factory=dict)
    status: dict[tuple[str, str], list[float]] = field(default_factory=dict)


def run_all(args: argparse.Namespace, admin_url: str) -> Results:
    work = Path(args.work)
    src = work / "src"
    digest = make_sources(src, -(-args.items // 3))
    ledgers = Ledgers(work, admin_url)
    results = Results()
    try:
        queues: dict[tuple[str, int], tuple[str, str]] = {}
        for kind in ("sqlite", "postgresql"):
            for queued in (args.small, args.large):
                db = ledgers.new(kind, f"q{queued}")
                started = time.perf_counter()
                fill = in_child(build_queue, db, queued - args.items, src, work / "out-fill", digest)
                queues[kind, queued] = db, fill
                print(f"built {kind} {queued:,} in {time.perf_counter() - started:.0f}s", file=sys.stderr)
        submit_dbs = {kind: ledgers.new(kind, "submit") for kind in ("sqlite", "postgresql")}
        for round_ in range(args.repeat):
            for workers in args.workers:
                for variant in VARIANTS:
                    for queued in (args.small, args.large):
                        db, _ = queues[variant.kind, queued]
                        tag = f"r{round_}-w{workers}-{variant.kind}-{variant.events_lock:d}-{queued}"
                        rate, cpu, server, cores = timed_run(db, variant, workers, args, tag, src, digest)
                        samples = results.throughput.setdefault((variant.label, workers, queued), Samples())
                        samples.rates.append(rate)
                        samples.worker_cpu_ms.append(cpu)
                        samples.server_cpu_ms.append(server)
                        samples.machine_cores.append(cores)
                        print(f"{tag}: {rate:.0f} items/s, {cores:.2f} cores busy", file=sys.stderr)
            for kind, db in submit_dbs.items():
                seconds = in_child(timed_submit, db, args.submit, f"submit-{round_}", src, digest)
                results.submit.setdefault(kind, []).append(seconds)
                print(f"submit {kind}: {seconds:.2f}s", file=sys.stderr)
            results.status.setdefault(("floor", "--version"), []).append(timed_command(["--version"], work))
            for (kind, queued), (db, fill) in queues.items():
                seconds = timed_command(["status", fill, "--json", "--db", db], work)
                results.status.setdefault((kind, f"{queued - args.items:,}"), []).append(seconds)
    finally:
        ledgers.drop_all()
    return results


# -- the report ----------------------------------------------------------------------------------


def throughput_table(results: Results, args: argparse.Namespace) -> list[str]:
    lines = [
        "| backend | workers | queued | median items/s | x own 1-worker | CPU ms/item: workers | server | "
        "2-core bound items/s | machine cores busy | rate at small / at large queue |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in VARIANTS:
        for workers in args.workers:
            for queued in (args.small, args.large):
                samples = results.throughput[variant.label, workers, queued]
                one = results.throughput[variant.label, args.workers[0], queued].median("rates")
                flat = results.throughput[variant.label, workers, args.small].median("rates") / samples.median("rates")
                cpu = samples.median("worker_cpu_ms") + samples.median("server_cpu_ms")
                lines.append(
                    f"| {variant.label} | {workers} | {queued:,} | {samples.median('rates'):.0f} | "
                    f"{samples.median('rates') / one:.2f}x | {samples.median('worker_cpu_ms'):.2f} | "
                    f"{samples.median('server_cpu_ms'):.2f} | {2000 / cpu:.0f} | "
                    f"{samples.median('machine_cores'):.2f} | {flat:.2f}x |"
                )
    return lines


def verdicts(results: Results, args: argparse.Namespace) -> list[str]:
    rate = lambda label, workers, queued: results.throughput[label, workers, queued].median("rates")  # noqa: E731
    lines = []
    if 2 in args.workers and args.workers[0] == 1:
        for variant in VARIANTS:
            for queued in (args.small, args.large):
                ratio = rate(variant.label, 2, queued) / rate(variant.label, 1, queued)
                verdict = "PASS" if ratio >= SCALING_TARGET else "FAIL"
                target = f" (target >= {SCALING_TARGET}x: {verdict})" if variant.label == "PostgreSQL" else ""
                lines.append(f"- {variant.label}, {queued:,} queued: 2 workers / 1 = {ratio:.2f}x{target}")
    for variant in VARIANTS[:2]:
        for workers in args.workers:
            flat = rate(variant.label, workers, args.small) / rate(variant.label, workers, args.large)
            verdict = "PASS" if flat <= FLAT_TARGET else "FAIL"
            lines.append(
                f"- {variant.label}, {workers} worker(s): rate at {args.small:,} / at {args.large:,} queued = "
                f"{flat:.2f}x (target <= {FLAT_TARGET}x: {verdict})"
            )
    for workers in args.workers:
        for queued in (args.small, args.large):
            locked, free = rate("PostgreSQL", workers, queued), rate(VARIANTS[2].label, workers, queued)
            lines.append(
                f"- events lock, {workers} worker(s), {queued:,} queued: {locked:.0f} items/s with it, {free:.0f} "
                f"without: {1000 / locked - 1000 / free:+.3f} ms/item ({free / locked - 1:+.1%} rate without)"
            )
    return lines


def wait_table(waits: dict[tuple[str, int], dict[str, int]]) -> list[str]:
    """Shares of the workers' server-session samples by what the session was doing."""
    cases = [(case, counts) for case, counts in waits.items() if counts]
    labels = sorted({label for _, counts in cases for label in counts})
    lines = [
        "| PostgreSQL sessions: share of samples | " + " | ".join(f"{c[0]}, {c[1]} w" for c, _ in cases) + " |",
        "|---|" + "---:|" * len(cases),
    ]
    for label in labels:
        shares = [f"{100 * counts.get(label, 0) / sum(counts.values()):.0f}%" for _, counts in cases]
        lines.append(f"| {label} | " + " | ".join(shares) + " |")
    return lines


def report(results: Results, args: argparse.Namespace, settings: str) -> None:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    load = os.getloadavg()
    print(f"Command: `python {shlex.join(sys.argv)}`")
    print(f"Machine: {machine()}; load at start {args.load}, at end {load[0]:.2f}")
    print(f"Date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; commit {commit.stdout.strip()}")
    print(f"PostgreSQL: {settings}")
    print(f"Items per timed run: {args.items} (no-op render); rounds: {args.repeat}\n")
    print("\n".join(throughput_table(results, args)))
    print()
    print("| case | backend | median s |")
    print("|---|---|---:|")
    for kind, times in results.submit.items():
        print(f"| accept_batch of {args.submit:,} items | {kind} | {statistics.median(times):.2f} |")
    for (kind, size), times in results.status.items():
        label = "`thumbctl --version` (start-up floor)" if kind == "floor" else f"`status BATCH --json`, {size} items"
        print(f"| {label} | {'' if kind == 'floor' else kind} | {statistics.median(times):.3f} |")
    print()
    print("\n".join(verdicts(results, args)))
    print()
    print("\n".join(wait_table(args.waits)))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", help="a PostgreSQL server URL to create databases on (default: start a throw-away one)")
    parser.add_argument("--pg-port", type=int, default=54369, help="port of the throw-away cluster (default 54369)")
    parser.add_argument("--small", type=int, default=10_000, help="queued items of the short queue (default 10000)")
    parser.add_argument("--large", type=int, default=1_000_000, help="queued items of the long queue (default 1000000)")
    parser.add_argument("--items", type=int, default=2_000, help="items per timed run (default 2000)")
    parser.add_argument("--submit", type=int, default=100_000, help="items of the submitted batch (default 100000)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated (default 1,2,4)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round: only checks that it works")
    args = parser.parse_args()
    if args.smoke:
        args.small, args.large, args.items, args.submit, args.repeat, args.workers = 120, 240, 10, 300, 1, "1,2"
    args.workers = [int(w) for w in args.workers.split(",")]
    if not 0 < args.items < args.small <= args.large:
        parser.error("need 0 < --items < --small <= --large")
    args.load = f"{os.getloadavg()[0]:.2f}"
    return args


def main() -> None:
    args = parse_args()
    with contextlib.ExitStack() as stack:
        admin_url = args.pg or stack.enter_context(own_cluster(args.pg_port))
        args.work = stack.enter_context(tempfile.TemporaryDirectory(prefix="thumbctl-bench-backends-"))
        settings = server_settings(admin_url)
        args.postmaster = server_pid(admin_url)
        args.waits = {}
        results = run_all(args, admin_url)
    report(results, args, settings)


if __name__ == "__main__":
    main()
