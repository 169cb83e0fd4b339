"""Item states in the ledger's SQL: each fragment written once, from :class:`~thumbctl.core.models.ItemState`."""

from __future__ import annotations

from ..core.models import ItemState

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = (f"'{state.value}'" for state in ItemState)


def one_of(*states: ItemState) -> str:
    """``('queued', 'running')``: a SQL list of states, for ``state IN …``."""
    return "(" + ", ".join(f"'{state.value}'" for state in states) + ")"


ALL = one_of(*ItemState)
LIVE = one_of(ItemState.QUEUED, ItemState.RUNNING)
TERMINAL = one_of(ItemState.SUCCEEDED, ItemState.FAILED, ItemState.CANCELLED)


def runnable(alias: str = "i") -> str:
    """The one definition of *runnable*, as in ``stats``, admission and the live views: queued and
    not waiting out a retry backoff at the time bound to the ``?`` it holds (the cancel flag of
    the batch is checked by the caller, which has the batch at hand)."""
    prefix = f"{alias}." if alias else ""
    return f"{prefix}state = {QUEUED} AND ({prefix}not_before IS NULL OR {prefix}not_before <= ?)"
