"""The controller's replication decisions as plain functions: replica placement (distinct brokers, fewest replicas
first, preferred leaders spread, Kafka's INVALID_REPLICATION_FACTOR), and the partition state machine's clean
elections after a broker is lost or comes back, checked case by case and by a seeded simulation of random broker
losses and returns against Kafka's invariants."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from actors.core.controller.assignment import (
    after_broker_lost,
    check_replication_factor,
    elect_if_offline,
    moved_replica,
    new_partition_state,
    place_replicas,
    preferred_election,
)
from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from storage.errors import InvalidReplicationFactorError


def live(*nodes: str) -> dict[str, object]:
    return dict.fromkeys(nodes, object())


def state(leader: str, replicas: str, isr: str, epoch: int = 3, version: int = 5) -> LeaderAndIsr:
    """A partition state with one-letter node names: `state("a", "abc", "ab")`."""
    return LeaderAndIsr("t", 0, leader, epoch, tuple(replicas), tuple(isr), version)


# --- placement -----------------------------------------------------------------------------------------------


def test_place_replicas_puts_each_partitions_replicas_on_distinct_brokers():
    for replicas in place_replicas(10, 3, ["a", "b", "c", "d"], []):
        assert len(replicas) == 3
        assert len(set(replicas)) == 3


def test_place_replicas_spreads_replicas_and_preferred_leaders_over_three_brokers():
    assert place_replicas(6, 2, ["c", "b", "a"], []) == [
        ("a", "b"),
        ("c", "a"),
        ("b", "c"),
        ("a", "b"),
        ("c", "a"),
        ("b", "c"),
    ]


def test_place_replicas_with_every_broker_a_replica_rotates_the_preferred_leader():
    placed = place_replicas(3, 3, ["a", "b", "c"], [])
    assert [replicas[0] for replicas in placed] == ["a", "b", "c"]


def test_place_replicas_single_replica_partitions_go_round_the_brokers():
    assert place_replicas(4, 1, ["b", "a", "c"], []) == [("a",), ("b",), ("c",), ("a",)]


@pytest.mark.parametrize("brokers", range(1, 7))
def test_place_replicas_from_empty_keeps_replica_and_leader_counts_within_one(brokers: int):
    nodes = [f"node-{index}" for index in range(brokers)]
    for replication_factor in range(1, brokers + 1):
        for count in range(25):
            placed = place_replicas(count, replication_factor, nodes, [])
            replica_counts = Counter({node: 0 for node in nodes})
            replica_counts.update(node for replicas in placed for node in replicas)
            leader_counts = Counter({node: 0 for node in nodes})
            leader_counts.update(replicas[0] for replicas in placed)
            assert max(replica_counts.values()) - min(replica_counts.values()) <= 1
            assert max(leader_counts.values()) - min(leader_counts.values()) <= 1


def test_place_replicas_counts_existing_partitions_replicas_and_leaders():
    existing = [new_partition_state("x", 0, ("a", "b"))]
    # a and b hold one replica each, so the next partition goes to c and d; then a and b lead nothing new yet,
    # and b leads fewer than a.
    assert place_replicas(2, 2, ["a", "b", "c", "d"], existing) == [("c", "d"), ("b", "a")]


def test_place_replicas_ignores_existing_replicas_on_brokers_not_running():
    existing = [new_partition_state("x", 0, ("gone", "other"))]
    assert place_replicas(1, 1, ["a", "b"], existing) == [("a",)]


def test_place_replicas_each_replica_to_the_broker_holding_fewest():
    existing = [new_partition_state("x", p, ("a", "b")) for p in range(3)] + [new_partition_state("y", 0, ("c",))]
    # a: 3, b: 3, c: 1, d: 0 replicas.
    assert sorted(place_replicas(1, 2, ["a", "b", "c", "d"], existing)[0]) == ["c", "d"]


def test_place_replicas_of_zero_partitions_is_empty():
    assert place_replicas(0, 1, ["a"], []) == []


@pytest.mark.parametrize("replication_factor", [0, -1, 4])
def test_place_replicas_rejects_a_replication_factor_outside_one_to_the_brokers(replication_factor: int):
    with pytest.raises(InvalidReplicationFactorError):
        place_replicas(1, replication_factor, ["a", "b", "c"], [])


@pytest.mark.parametrize("replication_factor", [2.0, "2", True, None])
def test_place_replicas_rejects_a_replication_factor_that_is_not_an_int(replication_factor: object):
    with pytest.raises(InvalidReplicationFactorError):
        place_replicas(1, replication_factor, ["a", "b", "c"], [])  # type: ignore[arg-type]


def test_place_replicas_counts_a_broker_named_twice_once():
    with pytest.raises(InvalidReplicationFactorError):
        place_replicas(1, 2, ["a", "a"], [])


def test_check_replication_factor_returns_a_valid_one():
    assert check_replication_factor(3, 3) == 3
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 available brokers"):
        check_replication_factor(3, 2)


def test_new_partition_state_has_every_replica_in_sync_and_the_preferred_one_leading_in_epoch_zero():
    assert new_partition_state("t", 1, ("b", "a")) == LeaderAndIsr("t", 1, "b", 0, ("b", "a"), ("b", "a"), 0)


# --- a broker lost --------------------------------------------------------------------------------------------


def test_a_lost_follower_leaves_the_isr_and_the_leader_stays():
    after = after_broker_lost(state("a", "abc", "abc"), "b", live("a", "c"))
    assert after == state("a", "abc", "ac", epoch=3, version=6)


def test_a_lost_follower_outside_the_isr_changes_nothing():
    assert after_broker_lost(state("a", "abc", "ab"), "c", live("a", "b")) is None


def test_a_lost_broker_that_is_no_replica_changes_nothing():
    assert after_broker_lost(state("a", "abc", "abc"), "z", live("a", "b", "c")) is None


def test_a_lost_leader_is_replaced_by_the_first_live_in_sync_replica_in_assignment_order():
    # Assignment order is c, a, b; the ISR lists b before a: c leads next, not the ISR's first.
    before = LeaderAndIsr("t", 0, "c", 3, ("c", "a", "b"), ("c", "b", "a"), 5)
    after = after_broker_lost(before, "c", live("a", "b"))
    assert after == LeaderAndIsr("t", 0, "a", 4, ("c", "a", "b"), ("b", "a"), 6)


def test_a_lost_leader_skips_in_sync_replicas_that_are_not_running():
    after = after_broker_lost(state("a", "abc", "abc"), "a", live("c"))
    assert after is not None
    assert (after.leader, after.isr, after.leader_epoch, after.version) == ("c", ("b", "c"), 4, 6)


def test_a_lost_leader_is_never_replaced_by_a_live_replica_outside_the_isr():
    # unclean.leader.election.enable=false: c is running but not in sync, so the partition goes offline.
    after = after_broker_lost(state("a", "abc", "ab"), "a", live("c"))
    assert after == state(NO_LEADER, "abc", "b", epoch=4, version=6)


def test_a_lost_leader_that_is_the_last_in_sync_replica_stays_in_the_isr_and_the_partition_goes_offline():
    after = after_broker_lost(state("a", "abc", "a"), "a", live("b", "c"))
    assert after == state(NO_LEADER, "abc", "a", epoch=4, version=6)
    assert after.offline


def test_the_last_in_sync_replica_of_an_offline_partition_lost_again_changes_nothing():
    offline = state(NO_LEADER, "abc", "b", epoch=4, version=6)
    assert after_broker_lost(offline, "b", live("c")) is None


# --- a broker back --------------------------------------------------------------------------------------------


def test_elect_if_offline_elects_the_first_live_in_sync_replica_in_assignment_order():
    offline = state(NO_LEADER, "abc", "cb", epoch=4, version=6)
    assert elect_if_offline(offline, live("a", "b", "c")) == state("b", "abc", "cb", epoch=5, version=7)


def test_elect_if_offline_leaves_a_partition_with_a_live_leader():
    assert elect_if_offline(state("a", "abc", "abc"), live("a", "b", "c")) is None


def test_elect_if_offline_does_nothing_while_no_in_sync_replica_runs():
    offline = state(NO_LEADER, "abc", "a", epoch=4, version=6)
    assert elect_if_offline(offline, live("b", "c")) is None


def test_elect_if_offline_replaces_a_leader_that_is_not_running():
    assert elect_if_offline(state("a", "abc", "ab"), live("b", "c")) == state("b", "abc", "ab", epoch=4, version=6)


def test_preferred_election_moves_leadership_back_to_the_first_replica_once_alive_and_in_sync():
    assert preferred_election(state("b", "abc", "abc"), live("a", "b", "c")) == state(
        "a", "abc", "abc", epoch=4, version=6
    )


@pytest.mark.parametrize(
    ("before", "running"),
    [
        (state("a", "abc", "abc"), live("a", "b", "c")),  # already leading
        (state("b", "abc", "bc"), live("a", "b", "c")),  # preferred not in sync
        (state("b", "abc", "abc"), live("b", "c")),  # preferred not running
        (LeaderAndIsr("t", 0, NO_LEADER, 0, (), ()), live("a")),  # no replicas
    ],
)
def test_preferred_election_does_nothing(before: LeaderAndIsr, running: dict[str, object]):
    assert preferred_election(before, running) is None


def test_moved_replica_takes_the_place_of_the_replica_whose_broker_is_gone():
    before = state("a", "abc", "ab")
    assert moved_replica(before, "d", live("a", "c", "d")) == state("a", "adc", "ad", epoch=3, version=6)


def test_moved_replica_of_an_offline_partition_lets_the_returning_disks_lead_again():
    offline = state(NO_LEADER, "abc", "a", epoch=4, version=6)
    moved = moved_replica(offline, "d", live("b", "c", "d"))
    assert moved == state(NO_LEADER, "dbc", "d", epoch=4, version=7)
    assert elect_if_offline(moved, live("b", "c", "d")) == state("d", "dbc", "d", epoch=5, version=8)


def test_moved_replica_of_a_node_already_a_replica_changes_nothing():
    assert moved_replica(state("a", "abc", "abc"), "b", live("a", "b", "c")) is None


def test_moved_replica_without_a_gone_replica_changes_nothing():
    assert moved_replica(state("a", "abc", "abc"), "d", live("a", "b", "c", "d")) is None


def test_moved_replica_never_makes_disks_of_unknown_origin_in_sync_when_several_replicas_are_gone():
    # a led alone (b and c out of sync) when b, then a went away, e.g. a whole-cluster restart that gives every
    # node a new Ray id. d registers holding b's stale copy of the partition: nothing says it is a's.
    assert after_broker_lost(state("a", "abc", "a"), "b", live("a", "c")) is None
    offline = after_broker_lost(state("a", "abc", "a"), "a", live("c"))
    assert offline == state(NO_LEADER, "abc", "a", epoch=4, version=6)
    running = live("c", "d")
    moved = moved_replica(offline, "d", running)
    elected = elect_if_offline(moved, running) if moved is not None else None
    # Kafka keeps a broker's id on its disks, so only a's own disks may lead again.
    assert moved is None or "d" not in moved.isr
    assert elected is None


# --- a simulation against Kafka's invariants --------------------------------------------------------------------


def check_transition(before: LeaderAndIsr, after: LeaderAndIsr, running: dict[str, object]) -> None:
    assert after.replicas == before.replicas
    assert after.isr, "the ISR never empties"
    assert set(after.isr) <= set(after.replicas)
    assert len(set(after.isr)) == len(after.isr)
    assert after.leader == NO_LEADER or after.leader in after.isr
    assert after.leader == NO_LEADER or after.leader in running
    assert after.leader_epoch >= before.leader_epoch
    assert after.version > before.version
    if after.leader != before.leader:
        assert after.leader_epoch == before.leader_epoch + 1
        if after.leader != NO_LEADER:
            assert after.leader in before.isr, "clean election: the new leader comes from the previous ISR"
    # Offline exactly while no in-sync replica runs.
    assert after.offline == (not any(node in running for node in after.isr))


def decide(
    event: str, current: LeaderAndIsr, lost: str, running: dict[str, object], rng: random.Random
) -> LeaderAndIsr | None:
    """What the controller makes of `event` for one partition; catch_up and fall_behind are the leader's
    AlterPartition asks (a running follower joins; a follower, never the leader, leaves)."""
    if event == "lose":
        return after_broker_lost(current, lost, running)
    if event == "return":
        return elect_if_offline(current, running)
    if event == "rebalance":
        return preferred_election(current, running)
    if current.offline:
        return None
    if event == "catch_up":
        outside = [node for node in current.replicas if node not in current.isr and node in running]
        if not outside:
            return None
        joining = rng.choice(outside)
        return current.with_isr(tuple(node for node in current.replicas if node in current.isr or node == joining))
    followers = [node for node in current.isr if node != current.leader]
    if not followers:
        return None
    leaving = rng.choice(followers)
    return current.with_isr(tuple(node for node in current.isr if node != leaving))


@pytest.mark.parametrize("seed", range(200))
def test_random_broker_losses_and_returns_keep_kafkas_invariants(seed: int):
    rng = random.Random(seed)
    brokers = [f"n{index}" for index in range(rng.randint(1, 6))]
    running = live(*brokers)
    replication_factor = rng.randint(1, len(brokers))
    states = [
        new_partition_state("t", partition, replicas)
        for partition, replicas in enumerate(place_replicas(rng.randint(1, 6), replication_factor, brokers, []))
    ]
    for _ in range(60):
        event = rng.choice(["lose", "return", "catch_up", "fall_behind", "rebalance"])
        down = [node for node in brokers if node not in running]
        lost = ""
        if event == "lose":
            if not running:
                continue
            lost = rng.choice(sorted(running))
            del running[lost]
        elif event == "return":
            if not down:
                continue
            running[rng.choice(down)] = object()
        for index, before in enumerate(states):
            after = decide(event, before, lost, running, rng)
            if after is not None:
                check_transition(before, after, running)
                states[index] = after
        for current in states:
            assert current.offline == (not any(node in running for node in current.isr))


def test_a_returning_disk_is_recognised_by_its_directory_id_wherever_it_runs():
    # A whole-cluster restart: every node has a new Ray id and the disks came back on other nodes than before.
    before = LeaderAndIsr("t", 0, "a", 3, ("a", "b", "c"), ("a", "b"), 5, ("dir-a", "dir-b", "dir-c"))
    running = live("x", "y")
    moved = moved_replica(before, "x", running, "dir-c")
    assert moved is not None
    assert (moved.replicas, moved.isr, moved.leader, moved.leader_epoch) == (("a", "b", "x"), ("a", "b"), "a", 3)
    assert moved.directories == ("dir-a", "dir-b", "dir-c")
    # a's disk, on y: y takes a's place, its ISR membership and its leadership, in the next epoch.
    again = moved_replica(moved, "y", running, "dir-a")
    assert again is not None
    assert (again.replicas, again.isr, again.leader, again.leader_epoch) == (("y", "b", "x"), ("y", "b"), "y", 4)
    # Already where it is recorded: nothing changes.
    assert moved_replica(again, "y", running, "dir-a") is None


def test_a_disk_no_replica_was_recorded_on_takes_no_place_when_every_replica_has_its_dir():
    recorded = LeaderAndIsr("t", 0, NO_LEADER, 3, ("a", "b", "c"), ("a",), 5, ("dir-a", "dir-b", "dir-c"))
    assert moved_replica(recorded, "d", live("d"), "dir-d") is None


def test_a_replica_whose_dir_was_not_recorded_gets_it_recorded():
    before = state("a", "abc", "abc")
    recorded = moved_replica(before, "b", live("a", "b", "c"), "dir-b")
    assert recorded is not None and recorded.directory_of("b") == "dir-b" and recorded.version == before.version + 1
    assert (recorded.replicas, recorded.isr, recorded.leader) == (before.replicas, before.isr, before.leader)


def test_a_new_topics_leaders_spread_over_every_broker_whatever_other_topics_lead():
    # a leads nothing, b and c lead one partition each of another topic: by cluster-wide counts alone, a would lead
    # two of the new topic's three partitions. Kafka spreads each topic's leaders over the brokers, one each here.
    existing = [new_partition_state("busy", 0, ("b", "a", "c")), new_partition_state("busy", 1, ("c", "a", "b"))]
    placed = place_replicas(3, 3, ["a", "b", "c"], existing, topic="new")
    assert sorted(replicas[0] for replicas in placed) == ["a", "b", "c"]


def test_added_partitions_lead_where_the_topic_has_the_fewest_leaders():
    existing = [new_partition_state("grown", 0, ("a", "b", "c")), new_partition_state("other", 0, ("b", "a", "c"))]
    existing += [
        new_partition_state("other", 1, ("b", "c", "a")),
        new_partition_state("other", 2, ("c", "a", "b")),
        new_partition_state("other", 3, ("c", "b", "a")),
    ]
    # a leads the fewest partitions of all (1 against 2 each), but it already leads the grown topic's only one.
    assert place_replicas(1, 3, ["a", "b", "c"], existing, topic="grown")[0][0] == "b"
    assert place_replicas(1, 3, ["a", "b", "c"], existing, topic="fresh")[0][0] == "a"
