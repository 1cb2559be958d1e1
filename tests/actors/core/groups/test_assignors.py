"""The server-side assignors, as plain functions: every subscribed partition assigned once, to a member subscribed to
its topic; `uniform` balanced (counts within one for one subscription) and sticky across a member joining and
leaving; `range` co-partitioned ranges in member id order. Random groups are checked against these properties
(hypothesis), the oracle being the definition of a valid, balanced assignment."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.core.groups.assignors import AssignmentSpec, range_assignor, uniform

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def _flat(assignment: dict[str, dict[uuid.UUID, frozenset[int]]]) -> list[tuple[uuid.UUID, int]]:
    return [(topic, p) for partitions in assignment.values() for topic, numbers in partitions.items() for p in numbers]


def _counts(assignment: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[str, int]:
    return {member: sum(len(numbers) for numbers in partitions.values()) for member, partitions in assignment.items()}


def test_uniform_spreads_one_subscription_within_one_partition() -> None:
    spec = AssignmentSpec({m: frozenset({A, B}) for m in ("m1", "m2", "m3")}, {A: 4, B: 3}, {})
    assignment = uniform(spec)
    assert sorted(_flat(assignment)) == sorted([(A, p) for p in range(4)] + [(B, p) for p in range(3)])
    assert sorted(_counts(assignment).values()) == [2, 2, 3]


def test_uniform_keeps_partitions_when_a_member_joins_and_leaves() -> None:
    two = uniform(AssignmentSpec({m: frozenset({A}) for m in ("m1", "m2")}, {A: 6}, {}))
    three = uniform(AssignmentSpec({m: frozenset({A}) for m in ("m1", "m2", "m3")}, {A: 6}, two))
    assert _counts(three) == {"m1": 2, "m2": 2, "m3": 2}
    # Only what m3 needed moved: m1 and m2 keep 2 of their 3 each.
    for member in ("m1", "m2"):
        assert three[member][A] <= two[member][A]
    back = uniform(AssignmentSpec({m: frozenset({A}) for m in ("m1", "m2")}, {A: 6}, three))
    for member in ("m1", "m2"):
        assert back[member][A] >= three[member][A]
    assert _counts(back) == {"m1": 3, "m2": 3}


def test_uniform_gives_a_topic_only_to_its_subscribers() -> None:
    spec = AssignmentSpec({"m1": frozenset({A}), "m2": frozenset({A, B}), "m3": frozenset({B})}, {A: 3, B: 3}, {})
    assignment = uniform(spec)
    assert B not in assignment["m1"] and A not in assignment["m3"]
    assert sorted(_counts(assignment).values()) == [2, 2, 2]


def test_uniform_drops_partitions_of_unsubscribed_and_shrunk_topics() -> None:
    previous = {"m1": {A: frozenset({0, 1, 5}), B: frozenset({0})}}
    assignment = uniform(AssignmentSpec({"m1": frozenset({A})}, {A: 3}, previous))
    assert assignment == {"m1": {A: frozenset({0, 1, 2})}}


def test_range_gives_co_partitioned_ranges_in_member_order() -> None:
    spec = AssignmentSpec({m: frozenset({A, B}) for m in ("m2", "m1", "m3")}, {A: 7, B: 7}, {})
    assignment = range_assignor(spec)
    assert assignment["m1"] == {A: frozenset({0, 1, 2}), B: frozenset({0, 1, 2})}
    assert assignment["m2"] == {A: frozenset({3, 4}), B: frozenset({3, 4})}
    assert assignment["m3"] == {A: frozenset({5, 6}), B: frozenset({5, 6})}


def test_a_member_of_no_existing_topic_gets_nothing() -> None:
    spec = AssignmentSpec({"m1": frozenset({A}), "m2": frozenset({B})}, {A: 2}, {})
    for assignor in (uniform, range_assignor):
        assignment = assignor(spec)
        assert assignment["m2"] == {}
        assert assignment["m1"] == {A: frozenset({0, 1})}


@settings(max_examples=150, deadline=None)
@given(
    partitions=st.lists(st.integers(0, 12), min_size=1, max_size=4),
    subscriptions=st.lists(st.sets(st.integers(0, 3), min_size=1), min_size=1, max_size=7),
    previous_seed=st.integers(0, 2**32),
)
def test_every_assignment_is_complete_exclusive_and_valid(
    partitions: list[int], subscriptions: list[set[int]], previous_seed: int
) -> None:
    topics = [uuid.UUID(int=index + 1) for index in range(len(partitions))]
    counts = dict(zip(topics, partitions, strict=True))
    subscribed = {
        f"m{index}": frozenset(topics[t] for t in subscription if t < len(topics))
        for index, subscription in enumerate(subscriptions)
    }
    first = uniform(AssignmentSpec(subscribed, counts, {}))
    # A previous assignment with a member gone and one partition number past the end: both must be dropped.
    previous = {m: dict(a) for m, a in first.items() if hash((m, previous_seed)) % 3}
    for assignor, prior in ((uniform, {}), (uniform, previous), (range_assignor, {})):
        assignment = assignor(AssignmentSpec(subscribed, counts, prior))
        flat = _flat(assignment)
        wanted = {(t, p) for t in topics if any(t in s for s in subscribed.values()) for p in range(counts[t])}
        assert len(flat) == len(set(flat)) and set(flat) == wanted
        for member, partitions in assignment.items():
            assert set(partitions) <= subscribed[member]
        if assignor is uniform and len(set(subscribed.values())) == 1:
            assert max(_counts(assignment).values()) - min(_counts(assignment).values()) <= 1
