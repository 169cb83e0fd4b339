"""Who renders a review's Apply: worker processes started apart from the page server's threads.

The server runs requests in threads; a worker pool forked from one of them would inherit locks held
by the others. Each Apply's batch is instead rendered by a ``thumbctl work BATCH --until-idle``
process of its own (fork and exec at once, which is safe from a thread), which claims the batch's
items through the ledger like any worker. A Ctrl-C at the terminal reaches it too: it finishes the
photo in hand and leaves the rest queued, durable, for the next ``thumbctl work``.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class RenderStarter(Protocol):
    """Starts the renders of a batch recorded in the ledger; returns at once."""

    def start(self, batch_id: str) -> None: ...


@dataclass
class WorkProcesses:
    """One ``thumbctl work`` process per batch, over the ledger ``db`` (and ``store``, when set)."""

    db: Path | str
    store: str | None = None
    workers: int = 1
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, batch_id: str) -> None:
        self.children = [child for child in self.children if child.poll() is None]
        command = [sys.executable, "-m", "thumbctl", "--db", str(self.db), "--quiet", "work", batch_id]
        command += ["--until-idle", "--workers", str(self.workers)]
        if self.store:
            command += ["--store", self.store]
        self.children.append(
            subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
