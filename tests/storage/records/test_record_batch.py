"""Tests for `storage.records.record_batch` (v2 batches), after Kafka's DefaultRecordBatchTest and DefaultRecordTest.

Oracles: the spec's field table (offsets typed in here, not taken from the module), a textbook zig-zag varint,
`crc32c` and kafka-python 3.0.12's own reader and writer, and batches written by real Kafka brokers.
"""

from __future__ import annotations

import contextlib
import struct
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.record.util import calc_crc32c
from kafka.record.util import encode_varint as kafka_encode_varint

from storage.errors import CorruptRecordError, InvalidRecordError, StorageError
from storage.records.compression import CompressionType, compress
from storage.records.record_batch import (
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    decode_records,
    decode_varint,
    encode_batch,
    encode_varint,
    iter_batches,
    set_base_offset_and_epoch,
    set_log_append_time,
    varint_size,
)

CODECS = list(CompressionType)
T0 = 1_700_000_000_000
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
PATH = "/logs/topic-0/00000000000000000000.log"

# Spec section 2.2: offset, struct format of every header field.
FIELD_LAYOUT = {
    "base_offset": (0, ">q"),
    "length": (8, ">i"),
    "partition_leader_epoch": (12, ">i"),
    "magic": (16, ">b"),
    "crc": (17, ">I"),
    "attributes": (21, ">h"),
    "last_offset_delta": (23, ">i"),
    "base_timestamp": (27, ">q"),
    "max_timestamp": (35, ">q"),
    "producer_id": (43, ">q"),
    "producer_epoch": (51, ">h"),
    "base_sequence": (53, ">i"),
    "records_count": (57, ">i"),
}
CRC_START = 21

Headers = list[tuple[str, bytes | None]]
# (timestamp, key, value, headers): null vs empty keys/values, null header values, UTF-8 header keys,
# duplicate header keys, timestamps out of order, and one compressible value so every codec really compresses.
RECORDS: list[tuple[int, bytes | None, bytes | None, Headers]] = [
    (T0, b"k0", b"v0", []),
    (T0 + 5, None, b"v1", [("h", b"x")]),
    (T0 - 3, b"", None, [("ключ", None), ("", b"")]),
    (T0 + 9, b"k3", b"", [("🔑", b"\x00\xff"), ("dup", b"1"), ("dup", b"2")]),
    (T0 + 1, None, None, []),
    (T0 + 7, b"key" * 50, b"compressible value " * 400, [("trace", bytes(range(256)))]),
]


def build(
    records: Sequence[tuple[int, bytes | None, bytes | None, Headers]] = RECORDS,
    offset_deltas: Sequence[int] | None = None,
    **options: object,
) -> bytes:
    builder = RecordBatchBuilder(**options)  # type: ignore[arg-type]
    for index, (timestamp, key, value, headers) in enumerate(records):
        delta = None if offset_deltas is None else offset_deltas[index]
        builder.append(key, value, timestamp=timestamp, headers=headers, offset_delta=delta)
    return builder.build()


def expected(
    records: Sequence[tuple[int, bytes | None, bytes | None, Headers]] = RECORDS,
    base_offset: int = 0,
    offset_deltas: Sequence[int] | None = None,
) -> list[Record]:
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    return [
        Record(base_offset + delta, timestamp, key, value, tuple(headers))
        for delta, (timestamp, key, value, headers) in zip(deltas, records, strict=True)
    ]


def field(raw: bytes | bytearray, name: str) -> int:
    offset, fmt = FIELD_LAYOUT[name]
    return struct.unpack_from(fmt, raw, offset)[0]


def put(raw: bytearray, name: str, value: int) -> None:
    offset, fmt = FIELD_LAYOUT[name]
    struct.pack_into(fmt, raw, offset, value)


def resign(raw: bytearray, start: int = 0, end: int | None = None) -> bytearray:
    """Recomputes the CRC, so a deliberately broken batch gets past the checksum to the decoder."""
    end = len(raw) if end is None else end
    struct.pack_into(">I", raw, start + 17, crc32c.crc32c(bytes(raw[start + CRC_START : end])))
    return raw


def kafka_python_records(raw: bytes | bytearray) -> list[Record]:
    batch = DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    return [
        Record(record.offset, record.timestamp, record.key, record.value, tuple(record.headers)) for record in batch
    ]


