"""LogDirs on its own: locking, meta.properties identity, clean-shutdown markers, checkpoint files, partition
folder listing, placement order, offline dirs and delayed `-delete` folder removal. No logs are opened here: that is
LogManager's part (test_log_manager.py).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import MockClock
from storage.errors import CorruptCheckpointError, KafkaStorageError, LogDirLockedError
from storage.files import clean_shutdown
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.files.log_dir_lock import LogDirLock
from storage.files.meta_properties import MetaProperties, read_meta_properties, write_meta_properties
from storage.logdir.log_dirs import LogDirs

CLUSTER_ID = "XB4QhweWTe-kZwMNW25y1A"
OTHER_CLUSTER_ID = "OtherClusterAAAAAAAAAAA"
NODE_ID = 1
DELETE_DELAY_MS = 5_000
MARKER_BYTES = b'{"version":0,"brokerEpoch":-1}'


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is written is checked here, not its durability (test_checkpoint_file covers the write protocol)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "data" / name for name in ("d0", "d1", "d2")]


class Owner:
    """Stands for the logs' owner: records the dirs `on_offline` reported, in order."""

    def __init__(self) -> None:
        self.offline: list[Path] = []

    def on_offline(self, directory: Path) -> None:
        self.offline.append(directory)


@pytest.fixture
def owner() -> Owner:
    return Owner()


def new_dirs(dirs: list[Path], clock: MockClock, owner: Owner | None = None, **overrides: object) -> LogDirs:
    options: dict[str, object] = {
        "clock": clock,
        "cluster_id": CLUSTER_ID,
        "node_id": NODE_ID,
        "file_delete_delay_ms": DELETE_DELAY_MS,
        "on_offline": owner.on_offline if owner is not None else None,
    }
    options.update(overrides)
    return LogDirs(dirs, **options)  # type: ignore[arg-type]


@pytest.fixture
def started(dirs: list[Path], clock: MockClock, owner: Owner) -> Iterator[LogDirs]:
    log_dirs = new_dirs(dirs, clock, owner)
    log_dirs.startup()
    yield log_dirs
    log_dirs.release_all()


def is_locked(directory: Path) -> bool:
    try:
        LogDirLock(directory).release()
    except LogDirLockedError:
        return True
    return False


def write_meta(directory: Path, meta: MetaProperties) -> bytes:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_names.META_PROPERTIES
    write_meta_properties(path, meta)
    return path.read_bytes()


# --- locking ---------------------------------------------------------------------------------------


def test_a_second_owner_is_refused_until_release_all(dirs: list[Path], tmp_path: Path, clock: MockClock) -> None:
    first = new_dirs(dirs[:2], clock)
    first.startup()
    assert first.started
    assert all(is_locked(d) for d in dirs[:2])
    other = tmp_path / "other"
    second = new_dirs([other, dirs[1]], clock)
    with pytest.raises(LogDirLockedError) as info:
        second.startup()
    assert info.value.path == str(dirs[1] / file_names.LOCK_FILE)
    assert not second.started
    assert not is_locked(other), "a failed startup must release the dirs it had locked"
    first.release_all()
    assert not first.started
    assert not any(is_locked(d) for d in dirs[:2])
    assert [loaded.path for loaded in second.startup()] == [other, dirs[1]]
    second.release_all()


def test_startup_runs_once_per_release_all(dirs: list[Path], clock: MockClock, owner: Owner) -> None:
    log_dirs = new_dirs(dirs, clock, owner)
    log_dirs.startup()
    log_dirs.take_offline(dirs[0], "disk gone")
    with pytest.raises(KafkaStorageError, match="already started"):
        log_dirs.startup()
    assert all(is_locked(d) for d in dirs[1:]), "a refused second startup keeps the first one's locks"
    log_dirs.release_all()
    log_dirs.release_all()
    assert log_dirs.offline_dirs == {}
    assert [loaded.path for loaded in log_dirs.startup()] == dirs
    assert log_dirs.online_dirs == dirs
    log_dirs.release_all()


