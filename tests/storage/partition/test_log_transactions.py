"""Transactions on a partition log: markers, the last stable offset, `.txnindex` files, read_committed fetches.

Ported from Kafka's UnifiedLogTest (each test says which case), checked against a model of the log in the
property test at the end, and against a partition Apache Kafka 3.9.1 wrote (tests/fixtures/kafka/
kafka-3.9.1__transactions, see its PROVENANCE entry): our recovery must rebuild its files byte for byte.

Kafka's unit tests move the high watermark by hand (`updateHighWatermark`); so do these (`set_replicated(True)`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from storage.partition.log import Log, LogAppendInfo
from storage.partition.log_loader import rebuild_producer_state
from storage.partition.producer_append import AppendOrigin
from storage.partition.producer_state import ProducerStateManager
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import ControlRecordType, RecordBatch, RecordBatchBuilder, build_control_batch
from storage.segment.log_segments import LogSegments
from storage.segment.transaction_index import AbortedTxn
from tests.conftest import KAFKA_SAMPLES_DIR
from tests.storage.builders import START_MS, crash

ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT
KAFKA_TXN_DIR = KAFKA_SAMPLES_DIR / "kafka-3.9.1__transactions" / "data"
# After the Kafka fixture's last timestamp, and before any of its producers would expire.
KAFKA_FIXTURE_NOW_MS = 1_795_444_600_000


def open_log(directory: Path, clock: MockClock, **overrides: object) -> Log:
    properties = {"segment.bytes": 5 * 1024 * 1024, "file.delete.delay.ms": 0}
    properties.update({key.replace("_", "."): value for key, value in overrides.items()})
    log = Log.open(directory, LogConfig.from_properties(properties), clock=clock)
    log.set_replicated(True)
    return log


class Producer:
    """Kafka's `appendTransactionalAsLeader`: batches of `count` records with consecutive sequences."""

    def __init__(self, log: Log, producer_id: int, epoch: int = 0) -> None:
        self.log, self.producer_id, self.epoch, self.sequence = log, producer_id, epoch, 0

    def __call__(self, count: int, transactional: bool = True) -> LogAppendInfo:
        builder = RecordBatchBuilder(
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
            is_transactional=transactional,
        )
        for index in range(count):
            builder.append(b"%d" % self.producer_id, b"%d-%d" % (self.sequence, index), timestamp=START_MS)
        info = self.log.append(builder.build())
        self.sequence += count
        return info

    def end(self, control_type: ControlRecordType, coordinator_epoch: int = 0) -> LogAppendInfo:
        return self.log.append_transaction_marker(self.producer_id, self.epoch, coordinator_epoch, control_type)


def plain(log: Log, count: int) -> LogAppendInfo:
    """Kafka's `appendNonTransactionalAsLeader`."""
    builder = RecordBatchBuilder()
    for index in range(count):
        builder.append(None, b"plain-%d" % index, timestamp=START_MS)
    return log.append(builder.build())


def all_aborted(log: Log) -> list[AbortedTxn]:
    return [txn for segment in log.log_segments() for txn in segment.txn_index.entries]


@pytest.fixture
def clock() -> MockClock:
    return MockClock(START_MS)


# --- UnifiedLogTest ------------------------------------------------------------------------------------------


