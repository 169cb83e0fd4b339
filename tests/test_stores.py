"""A ledger and its store: where the store is by default, which ledger it belongs to, and how a thumbnail is made
its own file (a reflink, else a copy)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.core.errors import StoreRequired, StoreTaken, UsageError
from thumbctl.publishing.stores import bind_store, default_store_for, resolve_store, store_for_ledger
from thumbctl.storage.fsafe import clone_file
from thumbctl.storage.objects import LocalObjectStore
from thumbctl.storage.ownership import LEDGER_ID_FILE, store_owner


@pytest.mark.parametrize(
    ("ledger", "store"),
    [
        ("/x/ledger.db", "/x/ledger.store"),
        ("/x/ledger", "/x/ledger.store"),
        ("/x/jobs.sqlite3", "/x/jobs.store"),
        ("/x/a.store", "/x/a.store.store"),  # never the ledger itself
    ],
)
def test_the_default_store_is_beside_a_sqlite_ledger(ledger: str, store: str) -> None:
    assert default_store_for(Path(ledger)) == Path(store)
    assert default_store_for(ledger) == Path(store)


def test_a_postgresql_ledger_has_no_default_store() -> None:
    url = "postgresql://u@db.example/thumbs"
    assert default_store_for(url) is None
    with pytest.raises(StoreRequired) as raised:
        resolve_store(None, url)
    assert raised.value.code == "store_required" and raised.value.exit_code == 2
    assert resolve_store(Path("/srv/store"), url) == Path("/srv/store")


def test_a_store_records_its_ledger_and_the_ledger_its_store(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        layout = store_for_ledger(ledger, None)
        assert layout == LocalObjectStore(str(tmp_path / "ledger.store"))
        assert store_owner(layout) == (ledger.upkeep.ledger_id(), str(tmp_path / "ledger.db"))
        assert ledger.upkeep.recorded_store() == layout.root
        assert bind_store(ledger, Path(layout.root)) == layout  # again: the same owner, nothing changes
        ledger_id = ledger.upkeep.ledger_id()
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert ledger.upkeep.ledger_id() == ledger_id  # stable across opens
    assert (tmp_path / "ledger.store" / LEDGER_ID_FILE).read_text().splitlines()[0] == ledger_id


def test_a_store_of_another_ledger_is_refused_naming_both(tmp_path: Path) -> None:
    store = tmp_path / "shared"
    with Ledger(tmp_path / "one.db") as one, Ledger(tmp_path / "two.db") as two:
        bind_store(one, store)
        before = (store / LEDGER_ID_FILE).read_bytes()
        with pytest.raises(StoreTaken) as raised:
            bind_store(two, store)
        message = raised.value.message
        assert raised.value.code == "store_taken" and raised.value.exit_code == 2
        assert one.upkeep.ledger_id() in message and two.upkeep.ledger_id() in message
        assert str(tmp_path / "one.db") in message and str(tmp_path / "two.db") in message
        assert (store / LEDGER_ID_FILE).read_bytes() == before and two.upkeep.recorded_store() is None
        assert one.upkeep.ledger_id() != two.upkeep.ledger_id()


def test_without_a_store_given_the_ledger_keeps_the_store_it_recorded(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        given = store_for_ledger(ledger, tmp_path / "elsewhere")
        assert store_for_ledger(ledger, None) == given == LocalObjectStore(str(tmp_path / "elsewhere"))
        assert ledger.upkeep.recorded_store() == given.root and not (tmp_path / "ledger.store").exists()
        assert store_for_ledger(ledger, tmp_path / "moved").root == str(tmp_path / "moved")  # a given one wins


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"xyz garbage\n", b"\x1b]0;owned\x07\x1b[2J" + bytes(range(256)), b"a" * 32 + b"\n" * 5000, b"A" * 32],
    ids=["empty", "blank-line", "not-an-id", "control-codes", "huge", "upper-case"],
)
def test_a_ledger_id_file_that_holds_no_ledger_id_is_refused_plainly(tmp_path: Path, content: bytes) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / LEDGER_ID_FILE).write_bytes(content)
    with Ledger(tmp_path / "ledger.db") as ledger, pytest.raises(UsageError) as raised:
        bind_store(ledger, store)
    assert raised.value.code == "bad_store"
    unreadable = f"{store}/{LEDGER_ID_FILE} is not a readable ledger id"
    assert raised.value.message == f"--store {store} cannot be used: {unreadable}"
    assert (store / LEDGER_ID_FILE).read_bytes() == content


def test_the_place_of_the_owning_ledger_is_shown_short_and_without_control_characters(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / LEDGER_ID_FILE).write_bytes(b"0" * 32 + b"\n/srv/\x1b[31mred\x1b[0m" + b"x" * 3000 + b"\n")
    with Ledger(tmp_path / "ledger.db") as ledger, pytest.raises(StoreTaken) as raised:
        bind_store(ledger, store)
    assert f"belongs to ledger {'0' * 32} (/srv/?[31mred?[0mxxx" in raised.value.message
    assert raised.value.message.isprintable() and "x" * 290 not in raised.value.message


#: statfs(2)'s ``f_type`` of the file systems without reflinks (``stat -f`` names them ext2/ext3, tmpfs):
#: ext2, ext3 and ext4 share one magic number.
NO_REFLINK = {0xEF53: "ext2/ext3", 0x01021994: "tmpfs"}


def filesystem_magic(path: Path) -> int:
    """The ``f_type`` of the file system holding ``path`` (statfs(2), as ``stat -f`` reads it)."""
    buffer = ctypes.create_string_buffer(256)  # a struct statfs, f_type its first field
    assert ctypes.CDLL(None, use_errno=True).statfs(bytes(path), buffer) == 0, os.strerror(ctypes.get_errno())
    return ctypes.c_long.from_buffer(buffer).value


@pytest.mark.parametrize("size", [0, 1, 70_000, (1 << 20) + 3])
def test_a_thumbnail_is_a_reflink_where_the_filesystem_can_else_a_copy(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "object").write_bytes(data)
    src = os.open(tmp_path / "object", os.O_RDONLY)
    dst = os.open(tmp_path / "thumbnail", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        how = clone_file(src, dst, size)
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "thumbnail").read_bytes() == data
    assert os.stat(tmp_path / "thumbnail").st_ino != os.stat(tmp_path / "object").st_ino
    if filesystem_magic(tmp_path) in NO_REFLINK:
        assert how == "copy"
    else:
        assert how in ("reflink", "copy")
