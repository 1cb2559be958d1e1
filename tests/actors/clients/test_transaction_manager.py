"""The transactional producer's `TransactionManager` without Ray, over the in-process broker's real transaction and
group coordinators on a `MockClock`: its state machine (Kafka's producer `TransactionManager`), partitions added
once per transaction, offsets committed only with the commit, a zombie fenced for good, a transaction timed out
by the coordinator resumed as abortable, an abort after a failed batch bumping the epoch, and the retry of
CONCURRENT_TRANSACTIONS while a fenced transaction is aborted. The oracle is the coordinator's own description of
the id and Kafka's documented states."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import pytest

from actors.clients.transaction_manager import (
    ConsumerGroupMetadata,
    TransactionManager,
    TransactionState,
)
from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from actors.core.groups.group_membership import GroupError
from actors.core.in_process_broker import InProcessBroker
from actors.core.transactions.transaction_coordinator import InitProducerIdResult
from actors.core.transactions.transaction_metadata import TxnError
from storage.clock import MockClock
from storage.errors import (
    InvalidTxnStateError,
    NotEnoughReplicasError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionTimedOutError,
)
from storage.records.consumer_offsets import OffsetAndMetadata
from storage.topic_partition import TopicPartition
from tests.cluster.protocol.helpers import start_broker

TOPIC = "orders"
TIMEOUT_MS = 60_000


class LocalCoordinators:
    """`TransactionCoordinatorClient` over the in-process broker's coordinators; counts the calls it passes on."""

    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker
        self.calls: list[str] = []

    def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        self.calls.append("init")
        return self.broker.transaction_coordinator.init_producer_id(
            transactional_id, transaction_timeout_ms, producer_id, producer_epoch
        )

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        self.calls.append("add")
        return self.broker.transaction_coordinator.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnError:
        self.calls.append("end")
        return self.broker.transaction_coordinator.end_transaction(
            transactional_id, producer_id, producer_epoch, commit
        )

    def offsets_partition(self, group_id: str) -> int:
        return self.broker.group_coordinator.partition_for(group_id)

    def commit_offsets(
        self, group: ConsumerGroupMetadata, producer_id: int, producer_epoch: int, offsets: Mapping[TopicPartition, int]
    ) -> GroupError:
        self.calls.append("offsets")
        return self.broker.group_coordinator.commit_transactional(
            group.group_id,
            producer_id,
            producer_epoch,
            group.member_id,
            group.generation_id,
            {tp: OffsetAndMetadata(offset) for tp, offset in offsets.items()},
        )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path, transaction_state_log_num_partitions="1", offsets_topic_num_partitions="1")
    running.controller.create_topic(TOPIC, 2)
    try:
        yield running
    finally:
        running.close()


def manager(broker: InProcessBroker, transactional_id: str = "etl", timeout_ms: int = TIMEOUT_MS) -> TransactionManager:
    assert isinstance(broker.clock, MockClock)
    clock = broker.clock
    made = TransactionManager(
        transactional_id,
        timeout_ms,
        LocalCoordinators(broker),
        clock=clock,
        sleep=lambda seconds: clock.sleep(int(seconds * 1000)),
    )
    made.init(10.0)
    return made


def described(broker: InProcessBroker, transactional_id: str = "etl") -> tuple[str, int, set[TopicPartition]]:
    found = broker.transaction_coordinator.describe(transactional_id)
    assert found is not None
    return found.state, found.producer_epoch, set(found.partitions)


def test_a_transaction_adds_each_partition_once_and_commits(broker: InProcessBroker) -> None:
    txn = manager(broker)
    coordinators = txn._coordinator
    assert isinstance(coordinators, LocalCoordinators)
    assert txn.state == TransactionState.READY and txn.identity[1] == 0
    txn.begin()
    txn.check_send()
    assert txn.add_partitions([(TOPIC, 0)], 10.0) is None
    assert txn.add_partitions([(TOPIC, 0), (TOPIC, 1)], 10.0) is None
    assert txn.add_partitions([(TOPIC, 1)], 10.0) is None
    assert coordinators.calls.count("add") == 2
    assert described(broker) == ("Ongoing", 0, {(TOPIC, 0), (TOPIC, 1)})
    txn.begin_end(commit=True)
    with pytest.raises(InvalidTxnStateError, match="cannot send in state committing"):
        txn.check_send()
    txn.end(True, 10.0)
    assert described(broker) == ("CompleteCommit", 0, set())
    assert txn.state == TransactionState.READY
    # An empty transaction never reaches the coordinator's EndTxn (which would answer INVALID_TXN_STATE).
    txn.begin()
    txn.begin_end(commit=False)
    txn.end(False, 10.0)
    assert coordinators.calls.count("end") == 1