def test_bad_log_dir_lists_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError, match="no log dirs"):
        LogDirs([])
    with pytest.raises(KafkaStorageError, match="duplicate log dirs"):
        LogDirs([tmp_path / "a", tmp_path / "b" / ".." / "a"])


# --- meta.properties -------------------------------------------------------------------------------


def test_meta_properties_are_written_once_with_one_directory_id_per_dir(dirs: list[Path], clock: MockClock) -> None:
    log_dirs = new_dirs(dirs, clock)
    log_dirs.startup()
    metas = [read_meta_properties(d / file_names.META_PROPERTIES) for d in dirs]
    assert {(m.version, m.cluster_id, m.node_id) for m in metas} == {(1, CLUSTER_ID, NODE_ID)}
    directory_ids = [m.directory_id for m in metas]
    assert None not in directory_ids and len(set(directory_ids)) == len(dirs)
    log_dirs.release_all()
    again = new_dirs(dirs, clock)
    again.startup()
    assert [read_meta_properties(d / file_names.META_PROPERTIES).directory_id for d in dirs] == directory_ids
    again.release_all()


@pytest.mark.parametrize(
    ("meta", "reason"),
    [
        (MetaProperties(version=1, cluster_id=OTHER_CLUSTER_ID, node_id=NODE_ID), f"cluster {OTHER_CLUSTER_ID}"),
        (MetaProperties(version=1, cluster_id=CLUSTER_ID, node_id=7), "node 7"),
        (MetaProperties(version=0, cluster_id=CLUSTER_ID, node_id=7), "node 7"),
    ],
)
def test_dir_of_another_cluster_or_node_goes_offline_untouched(
    dirs: list[Path], clock: MockClock, owner: Owner, meta: MetaProperties, reason: str
) -> None:
    foreign = dirs[1]
    before = write_meta(foreign, meta)
    clean_shutdown.write_clean_shutdown_marker(foreign)
    log_dirs = new_dirs(dirs, clock, owner)
    assert [loaded.path for loaded in log_dirs.startup()] == [dirs[0], dirs[2]]
    assert list(log_dirs.offline_dirs) == [foreign]
    assert reason in log_dirs.offline_dirs[foreign]
    assert owner.offline == [foreign]
    assert not is_locked(foreign), "an offline dir is left to its owner"
    assert log_dirs.online_dirs == [dirs[0], dirs[2]]
    log_dirs.write_clean_shutdown_markers(dirs)
    log_dirs.release_all()
    assert (foreign / file_names.META_PROPERTIES).read_bytes() == before
    assert (foreign / file_names.CLEAN_SHUTDOWN_FILE).exists(), "its marker is not ours to delete"


def test_configured_cluster_id_is_kept_and_refuses_dirs_of_another(dirs: list[Path], clock: MockClock) -> None:
    write_meta(dirs[0], MetaProperties(version=1, cluster_id=OTHER_CLUSTER_ID, node_id=NODE_ID))
    log_dirs = new_dirs(dirs[:2], clock)
    log_dirs.startup()
    assert log_dirs.cluster_id == CLUSTER_ID
    assert list(log_dirs.offline_dirs) == [dirs[0]]
    assert read_meta_properties(dirs[1] / file_names.META_PROPERTIES).cluster_id == CLUSTER_ID
    log_dirs.release_all()


def test_cluster_id_is_adopted_from_the_first_readable_meta_properties(dirs: list[Path], clock: MockClock) -> None:
    # d0 is new, d1 unreadable, d2 holds the id: the new dir must get d2's id, not a random one.
    dirs[1].mkdir(parents=True)
    (dirs[1] / file_names.META_PROPERTIES).write_text("version=9\n", "utf-8")
    write_meta(dirs[2], MetaProperties(version=1, cluster_id=OTHER_CLUSTER_ID, node_id=NODE_ID))
    log_dirs = new_dirs(dirs, clock, cluster_id=None)
    # An unreadable meta.properties is fatal, not an offline dir: the operator must look at it.
    with pytest.raises(CorruptCheckpointError):
        log_dirs.startup()
    assert log_dirs.cluster_id == OTHER_CLUSTER_ID
    assert not any(is_locked(d) for d in dirs)
    shutil.rmtree(dirs[1])
    log_dirs.startup()
    assert log_dirs.offline_dirs == {}
    assert {read_meta_properties(d / file_names.META_PROPERTIES).cluster_id for d in dirs} == {OTHER_CLUSTER_ID}
    log_dirs.release_all()


