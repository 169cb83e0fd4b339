"""The output directory: where objects, friendly names and batch manifests live.

Layout of OUT (nothing else is ever written there)::

    OUT/objects/<k[:2]>/<k>.<ext>        one object per derivative key
    OUT/<item path without ext>.<W>x<H>.<ext>   friendly names (links)
    OUT/batches/<batch_id>.json          per-batch manifest
    OUT/batches/<batch_id>.html          contact sheet (``thumbctl sheet``, default place)
    OUT/.tmp/                            temp files of writers

Every write, link, rename and delete under OUT first proves that the folders from OUT's
root down to the file are real directories, not symlinks (:func:`checked_folder`), so no
item id, swapped-in link or symlinked ``objects``/``.tmp``/``batches`` folder can make it
land outside OUT. A symlink at the final name is only ever replaced by a rename, never
written through.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import stat
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .models import BatchView, ItemView
from .proc import hostname, start_ticks
from .settings import Ratio

RESERVED_TOP_LEVEL = {".tmp"}


#: The longest segment (bytes of UTF-8) an item id may have: a friendly name adds a ratio
#: and an extension to it and must stay under the usual 255-byte file name limit.
MAX_SEGMENT_BYTES = 200


class UnsafeItemId(ValueError):
    """An item id that could not be a safe relative path inside OUT; ``reason`` says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class OutsideOutput(OSError):
    """A write, link, rename or delete under OUT would go through a symlink, which could lead
    out of the output folder; an OSError, so callers that report filesystem refusals report it."""

    def __init__(self, path: str, root: str) -> None:
        super().__init__(
            f"{path} is a symlink, which could lead out of the output folder {root}; "
            "nothing is written or removed through it"
        )
        self.path = path


