"""Reading the sources a submission names: each resolved below the source folder (or a URL),
digested and its header probed, through the stat cache, in threads where that pays. A source that
fails becomes an inspection with its failure; it never shrinks the total."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, TypeVar

from ..core.errors import ItemFailure
from ..core.models import CachedSource
from ..core.profile import Limits, UrlRules
from ..imaging import SNIFF_BYTES, probe
from ..ledger import Ledger
from ..sources.downloads import is_url
from ..sources.downloads.remote import inspect_url
from ..sources.entries import SourceEntry
from ..sources.scan import SourceFolder, SourceRoot, check_size, digest_bounded

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Inspection:
    """The outcome of resolving and reading one source."""

    source: str
    info: CachedSource | None = None
    failure: ItemFailure | None = None

    @property
    def digest(self) -> str | None:
        """The source's content digest; None when it could not be read."""
        return self.info.digest if self.info else None


@dataclass(frozen=True)
class Inspections:
    """Every source's inspection by item id, and how many were read or came from the stat cache."""

    by_item: dict[str, Inspection]
    read: int = 0
    cached: int = 0

    @property
    def failed(self) -> int:
        return sum(1 for i in self.by_item.values() if i.failure)


def inspect_all(root: Path, entries: list[SourceEntry], limits: Limits, rules: UrlRules, ledger: Ledger) -> Inspections:
    """Every entry's source resolved and inspected; what was read is remembered in the stat cache."""
    source_root = SourceRoot(root)
    resolved: dict[str, str | ItemFailure] = {}
    for entry in entries:
        if entry.failure is not None:
            resolved[entry.item_id] = entry.failure
            continue
        try:
            known = entry.known_real or is_url(entry.given)
            resolved[entry.item_id] = entry.given if known else str(source_root.resolve(entry.given))
        except ItemFailure as failure:
            resolved[entry.item_id] = failure
    paths = [p for p in resolved.values() if isinstance(p, str)]
    cache = ledger.intake.cached_sources(paths)
    inspections = {}
    fresh: list[CachedSource] = []
    read = cached = 0
    with SourceFolder(source_root.real) as folder:
        inspect = partial(_inspect_one, folder, cache, limits, rules)
        results = _in_threads(inspect, list(resolved.values()))
        for item_id, (inspection, from_cache) in zip(resolved, results, strict=True):
            inspections[item_id] = inspection
            if inspection.info is not None:
                cached += from_cache
                read += not from_cache
                if not from_cache:
                    fresh.append(inspection.info)
    ledger.intake.remember_sources(fresh)
    return Inspections(inspections, read, cached)


#: Sources inspected per thread at least before a second thread is worth starting.
_SOURCES_PER_THREAD = 8


def _in_threads(inspect: Callable[[T], R], targets: list[T]) -> list[R]:
    """``inspect`` of every target, in order: in two threads when this process may use two CPUs
    and there are enough sources (reading and hashing release the GIL, so a second thread shortens
    the intake every worker waits for), and in up to 8 for URL sources, which wait on the network."""
    remote = sum(1 for target in targets if isinstance(target, str) and is_url(target))
    threads = max(min(2, len(os.sched_getaffinity(0)), len(targets) // _SOURCES_PER_THREAD), min(8, remote))
    if threads < 2:
        return [inspect(target) for target in targets]
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="intake")
    try:
        return list(pool.map(inspect, targets))
    finally:  # on Ctrl-C, no source not yet begun is read
        pool.shutdown(wait=True, cancel_futures=True)


def _inspect_one(
    folder: SourceFolder,
    cache: dict[str, CachedSource],
    limits: Limits,
    rules: UrlRules,
    target: str | ItemFailure,
) -> tuple[Inspection, bool]:
    """The inspection of one resolved source, and whether it came from the stat cache."""
    if isinstance(target, ItemFailure):
        return Inspection(source="", failure=target), False
    try:
        inspect = partial(inspect_url, rules=rules) if is_url(target) else partial(inspect_source, folder)
        info, from_cache = inspect(target, cache.get(target), limits)
    except ItemFailure as failure:
        return Inspection(source=target, failure=failure), False
    return Inspection(source=target, info=info), from_cache


def inspect_source(
    folder: SourceFolder, path: str, cached: CachedSource | None, limits: Limits
) -> tuple[CachedSource, bool]:
    """Digest and probe one resolved source, reusing ``cached`` if its stat still matches.

    The source is opened below the source folder the way a worker opens it (no symlink
    followed, a regular file only, see :func:`~thumbctl.sources.scan.open_source`) and read no
    further than the byte limit. Returns (what the source holds, whether it came from the cache).
    """
    with folder.open(path) as stream:
        st = os.fstat(stream.fileno())
        check_size(st.st_size, limits.max_bytes, path)
        if cached and cached.matches(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            _check_pixels(cached, limits)
            return cached, True
        return _read_source(path, stream, st, limits), False


def _read_source(path: str, stream: BinaryIO, st: os.stat_result, limits: Limits) -> CachedSource:
    try:
        head = stream.read(SNIFF_BYTES)
        stream.seek(0)
        digest = digest_bounded(stream, limits.max_bytes, path)
        stream.seek(0)
        info = probe(stream, head, limits.max_pixels)
    except OSError as exc:
        raise ItemFailure("io_error", f"cannot read {path}: {exc.strerror or exc}") from exc
    return CachedSource(
        path,
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        digest,
        info.format,
        info.width,
        info.height,
        info.orientation,
    )


def _check_pixels(info: CachedSource, limits: Limits) -> None:
    if info.width * info.height > limits.max_pixels:
        raise ItemFailure(
            "too_many_pixels",
            f"{info.width}x{info.height} is over the limit of {limits.max_pixels / 1e6:g} MP",
        )
