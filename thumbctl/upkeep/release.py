"""``thumbctl release NAME...``: hand published names over to the user.

A released name's record says when it became the user's; from then on reconcile never reports or
restores it, the mirror never removes it, and a submit whose item resolves to it fails that item
``name_taken`` (``--overwrite`` takes it back). The file itself is never touched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..ledger import Ledger
from ..storage.locations import is_s3

#: What became of each name: released now, released before, or not a name thumbctl published.
RELEASED, ALREADY, UNKNOWN = "released", "already_released", "not_published"


@dataclass(frozen=True)
class NameRelease:
    name: str
    state: str
    released_at: str | None = None


@dataclass(frozen=True)
class ReleaseReport:
    dry_run: bool
    names: tuple[NameRelease, ...]

    @property
    def unknown(self) -> tuple[NameRelease, ...]:
        return tuple(n for n in self.names if n.state == UNKNOWN)

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "names": [{"name": n.name, "state": n.state, "released_at": n.released_at} for n in self.names],
        }


def name_path(name: str) -> str:
    """The path the ledger records for ``name`` (a path in OUT, or an ``s3://`` URL): a local name
    made absolute through its real folder, the name itself never followed (it may be a user's symlink)."""
    if is_s3(name):
        return name
    folder, base = os.path.split(os.path.abspath(name))
    return os.path.join(os.path.realpath(folder), base)


def release_names(ledger: Ledger, names: list[str], *, dry_run: bool = False) -> ReleaseReport:
    """Release each name (see the module's docstring); ``dry_run`` says what would happen."""
    done = []
    for name in names:
        path = name_path(name)
        release = ledger.upkeep.release_name(path, dry_run=dry_run)
        if release is None:
            done.append(NameRelease(path, UNKNOWN))
        else:
            done.append(NameRelease(path, ALREADY if release.already else RELEASED, release.released_at))
    return ReleaseReport(dry_run, tuple(done))