def is_plain_file(path: str) -> bool:
    """Whether ``path`` is a regular file itself, not a symlink to one: only such a file in OUT
    may count as an output (a symlink could make an output depend on a file outside OUT)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def check_item_id(item_id: str) -> str:
    """Return ``item_id`` if it is a safe relative path inside OUT, else raise.

    Refused: empty ids, text that is not valid UTF-8 (lone surrogates, such as the
    undecodable bytes of a file name), absolute paths, ``.``/``..`` or empty segments,
    backslashes, control characters, segments over 200 bytes and the reserved ``.tmp``
    folder.
    """
    if not item_id:
        raise UnsafeItemId("item id is empty", "is empty")
    reason = _id_problem(item_id)
    if reason is not None:
        raise UnsafeItemId(f"item id {item_id!r} {reason}", reason)
    return item_id


def _id_problem(item_id: str) -> str | None:
    try:
        item_id.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if any(unicodedata.category(ch) == "Cc" for ch in item_id):
        return "contains control characters"
    if "\\" in item_id:
        return "contains a backslash"
    if item_id.startswith("/"):
        return "is an absolute path"
    parts = item_id.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' segment"
    if parts[0] in RESERVED_TOP_LEVEL:
        return f"uses the reserved folder {parts[0]!r}"
    if any(len(part.encode()) > MAX_SEGMENT_BYTES for part in parts):
        return f"has a segment over {MAX_SEGMENT_BYTES} bytes"
    return None


def friendly_stems(item_ids: list[str]) -> dict[str, str]:
    """Map each id to the stem of its friendly names.

    The stem is the id without its extension; when two ids share a stem
    (``a.jpg`` and ``a.png``), the later one in sorted order keeps its
    extension (``a.png``), so no two items of a batch share a friendly name.
    """
    stems: dict[str, str] = {}
    taken: set[str] = set()
    for item_id in sorted(item_ids):
        stem = _without_extension(item_id)
        if stem in taken:
            stem = item_id
        taken.add(stem)
        stems[item_id] = stem
    return stems


def _without_extension(item_id: str) -> str:
    """``rooms/sofa.jpg`` -> ``rooms/sofa``; names like ``.hidden`` or ``x.`` stay whole."""
    head, sep, name = item_id.rpartition("/")
    dot = name.rfind(".")
    return f"{head}{sep}{name[:dot]}" if 0 < dot < len(name) - 1 else item_id


@dataclass(frozen=True)
class OutputLayout:
    """Path arithmetic for one output directory (no I/O). Paths are absolute strings."""

    root: str

    def object_path(self, key: str, extension: str) -> str:
        return f"{self.root}/objects/{key[:2]}/{key}.{extension}"

    def friendly_path(self, stem: str, ratio: Ratio, extension: str) -> str:
        return f"{self.root}/{stem}.{ratio.slug}.{extension}"

    def batch_manifest_path(self, batch_id: str) -> str:
        return f"{self.root}/batches/{batch_id}.json"

    def batch_sheet_path(self, batch_id: str) -> str:
        return f"{self.root}/batches/{batch_id}.html"

    @property
    def tmp_dir(self) -> str:
        return f"{self.root}/.tmp"


def resolve_out_dir(out: Path) -> Path:
    """Absolute, symlink-resolved output directory; it need not exist yet."""
    resolved = Path(os.path.realpath(out))
    if resolved.exists() and not resolved.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a directory")
    return resolved


_RESERVED_FOLDERS = ("objects", "batches", ".tmp")


def looks_like_output_folder(path: str) -> bool:
    """Whether ``path`` holds what thumbctl writes into every output folder (``objects/``,
    ``batches/`` and ``.tmp/``), so a folder scan never takes thumbnails for sources."""
    return all(os.path.isdir(os.path.join(path, name)) for name in _RESERVED_FOLDERS)


# -- folders under OUT ----------------------------------------------------------------------


def checked_folder(layout: OutputLayout, folder: str, *, create: bool) -> bool:
    """Prove that OUT's root and every folder below it down to ``folder`` is a real directory.

    Each component is checked with ``lstat`` before anything is created (``makedirs`` would
    follow a symlink); with ``create`` the missing ones are made. Raises :class:`OutsideOutput`
    at the first symlink, :class:`NotADirectoryError` at another kind of file. Returns whether
    ``folder`` exists (always True with ``create``).
    """
    root = os.path.normpath(layout.root)
    if not _real_folder(root, root, create, make=lambda p: os.makedirs(p, exist_ok=True)):
        return False
    current = root
    for part in _parts_below(root, folder):
        current = os.path.join(current, part)
        if not _real_folder(current, root, create, make=os.mkdir):
            return False
    return True


def probe_writable(layout: OutputLayout) -> None:
    """Prove a file can be written in OUT/.tmp, so a batch is never accepted for an output
    folder no worker could publish into; the folders this made are removed again, so a
    submission still writes nothing to OUT. Raises OSError."""
    made = [layout.tmp_dir] if not os.path.lexists(layout.tmp_dir) else []
    folder = layout.root
    while not os.path.lexists(folder) and folder != os.path.dirname(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    made.reverse()  # outermost first; removed innermost first below
    try:
        os.unlink(write_temp(layout, b"", "probe"))
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def symlinked_folder(layout: OutputLayout, folder: str) -> str | None:
    """The first symlink between OUT's root and ``folder`` (inclusive), or None; creates nothing."""
    try:
        checked_folder(layout, folder, create=False)
    except OutsideOutput as exc:
        return exc.path
    except NotADirectoryError:
        return None
    return None


def _parts_below(root: str, folder: str) -> list[str]:
    """The names of the folders from ``root`` (excluded) down to ``folder``."""
    folder = os.path.normpath(folder)
    if folder == root:
        return []
    prefix = root if root.endswith("/") else f"{root}/"
    if not folder.startswith(prefix):
        raise ValueError(f"{folder} is not inside the output folder {root}")
    return folder[len(prefix) :].split("/")


def _real_folder(path: str, root: str, create: bool, make: Callable[[str], None]) -> bool:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        with contextlib.suppress(FileExistsError):  # another writer made it meanwhile: checked below
            make(path)
        info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise OutsideOutput(path, root)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", path)
    return True


def _listable(layout: OutputLayout, folder: str) -> bool:
    """Whether ``folder`` exists as a real folder under OUT (listing never follows a symlink out)."""
    try:
        return checked_folder(layout, folder, create=False)
    except (OutsideOutput, NotADirectoryError):
        return False


# -- publishing -------------------------------------------------------------------------


