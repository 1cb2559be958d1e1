"""Classic and consumer-protocol members in one group, without Ray, on the in-process broker and a `MockClock`,
against Kafka's rules (`GroupMetadataManager`'s `classicGroup*ToConsumerGroup`, `convertToConsumerGroup`,
`convertToClassicGroup` and `group.consumer.migration.policy`): a classic group with members becomes a
consumer-protocol group when a consumer member joins (online upgrade); its classic members join, sync and heartbeat
into it with their member epoch as generation and get partitions the coordinator assigned, revoking first; the group
goes back to the classic protocol when its last consumer member leaves (online downgrade). The oracle is the
protocols' invariants: every partition owned by exactly one member once stable, epochs that only grow, and Kafka's
error codes for wrong generations, members and protocols."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from actors.core.groups.consumer_group_api import ConsumerGroupState, HeartbeatRequest
from actors.core.groups.consumer_protocol import assigned_partitions, encode_assignment
from actors.core.groups.group_coordinator import GroupCoordinator
from actors.core.groups.group_membership import (
    GroupError,
    GroupMembership,
    GroupState,
    JoinResult,
    MembershipConfig,
    PendingJoin,
    SyncResult,
)
from actors.core.in_process_broker import InProcessBroker
from storage.clock import MockClock
from storage.config.group_protocol_config import GroupProtocolConfig
from storage.records.consumer_offsets import OffsetAndMetadata
from tests.consumer_subscriptions import subscription

GROUP = "g"
TOPIC = "orders"
PARTITIONS = 6
SESSION_MS = 10_000
REBALANCE_MS = 20_000


class Cluster:
    """A coordinator over an in-process broker with one topic of `PARTITIONS` partitions."""

    def __init__(self, tmp_path: Path, policy: str = "bidirectional") -> None:
        self.clock = MockClock()
        self.broker = InProcessBroker(tmp_path, properties={"offsets.topic.num.partitions": "1"}, clock=self.clock)
        self.broker.controller.create_topic(TOPIC, PARTITIONS)
        self.topic_id = self.broker.controller.describe_topic(TOPIC).topic_id
        self.coordinator = GroupCoordinator(
            1,
            clock=self.clock,
            controller=self.broker.controller,
            find_partition=lambda partition: self.broker.internal_partition(CONSUMER_OFFSETS_TOPIC, partition),
            allocate_coordinator_epoch=self.broker.controller.allocate_coordinator_epoch,
            membership=GroupMembership(self.clock, MembershipConfig(group_initial_rebalance_delay_ms=0)),
            group_protocol=GroupProtocolConfig(group_consumer_migration_policy=policy),
        )

    def start_join(
        self,
        member_id: str,
        owned: Sequence[int] = (),
        protocols: tuple[str, ...] = ("range",),
        instance: str | None = None,
    ) -> JoinResult | PendingJoin:
        """A classic member's JoinGroup, answered or pending."""
        return self.coordinator.join_group(
            GROUP,
            member_id,
            group_instance_id=instance,
            client_id="classic",
            client_host="/127.0.0.1",
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            protocol_type="consumer",
            protocols=[(name, subscription([TOPIC], {TOPIC: owned})) for name in protocols],
            require_known_member_id=False,
        )

    def join(
        self,
        member_id: str,
        owned: Sequence[int] = (),
        protocols: tuple[str, ...] = ("range",),
        instance: str | None = None,
    ) -> JoinResult:
        """A classic member's JoinGroup that is answered at once."""
        outcome = self.start_join(member_id, owned, protocols, instance)
        assert isinstance(outcome, JoinResult)
        return outcome

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> SyncResult:
        outcome = self.coordinator.sync_group(
            GROUP, member_id, generation, assignments or {}, protocol_type="consumer", protocol_name="range"
        )
        if outcome is None:
            outcome = self.coordinator.await_sync(GROUP, member_id, generation, 0)
        assert outcome is not None
        return outcome

    def consumer(self, member_id: str, epoch: int, owned: set[int] | None) -> tuple[GroupError, int, set[int] | None]:
        """A consumer member's ConsumerGroupHeartbeat: (error, its epoch, its partitions if the answer has them)."""
        joining = epoch == 0
        result = self.coordinator.consumer_group_heartbeat(
            HeartbeatRequest(
                GROUP,
                member_id,
                epoch,
                rebalance_timeout_ms=REBALANCE_MS if joining else -1,
                subscribed_topic_names=(TOPIC,) if joining else None,
                owned=None if owned is None else ({self.topic_id: frozenset(owned)} if owned else {}),
            )
        )
        assigned = None if result.assignment is None else set(result.assignment.get(self.topic_id, frozenset()))
        return result.error, result.member_epoch, assigned

    def close(self) -> None:
        self.broker.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path)
    try:
        yield running
    finally:
        running.close()


