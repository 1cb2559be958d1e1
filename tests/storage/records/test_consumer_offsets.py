"""`storage.records.consumer_offsets`: Kafka's OffsetCommit records, checked against logs a real Kafka broker
wrote (value v2 and v3, with leader epochs) and against values Kafka 4.2 wrote (v4, recorded from its segment files by
`tests/cluster/protocol/test_offsets_by_topic_id.py`), the round trip of offset, leader epoch and metadata, and the
group -> partition rule."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.errors import CorruptRecordError
from storage.records.consumer_offsets import (
    NO_LEADER_EPOCH,
    OffsetAndMetadata,
    apply_offset_commit,
    decode_offset_commit_key,
    decode_offset_commit_value,
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
# OffsetCommitValue v4 as Kafka 4.2.2 wrote them to `__consumer_offsets`, read from its segment files: a commit by name
# (OffsetCommit v9: offset 9, leader epoch 9, metadata "by-name-0"), and two by topic id (v10), which end with the
# tagged field 0, the topic id (1e27944e-46ff-41f7-a443-811a19629aae).
KAFKA_4_2_BY_NAME = bytes.fromhex("00040000000000000009000000090a62792d6e616d652d30000001a21cc38d5500")
KAFKA_4_2_BY_ID = bytes.fromhex(
    "00040000000000000007000000071e7b2273747265616d54696d65223a313730303030303030303030307d30000001a21cc38d1c"
    "0100101e27944e46ff41f7a443811a19629aae"
)
KAFKA_4_2_BY_ID_NO_METADATA = bytes.fromhex(
    "0004000000000000000b0000000c01000001a21cc392370100101e27944e46ff41f7a443811a19629aae"
)
TOPIC_ID_TAG = bytes.fromhex("0100101e27944e46ff41f7a443811a19629aae")


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


def v3_fields(value: bytes) -> OffsetAndMetadata:
    """A v3 value's offset, leader epoch and metadata, read with `struct` alone."""
    _, offset, leader_epoch, metadata_length = struct.unpack_from(">hqih", value)
    return OffsetAndMetadata(offset, leader_epoch, value[16 : 16 + metadata_length].decode())


def test_every_value_a_kafka_broker_wrote_decodes_with_its_leader_epoch_and_metadata(kafka_samples_dir: Path) -> None:
    """Kafka 2.5 wrote v2 values (no leader epoch: -1), Kafka 3.x v3 values, 228 of them with a leader epoch."""
    by_version = {2: 0, 3: 0}
    with_epoch = 0
    for _, record in kafka_offset_records(kafka_samples_dir):
        assert record.key is not None
        if version(record.key) not in (0, 1) or record.value is None:
            continue
        committed = decode_offset_commit_value(record.value)
        by_version[version(record.value)] += 1
        if version(record.value) == 3:
            assert committed == v3_fields(record.value)
            with_epoch += committed.leader_epoch != NO_LEADER_EPOCH
        else:
            (metadata_length,) = struct.unpack_from(">h", record.value, 10)
            expected = OffsetAndMetadata(struct.unpack_from(">q", record.value, 2)[0], NO_LEADER_EPOCH, "")
            assert metadata_length == 0 and committed == expected
    assert by_version == {2: 8201, 3: 900} and with_epoch == 228


@pytest.mark.parametrize(
    ("value", "committed", "tagged"),
    [
        (KAFKA_4_2_BY_NAME, OffsetAndMetadata(9, 9, "by-name-0"), b""),
        (KAFKA_4_2_BY_ID, OffsetAndMetadata(7, 7, '{"streamTime":1700000000000}0'), TOPIC_ID_TAG),
        (KAFKA_4_2_BY_ID_NO_METADATA, OffsetAndMetadata(11, 12, ""), TOPIC_ID_TAG),
    ],
)
def test_kafka_4_2_values_decode_and_are_what_raybroker_writes_but_for_the_topic_id(
    value: bytes, committed: OffsetAndMetadata, tagged: bytes
) -> None:
    assert decode_offset_commit_value(value) == committed
    untagged = value.removesuffix(tagged) + (b"\x00" if tagged else b"")
    (commit_timestamp_ms,) = struct.unpack_from(">q", untagged, len(untagged) - 9)
    assert encode_offset_commit_value(committed, commit_timestamp_ms) == untagged


