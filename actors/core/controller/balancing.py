"""Spreading replicas evenly over the running brokers (Cruise Control's ReplicaDistributionGoal), so that a broker
that joins takes its share of the cluster's replicas and, through preferred-leader election, of its leaders.

`balancing_moves` plans replica moves greedily: while a broker holds at least two replicas more than another that
holds no replica of one of its partitions, one such replica moves from the fullest such broker to the emptiest. A
follower replica moves before a leader's (a leader's move hands leadership over in the next epoch), and the moved
replica keeps its place in the assignment, so a replica that was the preferred leader makes the new broker the
preferred leader. A partition whose replicas move is one reassignment to its planned target. Only partitions that
can move take part: a leader to copy from, every replica on a running broker, no reassignment under way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from actors.core.controller.self_healing import blocked, replica_counts
from actors.core.replication.leader_and_isr import LeaderAndIsr


def balancing_moves(
    states: Iterable[LeaderAndIsr], running: Collection[str], limit: int
) -> list[tuple[str, int, tuple[str, ...]]]:
    """The reassignments (topic, partition, target replicas) that even out the replica counts of `running` (see
    the module docstring), at most `limit` replicas moved; none when no broker holds two replicas more than one
    that could take one of them."""
    states = list(states)
    counts = replica_counts(states, running)
    planned = {(s.topic, s.partition): list(s.replicas) for s in states if blocked(s, (), running) is None}
    leaders = {(s.topic, s.partition): s.leader for s in states}
    original = {(s.topic, s.partition): s.replicas for s in states}
    for _ in range(limit):
        move = _next_move(planned, leaders, counts)
        if move is None:
            break
        key, giver, taker = move
        replicas = planned[key]
        replicas[replicas.index(giver)] = taker
        counts[giver] -= 1
        counts[taker] += 1
    return [
        (topic, partition, tuple(replicas))
        for (topic, partition), replicas in sorted(planned.items())
        if tuple(replicas) != original[(topic, partition)]
    ]


def _next_move(
    planned: dict[tuple[str, int], list[str]], leaders: dict[tuple[str, int], str], counts: dict[str, int]
) -> tuple[tuple[str, int], str, str] | None:
    """The partition, and the brokers from and to which one of its replicas moves: the fullest broker with a replica
    that the emptiest possible broker (two or more replicas fewer, none of the partition) can take; a follower's
    replica before a leader's."""
    by_count = sorted(counts, key=lambda node: (counts[node], node))
    for giver in reversed(by_count):
        for taker in by_count:
            if counts[giver] - counts[taker] < 2:
                break
            candidates = [key for key, replicas in planned.items() if giver in replicas and taker not in replicas]
            if candidates:
                return min(candidates, key=lambda key: (leaders[key] == giver, key)), giver, taker
    return None