def kafka_python_build(
    codec: CompressionType,
    records: Sequence[tuple[int, bytes | None, bytes | None, Headers]] = RECORDS,
    offsets: Sequence[int] | None = None,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for index, (timestamp, key, value, headers) in enumerate(records):
        offset = index if offsets is None else offsets[index]
        assert builder.append(offset, timestamp, key, value, headers) is not None
    return bytes(builder.build())


# --- header fields and attributes -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_every_header_field_round_trips(codec: CompressionType) -> None:
    raw = build(
        compression=codec,
        base_offset=1_234_567_890_123,
        partition_leader_epoch=7,
        producer_id=9_876_543_210,
        producer_epoch=12,
        base_sequence=100,
        is_transactional=True,
    )
    batch = RecordBatch(raw)
    wanted = {
        "base_offset": 1_234_567_890_123,
        "length": len(raw) - 12,
        "partition_leader_epoch": 7,
        "magic": 2,
        "crc": crc32c.crc32c(raw[CRC_START:]),
        "attributes": int(codec) | 0x10,
        "last_offset_delta": len(RECORDS) - 1,
        "base_timestamp": T0,
        "max_timestamp": T0 + 9,
        "producer_id": 9_876_543_210,
        "producer_epoch": 12,
        "base_sequence": 100,
        "records_count": len(RECORDS),
    }
    for name, value in wanted.items():
        assert getattr(batch, name) == value, name
        assert field(raw, name) == value, name
    assert batch.size_in_bytes == len(raw)
    assert batch.last_offset == 1_234_567_890_123 + len(RECORDS) - 1
    assert batch.next_offset == batch.last_offset + 1
    assert batch.last_sequence == 100 + len(RECORDS) - 1
    assert batch.compression is codec
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert batch.first_timestamp == T0 and batch.delete_horizon_ms is None
    assert batch.is_valid()
    assert bytes(batch.raw()) == raw
    assert batch.records() == expected(base_offset=1_234_567_890_123)


def test_builder_defaults_are_a_producers() -> None:
    raw = build()
    assert field(raw, "base_offset") == 0
    assert field(raw, "partition_leader_epoch") == -1
    assert field(raw, "producer_id") == -1
    assert field(raw, "producer_epoch") == -1
    assert field(raw, "base_sequence") == -1
    assert field(raw, "attributes") == 0
    assert RecordBatch(raw).last_sequence == -1


def test_header_is_61_bytes() -> None:
    assert RECORD_BATCH_OVERHEAD == 61
    raw = build([])
    assert len(raw) == 61
    assert field(raw, "records_count") == 0


def test_empty_batch() -> None:
    batch = RecordBatch(build([]))
    assert batch.records() == []
    assert batch.base_timestamp == -1 and batch.max_timestamp == -1
    assert batch.is_valid()


@pytest.mark.parametrize(
    ("options", "bits"),
    [
        ({}, 0),
        ({"timestamp_type": TimestampType.LOG_APPEND_TIME}, 0x08),
        ({"is_transactional": True}, 0x10),
        ({"is_control": True}, 0x20),
        ({"delete_horizon_ms": T0 + 1000}, 0x40),
        (
            {
                "compression": CompressionType.ZSTD,
                "timestamp_type": TimestampType.LOG_APPEND_TIME,
                "is_transactional": True,
                "delete_horizon_ms": T0,
            },
            0x04 | 0x08 | 0x10 | 0x40,
        ),
    ],
)
def test_attribute_bits(options: dict[str, object], bits: int) -> None:
    raw = build(RECORDS[:1], **options)
    assert field(raw, "attributes") == bits
    batch = RecordBatch(raw)
    assert batch.attributes == bits


@pytest.mark.parametrize("attributes", range(0x80))
def test_attributes_decode_bit_by_bit(attributes: int) -> None:
    raw = encode_batch(
        base_offset=0,
        partition_leader_epoch=0,
        attributes=attributes,
        last_offset_delta=0,
        base_timestamp=T0,
        max_timestamp=T0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=0,
        payload=b"",
    )
    batch = RecordBatch(raw)
    codec_id = attributes & 0x07
    if codec_id <= 4:
        assert batch.compression == codec_id
    else:
        with pytest.raises(StorageError):
            _ = batch.compression
    assert batch.timestamp_type == (attributes >> 3) & 1
    assert batch.is_transactional == bool(attributes & 0x10)
    assert batch.is_control == bool(attributes & 0x20)
    assert batch.has_delete_horizon == bool(attributes & 0x40)
    assert batch.delete_horizon_ms == (T0 if attributes & 0x40 else None)
    assert batch.first_timestamp == (-1 if attributes & 0x40 else T0)


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_delete_horizon_keeps_record_timestamps(codec: CompressionType) -> None:
    horizon = T0 + 86_400_000
    raw = build(compression=codec, delete_horizon_ms=horizon)
    batch = RecordBatch(raw)
    assert batch.has_delete_horizon
    assert batch.delete_horizon_ms == horizon == batch.base_timestamp
    assert batch.first_timestamp == -1
    assert batch.max_timestamp == T0 + 9
    assert batch.records() == expected()
    # Kafka's rule (and kafka-python's reader): record timestamp = baseTimestamp + delta, whatever bit 6 says.
    assert kafka_python_records(raw) == expected()


def test_log_append_time_builder_reads_max_timestamp_for_every_record() -> None:
    batch = RecordBatch(build(timestamp_type=TimestampType.LOG_APPEND_TIME))
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {record.timestamp for record in batch.records()} == {T0 + 9}


def test_no_timestamp_type_is_refused_for_magic_2() -> None:
    with pytest.raises(InvalidRecordError):
        RecordBatchBuilder(timestamp_type=TimestampType.NO_TIMESTAMP_TYPE)


def test_timestamp_type_names() -> None:
    assert TimestampType.from_name("CreateTime") is TimestampType.CREATE_TIME
    assert TimestampType.from_name("LogAppendTime") is TimestampType.LOG_APPEND_TIME
    assert TimestampType.LOG_APPEND_TIME.kafka_name == "LogAppendTime"


def test_offset_deltas_with_gaps() -> None:
    deltas = [0, 2, 3, 10, 11, 40]
    raw = build(offset_deltas=deltas, base_offset=100)
    batch = RecordBatch(raw)
    assert batch.last_offset_delta == 40 and batch.last_offset == 140
    assert batch.records() == expected(base_offset=100, offset_deltas=deltas)
    assert kafka_python_records(raw) == expected(base_offset=100, offset_deltas=deltas)


def test_offset_delta_must_increase() -> None:
    builder = RecordBatchBuilder()
    builder.append(None, b"a", timestamp=T0, offset_delta=5)
    with pytest.raises(InvalidRecordError):
        builder.append(None, b"b", timestamp=T0, offset_delta=5)


def test_estimated_size_is_exact_when_uncompressed() -> None:
    builder = RecordBatchBuilder()
    for timestamp, key, value, headers in RECORDS:
        builder.append(key, value, timestamp=timestamp, headers=headers)
    assert len(builder) == len(RECORDS)
    assert builder.estimated_size_in_bytes == len(builder.build())


@pytest.mark.parametrize(
    "options",
    [
        {"producer_epoch": 2**15},
        {"base_sequence": 2**31},
        {"partition_leader_epoch": -(2**31) - 1},
        {"base_offset": 2**63},
        {"producer_id": -(2**63) - 1},
    ],
)
def test_builder_refuses_header_fields_out_of_range(options: dict[str, int]) -> None:
    with pytest.raises(InvalidRecordError):
        build(RECORDS[:1], **options)


def test_builder_refuses_offset_delta_beyond_int32() -> None:
    with pytest.raises(InvalidRecordError):
        build(RECORDS[:1], offset_deltas=[2**31])


def test_builder_refuses_timestamps_beyond_int64() -> None:
    with pytest.raises(InvalidRecordError):
        build([(INT64_MAX + 1, None, b"v", [])])


def test_record_timestamp_overflowing_int64_is_corrupt() -> None:
    raw = encode_batch(
        base_offset=0,
        partition_leader_epoch=0,
        attributes=0,
        last_offset_delta=0,
        base_timestamp=INT64_MAX,
        max_timestamp=INT64_MAX,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=1,
        payload=encode_varint(6) + b"\x00" + encode_varint(1) + b"\x00\x01\x01\x00",
    )
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw).records()


