"""Stored times: fixed-width ISO 8601 UTC with microseconds, so they sort as text."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
#: The text :func:`iso` writes: :data:`_FORMAT` at its fixed width, ASCII digits.
_STORED = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z", re.ASCII)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(_FORMAT)


def parse_iso(text: str) -> float:
    """The seconds :func:`iso` wrote as ``text``, read as ``strptime`` with its format reads them.
    Text of :func:`iso`'s fixed-width shape is read field by field: ``strptime`` compiles its
    locale's patterns on first use, a few milliseconds of every command that reads a time. Any
    other text, or fields ``datetime`` refuses, get ``strptime``'s own verdict."""
    stored = _STORED.fullmatch(text)
    if stored is not None:
        try:
            return datetime(*map(int, stored.groups()), tzinfo=UTC).timestamp()
        except ValueError:
            pass  # a 13th month, a 30th of February: strptime's reading below
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
