"""The output-target contract (:class:`thumbctl.storage.outputs.OutputTarget`).

:class:`OutputTargetContract` says what every output target does; each implementation runs it
unchanged by subclassing it with a ``target`` fixture and a ``plant`` fixture (puts a file at a
name the way a user would, behind thumbctl's back). :class:`TestLocalOutputTarget` runs it on the
local folder and :class:`TestS3OutputTarget` on a bucket prefix of the test S3 server; what only
the local folder does (symlinks, temp files, judging names recorded before versions by their
bytes) is in :class:`TestLocalOnly`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from thumbctl.core.errors import ItemFailure
from thumbctl.storage.locations import output_target_at, parse_s3
from thumbctl.storage.objects import LocalObjectStore, Source
from thumbctl.storage.outputs import LocalOutputTarget, NameState, OutputTarget, Recorded, StaleVersion
from thumbctl.storage.publishing import NamePublished, publish_at

from s3 import WeedServer, put_raw, raw_store

Plant = Callable[[str, bytes], None]
NAME = "rooms/sofa.1x1.jpg"


class OutputTargetContract:
    """What every :class:`OutputTarget` does. Subclasses provide ``target`` (empty) and ``plant``."""

    def test_a_name_is_free_ours_or_taken(self, target: OutputTarget, plant: Plant) -> None:
        assert target.name_state(NAME, []) == NameState.FREE
        version = target.publish(NAME, b"ours")
        assert target.name_state(NAME, [Recorded(version)]) == NameState.OURS
        assert target.name_state(NAME, [Recorded("another version")]) == NameState.TAKEN
        assert target.name_state(NAME, []) == NameState.TAKEN
        plant("user.jpg", b"ours")
        assert target.name_state("user.jpg", [Recorded(version)]) == NameState.TAKEN

    def test_publish_returns_the_version_and_never_overwrites(self, target: OutputTarget, plant: Plant) -> None:
        version = target.publish(NAME, b"first")
        assert version and target.version_of(NAME) == version
        with pytest.raises(FileExistsError):
            target.publish(NAME, b"second")
        assert target.read(NAME, 100) == b"first" and target.version_of(NAME) == version
        plant("user.jpg", b"a user's file")
        with pytest.raises(FileExistsError):
            target.publish("user.jpg", b"ours")
        assert target.read("user.jpg", 100) == b"a user's file"

    def test_replace_needs_the_recorded_version(self, target: OutputTarget) -> None:
        first = target.publish(NAME, b"first")
        second = target.replace(NAME, b"second", version=first)
        assert second != first and target.read(NAME, 100) == b"second"
        with pytest.raises(StaleVersion):
            target.replace(NAME, b"third", version=first)  # stale: the name moved on since
        assert target.read(NAME, 100) == b"second" and target.version_of(NAME) == second

    def test_a_users_file_is_never_replaced_or_removed(self, target: OutputTarget, plant: Plant) -> None:
        ours = target.publish(NAME, b"ours")
        plant(NAME, b"edited by the user")
        with pytest.raises(StaleVersion):
            target.replace(NAME, b"ours again", version=ours)
        assert target.remove(NAME, version=ours) is False
        assert target.read(NAME, 100) == b"edited by the user"
        assert target.name_state(NAME, [Recorded(ours)]) == NameState.TAKEN

    def test_replacing_a_name_that_is_gone_raises_file_not_found(self, target: OutputTarget) -> None:
        with pytest.raises(FileNotFoundError):
            target.replace(NAME, b"x", version="never published")

    def test_remove_only_our_own(self, target: OutputTarget) -> None:
        version = target.publish(NAME, b"ours")
        assert target.remove(NAME, version="another version") is False
        assert target.read(NAME, 100) == b"ours"
        assert target.remove(NAME, version=version) is True
        assert target.read(NAME, 100) is None and target.version_of(NAME) is None
        assert target.name_state(NAME, [Recorded(version)]) == NameState.FREE
        assert target.remove(NAME, version=version) is False

    def test_removing_our_own_leaves_the_other_names_and_an_edited_one(
        self, target: OutputTarget, plant: Plant
    ) -> None:
        """What the mirror mode relies on: remove our own by version, never what changed since."""
        kept = target.publish("rooms/chair.1x1.jpg", b"chair")
        edited = target.publish(NAME, b"sofa")
        plant(NAME, b"retouched")
        assert target.remove(NAME, version=edited) is False
        assert target.read(NAME, 100) == b"retouched"
        assert target.remove("rooms/chair.1x1.jpg", version=kept) is True
        assert list(target.names()) == [NAME]

    def test_a_name_is_read_back_within_a_bound(self, target: OutputTarget) -> None:
        assert target.read(NAME, 100) is None
        target.publish(NAME, b"12345")
        assert target.read(NAME, 5) == b"12345"
        assert target.read(NAME, 4) is None

    def test_names_are_listed_by_prefix_without_documents(self, target: OutputTarget, plant: Plant) -> None:
        for each in ("a.1x1.jpg", "rooms/sofa.1x1.jpg", "rooms/chair.1x1.jpg"):
            target.publish(each, b"x")
        plant("notes.txt", b"a user's file")
        target.write_document("batches/b_1.json", b"{}\n")
        assert list(target.names()) == ["a.1x1.jpg", "notes.txt", "rooms/chair.1x1.jpg", "rooms/sofa.1x1.jpg"]
        assert list(target.names("rooms/")) == ["rooms/chair.1x1.jpg", "rooms/sofa.1x1.jpg"]
        assert list(target.names("zzz")) == []

    def test_documents_are_written_whole_and_replaced_whole(self, target: OutputTarget) -> None:
        assert target.read_document("batches/b_1.json", 1 << 20) is None
        target.write_document("batches/b_1.json", b'{"v": 1}\n')
        assert target.read_document("batches/b_1.json", 1 << 20) == b'{"v": 1}\n'
        big = b"<p>x</p>" * 10_000
        target.write_document("batches/b_1.html", big)
        target.write_document("batches/b_1.json", b'{"v": 2}\n')
        assert target.read_document("batches/b_1.json", 1 << 20) == b'{"v": 2}\n'
        assert target.read_document("batches/b_1.html", 1 << 20) == big
        assert list(target.names()) == []

    def test_a_document_is_sized_and_removed(self, target: OutputTarget) -> None:
        assert target.document_size("batches/b_1.json") is None
        assert target.remove_document("batches/b_1.json") == 0
        target.write_document("batches/b_1.json", b"12345")
        assert target.document_size("batches/b_1.json") == 5
        assert target.remove_document("batches/b_1.json") == 5
        assert target.document_size("batches/b_1.json") is None and target.read_document("batches/b_1.json", 9) is None

    def test_a_batch_page_goes_to_its_batches_folder_whole(self, target: OutputTarget) -> None:
        page = target.page_path("b_1", None)
        assert page == f"{target.root}/batches/b_1.html"
        target.write_page(page, "<p>sofa</p>", create_folder=True)
        assert target.read_document("batches/b_1.html", 100) == b"<p>sofa</p>"

    def test_the_name_rules_are_the_same_on_every_target(self, target: OutputTarget, plant: Plant) -> None:
        recorded: list[Recorded] = []

        def publish(data: bytes, *, overwrite: bool = False) -> NamePublished:
            source = Source(lambda: data)
            return publish_at(target, NAME, NAME, source, recorded=lambda: recorded, overwrite=overwrite)

        first = publish(b"one")
        assert first.outcome == "created" and target.version_of(NAME) == first.version
        recorded.append(Recorded(first.version))
        assert publish(b"one") == NamePublished("unchanged", first.version)
        second = publish(b"two")
        assert second.outcome == "replaced" and target.read(NAME, 100) == b"two"
        recorded.append(Recorded(second.version))
        plant(NAME, b"a user's edit")
        with pytest.raises(ItemFailure, match="thumbctl did not publish"):
            publish(b"three")
        assert target.read(NAME, 100) == b"a user's edit"
        assert publish(b"three", overwrite=True).outcome == "overwritten"
        assert target.read(NAME, 100) == b"three"
        assert target.occupied(NAME) and not target.occupied("rooms/nothing.1x1.jpg")


class TestLocalOutputTarget(OutputTargetContract):
    @pytest.fixture
    def target(self, tmp_path: Path) -> OutputTarget:
        return LocalOutputTarget(str(tmp_path / "out"))

    @pytest.fixture
    def plant(self, tmp_path: Path) -> Plant:
        def plant(name: str, data: bytes) -> None:
            path = tmp_path / "out" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            path.write_bytes(data)

        return plant


class TestS3OutputTarget(OutputTargetContract):
    @pytest.fixture
    def target(self, s3_url: str) -> OutputTarget:
        return output_target_at(s3_url)

    @pytest.fixture
    def plant(self, s3_server: WeedServer, s3_url: str) -> Plant:
        bucket = raw_store(s3_server)

        def plant(name: str, data: bytes) -> None:
            put_raw(bucket, parse_s3(s3_url).key(name), data)

        return plant


class TestLocalOnly:
    """What only the local folder does: versions from inodes, names recorded before versions judged by
    bytes, temp files, symlinks."""

    @pytest.fixture
    def target(self, tmp_path: Path) -> LocalOutputTarget:
        return LocalOutputTarget(str(tmp_path / "out"))

    def test_the_version_is_the_digest_and_the_inode(self, target: LocalOutputTarget) -> None:
        version = target.publish(NAME, b"ours")
        digest, inode = version.split(":")
        assert len(digest) == 64 and int(inode) == os.stat(target.path_of(NAME)).st_ino
        copy = target.path_of(NAME) + ".copy"
        os.link(target.path_of(NAME), copy)
        os.replace(copy, target.path_of(NAME))  # the same file under the name again: the same version
        assert target.version_of(NAME) == version

    def test_the_same_bytes_in_another_file_are_not_ours_by_version(self, target: LocalOutputTarget) -> None:
        version = target.publish(NAME, b"ours")
        copy = Path(target.path_of(NAME) + ".copy")
        copy.write_bytes(b"ours")  # made while the published file still holds its inode
        os.replace(copy, target.path_of(NAME))  # a copy put back: another inode
        assert target.name_state(NAME, [Recorded(version)]) == NameState.TAKEN

    def test_a_name_recorded_before_versions_is_ours_by_its_bytes(
        self, tmp_path: Path, target: LocalOutputTarget
    ) -> None:
        store = LocalObjectStore(str(tmp_path / "store"))
        store.put("ab" + "1" * 62 + ".jpg", b"object bytes", verify=lambda existing: None)
        old = Recorded(None, store.path_of("ab" + "1" * 62 + ".jpg"))
        Path(target.root).mkdir()
        Path(target.path_of("old.jpg")).write_bytes(b"object bytes")
        assert target.name_state("old.jpg", [old]) == NameState.OURS
        Path(target.path_of("old.jpg")).write_bytes(b"edited bytes")
        assert target.name_state("old.jpg", [old]) == NameState.TAKEN

    def test_writes_leave_no_temp_folder_behind_documents(self, target: LocalOutputTarget) -> None:
        target.write_document("batches/b_1.json", b"{}\n")
        first = os.stat(target.path_of("batches/b_1.json")).st_ino
        target.write_document("batches/b_1.json", b"{}\n")
        assert os.stat(target.path_of("batches/b_1.json")).st_ino != first  # a rename, never a write in place
        assert not os.path.exists(target.tmp_dir)

    def test_removing_the_last_name_of_a_folder_removes_the_folder(self, target: LocalOutputTarget) -> None:
        version = target.publish("rooms/sofa/front.1x1.jpg", b"front")
        target.write_document("batches/b_1.json", b"{}\n")
        assert target.remove("rooms/sofa/front.1x1.jpg", version=version) is True
        assert sorted(os.listdir(target.root)) == ["batches"]  # rooms/sofa and rooms went, OUT and batches stay

    def test_a_symlink_at_a_name_is_taken_and_never_followed(self, tmp_path: Path, target: LocalOutputTarget) -> None:
        secret = tmp_path / "secret"
        secret.write_bytes(b"secret")
        Path(target.root).mkdir()
        os.symlink(secret, target.path_of("link.jpg"))
        assert target.name_state("link.jpg", [Recorded(None, str(secret))]) == NameState.TAKEN
        assert target.read("link.jpg", 100) is None and target.version_of("link.jpg") is None
        with pytest.raises(FileExistsError):
            target.publish("link.jpg", b"ours")
        assert list(target.names()) == [] and secret.read_bytes() == b"secret"
