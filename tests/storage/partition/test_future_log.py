"""The future log: a partition's folder copied into another log dir while the log serves, then swapped in.

The oracle is the log itself: the moved folder holds the same bytes file for file, and the log answers the same
offsets, producer state, leader epochs and aborted transactions before and after; records written under the copy
read back once each, in order.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.errors import InvalidTopicError
from storage.partition.future_log import FutureLog
from storage.partition.log import Log
from storage.records.record_batch import ControlRecordType, RecordBatchBuilder, iter_batches
from storage.segment.log_segment import SegmentDeletedError

START_MS = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=4096, segment_index_bytes=1200, index_interval_bytes=256, file_delete_delay_ms=0)


@pytest.fixture
def clock() -> MockClock:
    return MockClock(START_MS)


def open_log(folder: Path, clock: MockClock) -> Log:
    return Log.open(folder, CONFIG, clock=clock)


def plain(log: Log, key: bytes, clock: MockClock) -> int:
    builder = RecordBatchBuilder()
    builder.append(key, b"v" * 100, timestamp=clock.milliseconds())
    return log.append(builder.build()).first_offset


class Producer:
    """An idempotent or transactional producer's batches of one record, with consecutive sequences."""

    def __init__(self, log: Log, producer_id: int, transactional: bool = False) -> None:
        self.log, self.producer_id, self.transactional, self.sequence = log, producer_id, transactional, 0

    def send(self, key: bytes) -> int:
        builder = RecordBatchBuilder(
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=self.sequence,
            is_transactional=self.transactional,
        )
        builder.append(key, b"p" * 80, timestamp=START_MS)
        self.sequence += 1
        return self.log.append(builder.build()).first_offset

    def end(self, result: ControlRecordType) -> None:
        self.log.append_transaction_marker(self.producer_id, 0, 0, result)


def keys(log: Log) -> list[tuple[int, bytes | None]]:
    return [(record.offset, record.key) for record in log.records()]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a partition folder but its owner's own (`.lock`, the high-watermark file)."""
    return {
        path.name: path.read_bytes()
        for path in sorted(folder.iterdir())
        if path.name not in (file_names.LOCK_FILE, file_names.HIGH_WATERMARK_FILE)
    }


def filled_log(tmp_path: Path, clock: MockClock) -> Log:
    """A log of several segments with an idempotent producer, an aborted transaction and an open one."""
    log = open_log(tmp_path / "a" / "orders-0", clock)
    log.set_replicated(True)
    idempotent = Producer(log, 7)
    aborted = Producer(log, 8, transactional=True)
    open_txn = Producer(log, 9, transactional=True)
    for index in range(60):
        plain(log, b"k%d" % index, clock)
        idempotent.send(b"i%d" % index)
        if index == 20:
            aborted.send(b"a")
            aborted.end(ControlRecordType.ABORT)
        if index == 40:
            open_txn.send(b"o")
    log.become_leader(3)
    plain(log, b"epoch-3", clock)
    log.update_high_watermark(log.log_end_offset - 5)
    return log


def observed(log: Log) -> tuple[object, ...]:
    """What a move must not change."""
    return (
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        log.last_stable_offset,
        log.epoch_entries(),
        log.active_producers(),
        log.collect_aborted_transactions(0, log.log_end_offset),
        keys(log),
    )


