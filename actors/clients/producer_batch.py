"""One batch of a producer (Kafka's `ProducerBatch`): records of one partition, held as columns until sent.

A batch keeps its records as columns (keys, values, timestamps) and is encoded in one go when first sent,
by `storage.records.record_encoder.build_batch_from_columns` (a `RecordBatchBuilder` when a record has
headers). A batch of `send` holds its records and answers one future per record; a batch of `send_many`
holds only indices into the call's `BulkRecords` and answers the call's `SendManyFuture`.

Sizes are estimated before encoding, as upper bounds (Kafka's size estimate is one too): a batch is closed
once the estimate reaches `batch.size`, and `buffer.memory` counts the estimates of the records not yet
acknowledged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from actors.clients.futures import BatchOutcome, RecordFuture, SendManyFuture
from storage.records.compression import CompressionType
from storage.records.record_batch import RECORD_BATCH_OVERHEAD, RecordBatchBuilder
from storage.records.record_encoder import build_batch_from_columns

Headers = tuple[tuple[str, bytes | None], ...]
# Per record, on top of key, value and header bytes: length varint (5) + attributes (1) + timestamp
# delta varlong (10) + offset delta varint (5) + key and value length varints (5 + 5) + header count (5);
# each header adds two length varints (5 + 5). Upper bounds, as Kafka's size estimate is.
RECORD_OVERHEAD_BOUND = 36
HEADER_OVERHEAD_BOUND = 10


def record_size_bound(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """An upper bound of the record's encoded size, without compression."""
    size = RECORD_OVERHEAD_BOUND + len(key or b"") + len(value or b"")
    for name, header_value in headers:
        size += HEADER_OVERHEAD_BOUND + len(name.encode("utf-8")) + len(header_value or b"")
    return size


@dataclass(frozen=True, slots=True)
class BulkRecords:
    """The serialized records of one `send_many` call; `cumulative_sizes[i]` is the size bound of records
    0..i-1, so any run's size is one subtraction."""

    keys: list[bytes | None] | None
    values: list[bytes | None]
    timestamps: list[int]
    cumulative_sizes: np.ndarray

    def columns(self, indices: Sequence[int]) -> tuple[list[bytes | None], list[bytes | None] | None, list[int]]:
        """Values, keys and timestamps of the records at `indices` (a range is sliced, not gathered)."""
        keys = self.keys
        if isinstance(indices, range):
            start, stop = indices.start, indices.stop
            return (
                self.values[start:stop],
                None if keys is None else keys[start:stop],
                self.timestamps[start:stop],
            )
        return (
            [self.values[i] for i in indices],
            None if keys is None else [keys[i] for i in indices],
            [self.timestamps[i] for i in indices],
        )


@dataclass(eq=False)
class ProducerBatch:
    """One batch: its records as columns (`keys` None: all null), encoded into `payload`, its wire bytes, when
    it is first sent, and kept so for its retries. A `send_many` batch holds only `bulk_indices` into
    `bulk_records`, sliced when it is encoded (slicing every batch at once touches each record object a second
    time: ~0.4 us a record for 1M records spread over 100 MB, as the cache is cold by then).

    `estimated_bytes` is the size bound of the batch (overhead included); `attempts` counts the failed calls
    charged to it (retriable errors), `solo` marks a batch to be sent alone (its call was refused as a whole),
    and `done` that its outcome was reported and its bytes released."""

    topic: str
    partition: int
    created_ns: int
    compression: CompressionType
    values: list[bytes | None] = field(default_factory=list)
    keys: list[bytes | None] | None = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    # One tuple per record once any record of the batch has headers (the columnar encoder takes none).
    headers: list[Headers] | None = None
    # The outcome, lock and condition the `RecordFuture`s of its records share (made with the first one); the
    # batch does not hold the futures themselves.
    outcome: BatchOutcome | None = None
    bulk: SendManyFuture | None = None
    bulk_indices: Sequence[int] = ()
    bulk_records: BulkRecords | None = None
    estimated_bytes: int = RECORD_BATCH_OVERHEAD
    payload: bytes | None = None
    # The producer epoch `payload` was encoded under (a transactional producer's epoch can change).
    producer_epoch: int = -1
    attempts: int = 0
    solo: bool = False
    done: bool = False

    @property
    def record_count(self) -> int:
        return len(self.bulk_indices) if self.bulk_records is not None else len(self.values)

    def fits(self, size: int, batch_size: int) -> bool:
        """Whether a record of `size` bytes (its bound) joins the batch without passing `batch_size`."""
        return self.estimated_bytes + size <= batch_size

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        size: int,
    ) -> RecordFuture:
        """Adds one record of `send` (`size`: its `record_size_bound`); returns the future its batch answers."""
        if headers and self.headers is None:
            self.headers = [()] * len(self.values)
        if self.headers is not None:
            self.headers.append(headers)
        self.values.append(value)
        self.keys.append(key)  # type: ignore[union-attr]  # a batch of `send` has a keys list
        if self.outcome is None:
            self.outcome = BatchOutcome(self.topic, self.partition, self.timestamps)
        future = RecordFuture(self.outcome, len(self.timestamps))
        self.timestamps.append(timestamp)
        self.estimated_bytes += size
        return future

    def encode(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool = False
    ) -> bytes:
        """The batch's wire bytes under the given producer id, epoch and first sequence (and the transactional flag
        of a transactional producer's batch)."""
        if self.bulk_records is not None:
            values, keys, timestamps = self.bulk_records.columns(self.bulk_indices)
        else:
            values, keys, timestamps = self.values, self.keys, self.timestamps
        if self.headers is None:
            return build_batch_from_columns(
                values,
                keys,
                timestamps,
                compression=self.compression,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                is_transactional=is_transactional,
            )
        builder = RecordBatchBuilder(
            compression=self.compression,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=is_transactional,
        )
        for key, value, timestamp, headers in zip(
            keys or [None] * len(values), values, timestamps, self.headers, strict=True
        ):
            builder.append(key, value, timestamp=timestamp, headers=headers)
        return builder.build()

    def complete(self, first_offset: int, log_append_time: int) -> None:
        """Answers the batch's futures: the partition wrote it from `first_offset` (`log_append_time` -1 when
        the records keep their own timestamps)."""
        if self.bulk is not None:
            self.bulk._acknowledged(self.bulk_indices, self.partition, first_offset, log_append_time)
            return
        if self.outcome is not None:
            self.outcome.succeed(first_offset, log_append_time)

    def fail(self, error: BaseException) -> None:
        """Fails the batch's futures with `error`."""
        if self.outcome is not None:
            self.outcome.fail(error)
        if self.bulk is not None:
            self.bulk._failed(error)


__all__ = [
    "HEADER_OVERHEAD_BOUND",
    "RECORD_OVERHEAD_BOUND",
    "BulkRecords",
    "Headers",
    "ProducerBatch",
    "record_size_bound",
]