def temp_name(layout: OutputLayout, extension: str) -> str:
    """A fresh temp path in OUT/.tmp, named after its writer (see :func:`temp_writer`).

    ``<pid>-<start ticks>-<host tag>-<random>.<ext>``: reconcile removes the
    temp files of writers that are gone at once, and others only after a grace period.
    """
    pid = os.getpid()
    ticks = start_ticks(pid).replace("?", "x")
    return f"{layout.tmp_dir}/{pid}-{ticks}-{host_tag()}-{secrets.token_hex(6)}.{extension}"


def host_tag(host: str | None = None) -> str:
    """A short, filename-safe tag of a host name (hosts may share an output folder)."""
    return hashlib.sha256((host or hostname()).encode()).hexdigest()[:8]


_TEMP_NAME = re.compile(r"^(\d+)-(\d+|x)-([0-9a-f]{8})-[0-9a-f]{12}\.")


def temp_writer(name: str) -> str | None:
    """The lease-style owner id (``host:pid:ticks``) of the process that wrote temp file
    ``name``, when the name says and the writer ran on this host; else None (unknown).

    Names of the older ``<pid>-<random>`` scheme carry no start time or host: unknown.
    """
    match = _TEMP_NAME.match(name)
    if match is None or match.group(3) != host_tag():
        return None
    ticks = match.group(2).replace("x", "?")
    return f"{hostname()}:{match.group(1)}:{ticks}"


