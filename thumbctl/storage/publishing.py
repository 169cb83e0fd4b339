"""Publishing at a name through the :class:`~.outputs.OutputTarget` interface alone.

The same rules as a local folder's (:mod:`.thumbnails`), for any target (an S3 bucket, or a local
folder when the object is not a local file): a free name is created only if absent (``created``);
a name holding exactly the bytes is left (``unchanged``); a name holding a version the ledger
recorded there is replaced while it still holds that version (``replaced``); anything else fails
``name_taken`` unless ``overwrite`` (``overwritten``, still conditional on the version seen, so a
file written meanwhile is judged again). A conditional write that lost a race looks again.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

from ..core.errors import ItemFailure
from .outputs import NameState, OutputTarget, Recorded, StaleVersion, put_back, put_back_taken
from .thumbnails import NamePublished, RecordedAt

#: How many times a publish looks again after losing a race for the name.
_ROUNDS = 3


def judge_name(
    target: OutputTarget,
    name: str,
    shown: str,
    data: bytes,
    recorded: RecordedAt,
    *,
    overwrite: bool,
    adopt: bool = True,
) -> tuple[str, str | None]:
    """What publishing ``data`` at ``name`` would do, and the version it judged (None: free).
    ``shown`` is the name as a message shows it. Without ``adopt`` (a publish that cannot have left
    a copy there itself), the same bytes put back at a name are the user's (:func:`.outputs.put_back`).
    Raises ItemFailure ``name_taken``."""
    version = target.version_of(name)
    if version is None:
        return "created", None
    if target.read(name, len(data)) == data:
        if adopt or not put_back(version, recorded()):
            return "unchanged", version
        if overwrite:
            return "overwritten", version
        raise put_back_taken(shown)
    if _ours(target, name, version, recorded()):
        return "replaced", version
    if overwrite:
        return "overwritten", version
    raise ItemFailure(
        "name_taken", f"{shown} is a file thumbctl did not publish; it is left as it is (--overwrite replaces it)"
    )


def _ours(target: OutputTarget, name: str, version: str, recorded: Sequence[Recorded]) -> bool:
    """Whether ``version`` (what is at ``name``) is one the ledger recorded there; a record from
    before versions existed is judged by the target (the bytes of the object published)."""
    if version in {r.version for r in recorded if r.version}:
        return True
    older = [r for r in recorded if r.version is None]
    return bool(older) and target.name_state(name, older) == NameState.OURS


def publish_data(
    target: OutputTarget,
    name: str,
    shown: str,
    data: bytes,
    *,
    recorded: RecordedAt,
    overwrite: bool,
    adopt: bool = True,
) -> NamePublished:
    """Publish ``data`` at ``name`` by the rules above; returns the outcome and the version there after."""
    for _ in range(_ROUNDS):
        outcome, seen = judge_name(target, name, shown, data, recorded, overwrite=overwrite, adopt=adopt)
        try:
            if outcome == "unchanged":
                return NamePublished(outcome, seen)
            if seen is None:
                return NamePublished(outcome, target.publish(name, data))
            return NamePublished(outcome, target.replace(name, data, version=seen))
        except (StaleVersion, FileExistsError, FileNotFoundError):
            continue  # the name changed between the look and the conditional write: look again
    raise FileExistsError(errno.EEXIST, "files kept appearing at the thumbnail's name", shown)


def restore_data(target: OutputTarget, name: str, shown: str, data: bytes, *, replace: bool) -> str:
    """Reconcile's restore: put ``data`` at ``name``; returns the new version. A missing name
    (``replace`` False) is only created if absent (FileExistsError when something appeared there);
    with ``replace``, whatever is there now is replaced while it holds the version just read."""
    if not replace:
        return target.publish(name, data)
    for _ in range(_ROUNDS):
        seen = target.version_of(name)
        try:
            return target.publish(name, data) if seen is None else target.replace(name, data, version=seen)
        except (StaleVersion, FileExistsError, FileNotFoundError):
            continue
    raise FileExistsError(errno.EEXIST, "files kept appearing at the thumbnail's name", shown)
