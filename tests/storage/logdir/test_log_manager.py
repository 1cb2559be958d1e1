"""LogManager over several log dirs: identity, locking, placement, offline dirs, checkpoints, crash recovery,
clean shutdown, retention, async deletes, flush and idempotence.

Every test drives a MockClock and tiny segments; the bytes left on disk are decoded with kafka-python.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kafka.record.memory_records import MemoryRecords

from storage import file_names
from storage.clock import MockClock
from storage.compaction.clean_result import CleanedLog, CleanResult
from storage.config.broker_config import BrokerConfig
from storage.config.cleaner_config import CleanerConfig
from storage.config.log_config import LogConfig
from storage.errors import (
    BrokerNotAvailableError,
    CorruptCheckpointError,
    CorruptRecordError,
    InconsistentTopicIdError,
    KafkaStorageError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    StorageError,
)
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.files.log_dir_lock import LogDirLock
from storage.files.meta_properties import MetaProperties, read_meta_properties, write_meta_properties
from storage.files.partition_metadata import PartitionMetadata, read_partition_metadata
from storage.kafka_uuid import random_uuid
from storage.logdir.log_manager import LogManager
from storage.logdir.partition_handles import LocalPartition, LocalPartitions, MoveProgress, PartitionState
from storage.logdir.scheduler import Scheduler
from storage.partition.log import Log
from storage.pending import Pending, completed
from storage.records.record_batch import RecordBatchBuilder
from storage.segment.log_segment import LogSegment
from storage.topic_partition import TopicPartition

CLUSTER_ID = "XB4QhweWTe-kZwMNW25y1A"
OTHER_CLUSTER_ID = "OtherClusterAAAAAAAAAAA"
NODE_ID = 1
DIR_DELETE_DELAY_MS = 5_000
VALUE = b"v" * 20
# One record per batch, always 31 bytes: length 1 + attributes 1 + timestamp delta 1 + offset delta 1
# + key (1 + 4, fixed width "k000") + value (1 + 20) + header count 1. `batch` asserts the total.
BATCH_SIZE = len(RecordBatchBuilder().build()) + 31
CONFIG = LogConfig(
    segment_bytes=2 * BATCH_SIZE + BATCH_SIZE // 2,  # two batches per segment
    segment_index_bytes=1200,  # 150 offset / 100 time entries: small sparse files
    index_interval_bytes=1,
    file_delete_delay_ms=1_000,
)


def batch(clock: MockClock, index: int) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(b"k%03d" % index, VALUE, timestamp=clock.milliseconds())
    data = builder.build()
    assert len(data) == BATCH_SIZE
    return data


def append(log: Log, clock: MockClock, count: int) -> list[tuple[int, bytes]]:
    """Appends `count` single-record batches; returns the (offset, key) oracle of what was written. Waits for
    the flushes of the segments they rolled, which run in the background."""
    written = []
    for _ in range(count):
        offset = log.log_end_offset
        log.append(batch(clock, offset))
        written.append((offset, b"k%03d" % offset))
    log.wait_for_background_flushes()
    return written


def new_manager(dirs: list[Path], clock: MockClock, **overrides: object) -> LogManager:
    options: dict[str, object] = {
        "default_config": CONFIG,
        "clock": clock,
        "cluster_id": CLUSTER_ID,
        "node_id": NODE_ID,
        "file_delete_delay_ms": DIR_DELETE_DELAY_MS,
    }
    options.update(overrides)
    return LogManager(dirs, **options)  # type: ignore[arg-type]


def crash(manager: LogManager) -> None:
    """What a killed broker leaves: files closed without flush, trim or marker, and no locks (flock dies with it)."""
    for log in manager.all_logs().values():
        log.close_without_marker()
    for lock in manager._dirs._locks.values():
        lock.release()


def kafka_records(folder: Path) -> list[tuple[int, bytes, bool]]:
    """(offset, key, CRC valid) of every record in the folder's `.log` files, decoded by kafka-python."""
    found = []
    for path in sorted(folder.glob("*" + file_names.LOG_SUFFIX)):
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            decoded = records.next_batch()
            crc_ok = decoded.validate_crc()
            found.extend((record.offset, record.key, crc_ok) for record in decoded)
        assert records.valid_bytes() == path.stat().st_size, f"trailing bytes in {path}"
    return found


def checkpoint_text(directory: Path, name: str) -> str:
    return (directory / name).read_text("utf-8")


def is_locked(directory: Path) -> bool:
    try:
        LogDirLock(directory).release()
    except LogDirLockedError:
        return True
    return False


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check what is written, not that it is durable (test_checkpoint_file covers the write
    protocol); the ~1,700 fsyncs of this file cost 5 s on a busy disk, so they are no-ops here."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture(autouse=True)
def logs_left_are_kafka_readable(tmp_path: Path) -> Iterator[None]:
    """After each test (and its manager's shutdown), every `.log` left decodes with kafka-python, whole,
    with offsets increasing through each partition folder."""
    yield
    for folder in sorted({path.parent for path in tmp_path.rglob("*" + file_names.LOG_SUFFIX)}):
        offsets = [offset for offset, _, _ in kafka_records(folder)]
        assert offsets == sorted(set(offsets)), folder


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "data" / name for name in ("d0", "d1", "d2")]


@pytest.fixture
def manager(dirs: list[Path], clock: MockClock) -> Iterator[LogManager]:
    started = new_manager(dirs, clock)
    started.startup()
    yield started
    started.shutdown()


# --- identity and locking (item 48) ---------------------------------------------------------------


def test_startup_creates_missing_dirs_and_writes_kafka_meta_properties(dirs: list[Path], clock: MockClock) -> None:
    manager = new_manager(dirs, clock)
    manager.startup()
    directory_ids = set()
    for directory in dirs:
        assert directory.is_dir()
        text = (directory / file_names.META_PROPERTIES).read_text("utf-8")
        match = re.fullmatch(
            r"#\n#Tue Nov 14 22:13:20 UTC 2023\n"
            rf"cluster\.id={CLUSTER_ID}\ndirectory\.id=([A-Za-z0-9_-]{{22}})\nnode\.id={NODE_ID}\nversion=1\n",
            text,
        )
        assert match is not None, text
        directory_ids.add(match.group(1))
        assert (directory / file_names.LOCK_FILE).exists()
        assert is_locked(directory)
    assert len(directory_ids) == len(dirs)
    manager.shutdown()
    assert not any(is_locked(directory) for directory in dirs)

    again = new_manager(dirs, clock)
    again.startup()
    assert {read_meta_properties(d / file_names.META_PROPERTIES).directory_id for d in dirs} == directory_ids
    again.shutdown()


def test_v1_meta_properties_without_directory_id_gets_one_written_back(tmp_path: Path, clock: MockClock) -> None:
    path = tmp_path / file_names.META_PROPERTIES
    write_meta_properties(path, MetaProperties(version=1, cluster_id=CLUSTER_ID, node_id=NODE_ID), clock=clock)
    manager = new_manager([tmp_path], clock)
    manager.startup()
    meta = read_meta_properties(path)
    assert (meta.cluster_id, meta.node_id, meta.version) == (CLUSTER_ID, NODE_ID, 1)
    assert meta.directory_id is not None
    manager.shutdown()


def test_cluster_id_is_adopted_from_existing_dirs_when_not_configured(tmp_path: Path, clock: MockClock) -> None:
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    existing.mkdir()
    write_meta_properties(
        existing / file_names.META_PROPERTIES, MetaProperties(version=1, cluster_id=CLUSTER_ID, node_id=NODE_ID)
    )
    # The fresh dir comes first: it must get the existing dir's cluster id, not a random one.
    manager = new_manager([fresh, existing], clock, cluster_id=None)
    manager.startup()
    assert manager.cluster_id == CLUSTER_ID
    assert manager.offline_dirs == {}
    assert read_meta_properties(fresh / file_names.META_PROPERTIES).cluster_id == CLUSTER_ID
    manager.shutdown()


