"""Fault injection for tests: make a worker die or pause at a named checkpoint.

``THUMBCTL_FAULT`` holds comma-separated rules:

* ``crash:CHECKPOINT`` — the worker process dies at once (``os._exit``), as a
  kill -9 would leave it; ``crash:CHECKPOINT:0.3`` does so with probability 0.3;
  ``crash:CHECKPOINT:once`` only in the first process to get there (it leaves
  ``$THUMBCTL_FAULT_DIR/fired-CHECKPOINT`` behind).
* ``sigbus:CHECKPOINT`` — the worker process kills itself with SIGBUS, as touching a page of an
  mmapped file the file system cannot back does (SQLite's ``-shm`` made immutable); ``:once`` and a
  probability as for ``crash``.
* ``pause:CHECKPOINT`` — the worker creates ``$THUMBCTL_FAULT_DIR/paused-CHECKPOINT-PID``
  and waits there until ``$THUMBCTL_FAULT_DIR/release`` exists.

Checkpoints: ``worker_start`` (a worker process has started, before it opens the
ledger or checks on its coordinator), ``before_decode``, ``before_encode``,
``before_publish`` (the render verified and its files written and fsynced, the publish
transaction not begun), ``after_link`` (object linked, its name checked but not yet linked),
``name_published`` (the name linked, the commit recording it not yet made; the name is held
against other publishers from its check to that commit) and ``after_commit``, and ``ran_dry``
(a claim came back empty while items in scope are still live, or in a run that does not end
when idle; the worker has given back the heap it kept and waits before it asks again).
``before_encode`` lies between two stages timed by ``--item-timeout`` (a pause
there is not timed); ``before_decode`` is in the decode stage, ``before_publish``,
``after_link`` and ``name_published`` in a render's. ``pause:CHECKPOINT:once``
pauses only the first process to get there.

The one-time layout migration (:mod:`thumbctl.upkeep.legacy_layout`) has its own, per output folder:
``migrate_mid_move`` (the first object placed in the store), ``migrate_after_move`` (every
object placed, the ledger not yet changed), ``migrate_after_ledger`` (object paths rewritten,
thumbnails still links), ``migrate_after_copy`` (the first thumbnail replaced by its own copy)
and ``migrate_after_unlink`` (the first old object removed from OUT/objects).
``submit`` has one: ``before_resume`` (its derived key names a batch whose cancel was requested,
the outputs to reuse are found, the transaction that records the resuming batch not yet begun).
``watch`` has one: ``watch_unsettled`` (a scan of the watched folder found files that changed less
than the settle time ago; nothing is submitted for them).
A folder scan has one: ``scan_folder`` (a sub-folder is about to be listed; its parent's listing
named it).
The ledger has one: ``after_rescue`` (a rescue of expired or dead leases, by a claim, by ``work``'s
supervisor, by ``cancel --wait`` or by reconcile, has read its items' batch cancel flags and settled
them; its transaction is not committed).
This is a testing aid; with the variable unset every checkpoint is a no-op.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CHECKPOINTS = (
    "worker_start",
    "before_decode",
    "before_encode",
    "before_publish",
    "after_link",
    "name_published",
    "after_commit",
    "ran_dry",
    "before_resume",
    "watch_unsettled",
    "after_rescue",
    "scan_folder",
    "migrate_mid_move",
    "migrate_after_move",
    "migrate_after_ledger",
    "migrate_after_copy",
    "migrate_after_unlink",
)


@dataclass(frozen=True)
class FaultRule:
    action: str
    checkpoint: str
    probability: float = 1.0
    once: bool = False


def parse_faults(text: str) -> tuple[FaultRule, ...]:
    rules = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        fields = part.split(":")
        if len(fields) not in (2, 3) or fields[0] not in ("crash", "sigbus", "pause") or fields[1] not in CHECKPOINTS:
            raise ValueError(
                f"bad THUMBCTL_FAULT rule {part!r}: "
                "use crash:CHECKPOINT[:P|:once], sigbus:CHECKPOINT[:P|:once] or pause:CHECKPOINT"
            )
        odds = fields[2] if len(fields) == 3 else "1"
        once = odds == "once"
        rules.append(FaultRule(fields[0], fields[1], 1.0 if once else float(odds), once))
    return tuple(rules)


class Faults:
    """The rules of this process, read once from the environment."""

    def __init__(self, text: str | None = None, folder: str | None = None) -> None:
        self.rules = parse_faults(os.environ.get("THUMBCTL_FAULT", "") if text is None else text)
        self.folder = Path(folder or os.environ.get("THUMBCTL_FAULT_DIR", "."))

    def hit(self, checkpoint: str) -> None:
        for rule in self.rules:
            if rule.checkpoint != checkpoint or random.random() >= rule.probability:
                continue
            if rule.once and not self._first_to_fire(checkpoint):
                continue
            if rule.action == "crash":
                os._exit(137)
            if rule.action == "sigbus":
                os.kill(os.getpid(), signal.SIGBUS)
            self._pause(checkpoint)

    def _first_to_fire(self, checkpoint: str) -> bool:
        try:
            os.close(os.open(self.folder / f"fired-{checkpoint}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def _pause(self, checkpoint: str) -> None:
        marker = self.folder / f"paused-{checkpoint}-{os.getpid()}"
        marker.touch()
        while not (self.folder / "release").exists():
            time.sleep(0.02)
        marker.unlink(missing_ok=True)