def test_a_moved_log_is_byte_identical_and_answers_the_same(tmp_path: Path, clock: MockClock) -> None:
    log = filled_log(tmp_path, clock)
    (tmp_path / "b").mkdir()
    before = observed(log)
    source_files = folder_bytes(log.directory)
    future = FutureLog.create(log, tmp_path / "b")
    assert file_names.parse_future_dir_name(future.directory.name) == ("orders", 0)
    rounds = 0
    while future.size_bytes < log.size_in_bytes:
        assert future.copy(max_bytes=3000), "less than CAUGHT_UP_BYTES is left from the first round on"
        rounds += 1
    assert rounds > 3, "small rounds copy the log over several"
    swapped = future.swap()
    assert swapped.renamed and log.directory == tmp_path / "b" / "orders-0" == swapped.directory
    assert file_names.is_delete_dir_name(swapped.old_folder.name) and swapped.old_folder.parent == tmp_path / "a"
    assert not (tmp_path / "a" / "orders-0").exists()
    assert folder_bytes(log.directory) == source_files
    assert observed(log) == before
    after = plain(log, b"after", clock)
    assert after == before[1] and keys(log)[-1] == (after, b"after")
    log.close()
    reopened = open_log(tmp_path / "b" / "orders-0", clock)
    assert keys(reopened) == [*before[7], (after, b"after")]  # type: ignore[misc]
    assert reopened.active_producers() == log.active_producers()
    reopened.close()


def test_appends_under_the_copy_are_kept_once_each_in_order(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "a" / "clicks-3", clock)
    (tmp_path / "b").mkdir()
    producer = Producer(log, 11)
    written: list[tuple[int, bytes]] = []
    stop = threading.Event()

    def produce() -> None:
        index = 0
        while not stop.is_set() or index < 400:
            key = b"c%d" % index
            written.append((producer.send(key), key))
            index += 1

    appender = threading.Thread(target=produce)
    for index in range(100):
        written.append((producer.send(b"before%d" % index), b"before%d" % index))
    future = FutureLog.create(log, tmp_path / "b")
    appender.start()
    while not future.copy(max_bytes=2000):
        pass
    swapped = future.swap()
    stop.set()
    appender.join()
    assert log.directory == swapped.directory
    assert keys(log) == written
    assert [offset for offset, _ in written] == list(range(len(written)))
    old_logs = {path.name: path.read_bytes() for path in swapped.old_folder.glob("*.log")}
    for name, data in old_logs.items():
        assert (log.directory / name).read_bytes()[: len(data)] == data, f"{name} differs from the folder it copies"
    log.close()
    reopened = open_log(swapped.directory, clock)
    assert keys(reopened) == written
    assert [p.last_sequence for p in reopened.active_producers()] == [len(written) - 1]
    reopened.close()


def test_a_truncation_under_the_copy_makes_it_start_over(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "a" / "t-0", clock)
    (tmp_path / "b").mkdir()
    for index in range(80):
        plain(log, b"k%d" % index, clock)
    future = FutureLog.create(log, tmp_path / "b")
    future.copy()
    log.truncate_to(50)
    for index in range(50, 70):
        plain(log, b"new%d" % index, clock)
    while not future.copy(max_bytes=5000):
        pass
    future.swap()
    expected = [(i, b"k%d" % i) for i in range(50)] + [(i, b"new%d" % i) for i in range(50, 70)]
    assert keys(log) == expected
    log.close()
    reopened = open_log(tmp_path / "b" / "t-0", clock)
    assert keys(reopened) == expected
    reopened.close()


def test_segments_deleted_under_the_copy_are_not_moved(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "a" / "t-0", clock)
    (tmp_path / "b").mkdir()
    for index in range(80):
        plain(log, b"k%d" % index, clock)
    future = FutureLog.create(log, tmp_path / "b")
    future.copy()
    log.delete_records(40)
    first_kept = log.log_segments()[0].base_offset
    future.copy()
    future.swap()
    assert log.log_start_offset == 40
    assert sorted(path.name for path in log.directory.glob("*.log"))[0] == file_names.log_file(Path(), first_kept).name
    assert keys(log) == [(i, b"k%d" % i) for i in range(40, 80)]


def test_a_read_of_a_segment_chosen_before_the_swap_starts_again_on_the_moved_log(
    tmp_path: Path, clock: MockClock
) -> None:
    log = open_log(tmp_path / "a" / "t-0", clock)
    (tmp_path / "b").mkdir()
    for index in range(40):
        plain(log, b"k%d" % index, clock)
    chosen = log.log_segments()
    future = FutureLog.create(log, tmp_path / "b")
    future.copy()
    future.swap()
    with pytest.raises(SegmentDeletedError):
        chosen[0].read(0, 1000)
    assert log.read(0, 1000).records == log.log_segments()[0].read(0, 1000).records  # type: ignore[union-attr]


