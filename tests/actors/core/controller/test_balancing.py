"""Balancing replicas over the running brokers, against its model (every count within one of every other once no
partition can move closer, no partition with a broker twice, followers moved before leaders), and through the
plain controller: a broker that joins takes its share, its moves are reassignments, and a dry run moves nothing."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from actors.core.controller.balancing import balancing_moves
from actors.core.controller.controller import HEAL_CHECK_MS
from actors.core.controller.replica_moves import HEALS_PER_PASS
from actors.core.replication.leader_and_isr import LeaderAndIsr
from storage.clock import MockClock
from tests.actors.core.controller.test_controller import NODES, Cluster


def applied(states: list[LeaderAndIsr], moves: list[tuple[str, int, tuple[str, ...]]]) -> list[LeaderAndIsr]:
    targets = {(topic, partition): target for topic, partition, target in moves}
    return [
        LeaderAndIsr(s.topic, s.partition, s.leader, 0, targets.get((s.topic, s.partition), s.replicas), s.isr)
        for s in states
    ]


def counts(states: list[LeaderAndIsr], brokers: list[str]) -> dict[str, int]:
    return {node: sum(node in s.replicas for s in states) for node in brokers}


@pytest.mark.parametrize("seed", range(20))
def test_random_clusters_end_within_one_replica_per_broker_with_no_broker_twice(seed: int) -> None:
    rng = random.Random(seed)
    old = [f"n{i}" for i in range(rng.randint(2, 4))]
    brokers = old + [f"new{i}" for i in range(rng.randint(1, 3))]
    states = []
    for partition in range(10 * len(brokers), 20 * len(brokers)):
        replicas = tuple(rng.sample(old, rng.randint(1, 2)))
        states.append(LeaderAndIsr("t", partition, replicas[0], 0, replicas, replicas))
    moves = balancing_moves(states, brokers, limit=10_000)
    after = applied(states, moves)
    assert all(len(set(s.replicas)) == len(s.replicas) for s in after)
    assert [len(s.replicas) for s in after] == [len(s.replicas) for s in states], "replication factors kept"
    spread = counts(after, brokers)
    assert max(spread.values()) - min(spread.values()) <= 1
    assert len({(topic, partition) for topic, partition, _ in moves}) == len(moves), "one reassignment a partition"


def test_followers_move_before_leaders_and_the_limit_holds() -> None:
    states = [LeaderAndIsr("t", p, "a", 0, ("a", "b"), ("a", "b")) for p in range(4)]
    states += [LeaderAndIsr("u", p, "b", 0, ("b", "a"), ("b", "a")) for p in range(4)]
    moves = balancing_moves(states, ["a", "b", "c"], limit=2)
    assert len(moves) == 2, "two replicas moved, each of another partition"
    for _, _, target in moves:
        assert "c" in target
    assert all(target[0] != "c" for _, _, target in moves), "the leader's replica stays where it is"
    assert balancing_moves(states[:1], ["a", "b"], limit=5) == []


def test_a_broker_that_joins_takes_its_share_through_reassignments(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, MockClock())
    try:
        cluster.register(*NODES)
        controller = cluster.controller
        controller.create_topic("t", 6, replication_factor=2)
        cluster.register("node-d")
        planned = controller.balance(dry_run=True)
        assert planned and not controller.partition_reassignments(), "a dry run moves nothing"
        assert controller.balance() == planned
        moving = {(s.topic, s.partition): s for s in controller.partition_reassignments()}
        assert set(moving) == {(topic, partition) for topic, partition, _ in planned}
        for (topic, partition), state in moving.items():
            assert state.adding == ("node-d",)
            leader = controller.partition_state(topic, partition)
            controller.alter_partition(
                topic, partition, leader.leader, leader.leader_epoch, leader.version, [*leader.isr, "node-d"]
            )
        spread = counts(controller.partition_states(), [*NODES, "node-d"])
        assert spread["node-d"] == 3 and max(spread.values()) - min(spread.values()) <= 1
        assert controller.balance(dry_run=True) == []
    finally:
        cluster.close()


@pytest.mark.parametrize("mode", ["off", "node_add"])
def test_with_node_add_autobalancing_a_broker_that_joins_takes_its_share_by_itself(tmp_path: Path, mode: str) -> None:
    """Redpanda's `partition_autobalancing_mode=node_add`: the monitor passes move replicas onto a broker that joined
    empty, `HEALS_PER_PASS` moves a pass, until every count is within one of the others; `off` (the default, as
    Kafka) moves nothing."""
    cluster = Cluster(tmp_path, MockClock(), {"raybroker.balancer.partition.autobalancing.mode": mode})
    try:
        cluster.register(*NODES)
        controller = cluster.controller
        controller.create_topic("t", 12, replication_factor=2)
        cluster.register("node-d")
        everyone = {*NODES, "node-d"}
        for _ in range(6):
            cluster.clock.sleep(HEAL_CHECK_MS)
            controller.check_brokers(everyone)
            moving = controller.partition_reassignments()
            assert len(moving) <= HEALS_PER_PASS
            for state in moving:
                (added,) = state.adding
                controller.alter_partition(
                    state.topic, state.partition, state.leader, state.leader_epoch, state.version, [*state.isr, added]
                )
        spread = counts(controller.partition_states(), sorted(everyone))
        if mode == "off":
            assert spread["node-d"] == 0 and not controller.partition_reassignments()
        else:
            assert spread["node-d"] == 6 and max(spread.values()) - min(spread.values()) <= 1
            assert controller.balance(dry_run=True) == []
    finally:
        cluster.close()
