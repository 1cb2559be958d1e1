"""The broker configs set at run time (`actors.core.controller.dynamic_broker_configs`) and the replication throttles
the controller derives from them and the topics' throttled-replicas configs, plain, no Ray: Kafka's checks, each
broker's level over every broker's, kept across a controller's restart, and each node's throttled partitions by its
listener's `node.id`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.controller.topic_metadata import AdvertisedListener
from actors.core.quotas.replication_quotas import ALL_PARTITIONS, ReplicationThrottles
from storage.clock import MockClock
from storage.errors import InvalidRequestError
from tests.actors.core.controller.test_controller import NODES, Cluster

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


@contextlib.contextmanager
def started(tmp_path: Path, properties: dict[str, str] | None = None) -> Iterator[Cluster]:
    """`NODES` registered, each with a listener of `node.id` 1, 2, 3, under a controller with `properties`."""
    running = Cluster(tmp_path, MockClock(), properties)
    running.register(*NODES)
    for broker_id, node in enumerate(NODES, start=1):
        running.controller.register_listener(node, AdvertisedListener(broker_id, "127.0.0.1", 9000 + broker_id))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started(tmp_path) as running:
        yield running


def test_a_brokers_level_comes_before_every_brokers_and_survives_a_restart(cluster: Cluster) -> None:
    controller = cluster.controller
    controller.alter_broker_configs("", {LEADER_RATE: "500", FOLLOWER_RATE: "600"})
    controller.alter_broker_configs("2", {LEADER_RATE: "100"})
    assert controller.broker_configs("2") == ({LEADER_RATE: "100"}, {LEADER_RATE: "500", FOLLOWER_RATE: "600"})
    assert controller.replication_throttles(NODES[1]) == ReplicationThrottles(100, 600, frozenset(), frozenset())
    assert controller.replication_throttles(NODES[0]) == ReplicationThrottles(500, 600, frozenset(), frozenset())
    controller.close()
    cluster.controller = restarted = cluster.start_controller()
    assert restarted.broker_configs("2") == ({LEADER_RATE: "100"}, {LEADER_RATE: "500", FOLLOWER_RATE: "600"})
    restarted.alter_broker_configs("2", {LEADER_RATE: None, "replica.alter.log.dirs.io.max.bytes.per.second": None})
    restarted.alter_broker_configs("", {LEADER_RATE: None, FOLLOWER_RATE: None})
    assert restarted.broker_configs("2") == ({}, {})


@pytest.mark.parametrize(
    ("broker", "changes", "message"),
    [
        ("1", {"log.retention.hours": "1"}, r"Cannot update these configs dynamically: \['log.retention.hours'\]"),
        ("1", {LEADER_RATE: "fast"}, "Not a number of type LONG"),
        ("1", {LEADER_RATE: "-1"}, "Value must be at least 0"),
        ("one", {LEADER_RATE: "1"}, "broker id must be an integer"),
    ],
)
def test_kafkas_refusals_change_nothing(cluster: Cluster, broker: str, changes: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        cluster.controller.alter_broker_configs(broker, {FOLLOWER_RATE: "7", **changes})
    assert cluster.controller.broker_configs("1") == ({}, {})


def test_validate_only_writes_nothing(cluster: Cluster) -> None:
    cluster.controller.alter_broker_configs("1", {LEADER_RATE: "5"}, validate_only=True)
    assert cluster.controller.broker_configs("1") == ({}, {})


def test_each_node_is_throttled_on_the_partitions_listed_for_its_node_id(cluster: Cluster) -> None:
    controller = cluster.controller
    controller.create_topic(
        "moved",
        3,
        {"leader.replication.throttled.replicas": "0:1,1:2", "follower.replication.throttled.replicas": "0:2,2:2"},
    )
    controller.create_topic("all", 1, {"follower.replication.throttled.replicas": "*"})
    controller.create_topic("plain", 1)
    first, second, third = (controller.replication_throttles(node) for node in NODES)
    assert (first.leader, first.follower) == ({("moved", 0)}, {("all", ALL_PARTITIONS)})
    assert (second.leader, second.follower) == (
        {("moved", 1)},
        {("moved", 0), ("moved", 2), ("all", ALL_PARTITIONS)},
    )
    assert (third.leader, third.follower) == (frozenset(), {("all", ALL_PARTITIONS)})
    controller.set_topic_config("moved", {})
    assert controller.replication_throttles(NODES[1]).leader == frozenset()


def test_a_node_without_a_listener_goes_by_the_node_id_it_gives(cluster: Cluster) -> None:
    controller = cluster.controller
    controller.create_topic("moved", 1, {"follower.replication.throttled.replicas": "0:7"})
    assert controller.replication_throttles("node-x").follower == frozenset()
    assert controller.replication_throttles("node-x", 7).follower == {("moved", 0)}


@pytest.fixture
def balancing(tmp_path: Path) -> Iterator[Cluster]:
    with started(tmp_path, {"raybroker.balancer.replication.throttle": "5000"}) as running:
        yield running


def test_the_controllers_own_moves_are_throttled_at_the_balancer_rate(balancing: Cluster) -> None:
    """A drain's move (the added replica never catches up here: its replicas are recorded, not run) is throttled on
    its current replicas as leaders and its added one as a follower, at `raybroker.balancer.replication.throttle`
    where no rate is set; an operator's move is not, a rate set at run time takes the balancer's place, and a move
    cancelled is forgotten."""
    controller = balancing.controller
    controller.create_topic("drained", 1, replication_factor=1)
    (source,) = controller.partition_state("drained", 0).replicas
    ((_, _, (target,)),) = controller.drain_broker(source)
    assert controller.replication_throttles(source) == ReplicationThrottles(
        5000, None, frozenset({("drained", 0)}), frozenset()
    )
    assert controller.replication_throttles(target) == ReplicationThrottles(
        None, 5000, frozenset(), frozenset({("drained", 0)})
    )
    controller.alter_broker_configs("", {FOLLOWER_RATE: "70"})
    assert controller.replication_throttles(target).follower_rate == 70
    controller.create_topic("asked", 1, replication_factor=1)
    (asked_source,) = controller.partition_state("asked", 0).replicas
    other = next(node for node in NODES if node != asked_source and node != source)
    controller.alter_partition_reassignments({("asked", 0): (other,)})
    assert all(("asked", 0) not in controller.replication_throttles(node).follower for node in NODES)
    controller.alter_partition_reassignments({("drained", 0): None})
    assert controller.balancer_moves() == []
    assert controller.replication_throttles(target).follower == frozenset()


def test_a_restarted_controller_goes_on_throttling_its_predecessors_moves(balancing: Cluster) -> None:
    """The balancer's move is recorded as such with the partition's state: the controller started again (replaying
    the metadata log) still throttles it, and an operator's move still is not."""
    controller = balancing.controller
    controller.create_topic("drained", 1, replication_factor=1)
    (source,) = controller.partition_state("drained", 0).replicas
    ((_, _, (target,)),) = controller.drain_broker(source)
    controller.create_topic("asked", 1, replication_factor=1)
    (asked_source,) = controller.partition_state("asked", 0).replicas
    other = next(node for node in NODES if node != asked_source)
    controller.alter_partition_reassignments({("asked", 0): (other,)})
    before = {node: controller.replication_throttles(node) for node in NODES}
    controller.close()
    balancing.controller = restarted = balancing.start_controller()
    assert [(state.topic, state.partition) for state in restarted.balancer_moves()] == [("drained", 0)]
    assert {node: restarted.replication_throttles(node) for node in NODES} == before
    assert ("drained", 0) in restarted.replication_throttles(target).follower


def test_a_balancer_throttle_of_minus_one_throttles_nothing(tmp_path: Path) -> None:
    with started(tmp_path, {"raybroker.balancer.replication.throttle": "-1"}) as running:
        controller = running.controller
        controller.create_topic("drained", 1, replication_factor=1)
        (source,) = controller.partition_state("drained", 0).replicas
        controller.drain_broker(source)
        assert {controller.replication_throttles(node) for node in NODES} == {
            ReplicationThrottles(None, None, frozenset(), frozenset())
        }
