"""Tests for `storage.partition.log`, after Kafka's UnifiedLogTest and LocalLogTest (spec §4 items 1-11, 21-24, 36, 37):
appends, offsets, rolls, reads, time lookups, truncation and flushing, checked against list oracles and
against kafka-python, which decodes what the log returns and what it leaves on disk."""

from __future__ import annotations

import bisect
import random
import struct
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import file_names
from storage.clock import MockClock
from storage.errors import (
    InvalidRecordError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from storage.partition.log import LEADER_EPOCH, Log
from storage.partition.log_read import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from storage.records.compression import CompressionType
from storage.records.file_records import TimestampAndOffset
from storage.records.record_batch import (
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RecordBatch,
    TimestampType,
)
from tests.storage.builders import (
    ALL_CODECS,
    START_MS,
    Rec,
    all_records,
    as_recs,
    batch_bytes,
    batches_in,
    crash,
    kafka_batch,
    kafka_decode,
    open_log,
    segment_bases,
    simple_batch,
    simple_records,
    sparse_index_oracle,
)

HOUR_MS = 3_600_000


def make_log(logs: list[Log], directory: Path, clock: MockClock, **overrides: object) -> Log:
    log = open_log(directory, clock, **overrides)
    logs.append(log)
    return log


def as_stored(client: bytes, base_offset: int) -> bytes:
    """A client batch as the leader stores it: baseOffset assigned and its leader epoch stamped, in place."""
    out = bytearray(client)
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, PARTITION_LEADER_EPOCH_OFFSET, LEADER_EPOCH)
    return bytes(out)


def follower_batch(base_offset: int, count: int = 1, *, timestamp: int = START_MS) -> bytes:
    records = [Rec(f"k{base_offset + i}".encode(), f"v{base_offset + i}".encode(), timestamp) for i in range(count)]
    return batch_bytes(records, base_offset=base_offset)


# --- appends and offsets -------------------------------------------------------------------------


def test_offsets_are_sequential_and_each_read_returns_the_batch_at_that_offset(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=400, index_interval_bytes=1)
    oracle: list[Rec] = []
    for i in range(40):
        records = simple_records(1 + i % 3, tag=i)
        info = log.append(batch_bytes(records))
        assert (info.first_offset, info.last_offset) == (len(oracle), len(oracle) + len(records) - 1)
        assert info.record_count == len(records) and info.batch_count == 1
        oracle += records
    assert log.log_end_offset == len(oracle)
    assert log.num_segments > 3
    for offset in range(len(oracle)):
        batch = batches_in(log.read(offset, 1).records)[0]
        assert batch.base_offset <= offset <= batch.last_offset
        first = batch.records()[offset - batch.base_offset]
        assert (first.offset, first.key, first.value) == (offset, oracle[offset].key, oracle[offset].value)
    assert as_recs(all_records(log)) == oracle


