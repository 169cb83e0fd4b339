"""The ledger package: the one owner of the database (SQLite or PostgreSQL) and its SQL.

A :class:`Ledger` is opened on a file or a server URL and exposes one port per role: ``queue``
(:class:`QueuePort`), ``views`` (:class:`ViewsPort`), ``upkeep`` (:class:`UpkeepPort`) and ``intake``
(:class:`IntakePort`). Each port is a :class:`typing.Protocol` in the module named for it, beside
its implementation over SQL (:class:`Queue`, :class:`Views`, :class:`Upkeep`, :class:`Intake`).

Imports: :mod:`thumbctl.core` and :mod:`thumbctl.config`; never storage, pixels or an interface.
"""

from ..config.ledgerurl import is_server_url, masked
from .core import Ledger
from .follow import Follower
from .intake import Intake, IntakePort
from .queue import Claim, ClaimedItem, Publication, Queue, QueuePort, QueueState
from .timefmt import iso, parse_iso, stored_seconds
from .upkeep import Upkeep, UpkeepPort
from .views import CancelTimes, RenderFacts, StatsFacts, Views, ViewsPort

__all__ = [
    "CancelTimes",
    "Claim",
    "ClaimedItem",
    "Follower",
    "Intake",
    "IntakePort",
    "Ledger",
    "Publication",
    "Queue",
    "QueuePort",
    "QueueState",
    "RenderFacts",
    "StatsFacts",
    "Upkeep",
    "UpkeepPort",
    "Views",
    "ViewsPort",
    "is_server_url",
    "iso",
    "masked",
    "parse_iso",
    "stored_seconds",
]