def classic_group(cluster: Cluster) -> dict[str, set[int]]:
    """Two classic members in a Stable classic group, the leader giving each half of the topic: member -> its
    partitions."""
    first = cluster.join("")
    second = cluster.start_join("")
    assert isinstance(second, PendingJoin)
    first = cluster.join(first.member_id)
    assert first.error == GroupError.NONE and first.generation_id == 2
    second = cluster.coordinator.await_join(GROUP, second.member_id, 0)
    assert isinstance(second, JoinResult) and second.generation_id == 2
    leader = first if first.leader == first.member_id else second
    halves = {first.member_id: [0, 1, 2], second.member_id: [3, 4, 5]}
    plan = {member: encode_assignment({TOPIC: parts}, 1) for member, parts in halves.items()}
    assert cluster.sync(leader.member_id, 2, plan).error == GroupError.NONE
    for member in halves:
        assert cluster.sync(member, 2).error == GroupError.NONE
    return {member: set(parts) for member, parts in halves.items()}


def owned_by(result: SyncResult) -> set[int]:
    return {partition for topic, partition in assigned_partitions(result.assignment) if topic == TOPIC}


def rebalance_classic(cluster: Cluster, member: str, owned: set[int]) -> tuple[int, set[int]]:
    """A classic member of a consumer-protocol group joins again owning `owned`, syncs, and if told to revoke
    (its generation behind the group's epoch) does so and joins again: (its generation, its partitions)."""
    joined = cluster.join(member, owned=sorted(owned))
    assert joined.error == GroupError.NONE and joined.leader == "" and joined.protocol_name == "range"
    synced = cluster.sync(member, joined.generation_id)
    assert synced.error == GroupError.NONE
    if cluster.coordinator.heartbeat(GROUP, member, joined.generation_id) == GroupError.REBALANCE_IN_PROGRESS:
        return rebalance_classic(cluster, member, owned_by(synced))
    return joined.generation_id, owned_by(synced)


def test_a_consumer_member_joining_a_classic_group_upgrades_it_and_its_classic_members_rebalance_into_it(
    cluster: Cluster,
) -> None:
    classic = classic_group(cluster)
    error, epoch, assigned = cluster.consumer("c1", 0, {})
    assert error == GroupError.NONE
    # The group took the classic generation (2) as its epoch and bumped it for the new member.
    assert epoch == 3
    described = cluster.coordinator.describe_consumer_group(GROUP)
    assert described is not None and described.group_epoch == 3
    assert sorted(member.classic for member in described.members) == [False, True, True]
    assert cluster.coordinator.describe_group(GROUP) is None
    # Its partitions are still the classic members': it gets nothing until they release some.
    assert assigned == set()
    owners: dict[str, set[int]] = {}
    for member, parts in classic.items():
        assert cluster.coordinator.heartbeat(GROUP, member, 2) == GroupError.REBALANCE_IN_PROGRESS
        generation, owners[member] = rebalance_classic(cluster, member, parts)
        assert generation == 3 and owners[member] <= parts
        assert cluster.coordinator.heartbeat(GROUP, member, 3) == GroupError.NONE
    error, epoch, assigned = cluster.consumer("c1", 3, set())
    assert error == GroupError.NONE and assigned is not None
    owners["c1"] = assigned
    # Each of the three owns two partitions, every partition exactly once.
    assert sorted(len(parts) for parts in owners.values()) == [2, 2, 2]
    assert set().union(*owners.values()) == set(range(PARTITIONS))
    described = cluster.coordinator.describe_consumer_group(GROUP)
    assert described is not None and described.state == ConsumerGroupState.STABLE


def test_the_last_consumer_member_leaving_hands_the_group_back_to_the_classic_protocol(cluster: Cluster) -> None:
    classic = classic_group(cluster)
    assert cluster.consumer("c1", 0, {})[0] == GroupError.NONE
    for member, parts in classic.items():
        rebalance_classic(cluster, member, parts)
    left = cluster.coordinator.consumer_group_heartbeat(HeartbeatRequest(GROUP, "c1", -1))
    assert left.error == GroupError.NONE and left.member_epoch == -1
    assert cluster.coordinator.describe_consumer_group(GROUP) is None
    described = cluster.coordinator.describe_group(GROUP)
    assert described is not None and described.state == GroupState.PREPARING_REBALANCE
    # The classic group's generation is the consumer group's epoch before the leave (3: the classic generation 2,
    # then the consumer member's join), as Kafka 4.2's.
    assert described.generation_id == 3
    first, second = list(classic)
    assert isinstance(cluster.start_join(first), PendingJoin)
    joined = cluster.join(second)
    assert joined.error == GroupError.NONE and joined.generation_id == 4 and joined.leader in classic
    listed = {group.group_id: group for group in cluster.coordinator.list_groups()}
    assert listed[GROUP].group_type == "classic"


