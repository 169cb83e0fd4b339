"""Crop fixes as data: a fix to remember or forget (:class:`FocusChange`), a remembered one
(:class:`FocusPoint`), and what the ledger keeps of a source root's fix file
(``thumbctl-focus.json``, :class:`FixFileState`) between submits.

``applied``: the (content digest, ratio) fixes the file gave the last submits of the root, so an
entry a seller removes from the file clears its fix (a fix only the ledger holds, set where the
file could not be written, is not the file's to clear). ``stale``: photos whose file entry is for
content they no longer hold, so the fix was not applied (by the digest of the new content), for the
sheet to say so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .redact import shown_source


@dataclass(frozen=True)
class FocusChange:
    """A crop fix to remember for (source content, ratio), or (``focus`` None) to forget."""

    source_digest: str
    ratio: str
    focus: tuple[float, float] | None


@dataclass(frozen=True)
class FocusPoint:
    """A remembered crop fix: every later render of the content at the ratio is centred on ``focus``
    (None: the fix was cleared at ``set_at``); ``batch_id`` is the batch whose manifest set or
    cleared it (None: ``thumbctl focus``)."""

    source_digest: str
    ratio: str
    focus: tuple[float, float] | None
    set_at: str | None
    batch_id: str | None = None

    def to_json(self) -> dict[str, object]:
        focus = list(self.focus) if self.focus else None
        return {"ratio": self.ratio, "focus": focus, "set_at": self.set_at, "batch_id": self.batch_id}


#: The fix file's name at a source root.
FIX_FILE = "thumbctl-focus.json"


@dataclass(frozen=True)
class StaleFix:
    """A fix the file holds for a photo's previous content, not applied to the new content."""

    path: str
    ratios: tuple[str, ...]
    #: Why: ``picture_changed`` (another picture, by dimensions or perceptual hash) or ``not_compared``
    #: (no hash to compare: a URL source, or an entry written without one).
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "ratios": list(self.ratios), "reason": self.reason}


@dataclass(frozen=True)
class FixFileUpdate:
    """What a submit or ``focus`` learnt of a root's fix file for some photos (``digests``): the
    fixes it gave them (``applied``) and the fixes it holds for their previous content (``stale``).
    The ledger applies it to its record in one transaction, so two commands never lose each other's."""

    digests: frozenset[str]
    applied: frozenset[tuple[str, str]] = frozenset()
    stale: dict[str, StaleFix] = field(default_factory=dict)

    def applied_to(self, state: FixFileState) -> FixFileState:
        """``state`` with what it said of these photos replaced by this."""
        applied = frozenset({p for p in state.applied if p[0] not in self.digests} | self.applied)
        stale = {d: note for d, note in state.stale.items() if d not in self.digests} | self.stale
        return FixFileState(applied, stale)


@dataclass(frozen=True)
class FixFileState:
    """The ledger's record of a root's fix file (see the module notes)."""

    applied: frozenset[tuple[str, str]] = frozenset()
    stale: dict[str, StaleFix] = field(default_factory=dict)

    def to_text(self) -> str:
        applied = sorted(f"{digest} {ratio}" for digest, ratio in self.applied)
        stale = {digest: note.to_json() for digest, note in sorted(self.stale.items())}
        return json.dumps({"applied": applied, "stale": stale}, sort_keys=True)

    @classmethod
    def from_text(cls, text: str | None) -> FixFileState:
        """The state recorded as ``text``; an empty state for none, or for a value that does not read
        (it only remembers what to clear and what to note, never a fix itself)."""
        try:
            doc = json.loads(text) if text else {}
            applied = frozenset(tuple(pair.split(" ", 1)) for pair in doc.get("applied", []))
            stale = {
                digest: StaleFix(note["path"], tuple(note["ratios"]), note["reason"])
                for digest, note in doc.get("stale", {}).items()
            }
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()
        return cls(frozenset(p for p in applied if len(p) == 2), stale)  # type: ignore[misc]


def path_key(root: str, source: str) -> str:
    """How the fix file of ``root`` names the photo ``source``: its path below the root (``/``
    between folders), else (a URL of a manifest) the URL shown without secrets."""
    prefix = root.rstrip("/") + "/"
    if source.startswith(prefix):
        return source[len(prefix) :]
    return shown_source(source)