def test_offsets_sent_with_a_transaction_are_committed_only_with_it(broker: InProcessBroker) -> None:
    txn = manager(broker)
    group = ConsumerGroupMetadata("readers")
    groups = broker.group_coordinator
    for commit, offset in ((False, 7), (True, 9)):
        txn.begin()
        txn.send_offsets({("source", 0): offset}, group, 10.0)
        partition = groups.partition_for("readers")
        assert (CONSUMER_OFFSETS_TOPIC, partition) in described(broker)[2]
        assert groups.fetch_committed("readers", [("source", 0)]) == {("source", 0): None}
        txn.begin_end(commit)
        txn.end(commit, 10.0)
        assert groups.fetch_committed("readers", [("source", 0)]) == {
            ("source", 0): OffsetAndMetadata(9) if commit else None
        }


def test_a_zombie_is_fenced_for_good_by_a_newer_producer_of_its_id(broker: InProcessBroker) -> None:
    zombie = manager(broker)
    zombie.begin()
    assert zombie.add_partitions([(TOPIC, 0)], 10.0) is None
    # The successor's InitProducerId is answered CONCURRENT_TRANSACTIONS while the zombie's transaction is aborted,
    # and retried: the fence bumps the epoch once, the retry once more.
    successor = manager(broker)
    assert successor.identity == (zombie.identity[0], zombie.identity[1] + 2)
    error = zombie.add_partitions([(TOPIC, 1)], 10.0)
    assert isinstance(error, ProducerFencedError)
    assert zombie.state == TransactionState.FATAL_ERROR
    for call in (zombie.check_send, lambda: zombie.begin_end(True), lambda: zombie.begin_end(False)):
        with pytest.raises(ProducerFencedError, match="fenced by a newer producer"):
            call()


def test_a_transaction_the_coordinator_timed_out_is_abortable_and_the_producer_goes_on(
    broker: InProcessBroker,
) -> None:
    txn = manager(broker, timeout_ms=1_000)
    pid, epoch = txn.identity
    txn.begin()
    assert txn.add_partitions([(TOPIC, 0)], 10.0) is None
    broker.clock.sleep(1_001)  # type: ignore[attr-defined]
    assert broker.transaction_coordinator.abort_timed_out_transactions() == ["etl"]
    txn.begin_end(commit=True)
    with pytest.raises(TransactionTimedOutError, match="transaction_timeout_ms 1000"):
        txn.end(True, 10.0)
    assert txn.state == TransactionState.ABORTABLE_ERROR
    assert txn.identity == (pid, epoch + 1)
    with pytest.raises(TransactionTimedOutError):
        txn.check_send()
    txn.begin_end(commit=False)
    txn.end(False, 10.0)
    txn.begin()
    assert txn.add_partitions([(TOPIC, 1)], 10.0) is None
    assert described(broker) == ("Ongoing", epoch + 1, {(TOPIC, 1)})


def test_an_abort_after_a_failed_batch_bumps_the_epoch(broker: InProcessBroker) -> None:
    txn = manager(broker)
    pid, epoch = txn.identity
    txn.begin()
    assert txn.add_partitions([(TOPIC, 0)], 10.0) is None
    txn.batch_failed(NotEnoughReplicasError("gone"), epoch)
    assert txn.state == TransactionState.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError, match="a batch of the transaction failed"):
        txn.begin_end(commit=True)
    assert isinstance(txn.add_partitions([(TOPIC, 1)], 10.0), TransactionAbortableError)
    txn.begin_end(commit=False)
    txn.end(False, 10.0)
    # The partition's sequence is no longer known: the next transaction runs under the next epoch.
    assert txn.identity == (pid, epoch + 1)
    assert described(broker)[:2] == ("Empty", epoch + 1)


def test_calls_out_of_order_are_refused(broker: InProcessBroker) -> None:
    clock = broker.clock
    assert isinstance(clock, MockClock)
    fresh = TransactionManager("fresh", TIMEOUT_MS, LocalCoordinators(broker), clock=clock)
    with pytest.raises(InvalidTxnStateError, match="init_transactions first"):
        fresh.check_send()
    with pytest.raises(InvalidTxnStateError, match="begin_transaction in state uninitialized"):
        fresh.begin()
    txn = manager(broker)
    with pytest.raises(InvalidTxnStateError, match="commit_transaction in state ready"):
        txn.begin_end(True)
    with pytest.raises(InvalidTxnStateError, match="abort_transaction in state ready"):
        txn.begin_end(False)
    txn.begin()
    with pytest.raises(InvalidTxnStateError, match="begin_transaction in state in transaction"):
        txn.begin()
