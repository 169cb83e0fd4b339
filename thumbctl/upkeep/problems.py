"""What reconcile finds, as it is repaired: a finding with its safe repair (or none: report only),
and the finding once the repair ran (``repaired``, or why the repair failed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..core.models import Finding

Fix = Callable[[], bool]


@dataclass(frozen=True)
class Problem:
    """A finding and the safe repair for it (None: report only)."""

    finding: Finding
    fix: Fix | None = None


def repaired(problem: Problem) -> Finding:
    if problem.fix is None:
        return problem.finding
    try:
        return replace(problem.finding, repaired=problem.fix())
    except OSError as exc:  # e.g. OUT is read-only for this user: the finding stays, with why
        detail = f"{problem.finding.detail}; repair failed: {exc.strerror or exc}"
        return replace(problem.finding, detail=detail, repaired=False)
