"""The producer's record accumulator (Kafka's `RecordAccumulator`): per-partition batches waiting to be sent.

Plain Python, no Ray: the producer's threads append records, its sender thread drains closed batches, and the
accumulator in between owns the batches, the `buffer.memory` bound and the choice of partition for records
without a key. Time comes from the injected `storage.clock.Clock`, so linger is testable with `MockClock`.

- A partition has at most one open batch, which `send` appends to, and a queue of closed batches, which the
  sender drains in order. A batch is closed when its size bound reaches `batch_size` (a record larger than
  that gets a batch of its own), when it is `linger_ms` old (`ready`), during a flush, or when `send_many`
  queues after it. `send_many` cuts its records into whole batches at once, closed from the start.
- Null keys (KIP-480, `actors.clients.partitioner.StickyPartitionCache`): a record without key goes to the
  topic's sticky partition until it would start a new batch there; then the topic moves to another one.
  `send_many` moves the topic on after each batch's worth (`batch_size`) of null-key records.
- Memory bound (`buffer.memory`, `max.block.ms`): an append waits while the records not yet acknowledged
  take more than `buffer_memory` bytes (their size bounds; one record may always go), pushing the open
  batches out meanwhile, and raises `RequestTimedOutError` after `max_block_ms`. A batch's bytes are
  released by `deallocate` once the sender has answered it.
- The sender is woken through `wakeup` only when there is news for it: a batch closed, a new batch whose
  linger deadline it must start waiting for, a flush, or an append waiting for memory.

Thread-safe: every method takes the accumulator's lock. Futures are answered outside it, as their
callbacks may send again.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from actors.clients.futures import RecordMetadata, SendManyFuture
from actors.clients.partitioner import StickyPartitionCache, partitions_for_keys
from actors.clients.producer_batch import BulkRecords, Headers, ProducerBatch
from storage.clock import Clock
from storage.errors import RequestTimedOutError
from storage.records.compression import CompressionType
from storage.records.record_batch import RECORD_BATCH_OVERHEAD
from storage.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """What `ready` found: the partitions holding closed batches, in the order they were first appended to,
    and the earliest linger deadline of a batch still open (None: no batch is open)."""

    partitions: list[TopicPartition]
    next_linger_deadline_ns: int | None


@dataclass(eq=False)
class _PartitionBatches:
    """One partition's open batch and its closed batches, oldest first."""

    open: ProducerBatch | None = None
    closed: deque[ProducerBatch] = field(default_factory=deque)


