"""The one publisher: the per-name lock, the check of the name, the publish and the commit.

Every name thumbctl publishes goes through here: a worker's render (:meth:`Publisher.publish_render`),
the outputs a submit reuses (:meth:`Publisher.republish`) and reconcile's restore of a thumbnail
(:meth:`Publisher.restore`). Each holds the ledger's per-name lock (``publishing_name``) from the
check to the commit that records the version the publish returned, so two processes (on two hosts)
never both judge a name free, or one take the other's just-published file for a user's. A worker's
publish runs inside the ledger's publish transaction, the one that checks the cancel flag and the
lease (DESIGN section 4's race rule): whichever of publish and cancel commits first wins.

The ledger and storage never import each other; this module composes them. A local object
published into a local folder takes the local path (a reflink or a copy of the object file, through
folder descriptors: :mod:`.storage.thumbnails`); every other pairing (an S3 store or OUT) goes
through the interfaces alone: the object's bytes, then ``publish`` or ``replace`` at the name
(:mod:`.storage.publishing`), under the same rules.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.errors import ItemFailure
from ..core.faults import Faults
from ..core.naming import lane_problem
from ..ledger import Claim, ClaimedItem, Ledger, Publication
from ..storage.locations import name_in, object_name_of, object_store_of, output_target_at
from ..storage.objects import LocalObjectStore, ObjectStore, Outcome, Verifier
from ..storage.outputs import LocalOutputTarget, OutputTarget, Recorded
from ..storage.publishing import judge_name, publish_data, restore_data
from ..storage.thumbnails import NamePublished, RecordedAt, StagedThumbnail, check_name, publish_name, restore_thumbnail

#: The most bytes read back from the store to publish an object at a name (thumbnails are far smaller).
OBJECT_READ_LIMIT = 64 << 20


@dataclass
class Publisher:
    """Publishes names into one output target for one ledger."""

    ledger: Ledger
    target: OutputTarget
    overwrite: bool = False
    faults: Faults = field(default_factory=Faults)
    #: The output location as the ledger records it (names are paths below it); a local target's root by default.
    out: str = ""

    def __post_init__(self) -> None:
        if not self.out and isinstance(self.target, LocalOutputTarget):
            self.out = self.target.root

    @classmethod
    def at(cls, ledger: Ledger, out: str, overwrite: bool = False, faults: Faults | None = None) -> Publisher:
        """The publisher of the output location ``out`` (a folder or ``s3://bucket/prefix``)."""
        return cls(ledger, output_target_at(out), overwrite, faults or Faults(), out)

    def _local(self, object_path: str) -> bool:
        """Whether the local path applies: a local OUT, and an object that is a local file."""
        return isinstance(self.target, LocalOutputTarget) and isinstance(object_store_of(object_path), LocalObjectStore)

    def _object_bytes(self, object_path: str) -> bytes:
        return object_store_of(object_path).read(object_name_of(object_path), OBJECT_READ_LIMIT)

    def recorded_at(self, friendly_path: str) -> RecordedAt:
        """The publishes the ledger recorded at ``friendly_path`` (asked only when needed)."""

        def recorded() -> list[Recorded]:
            return [Recorded(version, path) for path, version in self.ledger.views.publishes_at(friendly_path)]

        return recorded

    def refuse_released(self, friendly_path: str) -> None:
        """Raise ItemFailure ``name_taken`` for a name ``thumbctl release`` gave to the user, whatever
        is there now (``--overwrite`` takes it back)."""
        released = None if self.overwrite else self.ledger.views.released_at(friendly_path)
        if released is not None:
            raise ItemFailure(
                "name_taken",
                f"{friendly_path} was released to you by `thumbctl release` at {released}; it is left as it is "
                "(choose another --name, or --overwrite takes it back)",
            )

    def refuse_out_of_lane(self, friendly_path: str) -> None:
        """Raise ItemFailure ``bad_name`` for a name in OUT/batches/ or without an image's extension
        (an item recorded before intake refused such names): nothing is written there."""
        problem = lane_problem(name_in(self.out, friendly_path))
        if problem is not None:
            raise ItemFailure("bad_name", f"{friendly_path} {problem}: nothing is written there; choose another --name")

    def publish_render(
        self,
        claim: Claim,
        item: ClaimedItem,
        store: ObjectStore,
        staged: Callable[[], str],
        data: bytes,
        *,
        verify: Verifier,
        result: dict[str, object],
        published: Callable[[], None] = lambda: None,
        thumbnail: StagedThumbnail | None = None,
    ) -> str:
        """Publish a worker's verified render of ``item``: in the ledger's publish transaction (cancel
        flag and lease checked), under the name's lock, check the name (``name_taken`` before the
        object is stored), put the object, publish the name and commit ``succeeded`` with the
        version. ``staged()`` gives the staged object (called again when the ledger runs the
        transaction again after a lost connection); ``thumbnail``, a copy of the staged bytes made
        in OUT beforehand, is placed at the name when the object holds those bytes (not when an
        object with other bytes is kept); ``published()`` runs once the name is published. Returns
        the ledger's outcome (``succeeded``, ``cancelled``, ``late``, ``lost``)."""
        self.refuse_out_of_lane(item.friendly_path)
        if not (isinstance(self.target, LocalOutputTarget) and isinstance(store, LocalObjectStore)):
            return self._publish_through_interfaces(claim, item, store, staged, data, verify, result, published)

        def effect() -> Publication:
            temp = staged()
            with self.ledger.queue.publishing_name(item.friendly_path):  # held to the commit
                self.refuse_released(item.friendly_path)
                recorded = self.recorded_at(item.friendly_path)
                approved = check_name(
                    self.target, item.friendly_path, data, recorded, overwrite=self.overwrite, own=[item.object_path]
                )
                stored = store.put_staged(temp, os.path.basename(item.object_path), verify=verify)
                self.faults.hit("after_link")
                named = publish_name(
                    self.target,
                    item.object_path,
                    item.friendly_path,
                    recorded=recorded,
                    overwrite=self.overwrite,
                    approved=approved,
                    staged=None if stored.outcome == Outcome.KEPT else thumbnail,
                )
                self.faults.hit("name_published")
            if named.outcome in ("replaced", "overwritten"):
                result[f"name_{named.outcome}"] = True
            published()
            return Publication(stored.note, named.version)

        return self.ledger.queue.publish(claim, item, effect, result=result)

    def _publish_through_interfaces(
        self,
        claim: Claim,
        item: ClaimedItem,
        store: ObjectStore,
        staged: Callable[[], str],
        data: bytes,
        verify: Verifier,
        result: dict[str, object],
        published: Callable[[], None],
    ) -> str:
        """:meth:`publish_render` where the store or OUT is not a local folder: the same steps, the
        name published from the verified bytes in hand."""
        name = name_in(self.out, item.friendly_path)

        def effect() -> Publication:
            temp = staged()
            with self.ledger.queue.publishing_name(item.friendly_path):  # held to the commit
                self.refuse_released(item.friendly_path)
                recorded = self.recorded_at(item.friendly_path)
                judge_name(self.target, name, item.friendly_path, data, recorded, overwrite=self.overwrite)
                stored = store.put_staged(temp, object_name_of(item.object_path), verify=verify)
                self.faults.hit("after_link")
                named = publish_data(
                    self.target, name, item.friendly_path, data, recorded=recorded, overwrite=self.overwrite
                )
                self.faults.hit("name_published")
            if named.outcome in ("replaced", "overwritten"):
                result[f"name_{named.outcome}"] = True
            published()
            return Publication(stored.note, named.version)

        return self.ledger.queue.publish(claim, item, effect, result=result)

    def republish(self, batch_id: str, object_path: str, friendly_path: str) -> NamePublished:
        """Publish ``friendly_path`` for a succeeded item of ``batch_id`` whose object exists (a
        submit reusing earlier outputs, or finishing what an interrupted one left), and record the
        version, under the name's lock. Raises ItemFailure ``name_taken`` for a user's file."""
        self.refuse_out_of_lane(friendly_path)
        with self.ledger.queue.publishing_name(friendly_path):
            self.refuse_released(friendly_path)
            recorded = self.recorded_at(friendly_path)
            if self._local(object_path):
                named = publish_name(
                    self.target, object_path, friendly_path, recorded=recorded, overwrite=self.overwrite, adopt=False
                )
            else:
                name = name_in(self.out, friendly_path)
                data = self._object_bytes(object_path)
                named = publish_data(
                    self.target, name, friendly_path, data, recorded=recorded, overwrite=self.overwrite, adopt=False
                )
            self.ledger.queue.record_name_version(batch_id, friendly_path, named.version, named.outcome)
        return named

    def restore(
        self, row: int, object_path: str, friendly_path: str, code: str, detail: str, *, replace: bool = False
    ) -> bool:
        """Reconcile's repair: put a fresh copy of the object at the name of the item ``row`` if the
        item still owns it, and record the new version with a ``relinked`` event, in one transaction
        under the name's lock. A missing name is only created while it is free; ``replace`` puts the
        copy over what is there (an edit restored on request, an earlier version thumbctl published)."""

        def link() -> str:
            with self.ledger.queue.publishing_name(friendly_path):
                if self._local(object_path):
                    return restore_thumbnail(self.target, object_path, friendly_path, replace=replace)
                data = self._object_bytes(object_path)
                name = name_in(self.out, friendly_path)
                return restore_data(self.target, name, friendly_path, data, replace=replace)

        return self.ledger.upkeep.relink_published(row, object_path, friendly_path, code, detail, link)

    def name_usable(self, object_path: str, friendly_path: str, content: Callable[[], bytes]) -> bool:
        """Whether publishing at ``friendly_path`` would not fail ``name_taken`` (as things stand now)."""
        try:
            self.refuse_released(friendly_path)
            if self._local(object_path):
                check_name(
                    self.target,
                    friendly_path,
                    content,
                    self.recorded_at(friendly_path),
                    overwrite=self.overwrite,
                    own=[object_path],
                    adopt=False,
                )
            else:
                name = name_in(self.out, friendly_path)
                judge_name(
                    self.target,
                    name,
                    friendly_path,
                    content(),
                    self.recorded_at(friendly_path),
                    overwrite=self.overwrite,
                    adopt=False,
                )
        except (ItemFailure, OSError, ValueError):
            return False
        return True
