"""The transaction coordinator: transactional producers' ids, epochs and transactions, kept as Kafka's
`TransactionCoordinator` and `TransactionStateManager` keep them (the TV1 protocol of Kafka 3.9), as a plain class
over injected seams.

State it owns, and where it is persisted: one `TransactionMetadata` per transactional id, each transition written
as a record (Kafka's TransactionLogKey / TransactionLogValue v0, `storage.records.transaction_log`) to the
internal compacted topic `__transaction_state` (`actors.core.transactions.state_topic`), partition
`partition_for_transactional_id(id, partitions)`. A transition is applied in memory only once its record is
appended; a failed append leaves the id as it was (COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR to the client,
which retries) and unloads the partition. Before a partition of the topic is first used, it is claimed, then read
from its log start to its high watermark: the latest value per id wins, a tombstone removes the id, unknown key
versions and malformed records are skipped. Every PrepareCommit/PrepareAbort found is completed: its markers are
sent again, then CompleteCommit/CompleteAbort is written. Ongoing transactions are left to the timeout task.

Fencing: a coordinator claims each partition in its coordinator epoch before reading it and writes every state in
that epoch (`actors.core.coordinator_claims`), so one left running beside its successor writes nothing after the
successor loaded; its refused write answers NOT_COORDINATOR. The claim is a tombstone for the empty transactional id
(`FENCING_ID`: Kafka refuses an empty id, so no producer's state has it, and Kafka's loader, as this one, reads it as
the removal of nothing). The markers carry the same epoch as their coordinator epoch, so a partition that took a
successor's marker for a producer refuses the predecessor's (`TransactionCoordinatorFencedError`).

Markers: once PrepareCommit/PrepareAbort is durable the client's EndTxn is answered NONE, as Kafka answers it; the
COMMIT/ABORT markers are written through the `TransactionMarkers` seam (`actors.core.transactions.markers`: every
partition's at once, as Kafka sends one WriteTxnMarkers per broker to all brokers together; the in-process broker writes
them to the partitions' leaders, on Ray the partition actors do), and when every partition has its marker the Complete
state is written. Without a `completions` seam that happens inside the EndTxn call, before its answer; with one (the Ray
actor's background thread) EndTxn answers first and the seam runs the completion, and a call for the id meanwhile waits
for it up to `COMPLETION_WAIT_S` before answering CONCURRENT_TRANSACTIONS. A partition whose marker cannot be written
now (leader moving, broker restarting) keeps the transaction in Prepare*, and `send_pending_markers` (run every
`transaction.abort.timed.out.transaction.cleanup.interval.ms` by `run_scheduled`, and at each call touching the id)
tries again; meanwhile the id answers CONCURRENT_TRANSACTIONS, as Kafka's does. A marker refused for an older producer
epoch or coordinator epoch means a newer one owns the transaction: the partition counts as done, as Kafka's marker
handler does. A partition of a deleted topic counts as done too.

Answers (Kafka 3.9's, see the `TxnError` names): InitProducerId with an Ongoing transaction fences it (epoch bumped,
PrepareAbort written with the bumped epoch, markers sent) and answers CONCURRENT_TRANSACTIONS; the client's retry
bumps again, so a restarted producer's epoch rises by 2. A transaction aborted on its timeout is fenced the same
way, but its epoch is remembered as the last one (memory only), so its own producer may resume: InitProducerId
naming that epoch is taken as a retry of the bump and answered the current epoch (KIP-360), where a producer fenced
by a newer one is refused PRODUCER_FENCED. A producer whose epoch reaches 32766 gets a new producer id
at epoch 0. PRODUCER_FENCED is answered here whatever the request version; the protocol layer turns it into
INVALID_PRODUCER_EPOCH for versions before Kafka introduced it.

Thread-safe: one lock, held across each call's appends, so an id's records reach the log in the order of its
transitions. Seams: the clock, the controller (`TopicAdmin`: create and describe `__transaction_state`),
`find_partition(p)` (the leader replica of its partition `p`), `allocate_producer_id()` (the controller's cluster-unique
ids), `allocate_coordinator_epoch(at_least)` (the controller's coordinator epochs), `markers`, and optionally
`completions` (runs a transaction's markers and Complete state after EndTxn is answered, on a thread of its own)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from actors.core.controller.topic_metadata import TRANSACTION_STATE_TOPIC
from actors.core.coordinator_claims import CoordinatorClaims
from actors.core.internal_topics import InternalPartition, TopicAdmin, internal_batches, load_reachable
from actors.core.transactions.markers import TransactionMarker, TransactionMarkers
from actors.core.transactions.state_topic import ensure_transaction_state_topic
from actors.core.transactions.transaction_metadata import (
    EXHAUSTED_EPOCH,
    IDLE_STATES,
    PREPARE_STATES,
    TRANSACTION_VERSION_2,
    TransactionMetadata,
    TransactionState,
    TxnError,
)
from storage.clock import Clock
from storage.config.transaction_config import TransactionConfig
from storage.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    RaybrokerError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from storage.logdir.scheduler import Scheduler
from storage.partition.log import LogAppendInfo
from storage.records.layout import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ControlRecordType
from storage.records.transaction_log import (
    decode_transaction_log_key,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_value,
    partition_for_transactional_id,
)
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# Bytes read per call while loading a partition: Kafka's `transaction.state.log.load.buffer.size` (5 MiB).
LOAD_CHUNK_BYTES = 5 * 1024 * 1024
# How long a call for an id whose markers are being written waits for them before answering
# CONCURRENT_TRANSACTIONS. Kafka answers at once, and its clients retry AddPartitionsToTxn after 20 ms (librdkafka's
# and the Java producer's backoff for that error); the markers of a one-partition transaction take 2-3 ms here, so a
# producer starting its next transaction waits that long rather than 20 ms.
COMPLETION_WAIT_S = 0.02
_S = TransactionState
# The transactional id of the tombstone a coordinator claims a partition with: Kafka refuses an empty transactional
# id, so no state of a producer ever has it, and Kafka's loader, as this one, takes it as a removal of nothing.
FENCING_ID = ""
FENCING_KEY = encode_transaction_log_key(FENCING_ID)
# An id's partition is looked up several times a transaction (its state, each append, its markers' coordinator
# epoch), and hashing the id as Java does is a Python loop over its characters: the recent ids' partitions are kept.
_partition_of = functools.lru_cache(maxsize=4096)(partition_for_transactional_id)


class TransactionLogPartition(InternalPartition, Protocol):
    """The leader replica of one `__transaction_state` partition, as the coordinator reads and appends to it."""

    def append_replicated(self, batch: bytes) -> LogAppendInfo:
        """Appends one batch with acks=all; answers once every in-sync replica has it (Kafka's coordinator appends
        `__transaction_state` with acks -1: a state the client was answered on survives the leader's loss)."""
        ...

    def leader_epoch(self) -> int:
        """The partition's leader epoch as the controller elected this leader: the coordinator epoch of what the
        coordinator loads from it (Kafka's). The controller's, not the replica's log: a replica not yet told it
        leads still names an older epoch, and markers sent with it would be refused as from a fenced coordinator."""
        ...


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: TxnError
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id as DescribeTransactions and ListTransactions show it."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    """An EndTxn v5+ answer: the error, and the producer id and epoch for the producer's next transaction."""

    error: TxnError
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def _next_producer(metadata: TransactionMetadata) -> tuple[int, int]:
    """The producer id and epoch a transactions-v2 producer goes on with after the transaction `metadata` ends."""
    if metadata.next_producer_id != NO_PRODUCER_ID:
        return metadata.next_producer_id, 0
    return metadata.producer_id, metadata.producer_epoch


def _is_end_txn_retry(metadata: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Whether an EndTxn names the producer id and epoch the last transactions-v2 EndTxn ended with."""
    if metadata.client_transaction_version < TRANSACTION_VERSION_2 or metadata.last_producer_epoch == NO_PRODUCER_EPOCH:
        return False
    return producer_epoch == metadata.last_producer_epoch and producer_id == metadata.last_producer_id


class TransactionCoordinator:
    """Transactional ids, their producer ids and transactions; see the module docstring. Thread-safe."""

    def __init__(
        self,
        config: TransactionConfig,
        *,
        clock: Clock,
        controller: TopicAdmin,
        find_partition: Callable[[int], TransactionLogPartition],
        allocate_producer_id: Callable[[], int],
        allocate_coordinator_epoch: Callable[[int], int],
        markers: TransactionMarkers,
        completions: Callable[[Callable[[], None]], object] | None = None,
        completion_wait_s: float = COMPLETION_WAIT_S,
    ) -> None:
        self._config = config
        self._clock = clock
        self._controller = controller
        self._find_partition = find_partition
        self._allocate_producer_id = allocate_producer_id
        self._markers = markers
        self._completions = completions
        self._completion_wait_s = completion_wait_s
        self._lock = threading.RLock()
        # Ids whose markers and Complete state an EndTxn handed to `completions` and which are not written yet.
        self._completing: set[str] = set()
        self._completed = threading.Condition(self._lock)
        metadata = ensure_transaction_state_topic(controller, config)
        self._partition_count = len(metadata.partitions)
        self._handles: dict[int, TransactionLogPartition] = {}
        self._claims = CoordinatorClaims(allocate_coordinator_epoch)
        self._transactions: dict[str, TransactionMetadata] = {}

    # --- loading -------------------------------------------------------------------------------------------------

    def ready(self) -> int:
        """Loads every partition it can reach now; returns how many are loaded (the others load on first use)."""
        with self._lock:
            load_reachable(TRANSACTION_STATE_TOPIC, self._partition_count, self._loaded_partition)
            return len(self._handles)

    def partition_for(self, transactional_id: str) -> int:
        return _partition_of(transactional_id, self._partition_count)

    def _loaded_partition(self, partition: int) -> TransactionLogPartition:
        handle = self._handles.get(partition)
        if handle is None:
            handle = self._find_partition(partition)
            self._claims.claim(partition, handle, FENCING_KEY, self._clock.milliseconds())
            try:
                loaded = self._load(partition, handle)
            except BaseException:
                self._claims.release(partition)
                raise
            self._handles[partition] = handle
            self._transactions.update(loaded)
            for metadata in loaded.values():
                if metadata.state in PREPARE_STATES:
                    self._send_markers(metadata)
        return handle

    def _unload(self, partition: int) -> None:
        """Forgets a partition whose write failed: its leader may have moved or gone, a timed-out append may still
        land, or a successor fenced this coordinator. Its next use claims and loads it again in a new epoch, as
        Kafka's coordinator resigns and a new one loads."""
        self._handles.pop(partition, None)
        self._claims.release(partition)
        for transactional_id in [tid for tid in self._transactions if self.partition_for(tid) == partition]:
            del self._transactions[transactional_id]

    def _load(self, partition: int, handle: TransactionLogPartition) -> dict[str, TransactionMetadata]:
        loaded: dict[str, TransactionMetadata] = {}
        name = f"{TRANSACTION_STATE_TOPIC}-{partition}"
        for batch in internal_batches(handle, name, LOAD_CHUNK_BYTES):
            if batch.is_control:
                continue
            for record in batch.records():
                try:
                    self._apply(loaded, record.key, record.value)
                except CorruptRecordError as exc:
                    logger.warning("%s offset %d skipped: %s", name, record.offset, exc)
        return loaded

    @staticmethod
    def _apply(loaded: dict[str, TransactionMetadata], key: bytes | None, value: bytes | None) -> None:
        if key is None:
            raise CorruptRecordError("a transaction log record without a key")
        transactional_id = decode_transaction_log_key(key)
        if transactional_id is None:
            return
        if value is None:
            loaded.pop(transactional_id, None)
        else:
            loaded[transactional_id] = TransactionMetadata.from_value(
                transactional_id, decode_transaction_log_value(value)
            )

    def _metadata(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's state, its partition loaded first (and its pending markers retried). A transaction whose
        completion runs in the background is waited for, up to `completion_wait_s`. Holds the lock."""
        self._loaded_partition(self.partition_for(transactional_id))
        if transactional_id in self._completing:
            self._completed.wait_for(lambda: transactional_id not in self._completing, self._completion_wait_s)
            if transactional_id in self._completing:
                return self._transactions.get(transactional_id)
        metadata = self._transactions.get(transactional_id)
        if metadata is not None and metadata.markers_left:
            metadata = self._send_markers(metadata)
        return metadata

    # --- writing states ------------------------------------------------------------------------------------------

    def _write(self, metadata: TransactionMetadata) -> TxnError:
        """Appends `metadata`'s state (a tombstone for Dead), then makes it the cached one; the client's error if
        the append failed (Kafka's mapping of `__transaction_state` append errors), the partition unloaded then.
        Holds the lock."""
        transactional_id = metadata.transactional_id
        partition = self.partition_for(transactional_id)
        value = None if metadata.state == _S.DEAD else encode_transaction_log_value(metadata.to_value())
        try:
            self._loaded_partition(partition)
            key = encode_transaction_log_key(transactional_id)
            self._claims.append(partition, [(key, value)], self._clock.milliseconds())
        except RaybrokerError as exc:
            logger.warning("%s: state not written: %s", transactional_id, exc)
            self._unload(partition)
            if isinstance(exc, (NotLeaderOrFollowerError, KafkaStorageError, InvalidProducerEpochError)):
                return TxnError.NOT_COORDINATOR
            return TxnError.COORDINATOR_NOT_AVAILABLE
        if metadata.state == _S.DEAD:
            self._transactions.pop(transactional_id, None)
        else:
            self._transactions[transactional_id] = metadata
        return TxnError.NONE

    # --- InitProducerId ----------------------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        """A transactional producer's InitProducerId (Kafka's `handleInitProducerId`); `producer_id` and
        `producer_epoch` are what a v3+ client names to resume (-1: none)."""
        if not isinstance(transactional_id, str) or not transactional_id:
            return InitProducerIdResult(TxnError.INVALID_REQUEST)
        if (
            not _is_int(transaction_timeout_ms)
            or not 0 < transaction_timeout_ms <= self._config.transaction_max_timeout_ms
        ):
            return InitProducerIdResult(TxnError.INVALID_TRANSACTION_TIMEOUT)
        if not (_is_int(producer_id) and _is_int(producer_epoch)):
            return InitProducerIdResult(TxnError.INVALID_REQUEST)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        with self._lock:
            now_ms = self._clock.milliseconds()
            metadata = self._metadata(transactional_id)
            if metadata is None:
                metadata = TransactionMetadata(
                    transactional_id, self._allocate_producer_id(), NO_PRODUCER_EPOCH, transaction_timeout_ms, _S.EMPTY
                )
                expected = None
            elif expected is not None and not _is_valid_producer_id(metadata, expected[0]):
                return InitProducerIdResult(TxnError.PRODUCER_FENCED)
            if metadata.state in PREPARE_STATES:
                return InitProducerIdResult(TxnError.CONCURRENT_TRANSACTIONS)
            if metadata.state == _S.ONGOING:
                self._fence_and_abort(metadata, now_ms)
                return InitProducerIdResult(TxnError.CONCURRENT_TRANSACTIONS)
            if metadata.epoch_exhausted:
                bumped = metadata.to(
                    _S.EMPTY,
                    now_ms,
                    producer_id=self._allocate_producer_id(),
                    producer_epoch=0,
                    last_producer_id=metadata.producer_id,
                    last_producer_epoch=metadata.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                    timeout_ms=transaction_timeout_ms,
                    start_ms=-1,
                )
            else:
                epochs = _bumped_epoch(metadata, None if expected is None else expected[1])
                if epochs is None:
                    return InitProducerIdResult(TxnError.PRODUCER_FENCED)
                epoch, last_epoch = epochs
                bumped = metadata.to(
                    _S.EMPTY,
                    now_ms,
                    producer_epoch=epoch,
                    last_producer_epoch=last_epoch,
                    timeout_ms=transaction_timeout_ms,
                    start_ms=-1,
                )
            error = self._write(bumped)
            if error != TxnError.NONE:
                return InitProducerIdResult(error)
            return InitProducerIdResult(TxnError.NONE, bumped.producer_id, bumped.producer_epoch)

    def _fence_and_abort(self, metadata: TransactionMetadata, now_ms: int, *, resumable: bool = False) -> None:
        """Kafka's `prepareFenceProducerEpoch` then abort: the epoch is bumped in memory (not again if the last
        fence's write failed), PrepareAbort is written with it, and the markers are sent with it. `resumable` (a
        timeout, not a newer producer): the epoch fenced is remembered as the last one, so its producer may resume
        with InitProducerId naming it (KIP-360) and take the bumped epoch after aborting its side."""
        epoch = metadata.producer_epoch if metadata.has_failed_epoch_fence else metadata.producer_epoch + 1
        last_epoch = epoch - 1 if resumable else NO_PRODUCER_EPOCH
        fenced = replace(metadata, producer_epoch=epoch, last_producer_epoch=last_epoch)
        self._transactions[metadata.transactional_id] = replace(fenced, has_failed_epoch_fence=True)
        aborting = fenced.to(_S.PREPARE_ABORT, now_ms, markers_left=fenced.partitions, has_failed_epoch_fence=False)
        if self._write(aborting) == TxnError.NONE:
            self._send_markers(aborting)

    # --- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------------------------

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        """Adds `partitions` to the producer's transaction (Kafka's `handleAddPartitionsToTransaction`); the
        caller checked the topics exist and may be written (AddOffsetsToTxn adds the group's
        `__consumer_offsets` partition)."""
        with self._lock:
            metadata, error = self._producer_metadata(transactional_id, producer_id, producer_epoch)
            if metadata is None:
                return error
            added = frozenset(partitions)
            if metadata.state == _S.ONGOING and added <= metadata.partitions:
                return TxnError.NONE
            now_ms = self._clock.milliseconds()
            start_ms = now_ms if metadata.state in IDLE_STATES else metadata.start_ms
            return self._write(
                metadata.to(_S.ONGOING, now_ms, partitions=metadata.partitions | added, start_ms=start_ms)
            )

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        """Whether the producer's transaction holds each partition, adding none (KIP-890's verify-only check,
        Kafka's `handleVerifyPartitionsInTransaction`): NONE if it does, TRANSACTION_ABORTABLE if not; every
        partition gets the id's error instead when there is one (INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING,
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS)."""
        with self._lock:
            metadata, error = self._producer_metadata(transactional_id, producer_id, producer_epoch)
            if metadata is None:
                return dict.fromkeys(partitions, error)
            return {
                tp: TxnError.NONE if tp in metadata.partitions else TxnError.TRANSACTION_ABORTABLE for tp in partitions
            }

    def add_partitions_implicitly(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        """A transactions-v2 producer's partitions, added by the broker that took its transactional batches (Produce
        v12+) or offsets (TxnOffsetCommit v5+) rather than by the producer (KIP-890 part 2): the partitions join its
        transaction, which starts if none is open. Per partition NONE, or the id's error for all of them
        (INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while the last
        transaction's markers are written, or the state's write failure)."""
        with self._lock:
            metadata, error = self._producer_metadata(transactional_id, producer_id, producer_epoch)
            if metadata is None:
                return dict.fromkeys(partitions, error)
            added = frozenset(partitions)
            if metadata.state == _S.ONGOING and added <= metadata.partitions:
                return dict.fromkeys(partitions, TxnError.NONE)
            now_ms = self._clock.milliseconds()
            start_ms = now_ms if metadata.state in IDLE_STATES else metadata.start_ms
            ongoing = metadata.to(
                _S.ONGOING,
                now_ms,
                partitions=metadata.partitions | added,
                start_ms=start_ms,
                client_transaction_version=TRANSACTION_VERSION_2,
            )
            return dict.fromkeys(partitions, self._write(ongoing))

    def _producer_metadata(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, TxnError]:
        """The id's state if the producer may act on it now, else None and why. Holds the lock."""
        if not isinstance(transactional_id, str) or not transactional_id:
            return None, TxnError.INVALID_REQUEST
        metadata = self._metadata(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return None, TxnError.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return None, TxnError.PRODUCER_FENCED
        if metadata.state in PREPARE_STATES:
            return None, TxnError.CONCURRENT_TRANSACTIONS
        return metadata, TxnError.NONE

    # --- EndTxn ----------------------------------------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnError:
        """Commits or aborts the producer's transaction (Kafka's `handleEndTransaction`, TV1): NONE once
        PrepareCommit/PrepareAbort is durable; the markers follow (see the module docstring)."""
        if not isinstance(transactional_id, str) or not transactional_id:
            return TxnError.INVALID_REQUEST
        with self._lock:
            metadata = self._metadata(transactional_id)
            if metadata is None or metadata.producer_id != producer_id:
                return TxnError.INVALID_PRODUCER_ID_MAPPING
            if metadata.producer_epoch != producer_epoch:
                return TxnError.PRODUCER_FENCED
            state = metadata.state
            if state == _S.ONGOING:
                target = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
                prepared = metadata.to(target, self._clock.milliseconds(), markers_left=metadata.partitions)
                error = self._write(prepared)
                if error == TxnError.NONE:
                    self._complete(prepared)
                return error
            if state == (_S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT):
                return TxnError.NONE
            if state == (_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT):
                return TxnError.CONCURRENT_TRANSACTIONS
            return TxnError.INVALID_TXN_STATE

    def end_transaction_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        """EndTxn v5+ of a transactions-v2 producer (KIP-890 part 2): as `end_transaction`, but every transaction
        ends with the producer's epoch bumped: the Prepare state and the markers carry the bumped epoch, which the
        answer gives the producer for its next transaction, so a zombie of its previous one is fenced by every
        partition it wrote. An epoch that would reach 32766 moves the producer to a new producer id at epoch 0 (its
        markers still carry the old one), written with the state as its next producer id. An abort with no
        transaction open bumps the epoch as well. A retry of an EndTxn whose answer was lost (the previous epoch, or
        the previous producer id at its last epoch) is answered the producer's current id and epoch once the
        transaction it ended is complete, CONCURRENT_TRANSACTIONS while its markers are being written."""
        if not isinstance(transactional_id, str) or not transactional_id:
            return EndTxnResult(TxnError.INVALID_REQUEST)
        with self._lock:
            metadata = self._metadata(transactional_id)
            if metadata is None:
                return EndTxnResult(TxnError.INVALID_PRODUCER_ID_MAPPING)
            prepare = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
            complete = _S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT
            if _is_end_txn_retry(metadata, producer_id, producer_epoch):
                if metadata.state == complete:
                    return EndTxnResult(TxnError.NONE, *_next_producer(metadata))
                if metadata.state == prepare:
                    return EndTxnResult(TxnError.CONCURRENT_TRANSACTIONS)
                return EndTxnResult(TxnError.INVALID_TXN_STATE)
            if metadata.producer_id != producer_id:
                return EndTxnResult(TxnError.INVALID_PRODUCER_ID_MAPPING)
            if metadata.producer_epoch != producer_epoch:
                return EndTxnResult(TxnError.PRODUCER_FENCED)
            if metadata.state in PREPARE_STATES:
                return EndTxnResult(TxnError.CONCURRENT_TRANSACTIONS)
            if metadata.state != _S.ONGOING and commit:
                return EndTxnResult(TxnError.INVALID_TXN_STATE)
            bumped = producer_epoch + 1
            next_producer_id = self._allocate_producer_id() if bumped >= EXHAUSTED_EPOCH else NO_PRODUCER_ID
            prepared = metadata.to(
                prepare,
                self._clock.milliseconds(),
                producer_epoch=bumped,
                last_producer_id=producer_id,
                last_producer_epoch=producer_epoch,
                next_producer_id=next_producer_id,
                client_transaction_version=TRANSACTION_VERSION_2,
                markers_left=metadata.partitions,
                start_ms=metadata.start_ms if metadata.state == _S.ONGOING else self._clock.milliseconds(),
            )
            error = self._write(prepared)
            if error != TxnError.NONE:
                return EndTxnResult(error)
            self._complete(prepared)
            return EndTxnResult(TxnError.NONE, *_next_producer(prepared))

    # --- markers -----------------------------------------------------------------------------------------------

    def _complete(self, prepared: TransactionMetadata) -> None:
        """Writes the markers and the Complete state of a transaction whose Prepare state is durable: at once, or
        handed to `completions` (then EndTxn is answered before they are written). Holds the lock."""
        if self._completions is None:
            self._send_markers(prepared)
            return
        transactional_id = prepared.transactional_id
        self._completing.add(transactional_id)
        try:
            self._completions(lambda: self._complete_in_background(transactional_id))
        except BaseException:
            self._completing.discard(transactional_id)
            raise

    def _complete_in_background(self, transactional_id: str) -> None:
        with self._lock:
            try:
                metadata = self._transactions.get(transactional_id)
                if metadata is not None and metadata.state in PREPARE_STATES:
                    self._send_markers(metadata)
            finally:
                self._completing.discard(transactional_id)
                self._completed.notify_all()

    def _send_markers(self, metadata: TransactionMetadata) -> TransactionMetadata:
        """Writes the markers still due for a Prepare* transaction; once none is left, writes its Complete state.
        Returns the id's state after. Holds the lock."""
        result = ControlRecordType.COMMIT if metadata.state == _S.PREPARE_COMMIT else ControlRecordType.ABORT
        coordinator_epoch = self._claims.epoch(self.partition_for(metadata.transactional_id))
        if coordinator_epoch is None:
            return metadata
        marker = TransactionMarker(metadata.producer_id, metadata.producer_epoch, coordinator_epoch, result)
        failed = self._markers.write_markers(sorted(metadata.markers_left), marker)
        left = set()
        for (topic, partition), exc in sorted(failed.items()):
            if isinstance(exc, (InvalidProducerEpochError, TransactionCoordinatorFencedError)):
                logger.warning("%s: marker for %s-%d refused: %s", metadata.transactional_id, topic, partition, exc)
            elif isinstance(exc, UnknownTopicOrPartitionError) and not self._topic_exists(topic):
                continue
            else:
                logger.info(
                    "%s: marker for %s-%d not written yet: %s", metadata.transactional_id, topic, partition, exc
                )
                left.add((topic, partition))
        pending = replace(metadata, markers_left=frozenset(left))
        self._transactions[metadata.transactional_id] = pending
        if left:
            return pending
        target = _S.COMPLETE_COMMIT if metadata.state == _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        rotated = {}
        if metadata.next_producer_id != NO_PRODUCER_ID:
            # A transactions-v2 producer whose epoch ran out goes on under the id it was given.
            rotated = {
                "producer_id": metadata.next_producer_id,
                "producer_epoch": 0,
                "last_producer_id": metadata.producer_id,
                "next_producer_id": NO_PRODUCER_ID,
            }
        completed = pending.to(target, self._clock.milliseconds(), **rotated)
        self._write(completed)
        return self._transactions.get(metadata.transactional_id, pending)

    def _topic_exists(self, topic: str) -> bool:
        try:
            self._controller.describe_topic(topic)
        except UnknownTopicOrPartitionError:
            return False
        return True

    def send_pending_markers(self) -> int:
        """Retries the markers of every Prepare* transaction; returns how many transactions still wait."""
        with self._lock:
            waiting = [
                metadata
                for metadata in self._transactions.values()
                if metadata.state in PREPARE_STATES and metadata.transactional_id not in self._completing
            ]
            return sum(1 for metadata in waiting if self._send_markers(metadata).state in PREPARE_STATES)

    # --- timeouts and expiry -----------------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> list[str]:
        """Fences and aborts every Ongoing transaction older than its timeout (Kafka's
        `abortTimedOutTransactions`); the ids aborted. Prepare* transactions are finished by marker retries."""
        with self._lock:
            now_ms = self._clock.milliseconds()
            timed_out = [
                metadata
                for metadata in self._transactions.values()
                if metadata.state == _S.ONGOING and metadata.start_ms + metadata.timeout_ms < now_ms
            ]
            for metadata in timed_out:
                logger.info(
                    "%s: transaction timed out after %d ms: aborting", metadata.transactional_id, metadata.timeout_ms
                )
                self._fence_and_abort(metadata, now_ms, resumable=True)
            return [metadata.transactional_id for metadata in timed_out]

    def expire_transactional_ids(self) -> list[str]:
        """Forgets every id idle (Empty, CompleteCommit, CompleteAbort) since `transactional.id.expiration.ms`,
        writing its tombstone (Kafka's `removeExpiredTransactionalIds`); the ids expired."""
        with self._lock:
            now_ms = self._clock.milliseconds()
            horizon_ms = now_ms - self._config.transactional_id_expiration_ms
            expired = [
                metadata
                for metadata in self._transactions.values()
                if metadata.state in IDLE_STATES and metadata.last_update_ms <= horizon_ms
            ]
            return [
                metadata.transactional_id
                for metadata in expired
                if self._write(metadata.to(_S.DEAD, now_ms)) == TxnError.NONE
            ]

    def schedule(self, scheduler: Scheduler) -> None:
        """Registers the coordinator's periodic work on `scheduler`: loading the `__transaction_state` partitions at
        once and then any not reachable before (a transaction is timed out only once its partition is loaded), marker
        retries and timed-out aborts every `transaction.abort.timed.out.transaction.cleanup.interval.ms`, expiry
        every `transaction.remove.expired.transaction.cleanup.interval.ms`."""
        abort_ms = self._config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        expire_ms = self._config.transaction_remove_expired_transaction_cleanup_interval_ms
        scheduler.schedule("transaction-state-loads", self.ready, 0, abort_ms)
        scheduler.schedule("transaction-marker-retries", self.send_pending_markers, abort_ms, abort_ms)
        scheduler.schedule("transaction-timeouts", self.abort_timed_out_transactions, abort_ms, abort_ms)
        scheduler.schedule("transactional-id-expiry", self.expire_transactional_ids, expire_ms, expire_ms)

    # --- DescribeTransactions, ListTransactions ----------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        """The id's state; None if the coordinator has no such id."""
        with self._lock:
            metadata = self._metadata(transactional_id) if transactional_id else None
            return None if metadata is None else _describe(metadata)

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int = -1,
    ) -> list[TransactionDescription]:
        """Every id, filtered as ListTransactions filters: by state name, by producer id, and (`duration_ms` >= 0)
        to transactions running at least that long."""
        wanted_states, wanted_ids = set(states), set(producer_ids)
        with self._lock:
            for partition in range(self._partition_count):
                self._loaded_partition(partition)
            now_ms = self._clock.milliseconds()
            return [
                _describe(metadata)
                for _, metadata in sorted(self._transactions.items())
                if (not wanted_states or metadata.state.kafka_name in wanted_states)
                and (not wanted_ids or metadata.producer_id in wanted_ids)
                and (duration_ms < 0 or (metadata.start_ms >= 0 and now_ms - metadata.start_ms >= duration_ms))
            ]


