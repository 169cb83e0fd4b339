"""The ledger package: the one owner of the database (SQLite or PostgreSQL) and its SQL.

A :class:`Ledger` is opened on a file or a server URL and exposes one port per role: ``queue``
(:class:`Queue`), ``views`` (:class:`Views`), ``upkeep`` (:class:`Upkeep`) and ``intake``
(:class:`Intake`).

Imports: :mod:`thumbctl.core` and :mod:`thumbctl.config`; never storage, pixels or an interface.
"""

from ..config.ledgerurl import is_server_url, masked
from .core import Ledger
from .follow import Follower
from .intake import Intake
from .queue import Claim, ClaimedItem, Publication, Queue, QueueState
from .timefmt import iso, parse_iso, stored_seconds
from .upkeep import Upkeep
from .views import CancelTimes, RenderFacts, StatsFacts, Views

__all__ = [
    "CancelTimes",
    "Claim",
    "ClaimedItem",
    "Follower",
    "Intake",
    "Ledger",
    "Publication",
    "Queue",
    "QueueState",
    "RenderFacts",
    "StatsFacts",
    "Upkeep",
    "Views",
    "is_server_url",
    "iso",
    "masked",
    "parse_iso",
    "stored_seconds",
]
