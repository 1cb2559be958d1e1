"""The transaction rules of compaction (Kafka's `CleanedTransactionMetadata`), and the producers whose last
batch must survive it.

Data batches of aborted transactions are dropped whatever their keys. Which transactions were aborted comes from
the `.txnindex` files (`transaction_index.collect_aborted_transactions` over the range cleaned), as in Kafka; a
pass never reaches past the last stable offset, so every transaction it meets is decided. A COMMIT/ABORT marker
stays while any data batch of its transaction is still in the log (seen in this pass), then goes like a tombstone
(a delete horizon first, removal once it passed). An ABORT marker kept because its data was seen in this pass
keeps its `.txnindex` entry in the cleaned segment (`TransactionTracker.cleaned_index`), so the rebuilt index
holds exactly the aborted transactions still present.

The last batch of a producer still active stays, possibly emptied, so its sequence and epoch survive (Kafka's
RETAIN_EMPTY): `scan_producers` reads each producer's latest batch from the batch headers of the log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS
from storage.records.record_batch import ControlRecordType, RecordBatch
from storage.segment.log_segment import LogSegment
from storage.segment.transaction_index import AbortedTxn, TransactionIndex


@dataclass(frozen=True, slots=True)
class ProducerLastBatch:
    """A producer's latest state in the log: its last data batch's last offset (None if it wrote only
    markers), its latest epoch and the max timestamp of its latest batch."""

    last_data_offset: int | None
    producer_epoch: int
    last_timestamp: int


@dataclass(frozen=True)
class ProducerScan:
    """Each producer's latest batch in the log."""

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


def scan_producers(segments: Iterable[LogSegment]) -> ProducerScan:
    """Reads every batch header once to build a `ProducerScan`."""
    producers: dict[int, ProducerLastBatch] = {}
    for segment in segments:
        for batch in segment.log.batches(0):
            if not isinstance(batch, RecordBatch) or batch.producer_id < 0:
                continue
            previous = producers.get(batch.producer_id)
            if batch.is_control:
                last_data_offset = previous.last_data_offset if previous is not None else None
            else:
                last_data_offset = batch.last_offset
            producers[batch.producer_id] = ProducerLastBatch(
                last_data_offset, batch.producer_epoch, batch.max_timestamp
            )
    return ProducerScan(producers)


class TransactionTracker:
    """Transaction state while walking batches in offset order (Kafka's `CleanedTransactionMetadata`).
    `cleaned_index`, when set, receives the entries of the ABORT markers kept for their data."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        # Producer id -> its aborted transaction under way, and whether a data batch of it was seen.
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: TransactionIndex | None = None

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """For a data batch: True when it belongs to an aborted transaction (its records must go)."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            self._ongoing_aborted[batch.producer_id] = (ongoing[0], True)
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
            ongoing = self._ongoing_aborted.pop(batch.producer_id, None)
            if ongoing is None or not ongoing[1]:
                return True
            if self.cleaned_index is not None:
                self.cleaned_index.append(ongoing[0])
            return False
        if control_type == ControlRecordType.COMMIT:
            seen = batch.producer_id in self._ongoing_committed
            self._ongoing_committed.discard(batch.producer_id)
            return not seen
        return False
