"""The ledger package: the one owner of the SQLite database and its SQL."""

from .core import Ledger, iso, parse_iso

__all__ = ["Ledger", "iso", "parse_iso"]
