"""Outputs an earlier run already made: an item whose object is in the store with the right media
type and size (read from its header) is recorded as ``succeeded`` (``dedup``) instead of rendered."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..core.models import ItemState, NewBatch, NewItem
from ..core.profile import Profile, parse_ratio
from ..imaging import Geometry, fit_geometry, verify_output
from ..storage.fsafe import is_plain_file
from ..storage.locations import is_s3, object_name_of, object_store_of
from ..storage.objects import ObjectStore


def with_reused_outputs(
    new: NewBatch, profile: Profile, name_usable: Callable[[NewItem], bool] = lambda item: True
) -> NewBatch:
    """Mark queued items whose object an earlier run already made as ``succeeded`` (dedup).

    The object must be there with the right media type and dimensions (from its header), and
    the item's name free or thumbctl's (``name_usable``): an item whose name holds a file
    thumbctl did not publish stays queued, so its worker decides (``name_taken``) in the
    publish transaction.
    """
    items = tuple(
        replace(item, state=ItemState.SUCCEEDED, dedup=True, reused=reused_result(item, profile))
        if item.state == ItemState.QUEUED and object_is_valid(item, profile) and name_usable(item)
        else item
        for item in new.items
    )
    return replace(new, items=items)


def reused_result(item: NewItem, profile: Profile) -> dict[str, object]:
    """The figures of a reused output the batch counts (no crop, bytes or timings: nothing was rendered)."""
    geometry = output_geometry_of(item, profile)
    return {
        "width": geometry.out_w,
        "height": geometry.out_h,
        "source_smaller_than_target": geometry.limited,
        "reused": True,
    } | ({"fit": item.fit} if item.fit != "cover" else {})


def output_geometry_of(item: NewItem, profile: Profile) -> Geometry:
    """The output's geometry as the worker will compute it (see :func:`~thumbctl.imaging.fit.fit_geometry`)."""
    ratio = parse_ratio(item.ratio)
    return fit_geometry(item.source_width or 1, item.source_height or 1, ratio, item.size, profile.upscale, item.fit)


def object_is_valid(item: NewItem, profile: Profile) -> bool:
    """Whether an earlier run already made this item's object (right type and size, from its header)."""
    if not item.object_path or not item.source_width or not item.source_height:
        return False
    geometry = output_geometry_of(item, profile)
    if is_s3(item.object_path):
        store: ObjectStore = object_store_of(item.object_path)
        problem = store.verify(
            object_name_of(item.object_path),
            lambda stream: verify_output(stream, item.format, geometry.out_w, geometry.out_h, full=False),
        )
        return problem is None
    if not is_plain_file(item.object_path):
        return False
    return verify_output(Path(item.object_path), item.format, geometry.out_w, geometry.out_h, full=False) is None
