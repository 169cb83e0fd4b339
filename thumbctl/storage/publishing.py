"""The name rules of a publish, once, for every output target (a local folder, a bucket prefix).

Publishing a thumbnail at its name (:func:`publish_at`): a free name is created only if absent
(``created``); a name holding exactly the bytes is left (``unchanged``), or given a copy of its own
when that file is shared with another name (a hard link of the earlier layout) or is the object's
own file (``relinked``); a name holding a copy of the item's own earlier object is ``relinked`` too;
a name holding a publish the ledger recorded there is ``replaced``; anything else fails
``name_taken`` unless ``overwrite`` (``overwritten``). Without ``adopt`` (a publish that cannot
have left a copy there itself), the same bytes put back at a name are the user's
(:func:`.versions.put_back`). Every write is conditional on what was judged, so a file written
meanwhile is judged again. Each returns the version of what is at the name afterwards, for the
ledger to record.

The rules ask the target's :class:`~.outputs.NameSlot` what is at the name; what only a local
folder has (inodes, links, a reflink of the object's file, a copy made ahead) is its slot's
(:mod:`.localslot`).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..core.errors import ItemFailure
from .objects import Source
from .outputs import NameSlot, OutputTarget
from .versions import Recorded, put_back, put_back_taken

#: What :func:`publish_at` did at a thumbnail's name.
NAME_OUTCOMES = ("created", "unchanged", "relinked", "replaced", "overwritten")

#: How many times a publish looks again after losing a race for the name.
_ROUNDS = 3

#: The publishes recorded at a name, asked only when a file there has to be judged.
RecordedAt = Callable[[], Sequence[Recorded]]


class NamePublished(NamedTuple):
    """What publishing at a name did, and the version of the file there afterwards."""

    outcome: str
    version: str | None


class Approval(NamedTuple):
    """A decision taken before the object was stored, and what it judged at the name: it stands
    while that very file (or version) is there."""

    outcome: str
    seen: Any


def judge(
    slot: NameSlot,
    shown: str,
    content: Callable[[], bytes],
    recorded: RecordedAt,
    *,
    overwrite: bool,
    adopt: bool = True,
    own: Sequence[str] = (),
    approved: Approval | None = None,
    source: Source | None = None,
) -> tuple[str, Any | None]:
    """What publishing ``content()`` at the slot's name would do (see the module's docstring), and
    what it judged there (None: a free name). ``shown`` is the name as a message shows it; ``own``
    the item's own object paths; ``approved`` an earlier decision; ``source`` what is published.
    Raises ItemFailure ``name_taken``."""
    seen = slot.look()
    if seen is None:
        return "created", None
    if source is not None and slot.links_to(seen, source):
        return "relinked", seen
    if approved is not None and slot.same(seen, approved.seen):
        return approved.outcome, seen
    if slot.holds(seen, content):
        if adopt or not put_back(slot.version(seen), recorded()):
            return ("relinked" if slot.shared(seen) else "unchanged"), seen
        if overwrite:
            return "overwritten", seen
        raise put_back_taken(shown)
    if own and slot.copy_of(seen, own):
        return "relinked", seen
    if slot.ours(seen, recorded()):
        return "replaced", seen
    if overwrite:
        return "overwritten", seen
    raise ItemFailure(
        "name_taken", f"{shown} is a file thumbctl did not publish; it is left as it is (--overwrite replaces it)"
    )


def check_name(
    target: OutputTarget,
    name: str,
    shown: str,
    content: Callable[[], bytes],
    recorded: RecordedAt,
    *,
    overwrite: bool,
    own: Sequence[str] = (),
    adopt: bool = True,
) -> Approval | None:
    """Decide, before the object is stored, what publishing at ``name`` will do: raise ItemFailure
    ``name_taken`` for a file thumbctl did not publish (without ``overwrite``); return the decision
    and what it judged (None: a free name). Nothing is written, no folder made."""
    with target.slot(name, create=False) as slot:
        outcome, seen = judge(slot, shown, content, recorded, overwrite=overwrite, own=own, adopt=adopt)
    return None if seen is None else Approval(outcome, seen)


def publish_at(
    target: OutputTarget,
    name: str,
    shown: str,
    source: Source,
    *,
    recorded: RecordedAt,
    overwrite: bool,
    approved: Approval | None = None,
    adopt: bool = True,
) -> NamePublished:
    """Publish ``source`` at ``name`` by the rules above; ``approved`` is what :func:`check_name`
    decided before the object was stored. Returns the outcome and the version there after."""
    with target.slot(name, create=True) as slot:
        for _ in range(_ROUNDS):
            outcome, seen = judge(
                slot,
                shown,
                source.content,
                recorded,
                overwrite=overwrite,
                adopt=adopt,
                approved=approved,
                source=source,
            )
            if outcome == "unchanged":
                return NamePublished(outcome, slot.version(seen))
            try:
                return NamePublished(outcome, slot.place(source, seen))
            except FileExistsError:
                continue  # the name changed between the look and the conditional write: look again
    raise FileExistsError(errno.EEXIST, "files kept appearing at the thumbnail's name", shown)


def restore_at(target: OutputTarget, name: str, shown: str, source: Source, *, replace: bool) -> str:
    """Reconcile's restore: put ``source`` at ``name``; returns the new version. A missing name
    (``replace`` False) is only created while it is free (FileExistsError when something appeared
    there: it is left as it is); with ``replace``, whatever is there now is replaced while it is
    what was just seen."""
    with target.slot(name, create=True) as slot:
        if not replace:
            return slot.place(source, None)
        for _ in range(_ROUNDS):
            try:
                return slot.place(source, slot.look())
            except FileExistsError:
                continue
    raise FileExistsError(errno.EEXIST, "files kept appearing at the thumbnail's name", shown)