# --- varints ----------------------------------------------------------------------------------------


def oracle_varint(value: int) -> bytes:
    """Textbook zig-zag then little-endian base-128 groups."""
    zigzag = 2 * value if value >= 0 else -2 * value - 1
    out = []
    while True:
        group = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(group | 0x80)
        else:
            out.append(group)
            return bytes(out)


BOUNDARIES = [0, 1, -1, 63, -63, 64, -64, -65, 8191, 8192, -8192, -8193, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN]


@pytest.mark.parametrize("value", BOUNDARIES)
def test_varint_boundaries(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == oracle_varint(value)
    assert varint_size(value) == len(encoded)
    assert decode_varint(encoded, 0, 10) == (value, len(encoded))
    kafka_bytes = bytearray()
    kafka_encode_varint(value, kafka_bytes.append)
    assert bytes(kafka_bytes) == encoded
    if INT32_MIN <= value <= INT32_MAX:
        assert len(encoded) <= 5
        assert decode_varint(b"\xaa" + encoded + b"\xbb", 1, 5) == (value, len(encoded) + 1)


def test_varint_known_bytes() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(63) == b"\x7e"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(INT32_MAX) == b"\xfe\xff\xff\xff\x0f"
    assert encode_varint(INT32_MIN) == b"\xff\xff\xff\xff\x0f"
    assert len(encode_varint(INT64_MIN)) == 10


@settings(max_examples=200, deadline=None)
@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == oracle_varint(value)
    assert varint_size(value) == len(encoded) <= 10
    assert decode_varint(encoded + b"\x00", 0, 10) == (value, len(encoded))


@pytest.mark.parametrize(
    ("encoded", "max_bytes"),
    [
        (b"", 5),
        (b"\x80", 5),
        (b"\xff\xff", 10),
        (b"\x80\x80\x80\x80\x80\x00", 5),  # 6 bytes for an int32
        (b"\x80" * 10 + b"\x00", 10),  # 11 bytes for an int64
        (b"\xff" * 5, 5),
    ],
)
def test_varint_truncated_or_over_long(encoded: bytes, max_bytes: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(encoded, 0, max_bytes)


@pytest.mark.parametrize(
    ("encoded", "max_bytes"),
    [
        (b"\x80\x80\x80\x80\x10", 5),  # 2**32 before zig-zag: 33 bits in a 5-byte int32
        (b"\xff\xff\xff\xff\x7f", 5),
        (b"\x80" * 9 + b"\x02", 10),  # 2**64 before zig-zag: 65 bits in a 10-byte int64
        (b"\xff" * 9 + b"\x7f", 10),
    ],
)
def test_varint_out_of_range(encoded: bytes, max_bytes: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(encoded, 0, max_bytes)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**70])
def test_encode_varint_refuses_values_outside_int64(value: int) -> None:
    with pytest.raises(InvalidRecordError):
        encode_varint(value)


# --- records and headers -----------------------------------------------------------------------------------


def test_null_and_empty_keys_and_values_are_distinct() -> None:
    rows = [(T0, None, None, []), (T0, b"", b"", []), (T0, None, b"", []), (T0, b"", None, [])]
    records = RecordBatch(build(rows)).records()
    assert [(record.key, record.value) for record in records] == [(None, None), (b"", b""), (None, b""), (b"", None)]


def test_headers_round_trip() -> None:
    headers: Headers = [
        ("", None),
        ("ключ", b"\x00"),
        ("日本語", b""),
        ("k", None),
        ("k", b"v"),
        ("x" * 300, b"y" * 300),
    ]
    [record] = RecordBatch(build([(T0, b"k", b"v", headers)])).records()
    assert record.headers == tuple(headers)


def record_section(
    length: int | None = None,
    body_tail: bytes = b"",
    *,
    key: bytes = b"\x02k",
    value: bytes = b"\x02v",
    header_count: bytes = b"\x00",
) -> bytes:
    body = b"\x00" + b"\x00" + b"\x00" + key + value + header_count + body_tail
    return encode_varint(len(body) if length is None else length) + body


def test_decode_records_hand_built_section() -> None:
    section = record_section()
    assert decode_records(section, 1, 10, T0, None) == [Record(10, T0, b"k", b"v", ())]
    assert decode_records(section, 1, 10, T0, T0 + 5) == [Record(10, T0 + 5, b"k", b"v", ())]


@pytest.mark.parametrize(
    ("section", "count"),
    [
        (record_section(), 2),  # count too many
        (record_section() * 2, 1),  # count too few: bytes left over
        (record_section(), -1),
        (record_section(length=-1), 1),
        (record_section(length=100), 1),  # body overruns the section
        (record_section(length=7) + b"\x00", 1),  # body shorter than its fields
        (record_section(key=b"\x03"), 1),  # key length -2
        (record_section(key=b"\x0ak"), 1),  # key overruns the record
        (record_section(value=b"\x05"), 1),  # value length -3
        (record_section(value=b"\x0av"), 1),
        (record_section(header_count=b"\x01"), 1),  # header count -1
        (record_section(header_count=b"\x7e"), 1),  # 63 headers in 0 bytes
        (record_section(header_count=b"\x02", body_tail=b"\x01\x00"), 1),  # header key length -1
        (record_section(header_count=b"\x02", body_tail=b"\x04\xff\xfe\x01"), 1),  # header key not UTF-8
        (record_section(header_count=b"\x02", body_tail=b"\x02k\x03"), 1),  # header value length -2
        (record_section(header_count=b"\x02", body_tail=b"\x02k\x10"), 1),  # header value overruns
        (record_section(header_count=b"\x02", body_tail=b"\x02k"), 1),  # header value length missing
        (record_section(body_tail=b"\x00"), 1),  # record body longer than its fields
        (b"\x80\x80\x80\x80\x80\x01", 1),  # over-long length varint
        (b"", 1),
    ],
)
def test_decode_records_rejects_malformed_sections(section: bytes, count: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode_records(section, count, 0, T0, None)


# --- CRC-32C ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_crc_is_crc32c_over_attributes_to_end(codec: CompressionType) -> None:
    raw = build(compression=codec, partition_leader_epoch=3)
    stored = field(raw, "crc")
    assert stored == crc32c.crc32c(raw[21:]) == calc_crc32c(raw[21:])
    assert RecordBatch(raw).compute_crc() == stored
    assert DefaultRecordBatch(bytearray(raw)).validate_crc()


@pytest.mark.parametrize("position", [21, 22, 23, 27, 35, 43, 51, 53, 57, 61, 62, -1])
def test_crc_mismatch_detected_for_any_covered_byte(position: int) -> None:
    raw = bytearray(build(base_offset=77))
    raw[position] ^= 0x01
    batch = RecordBatch(bytes(raw), path=PATH)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError) as info:
        batch.ensure_valid()
    assert info.value.path == PATH and info.value.position == 0 and info.value.offset == 77


@pytest.mark.parametrize("position", [0, 7, 12, 15])
def test_bytes_outside_the_crc_do_not_invalidate_it(position: int) -> None:
    raw = bytearray(build())
    raw[position] ^= 0xFF
    assert RecordBatch(bytes(raw)).is_valid()


def test_stored_crc_damage_is_detected() -> None:
    raw = bytearray(build())
    raw[17] ^= 0x80
    assert not RecordBatch(bytes(raw)).is_valid()


# --- spec section 4 item 50 ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
@pytest.mark.parametrize("declared", [len(RECORDS) - 1, len(RECORDS) + 1, 0, 2**31 - 1, -1])
def test_record_count_mismatch_is_corrupt(codec: CompressionType, declared: int) -> None:
    raw = bytearray(build(compression=codec, base_offset=5))
    put(raw, "records_count", declared)
    batch = RecordBatch(bytes(resign(raw)), path=PATH, position=4096)
    assert batch.is_valid()
    with pytest.raises(CorruptRecordError) as info:
        batch.records()
    assert (info.value.path, info.value.position, info.value.offset) == (PATH, 4096, 5)


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_set_base_offset_and_epoch_keeps_crc_valid(codec: CompressionType) -> None:
    raw = bytearray(build(compression=codec))
    crc_before = field(raw, "crc")
    set_base_offset_and_epoch(raw, 0, 1_000_000, 42)
    batch = RecordBatch(bytes(raw))
    assert batch.is_valid() and batch.crc == crc_before
    assert batch.base_offset == 1_000_000 and batch.partition_leader_epoch == 42
    assert batch.last_offset == 1_000_000 + len(RECORDS) - 1
    assert batch.records() == expected(base_offset=1_000_000)
    assert kafka_python_records(raw) == expected(base_offset=1_000_000)


def test_set_base_offset_and_epoch_in_the_middle_of_a_buffer() -> None:
    first, second = build(RECORDS[:2]), build(RECORDS[2:4])
    buffer = bytearray(first + second)
    set_base_offset_and_epoch(buffer, len(first), 2, 9)
    set_base_offset_and_epoch(memoryview(buffer), 0, 0, 9)
    batches = list(iter_batches(bytes(buffer)))
    assert [(batch.base_offset, batch.partition_leader_epoch) for batch in batches] == [(0, 9), (2, 9)]
    assert all(batch.is_valid() for batch in batches)
    assert [record.offset for batch in batches for record in batch.records()] == [0, 1, 2, 3]


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_set_log_append_time_keeps_crc_valid(codec: CompressionType) -> None:
    prefix = build(RECORDS[:1])
    raw = bytearray(prefix + build(compression=codec, is_transactional=True, producer_id=5, producer_epoch=0))
    append_time = T0 + 60_000
    set_log_append_time(raw, len(prefix), len(raw) - len(prefix), append_time)
    batch = RecordBatch(bytes(raw), len(prefix))
    assert batch.is_valid()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == append_time
    assert batch.compression is codec and batch.is_transactional
    assert [record.timestamp for record in batch.records()] == [append_time] * len(RECORDS)
    assert [record.timestamp for record in kafka_python_records(raw[len(prefix) :])] == [append_time] * len(RECORDS)
    assert RecordBatch(bytes(raw)).is_valid()  # the batch before it is untouched


def test_set_log_append_time_keeps_the_delete_horizon_bit() -> None:
    raw = bytearray(build(delete_horizon_ms=T0 + 1))
    set_log_append_time(raw, 0, len(raw), T0 + 2)
    batch = RecordBatch(bytes(raw))
    assert batch.is_valid() and batch.has_delete_horizon and batch.delete_horizon_ms == T0 + 1


@pytest.mark.parametrize("control_type", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batch_round_trip(control_type: ControlRecordType) -> None:
    raw = build_control_batch(
        control_type,
        timestamp=T0,
        producer_id=4000,
        producer_epoch=3,
        coordinator_epoch=17,
        base_offset=50,
        partition_leader_epoch=2,
    )
    batch = RecordBatch(raw)
    assert batch.is_valid()
    assert batch.attributes == 0x30
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_offset, batch.partition_leader_epoch) == (
        4000,
        3,
        50,
        2,
    )
    assert batch.control_type() is control_type
    [record] = batch.records()
    assert record == Record(50, T0, struct.pack(">hh", 0, int(control_type)), struct.pack(">hi", 0, 17), ())
    [kafka_record] = list(DefaultRecordBatch(bytearray(raw)))
    assert kafka_record.type == int(control_type) and kafka_record.version == 0


@pytest.mark.parametrize("type_id", [2, 3, 4, 5, 6])
def test_control_types_of_kraft(type_id: int) -> None:
    raw = build([(T0, struct.pack(">hh", 0, type_id), b"", [])], is_control=True)
    assert RecordBatch(raw).control_type() == type_id


def test_unknown_control_type_reads_unknown() -> None:
    raw = build([(T0, struct.pack(">hh", 0, 99), b"", [])], is_control=True)
    assert RecordBatch(raw).control_type() is ControlRecordType.UNKNOWN


@pytest.mark.parametrize(
    "rows",
    [
        [(T0, b"\x00\x00", b"", [])],  # key shorter than version + type
        [(T0, None, b"", [])],
        [(T0, struct.pack(">hh", 0, 1), b"", []), (T0, struct.pack(">hh", 0, 1), b"", [])],
        [],
    ],
)
def test_malformed_control_batch(rows: list[tuple[int, bytes | None, bytes | None, Headers]]) -> None:
    with pytest.raises(CorruptRecordError):
        RecordBatch(build(rows, is_control=True)).control_type()


def test_control_type_of_a_data_batch() -> None:
    with pytest.raises(InvalidRecordError):
        RecordBatch(build()).control_type()


@pytest.mark.parametrize(
    ("base_sequence", "records", "last_sequence"),
    [
        (INT32_MAX - 2, 5, 1),
        (INT32_MAX, 2, 0),
        (INT32_MAX, 1, INT32_MAX),
        (0, 1, 0),
        (10, 3, 12),
        (-1, 3, -1),
    ],
)
def test_last_sequence_wraps_at_int32_max(base_sequence: int, records: int, last_sequence: int) -> None:
    rows = [(T0, None, b"v", [])] * records
    raw = build(rows, producer_id=1, producer_epoch=0, base_sequence=base_sequence)
    assert RecordBatch(raw).last_sequence == last_sequence
    assert DefaultRecordBatch(bytearray(raw)).last_sequence == last_sequence


# --- iter_batches -------------------------------------------------------------------------------------


def three_batches() -> tuple[bytes, list[bytes]]:
    batches = [
        build(RECORDS[:2], base_offset=0),
        build(RECORDS[2:5], base_offset=2, compression=CompressionType.GZIP),
        build(RECORDS[5:], base_offset=5, compression=CompressionType.LZ4),
    ]
    return b"".join(batches), batches


def test_iter_batches_walks_consecutive_batches() -> None:
    buffer, batches = three_batches()
    found = list(iter_batches(buffer, path=PATH, base_position=1000))
    assert [bytes(batch.raw()) for batch in found] == batches
    assert [batch.position for batch in found] == [
        1000,
        1000 + len(batches[0]),
        1000 + len(batches[0]) + len(batches[1]),
    ]
    assert all(batch.path == PATH for batch in found)
    assert [record for batch in found for record in batch.records()] == expected()


def test_iter_batches_stops_at_a_partial_tail_at_every_byte_position() -> None:
    buffer, batches = three_batches()
    ends = [sum(len(batch) for batch in batches[: count + 1]) for count in range(len(batches))]
    for cut in range(len(buffer) + 1):
        complete = sum(1 for end in ends if end <= cut)
        assert [bytes(batch.raw()) for batch in iter_batches(buffer[:cut])] == batches[:complete]
        assert [bytes(batch.raw()) for batch in iter_batches(memoryview(buffer)[:cut])] == batches[:complete]


@pytest.mark.parametrize("length", [-(2**31), -1, 0, 13])
def test_iter_batches_rejects_a_too_small_length_field(length: int) -> None:
    buffer, batches = three_batches()
    damaged = bytearray(buffer)
    struct.pack_into(">i", damaged, len(batches[0]) + 8, length)
    found = iter_batches(bytes(damaged), path=PATH, base_position=500)
    assert bytes(next(found).raw()) == batches[0]
    with pytest.raises(CorruptRecordError) as info:
        next(found)
    assert info.value.position == 500 + len(batches[0]) and info.value.path == PATH


@pytest.mark.parametrize("length", [14, 20, 48])
def test_iter_batches_rejects_a_length_field_below_the_v2_header(length: int) -> None:
    damaged = bytearray(build()[:61] + bytes(100))
    struct.pack_into(">i", damaged, 8, length)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(damaged)))


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_other_magic_is_corrupt(magic: int) -> None:
    raw = bytearray(build())
    raw[16] = magic & 0xFF
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(raw)))
    with pytest.raises(CorruptRecordError):
        RecordBatch(bytes(raw))


