"""What an append writes: a leader's batches given their offsets, and a follower's batches checked.

Leader (Kafka's `UnifiedLog.append` with offset assignment): the validated batches of a client or a coordinator
(see `log_validator`) get offsets from the log end offset, one batch after the other; `PendingAppend` judges each
producer batch against the state the batches before it left (`producer_append`): a batch an idempotent producer
already wrote is not written again and answers with its original offsets, a transaction marker closes its
producer's transaction. Each kept batch is then stamped: baseOffset and the leader
epoch, which lie outside the CRC, and, for a LogAppendTime topic, the append time (inside the CRC, recomputed).
The client's bytes are written as they are, after a rewritten copy of their first 16 bytes: a 1 MB batch is
never copied in memory unless its timestamps change.

Follower (Kafka's `appendAsFollower`): whole v2 batches with offsets a leader assigned, each CRC checked, their
offsets increasing and starting at or above the log end offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from storage.errors import InvalidRecordError
from storage.partition.log_validator import BatchInfo, ValidatedRecords
from storage.partition.producer_append import PendingAppend
from storage.partition.producer_state import BatchMetadata
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import (
    MAGIC_OFFSET,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    SEQUENCE_MODULUS,
    RecordBatch,
    set_base_offset_and_epoch,
    set_log_append_time,
)

OFFSET_AND_EPOCH_BYTES = MAGIC_OFFSET  # baseOffset, batchLength, partitionLeaderEpoch: what offset assignment edits


@dataclass(frozen=True, slots=True)
class AssignedBatch:
    """A client batch with its offsets: what validation learned of it, its producer metadata, its bytes."""

    info: BatchInfo
    metadata: BatchMetadata
    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class AssignedOffsets:
    """The batches to write, oldest first, and the offsets of every input batch (a duplicate's original ones);
    `duplicate_timestamp` is the first duplicate's original max timestamp (Kafka answers it as the duplicate's
    log append time), NO_TIMESTAMP without one."""

    batches: tuple[AssignedBatch, ...]
    batch_offsets: tuple[tuple[int, int], ...]
    duplicate_timestamp: int = NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class StampedBatches:
    """The bytes to write, as pieces written back to back, and the max timestamp with its batch's last offset."""

    pieces: list[bytes | bytearray | memoryview]
    max_timestamp: int
    offset_of_max_timestamp: int


def assign_offsets(
    validated: ValidatedRecords, pending: PendingAppend, next_offset: int, log_append_time: int
) -> AssignedOffsets:
    """Offsets from `next_offset` for each validated batch that is not a duplicate; `pending` records the producer
    batches and markers (and raises the producer-state errors that refuse the whole append)."""
    kept: list[AssignedBatch] = []
    batch_offsets: list[tuple[int, int]] = []
    duplicate_timestamp = None
    for info, part in zip(validated.batches, validated.parts, strict=True):
        last = next_offset + info.last_offset_delta
        batch_max = info.max_timestamp if log_append_time == NO_TIMESTAMP else log_append_time
        last_sequence = (
            NO_SEQUENCE if info.base_sequence < 0 else (info.base_sequence + info.last_offset_delta) % SEQUENCE_MODULUS
        )
        metadata = BatchMetadata(info.base_sequence, last_sequence, next_offset, last, batch_max)
        if info.marker is not None:
            pending.append_marker(info.producer_id, info.producer_epoch, info.marker, next_offset, batch_max)
        elif info.producer_id >= 0:
            duplicate = pending.append_data(info.producer_id, info.producer_epoch, metadata, info.is_transactional)
            if duplicate is not None:
                batch_offsets.append((duplicate.first_offset, duplicate.last_offset))
                if duplicate_timestamp is None:
                    duplicate_timestamp = duplicate.timestamp
                continue
        kept.append(AssignedBatch(info, metadata, part))
        batch_offsets.append((next_offset, last))
        next_offset = last + 1
    return AssignedOffsets(
        tuple(kept), tuple(batch_offsets), NO_TIMESTAMP if duplicate_timestamp is None else duplicate_timestamp
    )


def stamp_batches(batches: Sequence[AssignedBatch], epoch: int, log_append_time: int) -> StampedBatches:
    """The bytes of `batches` with their offsets, leader epoch and (LogAppendTime) append time set."""
    pieces: list[bytes | bytearray | memoryview] = []
    max_timestamp = NO_TIMESTAMP
    offset_of_max_timestamp = -1
    for batch in batches:
        metadata, part = batch.metadata, batch.data
        if log_append_time != NO_TIMESTAMP:
            whole = bytearray(part)
            set_base_offset_and_epoch(whole, 0, metadata.first_offset, epoch)
            set_log_append_time(whole, 0, batch.info.size, log_append_time)
            pieces.append(whole)
        else:
            head = bytearray(part[:OFFSET_AND_EPOCH_BYTES])
            set_base_offset_and_epoch(head, 0, metadata.first_offset, epoch)
            pieces += [head, part[OFFSET_AND_EPOCH_BYTES:]]
        if metadata.timestamp > max_timestamp:
            max_timestamp, offset_of_max_timestamp = metadata.timestamp, metadata.last_offset
    return StampedBatches(pieces, max_timestamp, offset_of_max_timestamp)


def parse_follower_batches(data: bytes) -> list[RecordBatch]:
    """`data` as whole v2 batches, each CRC checked; `InvalidRecordError` otherwise."""
    parsed: list[RecordBatch] = []
    for batch in iter_any_batches(data):
        if not isinstance(batch, RecordBatch):
            raise InvalidRecordError("only magic 2 batches can be appended")
        batch.ensure_valid()
        parsed.append(batch)
    if not parsed or sum(batch.size_in_bytes for batch in parsed) != len(data):
        raise InvalidRecordError("follower append must be whole v2 batches")
    return parsed


def check_follower_offsets(batches: Sequence[RecordBatch], log_end_offset: int) -> None:
    """`InvalidRecordError` unless the batches' offsets increase from `log_end_offset` on."""
    previous = log_end_offset - 1
    for batch in batches:
        if batch.base_offset <= previous:
            raise InvalidRecordError(
                f"out of order offsets: batch {batch.base_offset} after offset {previous}",
                offset=batch.base_offset,
            )
        previous = batch.last_offset