def test_a_classic_member_waiting_in_a_join_is_told_to_join_again_when_the_group_is_upgraded(
    cluster: Cluster,
) -> None:
    classic = classic_group(cluster)
    member = next(iter(classic))
    # The member starts a rebalance that waits for the other one.
    assert isinstance(cluster.start_join(member, [0, 1, 2]), PendingJoin)
    assert cluster.consumer("c1", 0, {})[0] == GroupError.NONE
    answer = cluster.coordinator.await_join(GROUP, member, 0)
    assert isinstance(answer, JoinResult) and answer.error == GroupError.REBALANCE_IN_PROGRESS


def test_with_the_migration_policy_disabled_a_classic_group_with_members_is_no_consumer_group(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, policy="disabled")
    try:
        classic = classic_group(cluster)
        result = cluster.coordinator.consumer_group_heartbeat(
            HeartbeatRequest(
                GROUP, "c1", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=(TOPIC,), owned={}
            )
        )
        assert result.error == GroupError.GROUP_ID_NOT_FOUND
        assert result.message == f"Group {GROUP} is not a consumer group."
        described = cluster.coordinator.describe_group(GROUP)
        assert described is not None and described.state == GroupState.STABLE
        for member in classic:
            assert cluster.coordinator.heartbeat(GROUP, member, 2) == GroupError.NONE
    finally:
        cluster.close()


def test_with_downgrades_disabled_the_group_stays_a_consumer_group_of_classic_members(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, policy="upgrade")
    try:
        classic_group(cluster)
        assert cluster.consumer("c1", 0, {})[0] == GroupError.NONE
        assert cluster.coordinator.consumer_group_heartbeat(HeartbeatRequest(GROUP, "c1", -1)).error == GroupError.NONE
        described = cluster.coordinator.describe_consumer_group(GROUP)
        assert described is not None and [member.classic for member in described.members] == [True, True]
    finally:
        cluster.close()


def test_classic_members_of_a_consumer_group_get_kafkas_errors(cluster: Cluster) -> None:
    classic = classic_group(cluster)
    assert cluster.consumer("c1", 0, {})[0] == GroupError.NONE
    member, parts = next(iter(classic.items()))
    joined = cluster.join(member, owned=sorted(parts))
    generation = joined.generation_id
    coordinator = cluster.coordinator
    assert coordinator.heartbeat(GROUP, member, generation + 1) == GroupError.ILLEGAL_GENERATION
    assert coordinator.heartbeat(GROUP, "nobody", generation) == GroupError.UNKNOWN_MEMBER_ID
    # A consumer member is no classic member.
    assert coordinator.heartbeat(GROUP, "c1", 3) == GroupError.UNKNOWN_MEMBER_ID
    stale = coordinator.sync_group(GROUP, member, generation + 1, {})
    assert stale is not None and stale.error == GroupError.ILLEGAL_GENERATION
    wrong_name = coordinator.sync_group(GROUP, member, generation, {}, protocol_type="consumer", protocol_name="x")
    assert wrong_name is not None and wrong_name.error == GroupError.INCONSISTENT_GROUP_PROTOCOL
    # A protocol no classic member lists, or another protocol type, is refused.
    assert cluster.join("", protocols=("roundrobin",)).error == GroupError.INCONSISTENT_GROUP_PROTOCOL
    # Offsets: a classic member commits with its member epoch as generation; another is ILLEGAL_GENERATION.
    offsets = {(TOPIC, 0): OffsetAndMetadata(5)}
    assert coordinator.commit_member(GROUP, member, generation, offsets, api_version=2) == GroupError.NONE
    assert coordinator.commit_member(GROUP, member, generation - 1, offsets, api_version=8) == (
        GroupError.ILLEGAL_GENERATION
    )
    assert coordinator.check_offset_fetch(GROUP, member, generation - 1) == GroupError.ILLEGAL_GENERATION
    assert coordinator.check_offset_fetch(GROUP, "c1", 1) == GroupError.STALE_MEMBER_EPOCH
    left = coordinator.leave_group(GROUP, [(member, None), ("c1", None), ("nobody", None)])
    assert left == [GroupError.NONE, GroupError.UNKNOWN_MEMBER_ID, GroupError.UNKNOWN_MEMBER_ID]


