"""file_io: atomic whole-file replacement and directory fsync, including failures at each step."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.errors import KafkaStorageError
from storage.file_io import fsync_dir, write_atomically
from storage.file_names import tmp_file


def recording_fsync(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the path behind every fsynced descriptor, in call order."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_write_replaces_the_content_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    write_atomically(path, b"old")
    inode = path.stat().st_ino
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert path.stat().st_ino != inode, "replaced by a rename, never rewritten in place"
    assert not tmp_file(path).exists()


def test_write_fsyncs_the_tmp_file_then_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = recording_fsync(monkeypatch)
    path = tmp_path / "checkpoint"
    write_atomically(path, b"0\n0\n")
    assert synced == [str(tmp_file(path)), str(tmp_path)]


def test_failed_rename_keeps_the_old_file_and_removes_the_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint"
    write_atomically(path, b"old")

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(KafkaStorageError, match="failed to write checkpoint") as info:
        write_atomically(path, b"new")
    monkeypatch.undo()
    assert info.value.path == str(path)
    assert isinstance(info.value.__cause__, OSError)
    assert path.read_bytes() == b"old"
    assert not tmp_file(path).exists()


def test_write_into_a_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "checkpoint"
    with pytest.raises(KafkaStorageError) as info:
        write_atomically(path, b"x")
    assert info.value.path == str(path)


def test_fsync_dir_syncs_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = recording_fsync(monkeypatch)
    fsync_dir(tmp_path)
    assert synced == [str(tmp_path)]


@pytest.mark.parametrize("name", ["absent", "a-file"])
def test_fsync_dir_of_a_missing_or_non_directory_is_a_storage_error(tmp_path: Path, name: str) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(KafkaStorageError, match="cannot fsync directory") as info:
        fsync_dir(tmp_path / name)
    assert info.value.path == str(tmp_path / name)
    assert isinstance(info.value.__cause__, OSError)
