"""The ledger package: the one owner of the database (SQLite or PostgreSQL) and its SQL."""

from .backend import is_server_url, masked
from .core import Ledger
from .follow import Follower
from .observe import CancelTimes, RenderFacts, StatsFacts
from .timefmt import iso, parse_iso
from .work import Claim, ClaimedItem, Publication, QueueState

__all__ = [
    "CancelTimes",
    "Claim",
    "ClaimedItem",
    "Follower",
    "Ledger",
    "Publication",
    "QueueState",
    "RenderFacts",
    "StatsFacts",
    "is_server_url",
    "iso",
    "masked",
    "parse_iso",
]