def test_without_any_cluster_id_one_new_id_is_written_to_every_dir(dirs: list[Path], clock: MockClock) -> None:
    log_dirs = new_dirs(dirs, clock, cluster_id=None)
    log_dirs.startup()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", log_dirs.cluster_id)
    assert {read_meta_properties(d / file_names.META_PROPERTIES).cluster_id for d in dirs} == {log_dirs.cluster_id}
    log_dirs.release_all()


def test_startup_fails_and_unlocks_when_every_dir_is_offline(dirs: list[Path], clock: MockClock) -> None:
    write_meta(dirs[0], MetaProperties(version=1, cluster_id=CLUSTER_ID, node_id=7))
    dirs[1].parent.mkdir(parents=True, exist_ok=True)
    dirs[1].write_bytes(b"not a directory")
    log_dirs = new_dirs(dirs[:2], clock)
    with pytest.raises(KafkaStorageError, match=r"every log dir is offline .*node 7, this broker is node 1"):
        log_dirs.startup()
    assert not log_dirs.started
    assert log_dirs.offline_dirs == {}
    assert not is_locked(dirs[0])
    assert dirs[1].read_bytes() == b"not a directory"


# --- clean-shutdown markers ------------------------------------------------------------------------


def test_startup_deletes_the_marker_and_reports_it_per_dir(dirs: list[Path], clock: MockClock) -> None:
    dirs[0].mkdir(parents=True)
    clean_shutdown.write_clean_shutdown_marker(dirs[0])
    log_dirs = new_dirs(dirs, clock)
    loaded = log_dirs.startup()
    assert [(found.path, found.had_clean_shutdown) for found in loaded] == [
        (dirs[0], True),
        (dirs[1], False),
        (dirs[2], False),
    ]
    assert not any((d / file_names.CLEAN_SHUTDOWN_FILE).exists() for d in dirs), "a crash now must count as unclean"
    log_dirs.release_all()


def test_markers_are_written_only_to_dirs_loaded_cleanly_and_still_online(
    started: LogDirs, dirs: list[Path], owner: Owner
) -> None:
    started.take_offline(dirs[1], "disk gone")
    started.mark_load_failed(dirs[2])
    started.write_clean_shutdown_markers(dirs)
    assert (dirs[0] / file_names.CLEAN_SHUTDOWN_FILE).read_bytes() == MARKER_BYTES
    assert not (dirs[1] / file_names.CLEAN_SHUTDOWN_FILE).exists()
    assert not (dirs[2] / file_names.CLEAN_SHUTDOWN_FILE).exists()
    assert owner.offline == [dirs[1]]


def test_a_marker_that_cannot_be_written_takes_its_dir_offline(
    started: LogDirs, dirs: list[Path], owner: Owner
) -> None:
    (dirs[0] / file_names.CLEAN_SHUTDOWN_FILE).mkdir()
    started.write_clean_shutdown_markers(dirs)
    assert list(started.offline_dirs) == [dirs[0]]
    assert owner.offline == [dirs[0]]
    assert [(d / file_names.CLEAN_SHUTDOWN_FILE).is_file() for d in dirs] == [False, True, True]


# --- checkpoints -----------------------------------------------------------------------------------


