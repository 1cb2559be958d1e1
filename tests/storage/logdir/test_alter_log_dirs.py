"""Moving a partition between the log dirs of one broker (AlterReplicaLogDirs) through the log manager and its
alter-log-dirs thread (`storage.logdir.alter_log_dirs`): the move under appends, the placement, checkpoints and old
folder after it, Kafka's error answers, a move replaced by one to another dir, and a broker restarted in the middle of
a move.

The oracle: the records appended (offset, key), which read back once each from the dir the partition moved to.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.errors import InvalidTopicError, KafkaStorageError, LogDirNotFoundError, ReplicaNotAvailableError
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.logdir.log_manager import LogManager, PartitionPlacement
from storage.logdir.partition_handles import LocalPartition
from storage.partition.log import Log
from storage.records.record_batch import RecordBatchBuilder

CLUSTER_ID = "XB4QhweWTe-kZwMNW25y1A"
CONFIG = LogConfig(segment_bytes=4096, segment_index_bytes=1200, index_interval_bytes=256)
DELETE_DELAY_MS = 5_000
MOVE_TIMEOUT_S = 30


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "data" / name for name in ("d0", "d1", "d2")]


def new_manager(dirs: list[Path], clock: MockClock, moved: list[PartitionPlacement] | None = None) -> LogManager:
    manager = LogManager(
        dirs,
        default_config=CONFIG,
        clock=clock,
        cluster_id=CLUSTER_ID,
        file_delete_delay_ms=DELETE_DELAY_MS,
        on_replica_moved=None if moved is None else moved.append,
    )
    manager.startup()
    return manager


@pytest.fixture
def manager(dirs: list[Path], clock: MockClock) -> Iterator[LogManager]:
    started = new_manager(dirs, clock)
    yield started
    started.shutdown()


def append(log: Log, clock: MockClock, key: bytes) -> tuple[int, bytes]:
    builder = RecordBatchBuilder()
    builder.append(key, b"v" * 100, timestamp=clock.milliseconds())
    return log.append(builder.build()).first_offset, key


def keys(log: Log) -> list[tuple[int, bytes | None]]:
    return [(record.offset, record.key) for record in log.records()]


def checkpoint(directory: Path, name: str) -> dict[tuple[str, int], int]:
    return OffsetCheckpointFile(directory / name).read()


def test_a_moved_partition_keeps_every_record_and_its_dir_follows(dirs: list[Path], clock: MockClock) -> None:
    moved: list[PartitionPlacement] = []
    manager = new_manager(dirs, clock, moved)
    source = Path(manager.get_or_create_partition("orders", 0).directory)
    target = next(d for d in manager.log_dirs if d != source)
    log = manager.get_or_create_log("orders", 0)
    written = [append(log, clock, b"k%d" % index) for index in range(200)]
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            written.append(append(log, clock, b"under-move-%d" % len(written)))

    appender = threading.Thread(target=produce)
    appender.start()
    try:
        assert manager.alter_replica_log_dirs({("orders", 0): str(target)}) == {("orders", 0): None}
        assert manager.wait_for_moves(MOVE_TIMEOUT_S)
    finally:
        stop.set()
        appender.join()
    written.append(append(log, clock, b"after"))
    assert manager.log_dir_of("orders", 0) == target == log.directory.parent
    assert keys(log) == written
    placement = manager.placements()[0]
    assert placement.directory == str(target) and placement.directory_id
    assert moved == [placement]
    state = manager.describe()[0][1]
    assert state is not None and state.future_directory == "" and state.directory == str(target / "orders-0")
    manager.checkpoint_recovery_points()
    assert ("orders", 0) in checkpoint(target, file_names.RECOVERY_POINT_CHECKPOINT)
    assert ("orders", 0) not in checkpoint(source, file_names.RECOVERY_POINT_CHECKPOINT)
    assert not (source / "orders-0").exists()
    assert [path for path in source.iterdir() if file_names.is_delete_dir_name(path.name)]
    clock.sleep(DELETE_DELAY_MS)
    manager.delete_due_files()
    assert not [path for path in source.iterdir() if file_names.is_delete_dir_name(path.name)]
    manager.shutdown()
    reopened = new_manager(dirs, clock)
    assert reopened.log_dir_of("orders", 0) == target
    assert keys(reopened.get_or_create_log("orders", 0)) == written
    reopened.shutdown()


def test_errors_are_kafkas(manager: LogManager, dirs: list[Path], tmp_path: Path) -> None:
    placement = manager.get_or_create_partition("t", 0)
    here = placement.directory
    other = next(str(d) for d in manager.log_dirs if str(d) != here)
    answers = manager.alter_replica_log_dirs(
        {
            ("t", 0): str(tmp_path / "not-a-log-dir"),
            ("t", 1): other,
            ("t", 2): "relative/d0",
            ("t", 3): "/\x00" + "x" * 5000,
            ("t" * 220, 0): other,
            ("no such name!", -1): other,
        }
    )
    assert isinstance(answers[("t", 0)], LogDirNotFoundError)
    assert isinstance(answers[("t", 3)], LogDirNotFoundError)
    assert isinstance(answers[("no such name!", -1)], ReplicaNotAvailableError)
    assert isinstance(answers[("t", 1)], ReplicaNotAvailableError)
    assert isinstance(answers[("t", 2)], LogDirNotFoundError)
    assert isinstance(answers[("t" * 220, 0)], InvalidTopicError)
    assert manager.alter_replica_log_dirs({("t", 0): here}) == {("t", 0): None}
    assert manager.log_dir_of("t", 0) == Path(here) and manager.wait_for_moves(0)
    assert not list(Path(here).glob("*-future"))
    manager.log_dir_failed(Path(other), "disk gone")
    answers = manager.alter_replica_log_dirs({("t", 0): other})
    assert isinstance(answers[("t", 0)], KafkaStorageError)


def test_a_dir_asked_for_a_partition_not_held_is_where_it_is_created(manager: LogManager) -> None:
    last = manager.log_dirs[-1]
    answers = manager.alter_replica_log_dirs({("later", 0): str(last)})
    assert isinstance(answers[("later", 0)], ReplicaNotAvailableError)
    assert manager.get_or_create_partition("later", 0).directory == str(last)
    assert manager.get_or_create_partition("later", 1).directory == str(manager.log_dirs[0])


def test_a_second_request_to_another_dir_replaces_the_first(manager: LogManager, clock: MockClock) -> None:
    log = manager.get_or_create_log("t", 0)
    for index in range(50):
        append(log, clock, b"k%d" % index)
    handle = manager.partition("t", 0)
    assert isinstance(handle, LocalPartition)
    first, second = (d for d in manager.log_dirs if d != log.directory.parent)
    handle.start_move(str(first)).result()
    copy = handle.move.future
    assert copy is not None and copy.directory.parent == first
    handle.start_move(str(second)).result()
    assert not copy.directory.exists()
    assert handle.move.future is not None and handle.move.future.log_dir == second
    while not handle.advance_move().result().done:
        pass
    assert log.directory.parent == second
    assert [path.name for path in first.iterdir() if path.is_dir()] == []


def test_a_move_under_way_is_replaced_through_the_manager(manager: LogManager, clock: MockClock) -> None:
    log = manager.get_or_create_log("t", 0)
    for index in range(50):
        append(log, clock, b"k%d" % index)
    first, second = (d for d in manager.log_dirs if d != log.directory.parent)
    # The alter-log-dirs thread advances nothing until both requests are in: the second finds the first under way.
    manager._moves._advance = lambda tp, target: None  # type: ignore[method-assign]
    assert manager.alter_replica_log_dirs({("t", 0): str(first)}) == {("t", 0): None}
    assert len([path for path in first.iterdir() if path.is_dir()]) == 1
    assert manager.alter_replica_log_dirs({("t", 0): str(second)}) == {("t", 0): None}
    del manager._moves._advance
    assert manager.wait_for_moves(MOVE_TIMEOUT_S)
    assert manager.log_dir_of("t", 0) == second == log.directory.parent
    assert not [path for path in first.iterdir() if path.is_dir()]
    assert keys(log) == [(i, b"k%d" % i) for i in range(50)]


def test_a_broker_restarted_mid_move_takes_the_move_up_again(dirs: list[Path], clock: MockClock) -> None:
    manager = new_manager(dirs, clock)
    log = manager.get_or_create_log("t", 0)
    written = [append(log, clock, b"k%d" % index) for index in range(100)]
    source = log.directory.parent
    target = next(d for d in manager.log_dirs if d != source)
    handle = manager.partition("t", 0)
    assert isinstance(handle, LocalPartition)
    handle.move.start(log, str(target))
    assert handle.move.future is not None
    handle.move.future.copy(max_bytes=5000)
    partial = handle.move.future.directory
    assert partial.exists()
    for opened in manager.all_logs().values():
        opened.close_without_marker()
    for lock in manager._dirs._locks.values():
        lock.release()
    moved: list[PartitionPlacement] = []
    restarted = new_manager(dirs, clock, moved)
    assert restarted.wait_for_moves(MOVE_TIMEOUT_S)
    assert not partial.exists(), "the copy the stopped move left became the partition's folder"
    assert restarted.log_dir_of("t", 0) == target and [p.directory for p in moved] == [str(target)]
    assert keys(restarted.get_or_create_log("t", 0)) == written
    restarted.shutdown()


def test_a_future_folder_without_its_partition_is_deleted(dirs: list[Path], clock: MockClock) -> None:
    manager = new_manager(dirs, clock)
    manager.shutdown()
    orphan = dirs[1] / file_names.future_dir_name("gone", 0, "a" * 32)
    orphan.mkdir()
    (orphan / file_names.log_file(orphan, 0).name).write_bytes(b"")
    restarted = new_manager(dirs, clock)
    assert not orphan.exists()
    assert restarted.placements() == []
    restarted.shutdown()


def test_describe_reports_the_copy_under_way(manager: LogManager, clock: MockClock) -> None:
    log = manager.get_or_create_log("t", 0)
    for index in range(60):
        append(log, clock, b"k%d" % index)
    handle = manager.partition("t", 0)
    assert isinstance(handle, LocalPartition)
    target = next(d for d in manager.log_dirs if d != log.directory.parent)
    handle.move.start(log, str(target))
    assert handle.move.future is not None
    handle.move.future.copy(max_bytes=5000)
    state = manager.describe()[0][1]
    assert state is not None and state.future_directory == str(target)
    assert 0 < state.future_size_bytes < state.size_bytes
    assert 0 < state.future_log_end_offset < state.log_end_offset
    handle.move.abort()
    state = manager.describe()[0][1]
    assert state is not None and state.future_directory == ""
