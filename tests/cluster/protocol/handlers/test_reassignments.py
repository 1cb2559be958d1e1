"""AlterPartitionReassignments and ListPartitionReassignments without sockets, on a two-node in-process broker (real
replicas that fetch and catch up): a partition moved to the other broker keeps every record and its old replica's
folder goes; the move is listed while under way; Kafka's per-partition errors and messages; and only a principal
with ALTER (DESCRIBE to list) on the cluster may ask."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.handlers.reassignments import (
    ALTER_PARTITION_REASSIGNMENTS_KEY,
    LIST_PARTITION_REASSIGNMENTS_KEY,
    AlterPartitionReassignmentsHandler,
    ListPartitionReassignmentsHandler,
)
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.handlers.test_authorization import access_with, ask, on_cluster
from tests.cluster.protocol.helpers import answer_async, run, start_broker

DEADLINE_S = 10.0
BROKER_IDS = {"node-0": 10, "node-1": 11}


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[tuple[InProcessBroker, InProcessBrokerView]]:
    running = start_broker(tmp_path / "two", nodes=2)
    try:
        views = {node: InProcessBrokerView(running, node) for node in BROKER_IDS}
        for node, broker_id in BROKER_IDS.items():
            run(views[node].announce(BrokerEndpoint(broker_id, node, 9092)))
        yield running, views["node-0"]
    finally:
        running.close()


def alter(
    view: InProcessBrokerView, moves: dict[tuple[str, int], list[int] | None], allow_factor_change: bool | None = None
) -> Any:
    """AlterPartitionReassignments v0, or v1 with `allow_factor_change` when given."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), replicas in moves.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    values: dict[str, Any] = {
        "timeout": 10_000,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
    version = 0
    if allow_factor_change is not None:
        values["allow_replication_factor_change"], version = allow_factor_change, 1
    handler = AlterPartitionReassignmentsHandler(view)
    return run(answer_async(handler, ALTER_PARTITION_REASSIGNMENTS_KEY, version, values))


def answers(response: Any) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    return {
        (topic.name, p.partition_index): (p.error_code, p.error_message)
        for topic in response.responses
        for p in topic.partitions
    }


