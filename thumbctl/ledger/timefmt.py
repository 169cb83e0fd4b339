"""Stored times: fixed-width ISO 8601 UTC with microseconds, so they sort as text."""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(_FORMAT)


def parse_iso(text: str) -> float:
    """The seconds :func:`iso` wrote as ``text``; ValueError for text of another shape."""
    return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC).timestamp()


def stored_seconds(text: str) -> float | None:
    """:func:`parse_iso` of a time read from the ledger, or None when it does not parse (a damaged row):
    for a figure that can do without it."""
    try:
        return parse_iso(text)
    except ValueError:
        return None


def has_passed(text: str | None, at: str) -> bool:
    """Whether a stored time (a lease's expiry, a retry's ``not_before``) has come at ``at``, both
    compared as text as the ledger's queries do. One that does not parse (a damaged row) counts as
    passed: a time that sorts after every real one (``soon``) would otherwise hold its item for ever."""
    return text is not None and (text <= at or stored_seconds(text) is None)
