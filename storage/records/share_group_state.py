"""The records of the internal topic `__share_group_state` (KIP-932): Kafka's ShareSnapshot record, one
share-partition's durable state keyed by (group, topic id, partition), as Kafka 4.2's share coordinator writes it and
reads it back (ReadShareGroupState): the state epoch, the share-partition start offset (SPSO) and the state batches
above it, each an offset range with one delivery state and delivery count.

A share-partition writes it and is rebuilt from it (`SharePartition.state` / `SharePartition(state=...)`), so that
a restart or a leader change never delivers an accepted record again and never loses one not yet accepted:

- every offset below the start offset is done (acknowledged or archived) and is never read again;
- a batch's delivery state is Available (0), Acknowledged (2) or Archived (4): an acquired record is written as
  Available with the delivery count it had before that acquisition, since its consumer's lock does not survive the
  share-partition and Kafka writes no state when it acquires: the interrupted delivery is not counted (so its next
  delivery stays within the delivery count limit), as after a restart of Kafka's;
- offsets between the start offset and the last batch that no batch covers held no record when they were read
  (a compacted range before a fetch's first batch); offsets after the last batch were never read.

Record format (Kafka's coordinator records: the key is the record type then the key message, the value its version
then the value message; big-endian), so Kafka's tools read raybroker's `__share_group_state` and back::

    key:   record type int16 (0: ShareSnapshot) | group_id string (int16 length, UTF-8) | topic_id uuid (16 bytes)
           | partition int32
    value: version int16 (0) | snapshot_epoch int32 | state_epoch int32 | leader_epoch int32 | start_offset int64
           | create_timestamp_ms int64 | write_timestamp_ms int64
           | state_batches compact array (unsigned varint count + 1) of
               [first_offset int64 | last_offset int64 | delivery_state int8 | delivery_count int16 | tagged fields]
           | tagged fields

The value is a flexible message: every state batch and the value end with a tagged-field section (an unsigned varint
count, then per field its tag, its length and its bytes). Kafka 4.2 defines one tag, 0: DeliveryCompleteCount
(int32, the done offsets at or above SPSO), written when it is not -1; raybroker writes it, and skips any tag on
reading. Record type 1 (ShareUpdate, Kafka's per-acknowledgement delta) is never written by raybroker, which writes a
whole snapshot each time; `SharePartitionKey.from_bytes` answers None for it, so a loader skips it.

The records of a share-partition go to partition `abs(java_string_hashcode("<group>:<topic id>:<partition>")) %
partitions` (Kafka's `SharePartitionKey.asCoordinatorKey`, the topic id as Kafka prints it). `from_bytes` raises only
`CorruptRecordError`, for any byte string that is not such a key or value (truncated, trailing bytes, an unknown
version or state, batches out of order or below the start offset).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from storage.errors import CorruptRecordError
from storage.kafka_uuid import uuid_text
from storage.records.consumer_offsets import partition_for_group
from storage.records.varint import encode_unsigned_varint

UNINITIALIZED_START_OFFSET = -1
# Kafka's `RecordState` ids, as written in state batches.
AVAILABLE_ID = 0
ACQUIRED_ID = 1
ACKNOWLEDGED_ID = 2
ARCHIVED_ID = 4
DURABLE_STATE_IDS = (AVAILABLE_ID, ACKNOWLEDGED_ID, ARCHIVED_ID)
DONE_STATE_IDS = (ACKNOWLEDGED_ID, ARCHIVED_ID)

SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_SNAPSHOT_VALUE_VERSION = 0
NO_LEADER_EPOCH = -1
DELIVERY_COMPLETE_COUNT_TAG = 0

_INT16 = struct.Struct(">h")  # the record type, the value's version, a string's length
_INT32 = struct.Struct(">i")  # the tagged DeliveryCompleteCount
_KEY_TAIL = struct.Struct(
    ">"
    "16s"  # topic id
    "i"  # partition
)
_VALUE_HEAD = struct.Struct(
    ">"
    "h"  # version
    "i"  # snapshot epoch
    "i"  # state epoch
    "i"  # leader epoch
    "q"  # start offset
    "q"  # create timestamp ms
    "q"  # write timestamp ms
)
_BATCH = struct.Struct(
    ">"
    "q"  # first offset
    "q"  # last offset
    "b"  # delivery state
    "h"  # delivery count
)
# An unsigned varint of the flexible encoding is at most 5 bytes for an int32.
_UVARINT_MAX_BYTES = 5
_NO_TAGGED_FIELDS = encode_unsigned_varint(0)


@dataclass(frozen=True, slots=True)
class StateBatch:
    """An offset range (inclusive) whose records share one durable delivery state and delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareGroupState:
    """One share-partition's durable state (see the module docstring)."""

    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[StateBatch, ...] = ()

    def __post_init__(self) -> None:
        check_batches(self.start_offset, self.state_batches)

    @property
    def initialized(self) -> bool:
        """Whether the share-partition was initialized (else `share.auto.offset.reset` picks its start offset)."""
        return self.start_offset != UNINITIALIZED_START_OFFSET

    @property
    def delivery_complete_count(self) -> int:
        """The done (acknowledged or archived) offsets at or above the start offset (Kafka 4.2's tagged field)."""
        return sum(b.last_offset - b.first_offset + 1 for b in self.state_batches if b.delivery_state in DONE_STATE_IDS)


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    """A ShareSnapshot record's key: the share group and the topic partition it consumes."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def state_partition(self, partitions: int) -> int:
        """The `__share_group_state` partition holding this share-partition's records (see the module docstring)."""
        return partition_for_group(f"{self.group_id}:{uuid_text(self.topic_id)}:{self.partition}", partitions)

    def to_bytes(self) -> bytes:
        group = self.group_id.encode("utf-8")
        return b"".join(
            (
                _INT16.pack(SHARE_SNAPSHOT_RECORD_TYPE),
                _INT16.pack(len(group)),
                group,
                _KEY_TAIL.pack(self.topic_id.bytes, self.partition),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> SharePartitionKey | None:
        """The key `to_bytes` wrote; None for another record type (a ShareUpdate); `CorruptRecordError` else."""
        try:
            (record_type,) = _INT16.unpack_from(data)
            if record_type != SHARE_SNAPSHOT_RECORD_TYPE:
                return None
            (length,) = _INT16.unpack_from(data, _INT16.size)
            start = 2 * _INT16.size
            if length < 0 or len(data) != start + length + _KEY_TAIL.size:
                raise ValueError(f"group id of {length} bytes does not fit")
            topic_id, partition = _KEY_TAIL.unpack_from(data, start + length)
            return cls(data[start : start + length].decode("utf-8"), uuid.UUID(bytes=topic_id), partition)
        except (struct.error, ValueError) as exc:
            raise CorruptRecordError(f"malformed share snapshot key of {len(data)} bytes: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """A ShareSnapshot record's value: a share-partition's state, with the epochs and times its writer set."""

    state: ShareGroupState
    snapshot_epoch: int = 0
    leader_epoch: int = NO_LEADER_EPOCH
    create_timestamp_ms: int = 0
    write_timestamp_ms: int = 0

    def to_bytes(self) -> bytes:
        state = self.state
        parts = [
            _VALUE_HEAD.pack(
                SHARE_SNAPSHOT_VALUE_VERSION,
                self.snapshot_epoch,
                state.state_epoch,
                self.leader_epoch,
                state.start_offset,
                self.create_timestamp_ms,
                self.write_timestamp_ms,
            ),
            encode_unsigned_varint(len(state.state_batches) + 1),
        ]
        for b in state.state_batches:
            parts.append(_BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count))
            parts.append(_NO_TAGGED_FIELDS)
        count = _INT32.pack(state.delivery_complete_count)
        parts.append(b"\x01" + encode_unsigned_varint(DELIVERY_COMPLETE_COUNT_TAG) + encode_unsigned_varint(len(count)))
        parts.append(count)
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> ShareSnapshot:
        """The value `to_bytes` (or Kafka 4.2) wrote; `CorruptRecordError` for anything else."""
        try:
            version, snapshot_epoch, state_epoch, leader_epoch, start_offset, created_ms, written_ms = (
                _VALUE_HEAD.unpack_from(data)
            )
            if version != SHARE_SNAPSHOT_VALUE_VERSION:
                raise ValueError(f"unknown version {version}")
            count, position = _uvarint(data, _VALUE_HEAD.size)
            if count == 0:
                raise ValueError("null state batches")
            batches = []
            for _ in range(count - 1):
                batches.append(StateBatch(*_BATCH.unpack_from(data, position)))
                position = _skip_tagged_fields(data, position + _BATCH.size)
            if _skip_tagged_fields(data, position) != len(data):
                raise ValueError("trailing bytes")
            state = ShareGroupState(state_epoch, start_offset, tuple(batches))
        except (struct.error, ValueError, IndexError) as exc:
            raise CorruptRecordError(f"malformed share snapshot value of {len(data)} bytes: {exc}") from exc
        return cls(state, snapshot_epoch, leader_epoch, created_ms, written_ms)


def _uvarint(data: bytes, position: int) -> tuple[int, int]:
    """An unsigned varint at `position`, and the position after it; `IndexError`/`ValueError` on bad bytes."""
    value = 0
    for index in range(_UVARINT_MAX_BYTES):
        byte = data[position + index]
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return value, position + index + 1
    raise ValueError("unsigned varint longer than 5 bytes")


def _skip_tagged_fields(data: bytes, position: int) -> int:
    """The position after the tagged-field section at `position` (every tag skipped)."""
    count, position = _uvarint(data, position)
    for _ in range(count):
        _, position = _uvarint(data, position)
        length, position = _uvarint(data, position)
        position += length
        if position > len(data):
            raise ValueError("a tagged field runs past the end")
    return position


def check_batches(start_offset: int, batches: Sequence[StateBatch]) -> None:
    """Raises `ValueError` unless `batches` are in offset order, non-overlapping, at or above `start_offset`, with
    durable states and non-negative delivery counts (what Kafka's `SharePartition.maybeInitialize` refuses to load)."""
    if start_offset < UNINITIALIZED_START_OFFSET:
        raise ValueError(f"start offset {start_offset} is negative")
    if start_offset == UNINITIALIZED_START_OFFSET and batches:
        raise ValueError("an uninitialized share-partition has no state batches")
    next_offset = start_offset
    for batch in batches:
        if batch.first_offset < next_offset or batch.last_offset < batch.first_offset:
            raise ValueError(
                f"state batch {batch.first_offset}-{batch.last_offset} is out of order or below the start offset"
            )
        if batch.delivery_state not in DURABLE_STATE_IDS:
            raise ValueError(f"state batch {batch.first_offset}-{batch.last_offset} has state {batch.delivery_state}")
        if batch.delivery_count < 0:
            raise ValueError(f"state batch {batch.first_offset}-{batch.last_offset} has a negative delivery count")
        next_offset = batch.last_offset + 1
