"""The one publisher: the per-name lock, the check of the name, the publish and the commit.

Every name thumbctl publishes goes through here: a worker's render (:meth:`Publisher.publish_render`),
the outputs a submit reuses (:meth:`Publisher.republish`) and reconcile's restore of a thumbnail
(:meth:`Publisher.restore`). Each holds the ledger's per-name lock (``publishing_name``) from the
check to the commit that records the version the publish returned, so two processes (on two hosts)
never both judge a name free, or one take the other's just-published file for a user's. A worker's
publish runs inside the ledger's publish transaction, the one that checks the cancel flag and the
lease (DESIGN section 4's race rule): whichever of publish and cancel commits first wins.

The ledger and storage never import each other; this module composes them. Every pairing of a
store and an output target (local folders, bucket prefixes) publishes the same way: the store gives
what the name copies (:meth:`~thumbctl.storage.objects.ObjectStore.source`: a local object's file,
or the verified bytes), and the name rules (:mod:`thumbctl.storage.publishing`) place it at the name
through the target's slot, where a local folder makes a reflink or a copy of that file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ..config.s3location import S3Options
from ..core.errors import ItemFailure
from ..core.faults import Faults
from ..core.naming import lane_problem
from ..ledger import Claim, ClaimedItem, Ledger, Publication
from ..storage.locations import name_in, object_name_of, object_store_of, output_target_at
from ..storage.objects import ObjectStore, Outcome, Verifier
from ..storage.outputs import CopyAhead, OutputTarget
from ..storage.publishing import NamePublished, RecordedAt, check_name, publish_at, restore_at
from ..storage.versions import Recorded


@dataclass
class Publisher:
    """Publishes names into one output target for one ledger."""

    ledger: Ledger
    target: OutputTarget
    overwrite: bool = False
    faults: Faults = field(default_factory=Faults)
    #: The output location as the ledger records it (names are paths below it); the target's root by default.
    out: str = ""
    #: The S3 settings the stores of recorded objects are opened with (None: the process's).
    options: S3Options | None = None

    def __post_init__(self) -> None:
        if not self.out:
            self.out = self.target.root

    @classmethod
    def at(cls, ledger: Ledger, out: str, overwrite: bool = False, faults: Faults | None = None) -> Publisher:
        """The publisher of the output location ``out`` (a folder or ``s3://bucket/prefix``)."""
        return cls(ledger, output_target_at(out), overwrite, faults or Faults(), out)

    def _store_of(self, object_path: str) -> tuple[ObjectStore, str]:
        """The store a recorded object lies in, and its name there."""
        return object_store_of(object_path, self.options), object_name_of(object_path)

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
        thumbnail: CopyAhead | None = None,
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
        name = name_in(self.out, item.friendly_path)
        object_name = object_name_of(item.object_path)

        def effect() -> Publication:
            temp = staged()
            with self.ledger.queue.publishing_name(item.friendly_path):  # held to the commit
                self.refuse_released(item.friendly_path)
                recorded = self.recorded_at(item.friendly_path)
                approved = check_name(
                    self.target,
                    name,
                    item.friendly_path,
                    lambda: data,
                    recorded,
                    overwrite=self.overwrite,
                    own=[item.object_path],
                )
                stored = store.put_staged(temp, object_name, verify=verify)
                self.faults.hit("after_link")
                with store.source(object_name, data) as source:
                    ahead = None if stored.outcome == Outcome.KEPT else thumbnail
                    named = publish_at(
                        self.target,
                        name,
                        item.friendly_path,
                        dataclasses.replace(source, ahead=ahead),
                        recorded=recorded,
                        overwrite=self.overwrite,
                        approved=approved,
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
            store, object_name = self._store_of(object_path)
            with store.source(object_name) as source:
                named = publish_at(
                    self.target,
                    name_in(self.out, friendly_path),
                    friendly_path,
                    source,
                    recorded=recorded,
                    overwrite=self.overwrite,
                    adopt=False,
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
                store, object_name = self._store_of(object_path)
                with store.source(object_name) as source:
                    return restore_at(
                        self.target, name_in(self.out, friendly_path), friendly_path, source, replace=replace
                    )

        return self.ledger.upkeep.relink_published(row, object_path, friendly_path, code, detail, link)

    def name_usable(self, object_path: str, friendly_path: str, content: Callable[[], bytes]) -> bool:
        """Whether publishing at ``friendly_path`` would not fail ``name_taken`` (as things stand now)."""
        try:
            self.refuse_released(friendly_path)
            check_name(
                self.target,
                name_in(self.out, friendly_path),
                friendly_path,
                content,
                self.recorded_at(friendly_path),
                overwrite=self.overwrite,
                own=[object_path],
                adopt=False,
            )
        except (ItemFailure, OSError, ValueError):
            return False
        return True