@pytest.mark.parametrize("size", [0, 1, 17, 60])
def test_record_batch_shorter_than_its_header(size: int) -> None:
    with pytest.raises(CorruptRecordError):
        RecordBatch(build()[:size])


def test_record_batch_longer_than_its_buffer() -> None:
    raw = build()
    with pytest.raises(CorruptRecordError) as info:
        RecordBatch(raw[:-1], path=PATH, position=123)
    assert info.value.path == PATH and info.value.position == 123


@pytest.mark.parametrize("length", [2**31 - 1, 2**31 - 13, 2**30])
def test_a_batch_claiming_2_gib_is_refused_without_allocating(length: int) -> None:
    raw = bytearray(build())
    put(raw, "length", length)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            RecordBatch(bytes(raw))
        assert list(iter_batches(bytes(raw))) == []
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 1 << 20


# --- interop with kafka-python -------------------------------------------------------------------------


@pytest.mark.parametrize("transactional", [False, True])
def test_uncompressed_bytes_identical_to_kafka_python(transactional: bool) -> None:
    producer = {"producer_id": 123_456, "producer_epoch": 7, "base_sequence": 99}
    ours = build(partition_leader_epoch=0, is_transactional=transactional, **producer)
    theirs = kafka_python_build(CompressionType.NONE, transactional=transactional, **producer)
    assert ours == theirs


