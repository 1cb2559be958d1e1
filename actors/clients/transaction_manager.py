"""A transactional producer's side of Kafka's transactions (Kafka's producer `TransactionManager`, TV1 protocol): its
transactional id, producer id and epoch, the state of its current transaction, and the calls to the transaction
coordinator and the group coordinator, as a plain class over one seam (`TransactionCoordinatorClient`).

States (Kafka's `TransactionManager.State`): UNINITIALIZED until `init` (InitProducerId: a producer id and epoch
for the transactional id, fencing any older producer of the id and aborting what it left open); READY between
transactions; IN_TRANSACTION after `begin`; COMMITTING / ABORTING while `end` runs; ABORTABLE_ERROR once the
transaction can no longer commit (the user must `abort_transaction`, then may go on); FATAL_ERROR once the producer
can never write again (fenced). A call the state does not allow raises `InvalidTxnStateError`; in an error state,
`check_send` and `end(commit=True)` raise the error that caused it.

Partitions join the transaction before their first batch: the sender asks `add_partitions` for the partitions it
is about to send to (Kafka's AddPartitionsToTxn), and fails their batches with the answer's error when refused.
`send_offsets` adds the group's `__consumer_offsets` partition (AddOffsetsToTxn), then hands the offsets to the
group coordinator (TxnOffsetCommit), which keeps them pending until the COMMIT marker.

Fencing and timeouts both show up as PRODUCER_FENCED from the coordinator (or INVALID_PRODUCER_EPOCH from a
partition: the fence's ABORT markers carry the bumped epoch). The two are told apart as Kafka's KIP-360 lets a
client tell them apart: InitProducerId naming the producer's own id and epoch succeeds only if the coordinator
bumped that epoch on a timeout (it remembers the epoch it fenced), and is refused when a newer producer of the id
took over. The first case makes the transaction abortable with `TransactionTimedOutError` (the producer already
holds the bumped epoch; `abort_transaction` then has nothing left to ask the coordinator); the second is fatal,
`ProducerFencedError`. A transaction whose batch failed for good leaves a sequence gap on its partition, so its
abort also bumps the epoch (InitProducerId naming the current one), and every partition's sequence starts over.

Coordinator answers that say "later" (CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, a
retriable typed error while the coordinator restarts) are retried after `RETRY_BACKOFF_MS` doubling up to
`retry_backoff_max_ms`, until the call's deadline, then `RequestTimedOutError` (the state is kept, so the same call
may be made again). Thread-safe: the user's thread and the sender thread meet under one lock.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from actors.core.groups.group_membership import GroupError
from actors.core.transactions.transaction_coordinator import InitProducerIdResult
from actors.core.transactions.transaction_metadata import TxnError
from storage.clock import Clock
from storage.errors import (
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidTxnStateError,
    ProducerFencedError,
    RaybrokerError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionTimedOutError,
    is_retriable,
)
from storage.records.layout import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from storage.topic_partition import TopicPartition

# First wait before a coordinator call is made again: Kafka's producer retries AddPartitionsToTxn answered
# CONCURRENT_TRANSACTIONS after 20 ms (the markers of the previous transaction usually land within a few ms).
RETRY_BACKOFF_MS = 20
_RETRY_LATER = frozenset(
    {TxnError.CONCURRENT_TRANSACTIONS, TxnError.COORDINATOR_NOT_AVAILABLE, TxnError.NOT_COORDINATOR}
)
_GROUP_RETRY_LATER = frozenset({GroupError.REBALANCE_IN_PROGRESS})
# How long the check after PRODUCER_FENCED (timeout or newer producer?) waits out the coordinator's abort markers.
FENCE_PROBE_TIMEOUT_S = 30.0
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What `send_offsets_to_transaction` needs of a consumer's group (Kafka's `ConsumerGroupMetadata`): its id,
    and the member's generation and id when it is a member (-1 and "" otherwise: the commit is then accepted
    whatever the group's members, as Kafka accepts it)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionCoordinatorClient(Protocol):
    """The coordinators as a transactional producer reaches them; methods raise the broker's typed errors."""

    def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult: ...

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError: ...

    def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError: ...

    def offsets_partition(self, group_id: str) -> int:
        """The group's `__consumer_offsets` partition."""
        ...

    def commit_offsets(
        self,
        group: ConsumerGroupMetadata,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, int],
    ) -> GroupError: ...


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


_S = TransactionState


