"""Partition reassignment through the plain controller over real log managers (the test cluster of
`test_controller`), checked against Kafka's rules (KIP-455): the new replicas are added and created first, the
leaving ones stay until the target is in sync, then the partition takes the target alone (a leaving leader hands
over in the next epoch) and the removed replicas are deleted; a cancel goes back to the original replicas; bad
targets get Kafka's per-partition errors. A follower joining the ISR is the test acting as the leader's
AlterPartition."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.core.replication.leader_and_isr import LeaderAndIsr
from storage.clock import MockClock
from storage.errors import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from tests.actors.core.controller.test_controller import NODES, Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    started = Cluster(tmp_path, MockClock())
    started.register(*NODES)
    started.controller.create_topic("t", 1, replication_factor=2)
    yield started
    started.close()


def hosted(cluster: Cluster, node: str) -> bool:
    return any((p.topic, p.partition) == ("t", 0) for p in cluster.managers[node].placements())


def join_isr(cluster: Cluster, node: str) -> LeaderAndIsr:
    state = cluster.controller.partition_state("t", 0)
    return cluster.controller.alter_partition(
        "t", 0, state.leader, state.leader_epoch, state.version, [*state.isr, node]
    )


def test_a_partition_moves_to_its_target_once_the_new_replica_is_in_sync(cluster: Cluster) -> None:
    before = cluster.controller.partition_state("t", 0)
    (outside,) = [node for node in NODES if node not in before.replicas]
    target = (before.replicas[1], outside)
    assert cluster.controller.alter_partition_reassignments({("t", 0): target}) == {("t", 0): None}

    moving = cluster.controller.partition_state("t", 0)
    assert (moving.replicas, moving.adding, moving.removing) == (
        (*target, before.replicas[0]),
        (outside,),
        (before.replicas[0],),
    )
    assert moving.isr == before.isr and moving.leader == before.leader
    assert hosted(cluster, outside) and cluster.replicas.latest(outside, "t", 0) == moving
    assert cluster.controller.partition_reassignments() == [moving]
    cluster.controller.close()
    cluster.controller = cluster.start_controller()
    assert cluster.controller.partition_state("t", 0) == moving, "a reassignment in progress survives a restart"

    done = join_isr(cluster, outside)
    assert (done.replicas, done.isr, done.adding, done.removing) == (target, target, (), ())
    assert done.leader == target[0] and done.leader_epoch == before.leader_epoch + 1, "the leaving leader hands over"
    assert not hosted(cluster, before.replicas[0]), "the removed replica is deleted"
    assert cluster.controller.partition_reassignments() == []


def test_a_cancel_goes_back_to_the_original_replicas_and_deletes_the_added_one(cluster: Cluster) -> None:
    before = cluster.controller.partition_state("t", 0)
    (outside,) = [node for node in NODES if node not in before.replicas]
    cluster.controller.alter_partition_reassignments({("t", 0): (outside, before.replicas[1])})
    assert hosted(cluster, outside)
    assert cluster.controller.alter_partition_reassignments({("t", 0): None}) == {("t", 0): None}
    after = cluster.controller.partition_state("t", 0)
    # Kafka's PartitionReassignmentRevert: the replicas in their order during the reassignment, the added ones out.
    assert (after.replicas, after.isr, after.leader, after.reassigning) == (
        (before.replicas[1], before.replicas[0]),
        before.isr,
        before.leader,
        False,
    )
    assert not hosted(cluster, outside)


def test_a_target_in_sync_already_completes_at_once_and_the_same_replicas_change_nothing(cluster: Cluster) -> None:
    before = cluster.controller.partition_state("t", 0)
    cluster.controller.alter_partition_reassignments({("t", 0): before.replicas})
    assert cluster.controller.partition_state("t", 0) == before
    cluster.controller.alter_partition_reassignments({("t", 0): before.replicas[1:]})
    shrunk = cluster.controller.partition_state("t", 0)
    assert (shrunk.replicas, shrunk.isr, shrunk.leader, shrunk.reassigning) == (
        before.replicas[1:],
        before.replicas[1:],
        before.replicas[1],
        False,
    )
    assert not hosted(cluster, before.replicas[0])


def test_bad_targets_get_kafkas_errors_per_partition(cluster: Cluster) -> None:
    answers = cluster.controller.alter_partition_reassignments(
        {
            ("t", 0): ("node-a", "node-a"),
            ("t", 5): ("node-a",),
            ("missing", 0): ("node-a",),
        }
    )
    assert isinstance(answers[("t", 0)], InvalidReplicaAssignmentError)
    assert isinstance(answers[("t", 5)], UnknownTopicOrPartitionError)
    assert isinstance(answers[("missing", 0)], UnknownTopicOrPartitionError)
    for target in ((), ("node-a", "node-z")):
        (error,) = cluster.controller.alter_partition_reassignments({("t", 0): target}).values()
        assert isinstance(error, InvalidReplicaAssignmentError)
    (error,) = cluster.controller.alter_partition_reassignments({("t", 0): None}).values()
    assert isinstance(error, NoReassignmentInProgressError)


def test_without_replication_factor_change_a_move_keeps_the_count_of_replicas_or_is_refused(cluster: Cluster) -> None:
    """KIP-860: Kafka's AllowReplicationFactorChange=false refuses each move to another number of replicas than the
    partition ends with (INVALID_REPLICATION_FACTOR, with Kafka's message), and lets one of the same number go on,
    counting a move in progress by its target."""
    before = cluster.controller.partition_state("t", 0)
    (outside,) = [node for node in NODES if node not in before.replicas]
    strict = {"allow_replication_factor_change": False}
    for target in [(*before.replicas, outside), (before.replicas[0],)]:
        (refused,) = cluster.controller.alter_partition_reassignments({("t", 0): target}, **strict).values()
        assert isinstance(refused, InvalidReplicationFactorError)
        assert refused.message == f"The replication factor is changed from 2 to {len(target)}"
    assert cluster.controller.partition_state("t", 0) == before, "a refused move changes nothing"

    moved = (before.replicas[1], outside)
    assert cluster.controller.alter_partition_reassignments({("t", 0): moved}, **strict) == {("t", 0): None}
    moving = cluster.controller.partition_state("t", 0)
    assert moving.target == moved and len(moving.replicas) == 3
    (refused,) = cluster.controller.alter_partition_reassignments({("t", 0): NODES}, **strict).values()
    assert isinstance(refused, InvalidReplicationFactorError)
    assert refused.message == "The replication factor is changed from 2 to 3"
    assert cluster.controller.alter_partition_reassignments({("t", 0): None}, **strict) == {("t", 0): None}
    assert cluster.controller.alter_partition_reassignments({("t", 0): NODES}) == {("t", 0): None}, "allowed"