def test_uncompressed_bytes_identical_to_kafka_python_with_offset_gaps() -> None:
    offsets = [0, 1, 4, 5, 9, 30]
    assert build(offset_deltas=offsets, partition_leader_epoch=0) == kafka_python_build(
        CompressionType.NONE, offsets=offsets
    )


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_we_decode_kafka_python_batches(codec: CompressionType) -> None:
    raw = kafka_python_build(codec, producer_id=77, producer_epoch=1, base_sequence=5, transactional=True)
    batch = RecordBatch(raw)
    assert batch.compression is codec
    assert batch.is_valid()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (77, 1, 5, True)
    assert (batch.base_timestamp, batch.max_timestamp, batch.last_offset_delta) == (T0, T0 + 9, len(RECORDS) - 1)
    assert batch.records() == expected()


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_kafka_python_decodes_our_batches(codec: CompressionType) -> None:
    raw = build(compression=codec, producer_id=77, producer_epoch=1, base_sequence=5, is_transactional=True)
    theirs = DefaultRecordBatch(bytearray(raw))
    assert theirs.compression_type == int(codec)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence, theirs.is_transactional) == (
        77,
        1,
        5,
        True,
    )
    assert kafka_python_records(raw) == expected()


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_memory_records_both_ways(codec: CompressionType) -> None:
    builder = MemoryRecordsBuilder(magic=2, compression_type=int(codec), batch_size=1 << 24, offset=0)
    for timestamp, key, value, headers in RECORDS:
        builder.append(timestamp, key, value, headers)
    builder.close()
    theirs = bytes(builder.buffer())
    [batch] = list(iter_batches(theirs))
    assert batch.records() == expected()

    ours = build(RECORDS[:3], compression=codec) + build(RECORDS[3:], compression=codec, base_offset=3)
    memory_records = MemoryRecords(ours)
    decoded = []
    while memory_records.has_next():
        kafka_batch = memory_records.next_batch()
        assert kafka_batch.validate_crc()
        decoded += [
            Record(record.offset, record.timestamp, record.key, record.value, tuple(record.headers))
            for record in kafka_batch
        ]
    assert decoded == expected()


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_compressed_interop_really_compresses(codec: CompressionType) -> None:
    # kafka-python silently falls back to no compression when it does not pay; make sure it did not here.
    assert field(kafka_python_build(codec), "attributes") & 0x07 == int(codec)
    if codec != CompressionType.NONE:
        assert len(build(compression=codec)) < len(build())