def test_offsets_are_assigned_in_place(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    """Only baseOffset and the leader epoch change; both lie outside the CRC, so the CRC still holds."""
    log = make_log(logs, log_dir, clock)
    log.append(simple_batch(3))
    client = simple_batch(4, tag=1)
    info = log.append(client)
    stored = log.read(info.first_offset, 10_000).records
    assert len(stored) == len(client)
    assert struct.unpack_from(">q", stored)[0] == 3
    assert struct.unpack_from(">i", stored, PARTITION_LEADER_EPOCH_OFFSET)[0] == LEADER_EPOCH
    assert stored[8:12] == client[8:12]
    assert stored[16:] == client[16:]
    assert stored == as_stored(client, 3)
    assert RecordBatch(stored).is_valid()


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda codec: codec.kafka_name)
def test_kafka_python_decodes_reads_and_log_files(
    logs: list[Log], log_dir: Path, clock: MockClock, codec: CompressionType
) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=1500, index_interval_bytes=100)
    oracle: list[Rec] = []
    for i in range(25):
        records = [
            Rec(f"key-{i}-{j}".encode(), (b"payload-%d " % i) * 20, START_MS + i * 10 + j, (("n", str(j).encode()),))
            for j in range(1 + i % 4)
        ]
        log.append(batch_bytes(records, compression=codec))
        oracle += records
    assert log.num_segments > 2
    fetched = []
    offset = 0
    while offset < log.log_end_offset:
        decoded = kafka_decode(log.read(offset, 700).records)
        assert decoded and all(record.codec == int(codec) for record in decoded)
        fetched += [record for record in decoded if record.offset >= offset]
        offset = fetched[-1].offset + 1
    assert [record.offset for record in fetched] == list(range(len(oracle)))
    assert as_recs(fetched) == oracle
    log.close()
    on_disk = []
    for base in segment_bases(log_dir):
        on_disk += kafka_decode(file_names.log_file(log_dir, base).read_bytes())
    assert [record.offset for record in on_disk] == list(range(len(oracle)))
    assert as_recs(on_disk) == oracle


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda codec: codec.kafka_name)
def test_batches_built_by_kafka_python_read_back_equal(
    logs: list[Log], log_dir: Path, clock: MockClock, codec: CompressionType
) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=10_000)
    batches = [
        [Rec(b"k", b"v", START_MS), Rec(None, b"null key", START_MS + 1), Rec(b"", b"empty key", START_MS + 2)],
        [Rec(b"tombstone", None, START_MS + 3), Rec(b"empty value", b"", START_MS + 4)],
        [Rec(None, None, START_MS + 5, (("h1", b"a"), ("h2", None), ("h1", b""))), Rec(b"x" * 300, b"y" * 500, 7)],
        [Rec(b"k%d" % i, b"compressible " * 30, START_MS + 10 + i, (("i", bytes([i])),)) for i in range(10)],
    ]
    oracle: list[Rec] = []
    for records in batches:
        log.append(kafka_batch(records, codec))
        oracle += records
    assert as_recs(all_records(log)) == oracle
    assert as_recs(kafka_decode(b"".join(log.read(o, 1).records for o in (0, 3, 5, 7)))) == oracle
    stored_codecs = {batch.compression for o in (0, 3, 5, 7) for batch in batches_in(log.read(o, 1).records)}
    assert codec in stored_codecs  # the 10 compressible records were stored with the producer's codec


def test_log_append_time_topic_stamps_broker_time(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, message_timestamp_type="LogAppendTime")
    clock.sleep(12_345)
    now = clock.milliseconds()
    for codec in (CompressionType.NONE, CompressionType.GZIP):
        info = log.append(batch_bytes(simple_records(3, timestamp=START_MS - HOUR_MS), compression=codec))
        assert info.log_append_time == now
        assert info.max_timestamp == now
        batch = batches_in(log.read(info.first_offset, 1).records)[0]
        assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert batch.max_timestamp == now
        assert batch.is_valid()
        assert [record.timestamp for record in batch.records()] == [now] * 3
    decoded = kafka_decode(log.read(0, 10_000).records)
    assert [record.timestamp for record in decoded] == [now] * 6
    assert {record.timestamp_type for record in decoded} == {1}
    assert log.active_segment.max_timestamp_so_far == now


