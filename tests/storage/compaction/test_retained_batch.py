"""build_retained_batch against Kafka's builder: the batch keeping some records must be, byte for byte, what
`RecordBatchBuilder` writes for those records (base offset, producer fields, codec and the source's last offset
delta kept; timestamps taken from the first kept record or the delete horizon), whichever path builds it."""

from __future__ import annotations

import random
import struct

import crc32c
import numpy as np
import pytest
from kafka.record.memory_records import MemoryRecords

from storage.compaction.retained_batch import build_retained_batch
from storage.records.compression import CompressionType
from storage.records.layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    TimestampType,
    encode_batch,
)
from storage.records.record_batch import (
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    encode_attributes,
    set_log_append_time,
)
from storage.records.varint import encode_varint

NOW_MS = 1_700_000_000_000


def builder_oracle(batch: RecordBatch, keep: list[bool], delete_horizon_ms: int | None) -> bytes:
    """The kept records appended to a builder one by one, then the source's last offset delta put back."""
    builder = RecordBatchBuilder(
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        base_offset=batch.base_offset,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        partition_leader_epoch=batch.partition_leader_epoch,
        delete_horizon_ms=delete_horizon_ms,
    )
    for record, kept in zip(batch.records(), keep, strict=True):
        if kept:
            builder.append(
                record.key,
                record.value,
                timestamp=record.timestamp,
                headers=record.headers,
                offset_delta=record.offset - batch.base_offset,
            )
    out = bytearray(builder.build())
    struct.pack_into(">i", out, LAST_OFFSET_DELTA_OFFSET, batch.last_offset_delta)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def assert_same_as_builder(batch: RecordBatch, keep: list[bool], delete_horizon_ms: int | None) -> bytes:
    built = build_retained_batch(batch, np.array(keep, dtype=bool), delete_horizon_ms)
    assert built == builder_oracle(batch, keep, delete_horizon_ms)
    kafka_batch = MemoryRecords(built).next_batch()
    assert kafka_batch is not None and kafka_batch.validate_crc()
    return built


def random_batch(rng: random.Random, *, headers: bool) -> RecordBatch:
    codec = rng.choice(list(CompressionType))
    horizon = rng.choice([None, NOW_MS + 5000])
    builder = RecordBatchBuilder(
        compression=codec,
        base_offset=rng.randrange(10**9),
        producer_id=rng.choice([-1, 7]),
        producer_epoch=rng.choice([-1, 2]),
        base_sequence=rng.choice([-1, 100]),
        partition_leader_epoch=rng.choice([-1, 5]),
        delete_horizon_ms=horizon,
    )
    timestamp = NOW_MS
    offset_delta = -1
    for _ in range(rng.randint(1, 300)):
        # Timestamp steps of up to ~20 minutes move deltas across varint widths; offset gaps are a cleaned
        # batch's; timestamps may go back (CreateTime is the producer's).
        timestamp += rng.choice([0, 0, 1, 70, 9000, -3, 1_200_000])
        offset_delta += rng.choice([1, 1, 1, 2, 100])
        record_headers = [("h", rng.choice([None, b"x" * rng.randrange(3)]))] if headers and rng.random() < 0.3 else []
        builder.append(
            None if rng.random() < 0.05 else b"key-%d" % rng.randrange(10 ** rng.randint(1, 8)),
            None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 5, 100, 200])),
            timestamp=timestamp,
            headers=record_headers,
            offset_delta=offset_delta,
        )
    data = bytearray(builder.build())
    if rng.random() < 0.25:
        set_log_append_time(data, 0, len(data), NOW_MS + 77)
    return RecordBatch(bytes(data))


@pytest.mark.parametrize("seed", range(40))
def test_retained_records_are_the_builders_bytes(seed: int) -> None:
    rng = random.Random(seed)
    batch = random_batch(rng, headers=seed % 4 == 0)
    keep = [rng.random() < rng.choice([0.1, 0.5, 0.95]) for _ in range(batch.records_count)]
    keep[rng.randrange(len(keep))] = True
    horizon = batch.delete_horizon_ms if batch.has_delete_horizon else rng.choice([None, NOW_MS + 86_400_000])
    built = RecordBatch(assert_same_as_builder(batch, keep, horizon))
    assert (built.base_offset, built.last_offset, built.records_count) == (
        batch.base_offset,
        batch.last_offset,
        sum(keep),
    )
    assert [record.offset for record in built.records()] == [
        record.offset for record, kept in zip(batch.records(), keep, strict=True) if kept
    ]


def test_dropping_the_first_record_moves_the_base_timestamp_and_rewrites_every_delta() -> None:
    builder = RecordBatchBuilder()
    for index in range(100):
        builder.append(b"k%d" % index, b"v", timestamp=NOW_MS + index * 1000)
    batch = RecordBatch(builder.build())
    built = RecordBatch(assert_same_as_builder(batch, [index >= 10 for index in range(100)], None))
    assert built.base_timestamp == NOW_MS + 10_000
    assert [record.timestamp for record in built.records()] == [NOW_MS + index * 1000 for index in range(10, 100)]


def test_marker_kept_whole_with_a_new_delete_horizon() -> None:
    marker = RecordBatch(
        build_control_batch(ControlRecordType.COMMIT, timestamp=NOW_MS, producer_id=9, producer_epoch=1, base_offset=40)
    )
    built = RecordBatch(assert_same_as_builder(marker, [True], NOW_MS + 1000))
    assert (built.is_control, built.delete_horizon_ms, built.records_count) == (True, NOW_MS + 1000, 1)


def _record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    "odd_record",
    [
        # offsetDelta 1 as a two-byte varint (0x82 0x00), a producer Kafka's reader accepts
        b"\x00\x00\x82\x00\x02k\x02v\x00",
        # record attributes 5 (Kafka ignores them and writes 0)
        b"\x05\x00\x02\x02k\x02v\x00",
        # keyLength 1 as two bytes
        b"\x00\x00\x02\x82\x00k\x02v\x00",
    ],
    ids=["long-offset-delta", "record-attributes", "long-key-length"],
)
def test_records_not_in_the_builders_encoding_are_encoded_again(odd_record: bytes) -> None:
    section = _record(b"\x00\x00\x00\x02a\x02v\x00") + _record(odd_record) + _record(b"\x00\x02\x04\x02b\x02v\x00")
    attributes = encode_attributes(
        CompressionType.NONE,
        TimestampType.CREATE_TIME,
        is_transactional=False,
        is_control=False,
        has_delete_horizon=False,
    )
    batch = RecordBatch(
        encode_batch(
            base_offset=0,
            partition_leader_epoch=0,
            attributes=attributes,
            last_offset_delta=2,
            base_timestamp=NOW_MS,
            max_timestamp=NOW_MS + 1,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            records_count=3,
            payload=section,
        )
    )
    assert_same_as_builder(batch, [False, True, True], None)
    assert_same_as_builder(batch, [True, True, False], None)