def test_real_kafka_logs_decode_like_kafka_python(kafka_samples_dir: Path) -> None:
    files = sorted(kafka_samples_dir.rglob("*.log"))
    assert files
    batches_seen = 0
    for path in files:
        data = path.read_bytes()
        ours = list(iter_batches(data, path=str(path)))
        theirs = MemoryRecords(data)
        for batch in ours:
            assert theirs.has_next()
            kafka_batch = theirs.next_batch()
            batch.ensure_valid()
            assert (batch.base_offset, batch.last_offset, batch.crc) == (
                kafka_batch.base_offset,
                kafka_batch.last_offset,
                kafka_batch.crc,
            )
            assert batch.records() == [
                Record(record.offset, record.timestamp, record.key, record.value, tuple(record.headers))
                for record in kafka_batch
            ]
            if batch.is_control:
                assert batch.control_type() is not ControlRecordType.UNKNOWN
            batches_seen += 1
        assert not theirs.has_next()
        assert sum(batch.size_in_bytes for batch in ours) == len(data)
    assert batches_seen > 1000


# --- fuzzing: only typed errors escape -------------------------------------------------------------------


def exercise(buffer: bytes) -> None:
    """Everything a reader does with untrusted bytes; only StorageError subclasses may come out."""
    try:
        for batch in iter_batches(buffer):
            repr(batch)
            batch.is_valid()
            _ = batch.last_sequence, batch.first_timestamp, batch.delete_horizon_ms
            try:
                batch.records()
                if batch.is_control:
                    batch.control_type()
            except StorageError:
                pass
    except StorageError:
        pass
    try:
        batch = RecordBatch(buffer)
        _ = batch.compression
        batch.records()
    except StorageError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(buffer: bytes) -> None:
    exercise(buffer)


