"""`storage.records.consumer_offsets`: Kafka's OffsetCommit records, checked against logs a real Kafka broker
wrote, and the group -> partition rule."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.errors import CorruptRecordError
from storage.records.consumer_offsets import (
    apply_offset_commit,
    decode_offset_commit_key,
    decode_offset_commit_offset,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hashcode,
    partition_for_group,
)
from storage.records.record import Record
from storage.records.record_batch import iter_batches

# Kafka's default `offsets.topic.num.partitions`, which every sample broker used.
KAFKA_OFFSETS_PARTITIONS = 50


def kafka_offset_records(samples: Path) -> Iterator[tuple[int, Record]]:
    """(partition, record) of every record in every `__consumer_offsets` segment of the real Kafka samples."""
    for log in sorted(samples.glob("*/*/__consumer_offsets-*/*.log")):
        partition = int(re.fullmatch(r"__consumer_offsets-(\d+)", log.parent.name).group(1))  # type: ignore[union-attr]
        for batch in iter_batches(log.read_bytes()):
            for record in batch.records():
                yield partition, record


def version(data: bytes) -> int:
    return struct.unpack_from(">h", data)[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),  # the classic string whose Java hash is Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
    ],
)
def test_java_string_hashcode_matches_java(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_a_group_whose_hash_is_min_int_goes_to_partition_zero() -> None:
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0, where Math.abs would stay negative.
    assert partition_for_group("polygenelubricants", 7) == 0


def test_every_commit_a_kafka_broker_wrote_sits_on_the_partition_its_group_hashes_to(kafka_samples_dir: Path) -> None:
    checked = 0
    for partition, record in kafka_offset_records(kafka_samples_dir):
        assert record.key is not None
        if version(record.key) not in (0, 1):
            continue
        decoded = decode_offset_commit_key(record.key)
        assert decoded is not None
        group, topic, topic_partition = decoded
        assert partition_for_group(group, KAFKA_OFFSETS_PARTITIONS) == partition
        if version(record.key) == 1:
            assert encode_offset_commit_key(group, topic, topic_partition) == record.key
        checked += 1
    assert checked > 9_000


def test_group_metadata_keys_are_byte_identical_to_kafkas(kafka_samples_dir: Path) -> None:
    checked = 0
    for _, record in kafka_offset_records(kafka_samples_dir):
        assert record.key is not None
        if version(record.key) != 2:
            continue
        (length,) = struct.unpack_from(">h", record.key, 2)
        assert encode_group_metadata_key(record.key[4 : 4 + length].decode()) == record.key
        checked += 1
    assert checked > 0


def test_version_3_values_are_byte_identical_to_kafkas(kafka_samples_dir: Path) -> None:
    checked = 0
    for _, record in kafka_offset_records(kafka_samples_dir):
        assert record.key is not None
        if version(record.key) != 1 or record.value is None or version(record.value) != 3:
            continue
        _, offset, leader_epoch, metadata_length = struct.unpack_from(">hqih", record.value)
        metadata = record.value[16 : 16 + metadata_length].decode()
        (commit_timestamp,) = struct.unpack_from(">q", record.value, 16 + metadata_length)
        assert decode_offset_commit_offset(record.value) == offset
        if leader_epoch == -1:
            assert encode_offset_commit_value(offset, metadata, commit_timestamp) == record.value
            checked += 1
    assert checked > 100


def test_replaying_a_kafka_partition_keeps_the_latest_offset_per_key_and_honours_tombstones(
    kafka_samples_dir: Path,
) -> None:
    # Segment 0 holds 858 commits of one group; segment 862 holds tombstones for all 6 of its keys (the group
    # was deleted) and group-metadata records. The cache is checked after each segment.
    folder = kafka_samples_dir / "NikhilDighe9975__kafka_setup@8639fa41" / "kafka-logs" / "__consumer_offsets-12"
    latest: dict[bytes, bytes | None] = {}
    replayed: dict[Any, int] = {}
    sizes = []
    for log in sorted(folder.glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            for record in batch.records():
                assert record.key is not None
                if version(record.key) in (0, 1):
                    latest[record.key] = record.value
                apply_offset_commit(replayed, record.key, record.value)
        expected = {
            decode_offset_commit_key(key): struct.unpack_from(">q", value, 2)[0]
            for key, value in latest.items()
            if value is not None
        }
        assert replayed == expected
        sizes.append(len(replayed))
    assert sizes == [6, 0]


def test_a_tombstone_removes_a_commit_and_other_record_kinds_change_nothing() -> None:
    offsets: dict[Any, int] = {}
    key = encode_offset_commit_key("g", "t", 3)
    apply_offset_commit(offsets, key, encode_offset_commit_value(42, "", 0))
    apply_offset_commit(offsets, struct.pack(">hh", 2, 1) + b"g", b"group metadata")
    apply_offset_commit(offsets, None, b"no key")
    assert offsets == {("g", "t", 3): 42}
    apply_offset_commit(offsets, key, None)
    assert offsets == {}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\x00", None),  # shorter than the version
        (struct.pack(">hh", 1, 10) + b"short", None),  # group length runs past the end
        (encode_offset_commit_key("g", "t", 0)[:-2], None),  # partition cut
        (encode_offset_commit_key("g", "t", 0), b"\x00\x03\x00"),  # value cut
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hq", 9, 1)),  # unknown value version
    ],
)
def test_malformed_offset_records_raise_corrupt_record(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        apply_offset_commit({}, key, value)