def _describe(metadata: TransactionMetadata) -> TransactionDescription:
    return TransactionDescription(
        metadata.transactional_id,
        metadata.state.kafka_name,
        metadata.producer_id,
        metadata.producer_epoch,
        metadata.timeout_ms,
        metadata.start_ms,
        tuple(sorted(metadata.partitions)),
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_valid_producer_id(metadata: TransactionMetadata, producer_id: int) -> bool:
    """A resuming client's producer id is the current one, or the previous one after a rotation (Kafka's
    `isValidProducerId`)."""
    return producer_id == metadata.producer_id or (
        producer_id == metadata.last_producer_id and metadata.last_producer_id != NO_PRODUCER_ID
    )


def _bumped_epoch(metadata: TransactionMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """(new epoch, last epoch) of Kafka's `prepareIncrementProducerEpoch`; None for PRODUCER_FENCED. A client
    naming the epoch it had bumps it; naming the epoch before the last bump is a retry of that bump, answered the
    current epoch unchanged."""
    bumped = metadata.producer_epoch + 1
    if expected_epoch is None:
        return bumped, NO_PRODUCER_EPOCH
    if expected_epoch in (NO_PRODUCER_EPOCH, metadata.producer_epoch):
        return bumped, metadata.producer_epoch
    if expected_epoch == metadata.last_producer_epoch:
        return metadata.producer_epoch, metadata.last_producer_epoch
    return None