def test_first_unstable_offset_no_transactional_data(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    plain(log, 3)
    assert log.first_unstable_offset is None
    log.close()


def test_first_unstable_offset_with_transactional_data(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    producer = Producer(log, 137, epoch=5)
    first = producer(3)
    assert log.first_unstable_offset == first.first_offset
    producer(1)
    assert log.first_unstable_offset == first.first_offset
    commit = producer.end(COMMIT)
    assert log.first_unstable_offset == first.first_offset, "unchanged until the high watermark passes the marker"
    log.update_high_watermark(commit.last_offset + 1)
    assert log.first_unstable_offset is None
    log.close()


def test_last_stable_offset_with_mixed_producer_data(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    first_producer, second_producer = Producer(log, 137, 5), Producer(log, 983, 5)
    first = first_producer(3)
    plain(log, 3)
    second = second_producer(3)
    assert log.first_unstable_offset == first.first_offset
    abort = first_producer.end(ABORT)
    log.update_high_watermark(abort.last_offset + 1)
    assert log.first_unstable_offset == second.first_offset
    commit = second_producer.end(COMMIT)
    log.update_high_watermark(commit.last_offset + 1)
    assert log.first_unstable_offset is None
    log.close()


def transaction_index_scenario(append: Callable[..., None]) -> None:
    """UnifiedLogTest.testTransactionIndexUpdated's appends: `append(kind, producer, count)` in this order."""
    for step in [
        ("data", 1, 5), ("plain", 0, 3), ("data", 2, 2), ("data", 1, 4), ("data", 3, 3), ("plain", 0, 2),
        ("data", 1, 10), ("end", 1, ABORT), ("data", 2, 6), ("data", 4, 3), ("plain", 0, 10), ("data", 3, 9),
        ("end", 3, COMMIT), ("data", 4, 8), ("data", 2, 7), ("end", 2, ABORT), ("plain", 0, 10), ("data", 4, 4),
        ("end", 4, COMMIT),
    ]:  # fmt: skip
        append(*step)


EXPECTED_ABORTED = [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]


def check_unstable_offsets(log: Log) -> None:
    log.update_high_watermark(30)
    assert log.first_unstable_offset == 8
    log.update_high_watermark(75)
    assert log.first_unstable_offset == 36
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None


def test_transaction_index_updated(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    producers = {pid: Producer(log, pid) for pid in (1, 2, 3, 4)}

    def append(kind: str, producer: int, argument: int) -> None:
        if kind == "plain":
            plain(log, argument)
        elif kind == "data":
            producers[producer](argument)
        else:
            producers[producer].end(ControlRecordType(argument))

    transaction_index_scenario(append)
    assert log.log_end_offset == 90
    assert all_aborted(log) == EXPECTED_ABORTED
    assert log.collect_aborted_transactions(0, 90) == EXPECTED_ABORTED
    check_unstable_offsets(log)
    log.close()


def test_transaction_index_updated_through_replication(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    buffer = bytearray()
    sequences = {1: 0, 2: 0, 3: 0, 4: 0}

    def append(kind: str, producer: int, argument: int) -> None:
        written = list(iter_any_batches(bytes(buffer)))
        offset = written[-1].last_offset + 1 if written else 0
        if kind == "end":
            buffer.extend(
                build_control_batch(
                    ControlRecordType(argument), timestamp=START_MS, producer_id=producer, base_offset=offset
                )
            )
            return
        builder = RecordBatchBuilder(
            base_offset=offset,
            producer_id=producer if kind == "data" else -1,
            producer_epoch=0 if kind == "data" else -1,
            base_sequence=sequences[producer] if kind == "data" else -1,
            is_transactional=kind == "data",
        )
        for index in range(argument):
            builder.append(None, b"%d" % index, timestamp=START_MS)
        if kind == "data":
            sequences[producer] += argument
        buffer.extend(builder.build())

    transaction_index_scenario(append)
    log.append_as_follower(bytes(buffer))
    assert all_aborted(log) == EXPECTED_ABORTED
    check_unstable_offsets(log)
    log.close()


def assert_fetches_stop_at_the_last_stable_offset(log: Log) -> None:
    for offset in range(log.log_start_offset, log.last_stable_offset):
        assert log.read(offset, 100_000, isolation="txn_committed").records, offset
    for offset in range(log.last_stable_offset, log.log_end_offset + 1):
        fetch = log.read(offset, 100_000, isolation="txn_committed")
        assert (fetch.records, fetch.aborted_transactions) == (b"", ()), offset


def test_fetch_up_to_last_stable_offset(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    first, second = Producer(log, 1), Producer(log, 2)
    first(5)
    plain(log, 3)
    second(2)
    first(4)
    plain(log, 2)
    first(10)
    assert_fetches_stop_at_the_last_stable_offset(log)
    log.update_high_watermark(log.log_end_offset)
    assert_fetches_stop_at_the_last_stable_offset(log)
    first.end(COMMIT)
    assert log.last_stable_offset == 0
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 8
    assert_fetches_stop_at_the_last_stable_offset(log)
    second.end(ABORT)
    assert log.last_stable_offset == 8
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset
    assert_fetches_stop_at_the_last_stable_offset(log)
    log.close()


def test_aborted_transaction_spanning_multiple_segments(tmp_path: Path, clock: MockClock) -> None:
    probe = RecordBatchBuilder(producer_id=137, producer_epoch=5, base_sequence=0, is_transactional=True)
    for index in range(3):
        probe.append(b"137", b"0-%d" % index, timestamp=START_MS)
    log = open_log(tmp_path / "t-0", clock, segment_bytes=len(probe.build()))
    producer = Producer(log, 137, epoch=5)
    first = producer(3)
    producer(3)
    assert log.active_segment.base_offset == 3
    abort = producer.end(ABORT)
    log.update_high_watermark(abort.last_offset + 1)
    assert log.first_unstable_offset is None
    assert [segment.txn_index.entries for segment in log.log_segments()] == [(), (), (AbortedTxn(137, 0, 6, 7),)]
    fetch = log.read(first.first_offset, 2048, isolation="txn_committed")
    assert fetch.aborted_transactions == (AbortedTxn(137, 0, 6, 7),)
    log.close()


def test_zombie_coordinator_fenced_empty_transaction(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    builder = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    for index in range(10):
        builder.append(None, b"%d" % index, timestamp=START_MS)
    commit = build_control_batch(COMMIT, timestamp=START_MS, producer_id=1, base_offset=10)
    log.append_as_follower(builder.build() + commit)
    log.append_transaction_marker(1, 0, 2, ABORT)
    log.append_transaction_marker(1, 0, 2, ABORT)
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_transaction_marker(1, 0, 1, ABORT)
    assert log.log_end_offset == end
    assert all_aborted(log) == []
    log.close()


def test_last_stable_offset_does_not_exceed_log_start_offset_mid_segment(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    producer = Producer(log, 1)
    producer(5)
    plain(log, 3)
    log.roll()
    producer(5)
    assert log.first_unstable_offset == 0
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(5)
    assert log.first_unstable_offset == 5
    assert log.last_stable_offset == 5
    log.close()


# --- markers, origins and the LSO ----------------------------------------------------------------------------


def test_the_lso_does_not_pass_a_completed_transaction_until_the_high_watermark_passes_its_marker(
    tmp_path: Path, clock: MockClock
) -> None:
    log = open_log(tmp_path / "t-0", clock)
    producer = Producer(log, 1)
    producer(3)
    plain(log, 2)
    log.update_high_watermark(log.log_end_offset)
    marker = producer.end(COMMIT)
    assert log.last_stable_offset == 0
    log.update_high_watermark(marker.last_offset)
    assert log.last_stable_offset == 0, "the marker itself is not below the high watermark yet"
    log.update_high_watermark(marker.last_offset + 1)
    assert log.last_stable_offset == marker.last_offset + 1
    log.close()


def test_a_single_replica_moves_its_lso_with_every_append(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    log.set_replicated(False)
    producer = Producer(log, 1)
    producer(3)
    assert (log.high_watermark, log.last_stable_offset) == (3, 0)
    producer.end(ABORT)
    assert (log.high_watermark, log.last_stable_offset) == (4, 4)
    assert all_aborted(log) == [AbortedTxn(1, 0, 3, 4)]
    log.close()


def test_a_marker_for_a_producer_without_an_open_transaction_changes_no_index_nor_lso(
    tmp_path: Path, clock: MockClock
) -> None:
    log = open_log(tmp_path / "t-0", clock)
    other = Producer(log, 2)
    other(2)
    info = log.append_transaction_marker(9, 3, 0, ABORT)
    assert (info.first_offset, log.first_unstable_offset, all_aborted(log)) == (2, 0, [])
    marker = RecordBatch(log.read(2).records)
    assert (marker.is_control, marker.is_transactional, marker.producer_id, marker.producer_epoch) == (
        True,
        True,
        9,
        3,
    )
    assert marker.end_transaction_marker() is not None
    log.close()


def test_a_marker_from_an_older_producer_epoch_is_refused(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    Producer(log, 1, epoch=4)(2)
    with pytest.raises(InvalidProducerEpochError):
        log.append_transaction_marker(1, 3, 0, COMMIT)
    assert log.log_end_offset == 2
    with pytest.raises(InvalidRequestError):
        log.append_transaction_marker(1, 4, 0, ControlRecordType.LEADER_CHANGE)
    log.close()


def test_clients_may_not_write_markers_nor_leave_a_transaction_without_one(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    producer = Producer(log, 1)
    producer(2)
    with pytest.raises(InvalidRecordError):
        log.append(build_control_batch(COMMIT, timestamp=START_MS, producer_id=1))
    with pytest.raises(InvalidTxnStateError):
        producer(1, transactional=False)
    assert log.log_end_offset == 2
    with pytest.raises(InvalidRequestError):
        log.append(b"", origin=AppendOrigin.REPLICATION)
    log.close()


def test_a_coordinator_write_needs_a_whole_marker(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    unkeyed = RecordBatchBuilder(producer_id=1, producer_epoch=0, is_transactional=True, is_control=True)
    unkeyed.append(b"\x00\x00\x00\x00", None, timestamp=START_MS)
    without_producer = build_control_batch(COMMIT, timestamp=START_MS)
    for batch in (unkeyed.build(), without_producer):
        with pytest.raises(InvalidRecordError):
            log.append(batch, origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 0
    log.close()


class Refusing:
    """A KIP-890 check that refuses every transaction start, counting the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def check_transaction_start(self, producer_id: int, producer_epoch: int, first_sequence: int) -> None:
        self.calls.append((producer_id, producer_epoch, first_sequence))
        raise InvalidTxnStateError("not part of an ongoing transaction")


def test_verification_is_asked_before_a_client_opens_a_transaction(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    batch = RecordBatchBuilder(producer_id=5, producer_epoch=1, base_sequence=0, is_transactional=True)
    batch.append(None, b"x", timestamp=START_MS)
    refusing = Refusing()
    with pytest.raises(InvalidTxnStateError):
        log.append(batch.build(), verification=refusing)
    assert (refusing.calls, log.log_end_offset, log.first_unstable_offset) == ([(5, 1, 0)], 0, None)
    log.append(batch.build())
    assert log.first_unstable_offset == 0
    log.close()


# --- truncation, retention, recovery -----------------------------------------------------------------------


def test_truncation_drops_index_entries_and_reopens_transactions(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300)
    first, second = Producer(log, 1), Producer(log, 2)
    first(2)  # 0-1
    second(2)  # 2-3
    first.end(ABORT)  # 4: LSO 2 (second is open)
    plain(log, 2)  # 5-6
    second.end(ABORT)  # 7
    log.update_high_watermark(log.log_end_offset)
    assert all_aborted(log) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 7, 8)]
    assert log.num_segments > 1
    log.truncate_to(7)
    assert all_aborted(log) == [AbortedTxn(1, 0, 4, 2)]
    assert (log.first_unstable_offset, log.last_stable_offset) == (2, 2)
    log.truncate_to(4)
    assert all_aborted(log) == []
    assert log.first_unstable_offset == 0
    log.close()


def test_retention_deletes_a_segments_transaction_index_with_it(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300)
    producer = Producer(log, 1)
    producer(2)
    producer.end(ABORT)
    while log.num_segments < 3:
        plain(log, 1)
    log.update_high_watermark(log.log_end_offset)
    first_index = log.log_segments()[0].txn_index.path
    assert first_index.exists()
    log.delete_records(log.log_segments()[1].base_offset)
    assert log.delete_old_segments() == 1
    assert not first_index.exists()
    assert not list(log.directory.glob(f"*{file_names.TXN_INDEX_SUFFIX}*"))
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    log.close()


def test_an_open_transaction_and_the_lso_survive_a_clean_restart(tmp_path: Path, clock: MockClock) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, clock)
    plain(log, 2)
    Producer(log, 1)(3)
    log.update_high_watermark(log.log_end_offset)
    log.close()
    reopened = open_log(directory, clock)
    assert (reopened.first_unstable_offset, reopened.last_stable_offset) == (2, 2)
    resumed = Producer(reopened, 1)
    resumed.sequence = 3
    with pytest.raises(InvalidTxnStateError):
        resumed(1, transactional=False)
    reopened.close()


@pytest.mark.parametrize("lose_indexes", [False, True])
def test_recovery_rebuilds_the_transaction_indexes(tmp_path: Path, clock: MockClock, lose_indexes: bool) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, segment_bytes=300)
    first, second = Producer(log, 1), Producer(log, 2)
    for _ in range(3):
        first(2)
        second(1)
        first.end(ABORT)
        plain(log, 1)
        second.end(ABORT)
    written = {path.name: path.read_bytes() for path in directory.glob(f"*{file_names.TXN_INDEX_SUFFIX}")}
    assert len(written) >= 2
    crash(log)
    for path in directory.glob(f"*{file_names.TXN_INDEX_SUFFIX}"):
        if lose_indexes:
            path.unlink()
        else:
            path.write_bytes(b"\xff" * 50)
    recovered = Log.open(directory, log.config, clock=clock)
    assert {path.name: path.read_bytes() for path in directory.glob(f"*{file_names.TXN_INDEX_SUFFIX}")} == written
    assert recovered.first_unstable_offset is None
    recovered.close()


# --- Apache Kafka 3.9.1's own files --------------------------------------------------------------------------


def kafka_partition(tmp_path: Path) -> Path:
    shutil.copytree(KAFKA_TXN_DIR, tmp_path / "data")
    return tmp_path / "data" / "txn-0"


def files_with(directory: Path, *suffixes: str) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in directory.iterdir() if path.suffix in suffixes}


def committed_values(log: Log, start: int = 0) -> list[bytes]:
    """What a read_committed consumer hands out from `start`, by Kafka's `CompletedFetch` rule: aborted
    transactions sorted by first offset; a producer joins the aborted set once a batch reaches an entry's first
    offset, and leaves it at its ABORT marker; its transactional batches are skipped meanwhile; markers are never
    handed out."""
    values: list[bytes] = []
    position = start
    while position < log.last_stable_offset:
        fetch = log.read(position, 4096, isolation="txn_committed")
        assert fetch.aborted_transactions is not None
        pending = sorted(fetch.aborted_transactions, key=lambda txn: txn.first_offset)
        aborted: set[int] = set()
        for batch in iter_any_batches(fetch.records):
            assert isinstance(batch, RecordBatch)
            while pending and pending[0].first_offset <= batch.last_offset:
                aborted.add(pending.pop(0).producer_id)
            if batch.is_control:
                if batch.control_type() == ABORT:
                    aborted.discard(batch.producer_id)
            elif not (batch.is_transactional and batch.producer_id in aborted):
                values.extend(record.value or b"" for record in batch.records() if record.offset >= position)
            position = batch.last_offset + 1
    return values


def test_kafka_written_log_opens_with_its_open_transaction_and_aborted_ones(tmp_path: Path) -> None:
    partition = kafka_partition(tmp_path)
    before = files_with(partition, file_names.TXN_INDEX_SUFFIX, file_names.PRODUCER_SNAPSHOT_SUFFIX)
    log = Log.open(partition, clock=MockClock(KAFKA_FIXTURE_NOW_MS))
    assert (log.log_end_offset, log.first_unstable_offset, log.last_stable_offset) == (51, 49, 49)
    assert log.collect_aborted_transactions(0, 51) == [
        AbortedTxn(1, 3, 5, 6),
        AbortedTxn(0, 6, 9, 7),
        AbortedTxn(1, 14, 44, 45),
        AbortedTxn(0, 45, 46, 47),
    ]
    assert [value.rstrip(b".") for value in committed_values(log)] == [
        b"a-0", b"a-1", b"b-2", b"b-3", b"p-0", b"p-1", b"a-5",
    ]  # fmt: skip
    log.close()
    assert files_with(partition, file_names.TXN_INDEX_SUFFIX, file_names.PRODUCER_SNAPSHOT_SUFFIX) == before


def test_recovery_rebuilds_kafkas_transaction_indexes_and_snapshot_byte_for_byte(tmp_path: Path) -> None:
    partition = kafka_partition(tmp_path)
    kafka_files = files_with(partition, file_names.TXN_INDEX_SUFFIX, file_names.PRODUCER_SNAPSHOT_SUFFIX)
    for name in kafka_files:
        (partition / name).unlink()
    (partition.parent / file_names.CLEAN_SHUTDOWN_FILE).unlink()
    log = Log.open(partition, clock=MockClock(KAFKA_FIXTURE_NOW_MS), had_clean_shutdown=False, recovery_point=0)
    assert (log.first_unstable_offset, log.last_stable_offset) == (49, 49)
    log.close()
    rebuilt = files_with(partition, file_names.TXN_INDEX_SUFFIX, file_names.PRODUCER_SNAPSHOT_SUFFIX)
    end_snapshot = f"{file_names.offset_name(51)}{file_names.PRODUCER_SNAPSHOT_SUFFIX}"
    assert rebuilt == {
        name: data for name, data in kafka_files.items() if name.endswith(file_names.TXN_INDEX_SUFFIX)
    } | {end_snapshot: kafka_files[end_snapshot]}


def test_producer_state_rebuilt_at_each_of_kafkas_snapshots_has_its_bytes(tmp_path: Path) -> None:
    partition = kafka_partition(tmp_path)
    snapshots = files_with(partition, file_names.PRODUCER_SNAPSHOT_SUFFIX)
    for name in snapshots:
        (partition / name).unlink()
    log = Log.open(partition, clock=MockClock(KAFKA_FIXTURE_NOW_MS))
    segments = LogSegments()
    for segment in log.log_segments():
        segments.add(segment)
    for name, kafka_bytes in sorted(snapshots.items()):
        offset = int(name.split(".")[0])
        scratch = tmp_path / f"state-{offset}"
        scratch.mkdir()
        state = ProducerStateManager(scratch)
        rebuild_producer_state(state, segments, offset, KAFKA_FIXTURE_NOW_MS)
        assert state.write_snapshot(offset).read_bytes() == kafka_bytes, name
    log.close()


# --- the model -------------------------------------------------------------------------------------------


@dataclass
class Model:
    """The log as a list of batches, and what Kafka's rules make of it."""

    open_first: dict[int, int] = field(default_factory=dict)
    completed: list[tuple[int, int, int]] = field(default_factory=list)  # (first offset, marker offset, producer)
    aborted: list[AbortedTxn] = field(default_factory=list)
    # (offset, value) of every record a read_committed consumer must see, and of those still undecided.
    visible: list[tuple[int, bytes]] = field(default_factory=list)
    pending_values: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    high_watermark: int = 0

    def first_unstable(self) -> int | None:
        unreplicated = [first for first, marker, _ in self.completed if marker >= self.high_watermark]
        return min([*self.open_first.values(), *unreplicated], default=None)

    def last_stable(self) -> int:
        first = self.first_unstable()
        return first if first is not None and first < self.high_watermark else self.high_watermark


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(1, 3), st.integers(1, 3)),
        st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
        st.tuples(st.just("end"), st.integers(1, 3), st.sampled_from([ABORT, COMMIT])),
        st.tuples(st.just("hw"), st.just(0), st.integers(0, 100)),
        st.tuples(st.just("restart"), st.just(0), st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPERATIONS)
def test_lso_aborted_transactions_and_read_committed_values_match_the_model(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, int, object]]
) -> None:
    directory = tmp_path_factory.mktemp("txn") / "t-0"
    clock = MockClock(START_MS)
    log = open_log(directory, clock, segment_bytes=400)
    producers = {pid: Producer(log, pid) for pid in (1, 2, 3)}
    model = Model()
    for kind, pid, argument in operations:
        end = log.log_end_offset
        if kind == "data":
            assert isinstance(argument, int)
            first = model.open_first.setdefault(pid, end)
            values = [(end + index, b"%d-%d" % (producers[pid].sequence, index)) for index in range(argument)]
            producers[pid](argument)
            model.pending_values.setdefault(first, []).extend(values)
        elif kind == "plain":
            assert isinstance(argument, int)
            plain(log, argument)
            model.visible.extend((end + index, b"plain-%d" % index) for index in range(argument))
        elif kind == "end":
            assert isinstance(argument, ControlRecordType)
            producers[pid].end(argument)
            if pid in model.open_first:
                first = model.open_first.pop(pid)
                others = [offset for other, offset in model.open_first.items() if other != pid]
                model.completed.append((first, end, pid))
                values = model.pending_values.pop(first)
                if argument == ABORT:
                    model.aborted.append(AbortedTxn(pid, first, end, min(others, default=end + 1)))
                else:
                    model.visible.extend(values)
        elif kind == "hw":
            assert isinstance(argument, int)
            # A leader's high watermark only moves forward (it goes back only by a truncation).
            model.high_watermark = log.update_high_watermark(max(argument, log.high_watermark))
        else:
            # A restart replays only what follows the newest snapshot (Kafka's too), so the transactions it had
            # completed above the high watermark are only known again once replicated: restart when they are.
            model.high_watermark = log.update_high_watermark(log.log_end_offset)
            if argument:
                log.close()
            else:
                crash(log)
            log = open_log(directory, clock, segment_bytes=400)
            for producer in producers.values():
                producer.log = log
        assert (log.first_unstable_offset, log.last_stable_offset) == (model.first_unstable(), model.last_stable())
        assert log.collect_aborted_transactions(0, log.log_end_offset) == model.aborted
    log.update_high_watermark(log.log_end_offset)
    model.high_watermark = log.log_end_offset
    for pid in list(model.open_first):
        producers[pid].end(ABORT)
    log.update_high_watermark(log.log_end_offset)
    assert committed_values(log) == [value for _, value in sorted(model.visible)]
    log.close()
