"""The producer facade: Kafka's producer (batching, partitioning, idempotent retries) over partition actors.

`Producer.send` serializes a record, picks its partition and appends it to that partition's open batch;
it returns a `concurrent.futures.Future` that resolves to the record's `RecordMetadata` once the partition
actor has written it. `Producer.send_many(topic, values, keys=None, partition=None, timestamps=None)` queues
many records at once and returns one `SendManyFuture` for all of them: no future, lock round or size
estimate per record, and batches cut whole (~0.4 us a record on top of encoding, against ~15 us for `send`).
A batch keeps its records as columns (keys, values, timestamps) and is encoded in one go when first sent,
by `storage.records.record_columns.build_batch_from_columns` (a `RecordBatchBuilder` when a record has headers).
A background sender thread does the rest:

- Batching (Kafka's `batch.size`, `linger.ms`): a batch is closed when it reaches `batch_size` bytes
  (uncompressed estimate; a record larger than that gets a batch of its own) or is `linger_ms` old, or at
  once during `flush`. Closed batches of one partition travel together in one `append` call, up to
  `max_request_size` bytes; at most `max_in_flight_requests_per_connection` calls per partition are in
  flight (idempotent: at most 5 batches in all, the partition's dedup window), and Ray runs one caller's
  calls to an actor in submission order, so batches land in send order.
- Partitioning (Kafka's default partitioner, `actors.clients.partitioner`): an explicit partition wins; a keyed
  record goes to `murmur2(key) % partitions`; a record without key sticks to one partition per topic until
  it would start a new batch there, then the topic moves to another partition (KIP-480).
- Idempotence (`enable_idempotence`, on by default): the producer takes a producer id from the controller
  (epoch 0) and numbers each partition's batches with sequences, assigned when a batch is first sent and
  kept by its retries, so a retry of a batch that was written but whose answer was lost is recognised by
  the partition as a duplicate and answered with the original offsets.
- Retries: a call that fails with `BrokerNotAvailableError` or `RequestTimedOutError` (an actor dead or
  restarting) is retried after an exponential backoff (`retry_backoff_ms` doubling up to
  `retry_backoff_max_ms`, Kafka's KIP-580), at most `retries` times and within `delivery_timeout_ms`
  of the batch's creation. When a call of a partition fails, no new call goes to that partition until
  its calls in flight have answered; then the failed batches are sent again, in sequence order. Later
  calls refused with `OutOfOrderSequenceError` only because an earlier one failed are resent too. A call
  refused for any other reason wrote nothing; if it held several batches, each is resent alone to find
  the bad one, and a batch refused alone fails its futures with the typed error (`RecordTooLargeError`,
  `InvalidRecordError`, ...). Once a batch of a partition has failed for good, the partition's sequence
  is no longer known, so its remaining batches continue under a fresh producer id from sequence 0
  (Kafka's idempotent-producer reset; the other partitions keep theirs).
- Memory bound (Kafka's `buffer.memory`, `max.block.ms`): `send` blocks while the records not yet
  acknowledged take more than `buffer_memory` bytes, and raises `RequestTimedOutError` after
  `max_block_ms`.

Errors raised by `send` itself (before anything is queued): `UnknownTopicOrPartitionError` for an
unknown topic or a partition outside the topic, `SerializationError` for a key or value the serializer
cannot encode, `RecordTooLargeError` for a record larger than `max_request_size`, `InvalidTimestampError`
for a negative timestamp, `InvalidRequestError` after `close`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

from actors.calls import call, partition_actor
from actors.clients.broker import Broker
from actors.clients.partitioner import StickyPartitionCache, partition_for_key, partitions_for_keys
from actors.clients.serializers import Serializer, default_serializer
from storage.clock import SYSTEM_CLOCK
from storage.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidRequestError,
    InvalidTimestampError,
    OutOfOrderSequenceError,
    RaybrokerError,
    RecordTooLargeError,
    RequestTimedOutError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from storage.partition.log import LogAppendInfo
from storage.partition.producer_state import NUM_BATCHES_TO_RETAIN, SEQUENCE_MODULUS
from storage.records.compression import CompressionType
from storage.records.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
)
from storage.records.record_columns import build_batch_from_columns

logger = logging.getLogger(__name__)

HeaderInput = tuple[str, bytes | bytearray | str | None]
# Per record, on top of key, value and header bytes: length varint (5) + attributes (1) + timestamp
# delta varlong (10) + offset delta varint (5) + key and value length varints (5 + 5) + header count (5);
# each header adds two length varints (5 + 5). Upper bounds, as Kafka's size estimate is.
RECORD_OVERHEAD_BOUND = 36
HEADER_OVERHEAD_BOUND = 10
RETRIABLE_ERRORS = (BrokerNotAvailableError, RequestTimedOutError)


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written: its partition, offset and timestamp (LogAppendTime if the topic uses it)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class SendManyFuture:
    """The outcome of one `send_many` call: every record's `RecordMetadata` through one handle.

    The records travel in several batches, possibly to several partitions; `done()` is true once every batch
    was acknowledged or failed. `result()` gives the metadata in the order the records were given, or raises
    the typed error of the first batch that failed (the other batches may have been written). `wait()` waits
    the same way without building one `RecordMetadata` per record (at 1M records that costs ~0.5 s).
    """

    def __init__(self, topic: str, timestamps: list[int]) -> None:
        self.topic = topic
        self.count = len(timestamps)
        self._timestamps = timestamps
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._pending = 0
        self._sealed = False
        self._error: BaseException | None = None
        # Per acknowledged batch: record indices, partition, first offset, LogAppendTime (or -1).
        self._acks: list[tuple[Sequence[int], int, int, int]] = []

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Waits until every record is acknowledged; raises the first batch's error, or `RequestTimedOutError`."""
        self._wait_done(timeout)
        if self._error is not None:
            raise self._error

    def _wait_done(self, timeout: float | None) -> None:
        if not self._done.wait(timeout):
            raise RequestTimedOutError(f"send_many of {self.count} records not answered within {timeout} s")

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The first failed batch's error (None if all were written), after waiting as `wait` does."""
        self._wait_done(timeout)
        return self._error

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Each record's metadata, in the order the records were given to `send_many`."""
        self.wait(timeout)
        metadata: list[RecordMetadata | None] = [None] * self.count
        timestamps = self._timestamps
        for indices, partition, first_offset, log_append_time in self._acks:
            for position, index in enumerate(indices):
                written = timestamps[index] if log_append_time == NO_TIMESTAMP else log_append_time
                metadata[index] = RecordMetadata(self.topic, partition, first_offset + position, written)
        return [item for item in metadata if item is not None]

    def _add_batch(self) -> None:
        with self._lock:
            self._pending += 1

    def _seal(self) -> None:
        """No more batches will be added (send_many queued them all)."""
        with self._lock:
            self._sealed = True
            self._finish_if_done()

    def _acknowledged(self, indices: Sequence[int], partition: int, first_offset: int, log_append_time: int) -> None:
        with self._lock:
            self._acks.append((indices, partition, first_offset, log_append_time))
            self._pending -= 1
            self._finish_if_done()

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._error = self._error or error
            self._pending -= 1
            self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self._sealed and self._pending == 0:
            self._done.set()


