"""Benchmark: coordination at scale: dozens of workers on one ledger, each render a 50 ms sleep.

Each timed run accepts one batch of ``--items`` items (5,000: sources of three ratios each, tiny
real JPEGs) into a fresh ledger and runs ``--workers`` worker processes (32) scoped to it until it
is done. The render is a stand-in handed to :func:`thumbctl.engine.worker.run_worker` through its
``renderer`` argument, as :mod:`queue_scale` hands its no-op renderer: it sleeps ``--sleep``
seconds (0.05) and returns a pre-encoded JPEG of the requested geometry. Everything else is the
real worker (claim, source read and hash, decode, temp file and verification, the publish
transaction, the heartbeat), so with the sleep fixed the rate says how well the workers share the
ledger. Cases (``--cases``), interleaved, one round each per ``--repeat``:

* ``pg``: PostgreSQL, all workers on one host;
* ``pg2``: PostgreSQL, two hosts of half the workers each: two process trees, each with its own
  host identity (``THUMBCTL_HOST_ID``, as ``tests/test_multihost.py`` runs several hosts on one
  machine), started together;
* ``sqlite``: SQLite (WAL), all workers on one host.

Each host is a process of its own (``--host``, internal) that imports thumbctl, says it is ready,
then forks its workers when told to start: the clock runs from that start to the last worker's exit.

Figures per case (medians of the rounds): items/s; CPU ms per item of the workers
(``RUSAGE_CHILDREN`` of each host) and of the PostgreSQL server (the postmaster and its children,
from ``/proc``, when it runs on this machine; the benchmark's own sampling session is taken out);
the limit that CPU cost sets on two cores (2000 / CPU ms per item); the ideal, workers / sleep
items/s; the bound min(ideal, CPU limit) and the rate as a share of it. Lock waits: PostgreSQL's
worker sessions are sampled from ``pg_stat_activity`` every 20 ms (the share of samples waiting on a
``Lock`` wait event, by event), and the server logs waits over ``deadlock_timeout`` (1 s,
``log_lock_waits``: counted from its log when the benchmark started the server); SQLite's: the time
workers waited for the write lock (``BEGIN IMMEDIATE``) per item, the write transactions that
waited over 1 ms, and busy errors retried. SQLite's single-writer bound: 1000 / the write lock's
hold time per item (ms). Round trips per item: every statement a worker process sends, by the
queue operation it belongs to (claim, heartbeat, publish, ...), counted in the workers.

PostgreSQL: ``--pg URL`` names a server the benchmark may create and drop databases on; without it
a throw-away cluster is made with ``initdb`` in a temporary folder (a Unix socket there only, so no
port is shared with anything) at the server's default durability (fsync on, synchronous_commit on),
``max_connections`` 200, and removed after. Run from the repository root::

    python bench/coordination.py [--pg URL] [--items 5000] [--workers 32] [--repeat 3] [--cases pg,pg2,sqlite]
    python bench/coordination.py --smoke      # tiny sizes, one round: checks the benchmark works
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import glob
import json
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backends import busy_jiffies, create_database, drop_database, server_cpu, server_pid, server_settings  # noqa: E402
from queue_scale import accept, make_sources, noop_render  # noqa: E402
from resubmit import machine  # noqa: E402

from thumbctl import Ledger  # noqa: E402
from thumbctl.engine.worker import WorkerConfig, run_worker  # noqa: E402
from thumbctl.imaging import Geometry  # noqa: E402

CASES = {"pg": ("PostgreSQL, one host", "postgresql", 1), "pg2": ("PostgreSQL, two hosts", "postgresql", 2)}
CASES["sqlite"] = ("SQLite, one host", "sqlite", 1)
TARGETS = {"postgresql": 0.85, "sqlite": 0.6}
HOST_IDS = ("bench-host-a", "bench-host-b")
SAMPLE_SECONDS = 0.02


# -- the stand-in render -------------------------------------------------------------------------


def sleep_render(seconds: float) -> Callable[[Geometry, str], bytes]:
    def render(geometry: Geometry, fmt: str) -> bytes:
        time.sleep(seconds)
        return noop_render(geometry, fmt)

    return render


# -- counting inside the workers -----------------------------------------------------------------


@dataclass
class Probe:
    """What one worker process sent the ledger, by the queue operation it was part of."""

    ops: dict[str, list[float]] = field(default_factory=dict)  # name -> [calls, statements, seconds]
    lock_wait_s: float = 0.0
    lock_hold_s: float = 0.0
    writes: int = 0
    waited_writes: int = 0
    busy_errors: int = 0
    local: threading.local = field(default_factory=threading.local)

    def op(self) -> str:
        return getattr(self.local, "op", None) or "other"

    def statement(self) -> None:
        self.ops.setdefault(self.op(), [0, 0, 0.0])[1] += 1

    def dump(self, path: Path) -> None:
        fields = ("lock_wait_s", "lock_hold_s", "writes", "waited_writes", "busy_errors")
        path.write_text(json.dumps({"ops": self.ops, **{name: getattr(self, name) for name in fields}}))


PROBE = Probe()


def _counted_op(name: str, method: Callable) -> Callable:
    @functools.wraps(method)
    def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if getattr(PROBE.local, "op", None):  # inside another operation: its statements are that one's
            return method(*args, **kwargs)
        PROBE.local.op = name
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            entry = PROBE.ops.setdefault(name, [0, 0, 0.0])
            entry[0] += 1
            entry[2] += time.perf_counter() - started
            PROBE.local.op = None

    return run


def _counted_statement(method: Callable) -> Callable:
    @functools.wraps(method)
    def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        PROBE.statement()
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ == "LedgerBusy":
                PROBE.busy_errors += 1
            raise

    return run


def _timed_write(write: Callable) -> Callable:
    """SQLite's write transaction: the wait for the write lock (entering) and its hold (to the commit)."""

    @contextlib.contextmanager
    def run(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        started = time.perf_counter()
        held = None
        try:
            with write(self, *args, **kwargs) as now:
                held = time.perf_counter()
                PROBE.lock_wait_s += held - started
                PROBE.writes += 1
                PROBE.waited_writes += held - started > 0.001
                yield now
        finally:
            if held is not None:
                PROBE.lock_hold_s += time.perf_counter() - held

    return run


def _counted_pipeline(pipeline: Callable) -> Callable:
    """psycopg's pipeline: the statements sent in it make one round trip (counted at its end)."""

    @contextlib.contextmanager
    def run(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        PROBE.local.pipelines = getattr(PROBE.local, "pipelines", 0) + 1
        try:
            with pipeline(self, *args, **kwargs) as opened:
                yield opened
        finally:
            PROBE.local.pipelines -= 1
            if not PROBE.local.pipelines:
                PROBE.statement()

    return run


def _counted_trip(method: Callable) -> Callable:
    """A psycopg statement: a round trip of its own unless it is part of a pipeline."""

    @functools.wraps(method)
    def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not getattr(PROBE.local, "pipelines", 0):
            PROBE.statement()
        return method(*args, **kwargs)

    return run


def install_probe() -> None:
    """Count every round trip to the ledger (PostgreSQL: each statement, or each pipeline of them;
    SQLite: each statement) and attribute it to the public queue operation (a method of the queue
    port) it runs in; time SQLite's write lock. Installed in the host process before it forks its
    workers, so only the benchmark's own processes are touched."""
    import psycopg

    from thumbctl.ledger.connection import LedgerConnection
    from thumbctl.ledger.queue import Queue
    from thumbctl.ledger.retry import Call, call_of
    from thumbctl.ledger.sqlite import SqliteBackend

    for name in dir(Queue):
        method = getattr(Queue, name)
        if not name.startswith("_") and callable(method) and call_of(method) is not Call.DIRECT:
            setattr(Queue, name, _counted_op(name, method))
    psycopg.Connection.pipeline = _counted_pipeline(psycopg.Connection.pipeline)
    for name in ("execute", "executemany", "copy"):
        setattr(psycopg.Cursor, name, _counted_trip(getattr(psycopg.Cursor, name)))
    for name in ("execute", "executemany"):
        setattr(LedgerConnection, name, _counted_statement(getattr(LedgerConnection, name)))
    SqliteBackend.write = _timed_write(SqliteBackend.write)


# -- a host: one process tree of workers ----------------------------------------------------------


def worker_process(db: str, batch_id: str, sleep: float, probes: str) -> None:
    config = WorkerConfig(db, batch_id=batch_id, item_timeout=0)
    run_worker(config, threading.Event(), renderer=sleep_render(sleep))
    PROBE.dump(Path(probes) / f"probe-{os.getpid()}.json")


def host_main(db: str, batch_id: str, workers: int, sleep: float, probes: str) -> None:
    """A host's process: ready, then on ``go`` (a line on stdin) fork the workers and wait for them;
    prints its start, end and the workers' CPU seconds as JSON."""
    install_probe()
    print("ready", flush=True)
    sys.stdin.readline()
    context = multiprocessing.get_context("fork")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    procs = [context.Process(target=worker_process, args=(db, batch_id, sleep, probes)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"start": started, "end": ended, "cpu": cpu, "exits": [p.exitcode for p in procs]}), flush=True)


# -- PostgreSQL: the server and its sessions ------------------------------------------------------


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Cluster:
    admin_url: str
    log: Path | None = None


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster of the benchmark's own at default durability, on a Unix socket in a temp
    folder (no TCP port), with room for every worker's two connections."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    bindir = Path(found[-1] if found else shutil.which("initdb") or "initdb").parent
    folder = Path(tempfile.mkdtemp(prefix="thumbctl-bench-coord-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data, ctl, log = folder / "data", str(bindir / "pg_ctl"), folder / "server.log"
    try:
        initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-N"]
        subprocess.run(_as_postgres(initdb), check=True, capture_output=True, cwd=folder)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = ''\nunix_socket_directories = '{folder}'\nport = 5432\n"
                "max_connections = 200\nlog_lock_waits = on\n"
            )
        start = [ctl, "-D", str(data), "-l", str(log), "-w", "start"]
        subprocess.run(_as_postgres(start), check=True, capture_output=True, cwd=folder)
        try:
            yield Cluster(f"postgresql://postgres@/postgres?host={folder}&port=5432", log)
        finally:
            subprocess.run(_as_postgres([ctl, "-D", str(data), "-m", "fast", "-w", "stop"]), capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class SessionSampler:
    """The worker sessions of one database, sampled from ``pg_stat_activity`` every 20 ms: how many
    sessions were seen, and how many of them waited on a lock (by wait event). Its own backend's CPU
    is read at the end, to be taken out of the server's."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sessions = 0
        self.waits: dict[str, int] = {}
        self.own_cpu = 0.0
        self.done = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> SessionSampler:
        self.thread.start()
        self.ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            start = _process_cpu(pid)
            self.ready.set()
            query = (
                "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
            while not self.done.wait(SAMPLE_SECONDS):
                for kind, event in conn.execute(query):
                    self.sessions += 1
                    if kind == "Lock":
                        self.waits[event] = self.waits.get(event, 0) + 1
            self.own_cpu = _process_cpu(pid) - start


def _process_cpu(pid: int) -> float:
    with contextlib.suppress(OSError):
        fields = Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def long_lock_waits(log: Path | None) -> int | None:
    """Lock waits over ``deadlock_timeout`` the server logged so far (None: its log is not ours)."""
    if log is None:
        return None
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace").count("still waiting for")
    return None


# -- one timed run --------------------------------------------------------------------------------


@dataclass
class Run:
    rate: float
    worker_ms: float
    server_ms: float
    cores: float
    lock_samples: dict[str, int]
    sessions: int
    long_waits: int | None
    probe: dict[str, object]


def start_hosts(db: str, batch_id: str, hosts: int, args: argparse.Namespace, probes: Path) -> list:
    each = args.workers // hosts
    procs = []
    for n in range(hosts):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if hosts > 1:
            env["THUMBCTL_HOST_ID"] = HOST_IDS[n]
        command = [sys.executable, __file__, "--host", db, batch_id, str(each), str(args.sleep), str(probes)]
        procs.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
    for proc in procs:
        if proc.stdout.readline().strip() != "ready":
            sys.exit(f"a host process did not start (exit {proc.wait()})")
    return procs


def timed_run(case: str, args: argparse.Namespace, tag: str) -> Run:
    label, kind, hosts = CASES[case]
    work = Path(args.work)
    out = work / f"out-{tag}"
    (out / "objects").mkdir(parents=True)  # the store is OUT's own (the earlier layout), seen by every "host"
    probes = work / f"probes-{tag}"
    probes.mkdir()
    db = str(work / f"{tag}.db") if kind == "sqlite" else create_database(args.admin_url, tag.replace("-", "_"))
    try:
        with Ledger(db) as led:
            batch_id = accept(led, tag, args.items, args.src, out, args.digest)
        procs = start_hosts(db, batch_id, hosts, args, probes)
        sampler = SessionSampler(db) if kind == "postgresql" else contextlib.nullcontext()
        long0 = long_lock_waits(args.log)
        with sampler:
            busy0, server0 = busy_jiffies(), server_cpu(args.postmaster)
            for proc in procs:
                proc.stdin.write("go\n")
                proc.stdin.flush()
            reports = [json.loads(proc.stdout.readline()) for proc in procs]
            for proc in procs:
                proc.wait()
            busy1, server1 = busy_jiffies(), server_cpu(args.postmaster)
        with Ledger(db) as led:
            counts = led.views.batch(batch_id, with_failures=False).counts
    finally:
        if kind == "postgresql":
            drop_database(args.admin_url, db)
    exits = [code for r in reports for code in r["exits"]]
    if counts["succeeded"] != args.items or any(exits):
        sys.exit(f"{tag}: expected {args.items} succeeded, got {counts} (worker exit codes {exits})")
    shutil.rmtree(out)
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    worker_cpu = sum(r["cpu"] for r in reports)
    server_ms = float("nan")
    if kind == "sqlite":
        server_ms = 0.0
    elif args.postmaster is not None:
        server_ms = 1000 * (server1 - server0 - sampler.own_cpu) / args.items
    long1 = long_lock_waits(args.log)
    return Run(
        rate=args.items / seconds,
        worker_ms=1000 * worker_cpu / args.items,
        server_ms=server_ms,
        cores=(busy1[0] - busy0[0]) / (busy1[1] - busy0[1]) * (os.cpu_count() or 1),
        lock_samples=dict(sampler.waits) if kind == "postgresql" else {},
        sessions=sampler.sessions if kind == "postgresql" else 0,
        long_waits=None if long0 is None or long1 is None else long1 - long0,
        probe=merged_probes(probes),
    )


def merged_probes(folder: Path) -> dict[str, object]:
    total: dict[str, object] = {"ops": {}, "lock_wait_s": 0.0, "lock_hold_s": 0.0}
    total.update(writes=0, waited_writes=0, busy_errors=0)
    for path in folder.glob("probe-*.json"):
        probe = json.loads(path.read_text())
        for name, (calls, statements, seconds) in probe.pop("ops").items():
            entry = total["ops"].setdefault(name, [0, 0, 0.0])
            entry[0] += calls
            entry[1] += statements
            entry[2] += seconds
        for name, value in probe.items():
            total[name] += value
    shutil.rmtree(folder)
    return total


# -- the report -----------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    return statistics.median(values)


def rate_table(runs: dict[str, list[Run]], args: argparse.Namespace) -> list[str]:
    lines = [
        "| case | workers | runs | median items/s | CPU ms/item: workers | server | total | CPU limit on 2 cores "
        "items/s | ideal items/s | bound | rate / bound | target | machine cores busy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for case, case_runs in runs.items():
        label, kind, hosts = CASES[case]
        rate = med([r.rate for r in case_runs])
        workers, server = med([r.worker_ms for r in case_runs]), med([r.server_ms for r in case_runs])
        total = workers + server
        limit = 2000 / total if total == total else float("nan")
        ideal = args.workers / args.sleep
        bound = min(ideal, limit) if limit == limit else ideal
        target = TARGETS[kind]
        verdict = "PASS" if rate >= target * bound else "FAIL"
        split = f"{hosts} x {args.workers // hosts}" if hosts > 1 else f"{args.workers}"
        lines.append(
            f"| {label} | {split} | {len(case_runs)} | {rate:.0f} | {workers:.2f} | {server:.2f} | {total:.2f} | "
            f"{limit:.0f} | {ideal:.0f} | {bound:.0f} | {rate / bound:.2f} | >= {target} ({verdict}) | "
            f"{med([r.cores for r in case_runs]):.2f} |"
        )
    return lines


def per_item(run: Run, name: str, index: int, items: int) -> float:
    return run.probe["ops"].get(name, [0, 0, 0.0])[index] / items


def trip_table(runs: dict[str, list[Run]], args: argparse.Namespace) -> list[str]:
    names = sorted({name for rs in runs.values() for r in rs for name in r.probe["ops"]})
    lines = [
        "| round trips per item (statements sent by the workers) | " + " | ".join(CASES[c][0] for c in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    for name in names:
        cells = []
        for case_runs in runs.values():
            trips = med([per_item(r, name, 1, args.items) for r in case_runs])
            calls = med([per_item(r, name, 0, args.items) for r in case_runs])
            cells.append(f"{trips:.2f} ({calls:.2f} calls)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = [med([sum(v[1] for v in r.probe["ops"].values()) / args.items for r in rs]) for rs in runs.values()]
    lines.append("| all | " + " | ".join(f"{t:.2f}" for t in totals) + " |")
    return lines


def wait_lines(runs: dict[str, list[Run]], args: argparse.Namespace) -> list[str]:
    lines = []
    for case, case_runs in runs.items():
        label, kind, _ = CASES[case]
        if kind == "postgresql":
            sessions = sum(r.sessions for r in case_runs)
            events: dict[str, int] = {}
            for r in case_runs:
                for event, count in r.lock_samples.items():
                    events[event] = events.get(event, 0) + count
            waited = sum(events.values())
            detail = ", ".join(f"{event} {100 * n / sessions:.1f}%" for event, n in sorted(events.items())) or "none"
            long = [r.long_waits for r in case_runs]
            logged = "not known (not our server)" if None in long else str(sum(long))
            lines.append(
                f"- {label}: sessions waiting on a lock in {100 * waited / max(sessions, 1):.1f}% of "
                f"{sessions:,} session samples ({detail}); waits over 1 s logged: {logged}"
            )
        else:
            wait = med([1000 * r.probe["lock_wait_s"] / args.items for r in case_runs])
            hold = med([1000 * r.probe["lock_hold_s"] / args.items for r in case_runs])
            waited = med([r.probe["waited_writes"] / max(r.probe["writes"], 1) for r in case_runs])
            writes = med([r.probe["writes"] / args.items for r in case_runs])
            busy = sum(r.probe["busy_errors"] for r in case_runs)
            lines.append(
                f"- {label}: {writes:.2f} write transactions per item, {100 * waited:.0f}% of them waited over 1 ms "
                f"for the write lock; waited {wait:.1f} ms per item in all (summed over workers); lock held "
                f"{hold:.2f} ms per item, so one writer allows {1000 / hold:.0f} items/s; busy errors retried: {busy}"
            )
    return lines


def report(runs: dict[str, list[Run]], args: argparse.Namespace, settings: str) -> None:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"Command: `python {shlex.join(sys.argv)}`")
    print(f"Machine: {machine()}; load at start {args.load}, at end {os.getloadavg()[0]:.2f}")
    print(f"Date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; commit {commit.stdout.strip()}")
    print(f"PostgreSQL: {settings}")
    print(f"Items per run: {args.items}; render: a {1000 * args.sleep:.0f} ms sleep per item; rounds: {args.repeat}\n")
    print("\n".join(rate_table(runs, args)))
    print()
    print("\n".join(trip_table(runs, args)))
    print()
    print("\n".join(wait_lines(runs, args)))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", help="a PostgreSQL server URL to create databases on (default: start a throw-away one)")
    parser.add_argument("--items", type=int, default=5_000, help="items per run (default 5000)")
    parser.add_argument("--workers", type=int, default=32, help="workers per run, over all hosts (default 32)")
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds the stand-in render sleeps (default 0.05)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--cases", default="pg,pg2,sqlite", help="cases, comma-separated (default pg,pg2,sqlite)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round: only checks that it works")
    args = parser.parse_args()
    if args.smoke:
        args.items, args.workers, args.sleep, args.repeat = 30, 2, 0.005, 1
    args.cases = args.cases.split(",")
    if any(case not in CASES for case in args.cases) or args.workers < 2 or args.workers % 2:
        parser.error(f"--cases takes {', '.join(CASES)}; --workers an even number")
    args.load = f"{os.getloadavg()[0]:.2f}"
    return args


def main() -> None:
    if sys.argv[1:2] == ["--host"]:
        db, batch_id, workers, sleep, probes = sys.argv[2:7]
        host_main(db, batch_id, int(workers), float(sleep), probes)
        return
    args = parse_args()
    uses_pg = any(CASES[case][1] == "postgresql" for case in args.cases)
    with contextlib.ExitStack() as stack:
        cluster = Cluster(args.pg) if args.pg or not uses_pg else stack.enter_context(throwaway_cluster())
        args.admin_url, args.log = cluster.admin_url, cluster.log
        args.work = stack.enter_context(tempfile.TemporaryDirectory(prefix="thumbctl-bench-coord-"))
        args.src = Path(args.work) / "src"
        args.digest = make_sources(args.src, -(-args.items // 3))
        settings = server_settings(args.admin_url) if uses_pg else "not used"
        args.postmaster = server_pid(args.admin_url) if uses_pg else None
        runs: dict[str, list[Run]] = {case: [] for case in args.cases}
        for round_ in range(args.repeat):
            for case in args.cases:
                run = timed_run(case, args, f"r{round_}-{case}")
                runs[case].append(run)
                print(f"round {round_} {case}: {run.rate:.0f} items/s, {run.cores:.2f} cores busy", file=sys.stderr)
    report(runs, args, settings)


if __name__ == "__main__":
    main()