@settings(max_examples=200, deadline=None)
@given(
    attributes=st.integers(0, 0xFF),
    records_count=st.integers(-3, 12),
    payload=st.binary(max_size=300),
    base_sequence=st.integers(INT32_MIN, INT32_MAX),
    last_offset_delta=st.integers(INT32_MIN, INT32_MAX),
)
def test_fuzz_signed_batches_with_arbitrary_records(
    attributes: int, records_count: int, payload: bytes, base_sequence: int, last_offset_delta: int
) -> None:
    raw = encode_batch(
        base_offset=0,
        partition_leader_epoch=0,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=T0,
        max_timestamp=T0,
        producer_id=1,
        producer_epoch=0,
        base_sequence=base_sequence,
        records_count=records_count,
        payload=payload,
    )
    exercise(raw)
    with contextlib.suppress(CorruptRecordError):
        decode_records(payload, records_count, 0, T0, None)


@pytest.fixture(scope="module")
def valid_batches() -> dict[CompressionType, bytes]:
    rows = [(T0 + index, f"k{index}".encode(), b"value" * index, [("h", b"1")]) for index in range(8)]
    return {codec: build(rows, compression=codec) for codec in CODECS}


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    flips=st.lists(st.tuples(st.integers(CRC_START, 10**6), st.integers(1, 255)), min_size=1, max_size=6),
    control=st.booleans(),
)
def test_fuzz_mutated_valid_batches(
    valid_batches: dict[CompressionType, bytes],
    codec: CompressionType,
    flips: list[tuple[int, int]],
    control: bool,
) -> None:
    raw = bytearray(valid_batches[codec])
    for position, mask in flips:
        raw[CRC_START + (position - CRC_START) % (len(raw) - CRC_START)] ^= mask
    if control:
        raw[22] |= 0x20
    exercise(bytes(resign(raw)))


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from([codec for codec in CODECS if codec != CompressionType.NONE]),
    records=st.binary(max_size=400),
    records_count=st.integers(0, 5),
)
def test_fuzz_compressed_garbage_records(codec: CompressionType, records: bytes, records_count: int) -> None:
    raw = encode_batch(
        base_offset=0,
        partition_leader_epoch=0,
        attributes=int(codec),
        last_offset_delta=0,
        base_timestamp=T0,
        max_timestamp=T0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=records_count,
        payload=compress(codec, records),
    )
    exercise(raw)