@pytest.mark.parametrize(
    "committed",
    [
        OffsetAndMetadata(0),
        OffsetAndMetadata(2**63 - 1, 2**31 - 1, "m"),
        OffsetAndMetadata(42, 3, '{"streamTime":1700000000000}'),
        OffsetAndMetadata(5, 0, "é" * 4096 + "\U0001f600"),  # 8196 UTF-8 bytes: a 2-byte varint length
        OffsetAndMetadata(5, 7, "x" * 20_000),  # a 3-byte varint length
    ],
)
def test_a_value_reads_back_as_written(committed: OffsetAndMetadata) -> None:
    value = encode_offset_commit_value(committed, 1_700_000_000_000)
    assert version(value) == 4
    assert decode_offset_commit_value(value) == committed
    assert value.endswith(struct.pack(">q", 1_700_000_000_000) + b"\x00")


@pytest.mark.parametrize(
    ("value", "committed"),
    [
        (struct.pack(">hqh", 0, 8, 2) + b"m0" + struct.pack(">q", 1), OffsetAndMetadata(8, NO_LEADER_EPOCH, "m0")),
        (struct.pack(">hqh", 1, 8, 2) + b"m1" + struct.pack(">qq", 1, 2), OffsetAndMetadata(8, NO_LEADER_EPOCH, "m1")),
        (struct.pack(">hqh", 2, 8, 0) + struct.pack(">q", 1), OffsetAndMetadata(8)),
        (struct.pack(">hqih", 3, 8, 4, 2) + b"m3" + struct.pack(">q", 1), OffsetAndMetadata(8, 4, "m3")),
    ],
)
def test_older_value_versions_read_back(value: bytes, committed: OffsetAndMetadata) -> None:
    assert decode_offset_commit_value(value) == committed


def test_replaying_a_kafka_partition_keeps_the_latest_offset_per_key_and_honours_tombstones(
    kafka_samples_dir: Path,
) -> None:
    # Segment 0 holds 858 commits of one group; segment 862 holds tombstones for all 6 of its keys (the group
    # was deleted) and group-metadata records. The cache is checked after each segment.
    folder = kafka_samples_dir / "NikhilDighe9975__kafka_setup@8639fa41" / "kafka-logs" / "__consumer_offsets-12"
    latest: dict[bytes, bytes | None] = {}
    replayed: dict[Any, OffsetAndMetadata] = {}
    sizes = []
    for log in sorted(folder.glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            for record in batch.records():
                assert record.key is not None
                if version(record.key) in (0, 1):
                    latest[record.key] = record.value
                apply_offset_commit(replayed, record.key, record.value)
        expected = {
            decode_offset_commit_key(key): v3_fields(value) for key, value in latest.items() if value is not None
        }
        assert replayed == expected
        sizes.append(len(replayed))
    assert sizes == [6, 0]


def test_a_tombstone_removes_a_commit_and_other_record_kinds_change_nothing() -> None:
    offsets: dict[Any, OffsetAndMetadata] = {}
    key = encode_offset_commit_key("g", "t", 3)
    apply_offset_commit(offsets, key, encode_offset_commit_value(OffsetAndMetadata(42, 1, "m"), 0))
    apply_offset_commit(offsets, struct.pack(">hh", 2, 1) + b"g", b"group metadata")
    apply_offset_commit(offsets, None, b"no key")
    assert offsets == {("g", "t", 3): OffsetAndMetadata(42, 1, "m")}
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
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hqi", 4, 1, 0)),  # v4 cut before the metadata
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hqi", 4, 1, 0) + b"\x80\x80"),  # varint cut
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hqi", 4, 1, 0) + b"\xff" * 6),  # varint too long
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hqi", 4, 1, 0) + b"\x05ab"),  # metadata cut
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hqi", 4, 1, 0) + b"\x00"),  # length -1 (null)
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hqh", 2, 1, 3) + b"ab"),  # v2 metadata cut
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hqih", 3, 1, 0, 1) + b"\xff"),  # not UTF-8
    ],
)
def test_malformed_offset_records_raise_corrupt_record(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        apply_offset_commit({}, key, value)
