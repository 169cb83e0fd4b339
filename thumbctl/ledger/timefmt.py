"""Stored times: fixed-width ISO 8601 UTC with microseconds, so they sort as text."""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
#: Where :data:`_FORMAT`'s separators stand in its 27 characters; every other one is a digit.
_SEPARATORS = {4: "-", 7: "-", 10: "T", 13: ":", 16: ":", 19: ".", 26: "Z"}


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(_FORMAT)


def parse_iso(text: str) -> float:
    """The seconds :func:`iso` wrote as ``text``, read as ``strptime`` with its format reads them.
    Text of :func:`iso`'s fixed-width shape is read with ``datetime.fromisoformat``: ``strptime``
    compiles its locale's patterns on first use, a few milliseconds of every command that reads
    a time. Any other text gets ``strptime``'s own verdict."""
    if len(text) == 27 and all(
        text[n] == _SEPARATORS[n] if n in _SEPARATORS else "0" <= text[n] <= "9" for n in range(27)
    ):
        try:
            return datetime.fromisoformat(text[:26]).replace(tzinfo=UTC).timestamp()
        except ValueError:
            pass  # a leap second, say: strptime's reading below
    return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC).timestamp()
