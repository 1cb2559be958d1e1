"""The controller's replication decisions, as plain functions of the cluster's state (Kafka's replica placement and
its partition state machine's elections).

- Placement: a partition's `replication.factor` replicas go to distinct brokers (Ray nodes), each to the broker
  holding the fewest replicas (ties: the lower node id); the preferred leader (first replica) is the chosen broker
  that leads the fewest partitions of the same topic, then the fewest of all, so each topic's leaders spread over
  the brokers as Kafka's round-robin placement spreads them (a topic's producers and consumers load every broker,
  not the ones other topics left idle) and leadership as a whole spreads as replicas do. More replicas than live
  brokers is `InvalidReplicationFactorError`.
- Clean election only (`unclean.leader.election.enable=false`): a new leader comes from the ISR, the first live one
  in assignment order. A partition none of whose in-sync replicas is alive goes offline (no leader) and keeps its
  last ISR, so the replica that had everything leads again once its broker comes back.
- A broker that dies leaves every ISR at once (Kafka fences it), unless it is the last member: the ISR never
  empties, it names who may lead next.
- Preferred-leader election (`auto.leader.rebalance.enable`): leadership goes back to the first replica once it is
  alive and in the ISR.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from storage.arguments import is_int
from storage.errors import InvalidReplicationFactorError


def check_replication_factor(replication_factor: object, live_brokers: int) -> int:
    """`replication_factor` if it is an int in 1..live brokers, else `InvalidReplicationFactorError`."""
    if not is_int(replication_factor) or replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be an int >= 1, got {replication_factor!r}")
    if replication_factor > live_brokers:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {live_brokers} available brokers"
        )
    return replication_factor


def place_replicas(
    count: int,
    replication_factor: int,
    brokers: Iterable[str],
    existing: Iterable[LeaderAndIsr],
    topic: str | None = None,
) -> list[tuple[str, ...]]:
    """Replicas (preferred leader first) for `count` new partitions of `topic` (None: a topic with no partition yet)
    over `brokers`; see the module docstring."""
    replicas = dict.fromkeys(sorted(brokers), 0)
    leaders = dict.fromkeys(replicas, 0)
    topic_leaders = dict.fromkeys(replicas, 0)
    check_replication_factor(replication_factor, len(replicas))
    for state in existing:
        for node in state.replicas:
            if node in replicas:
                replicas[node] += 1
        if state.replicas and state.replicas[0] in leaders:
            leaders[state.replicas[0]] += 1
            if state.topic == topic:
                topic_leaders[state.replicas[0]] += 1
    placed = []
    for _ in range(count):
        chosen = sorted(replicas, key=lambda node: (replicas[node], node))[:replication_factor]
        preferred = min(chosen, key=lambda node: (topic_leaders[node], leaders[node], replicas[node], node))
        ordered = (preferred, *(node for node in chosen if node != preferred))
        for node in ordered:
            replicas[node] += 1
        leaders[preferred] += 1
        topic_leaders[preferred] += 1
        placed.append(ordered)
    return placed


def new_partition_state(topic: str, partition: int, replicas: tuple[str, ...]) -> LeaderAndIsr:
    """A new partition: every replica in sync (all empty), the preferred one leading in epoch 0."""
    return LeaderAndIsr(topic, partition, replicas[0], 0, replicas, replicas)


def after_broker_lost(state: LeaderAndIsr, lost: str, live: Mapping[str, object]) -> LeaderAndIsr | None:
    """The partition's new state once broker `lost` is gone (`live`: the brokers still running), or None if it is
    not a replica of this partition (see the module docstring)."""
    if lost not in state.replicas:
        return None
    isr = tuple(node for node in state.isr if node != lost) or (lost,)
    if state.leader != lost:
        return state.with_isr(isr) if isr != state.isr else None
    leader = next((node for node in state.replicas if node in isr and node in live), NO_LEADER)
    return state.with_leader(leader, isr)


def elect_if_offline(state: LeaderAndIsr, live: Mapping[str, object]) -> LeaderAndIsr | None:
    """A new leader for a partition whose leader is gone or none, from its live in-sync replicas; None if it has a
    live leader or no live in-sync replica."""
    if state.leader in live:
        return None
    leader = next((node for node in state.replicas if node in state.isr and node in live), None)
    return None if leader is None else state.with_leader(leader, state.isr)


def preferred_election(state: LeaderAndIsr, live: Mapping[str, object]) -> LeaderAndIsr | None:
    """Leadership back to the preferred replica if it is alive, in sync and not leading; else None."""
    preferred = state.replicas[0] if state.replicas else NO_LEADER
    if preferred == state.leader or preferred not in state.isr or preferred not in live:
        return None
    return state.with_leader(preferred, state.isr)


def moved_replica(
    state: LeaderAndIsr, node: str, live: Mapping[str, object], directory_id: str = ""
) -> LeaderAndIsr | None:
    """Broker `node` (re)started holding this partition's folder in log dir `directory_id`: the replica recorded in
    that dir now runs on `node` (the same disk under a new Ray node id). Without a recorded match (a dir without an
    id, a state from before ids were recorded) only an unambiguous guess is made: a topic's only replica, or the one
    replica whose broker is gone; a disk that cannot be told apart is left out rather than given a replica's place
    (and its ISR membership) it may not hold. None if nothing changes."""
    if directory_id and directory_id in state.directories:
        owner = state.replicas[state.directories.index(directory_id)]
        return None if owner == node else state.with_replica_moved(owner, node, directory_id)
    if node in state.replicas:
        return None if not directory_id or state.directory_of(node) else state.with_directory(node, directory_id)
    if directory_id and len(state.directories) == len(state.replicas) and all(state.directories):
        return None
    if len(state.replicas) == 1:
        return state.with_replica_moved(state.replicas[0], node, directory_id)
    gone = [replica for replica in state.replicas if replica not in live]
    return state.with_replica_moved(gone[0], node, directory_id) if len(gone) == 1 else None