@dataclass(eq=False)
class _ProducerBatch:
    """One batch: its records as columns (`keys` None: all null), encoded in one go into `payload`, its wire
    bytes, when it is first sent. A batch of `send` holds its records and answers one future per record; a
    batch of `send_many` holds only `bulk_indices` into the call's `bulk_records`, sliced when it is encoded
    (slicing every batch at once touches each record object a second time: ~0.4 us a record for 1M records
    spread over 100 MB, as the cache is cold by then), and answers its `bulk` future."""

    topic: str
    partition: int
    created_ns: int
    values: list[bytes | None] = field(default_factory=list)
    keys: list[bytes | None] | None = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    # One tuple per record once any record of the batch has headers (the columnar encoder takes none).
    headers: list[tuple[tuple[str, bytes | None], ...]] | None = None
    futures: list[Future[RecordMetadata]] = field(default_factory=list)
    bulk: SendManyFuture | None = None
    bulk_indices: Sequence[int] = ()
    bulk_records: _BulkRecords | None = None
    estimated_bytes: int = RECORD_BATCH_OVERHEAD
    payload: bytes | None = None
    attempts: int = 0
    solo: bool = False
    done: bool = False

    @property
    def record_count(self) -> int:
        return len(self.bulk_indices) if self.bulk_records is not None else len(self.values)


@dataclass(eq=False)
class _InFlight:
    """One `append` call and the batches it carries, in order."""

    ref: Any
    batches: list[_ProducerBatch]
    done: bool = False


