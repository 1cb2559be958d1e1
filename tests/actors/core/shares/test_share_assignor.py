"""The `simple` share assignor against Kafka 4.2's `SimpleAssignor` rules (its homogeneous and heterogeneous
builders): `ceil(members / partitions)` members per partition, the slots spread by Kafka's `desiredAssignmentCount`,
sticky to the previous target, per topic when subscriptions differ; random groups checked against these
properties (hypothesis), the oracle being the rules themselves."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.core.groups.assignors import Assignment
from actors.core.shares.share_assignor import desired_counts, simple_assign

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def _owners(assignment: dict[str, Assignment]) -> Counter[tuple[uuid.UUID, int]]:
    return Counter((t, p) for parts in assignment.values() for t, ps in parts.items() for p in ps)


def _counts(assignment: dict[str, Assignment]) -> list[int]:
    return [sum(len(ps) for ps in assignment[m].values()) for m in sorted(assignment)]


@pytest.mark.parametrize(
    ("members", "partitions", "sharing", "counts"),
    [(3, 2, 2, [2, 1, 1]), (2, 5, 1, [3, 2]), (4, 4, 1, [1, 1, 1, 1]), (5, 1, 5, [1] * 5), (3, 0, 0, [0, 0, 0])],
)
def test_desired_counts_are_kafkas(members: int, partitions: int, sharing: int, counts: list[int]) -> None:
    """Kafka's `SimpleHomogeneousAssignmentBuilder` constructor: `desiredSharing = (members + partitions - 1) /
    partitions` and `ceil((i + 1) * x) - ceil(i * x)` per member."""
    assert desired_counts(members, partitions) == (sharing, counts)


def test_fewer_members_than_partitions_split_them() -> None:
    assignment = simple_assign({m: frozenset({A}) for m in ("m1", "m2")}, {A: 5}, {})
    assert _owners(assignment) == Counter({(A, p): 1 for p in range(5)})
    assert _counts(assignment) == [3, 2]


def test_more_members_than_partitions_share_them() -> None:
    """KIP-932: a partition goes to several members when there are more members than partitions."""
    assignment = simple_assign({m: frozenset({A}) for m in ("m1", "m2", "m3")}, {A: 2}, {})
    assert _owners(assignment) == Counter({(A, 0): 2, (A, 1): 2})
    assert _counts(assignment) == [2, 1, 1]


def test_one_subscription_is_balanced_over_all_topics_together() -> None:
    """Homogeneous: the slots are counted over every subscribed partition, so two one-partition topics and two
    members give each member one partition."""
    assignment = simple_assign({m: frozenset({A, B}) for m in ("m1", "m2")}, {A: 1, B: 1}, {})
    assert _owners(assignment) == Counter({(A, 0): 1, (B, 0): 1})
    assert _counts(assignment) == [1, 1]


def test_different_subscriptions_are_balanced_topic_by_topic() -> None:
    """Heterogeneous (Kafka's `SimpleHeterogeneousAssignmentBuilder`): each topic over its own subscribers."""
    subscriptions = {"m1": frozenset({A, B}), "m2": frozenset({A}), "m3": frozenset({B})}
    assignment = simple_assign(subscriptions, {A: 1, B: 4}, {})
    assert assignment["m2"] == {A: frozenset({0})}
    assert assignment["m1"][A] == frozenset({0})
    assert sorted(len(assignment[m][B]) for m in ("m1", "m3")) == [2, 2]
    assert _owners(assignment)[(A, 0)] == 2


def test_the_assignment_is_sticky() -> None:
    """Kafka's `revokeUnassignablePartitions`: previous partitions are kept up to the new counts."""
    two = simple_assign({m: frozenset({A}) for m in ("m1", "m2")}, {A: 6}, {})
    three = simple_assign({m: frozenset({A}) for m in ("m1", "m2", "m3")}, {A: 6}, two)
    assert _counts(three) == [2, 2, 2]
    for member in ("m1", "m2"):
        assert three[member][A] <= two[member][A]


def test_unassignable_and_missing_partitions_are_left_out() -> None:
    """Kafka's `isPartitionAssignable` (the share-group state not initialized yet) and a topic not in the metadata."""
    assignment = simple_assign({"m1": frozenset({A, B})}, {A: 3}, {}, assignable=lambda topic, p: p != 1)
    assert assignment == {"m1": {A: frozenset({0, 2})}}


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([f"m{i}" for i in range(8)]), st.sets(st.sampled_from([A, B]), min_size=1), min_size=1
    ),
    st.integers(0, 6),
    st.integers(0, 6),
)
def test_random_groups_follow_kafkas_rules(members: dict[str, set[uuid.UUID]], count_a: int, count_b: int) -> None:
    subscriptions = {m: frozenset(t) for m, t in members.items()}
    counts = {A: count_a, B: count_b}
    assignment = simple_assign(subscriptions, counts, {})
    for member, parts in assignment.items():
        assert set(parts) <= subscriptions[member]
    homogeneous = len(set(subscriptions.values())) == 1
    groups = (
        [
            (
                sorted(subscriptions),
                [(t, p) for t in sorted(next(iter(subscriptions.values()))) for p in range(counts[t])],
            )
        ]
        if homogeneous
        else [
            (sorted(m for m in subscriptions if t in subscriptions[m]), [(t, p) for p in range(counts[t])])
            for t in (A, B)
        ]
    )
    owners = _owners(assignment)
    for group_members, partitions in groups:
        if not group_members:
            continue
        sharing, desired = desired_counts(len(group_members), len(partitions))
        for tp in partitions:
            assert owners[tp] == sharing
        topics = {t for t, _ in partitions}
        got = [sum(len(assignment[m].get(t, frozenset())) for t in topics) for m in group_members]
        assert got == desired
    again = simple_assign(subscriptions, counts, assignment)
    assert again == assignment
