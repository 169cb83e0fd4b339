"""A prefix of an S3-compatible bucket as an object store or an output target.

:class:`S3ObjectStore` implements :class:`~.objects.ObjectStore` and :class:`S3OutputTarget`
:class:`~.outputs.OutputTarget`, with the layout and the path arithmetic of the local folder
(``<root>/objects/<k[:2]>/<k>.<ext>``, ``<root>/<name>``, ``<root>/batches/<id>.json``), where
the root is the location's URL (``s3://bucket/prefix``), so a recorded path means the same on both.

Every write is conditional, so nothing is clobbered:

* an object or a new name is created only if absent (``If-None-Match: *``); an object carries the
  sha256 of its bytes in its metadata, so a 412 on it is judged by its size and checksum (a
  duplicate) or else by the caller's verifier (kept, or replaced with ``If-Match`` on the ETag read);
* a name's version is its ETag and an id thumbctl gives each publish (kept in the name's metadata:
  an ETag is the MD5 of the bytes, so anyone's copy of the same bytes has it too); a name is
  replaced only while it holds the recorded version, with ``If-Match`` on its ETag (404 and 412
  both mean it is no longer ours), and removed the same way;
* 409 ConditionalRequestConflict, 5xx and lost connections are retried with backoff; a 412 after
  a try whose answer was lost counts as our own write only when the bytes there are ours.

Each object carries ``Content-Type`` by its extension and ``Cache-Control`` from the options
(immutable for content-addressed objects, short for names and documents).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import io
import itertools
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import PreconditionError
from tenacity import Retrying, retry_if_result, stop_after_attempt

from ..config.s3location import S3Location, S3Options, is_s3, parse_s3
from ..core.errors import CannotWrite
from . import s3client
from .fsafe import StoredFile
from .layout import OutLayout, StoreLayout
from .objects import (
    OBJECT_READ_LIMIT,
    ObjectInfo,
    ObjectPeek,
    ObjectTooLarge,
    Outcome,
    Published,
    Source,
    Verifier,
    open_object,
)
from .outputs import RESERVED_FOLDERS, Decide, InterfaceSlot, NameState, Recorded, StaleVersion

if TYPE_CHECKING:
    from obstore.store import S3Store


_OBJECT_NAME = re.compile(r"[0-9a-f]{64}\.[a-z]+")
_PREVIEW_LIMIT = 1 << 20
#: The most of an existing object read to verify it: a derivative is far smaller.
_VERIFY_LIMIT = 256 << 20
_ROUNDS = 3
#: The user metadata key of the id thumbctl gives each publish of a name (``x-amz-meta-thumbctl-publish``).
_PUBLISH = "thumbctl-publish"


def _attributes(name: str, cache_control: str, data: bytes | None = None) -> dict[str, str]:
    attributes = {"Content-Type": s3client.content_type(name), "Cache-Control": cache_control}
    if data is not None:
        attributes[s3client.CHECKSUM] = hashlib.sha256(data).hexdigest()
    return attributes


def _version(found: tuple[int, str, dict[str, str]]) -> str:
    """A name's version: its ETag and the publish id thumbctl gave it (empty for anyone else's)."""
    return f"{found[1]}:{found[2].get(_PUBLISH, '')}"


def _holds(found: tuple[int, str, dict[str, str]] | None, data: bytes) -> bool:
    """Whether a HEAD's answer shows ``data``: the same size and the sha256 in its metadata."""
    return (
        found is not None
        and found[0] == len(data)
        and found[2].get(s3client.CHECKSUM) == hashlib.sha256(data).hexdigest()
    )


