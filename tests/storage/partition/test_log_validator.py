"""Tests for `storage.partition.log_validator`: every rejection rule of Kafka's leader append path, each
checked for its typed error and, through `Log.append`, for leaving the log untouched; plus what validation
hands the log (offsets unassigned, codecs, max timestamps)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import crc32c
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
)
from storage.partition.log import Log
from storage.partition.log_validator import validate_client_records
from storage.records.compression import CompressionType
from storage.records.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    encode_varint,
)
from tests.storage.builders import (
    START_MS,
    Rec,
    batch_bytes,
    file_states,
    kafka_batch,
    kafka_decode,
    simple_batch,
    simple_records,
)

HOUR_MS = 3_600_000


def with_field(data: bytes, at: int, fmt: str, value: int) -> bytes:
    """`data` with one header field overwritten and the CRC recomputed, so only the changed rule fails."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def legacy_message_set(magic: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    builder.append(0, START_MS if magic else None, b"k", b"v")
    return bytes(builder.build())


def unkeyed_batch(compression: CompressionType = CompressionType.NONE) -> bytes:
    return batch_bytes([Rec(b"k", b"v"), Rec(None, b"no key")], compression=compression)


def lying_record_length() -> bytes:
    """A batch whose single record's length varint says 3 bytes more than the record holds."""
    good = simple_batch(1)
    records = good[RECORD_BATCH_OVERHEAD:]
    length = records[0] >> 1  # one-byte zig-zag varint for these small records
    bad_records = encode_varint(length + 3) + records[1:] + b"\x00\x00\x00"
    out = bytearray(good[:RECORD_BATCH_OVERHEAD] + bad_records)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def with_flipped_payload_byte(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0x5A
    return bytes(out)


NOW = START_MS
# (name, bytes to append, topic config overrides, expected error)
REJECTIONS: list[tuple[str, Callable[[], object], dict, type[StorageError]]] = [
    ("base_offset_not_zero", lambda: batch_bytes(simple_records(2), base_offset=5), {}, InvalidRecordError),
    ("crc_mismatch", lambda: with_flipped_payload_byte(simple_batch(3)), {}, CorruptRecordError),
    (
        "crc_mismatch_compressed",
        lambda: with_flipped_payload_byte(simple_batch(3, compression=CompressionType.GZIP)),
        {},
        CorruptRecordError,
    ),
    (
        "count_above_last_offset_delta",
        lambda: with_field(simple_batch(3), RECORDS_COUNT_OFFSET, ">i", 4),
        {},
        InvalidRecordError,
    ),
    (
        "count_below_last_offset_delta",
        lambda: with_field(simple_batch(3), LAST_OFFSET_DELTA_OFFSET, ">i", 5),
        {},
        InvalidRecordError,
    ),
    (
        "count_zero",
        lambda: with_field(
            with_field(simple_batch(1), RECORDS_COUNT_OFFSET, ">i", 0), LAST_OFFSET_DELTA_OFFSET, ">i", -1
        ),
        {},
        InvalidRecordError,
    ),
    (
        "count_matches_delta_but_not_records",
        lambda: with_field(
            with_field(simple_batch(2), RECORDS_COUNT_OFFSET, ">i", 3), LAST_OFFSET_DELTA_OFFSET, ">i", 2
        ),
        {},
        InvalidRecordError,
    ),
    (
        "count_lies_in_compressed_batch",
        lambda: with_field(
            with_field(simple_batch(2, compression=CompressionType.LZ4), RECORDS_COUNT_OFFSET, ">i", 3),
            LAST_OFFSET_DELTA_OFFSET,
            ">i",
            2,
        ),
        {},
        InvalidRecordError,
    ),
    ("record_length_overruns_batch", lying_record_length, {}, InvalidRecordError),
    (
        "control_batch",
        lambda: build_control_batch(ControlRecordType.COMMIT, timestamp=NOW, producer_id=1, producer_epoch=0),
        {},
        InvalidRecordError,
    ),
    (
        "producer_id_without_sequence",
        lambda: batch_bytes(simple_records(2), producer_id=7, producer_epoch=0, base_sequence=-1),
        {},
        InvalidRecordError,
    ),
    (
        "log_append_time_set_by_client",
        lambda: _log_append_time_batch(),
        {},
        InvalidTimestampError,
    ),
    (
        "larger_than_max_message_bytes",
        lambda: simple_batch(5, value_size=100),
        {"max_message_bytes": 500},
        RecordTooLargeError,
    ),
    (
        "larger_than_max_message_bytes_after_recompression",
        lambda: simple_batch(20, value_size=200, compression=CompressionType.GZIP),
        {"max_message_bytes": 2000, "compression_type": "uncompressed"},
        RecordTooLargeError,
    ),
    (
        "larger_than_segment_bytes",
        lambda: simple_batch(5, value_size=100),
        {"segment_bytes": 500},
        RecordBatchTooLargeError,
    ),
    ("unkeyed_record_on_compacted_topic", unkeyed_batch, {"cleanup_policy": "compact"}, InvalidRecordError),
    (
        "unkeyed_compressed_record_on_compacted_topic",
        lambda: unkeyed_batch(CompressionType.ZSTD),
        {"cleanup_policy": "compact,delete"},
        InvalidRecordError,
    ),
    (
        "timestamp_before_window",
        lambda: simple_batch(2, timestamp=NOW - 2 * HOUR_MS),
        {"message_timestamp_before_max_ms": HOUR_MS},
        InvalidTimestampError,
    ),
    (
        "timestamp_after_window",
        lambda: simple_batch(2, timestamp=NOW + 2 * HOUR_MS),
        {"message_timestamp_after_max_ms": HOUR_MS},
        InvalidTimestampError,
    ),
    (
        "timestamp_outside_deprecated_difference",
        lambda: simple_batch(2, timestamp=NOW - 2 * HOUR_MS, compression=CompressionType.SNAPPY),
        {"message_timestamp_difference_max_ms": HOUR_MS},
        InvalidTimestampError,
    ),
    (
        "one_late_record_in_compressed_batch",
        lambda: batch_bytes(
            [Rec(b"a", b"1", NOW), Rec(b"b", b"2", NOW + 2 * HOUR_MS)], compression=CompressionType.LZ4
        ),
        {"message_timestamp_after_max_ms": HOUR_MS},
        InvalidTimestampError,
    ),
    (
        "late_record_hidden_by_max_timestamp_header",
        lambda: with_field(
            batch_bytes([Rec(b"a", b"1", NOW), Rec(b"b", b"2", NOW + 2 * HOUR_MS)]), MAX_TIMESTAMP_OFFSET, ">q", NOW
        ),
        {"message_timestamp_after_max_ms": HOUR_MS},
        InvalidTimestampError,
    ),
    ("magic_0_message_set", lambda: legacy_message_set(0), {}, InvalidRecordError),
    ("magic_1_message_set", lambda: legacy_message_set(1), {}, InvalidRecordError),
    ("trailing_bytes_shorter_than_a_header", lambda: simple_batch(2) + b"\x00" * 5, {}, CorruptRecordError),
    ("trailing_garbage", lambda: simple_batch(2) + bytes(range(7, 47)), {}, CorruptRecordError),
    ("trailing_partial_batch", lambda: simple_batch(2) + simple_batch(2)[:40], {}, CorruptRecordError),
    ("length_field_too_small", lambda: with_field(simple_batch(1), 8, ">i", 10), {}, CorruptRecordError),
    (
        "second_batch_bad",
        lambda: simple_batch(2) + batch_bytes(simple_records(1), base_offset=9),
        {},
        InvalidRecordError,
    ),
    ("empty", lambda: b"", {}, InvalidRecordError),
    ("str_input", lambda: "not bytes", {}, InvalidRecordError),
    ("list_input", lambda: [simple_batch(1)], {}, InvalidRecordError),
    ("none_input", lambda: None, {}, InvalidRecordError),
    ("int_input", lambda: 12345, {}, InvalidRecordError),
]


def _log_append_time_batch() -> bytes:
    builder = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    builder.append(b"k", b"v", timestamp=NOW)
    return builder.build()


@pytest.fixture
def clock() -> MockClock:
    return MockClock(NOW)


@pytest.fixture
def existing_log(tmp_path: Path, clock: MockClock) -> Iterator[Callable[..., Log]]:
    """Opens a log that already holds two appends, with the given topic overrides."""
    opened: list[Log] = []

    def make(**overrides: object) -> Log:
        log = Log.open(tmp_path / "t-0", LogConfig(**overrides), clock=clock)
        opened.append(log)
        log.append(batch_bytes([Rec(b"a", b"1", NOW), Rec(b"b", b"2", NOW)]))
        log.append(batch_bytes([Rec(b"c", b"3", NOW)]))
        return log

    yield make
    for log in opened:
        log.close()


@pytest.mark.parametrize(
    ("data_of", "overrides", "error"), [case[1:] for case in REJECTIONS], ids=[case[0] for case in REJECTIONS]
)
def test_rejected_append_raises_typed_error_and_writes_nothing(
    existing_log: Callable[..., Log], data_of: Callable[[], object], overrides: dict, error: type[StorageError]
) -> None:
    log = existing_log(**overrides)
    data = data_of()
    before = file_states(log.directory)
    end_before, segments_before = log.log_end_offset, log.num_segments
    with pytest.raises(error):
        log.append(data)  # type: ignore[arg-type]
    assert (log.log_end_offset, log.num_segments) == (end_before, segments_before)
    assert file_states(log.directory) == before
    assert [record.value for record in log.records()] == [b"1", b"2", b"3"]


@pytest.mark.parametrize(
    ("data_of", "overrides", "error"),
    [case[1:] for case in REJECTIONS if case[3] is not RecordBatchTooLargeError],
    ids=[case[0] for case in REJECTIONS if case[3] is not RecordBatchTooLargeError],
)
def test_validator_alone_raises_the_same_typed_error(
    data_of: Callable[[], object], overrides: dict, error: type[StorageError]
) -> None:
    with pytest.raises(error):
        validate_client_records(data_of(), LogConfig(**overrides), NOW)  # type: ignore[arg-type]


def test_records_without_timestamp_are_exempt_from_the_timestamp_windows() -> None:
    """Kafka's validateTimestamp skips NO_TIMESTAMP (-1) records: they carry no time to be out of range."""
    topic = LogConfig(message_timestamp_before_max_ms=HOUR_MS, message_timestamp_after_max_ms=HOUR_MS)
    for compression in (CompressionType.NONE, CompressionType.GZIP):
        validated = validate_client_records(
            simple_batch(3, timestamp=NO_TIMESTAMP, compression=compression), topic, NOW
        )
        assert validated.record_count == 3
        assert validated.batches[0].max_timestamp == NO_TIMESTAMP


def test_timestamps_on_the_window_edges_are_accepted() -> None:
    topic = LogConfig(message_timestamp_before_max_ms=HOUR_MS, message_timestamp_after_max_ms=HOUR_MS)
    data = batch_bytes([Rec(b"a", b"1", NOW - HOUR_MS), Rec(b"b", b"2", NOW + HOUR_MS)])
    assert validate_client_records(data, topic, NOW).batches[0].max_timestamp == NOW + HOUR_MS


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_batches_of_a_few_records_name_the_record_they_are_refused_for(count: int) -> None:
    """Batches below `record_columns.SCALAR_SUMMARY_RECORDS` records are checked record by record, larger ones with
    numpy: on both sides a null key on a compacted topic and a timestamp out of the window are refused naming their
    record, and a section one byte short is refused as corrupt."""
    compacted = LogConfig(cleanup_policy="compact", message_timestamp_after_max_ms=HOUR_MS)
    for index in range(count):
        keyed = [Rec(b"k%d" % at, b"v" * at, NOW) for at in range(count)]
        null_key = [Rec(None, record.value, NOW) if at == index else record for at, record in enumerate(keyed)]
        late = [
            Rec(record.key, record.value, NOW + 2 * HOUR_MS) if at == index else record
            for at, record in enumerate(keyed)
        ]
        assert validate_client_records(batch_bytes(keyed), compacted, NOW).record_count == count
        for records, error in ((null_key, InvalidRecordError), (late, InvalidTimestampError)):
            with pytest.raises(error) as refused:
                validate_client_records(batch_bytes(records), compacted, NOW)
            assert refused.value.offset == index
    short = bytearray(batch_bytes([Rec(b"k", b"v", NOW)] * count))
    del short[-1]
    struct.pack_into(">i", short, 8, len(short) - 12)
    struct.pack_into(">I", short, CRC_OFFSET, crc32c.crc32c(bytes(short[ATTRIBUTES_OFFSET:])))
    with pytest.raises(InvalidRecordError):
        validate_client_records(bytes(short), compacted, NOW)


def test_log_append_time_topic_ignores_the_create_time_windows() -> None:
    topic = LogConfig(message_timestamp_type="LogAppendTime", message_timestamp_after_max_ms=HOUR_MS)
    validated = validate_client_records(simple_batch(2, timestamp=NOW + 5 * HOUR_MS), topic, NOW)
    assert validated.record_count == 2


def test_max_timestamp_comes_from_the_records_not_the_header() -> None:
    """Kafka recomputes a batch's maxTimestamp from its records and rewrites it (and the CRC) in place."""
    honest = batch_bytes([Rec(b"a", b"1", NOW + 50), Rec(b"b", b"2", NOW + 10)])
    lying = with_field(honest, MAX_TIMESTAMP_OFFSET, ">q", NOW)
    for compression_type in ("producer", "lz4"):
        validated = validate_client_records(lying, LogConfig(compression_type=compression_type), NOW)
        assert validated.batches[0].max_timestamp == NOW + 50
        stored = RecordBatch(bytes(validated.buffer))
        assert stored.max_timestamp == NOW + 50
        assert stored.is_valid()


def test_uncompressed_batches_pass_through_byte_for_byte() -> None:
    data = simple_batch(4) + simple_batch(2, tag=1)
    validated = validate_client_records(data, LogConfig(), NOW)
    assert bytes(validated.buffer) == data
    assert [(info.start, info.size, info.records_count) for info in validated.batches] == [
        (0, len(simple_batch(4)), 4),
        (len(simple_batch(4)), len(simple_batch(2, tag=1)), 2),
    ]
    assert validated.record_count == 6


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda codec: codec.kafka_name)
def test_same_codec_is_not_recompressed(codec: CompressionType) -> None:
    data = simple_batch(10, value_size=50, compression=codec)
    topic = LogConfig(compression_type="producer" if codec == CompressionType.NONE else codec.kafka_name)
    validated = validate_client_records(data, topic, NOW)
    assert bytes(validated.buffer) == data
    assert validated.source_compression == validated.target_compression == codec