def test_startup_reads_the_checkpoints_of_each_dir(dirs: list[Path], clock: MockClock) -> None:
    dirs[0].mkdir(parents=True)
    expected = {
        file_names.RECOVERY_POINT_CHECKPOINT: {("t", 0): 7, ("t", 2): 3},
        file_names.LOG_START_OFFSET_CHECKPOINT: {("t", 0): 2},
    }
    for name, offsets in expected.items():
        OffsetCheckpointFile(dirs[0] / name).write(offsets)
    log_dirs = new_dirs(dirs[:2], clock)
    first, second = log_dirs.startup()
    assert first.recovery_points == expected[file_names.RECOVERY_POINT_CHECKPOINT]
    assert first.log_start_offsets == expected[file_names.LOG_START_OFFSET_CHECKPOINT]
    assert (second.recovery_points, second.log_start_offsets) == ({}, {})
    log_dirs.release_all()


def test_an_unreadable_checkpoint_reads_as_empty_with_a_warning(
    dirs: list[Path], clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    dirs[0].mkdir(parents=True)
    (dirs[0] / file_names.RECOVERY_POINT_CHECKPOINT).write_text("0\n2\nt 0 6\n", "utf-8")  # says 2, holds 1
    OffsetCheckpointFile(dirs[0] / file_names.LOG_START_OFFSET_CHECKPOINT).write({("t", 0): 4})
    log_dirs = new_dirs(dirs[:1], clock)
    with caplog.at_level(logging.WARNING, logger="storage.logdir.log_dirs"):
        (loaded,) = log_dirs.startup()
    assert loaded.recovery_points == {}
    assert loaded.log_start_offsets == {("t", 0): 4}
    assert log_dirs.offline_dirs == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and file_names.RECOVERY_POINT_CHECKPOINT in warnings[0]
    log_dirs.release_all()


def test_write_checkpoint_replaces_the_file_in_kafkas_text_format(started: LogDirs, dirs: list[Path]) -> None:
    path = dirs[1] / file_names.RECOVERY_POINT_CHECKPOINT
    assert started.write_checkpoint(dirs[1], file_names.RECOVERY_POINT_CHECKPOINT, {("t", 1): 7, ("a.b", 0): 5})
    assert path.read_text("utf-8") == "0\n2\nt 1 7\na.b 0 5\n"
    inode = path.stat().st_ino
    assert started.write_checkpoint(dirs[1], file_names.RECOVERY_POINT_CHECKPOINT, {})
    assert path.read_text("utf-8") == "0\n0\n"
    assert path.stat().st_ino != inode, "replaced by a rename, never rewritten in place"
    assert not file_names.tmp_file(path).exists()
    assert started.offline_dirs == {}


def test_a_failed_checkpoint_write_keeps_the_old_file_and_takes_the_dir_offline(
    started: LogDirs, dirs: list[Path], owner: Owner
) -> None:
    name = file_names.REPLICATION_OFFSET_CHECKPOINT
    assert started.write_checkpoint(dirs[0], name, {("t", 0): 3})
    file_names.tmp_file(dirs[0] / name).mkdir()  # the temporary file cannot be created
    assert not started.write_checkpoint(dirs[0], name, {("t", 0): 9})
    assert (dirs[0] / name).read_text("utf-8") == "0\n1\nt 0 3\n"
    assert list(started.offline_dirs) == [dirs[0]]
    assert f"failed to write {name}" in started.offline_dirs[dirs[0]]
    assert owner.offline == [dirs[0]]
    assert not is_locked(dirs[0])
    assert not started.write_checkpoint(dirs[0], name, {}), "an offline dir is not written"
    assert (dirs[0] / name).read_text("utf-8") == "0\n1\nt 0 3\n"


# --- partition folders -----------------------------------------------------------------------------


def test_startup_lists_partition_folders_and_schedules_delete_folders(
    dirs: list[Path], clock: MockClock, owner: Owner
) -> None:
    directory = dirs[0]
    for name in ("t-0", "t-1", "my.topic-12", "__cluster_metadata-0", "not_a_partition", "t-2-stray"):
        (directory / name).mkdir(parents=True)
    leftover = directory / file_names.delete_dir_name("gone", 0, "0123456789abcdef0123456789abcdef")
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"old bytes")
    (directory / "f-0").write_bytes(b"a file, not a partition folder")
    log_dirs = new_dirs(dirs[:2], clock, owner)
    first, second = log_dirs.startup()
    assert first.partitions == {
        ("my.topic", 12): directory / "my.topic-12",
        ("t", 0): directory / "t-0",
        ("t", 1): directory / "t-1",
    }
    assert second.partitions == {}
    assert log_dirs.delete_due_folders() == 1
    clock.sleep(DELETE_DELAY_MS - 1)
    assert log_dirs.delete_due_folders() == 1 and leftover.exists()
    clock.sleep(1)
    assert log_dirs.delete_due_folders() == 0
    assert not leftover.exists()
    assert (directory / "__cluster_metadata-0").is_dir(), "the controller's metadata log is not ours"
    assert owner.offline == []
    log_dirs.release_all()