def listed(view: InProcessBrokerView, topics: list[dict[str, Any]] | None = None) -> dict[tuple[str, int], Any]:
    values = {"timeout": 10_000, "topics": topics}
    response = run(answer_async(ListPartitionReassignmentsHandler(view), LIST_PARTITION_REASSIGNMENTS_KEY, 0, values))
    assert response.error_code == ErrorCode.none
    return {
        (topic.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for topic in response.topics
        for p in topic.partitions
    }


def write(broker: InProcessBroker, topic: str, count: int) -> None:
    for index in range(count):
        builder = RecordBatchBuilder()
        builder.append(None, f"value-{index}".encode(), timestamp=1)
        broker.leader(topic, 0).append(builder.build(), 1)


def test_a_partition_moves_to_the_other_broker_with_every_record(two_nodes: tuple[InProcessBroker, Any]) -> None:
    broker, view = two_nodes
    run(view.create_topic("t", 1, replication_factor=1))
    source = broker.controller.partition_state("t", 0).leader
    (target,) = [node for node in BROKER_IDS if node != source]
    write(broker, "t", 50)
    before = [record.value for record in broker.replica_on(source, "t", 0).log.records()]

    response = alter(view, {("t", 0): [BROKER_IDS[target]]})
    assert (response.error_code, answers(response)) == (ErrorCode.none, {("t", 0): (ErrorCode.none, None)})
    deadline = time.monotonic() + DEADLINE_S
    while broker.controller.partition_state("t", 0).replicas != (target,):
        assert time.monotonic() < deadline, "the new replica did not catch up"
        assert listed(view) in (
            {("t", 0): ((BROKER_IDS[target], BROKER_IDS[source]), (BROKER_IDS[target],), (BROKER_IDS[source],))},
            {},
        )
        time.sleep(0.02)
    state = broker.controller.partition_state("t", 0)
    assert (state.leader, state.isr) == (target, (target,))
    assert [record.value for record in broker.replica_on(target, "t", 0).log.records()] == before
    # The controller deletes the old replica once it has recorded the move's end, outside its lock (Kafka's
    # StopReplica with deletion follows the state change too): a read of the state may come first.
    while any(p.topic == "t" for p in broker.nodes[source].manager.placements()):
        assert time.monotonic() < deadline, "the old replica is not deleted"
        time.sleep(0.02)
    assert listed(view) == {}


def test_kafkas_errors_and_messages_per_partition(two_nodes: tuple[InProcessBroker, Any]) -> None:
    broker, view = two_nodes
    run(view.create_topic("t", 2, replication_factor=1))
    response = alter(view, {("t", 0): [], ("t", 1): [10, 99], ("missing", 0): [10], ("t", 7): [10]})
    assert answers(response) == {
        ("t", 0): (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        ),
        ("t", 1): (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes broker 99, but no such broker is registered.",
        ),
        ("missing", 0): (ErrorCode.unknown_topic_or_partition, None),
        ("t", 7): (ErrorCode.unknown_topic_or_partition, None),
    }
    assert answers(alter(view, {("t", 0): [11, 11]})) == {
        ("t", 0): (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes the broker 11 more than once.",
        )
    }
    assert answers(alter(view, {("t", 0): None})) == {("t", 0): (ErrorCode.no_reassignment_in_progress, None)}
    # A lost broker's id is no longer registered.
    source = broker.controller.partition_state("t", 0).leader
    (target,) = [node for node in BROKER_IDS if node != source]
    broker.lose_node(target)
    assert answers(alter(view, {("t", 0): [BROKER_IDS[target]]})) == {
        ("t", 0): (
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes broker {BROKER_IDS[target]}, but no such broker is registered.",
        )
    }
    assert listed(view) == {} and listed(view, [{"name": "t", "partition_indexes": [0, 1]}]) == {}


def test_v1_without_replication_factor_change_refuses_a_move_to_another_count_of_replicas(
    two_nodes: tuple[InProcessBroker, Any],
) -> None:
    """KIP-860 (Kafka 4.1's AllowReplicationFactorChange): a move to another number of replicas answers
    INVALID_REPLICATION_FACTOR with Kafka's message and changes nothing, one of the same number starts, and the
    answer repeats the flag."""
    broker, view = two_nodes
    run(view.create_topic("rf", 2, replication_factor=1))
    before = {p: broker.controller.partition_state("rf", p) for p in range(2)}
    (elsewhere,) = [node for node in BROKER_IDS if node != before[1].leader]
    response = alter(view, {("rf", 0): [10, 11], ("rf", 1): [BROKER_IDS[elsewhere]]}, allow_factor_change=False)
    assert response.allow_replication_factor_change is False
    assert answers(response) == {
        ("rf", 0): (ErrorCode.invalid_replication_factor, "The replication factor is changed from 1 to 2"),
        ("rf", 1): (ErrorCode.none, None),
    }
    assert broker.controller.partition_state("rf", 0) == before[0]
    assert broker.controller.partition_state("rf", 1).target == (elsewhere,)
    allowed = alter(view, {("rf", 0): [10, 11]}, allow_factor_change=True)
    assert allowed.allow_replication_factor_change is True
    assert answers(allowed) == {("rf", 0): (ErrorCode.none, None)}


def test_only_alter_on_the_cluster_may_reassign_and_describe_list(
    broker: InProcessBroker, security: SecurityView
) -> None:
    view = InProcessBrokerView(broker)
    run(view.create_topic("t", 1))
    request = {"timeout": 1000, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": None}]}]}
    denied = ask(
        AlterPartitionReassignmentsHandler(view, access_with(security)), ALTER_PARTITION_REASSIGNMENTS_KEY, request
    )
    assert (denied.error_code, answers(denied)) == (
        ErrorCode.cluster_authorization_failed,
        {("t", 0): (ErrorCode.cluster_authorization_failed, None)},
    )
    allowed = ask(
        AlterPartitionReassignmentsHandler(view, access_with(security, on_cluster(AclOperation.ALTER))),
        ALTER_PARTITION_REASSIGNMENTS_KEY,
        request,
    )
    assert answers(allowed) == {("t", 0): (ErrorCode.no_reassignment_in_progress, None)}
    listing = {"timeout": 1000, "topics": None}
    handler = ListPartitionReassignmentsHandler(view, access_with(security))
    assert ask(handler, LIST_PARTITION_REASSIGNMENTS_KEY, listing).error_code == ErrorCode.cluster_authorization_failed
    handler = ListPartitionReassignmentsHandler(view, access_with(security, on_cluster(AclOperation.DESCRIBE)))
    assert ask(handler, LIST_PARTITION_REASSIGNMENTS_KEY, listing).error_code == ErrorCode.none
