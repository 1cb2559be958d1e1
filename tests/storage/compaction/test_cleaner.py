"""The compaction algorithm against a dict oracle, on real logs with tiny segments and a MockClock.

After every test every `.log` file left under `tmp_path` is decoded with kafka-python (CRC checked), so a
cleaned segment is proven to be valid Kafka bytes, not only bytes our own reader accepts.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import struct
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

import storage.compaction.cleaner as cleaner_module
from storage import file_names
from storage.clock import MockClock
from storage.compaction import batch_columns
from storage.compaction.clean_result import CleanedLog
from storage.compaction.cleaned_swap import changed_since, swap_cleaned
from storage.compaction.cleaner import Cleaner
from storage.compaction.log_snapshot import LogSnapshot, snapshot_for_cleaning
from storage.compaction.offset_map import SkimpyOffsetMap
from storage.compaction.segment_groups import SegmentSizes, group_segments_by_size
from storage.compaction.throttler import Throttler
from storage.config.cleaner_config import CleanerConfig
from storage.config.log_config import LogConfig
from storage.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from storage.partition.log import Log
from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS
from storage.records.compression import CompressionType
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import (
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
)
from storage.segment.log_segment import LogSegment
from storage.segment.transaction_index import AbortedTxn

DELETE_RETENTION_MS = 1000


# --- helpers shared with test_cleaner_manager ------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """One record as appended: the oracle."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def compact_config(**overrides: object) -> LogConfig:
    """A compacted topic with tiny segments and an index entry per batch."""
    properties: dict[str, object] = {
        "cleanup.policy": "compact",
        "segment.bytes": 1024,
        "segment.index.bytes": 4096,
        "index.interval.bytes": 1,
        "file.delete.delay.ms": 0,
        "delete.retention.ms": DELETE_RETENTION_MS,
    }
    properties.update({key.replace("_", "."): value for key, value in overrides.items()})
    return LogConfig.from_properties(properties)


