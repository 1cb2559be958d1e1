"""Self-healing through the plain controller over real log managers (the test cluster of `test_controller`): a
broker lost longer than `raybroker.balancer.node.loss.grace.ms` has each of its replicas re-created on the running
broker holding the fewest replicas that holds none of the partition (a reassignment, completed once the new
replica is in sync), nothing moves before the grace, a broker that registers again is not healed away, and a
partition that cannot be healed (no free broker, no leader) is left as it is until it can. A drained broker hands
its replicas over by the same rule and takes no new one; a drain that cannot move a partition moves nothing. A
follower joining the ISR is the test acting as the leader's AlterPartition."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.core.controller.controller import HEAL_CHECK_MS
from actors.core.controller.replica_moves import HEALS_PER_PASS
from actors.core.controller.self_healing import due, grown_replicas, healed_replicas, replica_counts
from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from actors.core.groups.offsets_topic import ensure_consumer_offsets_topic
from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from actors.core.transactions.state_topic import ensure_transaction_state_topic
from storage.clock import MockClock
from storage.errors import BrokerNotAvailableError, InvalidReplicaAssignmentError
from tests.actors.core.controller.test_controller import NODES, Cluster

GRACE_MS = 60_000


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    started = Cluster(tmp_path, MockClock(), {"raybroker.balancer.node.loss.grace.ms": str(GRACE_MS)})
    started.register(*NODES)
    yield started
    started.close()


def hosted(cluster: Cluster, node: str, topic: str, partition: int = 0) -> bool:
    return any((p.topic, p.partition) == (topic, partition) for p in cluster.managers[node].placements())


def join_isr(cluster: Cluster, topic: str, node: str, partition: int = 0) -> LeaderAndIsr:
    state = cluster.controller.partition_state(topic, partition)
    return cluster.controller.alter_partition(
        topic, partition, state.leader, state.leader_epoch, state.version, [*state.isr, node]
    )


def test_a_broker_lost_past_the_grace_has_its_replicas_recreated_on_the_free_broker(cluster: Cluster) -> None:
    controller = cluster.controller
    controller.create_topic("t", 1, replication_factor=2)
    before = controller.partition_state("t", 0)
    lost, kept = before.replicas
    (free,) = [node for node in NODES if node not in before.replicas]
    alive = set(NODES) - {lost}
    controller.check_brokers(alive)

    cluster.clock.sleep(GRACE_MS - 1)
    controller.check_brokers(alive)
    assert not controller.partition_state("t", 0).reassigning, "moved before the grace passed"

    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers(alive)
    moving = controller.partition_state("t", 0)
    assert (moving.replicas, moving.adding, moving.removing) == ((free, kept, lost), (free,), (lost,))
    assert moving.leader == kept and hosted(cluster, free, "t")
    done = join_isr(cluster, "t", free)
    assert (done.replicas, set(done.isr), done.leader) == ((free, kept), {free, kept}, kept)
    controller.check_brokers(alive)
    assert controller.partition_state("t", 0) == done


def test_a_broker_that_registers_again_within_the_grace_keeps_its_replicas(cluster: Cluster) -> None:
    controller = cluster.controller
    controller.create_topic("t", 1, replication_factor=2)
    before = controller.partition_state("t", 0)
    lost = before.replicas[0]
    controller.check_brokers(set(NODES) - {lost})
    assert cluster.replicas.forgotten == [lost], "the notifier releases what it keeps for a broker that left"
    cluster.clock.sleep(GRACE_MS // 2)
    controller.register_broker(lost)
    cluster.clock.sleep(GRACE_MS)
    controller.check_brokers(set(NODES))
    assert controller.partition_state("t", 0).replicas == before.replicas


def test_no_partition_moves_while_self_healing_is_off(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, MockClock(), {"raybroker.balancer.node.loss.grace.ms": "-1"})
    try:
        cluster.register(*NODES)
        cluster.controller.create_topic("t", 1, replication_factor=2)
        lost = cluster.controller.partition_state("t", 0).replicas[0]
        cluster.controller.check_brokers(set(NODES) - {lost})
        cluster.clock.sleep(10 * GRACE_MS)
        cluster.controller.check_brokers(set(NODES) - {lost})
        assert lost in cluster.controller.partition_state("t", 0).replicas
    finally:
        cluster.close()


def test_a_partition_waits_for_a_free_broker_and_a_joining_one_takes_the_lost_replica(cluster: Cluster) -> None:
    controller = cluster.controller
    controller.create_topic("full", 1, replication_factor=3)
    lost = controller.partition_state("full", 0).replicas[1]
    alive = set(NODES) - {lost}
    controller.check_brokers(alive)
    cluster.clock.sleep(GRACE_MS)
    controller.check_brokers(alive)
    assert not controller.partition_state("full", 0).reassigning, "no broker is free: it stays under-replicated"

    cluster.register("node-d")
    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers(alive | {"node-d"})
    moving = controller.partition_state("full", 0)
    assert moving.adding == ("node-d",) and moving.removing == (lost,)
    done = join_isr(cluster, "full", "node-d")
    assert lost not in done.replicas and len(done.replicas) == 3 and set(done.isr) == set(done.replicas)


def test_healed_replicas_replace_only_lost_ones_on_the_least_loaded_free_brokers() -> None:
    state = LeaderAndIsr("t", 0, "a", 3, ("a", "b", "c"), ("a", "b"))
    counts = {"a": 5, "d": 2, "e": 1, "f": 1}
    running = set(counts)
    assert healed_replicas(state, {"b", "c"}, running, counts) == ("a", "e", "f")
    assert counts == {"a": 5, "d": 2, "e": 2, "f": 2}, "the next partition sees the replicas chosen"
    assert healed_replicas(state, {"x"}, running, counts) is None, "nothing lost"
    assert healed_replicas(state, {"b"}, {"a", "d"} - {"d"}, {"a": 0}) is None, "no free broker"
    assert healed_replicas(state, {"b"}, {"a", "d"}, {"a": 0, "d": 0}) is None, "c is not running"
    offline = LeaderAndIsr("t", 0, NO_LEADER, 3, ("a", "b"), ("a",))
    assert healed_replicas(offline, {"a"}, {"b", "d"}, {"b": 0, "d": 0}) is None, "no leader to copy from"


@pytest.fixture
def first_broker(tmp_path: Path) -> Cluster:
    """A cluster whose first broker is alone (the other nodes register later)."""
    started = Cluster(tmp_path, MockClock(), {"transaction.state.log.num.partitions": "2"})
    started.register(NODES[0])
    yield started
    started.close()


def test_internal_topics_a_first_broker_created_alone_gain_their_replication_factor_as_brokers_join(
    first_broker: Cluster,
) -> None:
    """Kafka creates `__consumer_offsets` and `__transaction_state` with their replication factor (3); the first
    broker of a cluster here creates them with the replicas there are, and they grow as brokers join."""
    cluster = first_broker
    controller = cluster.controller
    ensure_consumer_offsets_topic(controller, 3, controller.config.offsets_topic_replication_factor)
    ensure_transaction_state_topic(controller, controller.config.transaction_config)
    internal = [(CONSUMER_OFFSETS_TOPIC, p) for p in range(3)] + [(TRANSACTION_STATE_TOPIC, p) for p in range(2)]
    assert {controller.partition_state(*key).replicas for key in internal} == {(NODES[0],)}
    assert controller.describe_topic(TRANSACTION_STATE_TOPIC).config["min.insync.replicas"] == "1"
    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers({NODES[0]})
    assert not any(controller.partition_state(*key).reassigning for key in internal), "no broker to grow onto"

    cluster.register(*NODES[1:])
    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers(set(NODES))
    for topic, partition in internal:
        moving = controller.partition_state(topic, partition)
        assert (moving.replicas, moving.adding, moving.leader) == (NODES, NODES[1:], NODES[0])
        assert all(hosted(cluster, node, topic, partition) for node in NODES[1:])
        assert controller.describe_topic(TRANSACTION_STATE_TOPIC).config["min.insync.replicas"] == "1", (
            "raised before every partition had its replicas in sync"
        )
        join_isr(cluster, topic, NODES[1], partition)
        done = join_isr(cluster, topic, NODES[2], partition)
        assert (done.replicas, set(done.isr), done.reassigning) == (NODES, set(NODES), False)
    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers(set(NODES))
    assert controller.describe_topic(TRANSACTION_STATE_TOPIC).config["min.insync.replicas"] == "2"
    assert all(controller.partition_state(*key).replicas == NODES for key in internal)


def test_a_min_isr_raise_that_fails_is_tried_again_by_the_next_pass(
    first_broker: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = first_broker
    controller = cluster.controller
    ensure_transaction_state_topic(controller, controller.config.transaction_config)
    cluster.register(*NODES[1:])
    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers(set(NODES))
    for partition in range(2):
        join_isr(cluster, TRANSACTION_STATE_TOPIC, NODES[1], partition)
        join_isr(cluster, TRANSACTION_STATE_TOPIC, NODES[2], partition)
    alter = controller.alter_topic_config
    refusals = []

    def refused_once(topic: str, changes: dict[str, str]) -> object:
        if not refusals:
            refusals.append(topic)
            raise BrokerNotAvailableError("the metadata write failed")
        return alter(topic, changes)

    monkeypatch.setattr(controller, "alter_topic_config", refused_once)
    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers(set(NODES))
    assert refusals == [TRANSACTION_STATE_TOPIC]
    assert controller.describe_topic(TRANSACTION_STATE_TOPIC).config["min.insync.replicas"] == "1"
    cluster.clock.sleep(HEAL_CHECK_MS)
    controller.check_brokers(set(NODES))
    assert controller.describe_topic(TRANSACTION_STATE_TOPIC).config["min.insync.replicas"] == "2"


def test_grown_replicas_add_the_least_loaded_free_brokers_up_to_the_factor() -> None:
    state = LeaderAndIsr("t", 0, "a", 3, ("a",), ("a",))
    counts = {"a": 5, "b": 2, "c": 1, "d": 1}
    assert grown_replicas(state, 3, set(counts), counts) == ("a", "c", "d")
    assert counts == {"a": 5, "b": 2, "c": 2, "d": 2}, "the next partition sees the replicas chosen"
    assert grown_replicas(state, 3, {"a", "b"}, {"a": 0, "b": 0}) == ("a", "b"), "as many as are free"
    assert grown_replicas(state, 1, set(counts), counts) is None, "it has its factor"
    assert grown_replicas(state, 3, {"a"}, {"a": 0}) is None, "no free broker"
    assert grown_replicas(state, 3, {"b", "c"}, {"b": 0, "c": 0}) is None, "its replica is not running"
    offline = LeaderAndIsr("t", 0, NO_LEADER, 3, ("a",), ("a",))
    assert grown_replicas(offline, 3, {"a", "b"}, {"a": 0, "b": 0}) is None, "no leader to copy from"


def test_due_and_replica_counts() -> None:
    assert due({"a": 0, "b": 50}, 100, 60) == {"a"}
    assert due({"a": 0}, 10**9, -1) == set()
    states = [LeaderAndIsr("t", p, "a", 0, ("a", "b"), ("a", "b")) for p in range(2)]
    assert replica_counts(states, ["a", "c"]) == {"a": 2, "c": 0}


def test_a_drained_broker_hands_every_replica_to_free_brokers_and_takes_no_new_one(cluster: Cluster) -> None:
    controller = cluster.controller
    cluster.register("node-d")
    controller.create_topic("t", 2, replication_factor=2)
    drained = controller.partition_state("t", 0).replicas[0]
    held = [p for p in (0, 1) if drained in controller.partition_state("t", p).replicas]
    planned = controller.drain_broker(drained, dry_run=True)
    assert [(topic, partition) for topic, partition, _ in planned] == [("t", p) for p in held]
    assert not any(controller.partition_state("t", p).reassigning for p in held), "a dry run moves nothing"

    assert controller.drain_broker(drained) == planned
    for _, partition, target in planned:
        assert drained not in target and len(target) == 2
        (added,) = controller.partition_state("t", partition).adding
        join_isr(cluster, "t", added, partition)
        assert drained not in controller.partition_state("t", partition).replicas
    assert not hosted(cluster, drained, "t")
    controller.create_topic("later", 3, replication_factor=3)
    assert all(drained not in controller.partition_state("later", p).replicas for p in range(3))


def test_a_drain_that_cannot_move_a_partition_moves_nothing(cluster: Cluster) -> None:
    controller = cluster.controller
    controller.create_topic("small", 1, replication_factor=1)
    controller.create_topic("full", 1, replication_factor=3)
    drained = controller.partition_state("small", 0).replicas[0]
    with pytest.raises(InvalidReplicaAssignmentError, match="full-0 cannot move: no running broker is free"):
        controller.drain_broker(drained)
    assert controller.partition_reassignments() == []
    with pytest.raises(InvalidReplicaAssignmentError, match="no broker is registered"):
        controller.drain_broker("node-z")


def test_each_pass_heals_a_bounded_number_of_partitions_and_the_next_goes_on(cluster: Cluster) -> None:
    controller = cluster.controller
    count = 3 * HEALS_PER_PASS
    controller.create_topic("copies", count, replication_factor=2)
    controller.create_topic("single", 3, replication_factor=1)
    lost = controller.partition_state("single", 0).replicas[0]
    held = [p for p in range(count) if lost in controller.partition_state("copies", p).replicas]
    assert len(held) > HEALS_PER_PASS
    alive = set(NODES) - {lost}
    controller.check_brokers(alive)
    cluster.clock.sleep(GRACE_MS)
    controller.check_brokers(alive)
    assert sum(controller.partition_state("copies", p).reassigning for p in held) == HEALS_PER_PASS
    for _ in range(len(held) // HEALS_PER_PASS):
        cluster.clock.sleep(HEAL_CHECK_MS)
        controller.check_brokers(alive)
    assert all(controller.partition_state("copies", p).reassigning for p in held)
    assert not controller.partition_state("single", 0).reassigning, "its only replica is lost: no leader to copy"
