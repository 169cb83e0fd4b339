"""The outputs reconcile checks: every succeeded item's object through its store's interface (a
local file decoded again only when it changed since it last decoded without fault, a bucket's
object by the checksum kept with it; every one read and decoded with ``deep``), then its thumbnail
(:mod:`thumbctl.upkeep.namechecks`)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from ..core.models import Finding, ObjectStamp, PublishedItem
from ..core.profile import parse_ratio
from ..imaging import fit_geometry, verify_output
from ..ledger import Ledger
from ..storage.objects import ObjectStore, ObjectTooLarge
from .leftovers import COMPARE_READ_LIMIT, Scope
from .namechecks import name_problems, thumbnail_problem, unsettled_problems
from .problems import Problem

#: The most a deep check reads of one object: far above any thumbnail, so a runaway object is
#: reported, never loaded whole.
DEEP_READ_LIMIT = COMPARE_READ_LIMIT


class ObjectCheck(NamedTuple):
    """Why an object is not what it must be (None: sound), its file's stamp when sound (a local
    file), whether it had to be decoded to know, and whether the size and checksum kept with it (a
    bucket's object) vouched for it instead."""

    problem: str | None
    stamp: ObjectStamp | None = None
    decoded: bool = False
    matched: bool = False


def _expected_size(item: PublishedItem) -> tuple[int, int]:
    geometry = fit_geometry(
        item.source_width,
        item.source_height,
        parse_ratio(item.ratio),
        item.size,
        bool(item.profile["upscale"]),
        item.fit,
    )
    return geometry.out_w, geometry.out_h


def object_problem(
    store: ObjectStore, name: str, item: PublishedItem, known: ObjectStamp | None, *, deep: bool
) -> ObjectCheck:
    """Check a succeeded item's object through its store's interface: present, a plain object, the
    published size, then by what the store knows without reading it. A local file is decoded
    again only when it changed since it last decoded without fault (``known``: same inode, size,
    modification and change times); a bucket's object by the checksum kept with it equal to the
    published one and, with ``deep``, by reading it (bounded) and decoding it."""
    peek = store.peek(name)
    if peek is None:
        return ObjectCheck("is missing")
    if not peek.plain:
        return ObjectCheck("is not a plain file in the output folder (a symlink or another kind of file)")
    if item.output_bytes is not None and peek.size != item.output_bytes:
        return ObjectCheck(f"is {peek.size} bytes, {item.output_bytes} were published")
    if peek.stamp is not None:
        if peek.stamp == known:
            return ObjectCheck(None, peek.stamp)
        width, height = _expected_size(item)
        problem = store.verify(name, lambda stream: verify_output(stream, item.format, width, height))
        return ObjectCheck(problem, None if problem else peek.stamp, decoded=True)
    if peek.checksum is None:
        return ObjectCheck("has no checksum kept with it (thumbctl did not write it)")
    if item.output_sha256 is not None and peek.checksum != item.output_sha256:
        return ObjectCheck("holds other bytes than were published (its checksum differs)")
    if not deep:
        return ObjectCheck(None, matched=True)
    try:
        data = store.read(name, DEEP_READ_LIMIT)
    except FileNotFoundError:
        return ObjectCheck("is missing")
    except ObjectTooLarge:
        return ObjectCheck(f"holds over {DEEP_READ_LIMIT} bytes")
    if hashlib.sha256(data).hexdigest() != peek.checksum:
        return ObjectCheck("holds bytes that no longer match the checksum kept with it (damaged)", decoded=True)
    width, height = _expected_size(item)
    return ObjectCheck(verify_output(io.BytesIO(data), item.format, width, height), decoded=True)


@dataclass
class ObjectChecks:
    """Objects checked in one reconcile run: verdicts (an object shared by items is checked once)."""

    scope: Scope
    known: dict[str, ObjectStamp]
    deep: bool = False
    verdicts: dict[str, str | None] = field(default_factory=dict)
    sound: dict[str, ObjectStamp] = field(default_factory=dict)
    decoded: int = 0
    unchanged: int = 0
    matched: int = 0

    def check(self, item: PublishedItem) -> str | None:
        path = item.object_path
        if path not in self.verdicts:
            known = self.known.get(path)
            checked = self._checked(item, known)
            self.decoded += checked.decoded
            self.unchanged += checked.stamp is not None and checked.stamp == known
            self.matched += checked.matched
            self.verdicts[path] = checked.problem
            if checked.stamp is not None:
                self.sound[path] = checked.stamp
        return self.verdicts[path]

    def _checked(self, item: PublishedItem, known: ObjectStamp | None) -> ObjectCheck:
        store, name = self.scope.object_of(item.object_path)
        return object_problem(store, name, item, known, deep=self.deep)


def output_problems(ledger: Ledger, checks: ObjectChecks) -> Iterator[Problem]:
    """Every succeeded item's object checked (once per object) and, where the item owns its name, its
    thumbnail; then the failed items whose name holds their object (a commit a crash lost)."""
    for item in ledger.upkeep.published_items():
        problem = checks.check(item)
        if problem is not None:
            yield _object_finding(ledger, item, problem) if not item.expired else _expired_object_finding(item, problem)
        elif item.owns_friendly_name:
            target = checks.scope.target_at(item.out_dir)
            link = thumbnail_problem(ledger, target, item)
            if link is not None:
                yield from name_problems(ledger, target, checks.scope, item, link)
    ledger.upkeep.replace_verified_objects(checks.sound)
    yield from unsettled_problems(ledger, checks.scope)


def _object_finding(ledger: Ledger, item: PublishedItem, problem: str) -> Problem:
    kind = "object_missing" if problem == "is missing" else "object_invalid"
    finding = Finding(
        kind, item.batch_id, item.item_id, f"the object {problem}", ratio=item.ratio, path=item.object_path
    )

    def fix() -> bool:
        detail = f"reconcile: {finding.detail}"
        return ledger.upkeep.requeue_published(item.row, item.object_path, kind, detail) is not None

    return Problem(finding, fix)


def _expired_object_finding(item: PublishedItem, problem: str) -> Problem:
    """The object of a name whose batch expired: nothing can render it again but a new submit."""
    kind = "object_missing" if problem == "is missing" else "object_invalid"
    detail = f"the object {problem}; its batch expired: submit its source again to render it"
    return Problem(Finding(kind, item.batch_id, item.item_id, detail, ratio=item.ratio, path=item.object_path))