def test_a_partition_in_two_dirs_fails_startup(dirs: list[Path], clock: MockClock) -> None:
    for directory in dirs[:2]:
        (directory / "t-0").mkdir(parents=True)
    log_dirs = new_dirs(dirs, clock)
    with pytest.raises(KafkaStorageError, match=rf"partition t-0 exists in both {dirs[0]} and {dirs[1]}") as info:
        log_dirs.startup()
    assert info.value.path == str(dirs[1] / "t-0")
    assert not log_dirs.started
    assert not any(is_locked(d) for d in dirs[:2])
    assert not dirs[2].exists(), "startup stops at the dir that repeats a partition"


def test_schedule_folder_delete_renames_now_and_removes_after_the_delay(
    started: LogDirs, dirs: list[Path], clock: MockClock
) -> None:
    folder = dirs[2] / "my-topic-3"
    folder.mkdir()
    (folder / "00000000000000000000.log").write_bytes(b"bytes")
    target = started.schedule_folder_delete(folder, "my-topic", 3)
    assert target.parent == dirs[2]
    assert re.fullmatch(r"my-topic-3\.[0-9a-f]{32}-delete", target.name)
    assert not folder.exists()
    assert (target / "00000000000000000000.log").read_bytes() == b"bytes"
    assert started.delete_due_folders() == 1
    clock.sleep(DELETE_DELAY_MS - 1)
    assert started.delete_due_folders() == 1 and target.exists()
    clock.sleep(1)
    assert started.delete_due_folders() == 0
    assert not target.exists()
    assert started.delete_due_folders() == 0


def test_a_stray_folder_is_renamed_stray_now_and_removed_after_the_delay(
    started: LogDirs, dirs: list[Path], clock: MockClock
) -> None:
    folder = dirs[2] / "my-topic-3"
    folder.mkdir()
    target = started.schedule_folder_delete(folder, "my-topic", 3, stray=True)
    assert target.parent == dirs[2]
    assert file_names.parse_stray_dir_name(target.name) == ("my-topic", 3)
    assert not folder.exists()
    clock.sleep(DELETE_DELAY_MS - 1)
    assert started.delete_due_folders() == 1 and target.exists()
    clock.sleep(1)
    assert started.delete_due_folders() == 0
    assert not target.exists()


def test_stray_folder_left_by_a_previous_run_is_removed_after_the_delay(
    dirs: list[Path], clock: MockClock, owner: Owner
) -> None:
    leftover = dirs[0] / file_names.stray_dir_name("gone", 0, "0123456789abcdef0123456789abcdef")
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.log").write_bytes(b"old bytes")
    log_dirs = new_dirs(dirs[:1], clock, owner)
    (loaded,) = log_dirs.startup()
    assert loaded.partitions == {}
    assert log_dirs.delete_due_folders() == 1
    clock.sleep(DELETE_DELAY_MS)
    assert log_dirs.delete_due_folders() == 0
    assert not leftover.exists()
    log_dirs.release_all()