def write_temp(layout: OutputLayout, data: bytes, extension: str) -> str:
    """Write ``data`` durably to a new temp file in OUT/.tmp and return its path."""
    checked_folder(layout, layout.tmp_dir, create=True)
    path = temp_name(layout, extension)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def discard(path: str | None) -> None:
    """Remove a temp file if it is there."""
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def same_content(a: str, b: str) -> bool:
    """Whether two files hold the same bytes (size first, then sha256)."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return hashlib.file_digest(fa, "sha256").digest() == hashlib.file_digest(fb, "sha256").digest()


def publish_object(layout: OutputLayout, temp_path: str, object_path: str) -> bool:
    """Create ``object_path`` from a verified temp file, if absent (``os.link``).

    An existing object with the same bytes is success, not an error: that is
    duplicate delivery. One with other bytes (damaged), or anything that is not a
    regular file (a symlink), is replaced atomically.
    Returns whether this call created or replaced the object.
    """
    checked_folder(layout, os.path.dirname(object_path), create=True)
    try:
        os.link(temp_path, object_path)
        return True
    except FileExistsError:
        if _is_regular_file(object_path) and same_content(temp_path, object_path):
            return False
        os.replace(temp_path, object_path)
        return True
    finally:
        discard(temp_path)


def link_friendly(layout: OutputLayout, object_path: str, friendly_path: str) -> None:
    """Point ``friendly_path`` at the object: a hard link switched by an atomic rename.

    ``rename()`` of one hard link onto another link of the same inode does
    nothing and leaves the source name behind, so that case is checked first
    (without following a symlink at either name: one is replaced, not kept).
    """
    checked_folder(layout, os.path.dirname(object_path), create=False)
    if os.path.islink(object_path):  # a hard link to it would be a symlink out of OUT under a friendly name
        raise OutsideOutput(object_path, layout.root)
    checked_folder(layout, os.path.dirname(friendly_path), create=True)
    if _same_inode(friendly_path, object_path):
        return
    checked_folder(layout, layout.tmp_dir, create=True)
    staging = temp_name(layout, "link")
    os.link(object_path, staging)
    try:
        os.replace(staging, friendly_path)
    finally:
        discard(staging)


def write_json_atomically(layout: OutputLayout, path: str, doc: object) -> None:
    """Write a JSON document through a temp file and an atomic rename."""
    checked_folder(layout, layout.tmp_dir, create=True)
    checked_folder(layout, os.path.dirname(path), create=True)
    _write_and_rename(temp_name(layout, "json"), path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def write_batch_manifest(batch: BatchView, items: list[ItemView]) -> str:
    """Write OUT/batches/<batch_id>.json: every item with its object and friendly path."""
    entries = [
        {
            "item_id": item.item_id,
            "ratio": item.ratio,
            "state": item.state,
            "error_code": item.error_code,
            "derivative_key": item.derivative_key,
            "object_path": item.object_path if item.state == "succeeded" else None,
            "friendly_path": item.friendly_path if item.state == "succeeded" else None,
        }
        for item in items
    ]
    doc = {**batch.to_json(with_failures=False), "items": entries}
    doc.pop("replayed", None)
    doc.pop("queue_age_seconds", None)
    write_json_atomically(OutputLayout(batch.out_dir), batch.manifest_path, doc)
    return batch.manifest_path


def write_text_atomically(path: Path, text: str) -> None:
    """Write a file outside OUT (a report, a metrics file) through a temp file beside it and an
    atomic rename, so a reader such as a metrics collector never sees half of it."""
    _write_and_rename(str(path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")), str(path), text)


def _write_and_rename(staging: str, target: str, text: str) -> None:
    """Write ``text`` durably to the new file ``staging``, then rename it over ``target``."""
    try:
        with open(staging, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(staging, target)
    finally:
        discard(staging)


def shown_output(item: ItemView) -> str | None:
    """The file that shows a succeeded item's output now, or None if it is gone.

    The friendly name, while it still links to the item's object (a later batch
    with other settings may have switched it to another object); else the object.
    """
    if item.state != "succeeded" or not item.object_path:
        return None
    if item.friendly_path:
        with contextlib.suppress(OSError):
            if os.path.samefile(item.friendly_path, item.object_path):
                return item.friendly_path
    return item.object_path if os.path.isfile(item.object_path) else None


def write_page(layout: OutputLayout, path: str, text: str, *, create_folder: bool = False) -> None:
    """Write an HTML page (UTF-8) to ``path`` through a temp file and an atomic rename.

    Inside OUT the temp file is staged in OUT/.tmp like every other writer's;
    elsewhere :func:`write_text_atomically` stages it beside ``path``. The
    folder of ``path`` must exist unless ``create_folder``.
    """
    folder, name = os.path.split(os.path.abspath(path))
    if _within(layout.root, folder):  # checked before anything follows a symlink in OUT
        _write_page_inside(layout, folder, name, text, create_folder)
        return
    if create_folder:
        os.makedirs(folder, exist_ok=True)
    folder = os.path.realpath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "no such folder", folder)
    if _within(layout.root, folder):  # a folder outside OUT that is a link into it
        _write_page_inside(layout, folder, name, text, False)
        return
    write_text_atomically(Path(f"{folder}/{name}"), text)


def _write_page_inside(layout: OutputLayout, folder: str, name: str, text: str, create_folder: bool) -> None:
    if not checked_folder(layout, folder, create=create_folder):
        raise FileNotFoundError(errno.ENOENT, "no such folder", folder)
    checked_folder(layout, layout.tmp_dir, create=True)
    _write_and_rename(temp_name(layout, "html"), f"{os.path.normpath(folder)}/{name}", text)


# -- inspection and removal (reconcile and gc) --------------------------------------------


@dataclass(frozen=True)
class StoredFile:
    """A regular file found under OUT: its path, size in bytes and modification time."""

    path: str
    size: int
    mtime: float

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def temp_files(layout: OutputLayout) -> list[StoredFile]:
    """The regular files in OUT/.tmp (none when it does not exist or is not a real folder)."""
    if not _listable(layout, layout.tmp_dir):
        return []
    return sorted(_regular_files(layout.tmp_dir), key=lambda f: f.path)


def object_files(layout: OutputLayout) -> Iterator[tuple[str, StoredFile]]:
    """(derivative key, file) of every object under OUT/objects/<k[:2]>/<k>.<ext>.

    Files whose name does not fit the layout are not objects and are never listed.
    """
    objects = f"{layout.root}/objects"
    if not _listable(layout, objects):
        return
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for shard in sorted(os.listdir(objects)):
            if not _listable(layout, f"{objects}/{shard}"):
                continue
            # a symlink named like an object is listed too (as itself), so gc can remove it
            for found in sorted(_regular_files(f"{objects}/{shard}", links=True), key=lambda f: f.path):
                key = found.name.split(".", 1)[0]
                if key[:2] == shard and re.fullmatch(r"[0-9a-f]{64}\.[a-z]+", found.name):
                    yield key, found


def _regular_files(folder: str, *, links: bool = False) -> Iterator[StoredFile]:
    """Regular files in ``folder`` (and, with ``links``, symlinks themselves, never followed)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) or (links and stat.S_ISLNK(info.st_mode)):
                    yield StoredFile(entry.path, info.st_size, info.st_mtime)


