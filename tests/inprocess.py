"""Rendering in the test's own process, for tests about what a batch leaves (names, files, the
ledger's records), not about how a run of processes behaves.

A ``submit --detach`` records the batch as a foreground ``submit`` does; :func:`render_here` then
renders it with one worker in this process (the worker of :mod:`thumbctl.engine.worker`, as a
pool's process runs it) and writes the batch's manifest and OUT's site manifest as the foreground
run does at its end.
The contact sheet is not written (a foreground run's ``--no-sheet``). Runs of real processes, their
signals, crashes and exit codes stay with :class:`harness.Thumbctl`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from thumbctl import Ledger
from thumbctl.core.faults import Faults
from thumbctl.core.retries import Backoff
from thumbctl.engine.runner import site_manifests, write_batch_manifest
from thumbctl.engine.worker import WorkerConfig, run_worker
from thumbctl.review.markup import manifest_present

from harness import Thumbctl


def render_here(db: str | Path, batch_id: str) -> None:
    """Render what is queued of batch ``batch_id`` in ledger ``db`` in this process until nothing
    is left; then write its manifest when this rendered any of it or it is missing (as a
    foreground run does)."""
    config = WorkerConfig(str(db), batch_id=batch_id, backoff=Backoff(base=0.001, cap=0.001), poll_seconds=0.01)
    processed = run_worker(config, threading.Event(), Faults(""))
    with Ledger(db) as ledger:
        batch = ledger.views.batch(batch_id)
        assert batch.is_terminal, batch
        if processed or not manifest_present(batch):
            write_batch_manifest(ledger, batch)
        if processed:
            site_manifests(ledger, [batch.out_dir])


def submit_here(cli: Thumbctl, *args: object, states: tuple[str, ...] = ("succeeded",)) -> dict:
    """``cli.json("submit", *args)`` in this process: ``submit ARGS --detach --json`` (exit 0), the
    batch rendered by :func:`render_here`, then its finished document (``status BATCH --json``,
    with the submit's ``replayed``), whose state must be one of ``states`` (``succeeded``: what a
    foreground submit's exit 0 says). A foreground document's ``sheet``, ``max_failures`` and
    ``scan_errors`` are not in it."""
    recorded = cli.invoke("submit", *args, "--detach", "--json")
    assert recorded.returncode == 0, (args, recorded.returncode, recorded.stderr)
    submitted = json.loads(recorded.stdout)
    render_here(cli.db, submitted["batch_id"])
    shown = cli.invoke("status", submitted["batch_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    finished = {**json.loads(shown.stdout), "replayed": submitted["replayed"]}
    assert finished["state"] in states, finished
    return finished


def json_here(cli: Thumbctl, *args: object, codes: tuple[int, ...] = (0,)) -> dict:
    """``cli.json(*args)`` run in this process (:meth:`harness.Thumbctl.invoke`), for a command
    that starts no worker: its ``--json`` document, its exit code one of ``codes``."""
    done = cli.invoke(*args, "--json")
    assert done.returncode in codes, (args, done.returncode, done.stderr)
    return json.loads(done.stdout)
