"""Helpers shared by the tests: image makers and the invariant checks of DESIGN section 8."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import sqlite3
import stat
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from thumbctl import Ledger, SubmitOptions
from thumbctl.core.models import ITEM_STATES, BatchView, NewBatch, NewItem
from thumbctl.engine.session import SubmitSession
from thumbctl.ledger.connection import memory_uri
from thumbctl.ledger.timefmt import iso
from thumbctl.testing import InMemoryLedger

REPO = Path(__file__).resolve().parent.parent
#: How the tests name an in-memory ledger in a ``ledger_url``: ``memory:NAME`` (see :func:`open_ledger`).
MEMORY = "memory:"


def run_bench(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python bench/SCRIPT ARGS`` from the repository root, this checkout's thumbctl first on the path."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, f"bench/{script}", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=timeout)


#: Encoded bytes of every image :func:`make_image` made in this test process, by its arguments:
#: many tests ask for the same few, and drawing one costs a Python call per pixel and channel.
_IMAGES: dict[tuple[object, ...], bytes] = {}


def make_image(path: Path, size: tuple[int, int], fmt: str, *, seed: int = 0, mode: str = "RGB") -> Path:
    """Write a real, distinct image (noise with a gradient) of ``size`` in ``fmt``."""
    key = (tuple(size), fmt, seed, mode)
    data = _IMAGES.get(key)
    if data is None:
        buffer = io.BytesIO()
        _draw(size, seed, mode).save(buffer, fmt)
        data = _IMAGES[key] = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _draw(size: tuple[int, int], seed: int, mode: str) -> Image.Image:
    """Channel values row by row, pixel by pixel: x's share of 255 plus ``rng.randrange(40)``, modulo 256."""
    values = _noise(size, seed, len(mode))
    if mode in ("L", "RGB", "RGBA", "CMYK"):  # one byte per channel: the values as they are
        return Image.frombytes(mode, size, values)
    bands = len(mode)
    image = Image.new(mode, size)
    image.putdata([values[i] if bands == 1 else tuple(values[i : i + bands]) for i in range(0, len(values), bands)])
    return image


#: ``rng.randrange(40)`` takes the top 6 bits of one 32-bit output of the generator and draws again
#: while they make 40 or more: :func:`_noise` does the same on many outputs at once.
_TOP_6_BITS = bytes(b >> 2 for b in range(256))
_TOP_6_BITS_OVER_39 = bytes(range(160, 256))
#: The table adding ``g`` modulo 256 to a byte, for each ``g``.
_PLUS = [bytes((g + v) % 256 for v in range(256)) for g in range(256)]