def test_a_failed_rename_for_delete_takes_the_dir_offline(started: LogDirs, dirs: list[Path], owner: Owner) -> None:
    missing = dirs[1] / "t-0"
    with pytest.raises(KafkaStorageError, match="cannot rename partition folder") as info:
        started.schedule_folder_delete(missing, "t", 0)
    assert info.value.path == str(missing)
    assert list(started.offline_dirs) == [dirs[1]]
    assert owner.offline == [dirs[1]]


def test_pending_folder_deletes_of_an_offline_dir_are_dropped(
    started: LogDirs, dirs: list[Path], clock: MockClock, owner: Owner, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = []
    for directory in dirs:
        (directory / "t-0").mkdir()
        targets.append(started.schedule_folder_delete(directory / "t-0", "t", 0))
    started.take_offline(dirs[0], "disk gone")
    clock.sleep(DELETE_DELAY_MS)

    real_rmtree = shutil.rmtree

    def failing_rmtree(path: Path) -> None:
        if path.parent == dirs[1]:
            raise PermissionError(13, "Permission denied", str(path))
        real_rmtree(path)

    monkeypatch.setattr(shutil, "rmtree", failing_rmtree)
    assert started.delete_due_folders() == 0
    assert [target.exists() for target in targets] == [True, True, False], "the next startup finds them again"
    assert list(started.offline_dirs) == [dirs[0], dirs[1]]
    assert "Permission denied" in started.offline_dirs[dirs[1]]
    assert owner.offline == [dirs[0], dirs[1]]


# --- placement and offline dirs --------------------------------------------------------------------


def test_placement_prefers_fewest_partitions_then_config_order(dirs: list[Path], clock: MockClock) -> None:
    configured = [dirs[2], dirs[0], dirs[1]]
    log_dirs = new_dirs(configured, clock)
    log_dirs.startup()
    assert log_dirs.placement_order({}) == configured
    assert log_dirs.placement_order(dict.fromkeys(dirs, 4)) == configured
    assert log_dirs.placement_order({dirs[2]: 2, dirs[0]: 1}) == [dirs[1], dirs[0], dirs[2]]
    assert log_dirs.placement_order({dirs[2]: 0, dirs[0]: 3, dirs[1]: 3}) == [dirs[2], dirs[0], dirs[1]]
    log_dirs.take_offline(dirs[2], "disk gone")
    assert log_dirs.placement_order({dirs[0]: 1}) == [dirs[1], dirs[0]]
    log_dirs.release_all()
    assert log_dirs.placement_order({}) == [], "no dir is live before startup"


def test_dir_that_is_a_regular_file_goes_offline_and_others_load(
    dirs: list[Path], clock: MockClock, owner: Owner
) -> None:
    dirs[0].parent.mkdir(parents=True)
    dirs[0].write_bytes(b"not a directory")
    log_dirs = new_dirs(dirs, clock, owner)
    assert [loaded.path for loaded in log_dirs.startup()] == dirs[1:]
    assert list(log_dirs.offline_dirs) == [dirs[0]]
    assert owner.offline == [dirs[0]]
    assert log_dirs.placement_order({}) == dirs[1:]
    log_dirs.release_all()
    assert dirs[0].read_bytes() == b"not a directory"


def test_take_offline_is_idempotent_and_releases_the_lock(started: LogDirs, dirs: list[Path], owner: Owner) -> None:
    assert started.take_offline(dirs[1], OSError(5, "Input/output error"))
    assert not started.take_offline(dirs[1], "again")
    assert started.offline_dirs == {dirs[1]: "[Errno 5] Input/output error"}
    assert owner.offline == [dirs[1]]
    assert not is_locked(dirs[1])
    assert [is_locked(d) for d in (dirs[0], dirs[2])] == [True, True]
    assert [started.is_online(d) for d in dirs] == [True, False, True]
    assert started.online_dirs == [dirs[0], dirs[2]]
    started.take_offline(dirs[0], "disk gone")
    started.raise_if_all_offline()
    started.take_offline(dirs[2], "disk gone")
    with pytest.raises(KafkaStorageError, match="every log dir is offline"):
        started.raise_if_all_offline()
