"""The server-side assignors of Kafka's consumer group protocol (KIP-848): `uniform` (the default) and `range`,
as a broker's `group.consumer.assignors` names them.

An assignor maps each member to the partitions it should own (the group's *target assignment*), from each
member's subscribed topics, the partition count of every subscribed topic, and the previous target assignment.
Partitions are named by topic id, as the protocol names them.

- `uniform` (Kafka's `UniformAssignor`): balanced and sticky. Every member keeps the partitions of its previous
  target that it still subscribes to and that still exist; the partitions nobody kept go, in (topic, partition)
  order, each to the eligible member (one subscribed to its topic) owning the fewest; then, while an eligible member
  owns two or more partitions fewer than another member owning one of its topic's partitions, such a partition
  moves to it. With one subscription for all (Kafka's homogeneous case) member counts differ by at most one;
  with different subscriptions, no partition can move to a member with fewer without making another pair unequal
  by two. Kafka's own algorithm may break ties differently: the assignments are equally balanced, not equal.
- `range` (Kafka's server-side `RangeAssignor`): per topic, the members subscribed to it in member id order
  each take a contiguous range of its partitions, the first `partitions % members` one more; members with the same
  subscription therefore get the same partition numbers of every topic with as many partitions (co-partitioning,
  what the range assignor exists for). It is not sticky.

No I/O, no clock: plain functions of their inputs, tested on their own.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

UNIFORM_ASSIGNOR = "uniform"
RANGE_ASSIGNOR = "range"
# Kafka's default of `group.consumer.assignors`: the first is a group's assignor unless its members ask another.
DEFAULT_ASSIGNORS = (UNIFORM_ASSIGNOR, RANGE_ASSIGNOR)

# A member's partitions: topic id -> partition numbers.
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """What an assignor is given: each member's subscribed topic ids, each subscribed topic's partition count, and
    the group's previous target assignment (member id -> its partitions)."""

    subscriptions: Mapping[str, frozenset[uuid.UUID]]
    partition_counts: Mapping[uuid.UUID, int]
    previous: Mapping[str, Assignment]


def uniform(spec: AssignmentSpec) -> dict[str, Assignment]:
    """Kafka's `uniform` assignor (see the module docstring)."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {member: set() for member in spec.subscriptions}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for member, topics in spec.subscriptions.items():
        for topic_id, partitions in spec.previous.get(member, {}).items():
            if topic_id not in topics:
                continue
            count = spec.partition_counts.get(topic_id, 0)
            for partition in partitions:
                key = (topic_id, partition)
                if partition < count and key not in owner:
                    owned[member].add(key)
                    owner[key] = member
    eligible = _eligible_members(spec)
    for key in sorted(_all_partitions(spec), key=_partition_order):
        if key in owner or not eligible[key[0]]:
            continue
        chosen = min(eligible[key[0]], key=lambda member: (len(owned[member]), member))
        owned[chosen].add(key)
        owner[key] = chosen
    _balance(owned, owner, eligible)
    return {member: _grouped(partitions) for member, partitions in owned.items()}


def range_assignor(spec: AssignmentSpec) -> dict[str, Assignment]:
    """Kafka's server-side `range` assignor (see the module docstring)."""
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {member: {} for member in spec.subscriptions}
    for topic_id, members in _eligible_members(spec).items():
        if not members:
            continue
        count = spec.partition_counts[topic_id]
        share, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(sorted(members)):
            size = share + (1 if index < extra else 0)
            if size:
                result[member][topic_id] = frozenset(range(start, start + size))
            start += size
    return result


ASSIGNORS: dict[str, Callable[[AssignmentSpec], dict[str, Assignment]]] = {
    UNIFORM_ASSIGNOR: uniform,
    RANGE_ASSIGNOR: range_assignor,
}


def _eligible_members(spec: AssignmentSpec) -> dict[uuid.UUID, list[str]]:
    """Each subscribed topic that exists -> the members subscribed to it, in member id order."""
    eligible: dict[uuid.UUID, list[str]] = {topic_id: [] for topic_id in spec.partition_counts}
    for member in sorted(spec.subscriptions):
        for topic_id in spec.subscriptions[member]:
            if topic_id in eligible:
                eligible[topic_id].append(member)
    return eligible


def _all_partitions(spec: AssignmentSpec) -> list[tuple[uuid.UUID, int]]:
    return [(topic_id, partition) for topic_id, count in spec.partition_counts.items() for partition in range(count)]


def _partition_order(key: tuple[uuid.UUID, int]) -> tuple[str, int]:
    return (str(key[0]), key[1])


def _balance(
    owned: dict[str, set[tuple[uuid.UUID, int]]],
    owner: dict[tuple[uuid.UUID, int], str],
    eligible: dict[uuid.UUID, list[str]],
) -> None:
    """Moves partitions from the fullest members to eligible members owning at least two fewer, until none can move
    (see the module docstring). Each move lowers the sum of squared counts, so it ends."""
    moved = True
    while moved:
        moved = False
        # The fullest members first: their partitions are the ones to move.
        fullest = [(-len(partitions), member) for member, partitions in owned.items()]
        heapq.heapify(fullest)
        while fullest:
            negative_count, member = heapq.heappop(fullest)
            if -negative_count != len(owned[member]):
                continue
            for key in sorted(owned[member], key=_partition_order, reverse=True):
                target = min(eligible[key[0]], key=lambda other: (len(owned[other]), other))
                if len(owned[target]) + 1 < len(owned[member]):
                    owned[member].discard(key)
                    owned[target].add(key)
                    owner[key] = target
                    moved = True
                    break
            if moved:
                break


def _grouped(partitions: set[tuple[uuid.UUID, int]]) -> Assignment:
    grouped: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in partitions:
        grouped.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(numbers) for topic_id, numbers in grouped.items()}
