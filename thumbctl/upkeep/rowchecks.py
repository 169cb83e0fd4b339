"""Findings in the ledger's own rows: stored values that do not parse (``damaged_row``), running
items whose lease expired or whose owner is gone, and queued items of a cancelled batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from ..core.models import Finding, StalledItem
from ..ledger import Ledger, iso
from ..ledger.damage import BATCH_WAY_OUT, ITEM_TIMES, Damage
from ..ledger.upkeep import stall_reason
from .leftovers import IsDead
from .problems import Problem


def stalled_problems(
    ledger: Ledger, now: float, is_dead: IsDead, delay_for: Callable[[int], float]
) -> Iterator[Problem]:
    """The stalled items' problems, each repaired by a rescue that never touches a live lease."""
    for item in ledger.upkeep.stalled_candidates():
        problem = _stalled_problem(ledger, item, iso(now), is_dead, delay_for)
        if problem is not None:
            yield problem


def damage_problems(ledger: Ledger) -> Iterator[Problem]:
    """A stored value that does not parse (``damaged_row``): the rest of the ledger is checked as
    usual. An item's damaged result is repaired by failing the item ``ledger_corrupt`` (``retry``
    renders it again); a damaged ratio or batch document is reported only."""
    for damage in ledger.upkeep.damaged_rows():
        finding = Finding("damaged_row", damage.batch_id, damage.item_id, _damage_detail(damage))
        if damage.table == "items" and damage.column == "result":
            yield Problem(finding, partial(_fail_damaged_item, ledger, int(damage.row)))
        else:
            yield Problem(finding)


def _damage_detail(damage: Damage) -> str:
    if damage.table == "items" and damage.column == "result":
        return f"{damage.describe()}; --repair records the item failed (ledger_corrupt): `thumbctl retry` renders it"
    if damage.table == "items" and damage.column in ITEM_TIMES:
        return f"{damage.describe()}; it counts as passed: `thumbctl work` takes the item up again"
    if damage.table == "items":
        return f"{damage.describe()}; the item cannot be rendered again: restore a backup of the ledger"
    return f"{damage.describe()}; {BATCH_WAY_OUT}"


def _fail_damaged_item(ledger: Ledger, row: int) -> bool:
    return ledger.upkeep.fail_damaged_item(row) is not None


def _stalled_problem(
    ledger: Ledger, item: StalledItem, at: str, is_dead: IsDead, delay_for: Callable[[int], float]
) -> Problem | None:
    """A running item whose lease expired or whose owner is gone; a queued item of a
    cancelled batch. A lease that is not expired and whose owner lives is no problem."""
    why = stall_reason(item.state, item.lease_owner, item.lease_expires_at, item.cancel_requested_at, at, is_dead)
    if why is None:
        return None
    if item.cancel_requested_at is not None:
        kind = "cancel_not_finalized"
        why = f"the batch's cancel was requested at {item.cancel_requested_at} and {why}"
    else:
        kind = "dead_worker_lease" if item.lease_owner and is_dead(item.lease_owner) else "expired_lease"
    finding = Finding(kind, item.batch_id, item.item_id, why, ratio=item.ratio)

    def fix() -> bool:
        return ledger.upkeep.rescue_stalled(item.row, item.lease_token, is_dead, delay_for) is not None

    return Problem(finding, fix)
