"""Self-healing: the replicas of a broker lost for good are re-created on running brokers (Cruise Control's
self-healing on broker failure, as its `broker.failure.self.healing.threshold.ms` does it).

A broker that leaves the cluster (its Ray node died, it was fenced for silence, or it never came back after a
controller start) may return: a restarted node brings its disks back and takes its old replicas' places
(`assignment.moved_replica`), a paused one registers again. So nothing moves for
`raybroker.balancer.node.loss.grace.ms` (default 1800000, Cruise Control's threshold; -1 turns self-healing off).
Past that, every partition with a replica on the lost broker is reassigned (`reassignment`, Kafka's KIP-455 move:
the new replica copies from the leader, joins the ISR, then the lost one leaves the assignment) to the same
replicas with each lost one replaced by the running broker that holds no replica of the partition and the fewest
replicas of all (ties: the lower node id), so the partition is back at its replication factor.

Draining a broker before its node is removed (`Controller.drain_broker`, Cruise Control's remove_broker) moves
its replicas the same way, at once, and refuses when a partition cannot move; a broker being drained takes no new
replica meanwhile.

A partition is left as it is when it cannot be healed now (`blocked`): no running broker is free to take a replica
(the cluster has fewer running brokers than the replication factor; a broker that joins later is taken on the next
pass), it has no leader to copy from (offline: only the lost broker had its data, so it waits for that broker),
another of its replicas is on a broker that is not running, or it is being reassigned already.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from actors.core.replication.leader_and_isr import LeaderAndIsr


def replica_counts(states: Iterable[LeaderAndIsr], brokers: Collection[str]) -> dict[str, int]:
    """How many replicas each of `brokers` holds."""
    counts = dict.fromkeys(brokers, 0)
    for state in states:
        for node in state.replicas:
            if node in counts:
                counts[node] += 1
    return counts


def blocked(state: LeaderAndIsr, lost: Collection[str], running: Collection[str]) -> str | None:
    """Why the replicas of `state` on `lost` brokers cannot be replaced now (see the module docstring), None if
    they can."""
    if state.reassigning:
        return "it is being reassigned"
    if state.offline:
        return "it has no leader to copy from"
    away = [node for node in state.replicas if node not in lost and node not in running]
    if away:
        return f"its replicas on {away} are not running"
    free = [node for node in running if node not in state.replicas]
    needed = sum(1 for node in state.replicas if node in lost)
    if len(free) < needed:
        return f"no running broker is free to take its replica ({len(running)} running, {len(state.replicas)} replicas)"
    return None


def healed_replicas(
    state: LeaderAndIsr, lost: Collection[str], running: Collection[str], counts: dict[str, int]
) -> tuple[str, ...] | None:
    """The target replicas of `state` with each replica on a `lost` broker replaced (see the module docstring), or
    None when it has none on a lost broker or cannot be healed now (`blocked`). `counts` (`replica_counts` over
    `running`) is updated for the replicas chosen, so the next partition sees them."""
    if not any(node in lost for node in state.replicas) or blocked(state, lost, running) is not None:
        return None
    return replaced_replicas(state, lost, running, counts)


def replaced_replicas(
    state: LeaderAndIsr, lost: Collection[str], running: Collection[str], counts: dict[str, int]
) -> tuple[str, ...]:
    """`healed_replicas` of a partition known to have replicas on `lost` brokers and not to be `blocked`."""
    chosen = iter(_free_brokers(state, running, counts))
    target = tuple(next(chosen) if node in lost else node for node in state.replicas)
    for node in target:
        if node not in state.replicas:
            counts[node] += 1
    return target


def grown_replicas(
    state: LeaderAndIsr, wanted: int, running: Collection[str], counts: dict[str, int]
) -> tuple[str, ...] | None:
    """The target replicas of an internal topic's partition created with fewer than `wanted` replicas (its first
    broker created it alone): its own replicas, then the running brokers that hold none of it, fewest replicas first
    (ties: the lower node id), up to `wanted` or as many as are free. None when it has `wanted` already or cannot
    grow now (being reassigned, no leader, a replica on a broker not running, no free broker). `counts` is updated
    as in `healed_replicas`."""
    if len(state.replicas) >= wanted or blocked(state, (), running) is not None:
        return None
    added = _free_brokers(state, running, counts)[: wanted - len(state.replicas)]
    for node in added:
        counts[node] += 1
    return (*state.replicas, *added) if added else None


def _free_brokers(state: LeaderAndIsr, running: Collection[str], counts: dict[str, int]) -> list[str]:
    """The running brokers holding no replica of `state`, fewest replicas first (ties: the lower node id)."""
    return sorted((node for node in running if node not in state.replicas), key=lambda node: (counts[node], node))


def due(lost_at_ms: Mapping[str, int], now_ms: int, grace_ms: int) -> set[str]:
    """The lost brokers whose grace has passed (none while `grace_ms` is -1: self-healing is off)."""
    if grace_ms < 0:
        return set()
    return {node for node, since in lost_at_ms.items() if now_ms - since >= grace_ms}
