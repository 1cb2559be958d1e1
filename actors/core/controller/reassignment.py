"""Moving a partition's replicas (Kafka's AlterPartitionReassignments, KIP-455) as transitions of its state.

A reassignment to a target replica list first adds the target's new replicas beside the current ones
(`LeaderAndIsr.adding`, created empty on their brokers; they fetch from the leader and join the ISR once caught up),
keeping those that leave (`removing`) in the assignment and the ISR meanwhile, so the partition stays as durable as
before. Once every added replica is in sync (at once when none is added), the partition takes the target alone, as
Kafka's `PartitionReassignmentReplicas` completes it: the ISR keeps only target replicas (it must keep one), the
leader stays if it is a target replica, else the first target replica in sync leads, and the leader epoch rises so
the removed replicas are fenced; the controller then deletes them. A new reassignment of a partition being
reassigned starts from its original replicas (those before the first); cancelling one goes back to them (the added
replicas are deleted).
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from storage.errors import InvalidReplicaAssignmentError, NoReassignmentInProgressError


def original_replicas(state: LeaderAndIsr) -> tuple[str, ...]:
    """The replicas before the reassignment in progress (all of them if none is)."""
    return tuple(node for node in state.replicas if node not in state.adding)


def check_target(target: object, brokers: Mapping[str, object]) -> tuple[str, ...]:
    """The target replicas, distinct and each a running broker; `InvalidReplicaAssignmentError` otherwise."""
    if not isinstance(target, tuple | list) or not target:
        raise InvalidReplicaAssignmentError("a reassignment names at least one replica")
    nodes = tuple(str(node) for node in target)
    if len(set(nodes)) != len(nodes):
        raise InvalidReplicaAssignmentError(f"the replica list {list(nodes)} names a broker twice")
    unknown = [node for node in nodes if node not in brokers]
    if unknown:
        raise InvalidReplicaAssignmentError(f"the replica list names brokers that are not running: {unknown}")
    return nodes


def reassigned(state: LeaderAndIsr, target: tuple[str, ...]) -> LeaderAndIsr:
    """The state once a reassignment to `target` starts (see the module docstring)."""
    base = original_replicas(state)
    adding = tuple(node for node in target if node not in base)
    removing = tuple(node for node in base if node not in target)
    isr = tuple(node for node in state.isr if node in target or node in removing)
    return state.with_assignment(target + removing, isr, adding, removing)


def completed(state: LeaderAndIsr, live: Mapping[str, object]) -> LeaderAndIsr | None:
    """The final state once every added replica is in sync and the ISR keeps a target replica; None before (or
    when no reassignment is in progress)."""
    target = state.target
    if not state.reassigning or any(node not in state.isr for node in state.adding):
        return None
    if not any(node in target for node in state.isr):
        return None
    return _settled(state, target, live)


def cancelled(state: LeaderAndIsr, live: Mapping[str, object]) -> LeaderAndIsr:
    """The state with the reassignment in progress undone; `NoReassignmentInProgressError` if there is none."""
    if not state.reassigning:
        raise NoReassignmentInProgressError(f"{state.topic}-{state.partition} is not being reassigned")
    return _settled(state, original_replicas(state), live)


def _settled(state: LeaderAndIsr, replicas: tuple[str, ...], live: Mapping[str, object]) -> LeaderAndIsr:
    """The partition on `replicas` alone, in the next leader epoch (see the module docstring)."""
    isr = tuple(node for node in state.isr if node in replicas) or replicas[:1]
    settled = state.with_assignment(replicas, isr, (), ())
    leader = (
        state.leader
        if state.leader in replicas
        else next((node for node in replicas if node in isr and node in live), NO_LEADER)
    )
    return settled.with_leader(leader, isr)
