"""Elections an operator asks for (ElectLeaders), without Ray: the outcome of each kind against a model of Kafka's
rules over every small partition state, and through the controller (persisted, pushed to the replicas, replayed
after a restart, and answered per partition as Kafka's controller answers)."""

from __future__ import annotations

import itertools

import pytest

from actors.core.controller.elections import ElectionError, ElectionType, requested_election
from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from tests.actors.core.controller.test_controller import NODES, Cluster, cluster

__all__ = ["cluster"]

REPLICAS = ("a", "b", "c")


def expected(state: LeaderAndIsr, kind: ElectionType, live: set[str]) -> tuple[str, tuple[str, ...]] | ElectionError:
    """The model: Kafka's rules, written over the (leader, ISR) the election leaves."""
    if kind == ElectionType.PREFERRED:
        if state.leader == "a":
            return ElectionError.ELECTION_NOT_NEEDED
        return ("a", state.isr) if "a" in state.isr and "a" in live else ElectionError.PREFERRED_LEADER_NOT_AVAILABLE
    if state.leader in live:
        return ElectionError.ELECTION_NOT_NEEDED
    for node in REPLICAS:
        if node in state.isr and node in live:
            return node, state.isr
    for node in REPLICAS:
        if node in live:
            return node, (node,)
    return ElectionError.ELIGIBLE_LEADERS_NOT_AVAILABLE


def states() -> list[LeaderAndIsr]:
    """Every leader (or none) with every ISR holding it, of a partition with replicas a, b, c."""
    found = []
    for size in range(1, 4):
        for isr in itertools.combinations(REPLICAS, size):
            for leader in (*isr, NO_LEADER):
                found.append(LeaderAndIsr("t", 0, leader=leader, leader_epoch=4, replicas=REPLICAS, isr=isr))
    return found


@pytest.mark.parametrize("kind", list(ElectionType))
def test_every_small_state_elects_as_kafkas_rules_say(kind: ElectionType) -> None:
    for state, size in itertools.product(states(), range(4)):
        for live in map(set, itertools.combinations(REPLICAS, size)):
            outcome = requested_election(state, kind, dict.fromkeys(live))
            want = expected(state, kind, live)
            if isinstance(want, ElectionError):
                assert outcome == want, (state, live)
            else:
                assert isinstance(outcome, LeaderAndIsr), (state, live)
                assert (outcome.leader, outcome.isr, outcome.leader_epoch) == (*want, state.leader_epoch + 1)
                assert outcome.leader in live


def test_preferred_election_through_the_controller_is_persisted_and_pushed(cluster: Cluster) -> None:
    cluster.controller.create_topic("t", 3, replication_factor=3)
    preferred = {p: cluster.controller.partition_state("t", p).replicas[0] for p in range(3)}
    lost = preferred[0]
    cluster.controller.check_brokers(set(NODES) - {lost})
    # Back, and in sync again, but not leading: only the partitions it prefers need an election.
    cluster.register(lost)
    for partition in range(3):
        state = cluster.controller.partition_state("t", partition)
        cluster.controller.alter_partition(
            "t", partition, state.leader, state.leader_epoch, state.version, list(state.replicas)
        )
    wanted = [("t", p) for p in range(3)] + [("t", 7), ("gone", 0)]
    outcomes = cluster.controller.elect_leaders(ElectionType.PREFERRED, wanted)
    assert outcomes == {
        **{
            ("t", p): ElectionError.NONE if node == lost else ElectionError.ELECTION_NOT_NEEDED
            for p, node in preferred.items()
        },
        ("t", 7): ElectionError.UNKNOWN_TOPIC_OR_PARTITION,
        ("gone", 0): ElectionError.UNKNOWN_TOPIC_OR_PARTITION,
    }
    leaders = {p: cluster.controller.partition_state("t", p).leader for p in range(3)}
    assert leaders == preferred
    for partition in range(3):
        assert cluster.replicas.latest(lost, "t", partition) == cluster.controller.partition_state("t", partition)
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    assert {p: cluster.controller.partition_state("t", p).leader for p in range(3)} == preferred


def test_an_election_of_every_partition_answers_only_those_that_needed_one(cluster: Cluster) -> None:
    cluster.controller.create_topic("t", 3, replication_factor=3)
    assert cluster.controller.elect_leaders(ElectionType.PREFERRED, None) == {}
    cluster.controller.check_brokers(set(NODES) - {"node-a"})
    answered = cluster.controller.elect_leaders(ElectionType.PREFERRED, None)
    moved = [p for p in range(3) if cluster.controller.partition_state("t", p).replicas[0] == "node-a"]
    assert answered == {("t", p): ElectionError.PREFERRED_LEADER_NOT_AVAILABLE for p in moved}


def test_an_unclean_election_brings_an_offline_partition_back_on_a_replica_out_of_sync(cluster: Cluster) -> None:
    cluster.controller.create_topic("t", 1, replication_factor=2)
    state = cluster.controller.partition_state("t", 0)
    leader, follower = state.replicas
    cluster.controller.alter_partition("t", 0, leader, state.leader_epoch, state.version, [leader])
    cluster.controller.check_brokers(set(NODES) - {leader})
    assert cluster.controller.partition_state("t", 0).leader == NO_LEADER
    clean = cluster.controller.elect_leaders(ElectionType.PREFERRED, [("t", 0)])
    assert clean == {("t", 0): ElectionError.PREFERRED_LEADER_NOT_AVAILABLE}
    assert cluster.controller.elect_leaders(ElectionType.UNCLEAN, [("t", 0)]) == {("t", 0): ElectionError.NONE}
    after = cluster.controller.partition_state("t", 0)
    assert (after.leader, after.isr) == (follower, (follower,))
    again = cluster.controller.elect_leaders(ElectionType.UNCLEAN, [("t", 0)])
    assert again == {("t", 0): ElectionError.ELECTION_NOT_NEEDED}
