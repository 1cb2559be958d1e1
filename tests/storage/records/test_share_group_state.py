"""The records of `__share_group_state` (Kafka's ShareSnapshot key and value): bytes pinned from Kafka 4.2.2's own
serializer (`ShareCoordinatorRecordSerde`), written and read back unchanged, and any other byte string refused with
`CorruptRecordError` only (truncated, trailing bytes, an unknown version or delivery state, batches out of order or
below the start offset), as Kafka's `maybeInitialize` refuses such state."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError
from storage.records.share_group_state import (
    ShareGroupState,
    SharePartitionKey,
    ShareSnapshot,
    StateBatch,
)

STATE = ShareGroupState(3, 10, (StateBatch(10, 14, 0, 2), StateBatch(15, 15, 2, 1), StateBatch(20, 29, 4, 5)))
TOPIC_ID = uuid.UUID(bytes=bytes(range(1, 17)))
# Kafka 4.2.2's ShareCoordinatorRecordSerde for ShareSnapshotKey("g1", topic id 0102..10, 3) and ShareSnapshotValue
# (snapshot epoch 1, state epoch 2, leader epoch 5, start offset 10, DeliveryCompleteCount 1, created 1000, written
# 2000, batches 10-14 Available x2 and 15 Acknowledged x1).
KAFKA_KEY = bytes.fromhex("0000000267310102030405060708090a0b0c0d0e0f1000000003")
KAFKA_VALUE = bytes.fromhex(
    "0000000000010000000200000005000000000000000a00000000000003e800000000000007d003000000000000000a000000000000000e"
    "00000200000000000000000f000000000000000f0200010001000400000001"
)
_HEAD = struct.Struct(">hiiiqqq")


def _value(start_offset: int, *batches: tuple[int, int, int, int], tags: bytes = b"\0") -> bytes:
    body = b"".join(struct.pack(">qqbh", *b) + b"\0" for b in batches)
    return _HEAD.pack(0, 0, 0, -1, start_offset, 0, 0) + bytes([len(batches) + 1]) + body + tags


def test_the_bytes_are_kafkas() -> None:
    key = SharePartitionKey("g1", TOPIC_ID, 3)
    snapshot = ShareSnapshot(
        ShareGroupState(2, 10, (StateBatch(10, 14, 0, 2), StateBatch(15, 15, 2, 1))), 1, 5, 1000, 2000
    )
    assert key.to_bytes() == KAFKA_KEY
    assert snapshot.to_bytes() == KAFKA_VALUE
    assert SharePartitionKey.from_bytes(KAFKA_KEY) == key
    assert ShareSnapshot.from_bytes(KAFKA_VALUE) == snapshot


def test_a_state_reads_back_as_written() -> None:
    for state in (STATE, ShareGroupState()):
        snapshot = ShareSnapshot(state, leader_epoch=7, write_timestamp_ms=5)
        assert ShareSnapshot.from_bytes(snapshot.to_bytes()) == snapshot
    assert not ShareGroupState().initialized and STATE.initialized
    assert STATE.delivery_complete_count == 11


def test_a_share_update_key_is_skipped_and_unknown_tags_are_read_past() -> None:
    assert SharePartitionKey.from_bytes(b"\0\1" + KAFKA_KEY[2:]) is None
    tagged = _value(10, (10, 14, 0, 1), tags=b"\x01\x07\x02ab")
    assert ShareSnapshot.from_bytes(tagged).state == ShareGroupState(0, 10, (StateBatch(10, 14, 0, 1),))


def test_the_partition_is_kafkas_coordinator_key_hash() -> None:
    """`abs(hash("<group>:<topic id text>:<partition>")) % partitions`; every partition is reachable."""
    assert SharePartitionKey("g1", TOPIC_ID, 3).state_partition(1) == 0
    found = {SharePartitionKey(f"g{i}", TOPIC_ID, 0).state_partition(50) for i in range(500)}
    assert found == set(range(50))


@pytest.mark.parametrize(
    "data",
    [
        KAFKA_VALUE[:-1],
        KAFKA_VALUE + b"\0",
        b"\0\1" + KAFKA_VALUE[2:],
        b"",
        _HEAD.pack(0, 0, 0, -1, 10, 0, 0) + b"\0\0",
        _value(10, (10, 14, 1, 1)),
        _value(10, (5, 14, 0, 1)),
        _value(10, (10, 14, 0, 1), (12, 20, 0, 1)),
        _value(10, (14, 10, 0, 1)),
        _value(-1, (0, 1, 0, 1)),
        _value(10, (10, 14, 0, -1)),
        _value(10, tags=b"\x01\x00\x09\0"),
    ],
    ids=[
        "truncated",
        "trailing",
        "version",
        "empty",
        "null-batches",
        "acquired-state",
        "below-start",
        "overlapping",
        "reversed",
        "uninitialized-with-batches",
        "negative-count-of-deliveries",
        "tag-past-the-end",
    ],
)
def test_damaged_value_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        ShareSnapshot.from_bytes(data)


@pytest.mark.parametrize("data", [b"", b"\0\0\0\5g1", KAFKA_KEY[:-1], KAFKA_KEY + b"\0", b"\0\0\xff\xff" + bytes(20)])
def test_damaged_key_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        SharePartitionKey.from_bytes(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_read_as_a_value_or_corrupt(data: bytes) -> None:
    """An untrusted decoder raises one error type, never `struct.error` or `ValueError`."""
    try:
        snapshot = ShareSnapshot.from_bytes(data)
    except CorruptRecordError:
        return
    assert ShareSnapshot.from_bytes(snapshot.to_bytes()) == snapshot