class _Staged:
    """Staged objects of this process: the bytes, held in memory until put or discarded. On S3 a
    put is one request of the whole object, so staging them in the bucket first would only double it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, bytes] = {}
        self._ids = itertools.count()

    def hold(self, data: bytes, extension: str) -> str:
        with self._lock:
            handle = f"s3-staged:{next(self._ids)}.{extension}"
            self._data[handle] = data
        return handle

    def take(self, handle: str | None) -> bytes | None:
        with self._lock:
            return self._data.pop(handle, None) if handle else None


_STAGED = _Staged()


@dataclass(frozen=True)
class _S3Place:
    location: S3Location
    options: S3Options

    @property
    def root(self) -> str:
        return self.location.url

    def path_of(self, name: str) -> str:
        return self.location.join(name)

    def name_of(self, path: str) -> str:
        """The name of a path inside the location; ValueError for one outside."""
        head = self.root + "/"
        if not path.startswith(head) or not path[len(head) :]:
            raise ValueError(f"{path} is not inside {self.root}")
        return path[len(head) :]

    @property
    def _client(self) -> S3Store:
        return self._clients()[1]

    @property
    def _writer(self) -> S3Store:
        return self._clients()[2]

    def _clients(self) -> tuple[int, S3Store, S3Store]:
        """The shared clients (retried, and not, for conditional writes), looked up once per process."""
        found = self.__dict__.get("_found_clients")
        if found is None or found[0] != os.getpid():
            retried = s3client.client(self.location, self.options)
            found = (os.getpid(), retried, s3client.client(self.location, self.options, retried=False))
            self.__dict__["_found_clients"] = found  # a cache beside the fields, not one of them
        return found

    def probe(self) -> None:
        """Prove the location can be written (a small object put under ``.tmp/`` and removed
        again), so a batch is never accepted for a bucket no worker could write to: raises
        bucket_missing, bucket_forbidden or storage_unreachable."""
        name = f".tmp/probe-{uuid.uuid4().hex}"
        self._overwrite(name, b"", {"Content-Type": "application/octet-stream"})
        self._delete(name)

    def _key(self, name: str) -> str:
        return self.location.key(name)

    def _head(self, name: str) -> tuple[int, str, dict[str, str]] | None:
        key = self._key(name)
        with s3client.translated(self.location, key):
            return s3client.head(self._client, key)

    def _read(self, name: str, limit: int) -> bytes | None:
        """The bytes at ``name`` when at most ``limit``; None when more; FileNotFoundError when absent."""
        key = self._key(name)
        with s3client.translated(self.location, key):
            return s3client.read_bounded(self._client, key, limit)

    def _list(self, folder: str) -> Iterator[tuple[str, int]]:
        """(name, size) of every key under the folder ``folder`` of the location (``""``: all)."""
        prefix = self._key(folder.rstrip("/")) if folder.strip("/") else self.location.prefix
        with s3client.translated(self.location, prefix or "/"):
            for batch in obstore.list(self._client, prefix=prefix or None, chunk_size=1000):
                for meta in batch:
                    name = self.location.name_of(meta["path"])
                    if name:
                        yield name, meta["size"]

    def _create(self, name: str, data: bytes, attributes: dict[str, str]) -> tuple[str | None, bool]:
        """Create ``name`` if absent: (its ETag, False), or (None, whether an earlier try of ours may
        have been applied) when something is there."""
        key = self._key(name)
        with s3client.translated(self.location, key, writing=True):
            done, uncertain = s3client.conditional(
                lambda: s3client.put(self._writer, key, data, attributes, mode="create"), self.options.retry_seconds
            )
        if isinstance(done, BaseException):
            return None, uncertain
        return done, False

    def _update(self, name: str, data: bytes, attributes: dict[str, str], e_tag: str) -> tuple[str | None, bool]:
        """Write ``name`` while it holds ``e_tag`` (``If-Match``): (its new ETag, False), or (None,
        uncertain) on 412 or 404 (it holds something else, or nothing)."""
        key = self._key(name)

        def write() -> str:
            try:
                return s3client.put(self._writer, key, data, attributes, mode={"e_tag": e_tag})
            except FileNotFoundError as exc:  # some servers answer 404 to If-Match on a missing key
                raise PreconditionError(str(exc)) from None

        with s3client.translated(self.location, key, writing=True):
            done, uncertain = s3client.conditional(write, self.options.retry_seconds)
        if isinstance(done, BaseException):
            return None, uncertain
        return done, False

    def _overwrite(self, name: str, data: bytes, attributes: dict[str, str]) -> None:
        key = self._key(name)
        with s3client.translated(self.location, key, writing=True):
            s3client.put(self._client, key, data, attributes, mode="overwrite")

    def _remove_if(self, name: str, e_tag: str) -> bool:
        """Remove ``name`` while it holds ``e_tag`` (the caller's HEAD saw it): a DELETE with
        ``If-Match``, which SeaweedFS and AWS S3 honour. A server that ignores the header deletes
        anyway, and one that refuses it (501) gets a plain DELETE: on those, a write to the name
        between the HEAD and the DELETE is removed with it."""
        key = self._key(name)
        removed = s3client.delete_if_match(self.location, self._client, key, e_tag)
        if removed is None:
            self._delete(name)
            return True
        return removed

    def _delete(self, name: str) -> None:
        key = self._key(name)
        with s3client.translated(self.location, key, writing=True):
            obstore.delete(self._client, key)


#: Tries of a swapped document's read-then-conditional-write when other writers keep coming between.
SWAP_TRIES = 5
#: :meth:`S3OutputTarget.swap_document`'s mark of a conditional write another writer beat.
_SWAP_CONFLICT = "another writer came between"


@dataclass(frozen=True)
class S3ObjectStore(StoreLayout, _S3Place):
    """:class:`~.objects.ObjectStore` on a bucket prefix, with the store's layout (:class:`.layout.StoreLayout`)."""

    @classmethod
    def of_object(cls, object_path: str, options: S3Options) -> S3ObjectStore:
        """The store an object's URL lies in (``s3://bucket/prefix/objects/<xx>/<name>``)."""
        root, objects, shard, name = object_path.rsplit("/", 3)
        if objects != "objects" or not name.startswith(shard) or len(shard) != 2:
            raise ValueError(f"{object_path} is not an object of a store (<store>/objects/<xx>/<name>)")
        return cls(parse_s3(root), options)

    def _object(self, name: str) -> str:
        return f"objects/{name[:2]}/{name}"

    def _preview(self, name: str) -> str:
        return self.preview_path(self._object(name))

    # -- the interface -------------------------------------------------------------------------

    def stage(self, data: bytes, extension: str) -> str:
        return _STAGED.hold(data, extension)

    def put_staged(self, staged: str, name: str, *, verify: Verifier) -> Published:
        data = _STAGED.take(staged)
        if data is None:
            raise FileNotFoundError(2, "the staged object is gone (already put or discarded)", staged)
        return self.put(name, data, verify=verify)

    def put(self, name: str, data: bytes, *, verify: Verifier) -> Published:
        path = self._object(name)
        attributes = _attributes(name, self.options.cache_control_objects, data)
        for _ in range(_ROUNDS):  # an existing object removed meanwhile (gc) is created again
            e_tag, _uncertain = self._create(path, data, attributes)
            if e_tag is not None:
                return Published(Outcome.CREATED)
            found = self._head(path)
            if found is None:
                continue
            if _holds(found, data):
                return Published(Outcome.DUPLICATE)
            reason = self._existing_problem(path, data, verify)
            if reason in (Outcome.DUPLICATE, Outcome.KEPT):
                return Published(reason)
            if self._update(path, data, attributes, found[1])[0] is not None:
                return Published(Outcome.REPLACED, reason)
        raise FileExistsError(17, "the object kept changing under the put", self.path_of(name))

    def _existing_problem(self, path: str, data: bytes, verify: Verifier) -> str:
        """``duplicate``, ``kept`` or why the existing object must be replaced (read within a bound)."""
        try:
            existing = self._read(path, max(len(data), _VERIFY_LIMIT))
        except FileNotFoundError:
            return "is missing"
        if existing is None:
            return "is larger than any derivative"
        if existing == data:
            return Outcome.DUPLICATE
        problem = verify(io.BytesIO(existing))
        return Outcome.KEPT if problem is None else problem

    def discard(self, staged: str | None) -> None:
        _STAGED.take(staged)

    def read(self, name: str, limit: int) -> bytes:
        data = self._read(self._object(name), limit)
        if data is None:
            raise ObjectTooLarge(f"{name} holds over {limit} bytes")
        return data

    def stat(self, name: str) -> ObjectInfo | None:
        found = self._head(self._object(name))
        return None if found is None else ObjectInfo(found[0], found[1], found[2].get(s3client.CHECKSUM))

    def verify(self, name: str, check: Verifier) -> str | None:
        try:
            data = self._read(self._object(name), _VERIFY_LIMIT)
        except FileNotFoundError:
            return "is missing"
        if data is None:
            return "is larger than any derivative"
        return check(io.BytesIO(data))

    def names(self, prefix: str = "") -> Iterator[str]:
        folder = f"objects/{prefix[:2]}" if len(prefix) >= 2 else "objects"
        found = []
        for path, _size in self._list(folder):
            shard, _, name = path.removeprefix("objects/").partition("/")
            if _OBJECT_NAME.fullmatch(name) and name[:2] == shard and name.startswith(prefix):
                found.append(name)
        yield from sorted(found)

    @contextlib.contextmanager
    def source(self, name: str, data: bytes | None = None) -> Iterator[Source]:
        """``data`` when given (the verified bytes in hand), else the object read back once."""
        read = functools.cache(lambda: self.read(name, OBJECT_READ_LIMIT))
        yield Source((lambda: data) if data is not None else read)

    @contextlib.contextmanager
    def read_staged(self, staged: str) -> Iterator[int | None]:
        yield None

    def peek(self, name: str) -> ObjectPeek | None:
        info = self.stat(name)
        return None if info is None else ObjectPeek(info.size, checksum=info.checksum)

    def listing(self) -> Iterator[tuple[str, int | None]]:
        for name in self.names():
            yield name, None

    def freed_by_removing(self, name: str, listed: int | None) -> int:
        """The object's size: the listed one, else a HEAD's (0 when it is gone meanwhile)."""
        if listed is not None:
            return listed
        info = self.stat(name)
        return info.size if info is not None else 0

    def temp_files(self) -> list[StoredFile]:
        return []

    def remove_temp(self, path: str) -> int:
        raise ValueError(f"{path}: a bucket has no temp files")

    def remove(self, name: str) -> int:
        freed = 0
        for path in (self._object(name), self._preview(name)):
            found = self._head(path)
            if found is not None:
                self._delete(path)
                freed += found[0]
        return freed

    def write_preview(self, name: str, make: Callable[[], bytes]) -> None:
        path = self._preview(name)
        if self._head(path) is None:
            self._create(path, make(), _attributes(path, self.options.cache_control_objects))

    def read_preview(self, name: str, limit: int = _PREVIEW_LIMIT) -> bytes | None:
        try:
            data = self._read(self._preview(name), limit)
        except FileNotFoundError:
            return None
        whole = data is not None and data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
        return data if whole else None

    # -- the store's own small files (its ledger-id) -------------------------------------------------

    def read_root_file(self, name: str, limit: int) -> bytes | None:
        """The bytes of ``name`` at the store's root when at most ``limit``, else None."""
        try:
            return self._read(name, limit)
        except FileNotFoundError:
            return None

    def create_root_file(self, name: str, data: bytes) -> bool:
        """Create ``name`` at the store's root if absent; False when something is there already."""
        e_tag, uncertain = self._create(name, data, _attributes(name, self.options.cache_control_names, data))
        return e_tag is not None or (uncertain and _holds(self._head(name), data))


@dataclass(frozen=True)
class S3OutputTarget(OutLayout, _S3Place):
    """:class:`~.outputs.OutputTarget` on a bucket prefix, with OUT's layout (:class:`.layout.OutLayout`).
    A version is the name's ETag and thumbctl's publish id."""

    # -- the interface -------------------------------------------------------------------------

    def name_state(self, name: str, recorded: Sequence[Recorded]) -> NameState:
        found = self._head(name)
        if found is None:
            return NameState.FREE
        versions = {r.version for r in recorded if r.version}
        if _version(found) in versions:
            return NameState.OURS
        old = [r.object_path for r in recorded if r.version is None and r.object_path]
        if old and any(self._holds_object(name, found[0], path) for path in old):
            return NameState.OURS
        return NameState.TAKEN

    def _holds_object(self, name: str, size: int, object_path: str) -> bool:
        """Whether ``name`` (of ``size`` bytes) holds exactly the bytes of the recorded object."""
        theirs = _object_bytes(object_path, size, self.options)
        if theirs is None or len(theirs) != size:
            return False
        try:
            return self._read(name, size) == theirs
        except FileNotFoundError:
            return False

    def version_of(self, name: str) -> str | None:
        found = self._head(name)
        return None if found is None else _version(found)

    def publish(self, name: str, data: bytes) -> str:
        attributes = self._name_attributes(name, data)
        e_tag, uncertain = self._create(name, data, attributes)
        if e_tag is not None:
            return f"{e_tag}:{attributes[_PUBLISH]}"
        found = self._head(name) if uncertain else None
        if found is not None and found[2].get(_PUBLISH) == attributes[_PUBLISH]:
            return _version(found)  # our own earlier try, whose answer was lost
        raise FileExistsError(17, "something is at the name already", self.path_of(name))

    def replace(self, name: str, data: bytes, *, version: str) -> str:
        found = self._head(name)
        if found is None:
            raise FileNotFoundError(2, "the name is gone", self.path_of(name))
        if _version(found) != version:
            raise StaleVersion(17, "the name no longer holds the recorded version", self.path_of(name))
        attributes = self._name_attributes(name, data)
        e_tag, uncertain = self._update(name, data, attributes, found[1])
        if e_tag is not None:
            return f"{e_tag}:{attributes[_PUBLISH]}"
        found = self._head(name)
        if found is None:
            raise FileNotFoundError(2, "the name is gone", self.path_of(name))
        if uncertain and found[2].get(_PUBLISH) == attributes[_PUBLISH]:
            return _version(found)  # our own earlier try, whose answer was lost
        raise StaleVersion(17, "the name no longer holds the recorded version", self.path_of(name))

    def remove(self, name: str, *, version: str) -> bool:
        found = self._head(name)
        if found is None or _version(found) != version:
            return False
        return self._remove_if(name, found[1])

    def _name_attributes(self, name: str, data: bytes) -> dict[str, str]:
        """A name's attributes, with a fresh publish id: the version is the ETag and this id, so the
        same bytes put at the name by anyone else (the same ETag) are never taken for ours. Its
        Content-Type is the image format's, whatever the name's extension says (``--name``)."""
        attributes = _attributes(name, self.options.cache_control_names, data)
        return {**attributes, "Content-Type": s3client.image_content_type(data, name), _PUBLISH: uuid.uuid4().hex}

    def read(self, name: str, limit: int) -> bytes | None:
        try:
            return self._read(name, limit)
        except FileNotFoundError:
            return None

    def names(self, prefix: str = "") -> Iterator[str]:
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        found = [
            name
            for name, _size in self._list(folder)
            if name.startswith(prefix) and name.split("/", 1)[0] not in RESERVED_FOLDERS and not name.endswith("/")
        ]
        yield from sorted(found)

    def write_document(self, name: str, data: bytes) -> None:
        self._overwrite(name, data, _attributes(name, self.options.cache_control_names, data))

    def read_document(self, name: str, limit: int) -> bytes | None:
        return self.read(name, limit)

    def swap_document(self, name: str, decide: Decide, limit: int) -> str | None:
        def once() -> str | None:
            found = self._head(name)
            held = None if found is None else self.read(name, limit) or b""  # b"": too large to be ours
            data = decide(held)
            if isinstance(data, str):
                return data
            attributes = _attributes(name, self.options.cache_control_names, data)
            written, _ = (
                self._create(name, data, attributes)
                if found is None
                else self._update(name, data, attributes, found[1])
            )
            return None if written is not None else _SWAP_CONFLICT

        retrying = Retrying(
            stop=stop_after_attempt(SWAP_TRIES),
            retry=retry_if_result(lambda why: why is _SWAP_CONFLICT),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else _SWAP_CONFLICT,
        )
        why = retrying(once)
        if why is _SWAP_CONFLICT:
            raise OSError(errno.EBUSY, f"{name} kept changing while it was written ({SWAP_TRIES} tries)")
        return why

    def document_size(self, name: str) -> int | None:
        found = self._head(name)
        return None if found is None else found[0]

    def remove_document(self, name: str) -> int:
        found = self._head(name)
        if found is None:
            return 0
        self._delete(name)
        return found[0]

    def temp_files(self) -> list[StoredFile]:
        return []

    def remove_temp(self, path: str) -> int:
        raise ValueError(f"{path}: a bucket has no temp files")

    def remove_empty_tmp(self) -> bool:
        return False

    @contextlib.contextmanager
    def slot(self, name: str, *, create: bool) -> Iterator[InterfaceSlot]:
        yield InterfaceSlot(self, name)

    def copy_ahead(self, staged: int | None, size: int) -> None:
        return None

    def thumbnail_problem(self, name: str, object_path: str, versions: Callable[[], set[str | None]]) -> str | None:
        version = self.version_of(name)
        if version is None:
            return "missing"
        return None if version in versions() else "modified"

    def page_path(self, batch_id: str, path: Path | None) -> str:
        if path is not None:
            raise CannotWrite(
                f"the sheet of a batch published to {self.root} goes to its batches/ folder there (its links are "
                "relative to it): run thumbctl sheet without --output"
            )
        return self.batch_sheet_path(batch_id)

    def write_page(self, path: str, text: str, *, create_folder: bool) -> None:
        self.write_document(self.name_of(path), text.encode("utf-8"))

    def shown(self, object_path: str, friendly_path: str) -> str | None:
        """The thumbnail while something is at its name."""
        return friendly_path if self.version_of(self.name_of(friendly_path)) is not None else None

    def occupied(self, name: str) -> bool:
        return self.version_of(name) is not None

    def holds_object(self, name: str, object_path: str) -> bool:
        found = self._head(name)
        return found is not None and self._holds_object(name, found[0], object_path)


def _object_bytes(object_path: str, size: int, options: S3Options) -> bytes | None:
    """The bytes of a recorded object (an S3 URL or a local path) when it holds ``size`` bytes, else None."""
    if is_s3(object_path):
        location = parse_s3(object_path)
        key = location.prefix
        try:
            with s3client.translated(location, key):
                return s3client.read_bounded(s3client.client(location, options), key, size)
        except FileNotFoundError:
            return None
    try:
        with open_object(object_path) as (fd, info):
            return os.pread(fd, size + 1, 0) if info.st_size == size else None
    except (OSError, ValueError):
        return None