def friendly_link_problem(object_path: str, friendly_path: str) -> str | None:
    """``missing`` when the friendly name is absent, ``wrong`` when it is not a link to
    the object, None when it is."""
    if not os.path.lexists(friendly_path):
        return "missing"
    try:
        return None if os.path.samefile(friendly_path, object_path) else "wrong"
    except OSError:
        return "wrong"


def remove_stored_file(layout: OutputLayout, path: str) -> int:
    """Remove one file under OUT (never a folder, never outside OUT, never through a symlinked
    folder); returns the bytes it held when this was its last link, else 0. A file already
    gone counts 0."""
    if not _inside(layout.root, path):
        raise ValueError(f"{path} is not inside the output folder {layout.root}")
    if not checked_folder(layout, os.path.dirname(path), create=False):
        return 0
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):  # the link itself goes; its target, wherever it is, is untouched
            os.unlink(path)
            return 0
        if not stat.S_ISREG(info.st_mode):
            return 0
        os.unlink(path)
    except FileNotFoundError:
        return 0
    return info.st_size if info.st_nlink == 1 else 0


def reclaimable(object_path: str, friendly_paths: list[str]) -> tuple[list[str], int]:
    """Which of ``friendly_paths`` are links to the object, and the bytes removing the object
    and those links would free (0 while another link to it would remain)."""
    try:
        info = os.lstat(object_path)
    except FileNotFoundError:
        return [], 0
    if not stat.S_ISREG(info.st_mode):
        return [], 0
    linked = [f for f in friendly_paths if _same_file(f, object_path)]
    return linked, info.st_size if info.st_nlink == 1 + len(linked) else 0


def remove_object_and_links(layout: OutputLayout, object_path: str, friendly_paths: list[str]) -> tuple[int, int]:
    """Remove an object and those of ``friendly_paths`` that are links to it.

    Returns (friendly names removed, bytes reclaimed): the bytes count only when no
    other link to them is left.
    """
    linked, _ = reclaimable(object_path, friendly_paths)
    for friendly in linked:
        remove_stored_file(layout, friendly)
    freed = remove_stored_file(layout, object_path)
    remove_empty_shard(layout, os.path.dirname(object_path))
    for folder in sorted({os.path.dirname(f) for f in linked}, reverse=True):
        remove_empty_friendly_folders(layout, folder)
    return len(linked), freed


def remove_empty_friendly_folders(layout: OutputLayout, folder: str) -> None:
    """Remove ``folder`` and its parents below OUT while they are empty (a friendly name's
    sub-folders, e.g. OUT/rooms, once gc took their last file). OUT itself and its
    objects/, batches/ and .tmp/ are never removed, nor anything through a symlink."""
    root = os.path.normpath(layout.root)
    current = os.path.normpath(folder)
    while os.path.dirname(current) != current and current.startswith(root + os.sep):
        if os.path.dirname(current) == root and os.path.basename(current) in _RESERVED_FOLDERS:
            return
        if not checked_folder(layout, current, create=False):
            return
        try:
            os.rmdir(current)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                return
            raise
        current = os.path.dirname(current)


def remove_empty_shard(layout: OutputLayout, shard: str) -> bool:
    """Remove an OUT/objects/<xx> folder once it holds nothing; returns whether it went.

    Only a real, empty shard folder directly under OUT/objects is ever removed.
    """
    if os.path.dirname(os.path.normpath(shard)) != os.path.normpath(f"{layout.root}/objects"):
        raise ValueError(f"{shard} is not a shard folder of {layout.root}/objects")
    if not checked_folder(layout, shard, create=False):
        return False
    try:
        os.rmdir(shard)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            return False
        raise
    return True


def _is_regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _same_inode(a: str, b: str) -> bool:
    """Whether two names are links to one inode, following neither name if it is a symlink."""
    try:
        first, second = os.lstat(a), os.lstat(b)
    except FileNotFoundError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _within(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or below it, by name alone."""
    root, path = os.path.abspath(root), os.path.abspath(path)
    return os.path.commonpath([root, path]) == root


def _inside(root: str, path: str) -> bool:
    root = os.path.abspath(root)
    return os.path.commonpath([root, os.path.abspath(path)]) == root and os.path.abspath(path) != root
