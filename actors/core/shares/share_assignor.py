"""The share group assignor, `simple`, as Kafka 4.2 computes it (`SimpleAssignor`, with its
`SimpleHomogeneousAssignmentBuilder` and `SimpleHeterogeneousAssignmentBuilder`; read from Kafka 4.2.2's classes).

Share groups may give one partition to several members, since a share-partition hands each record to one member
at a time. The assignor spreads the subscribed partitions over the members so that:

- each partition goes to `sharing = ceil(members / partitions)` members: one member per partition while there are
  no more members than partitions, and as many as needed for every member to get one when there are more;
- the `sharing * partitions` slots are spread evenly: member `i` (in member id order) gets
  `ceil((i + 1) * x) - ceil(i * x)` partitions, `x = sharing * partitions / members` (Kafka's
  `desiredAssignmentCount`, computed in doubles as Kafka does);
- it is sticky: a member keeps the partitions of its previous target that it still subscribes to and that still
  exist, up to its count, and a partition keeps up to `sharing` of its previous members; the rest is handed out
  in (topic, partition) order, each partition to the members short of their count, in turn.

When every member subscribes to the same topics (Kafka's HOMOGENEOUS subscription type) this is done once over all
their partitions; otherwise topic by topic over the members subscribed to it (HETEROGENEOUS), so a member's count
is balanced per topic. Kafka breaks ties in the order of its hash maps; here members go in member id order and
partitions in (topic id, partition) order: the counts and the sharing are Kafka's, which member gets which partition
may differ. A partition the group may not be assigned yet (`assignable`, Kafka's `isPartitionAssignable`: its
share-group state not initialized) is left out.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping

from actors.core.groups.assignors import Assignment

SIMPLE_ASSIGNOR = "simple"

TopicPartition = tuple[uuid.UUID, int]


def simple_assign(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
    assignable: Callable[[uuid.UUID, int], bool] | None = None,
) -> dict[str, Assignment]:
    """Kafka's `simple` share assignor (see the module docstring): each member's partitions, from each member's
    subscribed topic ids, the partition count of each existing subscribed topic, and the previous target
    assignment. Topics without a partition count (deleted, not created yet) are skipped."""
    members = sorted(subscriptions)
    owned: dict[str, set[TopicPartition]] = {member: set() for member in members}

    def targets(topics: frozenset[uuid.UUID]) -> list[TopicPartition]:
        return [
            (topic, partition)
            for topic in sorted(topics)
            for partition in range(partition_counts.get(topic, 0))
            if assignable is None or assignable(topic, partition)
        ]

    def previous_of(member: str) -> set[TopicPartition]:
        return {(topic, p) for topic, partitions in previous.get(member, {}).items() for p in partitions}

    topic_sets = set(subscriptions.values())
    if len(topic_sets) == 1:
        partitions = targets(next(iter(topic_sets)))
        for member, taken in _spread(members, partitions, {m: previous_of(m) for m in members}).items():
            owned[member] |= taken
    else:
        for topic in sorted(set().union(*topic_sets)):
            subscribers = [m for m in members if topic in subscriptions[m]]
            before = {m: {tp for tp in previous_of(m) if tp[0] == topic} for m in subscribers}
            for member, taken in _spread(subscribers, targets(frozenset({topic})), before).items():
                owned[member] |= taken
    return {member: _as_assignment(partitions) for member, partitions in owned.items()}


def desired_counts(members: int, partitions: int) -> tuple[int, list[int]]:
    """Kafka's sharing (members per partition) and each member's partition count, in member order."""
    if members == 0:
        return 0, []
    sharing = 0 if partitions == 0 else (members + partitions - 1) // partitions
    share = sharing * partitions / members
    return sharing, [math.ceil((i + 1) * share) - math.ceil(i * share) for i in range(members)]


def _spread(
    members: list[str], partitions: list[TopicPartition], previous: Mapping[str, set[TopicPartition]]
) -> dict[str, set[TopicPartition]]:
    """`partitions` over `members` (see the module docstring), sticky to `previous`."""
    sharing, counts = desired_counts(len(members), len(partitions))
    desired = dict(zip(members, counts, strict=True))
    target = set(partitions)
    by_member: dict[str, set[TopicPartition]] = {m: set() for m in members}
    by_partition: dict[TopicPartition, list[str]] = {tp: [] for tp in partitions}
    # Kept: previous partitions still assignable, up to the member's count and the partition's sharing.
    for member in members:
        for tp in sorted(previous.get(member, set()) & target):
            if len(by_member[member]) < desired[member] and len(by_partition[tp]) < sharing:
                by_member[member].add(tp)
                by_partition[tp].append(member)
    # Handed out: each partition short of its sharing to the members short of their count, in turn.
    unfilled = [m for m in members if len(by_member[m]) < desired[m]]
    turn = 0
    for tp in partitions:
        for _ in range(len(unfilled)):
            if len(by_partition[tp]) >= sharing or not unfilled:
                break
            member = unfilled[turn % len(unfilled)]
            if tp in by_member[member]:
                turn += 1
                continue
            by_member[member].add(tp)
            by_partition[tp].append(member)
            if len(by_member[member]) >= desired[member]:
                unfilled.remove(member)
            else:
                turn += 1
    return by_member


def _as_assignment(partitions: set[TopicPartition]) -> Assignment:
    topics: dict[uuid.UUID, set[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, set()).add(partition)
    return {topic: frozenset(numbers) for topic, numbers in topics.items()}
