"""ElectLeaders without sockets, on a two-node in-process broker (real replicas that catch up): a preferred leader
that came back leads again when asked, each partition answers Kafka's code, an election of every partition names
only those that needed one, an unclean election brings an offline partition back, and only a principal with ALTER
on the cluster may ask."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.replication.leader_and_isr import NO_LEADER
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.handlers.elect_leaders import ELECT_LEADERS_KEY, ElectLeadersHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.handlers.test_authorization import access_with, ask, on_cluster
from tests.cluster.protocol.helpers import answer_async, run, start_broker

DEADLINE_S = 10.0
PREFERRED, UNCLEAN = 0, 1


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path / "two", nodes=2)
    try:
        yield running
    finally:
        running.close()


def elect(
    view: InProcessBrokerView, version: int, partitions: dict[str, list[int]] | None, kind: int = PREFERRED
) -> Any:
    values: dict[str, Any] = {
        "topic_partitions": None
        if partitions is None
        else [{"topic": topic, "partitions": numbers} for topic, numbers in partitions.items()],
        "timeout": 10_000,
    }
    if version >= 1:
        values["election_type"] = kind
    return run(answer_async(ElectLeadersHandler(view), ELECT_LEADERS_KEY, version, values))


def codes(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (r.topic, p.partition_id): p.error_code for r in answer.replica_election_results for p in r.partition_result
    }


def in_sync_again(broker: InProcessBroker, topic: str, partitions: int) -> None:
    """Until every replica of the topic is back in its partition's ISR (the restarted follower caught up)."""
    deadline = time.monotonic() + DEADLINE_S
    while any(len(broker.controller.partition_state(topic, p).isr) < 2 for p in range(partitions)):
        assert time.monotonic() < deadline, "the restarted replica did not rejoin the ISR"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "version", range(SERVED[ELECT_LEADERS_KEY].min_version, SERVED[ELECT_LEADERS_KEY].max_version + 1)
)
def test_a_preferred_leader_back_in_sync_leads_again_when_asked(two_nodes: InProcessBroker, version: int) -> None:
    view = InProcessBrokerView(two_nodes)
    run(view.create_topic("t", 2, replication_factor=2))
    preferred = {p: two_nodes.controller.partition_state("t", p).replicas[0] for p in range(2)}
    lost = preferred[0]
    two_nodes.lose_node(lost)
    two_nodes.restart_node(lost)
    in_sync_again(two_nodes, "t", 2)
    answer = elect(view, version, {"t": [0, 1, 5], "gone": [0]})
    if version >= 1:
        assert answer.error_code == ErrorCode.none
    assert codes(answer) == {
        **{
            ("t", p): ErrorCode.none if node == lost else ErrorCode.election_not_needed for p, node in preferred.items()
        },
        ("t", 5): ErrorCode.unknown_topic_or_partition,
        ("gone", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert {p: two_nodes.controller.partition_state("t", p).leader for p in range(2)} == preferred
    assert codes(elect(view, version, None)) == {}


def test_an_unclean_election_brings_back_a_partition_whose_in_sync_replica_is_gone(two_nodes: InProcessBroker) -> None:
    view = InProcessBrokerView(two_nodes)
    run(view.create_topic("t", 1, replication_factor=2))
    leader, follower = two_nodes.controller.partition_state("t", 0).replicas
    # The follower goes first (the ISR shrinks to the leader), then the leader: offline; the follower comes back,
    # out of sync.
    two_nodes.lose_node(follower)
    two_nodes.lose_node(leader)
    two_nodes.restart_node(follower)
    assert two_nodes.controller.partition_state("t", 0).leader == NO_LEADER
    assert codes(elect(view, 2, {"t": [0]}, PREFERRED)) == {("t", 0): ErrorCode.preferred_leader_not_available}
    assert codes(elect(view, 2, {"t": [0]}, UNCLEAN)) == {("t", 0): ErrorCode.none}
    assert two_nodes.controller.partition_state("t", 0).leader == follower
    assert codes(elect(view, 2, {"t": [0]}, UNCLEAN)) == {("t", 0): ErrorCode.election_not_needed}


def test_only_alter_on_the_cluster_may_elect(broker: InProcessBroker, security: SecurityView) -> None:
    view = InProcessBrokerView(broker)
    run(view.create_topic("t", 1))
    request = {"election_type": PREFERRED, "topic_partitions": [{"topic": "t", "partitions": [0]}], "timeout": 1000}
    denied = ask(ElectLeadersHandler(view, access_with(security)), ELECT_LEADERS_KEY, request)
    assert (denied.error_code, codes(denied)) == (
        ErrorCode.cluster_authorization_failed,
        {("t", 0): ErrorCode.cluster_authorization_failed},
    )
    allowed = ask(
        ElectLeadersHandler(view, access_with(security, on_cluster(AclOperation.ALTER))), ELECT_LEADERS_KEY, request
    )
    assert (allowed.error_code, codes(allowed)) == (ErrorCode.none, {("t", 0): ErrorCode.election_not_needed})
