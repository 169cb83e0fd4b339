"""Stored times: fixed-width ISO 8601 UTC with microseconds, so they sort as text."""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(_FORMAT)


def parse_iso(text: str) -> float:
    return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC).timestamp()
