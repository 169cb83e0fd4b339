"""The ledger package: the one owner of the SQLite database and its SQL."""

from .core import Ledger
from .timefmt import iso, parse_iso
from .work import Claim, ClaimedItem, QueueState

__all__ = ["Claim", "ClaimedItem", "Ledger", "QueueState", "iso", "parse_iso"]
