"""Deleting a topic deletes its committed offsets, seen by real clients over 127.0.0.1 (Kafka's
`onPartitionsDeleted`): after confluent-kafka's AdminClient deletes a topic, OffsetFetch (confluent's and
kafka-python's admin clients) no longer names its partitions, ListGroups no longer lists a group whose only offsets
were on it, DescribeGroups answers it as Dead, a group with offsets on another topic keeps them, and a topic created
again under the same name has no committed offsets. The oracle is a dict of the offsets each group committed.
No Ray: the listener serves the in-process broker (`InProcessBrokerView`, `GroupView.in_process`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from cluster.protocol.listener import KafkaListener
from tests.cluster.protocol.helpers import start_broker, start_local_listener

TIMEOUT_S = 15.0
QUIET = {"log_level": 0}
COMMITS = {
    "both": {("gone", 0): 5, ("kept", 0): 7},
    "only-gone": {("gone", 0): 3, ("gone", 1): 4},
}


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[KafkaListener]:
    broker = start_broker(tmp_path / "broker")
    try:
        with start_local_listener(broker) as started:
            yield started
    finally:
        broker.close()


def create(admin: AdminClient, topic: str, partitions: int) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """A consumer of `group` that assigns its partitions itself commits `offsets` (generation -1, as an operator's
    tool or a self-assigning consumer does)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET})
    try:
        partitions = [TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()]
        consumer.commit(offsets=partitions, asynchronous=False)
    finally:
        consumer.close()


def fetched(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as OffsetFetch of every partition answers them (what
    `kafka-consumer-groups.sh --describe` starts with)."""
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    answer = future.result(TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}


def test_a_deleted_topics_offsets_leave_every_group_and_do_not_come_back(listener: KafkaListener) -> None:
    bootstrap = listener.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    create(admin, "gone", 2)
    create(admin, "kept", 1)
    for group, offsets in COMMITS.items():
        commit(bootstrap, group, offsets)
    assert {group: fetched(admin, group) for group in COMMITS} == COMMITS
    assert {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT_S).valid} == set(COMMITS)

    admin.delete_topics(["gone"])["gone"].result(TIMEOUT_S)
    expected = {group: {tp: o for tp, o in offsets.items() if tp[0] != "gone"} for group, offsets in COMMITS.items()}
    assert {group: fetched(admin, group) for group in COMMITS} == expected
    assert {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT_S).valid} == {"both"}
    described = admin.describe_consumer_groups(["only-gone"])["only-gone"].result(TIMEOUT_S)
    assert (str(described.state), described.members) == ("ConsumerGroupState.DEAD", [])
    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answers = python_admin.list_group_offsets(list(COMMITS))
        assert {
            group: {(tp.topic, tp.partition): meta.offset for tp, meta in answer.items()}
            for group, answer in answers.items()
        } == expected
    finally:
        python_admin.close()

    create(admin, "gone", 2)
    assert {group: fetched(admin, group) for group in COMMITS} == expected
