"""Reconcile (findings and safe repairs): what an operator runs from cron.

``reconcile`` compares the ledger with the stores and output targets it recorded (local folders
or ``s3://`` prefixes, reached through their interfaces): stalled leases, cancels whose claims
have stopped, every ``succeeded`` item's object (present, the published size and checksum,
decodes to the exact dimensions) and thumbnail, orphan objects (listed by prefix) and, in local
folders, stale temp files. Each problem is a :class:`~thumbctl.core.models.Finding` of a stable kind;
with ``repair`` the safe repairs are applied through conditional ledger transactions (a live
lease is never touched) and each is logged with its reason. Orphan objects are only reported:
``gc`` (:mod:`thumbctl.upkeep.gc`) removes them.

An object in a local folder is decoded again only when its file changed since it last decoded
without fault; one in a bucket is checked by a HEAD (its size and the checksum kept with it). With
``deep`` every object is read (bounded) and decoded wherever it lives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..config.options import DEFAULT_GRACE
from ..config.s3location import S3Options
from ..core.models import Finding, ReconcileReport
from ..core.proc import owner_is_dead
from ..core.retries import Backoff
from ..ledger import Ledger
from .leftovers import IsDead, Scope
from .objectchecks import ObjectChecks, output_problems
from .problems import Problem, repaired
from .rowchecks import damage_problems, stalled_problems
from .strays import remove_empty_temp_folders, stray_problems


def find_problems(
    ledger: Ledger,
    *,
    grace: float = DEFAULT_GRACE,
    is_dead: IsDead = owner_is_dead,
    store: str | None = None,
    options: S3Options | None = None,
) -> list[Finding]:
    """Every problem reconcile can see now, changing nothing but the cache of sound objects."""
    scope = Scope(store, options)
    checks = ObjectChecks(scope, ledger.upkeep.verified_objects())
    return [p.finding for p in _problems(ledger, grace, is_dead, Backoff().delay_for, checks, scope)]


def reconcile(
    ledger: Ledger,
    *,
    repair: bool = False,
    deep: bool = False,
    grace: float = DEFAULT_GRACE,
    is_dead: IsDead = owner_is_dead,
    delay_for: Callable[[int], float] | None = None,
    store: str | None = None,
    options: S3Options | None = None,
    restore_modified: bool = False,
) -> ReconcileReport:
    """Find problems and, with ``repair``, apply the safe repairs (each audited).

    ``deep`` reads and decodes every object, also those a cheaper check finds sound (a local file
    unchanged since it last decoded, a bucket's object of the right size and checksum): it finds
    damage no write made, e.g. a failing disk. ``store`` is the ledger's store (default: the one it
    recorded); its orphans and temp files are checked too. A name a user changed (other bytes, a
    symlink) is only reported, unless ``restore_modified`` asks for it back.
    """
    scope = Scope(store, options, restore_modified)
    checks = ObjectChecks(scope, {} if deep else ledger.upkeep.verified_objects(), deep=deep)
    problems = list(_problems(ledger, grace, is_dead, delay_for or Backoff().delay_for, checks, scope))
    findings = tuple(repaired(p) for p in problems) if repair else tuple(p.finding for p in problems)
    if repair:
        remove_empty_temp_folders(ledger, scope)
    return ReconcileReport(findings, len(checks.verdicts), checks.decoded, checks.unchanged, checks.matched)


def _problems(
    ledger: Ledger,
    grace: float,
    is_dead: IsDead,
    delay_for: Callable[[int], float],
    checks: ObjectChecks,
    scope: Scope,
) -> Iterator[Problem]:
    now = ledger.clock()
    yield from damage_problems(ledger)
    yield from stalled_problems(ledger, now, is_dead, delay_for)
    yield from output_problems(ledger, checks)
    yield from stray_problems(ledger, scope, now, grace, is_dead)
