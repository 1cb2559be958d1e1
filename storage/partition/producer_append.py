"""What one append may do to a partition's producer state, judged before anything is written (Kafka's
`ProducerAppendInfo`, for all the producers of one append at once).

Who writes decides what is checked (Kafka's `AppendOrigin`):

- CLIENT, a producer's Produce: epochs, sequences, duplicates and the transaction rules;
- COORDINATOR, a transaction coordinator's markers (or a group coordinator's transactional offset commits):
  epochs and coordinator epochs, no sequences (coordinator writes carry none);
- REPLICATION, a follower copying its leader, and the log replayed when it is loaded or recovered: nothing is
  refused, the leader judged already.

A data batch:
- from an epoch older than the producer's: `InvalidProducerEpochError` (Kafka's answer since 2.7, which lets the
  client abort and retry rather than die);
- CLIENT only: the same epoch and sequence range as one of the producer's last 5 batches is a duplicate, answered
  with that batch's offsets and not written; otherwise the first sequence must follow the last one (wrapping at
  2**31-1 to 0), a new epoch must start at 0, and a producer the partition does not know may start anywhere:
  else `OutOfOrderSequenceError`;
- non-transactional while the producer has a transaction open on the partition: `InvalidTxnStateError`;
- transactional with none open: opens one at the batch's first offset. KIP-890's verification plugs in here: a
  CLIENT batch opening a transaction is first shown to `TransactionVerification.check_transaction_start`, which
  raises (`InvalidTxnStateError`, `OutOfOrderSequenceError`) when the coordinator has not put the partition in the
  producer's transaction.

A COMMIT/ABORT marker:
- from an epoch older than the producer's: `InvalidProducerEpochError`; from a coordinator epoch older than the
  one of the producer's last marker: `TransactionCoordinatorFencedError` (a zombie coordinator);
- closing an open transaction, it completes it (`CompletedTxn`: first offset, marker offset, aborted or not);
- for a producer with no open transaction (a retried marker, an empty transaction, a producer the partition never
  saw), it only records the epoch, coordinator epoch and timestamp: no index entry, no effect on the LSO.

Every batch is judged against the state the batches before it left (a multi-batch append behaves like the same
batches appended one by one); `commit` applies the result only once the whole append is written, so a refused or
failed append leaves the manager untouched. Entries are copied on first touch, not the whole map.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Protocol

from storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.partition.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerEntry,
    ProducerStateManager,
    next_sequence,
)
from storage.records.layout import NO_PRODUCER_EPOCH, ControlRecordType, EndTransactionMarker
from storage.records.record_batch import RecordBatch
from storage.segment.transaction_index import AbortedTxn, TransactionIndex

logger = logging.getLogger(__name__)


class AppendOrigin(enum.Enum):
    """Who writes (Kafka's `AppendOrigin`); see the module docstring for what each is checked for."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class TransactionVerification(Protocol):
    """KIP-890's check, supplied by whoever knows the transaction coordinator's answer for this partition."""

    def check_transaction_start(self, producer_id: int, producer_epoch: int, first_sequence: int) -> None:
        """Raises unless the coordinator has added this partition to the producer's ongoing transaction."""


class PendingAppend:
    """The producer state as it would be after the batches of one append seen so far (see the module docstring)."""

    def __init__(
        self,
        manager: ProducerStateManager,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification: TransactionVerification | None = None,
    ) -> None:
        self._manager = manager
        self._origin = origin
        self._verification = verification
        self._entries: dict[int, ProducerEntry | None] = {}
        self._appended: dict[int, ProducerEntry] = {}
        self._started: list[tuple[int, int]] = []
        self.completed: list[CompletedTxn] = []

    def append_data(
        self, producer_id: int, epoch: int, batch: BatchMetadata, is_transactional: bool
    ) -> BatchMetadata | None:
        """The retained batch `batch` repeats (nothing to write), or None once `batch` is recorded as new."""
        entry = self._entry(producer_id)
        client = self._origin is AppendOrigin.CLIENT
        if client and entry is not None and entry.epoch == epoch:
            for retained in entry.batches:
                if (retained.first_sequence, retained.last_sequence) == (batch.first_sequence, batch.last_sequence):
                    return retained
        self._check_epoch(producer_id, entry, epoch, batch.first_offset)
        if client:
            _check_sequence(producer_id, entry, epoch, batch.first_sequence)
        updated = self._updated(producer_id, entry, epoch)
        if updated.has_open_transaction and not is_transactional:
            if self._origin is not AppendOrigin.REPLICATION:
                raise InvalidTxnStateError(
                    f"producer {producer_id} has a transaction open since offset {updated.current_txn_first_offset} "
                    "and sent a non-transactional batch",
                    offset=batch.first_offset,
                )
            logger.warning(
                "%s: non-transactional batch at %d from producer %d, whose transaction is open",
                self._manager.directory,
                batch.first_offset,
                producer_id,
            )
        elif is_transactional and not updated.has_open_transaction:
            if client and self._verification is not None:
                self._verification.check_transaction_start(producer_id, epoch, batch.first_sequence)
            updated.current_txn_first_offset = batch.first_offset
            self._started.append((batch.first_offset, producer_id))
        updated.add_batch(epoch, batch)
        return None

    def append_marker(
        self, producer_id: int, epoch: int, marker: EndTransactionMarker, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Records a COMMIT/ABORT marker at `offset`; the transaction it completes, if one was open."""
        entry = self._entry(producer_id)
        self._check_epoch(producer_id, entry, epoch, offset)
        known_coordinator_epoch = -1 if entry is None else entry.coordinator_epoch
        if marker.coordinator_epoch < known_coordinator_epoch:
            message = (
                f"marker of producer {producer_id} from coordinator epoch {marker.coordinator_epoch}, older than "
                f"{known_coordinator_epoch}"
            )
            if self._origin is not AppendOrigin.REPLICATION:
                raise TransactionCoordinatorFencedError(message, offset=offset)
            logger.info("%s: %s at offset %d", self._manager.directory, message, offset)
        updated = self._updated(producer_id, entry, epoch)
        completed = None
        if updated.has_open_transaction:
            completed = CompletedTxn(
                producer_id,
                updated.current_txn_first_offset,
                offset,
                marker.control_type == ControlRecordType.ABORT,
            )
            self.completed.append(completed)
        updated.end_transaction(epoch, marker.coordinator_epoch, timestamp)
        return completed

    def append_batch(self, batch: RecordBatch) -> None:
        """Records a batch read from a log (replication, loading, recovery): its data, or its marker."""
        if batch.producer_id < 0:
            return
        if batch.is_control:
            marker = batch.end_transaction_marker()
            if marker is not None:
                self.append_marker(
                    batch.producer_id, batch.producer_epoch, marker, batch.base_offset, batch.max_timestamp
                )
            elif batch.records_count == 0 and self._entry(batch.producer_id) is None:
                # A marker the cleaner emptied: its transaction is gone. Kafka still records the producer, with
                # no epoch (and an entry nothing protects: it expires at the next expiration check).
                self._updated(batch.producer_id, None, NO_PRODUCER_EPOCH)
            return
        metadata = BatchMetadata(
            batch.base_sequence, batch.last_sequence, batch.base_offset, batch.last_offset, batch.max_timestamp
        )
        self.append_data(batch.producer_id, batch.producer_epoch, metadata, batch.is_transactional)

    def commit(self, txn_index: TransactionIndex | None) -> None:
        """Makes the append's state the manager's (after the batches are written), then completes its transactions
        in order, each aborted one indexed in `txn_index` (the segment the append went to; None when only the
        state is rebuilt) with the last stable offset of its marker (Kafka's order: entries, index, completion)."""
        self._manager.put_entries(self._appended, self._started)
        for txn in self.completed:
            if txn.is_aborted and txn_index is not None:
                stable = self._manager.last_stable_offset(txn)
                txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, stable))
            self._manager.complete_txn(txn)

    def _check_epoch(self, producer_id: int, entry: ProducerEntry | None, epoch: int, offset: int) -> None:
        if entry is None or epoch >= entry.epoch:
            return
        message = f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}"
        if self._origin is not AppendOrigin.REPLICATION:
            raise InvalidProducerEpochError(message, offset=offset)
        logger.warning("%s: %s at offset %d", self._manager.directory, message, offset)

    def _entry(self, producer_id: int) -> ProducerEntry | None:
        if producer_id not in self._entries:
            current = self._manager.producers.get(producer_id)
            self._entries[producer_id] = None if current is None else current.copy()
        return self._entries[producer_id]

    def _updated(self, producer_id: int, entry: ProducerEntry | None, epoch: int) -> ProducerEntry:
        """The entry this append changes, created for a producer the partition does not know."""
        if entry is None:
            entry = ProducerEntry(producer_id, epoch)
            self._entries[producer_id] = entry
        self._appended[producer_id] = entry
        return entry


def _check_sequence(producer_id: int, entry: ProducerEntry | None, epoch: int, first_sequence: int) -> None:
    """Raises unless a batch of `epoch` starting at `first_sequence` may follow `entry` (None: unknown producer)."""
    if entry is None or epoch < entry.epoch:
        return
    if epoch > entry.epoch:
        if first_sequence != 0:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} new epoch {epoch} must start at sequence 0, not {first_sequence}"
            )
        return
    expected = next_sequence(entry.last_sequence)
    if first_sequence != expected:
        raise OutOfOrderSequenceError(f"producer {producer_id} sent sequence {first_sequence}, expected {expected}")


def replay_batches(state: ProducerStateManager, txn_index: TransactionIndex | None) -> Callable[[RecordBatch], None]:
    """Applies batches read from a log to `state`, one at a time and unchecked (origin REPLICATION), indexing the
    aborted transactions they complete in `txn_index`: what recovery does while it re-reads a segment."""

    def replay(batch: RecordBatch) -> None:
        if batch.producer_id < 0:
            return
        pending = PendingAppend(state, AppendOrigin.REPLICATION)
        pending.append_batch(batch)
        pending.commit(txn_index)

    return replay
