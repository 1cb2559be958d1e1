"""A share-partition's durable state, the value a share coordinator keeps for it (Kafka's `ShareSnapshotValue` in
`__share_group_state`, read back by ReadShareGroupState): the state epoch, the share-partition start offset (SPSO)
and the state batches above it, each an offset range with one delivery state and delivery count.

A share-partition writes it and is rebuilt from it (`SharePartition.state` / `SharePartition(state=...)`), so that
a restart or a leader change never delivers an accepted record again and never loses one not yet accepted:

- every offset below the start offset is done (acknowledged or archived) and is never read again;
- a batch's delivery state is Available (0), Acknowledged (2) or Archived (4): an acquired record is written as
  Available with the delivery count it had before that acquisition, since its consumer's lock does not survive the
  share-partition and Kafka writes no state when it acquires: the interrupted delivery is not counted (so its next
  delivery stays within the delivery count limit), as after a restart of Kafka's;
- offsets between the start offset and the last batch that no batch covers held no record when they were read
  (a compacted range before a fetch's first batch); offsets after the last batch were never read.

The bytes (`to_bytes` / `from_bytes`), big-endian as Kafka's messages are:

| field            | type  | meaning                                                           |
|------------------|-------|-------------------------------------------------------------------|
| version          | int16 | 0                                                                 |
| state_epoch      | int32 | the share coordinator's epoch of this state (FENCED_STATE_EPOCH)  |
| start_offset     | int64 | SPSO; -1 before the share-partition was first initialized         |
| batch count      | int32 | then per batch, in offset order, non-overlapping:                 |
|   first_offset   | int64 | first offset of the range                                         |
|   last_offset    | int64 | last offset of the range (inclusive)                              |
|   delivery_state | int8  | 0 Available, 2 Acknowledged, 4 Archived (Kafka's `RecordState` ids) |
|   delivery_count | int16 | deliveries so far                                                 |

`from_bytes` raises only `CorruptRecordError`, for any byte string that is not such a value (truncated, trailing
bytes, an unknown version or state, batches out of order or below the start offset).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from storage.errors import CorruptRecordError

UNINITIALIZED_START_OFFSET = -1
# Kafka's `RecordState` ids, as written in state batches.
AVAILABLE_ID = 0
ACQUIRED_ID = 1
ACKNOWLEDGED_ID = 2
ARCHIVED_ID = 4
DURABLE_STATE_IDS = (AVAILABLE_ID, ACKNOWLEDGED_ID, ARCHIVED_ID)

_VERSION = 0
_HEADER = struct.Struct(
    ">h"  # version
    "i"  # state epoch
    "q"  # start offset
    "i"  # batch count
)
_BATCH = struct.Struct(
    ">q"  # first offset
    "q"  # last offset
    "b"  # delivery state
    "h"  # delivery count
)


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

    def to_bytes(self) -> bytes:
        """The value's bytes (see the module docstring)."""
        parts = [_HEADER.pack(_VERSION, self.state_epoch, self.start_offset, len(self.state_batches))]
        parts.extend(
            _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in self.state_batches
        )
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> ShareGroupState:
        """The value `to_bytes` wrote; `CorruptRecordError` for anything else."""
        if len(data) < _HEADER.size:
            raise CorruptRecordError(f"share-partition state of {len(data)} bytes is shorter than its header")
        version, state_epoch, start_offset, count = _HEADER.unpack_from(data)
        if version != _VERSION:
            raise CorruptRecordError(f"share-partition state of unknown version {version}")
        if count < 0 or len(data) != _HEADER.size + count * _BATCH.size:
            raise CorruptRecordError(f"share-partition state of {len(data)} bytes does not hold {count} batches")
        batches = tuple(StateBatch(*_BATCH.unpack_from(data, _HEADER.size + i * _BATCH.size)) for i in range(count))
        try:
            return cls(state_epoch, start_offset, batches)
        except ValueError as exc:
            raise CorruptRecordError(f"share-partition state is inconsistent: {exc}") from exc


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
