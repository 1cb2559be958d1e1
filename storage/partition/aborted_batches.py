"""Which fetched batches a read_committed consumer drops: Kafka's client-side rule (`CompletedFetch`).

A read_committed fetch answers the batches below the last stable offset and a list of aborted transactions
(producer id, first offset) overlapping them (`storage.partition.log_read`). The reader walks the batches in offset
order with the list sorted by first offset; before each batch of a producer (`producer_id` >= 0) it takes every
listed transaction whose first offset is at or below the batch's last offset into a set of aborted producers. A
transactional data batch of a producer in that set belongs to an aborted transaction and is dropped; that
producer's ABORT marker takes it out of the set again (its later transactions may commit). Control batches (the
markers) are never records for the application: the caller skips them at every isolation level.

Every Python reader of raybroker applies it the same way: the consumer facade (`actors.clients.consumer`) and the
bulk Arrow decoder of the Spark bridge and Ray Data (`cluster.records.arrow_records`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from storage.records.record_batch import ControlRecordType, RecordBatch
from storage.segment.transaction_index import AbortedTxn


class AbortedBatches:
    """The aborted-transaction filter of one fetch's batches (see the module docstring); feed it the fetch's
    batches in order."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._producers: set[int] = set()

    def drops(self, batch: RecordBatch) -> bool:
        """Whether `batch` is a data batch of an aborted transaction (its records are not read)."""
        producer_id = batch.producer_id
        if producer_id < 0:
            return False
        pending = self._pending
        while pending and pending[0].first_offset <= batch.last_offset:
            self._producers.add(pending.popleft().producer_id)
        if batch.is_control:
            if batch.control_type() is ControlRecordType.ABORT:
                self._producers.discard(producer_id)
            return False
        return batch.is_transactional and producer_id in self._producers


__all__ = ["AbortedBatches"]