@pytest.mark.parametrize(
    ("meta", "reason"),
    [
        (MetaProperties(version=1, cluster_id=OTHER_CLUSTER_ID, node_id=NODE_ID), f"cluster {OTHER_CLUSTER_ID}"),
        (MetaProperties(version=1, cluster_id=CLUSTER_ID, node_id=7), "node 7"),
        (MetaProperties(version=0, cluster_id=CLUSTER_ID, node_id=7), "node 7"),
    ],
)
def test_dir_of_another_cluster_or_node_goes_offline_untouched(
    dirs: list[Path], clock: MockClock, meta: MetaProperties, reason: str
) -> None:
    foreign = dirs[0]
    foreign.mkdir(parents=True)
    write_meta_properties(foreign / file_names.META_PROPERTIES, meta)
    before = (foreign / file_names.META_PROPERTIES).read_bytes()
    manager = new_manager(dirs, clock)
    manager.startup()
    assert list(manager.offline_dirs) == [foreign]
    assert reason in manager.offline_dirs[foreign]
    assert str(foreign / file_names.META_PROPERTIES) in manager.offline_dirs[foreign]
    assert not is_locked(foreign), "an offline dir must be left for its owner"
    for partition in range(4):
        assert manager.log_dir_of("t", partition) is None
        manager.get_or_create_log("t", partition)
        assert manager.log_dir_of("t", partition) in dirs[1:]
    manager.shutdown()
    assert (foreign / file_names.META_PROPERTIES).read_bytes() == before
    assert not (foreign / file_names.CLEAN_SHUTDOWN_FILE).exists()


def test_startup_fails_clearly_and_unlocks_when_every_dir_is_refused(tmp_path: Path, clock: MockClock) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    write_meta_properties(
        foreign / file_names.META_PROPERTIES, MetaProperties(version=1, cluster_id=CLUSTER_ID, node_id=7)
    )
    manager = new_manager([foreign], clock)
    with pytest.raises(KafkaStorageError, match=r"every log dir is offline .*node 7, this broker is node 1"):
        manager.startup()
    assert not is_locked(foreign)
    with pytest.raises(KafkaStorageError, match="not started"):
        manager.get_or_create_log("t", 0)


def test_second_manager_on_a_locked_dir_fails_until_the_first_shuts_down(
    dirs: list[Path], tmp_path: Path, clock: MockClock
) -> None:
    first = new_manager(dirs[:1], clock)
    first.startup()
    other = tmp_path / "other"
    second = new_manager([other, dirs[0]], clock)
    with pytest.raises(LogDirLockedError, match=r"Failed to acquire lock on file \.lock") as info:
        second.startup()
    assert info.value.path == str(dirs[0] / file_names.LOCK_FILE)
    assert not is_locked(other), "a failed startup must release the dirs it had locked"
    first.get_or_create_log("t", 0)
    first.shutdown()
    second.startup()
    assert second.log_dir_of("t", 0) == dirs[0]
    second.shutdown()


