"""The durable share-partition state (Kafka's `ShareSnapshotValue`): written and read back unchanged, and any other
byte string refused with `CorruptRecordError` only (truncated, trailing bytes, an unknown version or delivery
state, batches out of order or below the start offset), as Kafka's `maybeInitialize` refuses such state."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.core.shares.share_partition_state import ShareGroupState, StateBatch
from storage.errors import CorruptRecordError

STATE = ShareGroupState(3, 10, (StateBatch(10, 14, 0, 2), StateBatch(15, 15, 2, 1), StateBatch(20, 29, 4, 5)))


def test_a_state_reads_back_as_written() -> None:
    assert ShareGroupState.from_bytes(STATE.to_bytes()) == STATE
    assert ShareGroupState.from_bytes(ShareGroupState().to_bytes()) == ShareGroupState()
    assert not ShareGroupState().initialized and STATE.initialized


def test_the_bytes_follow_the_documented_layout() -> None:
    """Big-endian as Kafka's messages: version, state epoch, start offset, batch count, then 19 bytes a batch."""
    data = ShareGroupState(3, 10, (StateBatch(10, 14, 0, 2),)).to_bytes()
    assert data == struct.pack(">hiqi", 0, 3, 10, 1) + struct.pack(">qqbh", 10, 14, 0, 2)


@pytest.mark.parametrize(
    "data",
    [
        STATE.to_bytes()[:-1],
        STATE.to_bytes() + b"\0",
        b"\0\1" + STATE.to_bytes()[2:],
        b"",
        struct.pack(">hiqi", 0, 0, 10, -1),
        struct.pack(">hiqi", 0, 0, 10, 1) + struct.pack(">qqbh", 10, 14, 1, 1),
        struct.pack(">hiqi", 0, 0, 10, 1) + struct.pack(">qqbh", 5, 14, 0, 1),
        struct.pack(">hiqi", 0, 0, 10, 2) + struct.pack(">qqbh", 10, 14, 0, 1) + struct.pack(">qqbh", 12, 20, 0, 1),
        struct.pack(">hiqi", 0, 0, 10, 1) + struct.pack(">qqbh", 14, 10, 0, 1),
        struct.pack(">hiqi", 0, 0, -1, 1) + struct.pack(">qqbh", 0, 1, 0, 1),
        struct.pack(">hiqi", 0, 0, 10, 1) + struct.pack(">qqbh", 10, 14, 0, -1),
    ],
    ids=[
        "truncated",
        "trailing",
        "version",
        "empty",
        "negative-count",
        "acquired-state",
        "below-start",
        "overlapping",
        "reversed",
        "uninitialized-with-batches",
        "negative-count-of-deliveries",
    ],
)
def test_damaged_state_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        ShareGroupState.from_bytes(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_read_as_a_state_or_corrupt(data: bytes) -> None:
    """An untrusted decoder raises one error type, never `struct.error` or `ValueError`."""
    try:
        state = ShareGroupState.from_bytes(data)
    except CorruptRecordError:
        return
    assert state.to_bytes() == data
