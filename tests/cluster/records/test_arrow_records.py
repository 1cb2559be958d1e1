"""`cluster.records.arrow_records`: Kafka fetch bytes -> Arrow, checked against kafka-python's reader (an independent
decoder) on batches built by kafka-python's and by our own producer code. No Ray, no Spark."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from cluster.records.arrow_records import Fetched, decode_fetch, decode_fetches, kafka_arrow_schema
from storage.errors import CorruptRecordError
from storage.records.compression import CompressionType
from storage.records.record_batch import (
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    encode_batch,
    set_base_offset_and_epoch,
)
from storage.records.record_columns import PYTHON_WALK_SECTIONS
from tests.storage.builders import START_MS, Rec, kafka_batch, kafka_decode

TOPIC = "events"


def sample(count: int, tag: str = "r") -> list[Rec]:
    """Null keys and values, empty and long values (1-, 2- and 3-byte length varints), headers with a null value."""
    return [
        Rec(
            None if i % 5 == 0 else f"{tag}-key-{i}".encode(),
            None if i % 7 == 3 else (b"" if i % 7 == 4 else f"{tag}{i}".encode() * (1 + (i % 4) * 400 * (i % 3))),
            START_MS + i * 37,
            (("trace", f"t{i}".encode()), ("nothing", None)) if i % 3 == 0 else (),
        )
        for i in range(count)
    ]


def at(batch: bytes, base_offset: int) -> bytes:
    data = bytearray(batch)
    set_base_offset_and_epoch(data, 0, base_offset, 0)
    return bytes(data)


def decoded_rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    out = []
    for row in batch.to_pylist():
        headers = row.get("headers")
        out.append(
            (
                row["offset"],
                int(row["timestamp"].timestamp() * 1000),
                row["timestampType"],
                row["key"],
                row["value"],
                tuple((h["key"], h["value"]) for h in headers) if headers else (),
            )
        )
    return out


def oracle_rows(data: bytes) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in kafka_decode(data)]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda codec: codec.kafka_name)
def test_every_field_matches_kafka_pythons_reader(codec: CompressionType) -> None:
    data = at(kafka_batch(sample(60), codec), 100) + at(kafka_batch(sample(30, "s"), codec), 160)
    result = decode_fetch(data, TOPIC, 3, 0, 1000, include_headers=True)
    assert result.batch.schema == kafka_arrow_schema(include_headers=True)
    assert decoded_rows(result.batch) == oracle_rows(data)
    assert result.batch.column("topic").to_pylist() == [TOPIC] * 90
    assert result.batch.column("partition").to_pylist() == [3] * 90
    assert result.next_offset == 190


def test_records_outside_the_range_are_dropped_but_the_next_offset_passes_every_batch() -> None:
    data = at(kafka_batch(sample(10)), 0) + at(kafka_batch(sample(10)), 10) + at(kafka_batch(sample(10)), 20)
    result = decode_fetch(data, TOPIC, 0, 5, 23)
    assert result.batch.column("offset").to_pylist() == list(range(5, 23))
    assert result.next_offset == 30
    assert "headers" not in result.batch.schema.names


def test_control_batches_are_skipped_and_log_append_time_replaces_record_timestamps() -> None:
    builder = RecordBatchBuilder(base_offset=4, timestamp_type=TimestampType.LOG_APPEND_TIME)
    builder.append(b"k", b"v", timestamp=START_MS)
    builder.append(b"k", b"w", timestamp=START_MS + 5)
    appended = bytearray(builder.build())
    data = at(kafka_batch(sample(3)), 0) + build_control_batch(ControlRecordType.COMMIT, timestamp=1, base_offset=3)
    data += bytes(appended)
    result = decode_fetch(data, TOPIC, 0, 0, 100)
    rows = decoded_rows(result.batch)
    assert [row[0] for row in rows] == [0, 1, 2, 4, 5]
    assert [row[1:3] for row in rows[3:]] == [(START_MS + 5, 1), (START_MS + 5, 1)]
    assert result.next_offset == 6


def test_offset_gaps_left_by_compaction_come_through_as_gaps() -> None:
    builder = RecordBatchBuilder(base_offset=50)
    for delta in (0, 3, 4, 9):
        builder.append(f"k{delta}".encode(), b"v", timestamp=START_MS + delta, offset_delta=delta)
    result = decode_fetch(builder.build(), TOPIC, 0, 50, 60)
    assert result.batch.column("offset").to_pylist() == [50, 53, 54, 59]
    assert result.next_offset == 60


def test_an_empty_fetch_gives_an_empty_batch_and_no_progress() -> None:
    result = decode_fetch(b"", TOPIC, 0, 7, 10, include_headers=True)
    assert result.batch.num_rows == 0 and result.batch.schema == kafka_arrow_schema(include_headers=True)
    assert result.next_offset == 7


@pytest.mark.parametrize(("magic", "compression"), [(0, 0), (1, 0), (1, 1)], ids=["v0", "v1", "v1-gzip"])
def test_legacy_message_sets_decode_record_by_record(magic: int, compression: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=compression, batch_size=1 << 20)
    for offset in range(4):
        builder.append(offset, timestamp=START_MS + offset, key=f"k{offset}".encode(), value=f"v{offset}".encode())
    data = bytes(builder.build())
    result = decode_fetch(data, TOPIC, 0, 0, 10, include_headers=True)
    # Magic 0 has no timestamps: Spark's Kafka source shows Kafka's -1 (NO_TIMESTAMP) as -1 ms, kafka-python None.
    expected = [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in kafka_decode(data)]
    got = [(row[0], row[1], row[3], row[4]) for row in decoded_rows(result.batch)]
    assert got == expected
    assert result.batch.column("timestampType").to_pylist() == [-1 if magic == 0 else 0] * 4
    assert result.batch.column("headers").to_pylist() == [None] * 4


def test_a_batch_whose_crc_does_not_match_is_corrupt() -> None:
    data = bytearray(kafka_batch(sample(5)))
    data[CRC_OFFSET] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_fetch(bytes(data), TOPIC, 0, 0, 10)


def test_a_batch_claiming_more_records_than_its_bytes_hold_is_corrupt() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"k", b"value", timestamp=START_MS)
    # The bytes of one record under a header that claims two, with a valid CRC.
    forged = encode_batch(
        base_offset=0,
        partition_leader_epoch=0,
        attributes=0,
        last_offset_delta=1,
        base_timestamp=START_MS,
        max_timestamp=START_MS,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=2,
        payload=builder.build()[RECORD_BATCH_OVERHEAD:],
    )
    with pytest.raises(CorruptRecordError):
        decode_fetch(forged, TOPIC, 0, 0, 10)


@pytest.mark.parametrize("seed", range(6))
def test_many_batches_walked_in_lockstep_match_kafka_pythons_reader(seed: int) -> None:
    """More batches than `PYTHON_WALK_SECTIONS` take the lockstep walk: batches of 1 to 90 records whose bodies
    need 1-, 2- and 3-byte length varints, one big batch among small ones, mixed codecs."""
    rng = random.Random(seed)
    data = b""
    offset = 0
    for index in range(rng.randint(PYTHON_WALK_SECTIONS + 1, 40)):
        count = 90 if index == 3 else rng.randint(1, 25)
        records = [
            Rec(
                rng.choice([None, b"k" * rng.randint(0, 20)]),
                rng.choice([None, b"", bytes(rng.randint(1, 100)), bytes(rng.randint(100, 20_000))]),
                START_MS + rng.randint(0, 10_000),
                (("h", b"v"),) if rng.random() < 0.1 else (),
            )
            for _ in range(count)
        ]
        data += at(kafka_batch(records, rng.choice([CompressionType.NONE, CompressionType.LZ4])), offset)
        offset += count
    result = decode_fetch(data, TOPIC, 0, 0, offset, include_headers=True)
    assert decoded_rows(result.batch) == oracle_rows(data)
    assert result.next_offset == offset


def test_a_record_length_that_lies_is_corrupt_in_the_lockstep_walk() -> None:
    batches = [at(kafka_batch(sample(8, f"b{i}")), i * 8) for i in range(PYTHON_WALK_SECTIONS + 4)]
    damaged = bytearray(batches[2])
    # The first record's one-byte length varint now says 63 bytes (zig-zag 0x7e): every later record misparses.
    damaged[RECORD_BATCH_OVERHEAD : RECORD_BATCH_OVERHEAD + 1] = b"\x7e"
    records = bytes(damaged[RECORD_BATCH_OVERHEAD:])
    forged = encode_batch(
        base_offset=16,
        partition_leader_epoch=0,
        attributes=0,
        last_offset_delta=7,
        base_timestamp=START_MS,
        max_timestamp=START_MS,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=8,
        payload=records,
    )
    batches[2] = forged
    with pytest.raises(CorruptRecordError):
        decode_fetch(b"".join(batches), TOPIC, 0, 0, 1000)


def test_fetches_of_several_topics_partitions_and_ranges_decode_as_one_as_kafka_pythons_reader_reads_them() -> None:
    """One decode over fetches of two topics, a legacy fetch, and two fetches of the same bytes for adjacent ranges
    (each keeps only its own range); the oracle is kafka-python's reader, fetch by fetch, cut to each range."""
    first = at(kafka_batch(sample(60)), 100) + at(kafka_batch(sample(30, "s"), CompressionType.LZ4), 160)
    other = b"".join(at(kafka_batch(sample(9, f"o{i}")), 40 + 9 * i) for i in range(PYTHON_WALK_SECTIONS + 2))
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for offset in range(5):
        builder.append(offset, timestamp=START_MS + offset, key=f"k{offset}".encode(), value=f"v{offset}".encode())
    legacy = bytes(builder.build())
    fetches = [
        Fetched(first, TOPIC, 3, 100, 150),
        Fetched(other, "clicks", 0, 45, 1000),
        Fetched(legacy, TOPIC, 1, 1, 4),
        Fetched(first, TOPIC, 3, 150, 175),
    ]
    result = decode_fetches(fetches, include_headers=True)
    assert result.batch.schema == kafka_arrow_schema(include_headers=True)
    expected = sorted(
        (fetch.topic, fetch.partition, *row)
        for fetch in fetches
        for row in oracle_rows(fetch.records)
        if fetch.start_offset <= row[0] < fetch.end_offset
    )
    topics = result.batch.column("topic").to_pylist()
    partitions = result.batch.column("partition").to_pylist()
    got = [
        (topic, partition, *row)
        for topic, partition, row in zip(topics, partitions, decoded_rows(result.batch), strict=True)
    ]
    assert sorted(got) == expected
    assert result.next_offsets == (190, 40 + 9 * (PYTHON_WALK_SECTIONS + 2), 5, 190)
    alone = [decode_fetch(f.records, f.topic, f.partition, f.start_offset, f.end_offset) for f in fetches]
    assert [part.next_offset for part in alone] == list(result.next_offsets)
    assert sum(part.batch.num_rows for part in alone) == result.batch.num_rows


def test_fetches_whose_records_all_lie_outside_their_ranges_decode_to_an_empty_batch() -> None:
    data = at(kafka_batch(sample(10)), 0)
    result = decode_fetches([Fetched(data, TOPIC, 0, 10, 20), Fetched(data, "other", 1, 0, 0)])
    assert result.batch.num_rows == 0 and result.batch.schema == kafka_arrow_schema()
    assert result.next_offsets == (10, 10)


def test_a_corrupt_batch_in_any_fetch_fails_the_decode_of_them_all() -> None:
    damaged = bytearray(kafka_batch(sample(5)))
    damaged[CRC_OFFSET] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_fetches(
            [Fetched(at(kafka_batch(sample(5)), 0), TOPIC, 0, 0, 5), Fetched(bytes(damaged), TOPIC, 1, 0, 5)]
        )
