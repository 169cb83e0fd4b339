"""The option objects of a submission and of a run, kept apart from the code that uses them.

They are read for defaults (``thumbctl.config``, every command's help), so this module imports
nothing heavy: no Pillow, no multiprocessing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .retrypolicy import Backoff
from .settings import Limits, Profile
from .sources import ScanRules

#: ``reconcile`` and ``gc``: temp files whose writer may still be alive are left this long (seconds)
#: before they count as stale.
DEFAULT_GRACE = 3600.0


@dataclass(frozen=True)
class SubmitOptions:
    """Everything a submission needs besides its source."""

    out_dir: Path = Path("thumbs")
    profile: Profile = field(default_factory=Profile)
    limits: Limits = field(default_factory=Limits)
    rules: ScanRules = field(default_factory=ScanRules)
    key: str | None = None
    max_attempts: int = 3
    deadline_seconds: float | None = None


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class RunOptions:
    workers: int = field(default_factory=default_workers)
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 10.0
    backoff: Backoff = field(default_factory=Backoff)
    item_timeout: float = 300.0
