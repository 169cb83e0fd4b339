"""The ledger package: the one owner of the SQLite database and its SQL."""

from .core import Ledger
from .follow import Follower
from .observe import CancelTimes, RenderFacts, StatsFacts
from .timefmt import iso, parse_iso
from .work import Claim, ClaimedItem, QueueState

__all__ = [
    "CancelTimes",
    "Claim",
    "ClaimedItem",
    "Follower",
    "Ledger",
    "QueueState",
    "RenderFacts",
    "StatsFacts",
    "iso",
    "parse_iso",
]
