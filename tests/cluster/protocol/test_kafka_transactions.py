"""Transactional producers of real Kafka clients over 127.0.0.1, against a listener over the in-process broker (its
real transaction coordinator, group coordinator and partition logs, without Ray): confluent-kafka's
`init_transactions` / `begin_transaction` / `produce` / `send_offsets_to_transaction` / `commit_transaction` /
`abort_transaction`, a second producer of the same transactional id fencing the first, and kafka-python's
transactional `KafkaProducer`.

The oracle is Kafka's documented outcome, read where it lands: each partition's log holds the data batches as
transactional batches of the producer's id and epoch followed by one COMMIT or ABORT marker, an aborted transaction
is in the partition's `.txnindex`, the last stable offset reaches the log end once the markers are written, the
transaction's offsets are committed only with its COMMIT, and `__transaction_state` ends in CompleteCommit or
CompleteAbort. A read_uncommitted consumer sees every data record, never the markers. The last two tests run on the
Ray broker (marker `ray`): the same producer against the coordinator actor and partition actors writing the markers,
and a transaction left open when the coordinator's actor was killed, aborted by its successor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from actors.calls import call, get_actor
from actors.core.controller.topic_metadata import TRANSACTION_STATE_TOPIC
from actors.core.in_process_broker import InProcessBroker
from actors.options import transaction_coordinator_name
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, EXIT_USAGE, main
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.records.consumer_offsets import OffsetAndMetadata
from storage.records.layout import ControlRecordType
from storage.records.record_batch import iter_batches
from tests.cluster.protocol.helpers import start_broker

TOPIC = "ledger"
PARTITIONS = 2
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path_factory.mktemp("broker"), transaction_state_log_num_partitions="3")
    running.controller.create_topic(TOPIC, PARTITIONS)
    running.controller.create_topic("source", 1)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def listener(module_broker: InProcessBroker) -> Iterator[KafkaListener]:
    with KafkaListener(
        {"listeners": "PLAINTEXT://127.0.0.1:0"},
        InProcessBrokerView(module_broker),
        SecurityView.in_process(module_broker.controller),
        groups=GroupView.in_process(module_broker),
        transactions=TransactionView.in_process(module_broker),
    ) as started:
        yield started


def batches(broker: InProcessBroker, topic: str, partition: int) -> list[tuple[str, int, int, int]]:
    """(kind, producer id, producer epoch, records) of every batch of the partition: kind is "data", "COMMIT" or
    "ABORT"; data batches must be transactional."""
    found = []
    for batch in iter_batches(broker.internal_partition(topic, partition).read(0, 1 << 22)):
        if batch.is_control:
            marker = batch.end_transaction_marker()
            assert marker is not None
            found.append((marker.control_type.name, batch.producer_id, batch.producer_epoch, batch.records_count))
        else:
            assert batch.is_transactional
            found.append(("data", batch.producer_id, batch.producer_epoch, batch.records_count))
    return found


def transactional_producer(listener: KafkaListener, transactional_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": listener.bootstrap_servers, "transactional.id": transactional_id, "linger.ms": "5"}
    )
    producer.init_transactions(DEADLINE_S)
    return producer


def produce_all(producer: Producer, values: list[bytes]) -> None:
    for index, value in enumerate(values):
        producer.produce(TOPIC, value=value, partition=index % PARTITIONS)
    assert producer.flush(DEADLINE_S) == 0


def consume_all(listener: KafkaListener, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": listener.bootstrap_servers,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": "false",
        }
    )
    consumer.assign([TopicPartition(TOPIC, partition, 0) for partition in range(PARTITIONS)])
    received: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(received) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                continue
            value = message.value()
            assert value is not None
            received.append(value)
    finally:
        consumer.close()
    return received


def state_of(broker: InProcessBroker, transactional_id: str) -> str:
    described = broker.transaction_coordinator.describe(transactional_id)
    assert described is not None
    return described.state


def test_confluent_commit_and_abort_write_markers_and_the_aborted_one_is_indexed(
    listener: KafkaListener, module_broker: InProcessBroker
) -> None:
    producer = transactional_producer(listener, "confluent-ledger")
    producer.begin_transaction()
    produce_all(producer, [b"c0", b"c1", b"c2", b"c3"])
    producer.commit_transaction(DEADLINE_S)
    assert state_of(module_broker, "confluent-ledger") == "CompleteCommit"
    producer.begin_transaction()
    produce_all(producer, [b"a0", b"a1"])
    producer.abort_transaction(DEADLINE_S)
    assert state_of(module_broker, "confluent-ledger") == "CompleteAbort"
    described = module_broker.transaction_coordinator.describe("confluent-ledger")
    assert described is not None
    pid, epoch = described.producer_id, described.producer_epoch
    for partition in range(PARTITIONS):
        kinds = [
            (kind, batch_pid, batch_epoch)
            for kind, batch_pid, batch_epoch, _ in batches(module_broker, TOPIC, partition)
        ]
        committed_end = kinds.index(("COMMIT", pid, epoch))
        assert {kind for kind in kinds[:committed_end]} == {("data", pid, epoch)}
        assert kinds[committed_end + 1 :][-1] == ("ABORT", pid, epoch)
        assert {kind for kind in kinds[committed_end + 1 : -1]} == {("data", pid, epoch)}
        log = module_broker.leader(TOPIC, partition).log
        assert log.last_stable_offset == log.log_end_offset
        (aborted,) = log.collect_aborted_transactions(0, log.log_end_offset)
        assert (aborted.producer_id, aborted.last_offset) == (pid, log.log_end_offset - 1)
    received = consume_all(listener, 6)
    assert sorted(received) == [b"a0", b"a1", b"c0", b"c1", b"c2", b"c3"]
    producer.flush(DEADLINE_S)


def test_confluent_send_offsets_commits_the_groups_offsets_with_the_transaction(
    listener: KafkaListener, module_broker: InProcessBroker
) -> None:
    producer = transactional_producer(listener, "confluent-consume-transform-produce")
    consumer = Consumer(
        {"bootstrap.servers": listener.bootstrap_servers, "group.id": "ctp", "enable.auto.commit": "false"}
    )
    try:
        producer.begin_transaction()
        produce_all(producer, [b"out-0", b"out-1"])
        # TxnOffsetCommit carries the offset's metadata and leader epoch; OffsetFetch answers them after the commit.
        # confluent-kafka sends the metadata string with its terminating NUL, which the coordinator keeps as sent.
        sent = TopicPartition("source", 0, 42, "txn-meta", 0)
        producer.send_offsets_to_transaction([sent], consumer.consumer_group_metadata())
        # Pending until the COMMIT marker reaches the group's __consumer_offsets partition.
        assert module_broker.group_coordinator.fetch_committed("ctp", [("source", 0)]) == {("source", 0): None}
        assert module_broker.group_coordinator.unstable_offsets("ctp", [("source", 0)]) == {("source", 0)}
        producer.commit_transaction(DEADLINE_S)
        assert module_broker.group_coordinator.fetch_committed("ctp", [("source", 0)]) == {
            ("source", 0): OffsetAndMetadata(42, 0, "txn-meta\x00")
        }
        committed = consumer.committed([TopicPartition("source", 0)], DEADLINE_S)
        assert (committed[0].offset, committed[0].metadata, committed[0].leader_epoch) == (42, "txn-meta", 0)

        producer.begin_transaction()
        produce_all(producer, [b"out-2"])
        producer.send_offsets_to_transaction([TopicPartition("source", 0, 50)], consumer.consumer_group_metadata())
        producer.abort_transaction(DEADLINE_S)
        assert module_broker.group_coordinator.fetch_committed("ctp", [("source", 0)]) == {
            ("source", 0): OffsetAndMetadata(42, 0, "txn-meta\x00")
        }
        assert module_broker.group_coordinator.unstable_offsets("ctp", [("source", 0)]) == set()
    finally:
        consumer.close()


def test_a_second_producer_of_the_same_id_fences_the_first_and_aborts_its_transaction(
    listener: KafkaListener, module_broker: InProcessBroker
) -> None:
    zombie = transactional_producer(listener, "fenced-id")
    zombie.begin_transaction()
    produce_all(zombie, [b"zombie-0", b"zombie-1"])
    described = module_broker.transaction_coordinator.describe("fenced-id")
    assert described is not None and described.state == "Ongoing"
    old_epoch = described.producer_epoch
    successor = transactional_producer(listener, "fenced-id")
    described = module_broker.transaction_coordinator.describe("fenced-id")
    # The fence bumps once to abort, the retried InitProducerId once more (Kafka's "epoch rises by 2").
    assert described is not None and (described.state, described.producer_epoch) == ("Empty", old_epoch + 2)
    for partition in range(PARTITIONS):
        assert batches(module_broker, TOPIC, partition)[-1] == ("ABORT", described.producer_id, old_epoch + 1, 1)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(DEADLINE_S)
    assert fenced.value.args[0].fatal()
    successor.begin_transaction()
    produce_all(successor, [b"successor"])
    successor.commit_transaction(DEADLINE_S)
    assert state_of(module_broker, "fenced-id") == "CompleteCommit"


def test_kafka_python_transactional_producer_commits(listener: KafkaListener, module_broker: InProcessBroker) -> None:
    producer = KafkaProducer(bootstrap_servers=listener.bootstrap_servers, transactional_id="kafka-python-ledger")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for index in range(4):
            producer.send(TOPIC, value=f"kp-{index}".encode(), partition=index % PARTITIONS)
        producer.commit_transaction()
        assert state_of(module_broker, "kafka-python-ledger") == "CompleteCommit"
        described = module_broker.transaction_coordinator.describe("kafka-python-ledger")
        assert described is not None
        for partition in range(PARTITIONS):
            assert batches(module_broker, TOPIC, partition)[-1][:3] == (
                "COMMIT",
                described.producer_id,
                described.producer_epoch,
            )
        producer.begin_transaction()
        producer.send(TOPIC, value=b"kp-aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
        assert state_of(module_broker, "kafka-python-ledger") == "CompleteAbort"
        assert batches(module_broker, TOPIC, 0)[-1][0] == ControlRecordType.ABORT.name
    finally:
        producer.close(timeout=5)


@pytest.mark.ray
def test_confluent_transactions_on_the_ray_broker_and_the_transactions_command(
    start_test_broker: Callable[..., tuple[Any, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    broker, _ = start_test_broker()
    # Two `__transaction_state` partitions: each partition of the topic is an actor process.
    properties = {"listeners": "PLAINTEXT://127.0.0.1:0", "transaction.state.log.num.partitions": "2"}
    with KafkaListener(properties) as ray_listener:
        call(broker.controller.create_topic.remote(TOPIC, PARTITIONS))
        call(broker.controller.create_topic.remote("source", 1))
        producer = transactional_producer(ray_listener, "ray-ledger")
        group = Consumer(
            {"bootstrap.servers": ray_listener.bootstrap_servers, "group.id": "ray-ctp", "enable.auto.commit": "false"}
        )
        producer.begin_transaction()
        produce_all(producer, [b"r0", b"r1"])
        producer.send_offsets_to_transaction([TopicPartition("source", 0, 9)], group.consumer_group_metadata())
        producer.commit_transaction(DEADLINE_S)
        assert group.committed([TopicPartition("source", 0)], DEADLINE_S)[0].offset == 9
        group.close()
        producer.begin_transaction()
        produce_all(producer, [b"r2", b"r3"])
        producer.abort_transaction(DEADLINE_S)
        assert sorted(consume_all(ray_listener, 4)) == [b"r0", b"r1", b"r2", b"r3"]
        coordinator = get_actor(transaction_coordinator_name())
        described = call(coordinator.describe.remote("ray-ledger"))
        assert described.state == "CompleteAbort"
        for partition in range(PARTITIONS):
            kinds = []
            for batch in iter_batches(call(broker.partition(TOPIC, partition).read.remote(0, 1 << 20))):
                marker = batch.end_transaction_marker() if batch.is_control else None
                kinds.append("data" if marker is None else marker.control_type.name)
                assert (batch.producer_id, batch.producer_epoch) == (described.producer_id, described.producer_epoch)
            assert kinds == ["data", "COMMIT", "data", "ABORT"]
        assert len(broker.topic(TRANSACTION_STATE_TOPIC).partitions) == 2
        capsys.readouterr()
        assert main(["transactions", "--list"]) == EXIT_OK
        listed = capsys.readouterr().out.split()
        assert listed[:4] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert listed[4:] == ["ray-ledger", "0", str(described.producer_id), "CompleteAbort"]
        assert main(["transactions", "--describe", "--transactional-id", "ray-ledger"]) == EXIT_OK
        row = capsys.readouterr().out.splitlines()[1].split()
        assert row[:5] == [
            "0",
            "ray-ledger",
            str(described.producer_id),
            str(described.producer_epoch),
            "CompleteAbort",
        ]
        assert main(["transactions", "--describe", "--transactional-id", "unknown"]) == EXIT_DATA_ERROR
        assert main(["transactions", "--describe"]) == EXIT_USAGE


@pytest.mark.ray
@pytest.mark.parametrize("restarted_by", ["ray", "controller"])
def test_a_transaction_whose_producer_went_silent_is_aborted_by_a_new_coordinator_at_its_timeout(
    start_test_broker: Callable[..., tuple[Any, Any]], restarted_by: str
) -> None:
    """A confluent producer begins a transaction, writes one record and goes silent; the coordinator's actor is
    killed, and either Ray restarts it in place (its process died) or, killed for good as when its node is lost, the
    controller starts a new one. No client calls the new coordinator, yet it loads the Ongoing transaction and aborts
    it once its `transaction.timeout.ms` has passed, as Kafka's does after a coordinator moves: the ABORT marker
    follows the record and the partition's last stable offset reaches its end, so read_committed readers go on."""
    broker, _ = start_test_broker(
        transaction_abort_timed_out_transaction_cleanup_interval_ms="500", transaction_state_log_num_partitions="2"
    )
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as ray_listener:
        call(broker.controller.create_topic.remote("silent", 1))
        producer = Producer(
            {
                "bootstrap.servers": ray_listener.bootstrap_servers,
                "transactional.id": "silent-writer",
                "transaction.timeout.ms": "3000",
            }
        )
        producer.init_transactions(DEADLINE_S)
        producer.begin_transaction()
        producer.produce("silent", value=b"left open", partition=0)
        assert producer.flush(DEADLINE_S) == 0
        partition = broker.partition("silent", 0)
        state = call(partition.state.remote())
        assert (state.last_stable_offset, state.log_end_offset) == (0, 1)
        coordinator = get_actor(transaction_coordinator_name())
        ray.kill(coordinator, no_restart=restarted_by == "controller")
        deadline = time.monotonic() + 60
        while call(partition.state.remote()).last_stable_offset != 2:
            assert time.monotonic() < deadline, "the open transaction was not aborted"
            time.sleep(0.2)
        kinds = []
        for batch in iter_batches(call(partition.read.remote(0, 1 << 20))):
            marker = batch.end_transaction_marker() if batch.is_control else None
            kinds.append("data" if marker is None else marker.control_type.name)
        assert kinds == ["data", "ABORT"]
        coordinator = get_actor(transaction_coordinator_name())
        assert call(coordinator.describe.remote("silent-writer")).state == "CompleteAbort"
        del producer