class Writer:
    """Appends through the log's client path (or as follower for markers) and keeps the history."""

    def __init__(self, log: Log, clock: MockClock) -> None:
        self.log = log
        self.clock = clock
        self.history: list[Written] = []

    def append(
        self,
        pairs: list[tuple[bytes | None, bytes | None]],
        *,
        codec: CompressionType = CompressionType.NONE,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> list[Written]:
        builder = RecordBatchBuilder(
            compression=codec,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=transactional,
        )
        now = self.clock.milliseconds()
        for key, value in pairs:
            builder.append(key, value, timestamp=now)
        info = self.log.append(builder.build())
        written = [Written(info.first_offset + index, key, value, now) for index, (key, value) in enumerate(pairs)]
        self.history.extend(written)
        return written

    def append_unkeyed_as_follower(self, value: bytes) -> int:
        offset = self.log.log_end_offset
        builder = RecordBatchBuilder(base_offset=offset)
        builder.append(None, value, timestamp=self.clock.milliseconds())
        self.log.append_as_follower(builder.build())
        return offset

    def marker(self, control_type: ControlRecordType, producer_id: int, producer_epoch: int = 0) -> int:
        offset = self.log.log_end_offset
        self.log.append_as_follower(
            build_control_batch(
                control_type,
                timestamp=self.clock.milliseconds(),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_offset=offset,
            )
        )
        return offset

    def latest(self) -> dict[bytes | None, Written]:
        return {written.key: written for written in self.history}


def open_log(tmp_path: Path, clock: MockClock, name: str = "topic-0", **overrides: object) -> Log:
    return Log.open(tmp_path / name, compact_config(**overrides), clock=clock)


def small_cleaner(clock: MockClock, map_slots: int = 4096, **overrides: object) -> Cleaner:
    config = CleanerConfig.from_properties({key.replace("_", "."): value for key, value in overrides.items()})
    return Cleaner(config, clock, offset_map=SkimpyOffsetMap(24 * map_slots))


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """The data records a consumer fetches from the log start (transaction markers skipped)."""
    found = []
    position = log.log_start_offset
    while position < log.log_end_offset:
        fetch = log.read(position)
        if not fetch.records:
            break
        for batch in iter_any_batches(fetch.records):
            if not (isinstance(batch, RecordBatch) and batch.is_control):
                found.extend((r.offset, r.key, r.value) for r in batch.records() if r.offset >= position)
            position = max(position, batch.last_offset + 1)
    return found


def expected_records(
    history: list[Written], end_offset: int, *, tombstones_kept: bool = True
) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a fully compacted prefix [0, end_offset) plus the untouched rest must read as (the prefix is
    deduplicated against itself only: later records are not in the map yet)."""
    latest = {written.key: written.offset for written in history if written.offset < end_offset}
    return [
        (written.offset, written.key, written.value)
        for written in history
        if written.offset >= end_offset
        or (latest[written.key] == written.offset and (written.value is not None or tombstones_kept))
    ]


def raw_batches(log: Log) -> dict[int, bytes]:
    """Every batch of every segment, by base offset, as raw bytes."""
    found = {}
    for segment in log.log_segments():
        for batch in iter_batches(segment.log.read(0, segment.size)):
            found[batch.base_offset] = bytes(batch.raw())
    return found


def kafka_decode(path: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of a `.log` file as kafka-python reads it, CRCs checked."""
    records = MemoryRecords(path.read_bytes())
    decoded = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc(), f"bad CRC in {path}"
        if getattr(batch, "is_control_batch", False):
            continue
        decoded.extend((record.offset, record.key, record.value) for record in batch)
    return decoded


def assert_logs_decode_with_kafka(root: Path) -> None:
    """Every `.log` file under `root` reads with kafka-python, CRCs checked."""
    for path in sorted(root.rglob(f"*{file_names.LOG_SUFFIX}")):
        kafka_decode(path)


@pytest.fixture(autouse=True)
def _logs_stay_valid_kafka_bytes(tmp_path: Path) -> Iterator[None]:
    yield
    assert_logs_decode_with_kafka(tmp_path)


def roll_with(writer: Writer, pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    """Appends a batch and seals the segment, so the batch becomes cleanable."""
    writer.append(pairs)
    writer.log.roll()


# --- compaction ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda codec: codec.kafka_name)
def test_clean_keeps_latest_value_per_key_with_offsets_unchanged(
    tmp_path: Path, clock: MockClock, codec: CompressionType
) -> None:
    rng = random.Random(int(codec))
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for round_number in range(120):
        pairs = [
            (b"key-%d" % rng.randrange(25), None if rng.random() < 0.1 else b"value-%d" % round_number)
            for _ in range(rng.randint(1, 4))
        ]
        writer.append(pairs, codec=codec)
        clock.sleep(1)
    active_before = log.active_segment.log.read(0, log.active_segment.size)
    segments_before = log.log_segments()[:-1]
    upper = log.active_segment.base_offset

    result = small_cleaner(clock).clean(log, 0)

    assert (result.end_offset, result.first_uncleanable_offset, result.aborted) == (upper, upper, False)
    assert result.bytes_read == sum(segment.size for segment in segments_before)
    assert result.segments_read == len(segments_before)
    assert records_of(log) == expected_records(writer.history, upper)
    assert [(record.offset, record.key, record.value) for record in log.records()] == records_of(log)
    assert log.active_segment.log.read(0, log.active_segment.size) == active_before
    for segment in log.log_segments()[:-1]:
        for batch in iter_batches(segment.log.read(0, segment.size)):
            assert batch.compression == codec
    from_kafka = [record for segment in log.log_segments() for record in kafka_decode(segment.log.path)]
    assert from_kafka == records_of(log)


def test_clean_after_reopen_reads_the_same(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(60):
        writer.append([(b"k%d" % (index % 7), b"v%d" % index)])
    small_cleaner(clock).clean(log, 0)
    cleaned = records_of(log)
    log.close()
    reopened = Log.open(tmp_path / "topic-0", compact_config(), clock=clock)
    assert records_of(reopened) == cleaned
    assert reopened.log_end_offset == 60
    reopened.close()


def test_untouched_batches_are_copied_byte_for_byte(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(40):
        writer.append([(b"unique-%d" % index, b"v")], codec=CompressionType.GZIP)
    writer.append([(b"unique-3", b"newer")], codec=CompressionType.GZIP)
    log.roll()
    before = raw_batches(log)

    small_cleaner(clock).clean(log, 0)

    after = raw_batches(log)
    assert 3 not in after
    assert {base: data for base, data in before.items() if base != 3} == after


def test_rebuilt_batch_keeps_offsets_producer_fields_and_codec(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    writer.append(
        [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")],
        codec=CompressionType.LZ4,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
    )
    writer.append([(b"a", b"x"), (b"c", b"y")], producer_id=42, producer_epoch=3, base_sequence=13)
    log.roll()

    small_cleaner(clock).clean(log, 0)

    batches = {base: RecordBatch(data) for base, data in raw_batches(log).items()}
    first = batches[0]
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 1)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 10)
    assert first.compression == CompressionType.LZ4
    assert [(record.offset, record.key) for record in first.records()] == [(1, b"b")]
    assert records_of(log) == [(1, b"b", b"2"), (3, b"a", b"x"), (4, b"c", b"y")]


def test_records_keep_their_timestamps_and_headers_when_rebuilt(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    builder = RecordBatchBuilder(compression=CompressionType.ZSTD)
    builder.append(b"a", b"1", timestamp=clock.milliseconds() - 500, headers=[("h", b"x")])
    builder.append(b"b", b"2", timestamp=clock.milliseconds() - 100, headers=[("h", None)])
    log.append(builder.build())
    Writer(log, clock).append([(b"a", b"newer")])
    log.roll()

    small_cleaner(clock).clean(log, 0)

    first = next(log.records())
    assert (first.offset, first.key, first.timestamp, first.headers) == (
        1,
        b"b",
        clock.milliseconds() - 100,
        (("h", None),),
    )


def test_unkeyed_records_are_dropped_and_counted_invalid(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    writer.append([(b"a", b"1")])
    unkeyed = writer.append_unkeyed_as_follower(b"no key")
    writer.append([(b"b", b"2")])
    log.roll()

    result = small_cleaner(clock).clean(log, 0)

    assert result.invalid_messages == 1
    assert unkeyed not in [offset for offset, _, _ in records_of(log)]
    assert records_of(log) == [(0, b"a", b"1"), (2, b"b", b"2")]


def test_first_dirty_offset_outside_the_log_is_rejected(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    Writer(log, clock).append([(b"a", b"1")])
    with pytest.raises(OffsetOutOfRangeError):
        small_cleaner(clock).clean(log, 5)


# --- tombstones ------------------------------------------------------------------------------------


def test_tombstones_survive_the_first_cleaning_and_go_after_delete_retention(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    writer.append([(b"gone", b"v1"), (b"kept", b"v1")])
    roll_with(writer, [(b"gone", None)])
    cleaner = small_cleaner(clock)

    first = cleaner.clean(log, 0)
    assert records_of(log) == [(1, b"kept", b"v1"), (2, b"gone", None)]
    tombstone_batch = RecordBatch(raw_batches(log)[2])
    assert tombstone_batch.has_delete_horizon
    assert tombstone_batch.delete_horizon_ms == clock.milliseconds() + DELETE_RETENTION_MS
    assert next(record for record in log.records() if record.offset == 2).timestamp == writer.history[2].timestamp

    clock.sleep(DELETE_RETENTION_MS - 1)
    roll_with(writer, [(b"other", b"x")])
    second = cleaner.clean(log, first.end_offset)
    assert (2, b"gone", None) in records_of(log)

    clock.sleep(1)
    roll_with(writer, [(b"other2", b"x")])
    cleaner.clean(log, second.end_offset)
    assert records_of(log) == [(1, b"kept", b"v1"), (3, b"other", b"x"), (4, b"other2", b"x")]


def test_tombstone_in_the_dirty_range_removes_older_values(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(10):
        writer.append([(b"k", b"v%d" % index)])
    roll_with(writer, [(b"k", None)])
    small_cleaner(clock).clean(log, 0)
    assert records_of(log) == [(10, b"k", None)]


# --- what is never cleaned -------------------------------------------------------------------------


def test_active_segment_is_never_cleaned(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1_000_000)
    writer = Writer(log, clock)
    for index in range(20):
        writer.append([(b"k", b"v%d" % index)])
    result = small_cleaner(clock).clean(log, 0)
    assert (result.end_offset, result.bytes_read) == (0, 0)
    assert len(records_of(log)) == 20


def test_min_compaction_lag_keeps_young_segments(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, min_compaction_lag_ms=60_000)
    writer = Writer(log, clock)
    roll_with(writer, [(b"k", b"old-1"), (b"k", b"old-2")])
    clock.sleep(30_000)
    roll_with(writer, [(b"k", b"young-1"), (b"k", b"young-2")])
    cleaner = small_cleaner(clock)

    assert cleaner.clean(log, 0).end_offset == 0
    clock.sleep(30_001)
    result = cleaner.clean(log, 0)
    assert result.end_offset == 2
    assert records_of(log) == [(1, b"k", b"old-2"), (2, b"k", b"young-1"), (3, b"k", b"young-2")]
    clock.sleep(30_000)
    cleaner.clean(log, result.end_offset)
    assert records_of(log) == [(3, b"k", b"young-2")]


def test_open_transaction_bounds_the_cleanable_range(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    roll_with(writer, [(b"k", b"1")])
    writer.append([(b"t", b"in-txn")], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    roll_with(writer, [(b"k", b"2")])
    cleaner = small_cleaner(clock)

    assert cleaner.clean(log, 0).end_offset == 1
    assert records_of(log)[0] == (0, b"k", b"1")
    writer.marker(ControlRecordType.COMMIT, producer_id=5)
    log.roll()
    assert cleaner.clean(log, 1).end_offset == log.active_segment.base_offset
    assert records_of(log) == [(1, b"t", b"in-txn"), (2, b"k", b"2")]


# --- partial passes and grouping -------------------------------------------------------------------


def test_full_offset_map_cleans_part_and_the_next_pass_continues(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for round_number in range(3):
        for key in range(30):
            writer.append([(b"key-%d" % key, b"v%d" % round_number)])
    log.roll()
    upper = log.active_segment.base_offset
    cleaner = Cleaner(CleanerConfig(), clock, offset_map=SkimpyOffsetMap(24 * 20, load_factor=0.5))

    ends = []
    first_dirty = 0
    while first_dirty < upper:
        result = cleaner.clean(log, first_dirty)
        assert result.map_entries == 10
        assert records_of(log) == expected_records(writer.history, result.end_offset)
        ends.append(result.end_offset)
        first_dirty = result.end_offset
    assert ends[0] == 10
    assert len(ends) == 9
    assert records_of(log) == expected_records(writer.history, upper)


def test_first_partial_pass_compacts_only_what_its_map_covers(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for key in [0, 1, 2, 3, 0, 1, 2, 3]:
        writer.append([(b"k%d" % key, b"v")])
    log.roll()
    cleaner = Cleaner(CleanerConfig(), clock, offset_map=SkimpyOffsetMap(24 * 4, load_factor=0.5))

    result = cleaner.clean(log, 0)

    assert result.end_offset == 2
    assert [offset for offset, _, _ in records_of(log)] == list(range(8))


def test_full_map_ends_the_pass_at_the_next_keyed_record_even_for_a_mapped_key(
    tmp_path: Path, clock: MockClock
) -> None:
    # Kafka's buildOffsetMapForSegment stops at the first keyed record that finds the map at its load, whether
    # or not its key is already mapped: k0 (offset 2) is not taken, so the pass covers [0, 2) only.
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for key in [0, 1, 0, 2]:
        writer.append([(b"k%d" % key, b"v")])
    log.roll()
    cleaner = Cleaner(CleanerConfig(), clock, offset_map=SkimpyOffsetMap(24 * 4, load_factor=0.5))

    assert cleaner.clean(log, 0).end_offset == 2


def kafka_map_end_offset(batches: list[list[Written]], max_entries: int) -> int | None:
    """Where Kafka's offset-map loop ends a pass from offset 0 over `batches` (None: the map did not fill):
    a keyed record is mapped while the map holds fewer than `max_entries` keys, else the pass ends after the
    latest offset mapped so far; a batch read through moves that latest offset to its last offset."""
    mapped: dict[bytes, int] = {}
    latest = -1
    for batch in batches:
        for written in batch:
            if written.key is None:
                continue
            if len(mapped) >= max_entries:
                return latest + 1
            mapped[written.key] = written.offset
            latest = written.offset
        latest = max(latest, batch[-1].offset)
    return None


@pytest.mark.parametrize("seed", range(4))
def test_passes_over_large_and_small_batches_match_the_oracle(
    tmp_path: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # Batches above and below the column decoder's threshold (32 records), chunks of a few batches, tombstones,
    # several codecs and a map that fills in the middle of a batch: every pass ends where Kafka's loop would,
    # and leaves the log deduplicated up to its end offset.
    monkeypatch.setattr(batch_columns, "CHUNK_BYTES", 4096)
    rng = random.Random(seed)
    log = open_log(tmp_path, clock, segment_bytes=16384)
    writer = Writer(log, clock)
    batches = []
    for round_number in range(40):
        count = rng.choice([1, 3, 40, 120])
        pairs = [
            (b"key-%d" % rng.randrange(150), None if rng.random() < 0.05 else b"v%d" % round_number)
            for _ in range(count)
        ]
        batches.append(writer.append(pairs, codec=rng.choice([CompressionType.NONE, CompressionType.LZ4])))
        clock.sleep(rng.choice([0, 1, 100_000]))
    log.roll()
    upper = log.active_segment.base_offset
    cleaner = Cleaner(CleanerConfig(), clock, offset_map=SkimpyOffsetMap(24 * 100, load_factor=0.5))

    first_dirty = 0
    passes = 0
    while first_dirty < upper:
        result = cleaner.clean(log, first_dirty)
        if passes == 0:
            assert result.end_offset == (kafka_map_end_offset(batches, 50) or upper)
        assert records_of(log) == expected_records(writer.history, result.end_offset)
        assert result.end_offset > first_dirty
        first_dirty = result.end_offset
        passes += 1
    assert passes > 1
    assert records_of(log) == expected_records(writer.history, upper)


def test_group_segments_by_size_respects_log_bytes() -> None:
    segments = [SegmentSizes(base, 400, 8, 12) for base in range(0, 50, 10)]
    groups = group_segments_by_size(segments, 1000, 4096, 50)
    assert [[segment.base_offset for segment in group] for group in groups] == [[0, 10], [20, 30], [40]]


def test_group_segments_by_size_respects_each_index_size() -> None:
    by_offset_index = [SegmentSizes(base, 10, 40, 12) for base in range(0, 40, 10)]
    assert [len(group) for group in group_segments_by_size(by_offset_index, 10_000, 100, 40)] == [2, 2]
    by_time_index = [SegmentSizes(base, 10, 8, 60) for base in range(0, 40, 10)]
    assert [len(group) for group in group_segments_by_size(by_time_index, 10_000, 100, 40)] == [1, 1, 1, 1]


def test_group_segments_by_size_keeps_offsets_within_32_bits() -> None:
    span = 2**31 - 1
    segments = [SegmentSizes(0, 1, 0, 0), SegmentSizes(span - 10, 1, 0, 0), SegmentSizes(span + 1, 1, 0, 0)]
    groups = group_segments_by_size(segments, 10_000, 10_000, span + 100)
    assert [[segment.base_offset for segment in group] for group in groups] == [[0, span - 10], [span + 1]]
    too_far = [*segments[:2], SegmentSizes(span + 2, 1, 0, 0)]
    assert [len(group) for group in group_segments_by_size(too_far, 10_000, 10_000, span + 100)] == [1, 2]
    last_alone = group_segments_by_size(segments[:2], 10_000, 10_000, span + 2)
    assert [len(group) for group in last_alone] == [1, 1]
    fits = group_segments_by_size(segments[:2], 10_000, 10_000, span + 1)
    assert [len(group) for group in fits] == [2]


def test_group_segments_by_size_edge_cases() -> None:
    assert group_segments_by_size([], 100, 100, 0) == []
    oversized = [SegmentSizes(0, 5000, 8, 12), SegmentSizes(10, 0, 0, 0), SegmentSizes(20, 0, 0, 0)]
    assert [len(group) for group in group_segments_by_size(oversized, 1000, 100, 30)] == [1, 2]


def test_small_segments_are_merged_into_one_named_after_the_first(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(40):
        writer.append([(b"k%d" % (index % 4), b"value-%d" % index)])
    log.roll()
    sources = log.log_segments()[:-1]
    assert len(sources) > 2
    for number, segment in enumerate(sources):
        os.utime(segment.log.path, ns=(0, (1_600_000_000_000 + number) * 1_000_000))
    cleaner = small_cleaner(clock)

    cleaner.clean(log, 0)
    writer.append([(b"k0", b"last")])
    log.roll()
    result = cleaner.clean(log, log.log_segments()[-2].base_offset)

    merged = log.log_segments()[0]
    assert merged.base_offset == 0
    assert len(log.log_segments()) == 2
    assert result.segments_written == 1
    assert merged.size <= log.config.segment_bytes
    parsed = [file_names.parse_segment_name(path.name) for path in (tmp_path / "topic-0").iterdir()]
    files = [name for name in parsed if name is not None and name[1] in file_names.SEGMENT_SUFFIXES]
    assert {base for base, _, _ in files} == {0, log.active_segment.base_offset}
    assert {(kind, suffix) for base, kind, suffix in files if base == 0} == {
        (".log", ""),
        (".index", ""),
        (".timeindex", ""),
    }
    assert records_of(log) == expected_records(writer.history, log.active_segment.base_offset)


def test_cleaned_segment_keeps_the_last_source_mtime(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(3):
        roll_with(writer, [(b"k", b"v%d" % index)])
    sources = log.log_segments()[:-1]
    for number, segment in enumerate(sources):
        segment.log.set_last_modified_ms(1_600_000_000_000 + number * 1000)

    small_cleaner(clock).clean(log, 0)

    assert log.log_segments()[0].last_modified_ms() == 1_600_000_000_000 + 2000


# --- transactions ----------------------------------------------------------------------------------


def test_aborted_transaction_is_removed_and_its_marker_after_the_horizon(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=4096)
    writer = Writer(log, clock)
    writer.append([(b"a", b"committed")])
    writer.append(
        [(b"a", b"aborted"), (b"b", b"aborted")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True
    )
    abort = writer.marker(ControlRecordType.ABORT, producer_id=7)
    writer.append([(b"c", b"txn-2")], producer_id=7, producer_epoch=0, base_sequence=2, transactional=True)
    commit = writer.marker(ControlRecordType.COMMIT, producer_id=7)
    log.roll()
    cleaner = small_cleaner(clock)

    first = cleaner.clean(log, 0)
    assert records_of(log) == [(0, b"a", b"committed"), (4, b"c", b"txn-2")]
    markers = {base: RecordBatch(data) for base, data in raw_batches(log).items() if RecordBatch(data).is_control}
    assert set(markers) == {abort, commit}
    assert not markers[abort].has_delete_horizon

    roll_with(writer, [(b"z", b"1")])
    second = cleaner.clean(log, first.end_offset)
    marker = RecordBatch(raw_batches(log)[abort])
    assert marker.has_delete_horizon and marker.control_type() == ControlRecordType.ABORT

    clock.sleep(DELETE_RETENTION_MS)
    roll_with(writer, [(b"z", b"2")])
    cleaner.clean(log, second.end_offset)
    remaining = raw_batches(log)
    assert abort not in remaining
    assert commit in remaining
    assert records_of(log) == [(0, b"a", b"committed"), (4, b"c", b"txn-2"), (7, b"z", b"2")]


def test_commit_marker_goes_only_after_its_data_is_gone(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=4096)
    writer = Writer(log, clock)
    writer.append([(b"a", b"in-txn")], producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    commit = writer.marker(ControlRecordType.COMMIT, producer_id=8)
    writer.append([(b"b", b"next-txn")], producer_id=8, producer_epoch=0, base_sequence=1, transactional=True)
    writer.marker(ControlRecordType.COMMIT, producer_id=8)
    writer.append([(b"a", b"overwritten")])
    log.roll()
    cleaner = small_cleaner(clock)

    first = cleaner.clean(log, 0)
    assert commit in raw_batches(log)
    assert not RecordBatch(raw_batches(log)[commit]).has_delete_horizon

    roll_with(writer, [(b"z", b"1")])
    second = cleaner.clean(log, first.end_offset)
    assert RecordBatch(raw_batches(log)[commit]).has_delete_horizon

    clock.sleep(DELETE_RETENTION_MS)
    roll_with(writer, [(b"z", b"2")])
    cleaner.clean(log, second.end_offset)
    assert commit not in raw_batches(log)
    assert records_of(log) == [(2, b"b", b"next-txn"), (4, b"a", b"overwritten"), (6, b"z", b"2")]


def test_producers_last_batch_is_kept_empty_until_the_producer_expires(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=4096)
    writer = Writer(log, clock)
    writer.append([(b"x", b"1")], producer_id=9, producer_epoch=2, base_sequence=0)
    writer.append([(b"x", b"2"), (b"y", b"2")], producer_id=9, producer_epoch=2, base_sequence=1)
    writer.append([(b"x", b"3"), (b"y", b"3")])
    log.roll()
    cleaner = small_cleaner(clock)

    first = cleaner.clean(log, 0)

    batches = raw_batches(log)
    assert 0 not in batches
    kept = RecordBatch(batches[1])
    assert (kept.size_in_bytes, kept.records_count) == (61, 0)
    assert (kept.base_offset, kept.last_offset, kept.producer_id, kept.producer_epoch, kept.base_sequence) == (
        1,
        2,
        9,
        2,
        1,
    )
    assert kept.last_sequence == 2
    assert records_of(log) == [(3, b"x", b"3"), (4, b"y", b"3")]

    clock.sleep(PRODUCER_ID_EXPIRATION_MS)
    roll_with(writer, [(b"z", b"1")])
    cleaner.clean(log, first.end_offset)
    assert 1 not in raw_batches(log)


def test_aborted_data_never_shadows_committed_values(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=4096)
    writer = Writer(log, clock)
    writer.append([(b"k", b"good")])
    roll_with(writer, [(b"other", b"1")])
    writer.append([(b"k", b"bad")], producer_id=3, producer_epoch=0, base_sequence=0, transactional=True)
    writer.marker(ControlRecordType.ABORT, producer_id=3)
    writer.append([(b"p", b"last")], producer_id=3, producer_epoch=0, base_sequence=1)
    log.roll()

    small_cleaner(clock).clean(log, 0)

    assert (0, b"k", b"good") in records_of(log)
    assert b"bad" not in [value for _, _, value in records_of(log)]


class TxnProducer:
    """Kafka's `appendTransactionalAsLeader` in LogCleanerTest: one batch per call, keys = values = the ints given;
    markers through the coordinator's path (`append_transaction_marker`)."""

    def __init__(self, log: Log, producer_id: int, epoch: int = 0) -> None:
        self.log, self.producer_id, self.epoch, self.sequence = log, producer_id, epoch, 0

    def __call__(self, keys: list[int]) -> None:
        builder = RecordBatchBuilder(
            producer_id=self.producer_id, producer_epoch=self.epoch, base_sequence=self.sequence, is_transactional=True
        )
        for key in keys:
            builder.append(b"%d" % key, b"%d" % key, timestamp=self.log.clock.milliseconds())
        self.log.append(builder.build())
        self.sequence += len(keys)

    def end(self, control_type: ControlRecordType) -> None:
        self.log.append_transaction_marker(self.producer_id, self.epoch, 0, control_type)


def keys_in_log(log: Log) -> list[int]:
    """Kafka's `keysInLog`: the keys of the data records, in offset order."""
    return [
        int(record.key or b"")
        for segment in log.log_segments()
        for batch in iter_batches(segment.log.read(0, segment.size))
        if not batch.is_control
        for record in batch.records()
    ]


def offsets_in_log(log: Log) -> list[int]:
    """Kafka's `offsetsInLog`: the offset of every record, markers included."""
    return [
        record.offset
        for segment in log.log_segments()
        for batch in iter_batches(segment.log.read(0, segment.size))
        for record in batch.records()
    ]


def test_basic_transaction_aware_cleaning_keeps_the_transaction_index(tmp_path: Path, clock: MockClock) -> None:
    """LogCleanerTest.testBasicTransactionAwareCleaning: the aborted records go whatever their keys, both markers
    stay, and the cleaned segment's `.txnindex` still lists the aborted transaction."""
    log = open_log(tmp_path, clock, segment_bytes=2048)
    first, second = TxnProducer(log, 1), TxnProducer(log, 2)
    first([1, 2])
    second([2, 3])
    first([3, 4])
    first.end(ControlRecordType.ABORT)
    second.end(ControlRecordType.COMMIT)
    first([2])
    first.end(ControlRecordType.COMMIT)
    aborted = log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)
    assert aborted == [AbortedTxn(1, 0, 6, 2)]
    log.roll()

    small_cleaner(clock).clean(log, 0)

    assert keys_in_log(log) == [3, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8, 9]
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted
    assert log.log_segments()[0].txn_index.entries == (AbortedTxn(1, 0, 6, 2),)


def test_abort_marker_and_its_index_entry_go_once_its_data_is_gone(tmp_path: Path, clock: MockClock) -> None:
    """LogCleanerTest.testAbortMarkerRemoval, with the `.txnindex` followed: kept while the pass removed the
    transaction's data, gone from the index in the next pass, the marker itself once its horizon passed."""
    log = open_log(tmp_path, clock, segment_bytes=256)
    producer = TxnProducer(log, 1)
    producer([1])
    producer([2, 3])
    producer.end(ControlRecordType.ABORT)
    producer([3])
    producer.end(ControlRecordType.COMMIT)
    log.roll()
    cleaner = small_cleaner(clock)

    first = cleaner.clean(log, 0)
    assert (keys_in_log(log), offsets_in_log(log)) == ([3], [3, 4, 5])
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(1, 0, 3, 4)]

    writer = Writer(log, clock)
    roll_with(writer, [(b"9", b"9")])
    second = cleaner.clean(log, first.end_offset)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert RecordBatch(raw_batches(log)[3]).has_delete_horizon

    clock.sleep(DELETE_RETENTION_MS)
    roll_with(writer, [(b"8", b"8")])
    cleaner.clean(log, second.end_offset)
    assert offsets_in_log(log)[:2] == [4, 5]
    assert not list((tmp_path / "topic-0").glob(f"*{file_names.TXN_INDEX_SUFFIX}*"))


def test_commit_marker_removal(tmp_path: Path, clock: MockClock) -> None:
    """LogCleanerTest.testCommitMarkerRemoval: a COMMIT marker stays while its transaction keeps records, gets a
    delete horizon once it has none, and goes after the horizon; nothing is ever indexed."""
    log = open_log(tmp_path, clock, segment_bytes=256)
    producer = TxnProducer(log, 1)
    producer([1])
    producer([2, 3])
    producer.end(ControlRecordType.COMMIT)
    producer([2])
    producer.end(ControlRecordType.COMMIT)
    log.roll()
    cleaner = small_cleaner(clock)

    dirty = cleaner.clean(log, 0).end_offset
    assert (keys_in_log(log), offsets_in_log(log)) == ([1, 3, 2], [0, 2, 3, 4, 5])

    producer([1, 3])
    producer.end(ControlRecordType.COMMIT)
    log.roll()
    dirty = cleaner.clean(log, dirty).end_offset
    assert (keys_in_log(log), offsets_in_log(log)) == ([2, 1, 3], [3, 4, 5, 6, 7, 8])

    writer = Writer(log, clock)
    roll_with(writer, [(b"9", b"9")])
    dirty = cleaner.clean(log, dirty).end_offset
    assert offsets_in_log(log)[:6] == [3, 4, 5, 6, 7, 8]

    clock.sleep(DELETE_RETENTION_MS)
    roll_with(writer, [(b"8", b"8")])
    cleaner.clean(log, dirty)
    assert offsets_in_log(log)[:5] == [4, 5, 6, 7, 8]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []


def test_aborted_transaction_spanning_segments(tmp_path: Path, clock: MockClock) -> None:
    """LogCleanerTest.testAbortedTransactionSpanningSegments: the aborted batch stays, emptied, as its producer's
    last batch, and so does its marker (a batch of the transaction is still there), with its index entry."""
    log = open_log(tmp_path, clock, segment_bytes=128)
    producer = TxnProducer(log, 1)
    producer([1])
    log.roll()
    producer.end(ControlRecordType.ABORT)
    log.roll()
    cleaner = small_cleaner(clock)

    cleaner.clean(log, 0)
    assert offsets_in_log(log) == [1]
    assert [RecordBatch(data).last_offset for data in raw_batches(log).values()] == [0, 1]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(1, 0, 1, 2)]

    clock.sleep(DELETE_RETENTION_MS)
    cleaner.clean(log, 0)
    assert offsets_in_log(log) == [1]
    assert [RecordBatch(data).last_offset for data in raw_batches(log).values()] == [0, 1]


def test_a_pass_in_another_process_reads_the_indexes_and_writes_the_cleaned_one(
    tmp_path: Path, clock: MockClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=256)
    first, second = TxnProducer(log, 1), TxnProducer(log, 2)
    for _ in range(3):
        first([1, 2])
        second([3])
        first.end(ControlRecordType.ABORT)
        second.end(ControlRecordType.COMMIT)
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert len(aborted) == 3
    log.roll()
    snapshot = snapshot_for_cleaning(log, 0)
    assert snapshot.last_stable_offset == log.log_end_offset

    result = swap_cleaned(log, small_cleaner(clock).clean_snapshot(snapshot))

    assert not result.aborted
    assert keys_in_log(log) == [3]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == aborted


# --- failures and races ----------------------------------------------------------------------------


def test_corrupt_segment_raises_and_leaves_the_log_as_it_was(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(30):
        writer.append([(b"k%d" % (index % 3), b"value-%d" % index)])
    log.roll()
    segment = log.log_segments()[1]
    with open(segment.log.path, "r+b") as stream:
        stream.seek(70)
        byte = stream.read(1)
        stream.seek(70)
        stream.write(bytes([byte[0] ^ 0xFF]))
    files_before = sorted(path.name for path in (tmp_path / "topic-0").iterdir())

    with pytest.raises(CorruptRecordError):
        small_cleaner(clock).clean(log, 0)

    assert sorted(path.name for path in (tmp_path / "topic-0").iterdir()) == files_before
    with open(segment.log.path, "r+b") as stream:
        stream.seek(70)
        stream.write(byte)


def test_batch_larger_than_the_cleaner_limit_is_reported_corrupt(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=8192, max_message_bytes=1000)
    builder = RecordBatchBuilder()
    builder.append(b"big", b"x" * 2000, timestamp=clock.milliseconds())
    log.append_as_follower(builder.build())
    log.roll()
    cleaner = Cleaner(CleanerConfig(log_cleaner_io_buffer_size=1024), clock, offset_map=SkimpyOffsetMap(2400))
    with pytest.raises(CorruptRecordError, match="may be corrupt"):
        cleaner.clean(log, 0)


def test_batch_running_past_the_segment_end_is_reported_corrupt(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(10):
        writer.append([(b"k", b"v%d" % index)])
    log.roll()
    segment = log.log_segments()[0]
    last = list(iter_batches(segment.log.read(0, segment.size)))[-1]
    length_field = segment.log.path.read_bytes()[last.position + 8 : last.position + 12]
    with open(segment.log.path, "r+b") as stream:
        stream.seek(last.position + 8)
        stream.write((last.length + 100).to_bytes(4, "big"))
    with pytest.raises(CorruptRecordError, match="may be corrupt"):
        small_cleaner(clock).clean(log, 0)
    with open(segment.log.path, "r+b") as stream:
        stream.seek(last.position + 8)
        stream.write(length_field)


def test_swap_is_abandoned_when_the_log_is_truncated_meanwhile(
    tmp_path: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    for index in range(40):
        writer.append([(b"k%d" % (index % 5), b"v%d" % index)])
    log.roll()
    truncate_at = log.log_segments()[1].base_offset + 1
    real_new_segment = cleaner_module.new_segment

    def truncate_then_create(*args: object, **kwargs: object) -> LogSegment:
        log.truncate_to(truncate_at)
        return real_new_segment(*args, **kwargs)

    monkeypatch.setattr(cleaner_module, "new_segment", truncate_then_create)
    expected = [record for record in writer.history if record.offset < truncate_at]

    result = small_cleaner(clock).clean(log, 0)

    assert result.aborted
    assert result.end_offset == 0
    assert records_of(log) == [(record.offset, record.key, record.value) for record in expected]
    assert not list((tmp_path / "topic-0").glob(f"*{file_names.CLEANED_SUFFIX}"))


# --- the two phases in two places ---------------------------------------------------------------------


def fill_keyed(writer: Writer, batches: int, keys: int, tag: str) -> None:
    for index in range(batches):
        writer.append([(b"k%d" % (index % keys), b"%s-%d" % (tag.encode(), index))])


@pytest.mark.parametrize("preallocate", [False, True])
def test_first_phase_reads_its_own_files_while_the_owner_appends_and_rolls(
    tmp_path: Path, clock: MockClock, preallocate: bool
) -> None:
    log = open_log(tmp_path, clock, preallocate=preallocate)
    writer = Writer(log, clock)
    fill_keyed(writer, 60, keys=6, tag="before")
    upper = log.active_segment.base_offset
    snapshot = snapshot_for_cleaning(log, 0)
    fill_keyed(writer, 40, keys=9, tag="between")  # rolls: the snapshot's active segment is sealed meanwhile

    cleaned = small_cleaner(clock).clean_snapshot(snapshot)
    fill_keyed(writer, 10, keys=9, tag="after")
    assert [path.name for path in (tmp_path / "topic-0").glob(f"*{file_names.CLEANED_SUFFIX}")], "not swapped yet"
    result = swap_cleaned(log, cleaned)

    assert (result.aborted, result.end_offset) == (False, upper)
    assert result.segments_written == len(cleaned.groups) > 0
    assert records_of(log) == expected_records(writer.history, upper)
    in_flight = [path for path in log.directory.iterdir() if path.name.endswith(file_names.IN_FLIGHT_SUFFIXES)]
    assert in_flight == []
    log.close()
    assert records_of(Log.open(tmp_path / "topic-0", compact_config(preallocate=preallocate), clock=clock)) == (
        expected_records(writer.history, upper)
    )


def test_first_phase_in_another_process_matches_the_in_process_pass_byte_for_byte(
    tmp_path: Path, clock: MockClock
) -> None:
    logs = [open_log(tmp_path, clock, name=f"topic-{number}") for number in range(2)]
    writers = [Writer(log, clock) for log in logs]
    for writer in writers:
        fill_keyed(writer, 80, keys=7, tag="same")
    small_cleaner(clock).clean(logs[0], 0)
    snapshot = snapshot_for_cleaning(logs[1], 0)
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        cleaned = pool.submit(clean_snapshot_elsewhere, snapshot, clock.milliseconds()).result()
    swap_cleaned(logs[1], cleaned)

    assert raw_batches(logs[1]) == raw_batches(logs[0])
    assert records_of(logs[1]) == expected_records(writers[1].history, logs[1].active_segment.base_offset)


def clean_snapshot_elsewhere(snapshot: LogSnapshot, now_ms: int) -> CleanedLog:
    """The first phase in a process of its own, on a clock stopped where the test's is."""
    return small_cleaner(MockClock(now_ms)).clean_snapshot(snapshot)


def delete_first_segment(log: Log) -> None:
    log.delete_records(log.log_segments()[1].base_offset)
    log.delete_old_segments()


CHANGES: dict[str, Callable[[Log], object]] = {
    "retention deleted a segment": delete_first_segment,
    "truncated into the cleaned range": lambda log: log.truncate_to(log.log_segments()[1].base_offset + 1),
    "topic deleted (log closed)": Log.close_without_marker,
    "owner restarted (its loader deleted the .cleaned files)": lambda log: [
        path.unlink() for path in log.directory.glob(f"*{file_names.CLEANED_SUFFIX}")
    ],
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_log_changed_between_the_phases_discards_the_cleaned_segments(
    tmp_path: Path, clock: MockClock, change: str
) -> None:
    log = open_log(tmp_path, clock, cleanup_policy="compact,delete", retention_ms=-1)
    writer = Writer(log, clock)
    fill_keyed(writer, 60, keys=5, tag="v")
    log.roll()
    cleaned = small_cleaner(clock).clean_snapshot(snapshot_for_cleaning(log, 0))
    assert cleaned.groups
    CHANGES[change](log)
    before = None if log.closed else records_of(log)

    result = swap_cleaned(log, cleaned)

    assert (result.aborted, result.end_offset, result.segments_written) == (True, 0, 0)
    assert not list((tmp_path / "topic-0").glob(f"*{file_names.CLEANED_SUFFIX}"))
    if before is not None:
        assert records_of(log) == before


def test_a_first_phase_that_fails_because_the_log_changed_aborts_and_one_on_an_unchanged_log_raises(
    tmp_path: Path, clock: MockClock
) -> None:
    log = open_log(tmp_path, clock, cleanup_policy="compact,delete", retention_ms=-1, file_delete_delay_ms=60_000)
    writer = Writer(log, clock)
    fill_keyed(writer, 60, keys=5, tag="v")
    snapshot = snapshot_for_cleaning(log, 0)
    delete_first_segment(log)  # renamed `.deleted`: the first phase cannot open it
    with pytest.raises(KafkaStorageError):
        small_cleaner(clock).clean_snapshot(snapshot)
    assert changed_since(log, snapshot)
    assert small_cleaner(clock).clean(log, log.log_start_offset).aborted is False  # the current log cleans

    snapshot = snapshot_for_cleaning(log, log.log_start_offset)
    assert not changed_since(log, snapshot)
    writer.append([(b"k1", b"appended")])
    assert not changed_since(log, snapshot), "appends to the active segment are no change"


def test_stale_cleaned_files_of_a_dead_cleaner_are_deleted_before_a_pass_writes(
    tmp_path: Path, clock: MockClock
) -> None:
    log = open_log(tmp_path, clock)
    writer = Writer(log, clock)
    fill_keyed(writer, 60, keys=5, tag="v")
    stale = file_names.log_file(log.directory, 1, file_names.CLEANED_SUFFIX)
    stale.write_bytes(b"left by a cleaner that died")

    result = small_cleaner(clock).clean(log, 0)

    assert not result.aborted and not stale.exists()
    assert records_of(log) == expected_records(writer.history, result.end_offset)


# --- crash during the swap (spec §4 items 33/34) ---------------------------------------------------


class SimulatedCrash(BaseException):
    """Raised where the process would die; not an Exception, so no cleanup handler runs."""


SWAP_STEPS = 5  # .cleaned -> .swap, three old segments -> .deleted, .swap -> final


@pytest.mark.parametrize("completed_steps", range(SWAP_STEPS + 1))
def test_crash_between_swap_steps_reopens_consistent(
    tmp_path: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch, completed_steps: int
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=4096)
    writer = Writer(log, clock)
    rng = random.Random(completed_steps)
    for _ in range(3):
        for index in range(6):
            writer.append([(b"k%d" % rng.randrange(6), b"v%d" % index)], codec=CompressionType.SNAPPY)
        log.roll()
    writer.append([(b"k0", b"in-active")])
    log_end_offset = log.log_end_offset
    cleaned_segments: list[LogSegment] = []

    def crash_midway(new_segments: list[LogSegment], old_segments: list[LogSegment]) -> None:
        assert len(old_segments) == 3
        cleaned_segments.extend(new_segments)
        steps = [lambda: new_segments[0].change_file_suffixes(file_names.CLEANED_SUFFIX, file_names.SWAP_SUFFIX)]
        steps += [
            lambda segment=segment: segment.change_file_suffixes("", file_names.DELETED_SUFFIX)
            for segment in old_segments
        ]
        steps.append(lambda: new_segments[0].change_file_suffixes(file_names.SWAP_SUFFIX, ""))
        assert len(steps) == SWAP_STEPS
        for step in steps[:completed_steps]:
            step()
        raise SimulatedCrash

    monkeypatch.setattr(log, "replace_segments", crash_midway)
    with pytest.raises(SimulatedCrash):
        small_cleaner(clock).clean(log, 0)
    log.close_without_marker()
    for segment in cleaned_segments:
        segment.close_handlers()

    reopened = Log.open(tmp_path / "topic-0", compact_config(segment_bytes=4096), clock=clock)

    leftovers = [
        path.name for path in (tmp_path / "topic-0").iterdir() if path.name.endswith(file_names.IN_FLIGHT_SUFFIXES)
    ]
    assert leftovers == []
    assert reopened.log_end_offset == log_end_offset
    by_offset = {written.offset: (written.offset, written.key, written.value) for written in writer.history}
    found = records_of(reopened)
    assert [offset for offset, _, _ in found] == sorted({offset for offset, _, _ in found})
    assert all(by_offset[record[0]] == record for record in found)
    assert all((latest.offset, latest.key, latest.value) in found for latest in writer.latest().values())

    small_cleaner(clock).clean(reopened, 0)
    assert records_of(reopened) == expected_records(writer.history, reopened.active_segment.base_offset)
    reopened.close()


# --- legacy entries --------------------------------------------------------------------------------


def test_legacy_entries_are_dropped_only_when_superseded(tmp_path: Path, clock: MockClock) -> None:
    directory = tmp_path / "legacy-0"
    directory.mkdir()
    data = bytearray()
    for offset, key in enumerate([b"a", b"b", b"c"]):
        builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
        builder.append(offset, timestamp=clock.milliseconds(), key=key, value=b"legacy")
        data += builder.build()
    file_names.log_file(directory, 0).write_bytes(bytes(data))
    log = Log.open(directory, compact_config(), clock=clock)
    assert log.log_end_offset == 3
    log.roll()
    writer = Writer(log, clock)
    writer.append([(b"b", b"v2")])
    log.roll()
    legacy_entries = data

    small_cleaner(clock).clean(log, 0)

    assert records_of(log) == [(0, b"a", b"legacy"), (2, b"c", b"legacy"), (3, b"b", b"v2")]
    first = log.log_segments()[0]
    size = len(legacy_entries) // 3
    assert first.log.read(0, 2 * size) == bytes(legacy_entries[:size] + legacy_entries[2 * size :])
    log.close()


def legacy_entries(
    magic: int, timestamp_ms: int, pairs: list[tuple[bytes | None, bytes | None]], compression_type: int = 0
) -> bytes:
    """Legacy (magic 0/1) log entries from offset 0 as a broker stored them, by kafka-python's builder: one entry
    per record when uncompressed, one wrapper holding them all when compressed."""
    if compression_type:
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=compression_type, batch_size=1 << 20)
        for offset, (key, value) in enumerate(pairs):
            builder.append(offset, timestamp=timestamp_ms, key=key, value=value)
        # A broker stores a wrapper under its last inner offset; a producer's builder leaves 0 there.
        return struct.pack(">q", len(pairs) - 1) + bytes(builder.build())[8:]
    data = bytearray()
    for offset, (key, value) in enumerate(pairs):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
        builder.append(offset, timestamp=timestamp_ms, key=key, value=value)
        data += builder.build()
    return bytes(data)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(("age_past_horizon_ms", "tombstone_kept"), [(-1, True), (0, False), (5000, False)])
def test_legacy_tombstone_goes_once_its_segment_is_older_than_the_last_clean_segment_minus_delete_retention(
    tmp_path: Path, clock: MockClock, magic: int, age_past_horizon_ms: int, tombstone_kept: bool
) -> None:
    """Kafka's legacy horizon: last clean segment's mtime - delete.retention.ms; a tombstone is kept while its
    segment's mtime is after it. Segments: [0-2] legacy, [3] clean v2, [4] dirty v2, active [5]."""
    directory = tmp_path / "legacy-0"
    directory.mkdir()
    pairs: list[tuple[bytes | None, bytes | None]] = [(b"a", b"legacy"), (b"gone", None), (b"c", b"legacy")]
    file_names.log_file(directory, 0).write_bytes(legacy_entries(magic, clock.milliseconds(), pairs))
    log = Log.open(directory, compact_config(), clock=clock)
    assert log.log_end_offset == 3
    log.roll()
    writer = Writer(log, clock)
    writer.append([(b"d", b"clean")])
    log.roll()
    writer.append([(b"e", b"dirty")])
    log.roll()
    legacy, clean = log.log_segments()[:2]
    clean_modified_ms = 1_600_000_000_000
    clean.log.set_last_modified_ms(clean_modified_ms)
    legacy.log.set_last_modified_ms(clean_modified_ms - DELETE_RETENTION_MS - age_past_horizon_ms)

    small_cleaner(clock).clean(log, 4)

    tombstone = [(1, b"gone", None)] if tombstone_kept else []
    assert records_of(log) == [
        (0, b"a", b"legacy"),
        *tombstone,
        (2, b"c", b"legacy"),
        (3, b"d", b"clean"),
        (4, b"e", b"dirty"),
    ]
    log.close()


@pytest.mark.parametrize(
    ("pairs", "dropped"), [([(b"gone", None), (b"e", b"old")], True), ([(b"gone", None), (b"a", b"kept")], False)]
)
def test_legacy_wrapper_goes_whole_or_stays_whole(
    tmp_path: Path, clock: MockClock, pairs: list[tuple[bytes | None, bytes | None]], dropped: bool
) -> None:
    """A compressed legacy wrapper is not rewritten: it goes when each inner record is superseded or an expired
    tombstone, and is otherwise copied byte for byte, its tombstone with it."""
    directory = tmp_path / "legacy-0"
    directory.mkdir()
    wrapper = legacy_entries(1, clock.milliseconds(), pairs, compression_type=1)
    file_names.log_file(directory, 0).write_bytes(wrapper)
    log = Log.open(directory, compact_config(), clock=clock)
    log.roll()
    writer = Writer(log, clock)
    writer.append([(b"d", b"clean")])
    log.roll()
    writer.append([(b"e", b"dirty")])
    log.roll()
    legacy, clean = log.log_segments()[:2]
    clean.log.set_last_modified_ms(1_600_000_000_000)
    legacy.log.set_last_modified_ms(1_600_000_000_000 - DELETE_RETENTION_MS)

    small_cleaner(clock).clean(log, 3)

    if dropped:
        assert records_of(log) == [(2, b"d", b"clean"), (3, b"e", b"dirty")]
    else:
        assert records_of(log) == [(0, b"gone", None), (1, b"a", b"kept"), (2, b"d", b"clean"), (3, b"e", b"dirty")]
        assert log.log_segments()[0].log.read(0, len(wrapper)) == wrapper
    log.close()


# --- throttling ------------------------------------------------------------------------------------


def test_throttler_sleeps_to_hold_the_configured_rate(clock: MockClock) -> None:
    sleeps: list[int] = []
    throttler = Throttler(1000.0, clock, sleeps.append)
    throttler.maybe_throttle(1000)
    assert sleeps == []
    clock.sleep(400)
    throttler.maybe_throttle(1000)
    assert sleeps == [1600]
    clock.sleep(1000)
    throttler.maybe_throttle(500)
    assert sleeps == [1600]