def failing_open(monkeypatch: pytest.MonkeyPatch, folder_name: str, error: StorageError) -> list[Log]:
    """Makes `Log.open` of `folder_name` raise `error`; returns every log that did open."""
    opened: list[Log] = []
    real_open = Log.open

    def open_or_fail(directory: str | Path, *args: object, **kwargs: object) -> Log:
        if Path(directory).name == folder_name:
            raise error
        log = real_open(directory, *args, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    monkeypatch.setattr(Log, "open", open_or_fail)
    return opened


def test_a_log_that_fails_to_load_takes_only_its_dir_offline(
    dirs: list[Path], clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = new_manager(dirs[:2], clock)
    manager.startup()
    for partition in range(6):
        append(manager.get_or_create_log("t", partition), clock, 1)
    assert [manager.log_dir_of("t", p) for p in range(6)] == [dirs[0], dirs[1]] * 3
    manager.shutdown()

    opened = failing_open(monkeypatch, "t-3", KafkaStorageError("disk error", path=dirs[1] / "t-3"))
    again = new_manager(dirs[:2], clock, recovery_threads_per_data_dir=2)
    again.startup()
    assert list(again.offline_dirs) == [dirs[1]]
    assert "disk error" in again.offline_dirs[dirs[1]]
    assert sorted(log.directory.name for log in opened) == ["t-0", "t-1", "t-2", "t-4", "t-5"]
    assert all(log.closed == (log.directory.parent == dirs[1]) for log in opened)
    for partition in (1, 3, 5):
        with pytest.raises(KafkaStorageError, match="is offline"):
            again.get_log("t", partition)
    # The partition that never opened must not be recreated, empty, in the other dir.
    with pytest.raises(KafkaStorageError, match="t-3 is offline"):
        again.get_or_create_log("t", 3)
    assert not (dirs[0] / "t-3").exists()
    assert sorted(again.all_logs()) == [("t", 0), ("t", 2), ("t", 4)]
    again.shutdown()
    assert [d for d in dirs[:2] if (d / file_names.CLEAN_SHUTDOWN_FILE).exists()] == [dirs[0]]


@pytest.mark.parametrize("cause", ["corrupt meta.properties", "unexpected load error"])
def test_a_fatal_startup_error_releases_everything(
    dirs: list[Path], clock: MockClock, monkeypatch: pytest.MonkeyPatch, cause: str
) -> None:
    manager = new_manager(dirs[:2], clock)
    manager.startup()
    for partition in range(2):
        append(manager.get_or_create_log("t", partition), clock, 1)
    manager.shutdown()
    meta_path = dirs[1] / file_names.META_PROPERTIES
    good_meta = meta_path.read_bytes()
    opened: list[Log] = []
    if cause == "corrupt meta.properties":
        meta_path.write_text("version=9\n", "utf-8")
        expected: type[StorageError] = CorruptCheckpointError
    else:
        opened = failing_open(monkeypatch, "t-1", CorruptRecordError("bug", path=dirs[1] / "t-1"))
        expected = CorruptRecordError

    again = new_manager(dirs[:2], clock)
    with pytest.raises(expected):
        again.startup()
    assert not any(is_locked(d) for d in dirs[:2])
    assert all(log.closed for log in opened)
    assert again.all_logs() == {}

    meta_path.write_bytes(good_meta)
    monkeypatch.undo()
    again.startup()
    assert sorted(again.all_logs()) == [("t", 0), ("t", 1)]
    again.shutdown()


# --- placement and offline dirs (item 47) ---------------------------------------------------------


def test_new_partitions_spread_by_partition_count(manager: LogManager, dirs: list[Path]) -> None:
    for partition in range(20):
        log = manager.get_or_create_log("spread", partition)
        assert log.directory == manager.log_dir_of("spread", partition) / f"spread-{partition}"
        assert log.directory.is_dir()
    counts = manager.partition_counts()
    assert sum(counts.values()) == 20
    assert max(counts.values()) - min(counts.values()) <= 1
    assert {info.path: info.partitions for info in manager.describe_dirs()} == {str(d): counts[d] for d in dirs}


def test_a_partition_created_with_its_topic_id_keeps_it_and_refuses_another(manager: LogManager) -> None:
    first, second = random_uuid(), random_uuid()
    placement = manager.get_or_create_partition("ids", 0, topic_id=first)
    folder = Path(placement.directory) / "ids-0"
    assert read_partition_metadata(folder) == PartitionMetadata(0, first)
    assert manager.get_or_create_partition("ids", 0, topic_id=first) == placement
    assert manager.get_or_create_partition("ids", 0) == placement
    with pytest.raises(InconsistentTopicIdError):
        manager.get_or_create_partition("ids", 0, topic_id=second)
    assert read_partition_metadata(folder) == PartitionMetadata(0, first)
    manager.get_or_create_partition("no-id", 0)
    assert read_partition_metadata(manager.log_dir_of("no-id", 0) / "no-id-0") is None


class BarrierPartitions(LocalPartitions):
    """Partitions whose `open` returns only once `parties` opens are under way at once (a partition actor starting
    takes about a second): created one after the other, the first open would wait in vain."""

    def __init__(self, clock: MockClock, parties: int) -> None:
        super().__init__(clock)
        self.barrier = threading.Barrier(parties, timeout=10)

    def open(self, *args: Any) -> LocalPartition:
        self.barrier.wait()
        return super().open(*args)


def test_the_partitions_of_a_topic_open_side_by_side_and_spread(dirs: list[Path], clock: MockClock) -> None:
    count = 6
    manager = new_manager(dirs, clock, partitions=BarrierPartitions(clock, count))
    manager.startup()
    try:
        with ThreadPoolExecutor(max_workers=count + 1) as pool:
            placed = list(pool.map(lambda p: manager.get_or_create_partition("t", p % count), range(count + 1)))
        # The seventh call asked again for partition 0 while it opened: it waited and got the same placement.
        assert placed[count] == placed[0]
        assert sorted(p.partition for p in placed[:count]) == list(range(count))
        assert manager.partition_counts() == dict.fromkeys(dirs, count // len(dirs))
        assert all((Path(p.directory) / f"t-{p.partition}").is_dir() for p in placed)
    finally:
        manager.shutdown()


class GatedPartitions(LocalPartitions):
    """Partitions whose `open` waits for `release` (and says it began with `entered`)."""

    def __init__(self, clock: MockClock) -> None:
        super().__init__(clock)
        self.entered = threading.Event()
        self.release = threading.Event()

    def open(self, *args: Any) -> LocalPartition:
        self.entered.set()
        assert self.release.wait(10)
        return super().open(*args)


def test_a_delete_of_a_partition_being_created_waits_for_it_and_deletes_it(dirs: list[Path], clock: MockClock) -> None:
    factory = GatedPartitions(clock)
    manager = new_manager(dirs, clock, partitions=factory)
    manager.startup()
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            created = pool.submit(manager.get_or_create_partition, "t", 0)
            assert factory.entered.wait(10)
            deleted = pool.submit(manager.delete_log, "t", 0)
            factory.release.set()
            assert created.result(10).partition == 0
            # Without waiting, the delete would have found no partition and answered False.
            assert deleted.result(10) is True
        assert manager.partition("t", 0) is None
    finally:
        manager.shutdown()


def test_dir_that_is_a_regular_file_goes_offline_and_others_serve(dirs: list[Path], clock: MockClock) -> None:
    dirs[0].parent.mkdir(parents=True)
    dirs[0].write_bytes(b"not a directory")
    manager = new_manager(dirs, clock)
    manager.startup()
    assert list(manager.offline_dirs) == [dirs[0]]
    for partition in range(6):
        manager.get_or_create_log("t", partition)
    assert manager.partition_counts() == {dirs[1]: 3, dirs[2]: 3}
    info = {Path(entry.path): entry for entry in manager.describe_dirs()}
    assert not info[dirs[0]].online and info[dirs[0]].error is not None
    manager.shutdown()
    assert dirs[0].read_bytes() == b"not a directory"


def test_create_log_falls_back_to_the_next_dir(dirs: list[Path], clock: MockClock) -> None:
    dirs[0].mkdir(parents=True)
    (dirs[0] / "t-0").write_bytes(b"a file where the partition folder should go")
    manager = new_manager(dirs, clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    assert manager.log_dir_of("t", 0) == dirs[1]
    assert log.directory == dirs[1] / "t-0"
    assert [d for d in dirs if (d / "t-0").is_dir()] == [dirs[1]]
    assert dirs[0] in manager.offline_dirs
    manager.shutdown()


def test_partitions_of_a_failed_dir_raise_while_other_dirs_keep_serving(
    manager: LogManager, dirs: list[Path], clock: MockClock
) -> None:
    placed = {p: manager.get_or_create_log("t", p) for p in range(3)}
    for log in placed.values():
        append(log, clock, 3)
    broken_partition = next(p for p in placed if manager.log_dir_of("t", p) == dirs[0])
    healthy_partition = next(p for p in placed if manager.log_dir_of("t", p) == dirs[1])
    # The disk under d0 vanishes: its next write fails.
    shutil.rmtree(dirs[0])
    dirs[0].write_bytes(b"")
    manager.checkpoint_recovery_points()
    assert list(manager.offline_dirs) == [dirs[0]]
    assert placed[broken_partition].closed
    assert OffsetCheckpointFile(dirs[1] / file_names.RECOVERY_POINT_CHECKPOINT).read() == {
        ("t", healthy_partition): placed[healthy_partition].recovery_point
    }

    for operation in (
        lambda: manager.get_log("t", broken_partition),
        lambda: manager.get_or_create_log("t", broken_partition),
        lambda: manager.delete_log("t", broken_partition),
    ):
        with pytest.raises(KafkaStorageError, match=rf"t-{broken_partition} is offline") as info:
            operation()
        assert info.value.path == str(dirs[0])
    assert manager.log_dir_of("t", broken_partition) == dirs[0]
    assert ("t", broken_partition) not in manager.all_logs()

    healthy = manager.get_log("t", healthy_partition)
    assert healthy is not None
    append(healthy, clock, 1)
    assert healthy.log_end_offset == 4
    manager.run_retention()
    manager.flush_dirty_logs()
    manager.delete_due_files()
    assert manager.log_dir_of("new", 0) is None
    manager.get_or_create_log("new", 0)
    assert manager.log_dir_of("new", 0) in dirs[1:]
    manager.shutdown()
    assert (dirs[1] / file_names.CLEAN_SHUTDOWN_FILE).exists()
    assert (dirs[2] / file_names.CLEAN_SHUTDOWN_FILE).exists()


# --- checkpoints (items 48, 49) -------------------------------------------------------------------


def test_checkpoints_use_kafkas_text_format_per_dir(manager: LogManager, dirs: list[Path], clock: MockClock) -> None:
    logs = {p: manager.get_or_create_log("topic.a", p) for p in range(3)}
    for partition, log in logs.items():
        append(log, clock, 2 + 3 * partition)
    logs[2].delete_records(5)
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    for partition, log in logs.items():
        directory = manager.log_dir_of("topic.a", partition)
        assert directory == dirs[partition]
        assert checkpoint_text(directory, file_names.RECOVERY_POINT_CHECKPOINT) == (
            f"0\n1\ntopic.a {partition} {log.recovery_point}\n"
        )
        assert checkpoint_text(directory, file_names.REPLICATION_OFFSET_CHECKPOINT) == (
            f"0\n1\ntopic.a {partition} {log.log_end_offset}\n"
        )
    # Only a start above the first segment's base is listed (Kafka's rule).
    assert [checkpoint_text(d, file_names.LOG_START_OFFSET_CHECKPOINT) for d in dirs] == [
        "0\n0\n",
        "0\n0\n",
        "0\n1\ntopic.a 2 5\n",
    ]
    # Retention keeps segment 4 (it holds offset 5): the start is still above the first base.
    assert manager.run_retention() == 2
    assert (logs[2].log_segments()[0].base_offset, logs[2].log_start_offset) == (4, 5)
    manager.checkpoint_log_start_offsets()
    assert checkpoint_text(dirs[2], file_names.LOG_START_OFFSET_CHECKPOINT) == "0\n1\ntopic.a 2 5\n"
    # Once the start is a segment base again, the partition leaves the file.
    logs[2].delete_records(6)
    assert manager.run_retention() == 1
    assert (logs[2].log_segments()[0].base_offset, logs[2].log_start_offset) == (6, 6)
    manager.checkpoint_log_start_offsets()
    assert checkpoint_text(dirs[2], file_names.LOG_START_OFFSET_CHECKPOINT) == "0\n0\n"


def test_checkpoints_are_reloaded_after_a_clean_restart(dirs: list[Path], clock: MockClock) -> None:
    manager = new_manager(dirs, clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    oracle = append(log, clock, 7)
    log.delete_records(3)
    manager.shutdown()
    directory = dirs[0]
    assert OffsetCheckpointFile(directory / file_names.RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 7}
    assert OffsetCheckpointFile(directory / file_names.LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 3}
    assert OffsetCheckpointFile(directory / file_names.REPLICATION_OFFSET_CHECKPOINT).read() == {("t", 0): 7}

    again = new_manager(dirs, clock)
    again.startup()
    reopened = again.get_log("t", 0)
    assert reopened is not None
    assert (reopened.log_start_offset, reopened.recovery_point, reopened.log_end_offset) == (3, 7, 7)
    assert reopened.high_watermark == 7
    assert [(record.offset, record.key) for record in reopened.records()] == oracle[3:]
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(2)
    again.shutdown()
    assert [(offset, key) for offset, key, _ in kafka_records(directory / "t-0")] == oracle


def test_a_kafka_log_dirs_replication_offset_checkpoint_is_where_replicated_logs_reopen(
    tmp_path: Path, clock: MockClock, kafka_samples_dir: Path
) -> None:
    """A real Kafka log dir (one broker, `lsx1-0` ending at 14, its checkpoint `lsx1 0 14`), its checkpoint then
    lowered to 9 in Kafka's text format, then removed: a factory whose logs replicate gets the entry (0 without one,
    as Kafka's `Partition.createLog`) and the log opens there (`Log.open`); the plain in-process factory's logs are
    their own only replica and open at their log end whatever it says."""
    directory = tmp_path / "kafka-logs"
    shutil.copytree(kafka_samples_dir / "BiggerBrain__kafka@0af19244" / "data", directory)
    checkpoint = directory / file_names.REPLICATION_OFFSET_CHECKPOINT

    def reopened(**overrides: object) -> tuple[int, int, int]:
        manager = new_manager([directory], clock, cluster_id=None, node_id=0, **overrides)
        manager.startup()
        try:
            log = manager.get_log("lsx1", 0)
            assert log is not None
            return log.log_start_offset, log.high_watermark, log.log_end_offset
        finally:
            crash(manager)

    replicated = {"partitions": LocalPartitions(clock, replicated=True)}
    assert reopened(**replicated) == (0, 14, 14)
    checkpoint.write_text("0\n1\nlsx1 0 9\n")
    assert reopened(**replicated) == (0, 9, 14)
    assert reopened() == (0, 14, 14)
    checkpoint.unlink()
    assert reopened(**replicated) == (0, 0, 14)


def test_deleting_a_log_rewrites_only_its_dirs_checkpoints(
    manager: LogManager, dirs: list[Path], clock: MockClock
) -> None:
    for partition in range(3):
        append(manager.get_or_create_log("t", partition), clock, 1)
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    names = (
        file_names.RECOVERY_POINT_CHECKPOINT,
        file_names.LOG_START_OFFSET_CHECKPOINT,
        file_names.REPLICATION_OFFSET_CHECKPOINT,
    )
    inodes = {(d, name): (d / name).stat().st_ino for d in dirs for name in names}
    assert manager.log_dir_of("t", 1) == dirs[1]
    assert manager.delete_log("t", 1)
    for directory in dirs:
        for name in names:
            rewritten = (directory / name).stat().st_ino != inodes[(directory, name)]
            assert rewritten == (directory == dirs[1]), (directory, name)
    for name in names:
        assert OffsetCheckpointFile(dirs[1] / name).read() == {}
    assert OffsetCheckpointFile(dirs[0] / file_names.REPLICATION_OFFSET_CHECKPOINT).read() == {("t", 0): 1}


class StateAsks(LocalPartitions):
    """Local partitions whose handles count how often they are asked their state (each checkpoint rewrite asks
    every partition of its dirs)."""

    def __init__(self, clock: MockClock) -> None:
        super().__init__(clock)
        self.asked = 0

    def handle_for(self, tp: TopicPartition, log: Log) -> LocalPartition:
        factory = self

        class Counted(LocalPartition):
            def state(self) -> Pending[PartitionState]:
                factory.asked += 1
                return super().state()

        return Counted(log)


def test_deleting_a_topics_logs_at_once_rewrites_each_dir_once(dirs: list[Path], clock: MockClock) -> None:
    """Kafka's batched async delete: the partitions deleted together cost one checkpoint rewrite per dir, so each
    partition left is asked its state once, not once per deleted partition; the checkpoints lose every deleted
    partition, keep the others, and a partition that never existed is not answered."""
    partitions = StateAsks(clock)
    manager = new_manager(dirs, clock, partitions=partitions)
    manager.startup()
    for partition in range(6):
        append(manager.get_or_create_log("gone", partition), clock, 1)
    append(manager.get_or_create_log("kept", 0), clock, 2)
    manager.checkpoint_high_watermarks()
    partitions.asked = 0
    assert manager.delete_logs("gone", [5, 0, 1, 2, 3, 4, 9]) == [5, 0, 1, 2, 3, 4]
    assert partitions.asked == 1
    checkpointed = {
        tp: offset
        for directory in dirs
        for tp, offset in OffsetCheckpointFile(directory / file_names.REPLICATION_OFFSET_CHECKPOINT).read().items()
    }
    assert checkpointed == {("kept", 0): 2}
    assert sorted(manager.all_logs()) == [("kept", 0)]
    assert not any((d / f"gone-{p}").exists() for d in dirs for p in range(6))
    assert manager.delete_logs("gone", [0]) == []
    manager.shutdown()


def test_unclean_restart_recovers_only_from_the_recovery_point(tmp_path: Path, clock: MockClock) -> None:
    manager = new_manager([tmp_path], clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    oracle = append(log, clock, 7)
    assert [segment.base_offset for segment in log.log_segments()] == [0, 2, 4, 6]
    assert log.recovery_point == 6, "a roll flushes up to the new segment's base"
    manager.checkpoint_recovery_points()
    folder = tmp_path / "t-0"
    first = file_names.log_file(folder, 0)
    active = file_names.log_file(folder, 6)
    corrupted = bytearray(first.read_bytes())
    corrupted[BATCH_SIZE - 3] ^= 0xFF  # inside batch 0's value: its CRC no longer matches
    garbage = b"\x00\x00\x00\x00\x00\x00\x00\x07garbage!" * 3
    crash(manager)
    first.write_bytes(bytes(corrupted))
    active_before = active.read_bytes()
    with active.open("ab") as stream:
        stream.write(garbage)

    again = new_manager([tmp_path], clock)
    again.startup()
    reopened = again.get_log("t", 0)
    assert reopened is not None
    assert [segment.base_offset for segment in reopened.log_segments()] == [0, 2, 4, 6]
    assert reopened.log_end_offset == 7
    assert first.read_bytes() == bytes(corrupted), "segments below the recovery point are not re-scanned"
    assert active.read_bytes() == active_before
    assert [(d.path, d.position, d.size) for d in reopened.dropped_on_open] == [
        (str(active), len(active_before), len(garbage))
    ]
    assert [(record.offset, record.key) for record in reopened.records(2)] == oracle[2:]
    again.shutdown()
    decoded = kafka_records(folder)
    assert [(offset, key) for offset, key, _ in decoded] == oracle
    assert [crc_ok for _, _, crc_ok in decoded] == [False] + [True] * 6


def test_unreadable_recovery_point_checkpoint_means_full_recovery(tmp_path: Path, clock: MockClock) -> None:
    manager = new_manager([tmp_path], clock)
    manager.startup()
    oracle = append(manager.get_or_create_log("t", 0), clock, 7)
    manager.checkpoint_recovery_points()
    crash(manager)
    folder = tmp_path / "t-0"
    third = file_names.log_file(folder, 4)
    corrupted = bytearray(third.read_bytes())
    corrupted[2 * BATCH_SIZE - 3] ^= 0xFF  # offset 5, the second batch of segment 4
    third.write_bytes(bytes(corrupted))
    (tmp_path / file_names.RECOVERY_POINT_CHECKPOINT).write_text("0\n2\nt 0 6\n", "utf-8")

    again = new_manager([tmp_path], clock)
    again.startup()
    reopened = again.get_log("t", 0)
    assert reopened is not None
    assert reopened.log_end_offset == 5
    assert [segment.base_offset for segment in reopened.log_segments()] == [0, 2, 4]
    assert [(d.path, d.position) for d in reopened.dropped_on_open] == [
        (str(third), BATCH_SIZE),
        (str(file_names.log_file(folder, 6)), 0),
    ]
    again.shutdown()
    assert [(offset, key, True) for offset, key in oracle[:5]] == kafka_records(folder)


# --- clean shutdown (items 29, 30) ----------------------------------------------------------------


def count_recoveries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Base offsets of the segments `LogSegment.recover` re-scans from now on."""
    recovered: list[int] = []
    real_recover = LogSegment.recover

    def counting_recover(segment: LogSegment, *args: Any, **kwargs: Any) -> int:
        recovered.append(segment.base_offset)
        return real_recover(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", counting_recover)
    return recovered


def test_clean_shutdown_marker_lifecycle_controls_recovery(
    dirs: list[Path], clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    recovered = count_recoveries(monkeypatch)
    opened_with: list[bool | None] = []
    real_open = Log.open

    def checking_open(directory: str | Path, *args: object, **kwargs: object) -> Log:
        assert not (Path(directory).parent / file_names.CLEAN_SHUTDOWN_FILE).exists()
        opened_with.append(kwargs.get("had_clean_shutdown"))  # type: ignore[arg-type]
        return real_open(directory, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Log, "open", checking_open)

    manager = new_manager(dirs, clock)
    manager.startup()
    for partition in range(3):
        append(manager.get_or_create_log("t", partition), clock, 6)
    manager.shutdown()
    for directory in dirs:
        assert (directory / file_names.CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":-1}'

    opened_with.clear()
    clean = new_manager(dirs, clock)
    clean.startup()
    assert opened_with == [True, True, True]
    assert recovered == []
    assert not any((d / file_names.CLEAN_SHUTDOWN_FILE).exists() for d in dirs), "a crash now must count as unclean"
    crash(clean)

    opened_with.clear()
    unclean = new_manager(dirs, clock)
    unclean.startup()
    assert opened_with == [False, False, False]
    assert sorted(recovered) == [4, 4, 4], "only the segment holding the recovery point is re-scanned"
    for partition in range(3):
        log = unclean.get_log("t", partition)
        assert log is not None and log.log_end_offset == 6
    unclean.shutdown()


def test_clean_restart_does_not_rescan_a_segment_without_index_entries(
    tmp_path: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = new_manager([tmp_path], clock)
    manager.startup()
    append(manager.get_or_create_log("t", 0), clock, 5)
    manager.shutdown()
    recovered = count_recoveries(monkeypatch)
    again = new_manager([tmp_path], clock)
    again.startup()
    again.shutdown()
    assert file_names.index_file(tmp_path / "t-0", 4).exists()
    assert recovered == []


# --- retention (item 46) --------------------------------------------------------------------------


def test_time_retention_leaves_one_segment_and_old_offsets_out_of_range(
    manager: LogManager, dirs: list[Path], clock: MockClock
) -> None:
    manager.set_topic_config("t", LogConfig.from_properties({"retention.ms": "60000"}, base=CONFIG))
    log = manager.get_or_create_log("t", 0)
    append(log, clock, 7)
    assert log.num_segments == 4
    assert manager.run_retention() == 0
    clock.sleep(60_001)
    assert manager.run_retention() == 4
    assert log.num_segments == 1
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    folder = dirs[0] / "t-0"
    assert len(list(folder.glob("*" + file_names.DELETED_SUFFIX))) == 4 * 3  # .log, .index, .timeindex
    assert manager.delete_due_files() == 4
    clock.sleep(CONFIG.file_delete_delay_ms)
    assert manager.delete_due_files() == 0
    assert list(folder.glob("*" + file_names.DELETED_SUFFIX)) == []
    append(log, clock, 1)
    assert [record.offset for record in log.records()] == [7]
    manager.checkpoint_log_start_offsets()
    assert checkpoint_text(dirs[0], file_names.LOG_START_OFFSET_CHECKPOINT) == "0\n0\n"
    assert [offset for offset, _, _ in kafka_records(folder)] == [7]


def test_size_retention_leaves_one_segment(manager: LogManager, dirs: list[Path], clock: MockClock) -> None:
    manager.set_topic_config("t", LogConfig.from_properties({"retention.bytes": 2 * BATCH_SIZE}, base=CONFIG))
    log = manager.get_or_create_log("t", 0)
    oracle = append(log, clock, 8)
    assert log.num_segments == 4
    assert manager.run_retention() == 3
    assert [segment.base_offset for segment in log.log_segments()] == [6]
    assert log.log_start_offset == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5)
    assert manager.run_retention() == 0
    clock.sleep(CONFIG.file_delete_delay_ms)
    manager.delete_due_files()
    assert [(offset, key) for offset, key, _ in kafka_records(dirs[0] / "t-0")] == oracle[6:]


@pytest.mark.parametrize(("policy", "deleted"), [("compact", 0), ("compact,delete", 4), ("delete", 4)])
def test_time_retention_skips_compact_only_logs(
    manager: LogManager, clock: MockClock, policy: str, deleted: int
) -> None:
    config = LogConfig.from_properties({"retention.ms": "1000", "cleanup.policy": policy}, base=CONFIG)
    manager.set_topic_config("t", config)
    log = manager.get_or_create_log("t", 0)
    append(log, clock, 7)
    clock.sleep(1_001)
    assert manager.run_retention() == deleted
    assert log.log_start_offset == (0 if deleted == 0 else 7)


def test_a_log_deleted_during_a_retention_pass_is_skipped(
    tmp_path: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = new_manager([tmp_path], clock)
    manager.startup()
    first = manager.get_or_create_log("t", 0)
    manager.get_or_create_log("t", 1)
    real_delete_old_segments = Log.delete_old_segments

    def delete_the_other_partition(log: Log) -> int:
        if log is first:
            manager.delete_log("t", 1)
        return real_delete_old_segments(log)

    monkeypatch.setattr(Log, "delete_old_segments", delete_the_other_partition)
    assert manager.run_retention() == 0
    assert manager.offline_dirs == {}
    assert sorted(manager.all_logs()) == [("t", 0)]
    manager.shutdown()


# --- async partition delete -----------------------------------------------------------------------


def test_delete_log_renames_the_folder_and_removes_it_after_the_delay(
    manager: LogManager, dirs: list[Path], clock: MockClock
) -> None:
    log = manager.get_or_create_log("my-topic", 3)
    append(log, clock, 3)
    manager.checkpoint_recovery_points()
    assert manager.delete_log("my-topic", 3)
    assert log.closed
    assert manager.get_log("my-topic", 3) is None
    assert not (dirs[0] / "my-topic-3").exists()
    (renamed,) = [entry for entry in dirs[0].iterdir() if entry.name.endswith(file_names.DELETE_DIR_SUFFIX)]
    assert re.fullmatch(r"my-topic-3\.[0-9a-f]{32}-delete", renamed.name)
    assert sorted(path.name for path in renamed.iterdir() if path.suffix == file_names.LOG_SUFFIX) == [
        "00000000000000000000.log",
        "00000000000000000002.log",
    ]
    assert checkpoint_text(dirs[0], file_names.RECOVERY_POINT_CHECKPOINT) == "0\n0\n"
    assert manager.delete_due_files() == 1
    clock.sleep(DIR_DELETE_DELAY_MS - 1)
    assert manager.delete_due_files() == 1 and renamed.exists()
    clock.sleep(1)
    assert manager.delete_due_files() == 0
    assert not renamed.exists()
    recreated = manager.get_or_create_log("my-topic", 3)
    assert (recreated.log_start_offset, recreated.log_end_offset) == (0, 0)


def test_delete_folder_left_by_a_previous_run_is_removed_after_the_delay(tmp_path: Path, clock: MockClock) -> None:
    leftover = tmp_path / file_names.delete_dir_name("gone", 0, "0123456789abcdef0123456789abcdef")
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"old bytes")
    manager = new_manager([tmp_path], clock)
    manager.startup()
    assert manager.all_logs() == {}
    assert manager.log_dir_of("gone", 0) is None
    assert manager.delete_due_files() == 1 and leftover.exists()
    clock.sleep(DIR_DELETE_DELAY_MS)
    assert manager.delete_due_files() == 0
    assert not leftover.exists()
    manager.shutdown()


def test_partition_of_a_topic_deleted_while_down_is_renamed_stray_and_deleted_after_the_delay(
    tmp_path: Path, clock: MockClock
) -> None:
    before = new_manager([tmp_path], clock)
    before.startup()
    kept = append(before.get_or_create_log("kept", 0), clock, 3)
    append(before.get_or_create_log("gone", 0), clock, 3)
    append(before.get_or_create_log("gone", 1), clock, 1)
    before.shutdown()

    manager = new_manager([tmp_path], clock)
    manager.startup(is_stray=lambda tp: tp[0] == "gone")

    assert sorted(manager.all_logs()) == [("kept", 0)]
    assert manager.log_dir_of("gone", 0) is None
    assert [(record.offset, record.key) for record in manager.all_logs()[("kept", 0)].records()] == kept
    strays = sorted(entry.name for entry in tmp_path.iterdir() if entry.name.endswith(file_names.STRAY_DIR_SUFFIX))
    assert [file_names.parse_stray_dir_name(name) for name in strays] == [("gone", 0), ("gone", 1)]
    assert not (tmp_path / "gone-0").exists()
    manager.checkpoint_recovery_points()
    assert OffsetCheckpointFile(tmp_path / file_names.RECOVERY_POINT_CHECKPOINT).read() == {("kept", 0): 3}
    assert manager.delete_due_files() == 2
    clock.sleep(DIR_DELETE_DELAY_MS - 1)
    assert manager.delete_due_files() == 2
    clock.sleep(1)
    assert manager.delete_due_files() == 0
    assert sorted(entry.name for entry in tmp_path.iterdir() if entry.is_dir()) == ["kept-0"]
    manager.shutdown()


# --- flush and topic configs ----------------------------------------------------------------------


def test_flush_dirty_logs_honours_flush_ms(manager: LogManager, clock: MockClock) -> None:
    manager.set_topic_config("hourly", LogConfig.from_properties({"flush.ms": "3600000"}, base=CONFIG))
    hourly = manager.get_or_create_log("hourly", 0)
    never = manager.get_or_create_log("never", 0)
    append(hourly, clock, 1)
    append(never, clock, 1)
    assert manager.flush_dirty_logs() == 0
    assert hourly.recovery_point == never.recovery_point == 0
    clock.sleep(3_600_000)
    assert manager.flush_dirty_logs() == 1
    assert (hourly.recovery_point, never.recovery_point) == (1, 0)
    assert manager.flush_dirty_logs() == 0


def test_set_topic_config_applies_to_open_logs_and_new_partitions(manager: LogManager, clock: MockClock) -> None:
    existing = manager.get_or_create_log("t", 0)
    other = manager.get_or_create_log("other", 0)
    bigger = LogConfig.from_properties({"segment.bytes": 5 * BATCH_SIZE}, base=CONFIG)
    manager.set_topic_config("t", bigger)
    assert existing.config is bigger
    assert other.config is CONFIG
    assert manager.get_or_create_log("t", 1).config is bigger
    append(existing, clock, 5)
    assert existing.num_segments == 1
    explicit = LogConfig.from_properties({"retention.ms": "5"}, base=CONFIG)
    manager.get_or_create_log("t", 2, explicit)
    assert {manager.get_log("t", p).config.retention_ms for p in range(3)} == {5}  # type: ignore[union-attr]


# --- idempotence and lifecycle --------------------------------------------------------------------


def test_every_operation_is_idempotent(dirs: list[Path], clock: MockClock) -> None:
    manager = new_manager(dirs, clock)
    manager.startup()
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    assert manager.get_or_create_log("t", 0) is log
    append(log, clock, 3)
    manager.checkpoint_recovery_points()
    first = checkpoint_text(dirs[0], file_names.RECOVERY_POINT_CHECKPOINT)
    manager.checkpoint_recovery_points()
    assert checkpoint_text(dirs[0], file_names.RECOVERY_POINT_CHECKPOINT) == first
    assert manager.run_retention() == manager.run_retention() == 0
    assert manager.delete_log("t", 0)
    assert not manager.delete_log("t", 0)
    assert not manager.delete_log("never-created", 9)
    kept = manager.get_or_create_log("kept", 0)
    append(kept, clock, 2)
    manager.shutdown()
    manager.shutdown()
    assert kept.closed
    with pytest.raises(KafkaStorageError, match="not started"):
        manager.get_or_create_log("kept", 0)
    manager.startup()
    reopened = manager.get_log("kept", 0)
    assert reopened is not None and reopened.log_end_offset == 2
    manager.shutdown()


def test_bad_log_dir_lists_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError, match="no log dirs"):
        LogManager([])
    with pytest.raises(KafkaStorageError, match="duplicate log dirs"):
        LogManager([tmp_path / "a", tmp_path / "b" / ".." / "a"])


# --- the broker's scheduled work on the MockClock: the code the log-manager actor runs ------------

SMALL_CLEANER = CleanerConfig(log_cleaner_dedupe_buffer_size=2 * 1024 * 1024, log_cleaner_backoff_ms=1_000)
COMPACTED = LogConfig.from_properties({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}, base=CONFIG)
TASKS = [
    "kafka-log-retention",
    "kafka-recovery-point-checkpoint",
    "kafka-log-start-offset-checkpoint",
    "highwatermark-checkpoint",
    "kafka-log-flusher",
    "log-cleaner",
    "PeriodicProducerExpirationCheck",
]


def broker_config(dirs: list[Path], **overrides: str) -> BrokerConfig:
    """Kafka's interval settings, shortened: every task first due 1 s after startup, then at its own pace."""
    properties = {
        "log.dirs": ",".join(str(d) for d in dirs),
        "node.id": str(NODE_ID),
        "log.initial.task.delay.ms": "1000",
        "log.retention.check.interval.ms": "5000",
        "log.flush.offset.checkpoint.interval.ms": "2000",
        "log.flush.start.offset.checkpoint.interval.ms": "3000",
        "replica.high.watermark.checkpoint.interval.ms": "500",
        "log.flush.scheduler.interval.ms": "700",
        "log.cleaner.backoff.ms": "1000",
        "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
        "log.segment.delete.delay.ms": str(DIR_DELETE_DELAY_MS),
    }
    properties.update(overrides)
    return BrokerConfig.from_properties(properties)


def scheduled_manager(dirs: list[Path], clock: MockClock, **overrides: str) -> tuple[LogManager, Scheduler]:
    config = broker_config(dirs, **overrides)
    manager = LogManager.from_broker_config(config, clock=clock, cluster_id=CLUSTER_ID)
    manager.startup()
    scheduler = Scheduler(clock)
    manager.schedule(scheduler, config)
    return manager, scheduler


def append_repeating(log: Log, clock: MockClock, count: int, keys: int) -> None:
    """`count` one-record batches cycling over `keys` keys (k000, k001, ...): compaction keeps the last of each."""
    for index in range(count):
        log.append(batch(clock, index % keys))


def test_schedule_runs_each_task_at_its_kafka_interval(dirs: list[Path], clock: MockClock) -> None:
    manager, scheduler = scheduled_manager(dirs, clock)
    assert scheduler.run_due() == []
    clock.sleep(1_000)
    assert scheduler.run_due() == TASKS
    ran: dict[str, list[int]] = {name: [] for name in TASKS}
    for second_tenth in range(1, 61):
        clock.sleep(100)
        for name in scheduler.run_due():
            ran[name].append(second_tenth * 100)
    assert ran == {
        "kafka-log-retention": [5000],
        "kafka-recovery-point-checkpoint": [2000, 4000, 6000],
        "kafka-log-start-offset-checkpoint": [3000, 6000],
        "highwatermark-checkpoint": list(range(500, 6001, 500)),
        "kafka-log-flusher": [700, 1400, 2100, 2800, 3500, 4200, 4900, 5600],
        "log-cleaner": list(range(1000, 6001, 1000)),
        "PeriodicProducerExpirationCheck": [],
    }
    manager.shutdown()


def idempotent_batch(clock: MockClock, producer_id: int, sequence: int) -> bytes:
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    builder.append(b"k", VALUE, timestamp=clock.milliseconds())
    return builder.build()


def test_scheduled_check_forgets_producers_idle_for_the_expiration(dirs: list[Path], clock: MockClock) -> None:
    manager, scheduler = scheduled_manager(
        dirs[:1], clock, **{"producer.id.expiration.ms": "5000", "producer.id.expiration.check.interval.ms": "2000"}
    )
    log = manager.get_or_create_log("t", 0)
    log.append(idempotent_batch(clock, 1, 0))
    ran_at_ms = []
    for second in range(1, 10):
        clock.sleep(1_000)
        if second == 2:
            log.append(idempotent_batch(clock, 2, 0))
        if "PeriodicProducerExpirationCheck" in scheduler.run_due():
            ran_at_ms.append(second * 1_000)
        # Producer 1 (last batch at 0 s) is idle for 5 s from 5 s on, producer 2 (at 2 s) from 7 s on; each is
        # forgotten at the first check after that.
        assert log.producer_count == (1 if second < 2 else 2 if second < 5 else 1 if second < 7 else 0), second
    assert ran_at_ms == [1_000, 3_000, 5_000, 7_000, 9_000]
    log.append(idempotent_batch(clock, 1, 99))
    manager.shutdown()


def test_a_reopened_broker_forgets_producers_expired_while_it_was_down(dirs: list[Path], clock: MockClock) -> None:
    config = broker_config(dirs[:1], **{"producer.id.expiration.ms": "5000"})
    manager = LogManager.from_broker_config(config, clock=clock, cluster_id=CLUSTER_ID)
    manager.startup()
    manager.get_or_create_log("t", 0).append(idempotent_batch(clock, 1, 0))
    manager.shutdown()
    clock.sleep(5_000)
    manager = LogManager.from_broker_config(config, clock=clock, cluster_id=CLUSTER_ID)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    assert log.producer_count == 0
    log.append(idempotent_batch(clock, 1, 7))
    manager.shutdown()


def test_scheduled_passes_checkpoint_flush_and_apply_retention(dirs: list[Path], clock: MockClock) -> None:
    manager, scheduler = scheduled_manager(dirs[:1], clock)
    config = LogConfig.from_properties({"retention.ms": "4000", "flush.ms": "600"}, base=CONFIG)
    log = manager.get_or_create_log("t", 0, config)
    append(log, clock, 7)
    log.delete_records(1)
    assert log.recovery_point == 6, "each roll flushed up to the new segment's base"
    clock.sleep(1_000)
    scheduler.run_due()
    assert log.recovery_point == 7, "flush.ms passed: the flusher flushed the active segment"
    assert OffsetCheckpointFile(dirs[0] / file_names.LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 1}
    assert OffsetCheckpointFile(dirs[0] / file_names.REPLICATION_OFFSET_CHECKPOINT).read() == {("t", 0): 7}
    clock.sleep(2_000)  # the recovery points are checkpointed every 2 s, from 1 s on
    scheduler.run_due()
    assert OffsetCheckpointFile(dirs[0] / file_names.RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 7}
    assert log.num_segments == 4, "retention.ms had not passed at the first retention pass"
    clock.sleep(3_000)  # the next retention pass is due at 6 s, and the segments are older than 4 s by then
    scheduler.run_due()
    assert (log.num_segments, log.log_start_offset) == (1, 7)
    clock.sleep(DIR_DELETE_DELAY_MS + 5_000)  # the next retention pass removes the `.deleted` files
    scheduler.run_due()
    assert list((dirs[0] / "t-0").glob("*" + file_names.DELETED_SUFFIX)) == []
    manager.shutdown()


def test_the_cleaner_pass_compacts_one_partition_at_a_time_and_checkpoints_it(
    dirs: list[Path], clock: MockClock
) -> None:
    manager = new_manager(dirs[:2], clock, cleaner_config=SMALL_CLEANER)
    manager.startup()
    logs = {p: manager.get_or_create_log("c", p, COMPACTED) for p in range(2)}
    for log in logs.values():
        append_repeating(log, clock, 8, keys=2)
    plain = manager.get_or_create_log("plain", 0)
    append_repeating(plain, clock, 8, keys=2)

    assert manager.run_cleaner() == 1  # log.cleaner.threads = 1: the first of two equally dirty partitions
    assert [record.offset for record in logs[0].records()] == [4, 5, 6, 7]
    assert len(list(logs[1].records())) == 8
    assert OffsetCheckpointFile(dirs[0] / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {("c", 0): 6}
    assert manager.run_cleaner() == 1
    assert [record.offset for record in logs[1].records()] == [4, 5, 6, 7]
    assert OffsetCheckpointFile(dirs[1] / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {("c", 1): 6}
    assert manager.run_cleaner() == 0
    assert len(list(plain.records())) == 8, "a delete-policy topic is never compacted"

    assert manager.delete_log("c", 1)
    assert OffsetCheckpointFile(dirs[1] / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {}
    manager.shutdown()
    again = new_manager(dirs[:2], clock, cleaner_config=SMALL_CLEANER, topic_configs={"c": COMPACTED})
    again.startup()
    assert again.cleaner is not None and again.cleaner.cleaner_offsets() == {("c", 0): 6}
    again.shutdown()


def test_no_cleaner_pass_runs_on_a_partition_while_it_moves_between_dirs(
    dirs: list[Path], clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka pauses a moving partition's cleaning: while the copy is under way (its rounds held back here) the
    dirty compacted partition is not cleaned; once it has moved, it is."""
    gate = threading.Event()
    advance = LocalPartition.advance_move

    def held_back(handle: LocalPartition) -> Pending[MoveProgress]:
        gate.wait(timeout=30)
        return advance(handle)

    monkeypatch.setattr(LocalPartition, "advance_move", held_back)
    manager = new_manager(dirs[:2], clock, cleaner_config=SMALL_CLEANER)
    manager.startup()
    log = manager.get_or_create_log("c", 0, COMPACTED)
    append_repeating(log, clock, 8, keys=2)
    target = next(d for d in dirs[:2] if d != manager.log_dir_of("c", 0))
    assert manager.alter_replica_log_dirs({("c", 0): str(target)}) == {("c", 0): None}
    assert manager.run_cleaner() == 0
    gate.set()
    assert manager.wait_for_moves(30) and manager.log_dir_of("c", 0) == target
    assert manager.run_cleaner() == 1
    assert [record.offset for record in manager.get_or_create_log("c", 0).records()] == [4, 5, 6, 7]
    manager.shutdown()


class CleanFails:
    """A partition handle whose cleaning always fails, around a `LocalPartition` (not one itself)."""

    def __init__(self, local: LocalPartition) -> None:
        self.local = local

    def __getattr__(self, method: str) -> object:
        return getattr(self.local, method)

    def swap_cleaned(self, cleaned: CleanedLog) -> Pending[CleanResult]:
        return completed(lambda: self._fail())

    def _fail(self) -> CleanResult:
        raise CorruptRecordError("bad batch", path="broken-0")


class BreakingPartitions(LocalPartitions):
    """In-process partitions, except that topic `broken` fails to clean."""

    def open(self, tp: tuple[str, int], *args: object) -> LocalPartition:
        local = super().open(tp, *args)  # type: ignore[arg-type]
        return CleanFails(local) if tp[0] == "broken" else local  # type: ignore[return-value]


def test_a_partition_that_fails_to_clean_backs_off_on_the_clock_while_others_are_cleaned(
    dirs: list[Path], clock: MockClock
) -> None:
    cleaner_config = CleanerConfig(
        log_cleaner_dedupe_buffer_size=4 * 1024 * 1024, log_cleaner_threads=2, log_cleaner_backoff_ms=1_000
    )
    partitions = BreakingPartitions(clock)
    manager = new_manager(dirs[:1], clock, cleaner_config=cleaner_config, partitions=partitions)
    manager.startup()
    for topic in ("broken", "healthy"):
        manager.get_or_create_partition(topic, 0, COMPACTED)
    healthy = manager.get_log("healthy", 0)
    assert healthy is not None
    append_repeating(healthy, clock, 8, keys=2)
    broken = manager.partition("broken", 0)
    assert isinstance(broken, CleanFails)
    append_repeating(broken.local.log, clock, 8, keys=2)
    with pytest.raises(TypeError, match="not a partition of this process"):
        manager.get_log("broken", 0)

    assert manager.run_cleaner() == 1  # both chosen at once; only the healthy one succeeds
    failure = manager.uncleanable()[("broken", 0)]
    assert (failure.failures, failure.retry_at_ms - failure.failed_at_ms) == (1, 1_000)
    assert "CorruptRecordError" in failure.reason
    assert manager.run_cleaner() == 0
    assert manager.uncleanable()[("broken", 0)].failures == 1, "backing off: not tried again yet"
    clock.sleep(1_000)
    assert manager.run_cleaner() == 0
    again = manager.uncleanable()[("broken", 0)]
    assert (again.failures, again.retry_at_ms - again.failed_at_ms) == (2, 2_000)
    manager.shutdown()


class Deferred:
    """A `Pending` whose work runs only when collected, as a Ray call's answer arrives later."""

    def __init__(self, events: list[str], tp: str, work: Callable[[], object]) -> None:
        events.append(f"ask {tp}")
        self._events, self._tp, self._work = events, tp, work

    def result(self, timeout: float | None = None) -> object:
        self._events.append(f"answer {self._tp}")
        return self._work()


class DeferredState:
    def __init__(self, local: LocalPartition, events: list[str]) -> None:
        self.local, self.events = local, events

    def __getattr__(self, method: str) -> object:
        return getattr(self.local, method)

    def state(self) -> Deferred:
        return Deferred(self.events, self.local.log.directory.name, lambda: self.local.state().result())


def test_every_partition_is_asked_before_any_answer_is_collected(dirs: list[Path], clock: MockClock) -> None:
    events: list[str] = []

    class DeferringPartitions(LocalPartitions):
        def open(self, *args: object) -> LocalPartition:
            return DeferredState(super().open(*args), events)  # type: ignore[arg-type, return-value]

    manager = new_manager(dirs[:1], clock, partitions=DeferringPartitions(clock))
    manager.startup()
    for partition in range(3):
        manager.get_or_create_partition("t", partition)
    manager.checkpoint_high_watermarks()
    assert events == ["ask t-0", "ask t-1", "ask t-2", "answer t-0", "answer t-1", "answer t-2"]
    assert OffsetCheckpointFile(dirs[0] / file_names.REPLICATION_OFFSET_CHECKPOINT).read() == {
        ("t", p): 0 for p in range(3)
    }
    manager.shutdown()


class SilentState:
    """A partition whose `state` fails while `silent` is set, as a partition host's does while Ray restarts it."""

    def __init__(self, local: LocalPartition, silent: list[bool]) -> None:
        self.local, self.silent = local, silent

    def __getattr__(self, method: str) -> object:
        return getattr(self.local, method)

    def state(self) -> Deferred:
        def answer() -> object:
            if self.silent[0]:
                raise BrokerNotAvailableError("restarting")
            return self.local.state().result()

        return Deferred([], self.local.log.directory.name, answer)


def test_a_partition_that_does_not_answer_keeps_its_checkpointed_offsets(dirs: list[Path], clock: MockClock) -> None:
    """A checkpoint pass while a partition's process restarts must not drop its entries: without its log start
    offset the restarted partition would open at its first segment's base and serve the records DeleteRecords
    removed (the other partitions' entries are rewritten as usual)."""
    silent = [False]

    class SilentPartitions(LocalPartitions):
        def open(self, *args: object) -> LocalPartition:
            return SilentState(super().open(*args), silent)  # type: ignore[arg-type, return-value]

    manager = new_manager(dirs[:1], clock, partitions=SilentPartitions(clock))
    manager.startup()
    logs = {}
    for partition in range(2):
        manager.get_or_create_partition("t", partition)
        partition_handle = manager.partition("t", partition)
        assert isinstance(partition_handle, SilentState)
        logs[partition] = partition_handle.local.log
        append(logs[partition], clock, 10)
        logs[partition].delete_records(6)
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    before = OffsetCheckpointFile(dirs[0] / file_names.LOG_START_OFFSET_CHECKPOINT).read()
    assert before == {("t", 0): 6, ("t", 1): 6}
    silent[0] = True
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    assert OffsetCheckpointFile(dirs[0] / file_names.LOG_START_OFFSET_CHECKPOINT).read() == before
    assert OffsetCheckpointFile(dirs[0] / file_names.REPLICATION_OFFSET_CHECKPOINT).read() == {
        ("t", 0): 10,
        ("t", 1): 10,
    }
    silent[0] = False
    manager.shutdown()