def test_a_copy_a_stopped_move_left_is_taken_up_where_it_equals_the_log(tmp_path: Path, clock: MockClock) -> None:
    """As Kafka reloads a future log it finds and fetches on from its end: a move started again into the same dir
    takes up the copy in its `-future` folder (another `-future` folder of the partition there is deleted), keeps
    what equals the log and copies the rest, here a chunk of a segment damaged as by a crash before its fsync and a
    segment the copy never reached; the moved folder is byte for byte the log's."""
    log = filled_log(tmp_path, clock)
    (tmp_path / "b").mkdir()
    source_files = folder_bytes(log.directory)
    first = FutureLog.create(log, tmp_path / "b")
    first.copy(max_bytes=3 * 4096)
    partial = first.size_bytes
    stale = tmp_path / "b" / file_names.future_dir_name("orders", 0, "0" * 32)
    stale.mkdir()
    damaged = file_names.log_file(first.directory, log.log_segments()[1].base_offset)
    with open(damaged, "r+b") as file:
        file.seek(100)
        file.write(b"\0" * 50)
    taken_up = FutureLog.create(log, tmp_path / "b")
    assert taken_up.directory == first.directory and not stale.exists()
    assert 0 < taken_up.size_bytes < partial, "the damaged segment's copy is kept only up to the damage"
    while not taken_up.copy():
        pass
    swapped = taken_up.swap()
    assert swapped.directory == tmp_path / "b" / "orders-0"
    assert folder_bytes(log.directory) == source_files
    log.close()


def test_the_copys_end_offset_follows_the_bytes_copied_within_a_segment(tmp_path: Path, clock: MockClock) -> None:
    """What DescribeLogDirs reports of a future replica (its lag, Kafka's `logEndOffset` of the future log): after
    each small round, every record below the copy's end offset is whole in the copied bytes, the end offset never
    goes back, it moves inside a segment (not only from one segment's base to the next) and reaches the log end."""
    config = LogConfig(segment_bytes=64 * 1024, segment_index_bytes=4096, index_interval_bytes=256)
    log = Log.open(tmp_path / "a" / "orders-0", config, clock=clock)
    for index in range(1000):
        plain(log, b"k%d" % index, clock)
    (tmp_path / "b").mkdir()
    future = FutureLog.create(log, tmp_path / "b")
    bases = {segment.base_offset for segment in log.log_segments()}
    ends = []
    while future.size_bytes < log.size_in_bytes:
        future.copy(max_bytes=3000)
        whole = {
            record.offset
            for path in sorted(future.directory.glob("*" + file_names.LOG_SUFFIX))
            for batch in iter_batches(path.read_bytes())
            for record in batch.records()
        }
        assert set(range(future.log_end_offset)) <= whole | set(range(log.log_start_offset))
        assert not ends or future.log_end_offset >= ends[-1]
        ends.append(future.log_end_offset)
    assert ends[-1] == log.log_end_offset
    assert any(end not in bases for end in ends[:-1]), "the end offset moved inside a segment"
    log.close()


def test_a_future_folder_name_too_long_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidTopicError):
        file_names.future_dir_name("t" * 220, 0, "0" * 32)
    assert file_names.parse_future_dir_name(file_names.future_dir_name("a-b", 12, "f" * 32)) == ("a-b", 12)
    assert file_names.parse_partition_dir_name(file_names.future_dir_name("a-b", 12, "f" * 32)) is None


def test_a_deleted_copy_leaves_the_log_as_it_was(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "a" / "t-0", clock)
    (tmp_path / "b").mkdir()
    for index in range(30):
        plain(log, b"k%d" % index, clock)
    before = observed(log)
    future = FutureLog.create(log, tmp_path / "b")
    future.copy()
    future.delete()
    assert not future.directory.exists()
    assert log.directory == tmp_path / "a" / "t-0" and observed(log) == before