@dataclass(eq=False)
class _PartitionQueue:
    """The producer's state for one partition: batches open, closed, in flight, and its sequence."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    next_sequence: int = 0
    handle: Any = None
    open: _ProducerBatch | None = None
    ready: deque[_ProducerBatch] = field(default_factory=deque)
    in_flight: deque[_InFlight] = field(default_factory=deque)
    failed: list[tuple[_InFlight, BaseException]] = field(default_factory=list)
    retry_at_ns: int = 0


# A batch's outcome: (first offset, LogAppendTime or -1) once written, else the error that failed it.
Completion = tuple[_ProducerBatch, tuple[int, int] | BaseException]


class Producer:
    """Sends records to the broker's partitions; see the module docstring. Thread-safe."""

    def __init__(
        self,
        broker: Broker | None = None,
        *,
        linger_ms: int = 5,
        batch_size: int = 16384,
        compression_type: str = "none",
        enable_idempotence: bool = True,
        retries: int = 5,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        delivery_timeout_ms: int = 120_000,
        max_in_flight_requests_per_connection: int = 5,
        max_request_size: int = 1024 * 1024,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        metadata_max_age_ms: int = 300_000,
        value_serializer: Serializer | None = None,
        key_serializer: Serializer | None = None,
    ) -> None:
        for name, value, low in (
            ("linger_ms", linger_ms, 0),
            ("batch_size", batch_size, 1),
            ("retries", retries, 0),
            ("retry_backoff_ms", retry_backoff_ms, 0),
            ("retry_backoff_max_ms", retry_backoff_max_ms, 0),
            ("delivery_timeout_ms", delivery_timeout_ms, 1),
            ("max_in_flight_requests_per_connection", max_in_flight_requests_per_connection, 1),
            ("max_request_size", max_request_size, RECORD_BATCH_OVERHEAD + RECORD_OVERHEAD_BOUND),
            ("buffer_memory", buffer_memory, 1),
            ("max_block_ms", max_block_ms, 0),
            ("metadata_max_age_ms", metadata_max_age_ms, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidConfigError(f"{name} must be an int >= {low}, got {value!r}")
        if enable_idempotence and max_in_flight_requests_per_connection > NUM_BATCHES_TO_RETAIN:
            raise InvalidConfigError(
                f"an idempotent producer allows at most {NUM_BATCHES_TO_RETAIN} calls in flight per partition "
                f"(the partition remembers that many batches per producer), got {max_in_flight_requests_per_connection}"
            )
        self._compression = CompressionType.from_name(compression_type)
        self._broker = broker or Broker.connect()
        self._linger_ns = linger_ms * 1_000_000
        self._batch_size = batch_size
        self._idempotent = enable_idempotence
        self._retries = retries
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms)
        self._delivery_timeout_ns = delivery_timeout_ms * 1_000_000
        self._max_in_flight = max_in_flight_requests_per_connection
        self._max_request_size = max_request_size
        self._buffer_memory = buffer_memory
        self._max_block_s = max_block_ms / 1000
        self._metadata_max_age_ns = metadata_max_age_ms * 1_000_000
        self._value_serializer = value_serializer or default_serializer
        self._key_serializer = key_serializer or default_serializer
        self._producer_id = self._new_producer_id() if enable_idempotence else NO_PRODUCER_ID
        self._sticky = StickyPartitionCache()
        self._metadata_lock = threading.Lock()
        self._partition_counts: dict[str, tuple[int, int]] = {}
        self._cond = threading.Condition(threading.RLock())
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._incomplete: set[_ProducerBatch] = set()
        self._buffered_bytes = 0
        self._flushing = 0
        self._closed = False
        self._stopping = False
        # Wakes the sender: new batches, flushes, answers from Ray. An Event, not the lock's condition,
        # because Ray's callback thread must never block on the lock.
        self._wakeup = threading.Event()
        self._sender = threading.Thread(target=self._run_sender, name="raybroker-producer-sender", daemon=True)
        self._sender.start()

    @property
    def producer_id(self) -> int:
        """The producer id taken at start (-1 without idempotence); a partition whose sequence had to be
        reset continues under a fresh one."""
        return self._producer_id

    def _new_producer_id(self) -> int:
        return call(self._broker.controller.allocate_producer_id.remote())

    # --- send ------------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[HeaderInput] | None = None,
    ) -> Future[RecordMetadata]:
        """Queues one record; the future gives its `RecordMetadata` or the typed error that failed it."""
        if self._closed or self._stopping:
            raise InvalidRequestError("cannot send after the producer has been closed")
        key_bytes = None if key is None else _serialize(self._key_serializer, key, "key")
        value_bytes = None if value is None else _serialize(self._value_serializer, value, "value")
        record_headers = _headers(headers)
        timestamp = SYSTEM_CLOCK.milliseconds() if timestamp_ms is None else _check_timestamp(timestamp_ms)
        size = _record_size_bound(key_bytes, value_bytes, record_headers)
        if RECORD_BATCH_OVERHEAD + size > self._max_request_size:
            raise RecordTooLargeError(
                f"a record of about {size} bytes does not fit in max_request_size {self._max_request_size}"
            )
        num_partitions = self._partition_count(topic, partition)
        if partition is None and key_bytes is not None:
            partition = partition_for_key(key_bytes, num_partitions)
        future: Future[RecordMetadata] = Future()
        future.set_running_or_notify_cancel()
        with self._cond:
            self._wait_for_buffer(size)
            if partition is None:
                partition = self._sticky.partition(topic, num_partitions)
                current = self._queue(topic, partition).open
                if current is None or not self._fits(current, size):
                    partition = self._sticky.on_new_batch(topic, partition, num_partitions)
            queue = self._queue(topic, partition)
            batch = queue.open
            # The sender is woken only when there is news for it: a batch closed, or a new one whose linger
            # deadline it must start waiting for. A record joining an open batch changes neither (a wake-up
            # per record cost ~6 us of Event locking, a third of `send`).
            wake = False
            if batch is not None and not self._fits(batch, size):
                self._close_batch(queue)
                batch = None
            if batch is None:
                batch = self._new_batch(topic, partition)
                queue.open = batch
                self._incomplete.add(batch)
                wake = True
            if record_headers and batch.headers is None:
                batch.headers = [()] * len(batch.values)
            if batch.headers is not None:
                batch.headers.append(record_headers)
            batch.values.append(value_bytes)
            batch.keys.append(key_bytes)  # type: ignore[union-attr]  # a batch of `send` has a keys list
            batch.timestamps.append(timestamp)
            batch.futures.append(future)
            batch.estimated_bytes += size
            self._buffered_bytes += size
            if batch.estimated_bytes >= self._batch_size:
                self._close_batch(queue)
                wake = True
        if wake:
            self._wakeup.set()
        return future

    def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> SendManyFuture:
        """Queues many records at once: `values[i]` with `keys[i]` and `timestamps[i]` (None: no keys, the
        current time for all); partitioned as `send` does. One future for all (`SendManyFuture`), and batches
        encoded whole, so a record costs a fraction of what `send` costs.

        Every record is serialized and checked before any is queued, so a bad one (the errors of `send`)
        queues nothing. Only `RequestTimedOutError` (`buffer_memory` still full after `max_block_ms`) can come
        after some batches were queued; those are still sent. The records are cut into full batches at once
        (`linger_ms` does not apply); a batch `send` left open on a partition is closed first, so records keep
        their send order per partition.
        For throughput give the producer a larger `batch_size` (up to the topic's `max.message.bytes`, 1 MiB by
        default): a batch has fixed costs (encoding setup, validation, and an idempotent partition takes only 5
        unacknowledged batches), so 16 KiB batches of 100-byte records reach ~130k records/s, 1 MB ones ~500k.
        """
        if self._closed or self._stopping:
            raise InvalidRequestError("cannot send after the producer has been closed")
        count = len(values)
        if keys is not None and len(keys) != count:
            raise InvalidRequestError(f"send_many got {len(keys)} keys for {count} values")
        if timestamps is not None and len(timestamps) != count:
            raise InvalidRequestError(f"send_many got {len(timestamps)} timestamps for {count} values")
        value_bytes = _serialize_all(self._value_serializer, values, "value")
        key_bytes = None if keys is None else _serialize_all(self._key_serializer, keys, "key")
        if timestamps is None:
            record_timestamps = [SYSTEM_CLOCK.milliseconds()] * count
        else:
            record_timestamps = [_check_timestamp(timestamp) for timestamp in timestamps]
        sizes = RECORD_OVERHEAD_BOUND + _lengths(value_bytes)
        if key_bytes is not None:
            sizes += _lengths(key_bytes)
        largest = int(sizes.max()) if count else 0
        if RECORD_BATCH_OVERHEAD + largest > self._max_request_size:
            raise RecordTooLargeError(
                f"a record of about {largest} bytes does not fit in max_request_size {self._max_request_size}"
            )
        num_partitions = self._partition_count(topic, partition)
        future = SendManyFuture(topic, record_timestamps)
        # Kept as an array: `tolist()` of a million running totals took ~9% of a `send_many` run.
        cumulative = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(sizes)))
        records = _BulkRecords(key_bytes, value_bytes, record_timestamps, cumulative)
        with self._cond:
            for chosen, indices in self._place_bulk(topic, num_partitions, partition, records):
                self._queue_bulk(future, topic, chosen, records, indices)
        future._seal()
        self._wakeup.set()
        return future

    def _place_bulk(
        self, topic: str, num_partitions: int, partition: int | None, records: _BulkRecords
    ) -> list[tuple[int, Sequence[int]]]:
        """Where the records go: (partition, indices) pieces, each partition's records in the order given.
        Null-key records fill a batch's worth (`batch_size`) on the topic's sticky partition, then the topic
        moves on (KIP-480). Holds the lock, so the sticky partition moves for one call at a time."""
        count = len(records.values)
        if partition is not None:
            return [(partition, range(count))]
        if records.keys is None:
            # Every record is sticky: each batch-sized run is a piece of its own, no per-record work.
            return [(self._next_sticky(topic, num_partitions), run) for run in self._runs(records.cumulative_sizes)]
        keys = records.keys
        placed = np.empty(count, dtype=np.int64)
        keyed = [index for index, key in enumerate(keys) if key is not None]
        if keyed:
            placed[keyed] = partitions_for_keys([keys[index] for index in keyed], num_partitions)
        unkeyed = np.asarray([index for index, key in enumerate(keys) if key is None], dtype=np.int64)
        cumulative = records.cumulative_sizes
        running = np.concatenate(
            (np.zeros(1, dtype=np.int64), np.cumsum(cumulative[unkeyed + 1] - cumulative[unkeyed]))
        )
        for run in self._runs(running):
            placed[unkeyed[run.start : run.stop]] = self._next_sticky(topic, num_partitions)
        pieces: list[tuple[int, Sequence[int]]] = []
        for chosen in np.unique(placed).tolist():
            indices = np.flatnonzero(placed == chosen)
            contiguous = int(indices[-1]) - int(indices[0]) == len(indices) - 1
            pieces.append((chosen, range(int(indices[0]), int(indices[-1]) + 1) if contiguous else indices.tolist()))
        return pieces

    def _runs(self, cumulative: np.ndarray) -> list[range]:
        """Consecutive runs of records (by their running size total) of one batch's worth each, at least one
        record each."""
        budget = self._batch_size - RECORD_BATCH_OVERHEAD
        runs = []
        position, count = 0, len(cumulative) - 1
        while position < count:
            within = int(np.searchsorted(cumulative, cumulative[position] + budget, side="right")) - 1
            end = min(count, max(position + 1, within))
            runs.append(range(position, end))
            position = end
        return runs

    def _next_sticky(self, topic: str, num_partitions: int) -> int:
        """The sticky partition for one more batch of null-key records; the topic moves on after it."""
        sticky = self._sticky.partition(topic, num_partitions)
        self._sticky.on_new_batch(topic, sticky, num_partitions)
        return sticky

    def _queue_bulk(
        self, future: SendManyFuture, topic: str, partition: int, records: _BulkRecords, indices: Sequence[int]
    ) -> None:
        """Cuts `indices` (records of `partition`, in order) into batches of up to `batch_size` bytes and queues
        them ready to send, after any batch `send` left open there. Holds the lock."""
        queue = self._queue(topic, partition)
        self._close_batch(queue)
        budget = self._batch_size - RECORD_BATCH_OVERHEAD
        cumulative = records.cumulative_sizes
        sizes = None if isinstance(indices, range) else np.diff(cumulative)[indices].tolist()
        position = 0
        while position < len(indices):
            if sizes is None:
                # A run of records: the batch ends at the last running total within budget, one bisection away.
                first = indices[position]
                end = int(np.searchsorted(cumulative, cumulative[first] + budget, side="right")) - 1
                end = min(max(end, first + 1), indices[-1] + 1)
                chunk: Sequence[int] = range(first, end)
                size = int(cumulative[end] - cumulative[first])
            else:
                stop, size = position, 0
                while stop < len(indices):
                    record_size = sizes[stop]
                    if stop > position and size + record_size > budget:
                        break
                    size += record_size
                    stop += 1
                chunk = indices[position:stop]
            self._wait_for_buffer(size)
            batch = _ProducerBatch(topic, partition, time.monotonic_ns())
            batch.bulk_records = records
            batch.estimated_bytes += size
            batch.bulk = future
            batch.bulk_indices = chunk
            future._add_batch()
            self._buffered_bytes += size
            self._incomplete.add(batch)
            queue.ready.append(batch)
            position += len(chunk)

    def _fits(self, batch: _ProducerBatch, size: int) -> bool:
        return batch.estimated_bytes + size <= self._batch_size

    def _new_batch(self, topic: str, partition: int) -> _ProducerBatch:
        return _ProducerBatch(topic, partition, time.monotonic_ns())

    def _queue(self, topic: str, partition: int) -> _PartitionQueue:
        queue = self._queues.get((topic, partition))
        if queue is None:
            epoch = 0 if self._idempotent else NO_PRODUCER_EPOCH
            queue = _PartitionQueue(topic, partition, self._producer_id, epoch)
            self._queues[(topic, partition)] = queue
        return queue

    def _close_batch(self, queue: _PartitionQueue) -> None:
        if queue.open is not None:
            queue.ready.append(queue.open)
            queue.open = None

    def _wait_for_buffer(self, size: int) -> None:
        """Blocks while unacknowledged records hold `buffer_memory` bytes (one record may always go)."""
        if self._buffered_bytes + size <= self._buffer_memory or self._buffered_bytes == 0:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            if not self._cond.wait_for(
                lambda: self._buffered_bytes + size <= self._buffer_memory or self._buffered_bytes == 0,
                self._max_block_s,
            ):
                raise RequestTimedOutError(
                    f"{self._buffered_bytes} bytes still unacknowledged after max_block_ms; buffer_memory is "
                    f"{self._buffer_memory}"
                )
        finally:
            self._flushing -= 1

    def _partition_count(self, topic: str, partition: int | None) -> int:
        """The topic's partition count (cached for `metadata_max_age_ms`); checks an explicit partition."""
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool) or partition < 0):
            raise UnknownTopicOrPartitionError(f"partition must be an int >= 0, not {partition!r}")
        now = time.monotonic_ns()
        with self._metadata_lock:
            cached = self._partition_counts.get(topic)
        stale = cached is None or now - cached[1] > self._metadata_max_age_ns
        if stale or (partition is not None and partition >= cached[0]):
            count = len(self._broker.topic(topic).partitions)
            with self._metadata_lock:
                self._partition_counts[topic] = (count, now)
        else:
            count = cached[0]
        if partition is not None and partition >= count:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
        return count

    # --- flush / close ---------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Sends every record queued so far at once and waits until each is acknowledged or failed.

        Raises `RequestTimedOutError` if that takes longer than `timeout` seconds (None: no limit). Not for a
        future's callback: callbacks run on the sender thread, which would then wait for itself.
        """
        with self._cond:
            pending = [batch for batch in self._incomplete if not batch.done]
            self._flushing += 1
            self._wakeup.set()
            try:
                finished = self._cond.wait_for(lambda: all(batch.done for batch in pending), timeout)
            finally:
                self._flushing -= 1
        if not finished:
            raise RequestTimedOutError(f"flush did not complete within {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Flushes, then stops the sender. Records still unsent after `timeout` seconds fail with
        `RequestTimedOutError`. Calling it again does nothing."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._stopping = True
            self._wakeup.set()
            self._sender.join()
            leftover = [batch for batch in self._incomplete if not batch.done]
            error = RequestTimedOutError("the producer was closed before the record was acknowledged")
            self._complete([(batch, error) for batch in leftover])

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # --- sender thread ---------------------------------------------------------------------------

    def _run_sender(self) -> None:
        try:
            while True:
                # Cleared before the state is read, so a wake-up arriving while this pass runs is not lost.
                self._wakeup.clear()
                with self._cond:
                    if self._stopping:
                        return
                    now = time.monotonic_ns()
                    completions = self._collect(now)
                    self._close_due_batches(now)
                    self._send_ready(now)
                    timeout = 0.0 if completions else self._wait_seconds(now)
                self._complete(completions)
                if timeout != 0.0:
                    self._wakeup.wait(timeout)
        except BaseException as exc:
            logger.exception("producer sender thread failed")
            with self._cond:
                self._stopping = True
                leftover = [batch for batch in self._incomplete if not batch.done]
            self._complete([(batch, exc) for batch in leftover])
            raise

    def _wait_seconds(self, now: int) -> float | None:
        """Time until the next linger deadline or retry backoff; None if nothing is waiting on time."""
        deadlines = []
        for queue in self._queues.values():
            if queue.failed and not queue.in_flight:
                return 0.0
            if queue.open is not None:
                deadlines.append(queue.open.created_ns + self._linger_ns)
            if queue.ready and not queue.failed and self._batch_room(queue) > 0:
                deadlines.append(queue.retry_at_ns)
        if not deadlines:
            return None
        return max(0, min(deadlines) - now) / 1e9

    def _close_due_batches(self, now: int) -> None:
        for queue in self._queues.values():
            batch = queue.open
            if batch is not None and (self._flushing or now - batch.created_ns >= self._linger_ns):
                self._close_batch(queue)

    def _send_ready(self, now: int) -> None:
        for queue in self._queues.values():
            if queue.failed or now < queue.retry_at_ns:
                continue
            while queue.ready and self._batch_room(queue) > 0:
                batches = self._take_request(queue, self._batch_room(queue))
                try:
                    if queue.handle is None:
                        queue.handle = partition_actor(queue.topic, queue.partition)
                    payload = self._build(queue, batches)
                except RaybrokerError as exc:
                    # Nothing was sent: the batches are judged like those of a failed call.
                    queue.failed.append((_InFlight(None, batches, done=True), exc))
                    break
                flight = _InFlight(queue.handle.append.remote(payload), batches)
                queue.in_flight.append(flight)
                flight.ref.future().add_done_callback(lambda _, flight=flight: self._on_call_done(flight))

    def _batch_room(self, queue: _PartitionQueue) -> int:
        """How many more batches `queue` may send now. An idempotent producer's partition remembers its last
        NUM_BATCHES_TO_RETAIN (5) batches, so at most 5 may be unacknowledged, however many calls carry them:
        a retry of an older one that was written would be refused (`OutOfOrderSequenceError`), not deduplicated."""
        if len(queue.in_flight) >= self._max_in_flight:
            return 0
        if not self._idempotent:
            return len(queue.ready)
        return NUM_BATCHES_TO_RETAIN - sum(len(flight.batches) for flight in queue.in_flight)

    def _take_request(self, queue: _PartitionQueue, limit: int) -> list[_ProducerBatch]:
        """The next batches of `queue` for one call: in order, at most `limit`, within `max_request_size`, a solo
        batch alone."""
        batches = [queue.ready.popleft()]
        size = batches[0].estimated_bytes
        while (
            not batches[0].solo
            and len(batches) < limit
            and queue.ready
            and not queue.ready[0].solo
            and size + queue.ready[0].estimated_bytes <= self._max_request_size
        ):
            batch = queue.ready.popleft()
            batches.append(batch)
            size += batch.estimated_bytes
        return batches

    def _build(self, queue: _PartitionQueue, batches: list[_ProducerBatch]) -> bytes:
        """The call's bytes. A batch sent for the first time gets the partition's producer id, epoch and next
        sequence; a resent batch keeps its bytes, so the partition can recognise it."""
        if self._idempotent and queue.producer_id == NO_PRODUCER_ID and any(b.payload is None for b in batches):
            queue.producer_id = self._new_producer_id()
        for batch in batches:
            if batch.payload is None:
                base_sequence = NO_SEQUENCE
                if self._idempotent:
                    base_sequence = queue.next_sequence
                    queue.next_sequence = (queue.next_sequence + batch.record_count) % SEQUENCE_MODULUS
                batch.payload = self._encode(batch, queue.producer_id, queue.producer_epoch, base_sequence)
        return b"".join(batch.payload or b"" for batch in batches)

    def _encode(self, batch: _ProducerBatch, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        if batch.bulk_records is not None:
            values, keys, timestamps = batch.bulk_records.columns(batch.bulk_indices)
        else:
            values, keys, timestamps = batch.values, batch.keys, batch.timestamps
        if batch.headers is None:
            return build_batch_from_columns(
                values,
                keys,
                timestamps,
                compression=self._compression,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
            )
        builder = RecordBatchBuilder(
            compression=self._compression,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        for key, value, timestamp, headers in zip(
            keys or [None] * len(values), values, timestamps, batch.headers, strict=True
        ):
            builder.append(key, value, timestamp=timestamp, headers=headers)
        return builder.build()

    def _on_call_done(self, flight: _InFlight) -> None:
        """Runs on a Ray thread: it must not wait for the producer's lock (that thread also serves the
        `ray.get` the sender makes under it), so it only flags the call and wakes the sender."""
        flight.done = True
        self._wakeup.set()

    def _collect(self, now: int) -> list[Completion]:
        """Takes the answers of finished calls, in each partition's call order."""
        completions: list[Completion] = []
        for queue in self._queues.values():
            while queue.in_flight and queue.in_flight[0].done:
                flight = queue.in_flight.popleft()
                try:
                    info = call(flight.ref)
                except Exception as exc:
                    queue.failed.append((flight, exc))
                    continue
                completions.extend(_acknowledged(flight.batches, info))
            if queue.failed and not queue.in_flight:
                completions.extend(self._resolve_failures(queue, now))
        return completions

    def _resolve_failures(self, queue: _PartitionQueue, now: int) -> list[Completion]:
        """Decides, once a partition has no call in flight, what becomes of the batches of its failed calls."""
        completions: list[Completion] = []
        resend: list[_ProducerBatch] = []
        failed_for_good: BaseException | None = None
        reset_sequence_from: int | None = None
        backoff = False
        for index, (flight, error) in enumerate(queue.failed):
            if failed_for_good is not None:
                # An earlier batch's fate is unknown (it may have been written): these may not be resent.
                completions.extend((batch, failed_for_good) for batch in flight.batches)
                continue
            if isinstance(error, RETRIABLE_ERRORS) or (index > 0 and isinstance(error, OutOfOrderSequenceError)):
                charged = isinstance(error, RETRIABLE_ERRORS)
                for batch in flight.batches:
                    batch.attempts += int(charged)
                expired = self._expiry_error(flight.batches, error, now)
                if expired is None:
                    resend.extend(flight.batches)
                    backoff = backoff or charged
                    continue
                failed_for_good = expired
                reset_sequence_from = len(resend)
                completions.extend((batch, expired) for batch in flight.batches)
            elif len(flight.batches) > 1:
                # A refused call wrote nothing; sent alone, each batch shows whether it is the bad one.
                for batch in flight.batches:
                    batch.solo = True
                resend.extend(flight.batches)
            else:
                completions.extend((batch, error) for batch in flight.batches)
                if reset_sequence_from is None:
                    reset_sequence_from = len(resend)
        first_error = queue.failed[0][1]
        logger.info(
            "%s-%d: %d call(s) failed, first with %s: %s; %d batch(es) to resend, %d failed for good",
            queue.topic,
            queue.partition,
            len(queue.failed),
            type(first_error).__name__,
            first_error,
            len(resend),
            len(completions),
        )
        queue.failed.clear()
        if reset_sequence_from is not None and self._idempotent:
            for batch in itertools.chain(resend[reset_sequence_from:], queue.ready):
                batch.payload = None
            # A fresh id is taken when the next batch is built, so failures in a row cost one id, none at the end.
            queue.producer_id = NO_PRODUCER_ID
            queue.next_sequence = 0
        queue.ready.extendleft(reversed(resend))
        if backoff:
            attempts = max(batch.attempts for batch in resend)
            delay_ms = min(self._retry_backoff_ms * 2 ** (attempts - 1), self._retry_backoff_max_ms)
            queue.retry_at_ns = now + delay_ms * 1_000_000
            # The actor may be a new one under the same name (topic re-created): look it up again.
            queue.handle = None
        return completions

    def _expiry_error(self, batches: list[_ProducerBatch], error: BaseException, now: int) -> BaseException | None:
        """The error that ends these batches' retries, or None while they may be retried."""
        if any(batch.attempts > self._retries for batch in batches):
            return error
        if any(now - batch.created_ns >= self._delivery_timeout_ns for batch in batches):
            return RequestTimedOutError(
                f"delivery_timeout_ms {self._delivery_timeout_ns // 1_000_000} passed since the batch was "
                f"created; last error: {error}"
            )
        return None

    def _complete(self, completions: list[Completion]) -> None:
        """Sets the futures (outside the lock: their callbacks may send), then releases the batches."""
        for batch, outcome in completions:
            if isinstance(outcome, BaseException):
                for future in batch.futures:
                    future.set_exception(outcome)
                if batch.bulk is not None:
                    batch.bulk._failed(outcome)
                continue
            first_offset, log_append_time = outcome
            if batch.bulk is not None:
                batch.bulk._acknowledged(batch.bulk_indices, batch.partition, first_offset, log_append_time)
                continue
            for index, (future, timestamp) in enumerate(zip(batch.futures, batch.timestamps, strict=True)):
                written = timestamp if log_append_time == NO_TIMESTAMP else log_append_time
                future.set_result(RecordMetadata(batch.topic, batch.partition, first_offset + index, written))
        if not completions:
            return
        with self._cond:
            for batch, _ in completions:
                if not batch.done:
                    batch.done = True
                    self._incomplete.discard(batch)
                    self._buffered_bytes -= batch.estimated_bytes - RECORD_BATCH_OVERHEAD
            self._cond.notify_all()