class RecordAccumulator:
    """Batches records per partition until the sender drains them; see the module docstring."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        max_block_ms: int,
        compression: CompressionType,
        clock: Clock,
        wakeup: Callable[[], None],
        sticky: StickyPartitionCache | None = None,
    ) -> None:
        self._batch_size = batch_size
        self._linger_ns = linger_ms * 1_000_000
        self._buffer_memory = buffer_memory
        self._max_block_s = max_block_ms / 1000
        self._compression = compression
        self._clock = clock
        self._wakeup = wakeup
        self._sticky = sticky or StickyPartitionCache()
        # `append` takes the lock itself: `Condition.__enter__` and `__exit__` are two Python calls per record.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._partitions: dict[TopicPartition, _PartitionBatches] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._buffered_bytes = 0
        self._flushes_in_progress = 0

    @property
    def buffered_bytes(self) -> int:
        """The size bounds of the records appended and not yet acknowledged or failed."""
        return self._buffered_bytes

    # --- appending -------------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int | None,
        num_partitions: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        size: int,
    ) -> Future[RecordMetadata]:
        """Appends one record (`size`: its `record_size_bound`) to its partition's open batch; `partition`
        None places it on the topic's sticky partition. Returns the future its batch will answer."""
        with self._lock:
            # `_wait_for_buffer`'s own first test, made here: the call per record costs more than the test.
            if self._buffered_bytes + size > self._buffer_memory and self._buffered_bytes:
                self._wait_for_buffer(size)
            if partition is None:
                partition = self._sticky.partition(topic, num_partitions)
                current = self._batches(topic, partition).open
                if current is None or not current.fits(size, self._batch_size):
                    partition = self._sticky.on_new_batch(topic, partition, num_partitions)
            batches = self._partitions.get((topic, partition)) or self._batches(topic, partition)
            batch = batches.open
            # A record joining an open batch is no news for the sender (a wake-up per record cost ~6 us of
            # Event locking, a third of `send`).
            wake = False
            if batch is not None and not batch.fits(size, self._batch_size):
                self._close_open(batches)
                batch = None
            if batch is None:
                batch = ProducerBatch(topic, partition, self._clock.nanoseconds(), self._compression)
                batches.open = batch
                self._incomplete.add(batch)
                wake = True
            future = batch.append(key, value, timestamp, headers, size)
            self._buffered_bytes += size
            if batch.estimated_bytes >= self._batch_size:
                self._close_open(batches)
                wake = True
        if wake:
            self._wakeup()
        return future

    def append_many(
        self, topic: str, partition: int | None, num_partitions: int, records: BulkRecords
    ) -> SendManyFuture:
        """Queues the records of one `send_many` call as closed batches of up to `batch_size` bytes each, after
        any batch `send` left open on their partitions. `partition` None: keyed records go where
        `partitions_for_keys` puts them, null-key ones fill a batch's worth on the topic's sticky partition
        before it moves on. Returns the one future all the batches answer."""
        future = SendManyFuture(topic, records.timestamps)
        with self._cond:
            for chosen, indices in self._place_bulk(topic, num_partitions, partition, records):
                self._queue_bulk(future, topic, chosen, records, indices)
        future._seal()
        self._wakeup()
        return future

    def _place_bulk(
        self, topic: str, num_partitions: int, partition: int | None, records: BulkRecords
    ) -> list[tuple[int, Sequence[int]]]:
        """Where the records go: (partition, indices) pieces, each partition's records in the order given.
        Holds the lock, so the sticky partition moves for one call at a time."""
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
            placed[keyed] = partitions_for_keys([key for key in keys if key is not None], num_partitions)
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
        self, future: SendManyFuture, topic: str, partition: int, records: BulkRecords, indices: Sequence[int]
    ) -> None:
        """Cuts `indices` (records of `partition`, in order) into batches of up to `batch_size` bytes and queues
        them closed, after any batch `send` left open there. Holds the lock."""
        batches = self._batches(topic, partition)
        self._close_open(batches)
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
            batch = ProducerBatch(topic, partition, self._clock.nanoseconds(), self._compression)
            batch.bulk_records = records
            batch.estimated_bytes += size
            batch.bulk = future
            batch.bulk_indices = chunk
            future._add_batch()
            self._buffered_bytes += size
            self._incomplete.add(batch)
            batches.closed.append(batch)
            position += len(chunk)

    def _batches(self, topic: str, partition: int) -> _PartitionBatches:
        batches = self._partitions.get((topic, partition))
        if batches is None:
            batches = self._partitions[(topic, partition)] = _PartitionBatches()
        return batches

    @staticmethod
    def _close_open(batches: _PartitionBatches) -> None:
        if batches.open is not None:
            batches.closed.append(batches.open)
            batches.open = None

    def _wait_for_buffer(self, size: int) -> None:
        """Blocks while unacknowledged records hold `buffer_memory` bytes (one record may always go), the open
        batches being pushed out meanwhile as during a flush. Holds the lock."""
        if self._buffered_bytes + size <= self._buffer_memory or self._buffered_bytes == 0:
            return
        self._flushes_in_progress += 1
        self._wakeup()
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
            self._flushes_in_progress -= 1

    # --- the sender's side -----------------------------------------------------------------------

    def ready(self, now_ns: int) -> ReadyCheck:
        """Closes the open batches that lingered `linger_ms` (all of them during a flush), and tells which
        partitions have closed batches to drain and when the next open batch is due."""
        partitions: list[TopicPartition] = []
        next_deadline_ns: int | None = None
        with self._cond:
            for tp, batches in self._partitions.items():
                batch = batches.open
                if batch is not None:
                    deadline_ns = batch.created_ns + self._linger_ns
                    if self._flushes_in_progress or now_ns >= deadline_ns:
                        self._close_open(batches)
                    elif next_deadline_ns is None or deadline_ns < next_deadline_ns:
                        next_deadline_ns = deadline_ns
                if batches.closed:
                    partitions.append(tp)
        return ReadyCheck(partitions, next_deadline_ns)

    def drain(self, tp: TopicPartition, max_batches: int, max_bytes: int) -> list[ProducerBatch]:
        """The next closed batches of `tp` for one call, taken off its queue: in order, at most `max_batches`,
        their size bounds within `max_bytes` (the first always goes), and a `solo` batch alone."""
        with self._cond:
            batches = self._partitions.get(tp)
            if batches is None or not batches.closed or max_batches < 1:
                return []
            closed = batches.closed
            taken = [closed.popleft()]
            size = taken[0].estimated_bytes
            while (
                not taken[0].solo
                and len(taken) < max_batches
                and closed
                and not closed[0].solo
                and size + closed[0].estimated_bytes <= max_bytes
            ):
                batch = closed.popleft()
                taken.append(batch)
                size += batch.estimated_bytes
            return taken

    def reenqueue(self, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
        """Puts drained batches back at the head of `tp`'s queue, in the given order, to be sent again."""
        with self._cond:
            self._batches(*tp).closed.extendleft(reversed(batches))

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The closed batches of `tp` waiting to be drained, oldest first."""
        with self._cond:
            batches = self._partitions.get(tp)
            return [] if batches is None else list(batches.closed)

    def deallocate(self, batches: Sequence[ProducerBatch]) -> None:
        """Marks the batches done (their futures answered) and releases their bytes from `buffer_memory`."""
        with self._cond:
            for batch in batches:
                if not batch.done:
                    batch.done = True
                    self._incomplete.discard(batch)
                    self._buffered_bytes -= batch.estimated_bytes - RECORD_BATCH_OVERHEAD
            self._cond.notify_all()

    def flush(self, timeout_s: float | None) -> bool:
        """Closes every open batch at once (through the sender) and waits until each batch appended so far is
        done; False if that takes longer than `timeout_s` seconds (None: no limit)."""
        with self._cond:
            pending = [batch for batch in self._incomplete if not batch.done]
            self._flushes_in_progress += 1
            self._wakeup()
            try:
                return self._cond.wait_for(lambda: all(batch.done for batch in pending), timeout_s)
            finally:
                self._flushes_in_progress -= 1

    def abort_incomplete_batches(self, error: BaseException) -> None:
        """Fails every batch not done yet with `error`, wherever it is (open, closed or in flight)."""
        with self._cond:
            leftover = [batch for batch in self._incomplete if not batch.done]
        for batch in leftover:
            batch.fail(error)
        self.deallocate(leftover)


__all__ = ["ReadyCheck", "RecordAccumulator"]