def test_a_classic_member_that_does_not_sync_in_time_is_removed(cluster: Cluster) -> None:
    classic = classic_group(cluster)
    error, c1_epoch, _ = cluster.consumer("c1", 0, {})
    assert error == GroupError.NONE
    slow, fast = list(classic)
    slow_generation = cluster.join(slow, owned=sorted(classic[slow])).generation_id
    fast_generation, _ = rebalance_classic(cluster, fast, classic[fast])
    # `slow` answered its JoinGroup and heartbeats but never syncs: its rebalance timeout (20 s) ends it.
    for _ in range(REBALANCE_MS // 5_000):
        cluster.clock.sleep(5_000)
        cluster.coordinator.heartbeat(GROUP, slow, slow_generation)
        cluster.coordinator.heartbeat(GROUP, fast, fast_generation)
        error, c1_epoch, _ = cluster.consumer("c1", c1_epoch, None)
        assert error == GroupError.NONE
    described = cluster.coordinator.describe_consumer_group(GROUP)
    assert described is not None
    assert {member.member_id for member in described.members} == {fast, "c1"}


def test_the_last_consumer_members_session_expiring_also_hands_the_group_back(cluster: Cluster) -> None:
    classic = classic_group(cluster)
    assert cluster.consumer("c1", 0, {})[0] == GroupError.NONE
    generations = {member: rebalance_classic(cluster, member, parts)[0] for member, parts in classic.items()}
    # c1 sends nothing for its session (group.consumer.session.timeout.ms, 45 s); the classic members go on.
    for _ in range(8):
        cluster.clock.sleep(5_000)
        for member in classic:
            assert cluster.coordinator.heartbeat(GROUP, member, generations[member]) == GroupError.NONE
    cluster.clock.sleep(5_000)
    # c1's session ended: the group is classic again, in the generation its members had, rebalancing.
    member = next(iter(classic))
    assert cluster.coordinator.heartbeat(GROUP, member, generations[member]) == GroupError.REBALANCE_IN_PROGRESS
    described = cluster.coordinator.describe_group(GROUP)
    assert described is not None and described.group_type == "classic"
    assert described.state == GroupState.PREPARING_REBALANCE


def test_a_static_classic_member_of_a_consumer_group_is_checked_against_its_instance_id(cluster: Cluster) -> None:
    classic_group(cluster)
    assert cluster.consumer("c1", 0, {})[0] == GroupError.NONE
    static = cluster.join("", instance="s1")
    assert static.error == GroupError.NONE
    coordinator = cluster.coordinator
    generation = static.generation_id
    assert coordinator.heartbeat(GROUP, static.member_id, generation, "s1") in (
        GroupError.NONE,
        GroupError.REBALANCE_IN_PROGRESS,
    )
    # Another member id naming its instance is fenced; an instance nobody holds is unknown.
    assert coordinator.heartbeat(GROUP, "other", generation, "s1") == GroupError.FENCED_INSTANCE_ID
    assert coordinator.heartbeat(GROUP, static.member_id, generation, "s9") == GroupError.UNKNOWN_MEMBER_ID
    fenced = coordinator.sync_group(GROUP, "other", generation, {}, group_instance_id="s1")
    assert fenced is not None and fenced.error == GroupError.FENCED_INSTANCE_ID
    # The instance back under a new member id takes the member's place; the old id is fenced.
    back = cluster.join("", instance="s1")
    assert back.error == GroupError.NONE and back.member_id != static.member_id
    assert coordinator.heartbeat(GROUP, static.member_id, generation, "s1") == GroupError.FENCED_INSTANCE_ID
    described = coordinator.describe_consumer_group(GROUP)
    assert described is not None
    assert [m.member_id for m in described.members if m.instance_id == "s1"] == [back.member_id]
    # LeaveGroup by instance id alone removes its holder; naming another member id is fenced.
    assert coordinator.leave_group(GROUP, [("someone", "s1"), ("", "s1"), ("", "s9")]) == [
        GroupError.FENCED_INSTANCE_ID,
        GroupError.NONE,
        GroupError.UNKNOWN_MEMBER_ID,
    ]
    described = coordinator.describe_consumer_group(GROUP)
    assert described is not None and "s1" not in {m.instance_id for m in described.members}