def _acknowledged(batches: list[_ProducerBatch], info: LogAppendInfo) -> list[Completion]:
    """Each batch's record metadata from the offsets the partition assigned (or had assigned, for a duplicate)."""
    if len(info.batch_offsets) != len(batches):
        error = InvalidRequestError(f"the partition answered {len(info.batch_offsets)} batches for {len(batches)}")
        return [(batch, error) for batch in batches]
    return [
        (batch, (first_offset, info.log_append_time))
        for batch, (first_offset, _) in zip(batches, info.batch_offsets, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class _BulkRecords:
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


def _serialize_all(serializer: Callable[[Any], bytes], items: Sequence[Any], what: str) -> list[bytes | None]:
    """Each item serialized (None stays None); bytes pass through the default serializer without a call."""
    if serializer is default_serializer:
        if set(map(type, items)) <= {bytes, type(None)}:
            return list(items)
        return [item if item is None or type(item) is bytes else _serialize(serializer, item, what) for item in items]
    return [None if item is None else _serialize(serializer, item, what) for item in items]


def _lengths(items: list[bytes | None]) -> np.ndarray:
    """Each item's length (0 for None), as an int64 array."""
    try:
        return np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    except TypeError:
        return np.fromiter((0 if item is None else len(item) for item in items), dtype=np.int64, count=len(items))


def _serialize(serializer: Callable[[Any], bytes], value: Any, what: str) -> bytes:
    data = serializer(value)
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if not isinstance(data, bytes):
        raise SerializationError(f"the {what} serializer returned {type(data).__name__}, not bytes")
    return data


def _headers(headers: Iterable[HeaderInput] | None) -> tuple[tuple[str, bytes | None], ...]:
    """Header values as bytes (`str` as UTF-8); keys must be `str`."""
    if headers is None:
        return ()
    result = []
    for header in headers:
        if not isinstance(header, tuple) or len(header) != 2 or not isinstance(header[0], str):
            raise SerializationError(f"a header must be a (str, bytes | None) tuple, got {header!r}")
        name, value = header
        if value is None or isinstance(value, bytes):
            result.append((name, value))
        elif isinstance(value, bytearray | memoryview):
            result.append((name, bytes(value)))
        elif isinstance(value, str):
            result.append((name, value.encode("utf-8")))
        else:
            raise SerializationError(f"header {name!r} has a {type(value).__name__} value; expected bytes or str")
    return tuple(result)


def _check_timestamp(timestamp_ms: object) -> int:
    if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool) or timestamp_ms < 0:
        raise InvalidTimestampError(f"timestamp_ms must be an int >= 0 (ms since the epoch), got {timestamp_ms!r}")
    return timestamp_ms


def _record_size_bound(key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...]) -> int:
    size = RECORD_OVERHEAD_BOUND + len(key or b"") + len(value or b"")
    for name, header_value in headers:
        size += HEADER_OVERHEAD_BOUND + len(name.encode("utf-8")) + len(header_value or b"")
    return size


__all__ = ["Producer", "RecordMetadata", "SendManyFuture"]
