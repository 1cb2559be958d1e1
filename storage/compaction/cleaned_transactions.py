"""The transaction rules of compaction (Kafka's `CleanedTransactionMetadata` and the cleaner's pre-scan).

Data batches of aborted transactions are dropped whatever their keys; a COMMIT/ABORT marker stays while any data
batch of its transaction is still in the log (seen in this pass), then goes like a tombstone; the last batch of a
producer still active stays, possibly emptied, so its sequence and epoch survive (Kafka's RETAIN_EMPTY).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS
from storage.records.record_batch import (
    ControlRecordType,
    RecordBatch,
)
from storage.segment.log_segment import LogSegment


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction still in the log: its first data offset and the offset of its ABORT marker."""

    producer_id: int
    first_offset: int
    marker_offset: int


@dataclass(frozen=True, slots=True)
class ProducerLastBatch:
    """A producer's latest state in the log: its last data batch's last offset (None if it wrote only
    markers), its latest epoch and the max timestamp of its latest batch."""

    last_data_offset: int | None
    producer_epoch: int
    last_timestamp: int


@dataclass(frozen=True)
class TransactionScan:
    """What the pre-scan learned (see the module docstring, step 1)."""

    aborted: tuple[AbortedTxn, ...]
    first_unstable_offset: int | None
    producers: Mapping[int, ProducerLastBatch]

    def is_last_batch_of_active_producer(self, batch: RecordBatch, now_ms: int) -> bool:
        """Kafka's rule for RETAIN_EMPTY: the batch holds the producer's last data offset, or, for a producer
        that wrote only markers, it is a marker of the producer's latest epoch."""
        last = self.producers.get(batch.producer_id)
        if last is None or now_ms - last.last_timestamp >= PRODUCER_ID_EXPIRATION_MS:
            return False
        if last.last_data_offset is not None:
            return batch.last_offset == last.last_data_offset
        return batch.is_control and batch.producer_epoch == last.producer_epoch


def scan_transactions(segments: Iterable[LogSegment]) -> TransactionScan:
    """Reads every batch header once (control batches fully) to build a `TransactionScan`."""
    open_first: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    producers: dict[int, ProducerLastBatch] = {}
    for segment in segments:
        for batch in segment.log.batches(0):
            if not isinstance(batch, RecordBatch) or batch.producer_id < 0:
                continue
            producer_id = batch.producer_id
            previous = producers.get(producer_id)
            if batch.is_control:
                if batch.records_count > 0 and batch.control_type() == ControlRecordType.ABORT:
                    first = open_first.get(producer_id)
                    if first is not None:
                        aborted.append(AbortedTxn(producer_id, first, batch.base_offset))
                if batch.is_transactional:
                    open_first.pop(producer_id, None)
                last_data_offset = previous.last_data_offset if previous is not None else None
            else:
                if batch.is_transactional:
                    open_first.setdefault(producer_id, batch.base_offset)
                last_data_offset = batch.last_offset
            producers[producer_id] = ProducerLastBatch(last_data_offset, batch.producer_epoch, batch.max_timestamp)
    aborted.sort(key=lambda txn: txn.first_offset)
    return TransactionScan(tuple(aborted), min(open_first.values(), default=None), producers)


class TransactionTracker:
    """Transaction state while walking batches in offset order (Kafka's `CleanedTransactionMetadata`)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._ongoing_aborted: dict[int, bool] = {}  # producer id -> a batch of it was seen
        self._ongoing_committed: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            self._ongoing_aborted[self._pending.popleft().producer_id] = False

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """For a data batch: True when it belongs to an aborted transaction (its records must go)."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        if batch.producer_id in self._ongoing_aborted:
            self._ongoing_aborted[batch.producer_id] = True
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """For a control batch: True when no data of its transaction was seen, so the marker may go."""
        self._consume_up_to(batch.last_offset)
        if batch.records_count == 0:
            return True
        control_type = batch.control_type()
        if control_type == ControlRecordType.ABORT:
            return not self._ongoing_aborted.pop(batch.producer_id, False)
        if control_type == ControlRecordType.COMMIT:
            seen = batch.producer_id in self._ongoing_committed
            self._ongoing_committed.discard(batch.producer_id)
            return not seen
        return False
