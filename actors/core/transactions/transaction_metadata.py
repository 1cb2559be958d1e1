"""One transactional id's state in the transaction coordinator (Kafka's `TransactionMetadata`), its states and
their allowed transitions, and the coordinator's answers named as Kafka's error codes.

States (Kafka's `TransactionState`, with the status byte `__transaction_state` stores):

| state              | byte | meaning                                                                      |
|--------------------|------|------------------------------------------------------------------------------|
| Empty              | 0    | a producer id and epoch, no transaction                                      |
| Ongoing            | 1    | partitions added, no EndTxn yet                                              |
| PrepareCommit      | 2    | EndTxn(commit) is durable; COMMIT markers are being written                  |
| PrepareAbort       | 3    | EndTxn(abort), a fence or a timeout is durable; ABORT markers being written  |
| CompleteCommit     | 4    | every COMMIT marker written                                                  |
| CompleteAbort      | 5    | every ABORT marker written                                                   |
| Dead               | 6    | expired: tombstoned, never written as a value                                |
| PrepareEpochFence  | 7    | in memory only: an Ongoing transaction being fenced by a newer producer      |

`VALID_PREVIOUS_STATES` is Kafka 4's `validPreviousStates` (3.9's, and PrepareAbort from an idle state for a
transactions-v2 abort); `TransactionMetadata.to` refuses any other move.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from storage.errors import InvalidTxnStateError
from storage.records.layout import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from storage.records.transaction_log import TransactionLogValue
from storage.topic_partition import TopicPartition

# Kafka's `isEpochExhausted`: Short.MaxValue - 1. 32767 stays free so a fence bump can never overflow.
EXHAUSTED_EPOCH = 32766
# The `transaction.version` of a client whose EndTxn bumps its epoch (KIP-890 part 2: EndTxn v5+, Produce v12+).
TRANSACTION_VERSION_2 = 2


class TransactionState(enum.IntEnum):
    """A transactional id's state; the value is `__transaction_state`'s status byte."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (`PrepareCommit`, ...)."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        return next((state for state in cls if state.kafka_name == name), None)


_S = TransactionState
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # Transactions v2 (Kafka 4): an EndTxn(abort) of a producer with no transaction open bumps its epoch too.
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
COMPLETE_STATES = frozenset({_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
PREPARE_STATES = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
# States an id may expire from, and start a new transaction or producer epoch from.
IDLE_STATES = frozenset({_S.EMPTY}) | COMPLETE_STATES


class TxnError(enum.Enum):
    """The coordinator's answers, named as Kafka's error codes (the protocol layer maps them by name)."""

    NONE = "none"
    INVALID_REQUEST = "invalid_request"
    INVALID_PRODUCER_ID_MAPPING = "invalid_producer_id_mapping"
    PRODUCER_FENCED = "producer_fenced"
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"
    CONCURRENT_TRANSACTIONS = "concurrent_transactions"
    INVALID_TXN_STATE = "invalid_txn_state"
    INVALID_TRANSACTION_TIMEOUT = "invalid_transaction_timeout"
    COORDINATOR_NOT_AVAILABLE = "coordinator_not_available"
    NOT_COORDINATOR = "not_coordinator"
    TRANSACTIONAL_ID_NOT_FOUND = "transactional_id_not_found"
    TRANSACTION_ABORTABLE = "transaction_abortable"


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """One transactional id's state; a transition makes a new one (`to`). `last_producer_id` and
    `last_producer_epoch` (KIP-360 retries, PID rotation) are kept in memory only, as Kafka 3.9 keeps them, but for a
    transactions-v2 producer (`client_transaction_version` 2), whose last producer id, the next one it was given
    (`next_producer_id`: its epoch ran out, and the markers still carry the old id) and version are written with the
    state, as Kafka 4 writes them (the value's tagged fields)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    has_failed_epoch_fence: bool = False
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    # Partitions of a Prepare* transaction whose marker is not written yet (memory only: a load sends them all).
    markers_left: frozenset[TopicPartition] = field(default=frozenset())

    def to(self, state: TransactionState, now_ms: int, **changes: object) -> TransactionMetadata:
        """The metadata after a move to `state` at `now_ms` with `changes`; `InvalidTxnStateError` for a move
        Kafka's state machine does not allow (a coordinator bug, never a client's doing)."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r}: no transition from {self.state.kafka_name} to "
                f"{state.kafka_name}"
            )
        moved = replace(self, state=state, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]
        if state in COMPLETE_STATES or state == TransactionState.EMPTY:
            moved = replace(moved, partitions=frozenset(), markers_left=frozenset())
        return moved

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EXHAUSTED_EPOCH

    def to_value(self) -> TransactionLogValue:
        """The record value of this state (`storage.records.transaction_log`)."""
        return TransactionLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            tuple(sorted(self.partitions)),
            self.last_update_ms,
            self.start_ms,
            self.last_producer_id if self.client_transaction_version >= TRANSACTION_VERSION_2 else NO_PRODUCER_ID,
            self.next_producer_id,
            self.client_transaction_version,
        )

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        """The state a record holds. A transactions-v2 transaction ending or ended gets back the producer id and
        epoch its EndTxn named (`last_producer_id`, `last_producer_epoch`), so that EndTxn's retry is known after a
        reload: the epoch before the bump, or 32765 after a move to a new producer id (the bump reached 32766)."""
        partitions = frozenset(value.partitions)
        state = TransactionState(value.transaction_status)
        last_epoch = NO_PRODUCER_EPOCH
        if value.client_transaction_version >= TRANSACTION_VERSION_2 and state in PREPARE_STATES | COMPLETE_STATES:
            rotated = value.previous_producer_id not in (NO_PRODUCER_ID, value.producer_id)
            last_epoch = EXHAUSTED_EPOCH - 1 if rotated else value.producer_epoch - 1
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.transaction_timeout_ms,
            state,
            partitions,
            value.start_timestamp_ms,
            value.last_update_timestamp_ms,
            last_producer_id=value.previous_producer_id,
            last_producer_epoch=last_epoch,
            markers_left=partitions if state in PREPARE_STATES else frozenset(),
            next_producer_id=value.next_producer_id,
            client_transaction_version=value.client_transaction_version,
        )