def test_topic_codec_different_from_producer_is_stored_with_the_topic_codec(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = make_log(logs, log_dir, clock, compression_type="zstd")
    records = [Rec(b"k%d" % i, b"value " * 40, START_MS + i, (("h", b"v"),)) for i in range(5)]
    log.append(kafka_batch(records, CompressionType.GZIP))
    log.append(batch_bytes(records, compression=CompressionType.NONE))
    stored = log.read(0, 100_000).records
    assert [batch.compression for batch in batches_in(stored)] == [CompressionType.ZSTD] * 2
    decoded = kafka_decode(stored)
    assert [record.offset for record in decoded] == list(range(10))
    assert as_recs(decoded) == records + records


def test_message_set_larger_than_segment_bytes_is_rejected(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=300)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(simple_batch(10, value_size=50))
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_max_message_bytes_applies_to_leader_not_follower(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, max_message_bytes=200)
    big = simple_batch(5, value_size=40)
    with pytest.raises(RecordTooLargeError):
        log.append(big)
    follower = bytearray(big)
    follower[0:8] = (0).to_bytes(8, "big")
    info = log.append_as_follower(bytes(follower))
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (0, 4, 5)


def test_compacted_topic_rejects_unkeyed_records(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, cleanup_policy="compact")
    with pytest.raises(InvalidRecordError):
        log.append(batch_bytes([Rec(b"k", b"v"), Rec(None, b"v")]))
    log.append(batch_bytes([Rec(b"k", b"v"), Rec(b"k", None)]))
    assert log.log_end_offset == 2


def test_follower_appends_keep_offsets_and_reads_skip_gaps(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=300, index_interval_bytes=1)
    bases = [0, 3, 10, 12, 25, 40, 42, 60]
    for base in bases:
        log.append_as_follower(follower_batch(base, 2))
    assert log.log_end_offset == 62
    present = sorted(base + i for base in bases for i in range(2))
    for offset in range(62):
        records = [record for batch in batches_in(log.read(offset, 1).records) for record in batch.records()]
        expected_next = present[bisect.bisect_left(present, offset)]
        assert min(record.offset for record in records if record.offset >= offset) == expected_next
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(follower_batch(61))
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(follower_batch(70) + follower_batch(70))
    assert log.log_end_offset == 62


def test_append_after_follower_gap_continues_from_log_end(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    log.append_as_follower(follower_batch(100, 3))
    assert log.append(simple_batch(2)).first_offset == 103


def test_follower_offsets_beyond_the_relative_range_roll_a_new_segment(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = make_log(logs, log_dir, clock)
    log.append_as_follower(follower_batch(0, 2))
    far = 2**31 + 5
    log.append_as_follower(follower_batch(far, 2))
    assert [segment.base_offset for segment in log.log_segments()] == [0, far]
    assert [record.offset for record in all_records(log)] == [0, 1, far, far + 1]
    assert log.read(5, 1000).fetch_offset_metadata.segment_base_offset == far


# --- rolls ------------------------------------------------------------------------------------------


def test_size_based_roll_eleven_batches_make_two_segments(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    set_size = len(simple_batch(1))
    log = make_log(logs, log_dir, clock, segment_bytes=10 * (set_size - 1))
    for _ in range(11):
        log.append(simple_batch(1))
    assert log.num_segments == 2
    assert [segment.size for segment in log.log_segments()] == [9 * set_size, 2 * set_size]


def test_time_based_roll_during_append(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    segment_ms = HOUR_MS
    log = make_log(logs, log_dir, clock, segment_ms=segment_ms)

    def no_timestamp() -> bytes:
        return simple_batch(1, timestamp=NO_TIMESTAMP)

    assert log.num_segments == 1
    clock.sleep(segment_ms + 1)
    log.append(no_timestamp())
    assert log.num_segments == 1, "no roll into an empty segment"
    log.append(no_timestamp())
    assert log.num_segments == 2, "wall clock expired for records without timestamps"
    for expected in (3, 4):
        clock.sleep(segment_ms + 1)
        log.append(no_timestamp())
        assert log.num_segments == expected
    timestamp = clock.milliseconds() + segment_ms + 1
    log.append(simple_batch(1, timestamp=timestamp))
    assert log.num_segments == 4, "first batch has no timestamp: still wall clock, which has not expired"
    clock.sleep(segment_ms + 1)
    log.append(simple_batch(1, timestamp=timestamp))
    assert log.num_segments == 5
    clock.sleep(segment_ms + 1)
    log.append(simple_batch(1, timestamp=timestamp))
    assert log.num_segments == 5, "record time, not wall clock, decides once the first batch has a timestamp"
    log.append(simple_batch(1, timestamp=clock.milliseconds()))
    assert log.num_segments == 6, "the record's timestamp is more than segment.ms after the first batch's"
    clock.sleep(segment_ms + 1)
    with pytest.raises(InvalidRecordError):
        log.append(b"")
    assert log.num_segments == 6, "an empty append never rolls"


def test_time_based_roll_jitter(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    random.seed(1)
    segment_ms, max_jitter = HOUR_MS, 20 * 60 * 1000
    log = make_log(logs, log_dir, clock, segment_ms=segment_ms, segment_jitter_ms=max_jitter)
    log.append(simple_batch(1, timestamp=clock.milliseconds()))
    jitter = log.active_segment.rolling_jitter_ms
    assert 0 < jitter < max_jitter
    clock.sleep(segment_ms - max_jitter)
    log.append(simple_batch(1, timestamp=clock.milliseconds()))
    assert log.num_segments == 1
    clock.sleep(max_jitter - jitter)
    log.append(simple_batch(1, timestamp=clock.milliseconds()))
    assert log.num_segments == 1, "exactly segment.ms - jitter has passed: not more"
    clock.sleep(1)
    log.append(simple_batch(1, timestamp=clock.milliseconds()))
    assert log.num_segments == 2


def test_jitter_is_drawn_per_segment_below_min_of_jitter_and_segment_ms(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = make_log(logs, log_dir, clock, segment_ms=50, segment_jitter_ms=10_000)
    jitters = set()
    for _ in range(30):
        log.roll()
        jitters.add(log.active_segment.rolling_jitter_ms)
    assert all(0 <= jitter < 50 for jitter in jitters)
    assert len(jitters) > 1


@pytest.mark.parametrize("with_timestamps", [True, False])
def test_roll_when_an_index_is_full(logs: list[Log], log_dir: Path, clock: MockClock, with_timestamps: bool) -> None:
    """segment.index.bytes=48: 6 offset slots and 4 time slots, the last of which is kept for the final entry."""
    log = make_log(logs, log_dir, clock, segment_index_bytes=48, index_interval_bytes=0)
    for i in range(22):
        log.append(simple_batch(1, timestamp=START_MS + i if with_timestamps else NO_TIMESTAMP, tag=i))
    per_segment = 4 if with_timestamps else 7  # one append without an entry, then 3 time / 6 offset entries
    sizes = [segment.read_next_offset() - segment.base_offset for segment in log.log_segments()]
    assert sizes == [per_segment] * (22 // per_segment) + [22 % per_segment]
    assert as_recs(all_records(log))[-1].value == simple_records(1, tag=21)[0].value


@pytest.mark.parametrize("index_bytes", [4, 12, 20])
def test_tiny_segment_index_bytes_still_appends(
    logs: list[Log], log_dir: Path, clock: MockClock, index_bytes: int
) -> None:
    """Below 24 bytes the time index has no slot but the reserved one, so it is full from the start and every
    append gets its own segment; below 12 it has no slot at all, and rolls must not need one."""
    log = make_log(logs, log_dir, clock, segment_index_bytes=index_bytes)
    for i in range(5):
        log.append(simple_batch(2, timestamp=START_MS + 10 * i, tag=i))
    assert [segment.base_offset for segment in log.log_segments()] == [0, 2, 4, 6, 8]
    crash(log)
    reopened = make_log(logs, log_dir, clock, segment_index_bytes=index_bytes)
    assert len(all_records(reopened)) == 10
    assert reopened.offset_for_timestamp(START_MS + 25) == 6
    assert reopened.append(simple_batch(1)).first_offset == 10


def test_roll_empty_active_segment_recreates_it(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    log.roll(0)
    assert log.num_segments == 1
    log.append_as_follower(follower_batch(0))
    log.append_as_follower(follower_batch(1))
    assert (log.num_segments, log.active_segment.base_offset, log.log_end_offset) == (1, 0, 2)
    log.roll()
    assert (log.num_segments, log.active_segment.base_offset) == (2, 2)
    log.active_segment.offset_index.resize(0)  # forces a roll of the empty active segment on the next append
    log.append_as_follower(follower_batch(2))
    assert log.active_segment.offset_index.max_entries > 1
    assert log.num_segments == 2
    assert [record.offset for record in all_records(log)] == [0, 1, 2]


def test_indexes_preallocated_while_active_and_trimmed_on_roll_and_close(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=500, index_interval_bytes=1, segment_index_bytes=1000)
    for i in range(30):
        log.append(simple_batch(1, timestamp=START_MS + i, tag=i))
    *sealed, active = log.log_segments()
    assert len(sealed) > 2
    for segment in sealed:
        assert segment.offset_index_path.stat().st_size == segment.offset_index.entries * 8 > 0
        assert segment.time_index_path.stat().st_size == segment.time_index.entries * 12 > 0
    assert active.offset_index_path.stat().st_size == 1000
    assert active.time_index_path.stat().st_size == 996
    entries = {
        segment.base_offset: (segment.offset_index.entries, segment.time_index.entries)
        for segment in log.log_segments()
    }
    log.close()
    for base, (offset_entries, time_entries) in entries.items():
        assert file_names.index_file(log_dir, base).stat().st_size == offset_entries * 8
        assert file_names.time_index_file(log_dir, base).stat().st_size >= time_entries * 12
        assert file_names.time_index_file(log_dir, base).stat().st_size % 12 == 0


def test_sparse_offset_index_matches_the_per_append_oracle(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    rng = random.Random(17)
    interval = 150
    log = make_log(logs, log_dir, clock, segment_bytes=1200, index_interval_bytes=interval)
    appends: dict[int, list[tuple[int, int]]] = {}
    for i in range(120):
        info = log.append(simple_batch(rng.randint(1, 4), value_size=rng.randint(1, 60), tag=i))
        appends.setdefault(log.active_segment.base_offset, []).append((info.valid_bytes, info.last_offset))
    assert len(appends) > 5
    for segment in log.log_segments():
        entries = [(entry.offset, entry.position) for entry in segment.offset_index.entries_list()]
        assert entries == sparse_index_oracle(appends[segment.base_offset], interval)


# --- reads ------------------------------------------------------------------------------------------


def test_read_with_min_one_message_and_too_small_max_length(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    first = simple_batch(3, value_size=100)
    log.append(first)
    log.append(simple_batch(2, tag=1))
    big = log.read(0, 10, min_one_message=True)
    assert big.records == as_stored(first, 0) and not big.first_entry_incomplete
    assert log.read(0, 0, min_one_message=False).records == b""
    tiny = log.read(0, 1, min_one_message=False)
    assert tiny.records == first[:1] and tiny.first_entry_incomplete
    assert batches_in(tiny.records) == []


def test_read_max_bytes_cuts_mid_batch(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    batches = [simple_batch(2, tag=i) for i in range(4)]
    for batch in batches:
        log.append(batch)
    whole = b"".join(as_stored(batch, 2 * i) for i, batch in enumerate(batches))
    for max_bytes in (len(batches[0]), len(batches[0]) + 7, 3 * len(batches[0]) - 1, 10_000):
        fetched = log.read(0, max_bytes)
        assert fetched.records == whole[:max_bytes]
        assert len(batches_in(fetched.records)) == min(len(batches), max_bytes // len(batches[0]))


def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = make_log(logs, log_dir, clock)
    log.append(simple_batch(2))
    middle = simple_batch(5, tag=1)
    log.append(middle)
    fetched = log.read(4, len(middle))
    assert [record.offset for record in batches_in(fetched.records)[0].records()] == [2, 3, 4, 5, 6]
    assert fetched.fetch_offset_metadata.message_offset == 4
    assert fetched.fetch_offset_metadata.relative_position == len(simple_batch(2))


def test_read_out_of_range(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    log.truncate_fully_and_start_at(1024)
    for i in range(3):
        log.append(simple_batch(1, tag=i))
    assert log.read(1027, 1000).records == b""
    for offset in (0, 1023, 1028, 10**9, -1):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset, 1000)
    assert log.read(1024, 1000).records != b""


def test_read_is_bounded_by_the_high_watermark(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=300, index_interval_bytes=1)
    for i in range(12):
        log.append(simple_batch(1, tag=i))
    assert log.num_segments > 2
    for high_watermark in range(13):
        assert log.update_high_watermark(high_watermark) == high_watermark
        for start in range(12):
            fetched = log.read(start, 100_000, isolation="high_watermark")
            offsets = [record.offset for batch in batches_in(fetched.records) for record in batch.records()]
            if start >= high_watermark:
                assert offsets == []
            else:
                assert offsets and offsets[0] == start and offsets[-1] < high_watermark
            log_end = [
                record.offset for batch in batches_in(log.read(start, 100_000).records) for record in batch.records()
            ]
            assert log_end and log_end[0] == start


def test_read_at_log_end_is_empty(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    assert log.read(0, 1000).records == b""
    log.append(simple_batch(2))
    assert log.read(2, 1000).records == b""
    assert log.read(2, 1000).fetch_offset_metadata.message_offset == 2


# --- time lookups ------------------------------------------------------------------------------------


def _timestamp_oracle(timestamps: list[int], target: int, log_start: int = 0) -> tuple[int, int] | None:
    hits = [(offset, ts) for offset, ts in enumerate(timestamps) if ts >= target and offset >= log_start]
    return min(hits) if hits else None


def _check_time_lookups(log: Log, timestamps: list[int]) -> None:
    for target in range(START_MS - 3, START_MS + 1010, 9):
        found = log.fetch_offset_by_timestamp(target)
        assert (None if found is None else (found.offset, found.timestamp)) == _timestamp_oracle(timestamps, target)
        assert log.offset_for_timestamp(target) == (None if found is None else found.offset)
    # Every batch was appended in the log's first leader epoch, 0.
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(NO_TIMESTAMP, 0, 0)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(NO_TIMESTAMP, len(timestamps), 0)
    largest = max(timestamps)
    at_max = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert at_max is not None
    assert (at_max.timestamp, at_max.offset) == (largest, timestamps.index(largest))


def test_time_lookups_match_the_oracle_before_and_after_index_rebuild(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    rng = random.Random(23)
    log = make_log(logs, log_dir, clock, segment_bytes=700, index_interval_bytes=120)
    timestamps: list[int] = []
    for i in range(90):
        stamps = [START_MS + rng.randint(0, 1000) for _ in range(rng.randint(1, 3))]
        log.append(batch_bytes([Rec(b"k%d" % i, b"v", ts) for ts in stamps]))
        timestamps += stamps
    assert log.num_segments > 8
    _check_time_lookups(log, timestamps)
    crash(log)
    for path in log_dir.iterdir():
        if path.suffix in (file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX):
            path.unlink()
    reopened = make_log(logs, log_dir, clock, segment_bytes=700, index_interval_bytes=120)
    assert reopened.log_end_offset == len(timestamps)
    _check_time_lookups(reopened, timestamps)


def test_max_timestamp_lookup_returns_the_record_carrying_it(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=400)
    log.append(batch_bytes([Rec(b"a", b"1", START_MS + 5), Rec(b"b", b"2", START_MS + 50), Rec(b"c", b"3", START_MS)]))
    log.append(batch_bytes([Rec(b"d", b"4", START_MS + 20)]))
    log.append(batch_bytes([Rec(b"e", b"5", START_MS + 50)]))
    found = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert found is not None and (found.timestamp, found.offset) == (START_MS + 50, 1)
    assert log.fetch_offset_by_timestamp(START_MS + 51) is None


# --- truncation and flush ---------------------------------------------------------------------------


def test_truncate_to_removes_later_segments_and_allows_reappend(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=300, index_interval_bytes=1, file_delete_delay_ms=0)
    oracle = []
    for i in range(20):
        records = simple_records(1, tag=i)
        log.append(batch_bytes(records))
        oracle += records
    segments_before = log.num_segments
    assert not log.truncate_to(20) and not log.truncate_to(25)
    assert log.log_end_offset == 20
    assert log.truncate_to(9)
    assert log.log_end_offset == 9 and log.num_segments < segments_before
    assert as_recs(all_records(log)) == oracle[:9]
    assert segment_bases(log_dir) == [segment.base_offset for segment in log.log_segments()]
    info = log.append(simple_batch(2, tag=99))
    assert info.first_offset == 9
    assert [record.offset for record in all_records(log)] == list(range(11))


def test_truncate_into_a_gap_keeps_offsets_below_target(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    for base in (0, 5, 10):
        log.append_as_follower(follower_batch(base, 2))
    assert log.truncate_to(7)
    assert log.log_end_offset == 7
    assert [record.offset for record in all_records(log)] == [0, 1, 5, 6]
    assert log.append(simple_batch(1)).first_offset == 7


def test_truncate_to_zero_resizes_active_indexes_to_max(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    set_size = len(simple_batch(1))
    log = make_log(logs, log_dir, clock, segment_bytes=5 * set_size, segment_index_bytes=1000, index_interval_bytes=1)
    for i in range(6):
        log.append(simple_batch(1, tag=i))
    assert log.num_segments == 2
    log.truncate_to(0)
    assert log.num_segments == 1
    active = log.active_segment
    assert active.offset_index.max_entries == 1000 // 8
    assert active.time_index.max_entries == 1000 // 12
    assert active.offset_index_path.stat().st_size == 1000
    log.append(simple_batch(1))
    assert log.log_end_offset == 1


def test_truncate_fully_and_start_at(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, segment_bytes=300, file_delete_delay_ms=0)
    for i in range(10):
        log.append(simple_batch(1, tag=i))
    log.truncate_fully_and_start_at(77)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (77, 77, 1)
    assert segment_bases(log_dir) == [77]
    assert log.append(simple_batch(2)).first_offset == 77
    log.truncate_to(3)  # below the first segment: same as starting afresh there
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert all_records(log) == []


def test_flush_messages_advances_the_recovery_point(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock, flush_messages=5)
    recovery_points = []
    for i in range(6):
        log.append(simple_batch(2, tag=i))
        recovery_points.append(log.recovery_point)
    assert recovery_points == [0, 0, 6, 6, 6, 12]  # flush once LEO - recovery point >= 5


def test_roll_flushes_up_to_the_new_segment_in_the_background(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    log.append(simple_batch(3))
    assert log.recovery_point == 0
    log.roll()
    log.append(simple_batch(2))  # the new segment takes appends while the sealed one is flushed
    log.wait_for_background_flushes()
    assert log.recovery_point == 3


def test_a_roll_does_not_fsync_under_the_log_lock(
    logs: list[Log], log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sealed segment's fsync waits on the disk; appends to the new segment go on meanwhile (Kafka flushes a
    rolled segment on its scheduler, not in the append that rolled)."""
    log = make_log(logs, log_dir, clock)
    log.append(simple_batch(3))
    sealed = log.log_segments()[0]
    fsync_started = threading.Event()
    release_fsync = threading.Event()
    original_flush = type(sealed).flush

    def slow_flush(segment: object) -> None:
        fsync_started.set()
        assert release_fsync.wait(10)
        original_flush(segment)  # type: ignore[arg-type]

    monkeypatch.setattr(sealed, "flush", slow_flush.__get__(sealed))
    log.roll()
    assert fsync_started.wait(10)
    assert log.append(simple_batch(2)).first_offset == 3
    assert log.recovery_point == 0
    release_fsync.set()
    log.wait_for_background_flushes()
    assert log.recovery_point == 3


def test_a_truncation_during_a_background_flush_keeps_the_recovery_point_below_it(
    logs: list[Log], log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(logs, log_dir, clock)
    log.append(simple_batch(3))
    sealed = log.log_segments()[0]
    release_fsync = threading.Event()
    original_flush = type(sealed).flush

    def slow_flush(segment: object) -> None:
        assert release_fsync.wait(10)
        original_flush(segment)  # type: ignore[arg-type]

    monkeypatch.setattr(sealed, "flush", slow_flush.__get__(sealed))
    log.roll()
    log.truncate_to(2)
    log.append(simple_batch(3))  # offsets 2-4, written after the flush began: not known durable
    release_fsync.set()
    log.wait_for_background_flushes()
    assert log.recovery_point <= 2


def test_closed_log_refuses_appends_and_reads(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = make_log(logs, log_dir, clock)
    log.close()
    with pytest.raises(LogClosedError):
        log.append(simple_batch(1))
    with pytest.raises(LogClosedError):
        log.read(0, 100)
    with pytest.raises(LogClosedError):
        log.roll()
    assert not issubclass(LogClosedError, KafkaStorageError)  # a closed log must not take its log dir offline


# --- property: random appends, reads, rolls, truncations and reopens against an oracle -----------------

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5), st.sampled_from(list(CompressionType)), st.integers(1, 80)),
        st.tuples(st.just("read"), st.integers(0, 120), st.integers(0, 600), st.booleans()),
        st.tuples(st.just("roll")),
        st.tuples(st.just("truncate"), st.integers(0, 120)),
        st.tuples(st.just("reopen"), st.booleans()),
    ),
    min_size=1,
    max_size=40,
)


class LogOracle:
    """What a log must hold: its batches as (first offset, records) and its log end offset.

    Truncation is batch-granular as in Kafka: truncating to an offset inside a batch removes the whole
    batch, yet the log end offset becomes the target (the offsets below it in that batch are gone).
    """

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[Rec]]] = []
        self.log_end_offset = 0

    def append(self, records: list[Rec]) -> int:
        first = self.log_end_offset
        self.batches.append((first, records))
        self.log_end_offset += len(records)
        return first

    def truncate(self, target: int) -> None:
        if target < self.log_end_offset:
            self.batches = [(first, records) for first, records in self.batches if first + len(records) - 1 < target]
            self.log_end_offset = target

    def reopened(self, active_base: int) -> None:
        """A reopen derives the log end from the data, or the active segment's base when it holds none."""
        last = self.batches[-1][0] + len(self.batches[-1][1]) if self.batches else 0
        self.log_end_offset = max(last, active_base)

    def first_batch_from(self, offset: int) -> tuple[int, list[Rec]] | None:
        return next(((f, r) for f, r in self.batches if f + len(r) - 1 >= offset), None)

    def records(self) -> list[tuple[int, Rec]]:
        return [(first + i, record) for first, records in self.batches for i, record in enumerate(records)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=OPERATIONS)
def test_random_operations_match_an_oracle(operations: list[tuple]) -> None:
    settings_kw = {"segment_bytes": 600, "index_interval_bytes": 90, "segment_index_bytes": 120}
    clock = MockClock(START_MS)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "p-0"
        log = open_log(directory, clock, **settings_kw)
        oracle = LogOracle()
        try:
            for step, operation in enumerate(operations):
                kind = operation[0]
                if kind == "append":
                    _, count, codec, value_size = operation
                    records = simple_records(count, timestamp=START_MS + step, value_size=value_size, tag=step)
                    assert log.append(batch_bytes(records, compression=codec)).first_offset == oracle.append(records)
                elif kind == "read":
                    _check_read(log, oracle, *operation[1:])
                elif kind == "roll":
                    log.roll()
                elif kind == "truncate":
                    log.truncate_to(operation[1])
                    oracle.truncate(operation[1])
                else:
                    active_base = log.active_segment.base_offset
                    log.close() if operation[1] else crash(log)
                    log = open_log(directory, clock, **settings_kw)
                    oracle.reopened(active_base)
                assert log.log_end_offset == oracle.log_end_offset
            assert [(r.offset, *as_recs([r])) for r in all_records(log)] == oracle.records()
            present = oracle.records()
            for target in sorted({record.timestamp for _, record in present} | {START_MS - 1, START_MS + 10**6}):
                hits = [offset for offset, record in present if record.timestamp >= target]
                assert log.offset_for_timestamp(target) == (min(hits) if hits else None)
        finally:
            log.close()


def _check_read(log: Log, oracle: LogOracle, offset: int, max_bytes: int, min_one_message: bool) -> None:
    if offset > oracle.log_end_offset:
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset, max_bytes, min_one_message)
        return
    fetched = log.read(offset, max_bytes, min_one_message)
    batches = batches_in(fetched.records)
    expected = oracle.first_batch_from(offset)
    if expected is None or (not min_one_message and max_bytes == 0):
        assert fetched.records == b""
        return
    if not batches:
        assert not min_one_message and len(fetched.records) == max_bytes and fetched.first_entry_incomplete
        return
    first, records = expected
    assert (batches[0].base_offset, batches[0].last_offset) == (first, first + len(records) - 1)
    assert as_recs(batches[0].records()) == records
    assert len(fetched.records) <= max(max_bytes, batches[0].size_in_bytes if min_one_message else 0)
    by_offset = dict(oracle.records())
    for batch in batches[1:]:
        assert as_recs(batch.records()) == [by_offset[o] for o in range(batch.base_offset, batch.last_offset + 1)]
