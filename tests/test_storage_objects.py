"""The object-store contract (:class:`thumbctl.storage.objects.ObjectStore`).

:class:`ObjectStoreContract` says what every object store does; each implementation runs it
unchanged by subclassing it with a ``store`` fixture (:class:`TestLocalObjectStore` for the local
folder, :class:`TestS3ObjectStore` for a bucket prefix on the test S3 server). Nothing in the
contract looks at paths or inodes: what only the local folder does is
tested in :class:`TestLocalOnly` and ``test_storage_local.py``.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import BinaryIO

import pytest
from PIL import Image

from thumbctl.storage.locations import object_store_at
from thumbctl.storage.objects import LocalObjectStore, ObjectStore, ObjectTooLarge, Published

KEY = "ab" + "1" * 62


def name(key: str = KEY, extension: str = "jpg") -> str:
    return f"{key}.{extension}"


def sound(existing: BinaryIO) -> str | None:
    return None


def damaged(existing: BinaryIO) -> str | None:
    return "does not decode"


def jpeg(colour: tuple[int, int, int] = (200, 80, 40)) -> bytes:
    stream = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(stream, "JPEG")
    return stream.getvalue()


class ObjectStoreContract:
    """What every :class:`ObjectStore` does. Subclasses provide the ``store`` fixture (empty)."""

    def test_put_if_absent_twice_is_a_duplicate_with_the_same_bytes(self, store: ObjectStore) -> None:
        assert store.put(name(), b"pixels", verify=damaged) == Published("created")
        before = store.stat(name())
        assert store.put(name(), b"pixels", verify=damaged) == Published("duplicate")
        assert store.read(name(), 100) == b"pixels"
        assert store.stat(name()) == before

    def test_other_bytes_that_verify_are_kept(self, store: ObjectStore) -> None:
        store.put(name(), b"theirs", verify=damaged)
        published = store.put(name(), b"ours!!", verify=sound)
        assert published == Published("kept") and published.note.startswith("object_mismatch: ")
        assert store.read(name(), 100) == b"theirs"

    def test_other_bytes_that_fail_verification_are_replaced(self, store: ObjectStore) -> None:
        store.put(name(), b"broken", verify=damaged)
        published = store.put(name(), b"sound", verify=damaged)
        assert published.outcome == "replaced" and published.reason == "does not decode"
        assert store.read(name(), 100) == b"sound"

    def test_a_staged_object_is_put_once_and_a_discarded_one_leaves_nothing(self, store: ObjectStore) -> None:
        staged = store.stage(b"pixels", "jpg")
        assert store.put_staged(staged, name(), verify=damaged) == Published("created")
        store.discard(staged)  # already used up: nothing to do
        store.discard(store.stage(b"unused", "jpg"))
        assert list(store.names()) == [name()]

    def test_a_bounded_read_refuses_an_object_over_the_limit(self, store: ObjectStore) -> None:
        store.put(name(), b"x" * 10, verify=damaged)
        assert store.read(name(), 10) == b"x" * 10
        with pytest.raises(ObjectTooLarge):
            store.read(name(), 9)

    def test_reading_a_missing_object_raises_file_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(FileNotFoundError):
            store.read(name(), 10)

    def test_stat_gives_the_size_and_a_version_that_changes_with_the_bytes(self, store: ObjectStore) -> None:
        assert store.stat(name()) is None
        store.put(name(), b"12345", verify=damaged)
        first = store.stat(name())
        assert first is not None and first.size == 5 and first.version
        assert first.checksum == hashlib.sha256(b"12345").hexdigest()
        store.put(name(), b"123456", verify=damaged)  # replaced: the old one "does not decode"
        second = store.stat(name())
        assert second is not None and second.size == 6 and second.version != first.version

    def test_verify_runs_the_check_on_the_content(self, store: ObjectStore) -> None:
        assert store.verify(name(), sound) == "is missing"
        store.put(name(), b"pixels", verify=damaged)
        assert store.verify(name(), lambda stream: None if stream.read() == b"pixels" else "other bytes") is None
        assert store.verify(name(), damaged) == "does not decode"

    def test_names_are_listed_by_prefix(self, store: ObjectStore) -> None:
        keys = ["ab" + "1" * 62, "ab" + "2" * 62, "cd" + "3" * 62]
        for key in keys:
            store.put(name(key), b"x", verify=damaged)
        store.put(name(keys[0], "webp"), b"x", verify=damaged)
        assert list(store.names()) == sorted([*map(name, keys), name(keys[0], "webp")])
        assert list(store.names("ab")) == sorted([name(keys[0]), name(keys[0], "webp"), name(keys[1])])
        assert list(store.names("ab" + "2")) == [name(keys[1])]
        assert list(store.names("ef")) == []

    def test_remove_takes_the_object_and_its_preview(self, store: ObjectStore) -> None:
        store.put(name(), b"12345", verify=damaged)
        store.write_preview(name(), jpeg)
        assert store.remove(name()) >= 5
        assert store.stat(name()) is None and list(store.names()) == []
        assert store.read_preview(name()) is None
        assert store.remove(name()) == 0

    def test_a_preview_is_written_once_and_read_back_whole(self, store: ObjectStore) -> None:
        store.put(name(), b"pixels", verify=damaged)
        assert store.read_preview(name()) is None
        store.write_preview(name(), jpeg)
        made: list[bytes] = []
        store.write_preview(name(), lambda: made.append(b"") or jpeg((0, 0, 0)))
        assert made == [] and store.read_preview(name()) == jpeg()
        assert store.read_preview(name(), limit=10) is None
        assert list(store.names()) == [name()]  # a preview is no object

    def test_the_listing_names_every_object_and_a_removal_frees_at_least_its_size(self, store: ObjectStore) -> None:
        keys = ["ab" + "1" * 62, "cd" + "3" * 62]
        for key in keys:
            store.put(name(key), b"12345", verify=damaged)
        listed = dict(store.listing())
        assert sorted(listed) == sorted(map(name, keys))
        assert all(size in (None, 5) for size in listed.values())
        assert store.freed_by_removing(name(keys[0]), listed[name(keys[0])]) == 5
        assert store.freed_by_removing(name("ef" + "4" * 62), None) == 0
        assert store.temp_files() == []  # nothing is being written

    def test_a_peek_knows_the_size_and_a_stamp_or_a_checksum_without_reading(self, store: ObjectStore) -> None:
        assert store.peek(name()) is None
        store.put(name(), b"12345", verify=damaged)
        peek = store.peek(name())
        assert peek is not None and peek.size == 5 and peek.plain
        assert peek.stamp is not None or peek.checksum == hashlib.sha256(b"12345").hexdigest()

    def test_a_root_file_is_created_once_and_never_replaced(self, store: ObjectStore) -> None:
        assert store.read_root_file("ledger-id", 100) is None
        assert store.create_root_file("ledger-id", b"first\n") is True
        assert store.create_root_file("ledger-id", b"second\n") is False
        assert store.read_root_file("ledger-id", 100) == b"first\n"


class TestLocalObjectStore(ObjectStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> ObjectStore:
        return LocalObjectStore(str(tmp_path / "store"))


class TestS3ObjectStore(ObjectStoreContract):
    @pytest.fixture
    def store(self, s3_url: str) -> ObjectStore:
        return object_store_at(s3_url)


class TestLocalOnly:
    """What only the local folder does: its layout, and symlinks."""

    def test_objects_lie_in_shards_by_key_and_previews_beside_them(self, tmp_path: Path) -> None:
        store = LocalObjectStore(str(tmp_path))
        store.put(name(), b"x", verify=damaged)
        store.write_preview(name(), jpeg)
        assert store.object_path(KEY, "jpg") == store.path_of(name()) == f"{tmp_path}/objects/ab/{name()}"
        assert os.path.isfile(store.preview_path(store.path_of(name())))
        assert LocalObjectStore.of_object(store.path_of(name())) == store
        assert not os.path.exists(store.tmp_dir) or os.listdir(store.tmp_dir) == []

    def test_a_symlink_at_an_object_is_never_read_through(self, tmp_path: Path) -> None:
        store = LocalObjectStore(str(tmp_path / "store"))
        secret = tmp_path / "secret"
        secret.write_bytes(b"secret")
        os.makedirs(os.path.dirname(store.path_of(name())))
        os.symlink(secret, store.path_of(name()))
        assert store.verify(name(), sound) is not None
        with pytest.raises(OSError):
            store.read(name(), 100)
        assert store.put(name(), b"pixels", verify=sound) == Published("replaced", "was not a regular file")
        assert secret.read_bytes() == b"secret" and store.read(name(), 100) == b"pixels"
