"""Consumer groups with real Kafka clients over 127.0.0.1: a confluent-kafka group of two members, each through
its own listener, that splits a 4-partition topic and rebalances when one leaves, committed offsets resumed by a
new member, a kafka-python group member that commits, AdminClient listing and describing groups, and the paths
between the wire and raybroker's own tools: `raybroker consumer-groups` shows offsets committed over the wire,
and offsets committed by the Python `Consumer` are fetched over the wire.

The oracle is what was produced: every (partition, offset) the producer's delivery reports named, each consumed
exactly once per generation, and committed offsets equal to the partitions' ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer

from actors.clients.consumer import Consumer as PythonConsumer
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, main
from cluster.protocol.listener import KafkaListener

pytestmark = pytest.mark.ray

PARTITIONS = 4
DEADLINE_S = 30.0
# Short sessions so that a rebalance takes about a second (Kafka's group.min.session.timeout.ms is 6000).
GROUP_SETTINGS = {
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": "false",
    "topic.metadata.refresh.interval.ms": "1000",
}


@pytest.fixture(scope="module")
def listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    # The consumer protocol's heartbeat at 1 s (Kafka's default 5 s): its members learn of a new target at their next.
    start_test_broker(
        num_partitions=str(PARTITIONS),
        group_consumer_heartbeat_interval_ms="1000",
        group_consumer_min_heartbeat_interval_ms="1000",
    )
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": str(PARTITIONS)}) as started:
        yield started


def produce(listener: KafkaListener, topic: str, count: int, start: int = 0) -> set[tuple[int, int]]:
    """Sends `count` keyed records; returns the (partition, offset) of each, from the delivery reports."""
    producer = Producer({"bootstrap.servers": listener.bootstrap_servers, "linger.ms": "5"})
    delivered: set[tuple[int, int]] = set()

    def report(error: Any, message: Message) -> None:
        assert error is None, error
        delivered.add(position(message))

    for index in range(start, start + count):
        producer.produce(topic, key=f"key-{index}".encode(), value=f"value-{index}".encode(), on_delivery=report)
    assert producer.flush(DEADLINE_S) == 0
    assert len(delivered) == count
    return delivered


def position(message: Message) -> tuple[int, int]:
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None
    return partition, offset


def group_consumer(listener: KafkaListener, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": listener.bootstrap_servers, "group.id": group, **GROUP_SETTINGS})


def poll_until(consumers: list[Consumer], done: Callable[[], bool], received: list[list[tuple[int, int]]]) -> None:
    """Polls every consumer in turn (each one's poll also serves its rebalance callbacks and heartbeats) until
    `done()`; records each consumer's (partition, offset) in `received`."""
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, "the group did not get there in time"
        for consumer, seen in zip(consumers, received, strict=True):
            message = consumer.poll(0.1)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                continue
            seen.append(position(message))


def assigned(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_a_confluent_group_of_two_splits_the_topic_rebalances_on_leave_and_a_new_member_resumes(
    listener: KafkaListener,
) -> None:
    topic, group = "group-orders", "confluent-group"
    first_batch = produce(listener, topic, 40)
    # The members reach the group through different listeners: the group's state lives in the one coordinator.
    other_listener = KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": str(PARTITIONS)})
    first, second = group_consumer(listener, group), group_consumer(other_listener, group)
    first.subscribe([topic])
    second.subscribe([topic])
    received: list[list[tuple[int, int]]] = [[], []]
    try:
        poll_until(
            [first, second],
            lambda: (
                assigned(first) | assigned(second) == set(range(PARTITIONS))
                and not assigned(first) & assigned(second)
                and len(received[0]) + len(received[1]) >= len(first_batch)
            ),
            received,
        )
        # Each record read by exactly one member: the two halves are disjoint and make up what was produced.
        assert assigned(first) and assigned(second)
        assert sorted(received[0] + received[1]) == sorted(first_batch)
        assert {p for p, _ in received[0]} <= assigned(first) and {p for p, _ in received[1]} <= assigned(second)
        first.commit(asynchronous=False)
        second.commit(asynchronous=False)

        second.close()
        received = [[]]
        poll_until([first], lambda: assigned(first) == set(range(PARTITIONS)), received)
        second_batch = produce(listener, topic, 20, start=40)
        # The leaver's partitions resume from its commits: only the new records come, each once.
        poll_until([first], lambda: len(received[0]) >= len(second_batch), received)
        assert sorted(received[0]) == sorted(second_batch)
        first.commit(asynchronous=False)
    finally:
        first.close()
        other_listener.stop()

    ends = {partition: 1 + max(o for p, o in first_batch | second_batch if p == partition) for partition in range(4)}
    newcomer = group_consumer(listener, group)
    try:
        committed = newcomer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == ends
        third_batch = produce(listener, topic, 8, start=60)
        newcomer.subscribe([topic])
        received = [[]]
        poll_until([newcomer], lambda: len(received[0]) >= len(third_batch), received)
        assert sorted(received[0]) == sorted(third_batch)
    finally:
        newcomer.close()


def test_a_consumer_protocol_group_splits_the_topic_across_listeners_and_the_tools_show_it(
    listener: KafkaListener, capsys: pytest.CaptureFixture[str]
) -> None:
    """KIP-848 through the coordinator actor: two librdkafka members of `group.protocol=consumer`, each through its
    own listener, split the topic 2/2 and read every record (a partition that moves before a commit is read again by
    its new owner: at least once); the admin client lists the group with its type and the CLI shows which member owns
    each partition."""
    topic, group = "group-kip848", "kip848-group"
    produced = produce(listener, topic, 40)
    other_listener = KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": str(PARTITIONS)})
    settings = {
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
    }
    members = [
        Consumer({"bootstrap.servers": server.bootstrap_servers, **settings}) for server in (listener, other_listener)
    ]
    received: list[list[tuple[int, int]]] = [[], []]
    try:
        for member in members:
            member.subscribe([topic])
        poll_until(
            members,
            lambda: sorted(len(assigned(m)) for m in members) == [2, 2] and set(received[0] + received[1]) >= produced,
            received,
        )
        # At least once: a partition that moves to the second member is read again from its last commit (none).
        assert set(received[0] + received[1]) == produced
        assert assigned(members[0]) | assigned(members[1]) == set(range(PARTITIONS))
        for member in members:
            member.commit(asynchronous=False)
        admin = AdminClient({"bootstrap.servers": listener.bootstrap_servers})
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(timeout=10).valid}
        assert str(listed[group].type) == "ConsumerGroupType.CONSUMER"
        assert main(["consumer-groups", "--describe", "--group", group]) == EXIT_OK
        rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
        owners = {int(row[2]): row[6] for row in rows}
        assert sorted(owners) == list(range(PARTITIONS)) and len(set(owners.values())) == 2
    finally:
        for member in members:
            member.close()
        other_listener.stop()


def test_a_python_consumer_and_a_kafka_client_share_one_consumer_protocol_group(listener: KafkaListener) -> None:
    """raybroker's Python `Consumer(group_protocol="consumer")`, talking to the coordinator actor, and a librdkafka
    member over the wire are members of one group: they split the topic 2/2 and every record is read (at least once:
    neither commits, so a partition that moves is read again by its new owner)."""
    topic, group = "group-mixed", "mixed-group"
    produced = produce(listener, topic, 40)
    wire = Consumer(
        {
            "bootstrap.servers": listener.bootstrap_servers,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
        }
    )
    python = PythonConsumer(group_id=group, group_protocol="consumer", auto_offset_reset="earliest")
    received: list[list[tuple[int, int]]] = [[]]
    from_python: list[tuple[int, int]] = []

    def python_polled() -> bool:
        from_python.extend((record.partition, record.offset) for record in python.poll(timeout_ms=50))
        return len(assigned(wire)) == 2 and len(python.assignment()) == 2

    try:
        wire.subscribe([topic])
        python.subscribe([topic])
        poll_until([wire], lambda: python_polled() and set(received[0] + from_python) >= produced, received)
        assert set(received[0] + from_python) == produced
        assert {partition for _, partition in python.assignment()} == set(range(PARTITIONS)) - assigned(wire)
    finally:
        python.close()
        wire.close()


def test_admin_clients_list_and_describe_a_group_and_the_cli_shows_its_offsets(
    listener: KafkaListener, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = "group-described", "described-group"
    produced = produce(listener, topic, 12)
    member = group_consumer(listener, group)
    member.subscribe([topic])
    received: list[list[tuple[int, int]]] = [[]]
    try:
        poll_until([member], lambda: len(received[0]) >= len(produced), received)
        member.commit(asynchronous=False)
        admin = AdminClient({"bootstrap.servers": listener.bootstrap_servers})
        listed = admin.list_consumer_groups().result(timeout=10)
        assert group in {g.group_id for g in listed.valid}
        (described,) = admin.describe_consumer_groups([group]).values()
        description = described.result(timeout=10)
        assert (description.group_id, str(description.state)) == (group, "ConsumerGroupState.STABLE")
        (one,) = description.members
        assert {tp.partition for tp in one.assignment.topic_partitions} == set(range(PARTITIONS))

        code = main(["consumer-groups", "--describe", "--group", group])
        out = capsys.readouterr().out
        assert code == EXIT_OK, out
        rows = [line.split() for line in out.splitlines()[1:]]
        ends = {p: 1 + max(o for q, o in produced if q == p) for p in range(PARTITIONS)}
        assert {(r[1], int(r[2])): (int(r[3]), int(r[4]), int(r[5])) for r in rows} == {
            (topic, p): (end, end, 0) for p, end in ends.items()
        }
        assert {r[6] for r in rows} == {one.member_id}
        assert main(["consumer-groups", "--delete", "--group", group]) == EXIT_DATA_ERROR
        assert "NON_EMPTY_GROUP" in capsys.readouterr().err
    finally:
        member.close()
    assert main(["consumer-groups", "--list"]) == EXIT_OK
    assert group in capsys.readouterr().out.split()
    assert (
        main(["consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"])
        == EXIT_OK
    )
    capsys.readouterr()
    check = group_consumer(listener, group)
    try:
        committed = check.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.offset for tp in committed} == {0}
    finally:
        check.close()
    assert main(["consumer-groups", "--delete", "--group", group]) == EXIT_OK
    assert main(["consumer-groups", "--list"]) == EXIT_OK
    assert group not in capsys.readouterr().out.split()


def test_a_kafka_python_group_member_consumes_and_commits(listener: KafkaListener) -> None:
    topic, group = "group-kafka-python", "kafka-python-group"
    produced = produce(listener, topic, 16)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=listener.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    seen: set[tuple[int, int]] = set()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < len(produced):
            assert time.monotonic() < deadline
            for records in consumer.poll(timeout_ms=500).values():
                seen.update((record.partition, record.offset) for record in records)
        assert seen == produced
        consumer.commit()
    finally:
        consumer.close()
    python_consumer = PythonConsumer(group_id=group)
    try:
        ends = {p: 1 + max(o for q, o in produced if q == p) for p in range(PARTITIONS)}
        assert {p: python_consumer.committed((topic, p)) for p in range(PARTITIONS)} == ends
    finally:
        python_consumer.close()


def test_offsets_committed_by_the_python_consumer_are_fetched_over_the_wire(listener: KafkaListener) -> None:
    topic, group = "group-python-commits", "python-consumer-group"
    produce(listener, topic, 4)
    python_consumer = PythonConsumer(group_id=group)
    try:
        python_consumer.commit({(topic, 0): 1, (topic, 3): 2})
    finally:
        python_consumer.close()
    wire = group_consumer(listener, group)
    try:
        committed = wire.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        # librdkafka reports "no committed offset" as OFFSET_INVALID (-1001).
        assert {tp.partition: tp.offset for tp in committed} == {0: 1, 1: -1001, 2: -1001, 3: 2}
    finally:
        wire.close()