def _noise(size: tuple[int, int], seed: int, bands: int) -> bytes:
    """The values of ``(x * 255 // w + rng.randrange(40)) % 256 for y, x, band`` with
    ``rng = random.Random(seed)``, without a Python call per value."""
    w, h = size
    count = w * h * bands
    rng = random.Random(seed)
    drawn = bytearray()
    while len(drawn) < count:
        words = count - len(drawn) + 64
        top_bytes = rng.getrandbits(32 * words).to_bytes(4 * words, "little")[3::4]
        drawn += top_bytes.translate(_TOP_6_BITS, _TOP_6_BITS_OVER_39)
    del drawn[count:]
    row = w * bands
    for x in range(w):
        plus = _PLUS[x * 255 // max(w, 1)]
        for band in range(x * bands, (x + 1) * bands):
            drawn[band::row] = drawn[band::row].translate(plus)
    return bytes(drawn)


def ihdr_png(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with almost no data behind it (a bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


# -- the one door of the tests beside the ledger's API -----------------------------------------------
#
# Everything a test reads or writes in the ledger's tables without going through the ledger, and
# every use of a ledger's connection itself, goes through the functions below.


def raw_rows(ledger: Ledger, sql: str, params: Sequence[object] = ()) -> list[tuple]:
    """The rows of ``sql`` (``?`` placeholders) read beside the ledger's API, on either backend: a
    second connection to a SQLite file, the ledger's own autocommit connection on PostgreSQL."""
    if ledger.backend == "sqlite":
        with contextlib.closing(raw_sqlite(ledger)) as raw:
            return [tuple(row) for row in raw.execute(sql, params).fetchall()]
    with _server_cursor(ledger) as cursor:
        return [tuple(row) for row in cursor.execute(_server_sql(sql), params or None).fetchall()]


def raw_write(ledger: Ledger, sql: str, params: Sequence[object] = ()) -> None:
    """Commit ``sql`` beside the ledger's API (a fault made by hand), on either backend."""
    if ledger.backend == "sqlite":
        with contextlib.closing(raw_sqlite(ledger)) as raw, raw:
            raw.execute(sql, params)
    else:
        with _server_cursor(ledger) as cursor:
            cursor.execute(_server_sql(sql), params or None)


def raw_sqlite(ledger: Ledger) -> sqlite3.Connection:
    """A second, plain connection to a SQLite ledger: to its file, or to its in-memory database."""
    if isinstance(ledger, InMemoryLedger):
        return sqlite3.connect(memory_uri(ledger.name), uri=True)
    return sqlite3.connect(ledger.path)


def open_ledger(url: str, **kwargs: Any) -> Ledger:
    """A :class:`Ledger` on ``url`` (a file, a ``postgresql://`` URL), or on ``memory:NAME``: the
    :class:`~thumbctl.testing.InMemoryLedger` of that name."""
    if url.startswith(MEMORY):
        return InMemoryLedger(url.removeprefix(MEMORY), **kwargs)
    return Ledger(url, **kwargs)


def own_sqlite_connection(ledger: Ledger) -> sqlite3.Connection:
    """The SQLite connection a file ledger runs on (a page limit, a checkpoint, a step counter)."""
    assert ledger.backend == "sqlite"
    return ledger._db.conn


@contextlib.contextmanager
def failed_with_events_uncommitted(ledger: Ledger, rows: Sequence[int]) -> Iterator[None]:
    """Inside: queued ``rows`` moved to ``failed`` with their events written (so numbered) in a
    write transaction of ``ledger`` that commits only on leaving."""
    with ledger._db.write() as now:
        ledger._log.move(iso(now), rows, "queued", "failed", error_code="corrupt_image", detail="x")
        ledger._db.flush_events()
        yield


def _server_cursor(ledger: Ledger):  # noqa: ANN202 - a psycopg cursor; the driver is optional
    from psycopg.rows import tuple_row

    return ledger._db.conn.cursor(row_factory=tuple_row)


def _server_sql(sql: str) -> str:
    """A test's ``?`` placeholders in psycopg's style (the tests' own statements only)."""
    return sql.replace("%", "%%").replace("?", "%s")


def check_invariants(ledger: Ledger, *, outputs: bool = True) -> None:
    """Invariants 1-3 of DESIGN section 8, from the views and straight from the rows.

    1. total = sum of counts, for every batch.
    2. (``outputs``) every succeeded item's object exists, decodes, and has the
       requested dimensions; objects are named by their derivative key. Batches that
       ``gc`` expired are exempt: retention may reclaim objects no name references any more.
    3. no success is committed after the batch's cancel request.
    """
    for batch_id, total, expired_at in raw_rows(ledger, "SELECT batch_id, total, expired_at FROM batches"):
        counted = raw_rows(ledger, "SELECT count(*) FROM items WHERE batch_id = ?", (batch_id,))[0][0]
        assert counted == total, f"{batch_id}: {counted} item rows, total {total}"
        view = ledger.views.batch(batch_id)
        assert set(view.counts) == set(ITEM_STATES)
        assert sum(view.counts.values()) == view.total == total
        _check_no_success_after_cancel(ledger, batch_id)
        if outputs and expired_at is None:
            _check_outputs(ledger, batch_id)


def _check_no_success_after_cancel(ledger: Ledger, batch_id: str) -> None:
    sql = "SELECT min(seq) FROM events WHERE batch_id = ? AND to_state = 'cancel_requested'"
    cancel = raw_rows(ledger, sql, (batch_id,))[0][0]
    if cancel is not None:
        late = raw_rows(
            ledger,
            "SELECT count(*) FROM events WHERE batch_id = ? AND to_state = 'succeeded' AND seq > ? "
            "AND from_state IS NOT NULL",
            (batch_id, cancel),
        )[0][0]
        assert late == 0, f"{batch_id}: {late} successes committed after the cancel request"


def _check_outputs(ledger: Ledger, batch_id: str) -> None:
    for item in ledger.views.items(batch_id, state="succeeded"):
        path = Path(item.object_path)
        assert path.name.startswith(item.derivative_key), path
        assert path.exists(), f"missing object for {item.item_id} {item.ratio}"
        with Image.open(path) as image:
            image.load()
            w, h = (int(v) for v in item.ratio.split(":"))
            assert abs(image.width * h - image.height * w) <= max(w, h), (item.item_id, item.ratio, image.size)


def tree_snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (relative path -> sha256 of a file, a link's target, or
    ``dir``), with the folder's own mode and mtime: what must not change outside OUT."""
    snapshot = {".": f"dir {folder.stat().st_mode:o} {folder.stat().st_mtime_ns}"}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            snapshot[name] = f"link {os.readlink(path)}"
        elif path.is_dir():
            snapshot[name] = f"dir {path.stat().st_mtime_ns}"
        else:
            snapshot[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return snapshot


class Clock:
    """A clock tests move by hand: ``clock.now += 30``."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def request(key: str = "k", sources: int = 2, ratios: tuple[str, ...] = ("1:1", "4:3"), **kwargs) -> NewBatch:
    """A batch request of ``sources`` fake sources x ``ratios``, for ledger-level tests (no files)."""
    items = tuple(
        NewItem(
            f"img{s}.jpg",
            ratio,
            f"/src/img{s}.jpg",
            "queued",
            source_digest=f"{s:064d}",
            source_format="jpeg",
            source_width=40,
            source_height=30,
            derivative_key=f"{s}{ratio}",
            object_path=f"/out/o{s}{ratio}",
            friendly_path=f"/out/f{s}{ratio}",
        )
        for s in range(sources)
        for ratio in ratios
    )
    return NewBatch(key, f"digest-{key}", "/src", "/out", {"size": 64}, items, **kwargs)


def queued_items(count: int, tag: str, ratios: tuple[str, ...] = ("1:1", "4:3", "16:9")) -> tuple[NewItem, ...]:
    """``count`` queued items of fake sources (no files), ``ratios`` per source, one derivative key
    per item: for ledger-level tests at scale."""
    return tuple(
        NewItem(
            f"{tag}{n // len(ratios)}.jpg",
            ratios[n % len(ratios)],
            f"/src/{tag}{n // len(ratios)}.jpg",
            "queued",
            source_digest=f"{n // len(ratios):064d}",
            source_format="jpeg",
            source_width=40,
            source_height=30,
            derivative_key=f"{tag}{n // len(ratios)}-{ratios[n % len(ratios)]}",
            object_path=f"/out/{tag}{n}",
            friendly_path=f"/out/{tag}{n}.jpg",
        )
        for n in range(count)
    )


def vm_steps(ledger: Ledger, operation: Callable[[], object]) -> int:
    """SQLite VM steps ``operation`` takes on the ledger's connection: the work a statement does,
    whatever the machine's speed."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    own_sqlite_connection(ledger).set_progress_handler(tick, 1)
    try:
        operation()
    finally:
        own_sqlite_connection(ledger).set_progress_handler(None, 1)
    return steps


#: Upright (width, height) of the sources of the ``photos`` fixture.
PHOTO_SIZES = {
    "coffee.png": (600, 400),
    "garden.jpeg": (200, 320),
    "rooms/kitchen.webp": (320, 200),
    "rooms/living.jpg": (1800, 1200),
}

#: (item id, ratio) -> the box [left, top, right, bottom] the ``center`` policy records for
#: the ``photos`` fixture: the largest window of the exact ratio (the full width or the full
#: height of the source, the other side rounded half to even), centred as nearly as whole
#: pixels allow. Worked by hand from PHOTO_SIZES, e.g. coffee 2:3 is 267 (400 * 2/3) wide,
#: left = round(300 - 133.5) = 166.
CENTRED_WINDOWS = {
    ("coffee.png", "1:1"): [100, 0, 500, 400],
    ("coffee.png", "16:9"): [0, 31, 600, 369],
    ("coffee.png", "2:3"): [166, 0, 433, 400],
    ("garden.jpeg", "1:1"): [0, 60, 200, 260],
    ("garden.jpeg", "16:9"): [0, 104, 200, 216],
    ("garden.jpeg", "2:3"): [0, 10, 200, 310],
    ("rooms/kitchen.webp", "1:1"): [60, 0, 260, 200],
    ("rooms/kitchen.webp", "16:9"): [0, 10, 320, 190],
    ("rooms/kitchen.webp", "2:3"): [94, 0, 227, 200],
    ("rooms/living.jpg", "1:1"): [300, 0, 1500, 1200],
    ("rooms/living.jpg", "16:9"): [0, 94, 1800, 1106],
    ("rooms/living.jpg", "2:3"): [500, 0, 1300, 1200],
}


def window_size(box: list[int]) -> tuple[int, int]:
    left, top, right, bottom = box
    return right - left, bottom - top


def new_batch(key: str, digest: str, *, queued: int = 3, failed: int = 0) -> NewBatch:
    """A batch of ``queued`` runnable items and ``failed`` ones that failed at admission, one ratio each."""
    items = [NewItem(f"img{i}.jpg", "1:1", f"/src/img{i}.jpg", "queued", source_digest="d" * 64) for i in range(queued)]
    items += [
        NewItem(f"bad{i}.jpg", "1:1", f"/src/bad{i}.jpg", "failed", error_code="unsupported_format")
        for i in range(failed)
    ]
    return NewBatch(
        idempotency_key=key,
        request_digest=digest,
        source_root="/src",
        out_dir="/out",
        profile={"size": 512},
        items=tuple(items),
    )


def objects_in(store: Path) -> set[Path]:
    """The objects under STORE/objects: every file there but the contact sheet's previews."""
    return {p for p in (store / "objects").rglob("*") if p.is_file() and not p.name.endswith(".preview.jpg")}


def is_copy_of(thumbnail: str | Path, object_path: str | Path) -> bool:
    """Whether a thumbnail is a file of its own (one link, another inode) holding its object's very bytes."""
    thumb, obj = os.lstat(thumbnail), os.lstat(object_path)
    return (
        stat.S_ISREG(thumb.st_mode)
        and thumb.st_nlink == 1
        and (thumb.st_dev, thumb.st_ino) != (obj.st_dev, obj.st_ino)
        and Path(thumbnail).read_bytes() == Path(object_path).read_bytes()
    )


def accept(ledger: Ledger, source: Path, out: Path, **options: Any) -> BatchView:
    """The first step of a submit session (:meth:`thumbctl.engine.session.SubmitSession.accept`):
    ``source`` read and its batch recorded in ``ledger`` with ``SubmitOptions(out_dir=out, **options)``,
    nothing rendered. A ledger with no store beside it (PostgreSQL) keeps its objects beside OUT,
    where the tests' SQLite ledger keeps them (``ledger.store``)."""
    if ledger.backend != "sqlite":
        options.setdefault("store_dir", out.parent / "ledger.store")
    return SubmitSession(ledger.path, SubmitOptions(out_dir=out, **options)).accept(ledger, source)