@pytest.mark.parametrize("source", list(CompressionType), ids=lambda codec: codec.kafka_name)
@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_topic_codec_different_from_producer_recompresses_with_equal_records(
    source: CompressionType, target: str
) -> None:
    records = [
        Rec(b"k1", b"x" * 300, NOW, (("h", b"1"),)),
        Rec(None, b"", NOW + 3),
        Rec(b"", None, NOW + 1, (("a", None), ("b", b""))),
    ]
    validated = validate_client_records(kafka_batch(records, source), LogConfig(compression_type=target), NOW)
    stored = RecordBatch(bytes(validated.buffer))
    assert stored.compression == CompressionType.from_name(target)
    assert stored.is_valid()
    decoded = kafka_decode(bytes(validated.buffer))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded] == [
        (r.key, r.value, r.timestamp, r.headers) for r in records
    ]
    assert [r.offset for r in decoded] == [0, 1, 2]
    assert validated.batches[0].max_timestamp == NOW + 3


@pytest.mark.parametrize("compression", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4])
def test_a_compressed_batch_whose_inner_offsets_do_not_run_0_1_2_is_refused_as_kafka_refuses_it(
    compression: CompressionType,
) -> None:
    """Kafka's LogValidator requires a compressed batch's records to carry offset deltas 0, 1, 2, ... ("inner
    records offset should always be continuous"): kafka-python's builder is given the offsets 0, 0, 2 (three
    records, lastOffsetDelta 2, so the count check passes) and the append is refused whole; the same records
    numbered 0, 1, 2 are taken."""

    def built(offsets: tuple[int, ...]) -> bytes:
        data = kafka_batch([Rec(b"key", b"value" * 40)] * len(offsets), compression, offset_deltas=offsets)
        assert RecordBatch(data, 0).compression == compression, "kafka-python fell back to no codec"
        return data

    with pytest.raises(InvalidRecordError, match="incremental offsets"):
        validate_client_records(built((0, 0, 2)), LogConfig(), NOW)
    accepted = validate_client_records(built((0, 1, 2)), LogConfig(), NOW)
    assert accepted.record_count == 3


def test_an_uncompressed_batch_keeps_its_inner_offsets_as_kafka_stores_them(
    existing_log: Callable[..., Log],
) -> None:
    """Kafka checks inner offsets only in a compressed batch: `LogValidator.assignOffsetsNonCompressed` sets the
    batch's base offset and leaves each record's delta as sent. An uncompressed batch numbered 0, 0, 2 is taken
    and its records read back at base + 0, base + 0, base + 2, the offsets kafka-python decodes from the bytes
    stored."""
    log = existing_log()
    base = log.log_end_offset
    info = log.append(kafka_batch([Rec(b"key", b"value", NOW)] * 3, offset_deltas=(0, 0, 2)))
    assert (info.first_offset, info.last_offset) == (base, base + 2)
    assert [record.offset for record in log.records(base)] == [base, base, base + 2]
    assert [record.offset for record in kafka_decode(log.read(base, 1 << 20).records)] == [base, base, base + 2]
