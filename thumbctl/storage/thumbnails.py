"""A thumbnail in a local output folder, as reconcile and the contact sheet look at it: whether it
still holds its object's bytes (:func:`thumbnail_problem`), and the file that shows an item now
(:func:`shown_output`). Publishing at a name is :mod:`.publishing`'s.
"""

from __future__ import annotations

import os
import stat

from ..core.models import ItemState, ItemView
from . import fsafe
from .objects import open_object


def thumbnail_problem(object_path: str, friendly_path: str) -> str | None:
    """``missing`` when the thumbnail is absent, ``wrong`` when it is no regular file (a symlink, a
    folder), ``modified`` when it no longer holds exactly the object's bytes (read up to the object's
    size), None when it does (a copy, a reflink, or a hard link of the earlier layout). An object
    that cannot be read is the object's problem, not the thumbnail's: None."""
    try:
        info = os.lstat(friendly_path)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "wrong"
    if not stat.S_ISREG(info.st_mode):
        return "wrong"
    try:
        with open_object(object_path) as (obj, target):  # opened once: the comparison reads this descriptor
            return None if fsafe.same_inode(info, target) else _thumbnail_differs(obj, target.st_size, friendly_path)
    except (OSError, ValueError):
        return None


def _thumbnail_differs(obj: int, size: int, friendly_path: str) -> str | None:
    """``wrong`` when the thumbnail cannot be opened, ``modified`` when it does not hold exactly the
    ``size`` bytes of the open object ``obj`` (or cannot be read), else None."""
    try:
        fd = os.open(friendly_path, fsafe.READ_FLAGS)
    except OSError:
        return "wrong"
    try:
        return None if os.fstat(fd).st_size == size and fsafe.same_bytes(obj, fd) else "modified"
    except OSError:
        return "modified"
    finally:
        os.close(fd)


def shown_output(item: ItemView) -> str | None:
    """The file that shows a succeeded item's output now, or None if it is gone.

    The thumbnail, while it still holds the item's object's bytes (a later batch with other
    settings may have replaced it with another object's, or the user edited it); else the object.
    """
    if item.state != ItemState.SUCCEEDED or not item.object_path:
        return None
    return shown_file(item.object_path, item.friendly_path)


def shown_file(object_path: str, friendly_path: str | None) -> str | None:
    """The thumbnail while it holds the object's bytes, else the object while it is a plain file, else None."""
    if friendly_path and thumbnail_problem(object_path, friendly_path) is None:
        return friendly_path
    return object_path if fsafe.is_plain_file(object_path) else None