class TransactionManager:
    """One transactional producer's transactions; see the module docstring. Thread-safe."""

    def __init__(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        coordinator: TransactionCoordinatorClient,
        *,
        clock: Clock,
        retry_backoff_max_ms: int = 1000,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidConfigError(f"transactional_id must be a non-empty str, got {transactional_id!r}")
        if not isinstance(transaction_timeout_ms, int) or isinstance(transaction_timeout_ms, bool):
            raise InvalidConfigError(f"transaction_timeout_ms must be an int, got {transaction_timeout_ms!r}")
        if transaction_timeout_ms <= 0:
            raise InvalidConfigError(f"transaction_timeout_ms must be > 0, got {transaction_timeout_ms}")
        self.transactional_id = transactional_id
        self._timeout_ms = transaction_timeout_ms
        self._coordinator = coordinator
        self._clock = clock
        self._retry_backoff_max_ms = max(RETRY_BACKOFF_MS, retry_backoff_max_ms)
        self._sleep = sleep
        self._lock = threading.RLock()
        self._state = _S.UNINITIALIZED
        self._producer_id = NO_PRODUCER_ID
        self._producer_epoch = NO_PRODUCER_EPOCH
        self._partitions: set[TopicPartition] = set()
        self._error: RaybrokerError | None = None
        # The abort must bump the epoch: a batch of the transaction failed for good (its partition's sequence is
        # no longer known).
        self._bump_on_abort = False

    # --- what the sender and the facade read ----------------------------------------------------

    @property
    def state(self) -> TransactionState:
        return self._state

    @property
    def identity(self) -> tuple[int, int]:
        """(producer id, epoch) the batches carry now; a change means every partition's sequence starts at 0."""
        return self._producer_id, self._producer_epoch

    @property
    def error(self) -> RaybrokerError | None:
        """The error of an ABORTABLE_ERROR or FATAL_ERROR state, else None."""
        return self._error

    def check_send(self) -> None:
        """Raises unless records may be sent now (in a transaction, no error)."""
        state = self._state
        if state == _S.IN_TRANSACTION:
            return
        if self._error is not None:
            raise self._error
        advice = {
            _S.UNINITIALIZED: "call init_transactions first",
            _S.READY: "call begin_transaction first",
        }.get(state, "the transaction is ending; begin the next one once it ended")
        raise InvalidTxnStateError(
            f"transactional id {self.transactional_id!r}: cannot send in state {state.value}: {advice}"
        )

    # --- init, begin ---------------------------------------------------------------------------

    def init(self, timeout_s: float | None) -> None:
        """InitProducerId: this producer's id and epoch; fences older producers of the id and aborts their open
        transaction (the coordinator answers CONCURRENT_TRANSACTIONS while that abort runs: retried)."""
        with self._lock:
            if self._state != _S.UNINITIALIZED:
                self._refuse("init_transactions", "it was called already")
            result = self._until(timeout_s, "init_transactions", lambda: self._init_call(False))
            if result.error == TxnError.INVALID_TRANSACTION_TIMEOUT:
                raise InvalidConfigError(
                    f"transaction_timeout_ms {self._timeout_ms} is above the broker's transaction.max.timeout.ms"
                )
            self._raise_unexpected(result.error, "init_transactions")
            self._producer_id, self._producer_epoch = result.producer_id, result.producer_epoch
            self._state = _S.READY

    def begin(self) -> None:
        with self._lock:
            if self._state != _S.READY:
                self._refuse("begin_transaction", "a transaction can begin only after the previous one ended")
            self._state = _S.IN_TRANSACTION

    # --- partitions and offsets ----------------------------------------------------------------

    def add_partitions(self, partitions: Collection[TopicPartition], timeout_s: float | None) -> RaybrokerError | None:
        """Adds the partitions the sender is about to write to (AddPartitionsToTxn); None once they are in the
        transaction, else the error their batches fail with (the transaction is then abortable or fatal)."""
        with self._lock:
            if self._error is not None:
                return self._error
            missing = [tp for tp in partitions if tp not in self._partitions]
            if not missing:
                return None
            if self._state not in (_S.IN_TRANSACTION, _S.COMMITTING):
                return TransactionAbortableError(
                    f"transactional id {self.transactional_id!r}: the transaction ended ({self._state.value}) "
                    f"before a batch for {missing[0][0]}-{missing[0][1]} was sent"
                )
            try:
                self._add(missing, timeout_s)
            except RaybrokerError as exc:
                if self._error is None:
                    self._fail(TransactionAbortableError(f"adding partitions to the transaction failed: {exc}"))
                return self._error or exc
            return None

    def _add(self, partitions: list[TopicPartition], timeout_s: float | None) -> None:
        pid, epoch = self.identity
        answer = self._until(
            timeout_s,
            "adding partitions to the transaction",
            lambda: self._coordinator.add_partitions(self.transactional_id, pid, epoch, partitions),
        )
        if answer == TxnError.PRODUCER_FENCED:
            raise self._fenced()
        self._raise_unexpected(answer, "AddPartitionsToTxn")
        self._partitions.update(partitions)

    def send_offsets(
        self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata, timeout_s: float | None
    ) -> None:
        """The consumer's positions, committed to its group with the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit): visible to the group only once the transaction commits."""
        if not isinstance(group, ConsumerGroupMetadata) or not isinstance(group.group_id, str) or not group.group_id:
            raise InvalidRequestError(f"group_metadata must be a consumer's ConsumerGroupMetadata, got {group!r}")
        for (topic, partition), offset in offsets.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise InvalidRequestError(f"offset of {topic}-{partition} must be an int >= 0, got {offset!r}")
        with self._lock:
            self.check_send()
            try:
                partition = self._until(
                    timeout_s,
                    "finding the group's partition",
                    lambda: self._coordinator.offsets_partition(group.group_id),
                )
                self._add([(CONSUMER_OFFSETS_TOPIC, partition)], timeout_s)
                pid, epoch = self.identity
                verdict = self._until(
                    timeout_s,
                    "committing offsets with the transaction",
                    lambda: self._coordinator.commit_offsets(group, pid, epoch, dict(offsets)),
                    retry_group=True,
                )
            except (ProducerFencedError, TransactionAbortableError, InvalidTxnStateError, RequestTimedOutError):
                raise
            except RaybrokerError as exc:
                raise self._fail(
                    TransactionAbortableError(f"sending offsets to the transaction failed: {exc}")
                ) from exc
            if verdict != GroupError.NONE:
                raise self._fail(
                    TransactionAbortableError(
                        f"group {group.group_id!r} refused the transaction's offsets: {verdict.value.upper()}"
                    )
                )

    # --- commit, abort -------------------------------------------------------------------------

    def begin_end(self, commit: bool) -> None:
        """Enters COMMITTING or ABORTING before the producer flushes: no more sends, and only partitions already
        in the transaction may still get batches (a commit's unsent batches may add theirs)."""
        with self._lock:
            if commit:
                if self._state == _S.COMMITTING:
                    return
                if self._state != _S.IN_TRANSACTION:
                    if self._error is not None:
                        raise self._error
                    self._refuse("commit_transaction", "no transaction is open")
                self._state = _S.COMMITTING
                return
            if self._state == _S.FATAL_ERROR:
                assert self._error is not None
                raise self._error
            if self._state not in (_S.IN_TRANSACTION, _S.ABORTABLE_ERROR, _S.COMMITTING, _S.ABORTING):
                self._refuse("abort_transaction", "no transaction is open")
            self._state = _S.ABORTING

    def end(self, commit: bool, timeout_s: float | None) -> None:
        """EndTxn once the producer flushed: the transaction's markers follow. A commit of a transaction that became
        abortable raises its error; an abort completes whatever came before."""
        with self._lock:
            if self._error is not None and (commit or self._state == _S.FATAL_ERROR):
                raise self._error
            if self._partitions:
                pid, epoch = self.identity
                answer = self._until(
                    timeout_s,
                    "commit_transaction" if commit else "abort_transaction",
                    lambda: self._coordinator.end_transaction(self.transactional_id, pid, epoch, commit),
                )
                if answer == TxnError.PRODUCER_FENCED:
                    error = self._fenced()
                    if commit or isinstance(error, ProducerFencedError):
                        raise error
                else:
                    self._raise_unexpected(answer, "EndTxn")
            if not commit and self._bump_on_abort:
                self._bump_epoch(timeout_s)
            self._partitions.clear()
            self._error = None
            self._bump_on_abort = False
            self._state = _S.READY

    def _bump_epoch(self, timeout_s: float | None) -> None:
        """InitProducerId naming the current epoch (KIP-360): the next epoch, and every sequence from 0."""
        result = self._until(timeout_s, "bumping the producer epoch", lambda: self._init_call(True))
        if result.error == TxnError.PRODUCER_FENCED:
            raise self._fenced()
        self._raise_unexpected(result.error, "InitProducerId")
        self._producer_id, self._producer_epoch = result.producer_id, result.producer_epoch

    # --- failures ------------------------------------------------------------------------------

    def batch_failed(self, error: BaseException, producer_epoch: int) -> None:
        """A batch of the transaction (written under `producer_epoch`) failed for good: the transaction can no
        longer commit. A refused epoch is the coordinator's fence: a timeout or a newer producer (`_fenced`)."""
        with self._lock:
            if self._error is not None or producer_epoch != self._producer_epoch:
                return
            if isinstance(error, InvalidProducerEpochError):
                try:
                    self._fenced()
                except RaybrokerError as exc:
                    self._fail(TransactionAbortableError(f"a batch was refused ({error}); then {exc}"))
                return
            self._bump_on_abort = True
            self._fail(TransactionAbortableError(f"a batch of the transaction failed: {error}"))

    def _fenced(self) -> RaybrokerError:
        """After PRODUCER_FENCED: resumes the epoch if the coordinator fenced it on a timeout (the transaction is
        then abortable, `TransactionTimedOutError`), else the producer is fenced for good. Returns the error."""
        result = self._until(FENCE_PROBE_TIMEOUT_S, "resuming the producer epoch", lambda: self._init_call(True))
        if result.error != TxnError.NONE:
            return self._fail(
                ProducerFencedError(
                    f"transactional id {self.transactional_id!r}: producer id {self._producer_id} epoch "
                    f"{self._producer_epoch} was fenced by a newer producer with the same transactional id; this "
                    "producer can no longer write and must be closed"
                ),
                fatal=True,
            )
        self._producer_id, self._producer_epoch = result.producer_id, result.producer_epoch
        # The coordinator aborted the transaction and moved on: nothing of it is left to end there.
        self._partitions.clear()
        self._bump_on_abort = False
        return self._fail(
            TransactionTimedOutError(
                f"transactional id {self.transactional_id!r}: the coordinator aborted the transaction after "
                f"transaction_timeout_ms {self._timeout_ms}; call abort_transaction, then begin the next one"
            )
        )

    def _fail(self, error: RaybrokerError, *, fatal: bool = False) -> RaybrokerError:
        """Moves to the error state (`fatal`: for good) unless in one already; returns the state's error."""
        if self._state == _S.FATAL_ERROR and self._error is not None:
            return self._error
        if fatal:
            self._state = _S.FATAL_ERROR
            self._error = error
        elif self._error is None:
            if self._state != _S.ABORTING:
                self._state = _S.ABORTABLE_ERROR
            self._error = error
        return self._error

    def _refuse(self, call: str, why: str) -> None:
        raise InvalidTxnStateError(
            f"transactional id {self.transactional_id!r}: {call} in state {self._state.value}: {why}"
        )

    def _raise_unexpected(self, answer: TxnError, call: str) -> None:
        """Any answer but NONE here is one Kafka's producer treats as fatal (INVALID_TXN_STATE,
        INVALID_PRODUCER_ID_MAPPING: the id expired or moved to another producer id)."""
        if answer == TxnError.NONE:
            return
        error = InvalidTxnStateError(
            f"transactional id {self.transactional_id!r}: {call} answered {answer.value.upper()}"
        )
        if self._state == _S.UNINITIALIZED:
            raise error
        raise self._fail(error, fatal=True)

    # --- coordinator calls ---------------------------------------------------------------------

    def _init_call(self, resume: bool) -> InitProducerIdResult:
        """InitProducerId: a fresh start, or (`resume`) naming this producer's id and epoch (KIP-360)."""
        pid, epoch = self.identity if resume else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        return self._coordinator.init_producer_id(self.transactional_id, self._timeout_ms, pid, epoch)

    def _until(self, timeout_s: float | None, what: str, attempt: Callable[[], _T], retry_group: bool = False) -> _T:
        """`attempt()` made again while it answers "later" (see the module docstring), until `timeout_s`."""
        deadline_ns = None if timeout_s is None else self._clock.nanoseconds() + int(timeout_s * 1e9)
        backoff_ms = RETRY_BACKOFF_MS
        while True:
            try:
                answer = attempt()
                code = answer.error if isinstance(answer, InitProducerIdResult) else answer
                later = code in _RETRY_LATER or (retry_group and code in _GROUP_RETRY_LATER)
                why = f"the coordinator answered {getattr(code, 'value', code)}"
            except RaybrokerError as exc:
                if not is_retriable(exc):
                    raise
                later, why = True, str(exc)
            if not later:
                return answer
            if deadline_ns is not None and self._clock.nanoseconds() + backoff_ms * 1_000_000 > deadline_ns:
                raise RequestTimedOutError(f"{what} did not complete within {timeout_s} s: {why}")
            self._sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, self._retry_backoff_max_ms)


__all__ = [
    "ConsumerGroupMetadata",
    "TransactionCoordinatorClient",
    "TransactionManager",
    "TransactionState",
]
