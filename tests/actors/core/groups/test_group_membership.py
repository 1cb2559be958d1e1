"""The classic group protocol's state machine, without Ray, on a `MockClock`: joins and generations, the leader's
assignment, rebalances on join/leave/expiry, the rebalance timeout and initial delay, static membership (KIP-345,
Kafka's `updateStaticMemberThenRebalanceOrCompleteJoin` and `validateMember`), and Kafka's error answers."""

from __future__ import annotations

import pytest

from actors.core.groups.group_membership import (
    GroupError,
    GroupMembership,
    GroupState,
    JoinResult,
    MembershipConfig,
    PendingJoin,
    SyncResult,
)
from storage.clock import MockClock

SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000
GROUP = "orders-readers"


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def groups(clock: MockClock) -> GroupMembership:
    return GroupMembership(clock, MembershipConfig(group_initial_rebalance_delay_ms=0))


def join(
    groups: GroupMembership,
    member_id: str = "",
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
    *,
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
    require_known: bool = False,
    group: str = GROUP,
    instance: str | None = None,
    skip_assignment_supported: bool = False,
) -> JoinResult | PendingJoin:
    return groups.join(
        group,
        member_id,
        group_instance_id=instance,
        skip_assignment_supported=skip_assignment_supported,
        client_id="client",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type=protocol_type,
        protocols=protocols,
        require_known_member_id=require_known,
    )


def joined(outcome: JoinResult | PendingJoin) -> JoinResult:
    assert isinstance(outcome, JoinResult), outcome
    assert outcome.error == GroupError.NONE, outcome
    return outcome


def member_of(outcome: JoinResult | PendingJoin) -> str:
    return outcome.member_id


def stable_pair(groups: GroupMembership) -> tuple[str, str, int]:
    """Two members through join and sync: (leader, follower, generation)."""
    first_generation = joined(join(groups, protocols=(("range", b"a"),)))
    first = first_generation.member_id
    # Alone (and without an initial delay), the first member's join completed at once: generation 1. The second
    # member starts generation 2, which waits for the first to rejoin.
    second = member_of(join(groups, protocols=(("range", b"b"),)))
    assert isinstance(groups.poll_join(GROUP, second), PendingJoin)
    assert groups.heartbeat(GROUP, first, first_generation.generation_id) == GroupError.REBALANCE_IN_PROGRESS
    answer = joined(join(groups, first, (("range", b"a"),)))
    follower = joined(groups.poll_join(GROUP, second))
    assert answer.generation_id == follower.generation_id == 2
    assert groups.sync(GROUP, second, 2, {}) is None
    assert groups.sync(GROUP, first, 2, {first: b"p0", second: b"p1"}) == SyncResult(
        GroupError.NONE, "consumer", "range", b"p0"
    )
    assert groups.poll_sync(GROUP, second, 2) == SyncResult(GroupError.NONE, "consumer", "range", b"p1")
    return first, second, 2


def test_a_lone_member_joins_leads_generation_one_and_gets_its_own_assignment(groups: GroupMembership) -> None:
    result = joined(join(groups, protocols=(("range", b"subscription"),)))
    assert (result.generation_id, result.leader, result.protocol_name) == (1, result.member_id, "range")
    assert [(m.member_id, m.metadata) for m in result.members] == [(result.member_id, b"subscription")]
    assert groups.sync(GROUP, result.member_id, 1, {result.member_id: b"all"}) == SyncResult(
        GroupError.NONE, "consumer", "range", b"all"
    )
    assert groups.heartbeat(GROUP, result.member_id, 1) == GroupError.NONE
    assert groups.describe(GROUP).state == GroupState.STABLE  # type: ignore[union-attr]


def test_v4_clients_are_given_a_member_id_to_join_with(groups: GroupMembership) -> None:
    first = join(groups, require_known=True)
    assert isinstance(first, JoinResult) and first.error == GroupError.MEMBER_ID_REQUIRED and first.member_id
    result = joined(join(groups, first.member_id, require_known=True))
    assert (result.member_id, result.generation_id) == (first.member_id, 1)


def test_the_leader_gets_every_members_metadata_and_each_member_its_assignment(groups: GroupMembership) -> None:
    leader, follower, generation = stable_pair(groups)
    described = groups.describe(GROUP)
    assert described is not None and described.state == GroupState.STABLE
    assert {(m.member_id, m.metadata, m.assignment) for m in described.members} == {
        (leader, b"a", b"p0"),
        (follower, b"b", b"p1"),
    }
    assert groups.heartbeat(GROUP, follower, generation) == GroupError.NONE


def test_members_joining_together_share_the_first_generation(clock: MockClock) -> None:
    groups = GroupMembership(clock, MembershipConfig(group_initial_rebalance_delay_ms=DELAY_MS))
    first = member_of(join(groups, protocols=(("range", b"a"),)))
    clock.sleep(DELAY_MS - 1)
    # A member arriving during the initial delay extends it by another delay.
    second = member_of(join(groups, protocols=(("range", b"b"),)))
    clock.sleep(DELAY_MS - 1)
    assert isinstance(groups.poll_join(GROUP, first), PendingJoin)
    assert groups.next_deadline_ms(GROUP) == clock.milliseconds() + 1
    clock.sleep(1)
    leader = joined(groups.poll_join(GROUP, first))
    follower = joined(groups.poll_join(GROUP, second))
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader == first and [m.member_id for m in leader.members] == [first, second]
    assert follower.members == ()


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed(
    groups: GroupMembership, clock: MockClock
) -> None:
    leader, follower, generation = stable_pair(groups)
    newcomer = member_of(join(groups))
    assert groups.heartbeat(GROUP, leader, generation) == GroupError.REBALANCE_IN_PROGRESS
    assert isinstance(join(groups, leader, (("range", b"a"),)), PendingJoin)
    # The follower keeps heartbeating (so its session lives) but never rejoins.
    for _ in range(REBALANCE_MS // (SESSION_MS // 2) - 1):
        clock.sleep(SESSION_MS // 2)
        assert groups.heartbeat(GROUP, follower, generation) == GroupError.REBALANCE_IN_PROGRESS
    clock.sleep(SESSION_MS // 2 - 1)
    assert isinstance(groups.poll_join(GROUP, leader), PendingJoin)
    clock.sleep(1)
    result = joined(groups.poll_join(GROUP, leader))
    assert result.generation_id == generation + 1
    assert {m.member_id for m in result.members} == {leader, newcomer}
    assert groups.heartbeat(GROUP, follower, generation) == GroupError.UNKNOWN_MEMBER_ID


def test_a_member_whose_session_expires_is_removed_and_the_others_rebalance(
    groups: GroupMembership, clock: MockClock
) -> None:
    leader, follower, generation = stable_pair(groups)
    clock.sleep(SESSION_MS - 1)
    assert groups.heartbeat(GROUP, leader, generation) == GroupError.NONE
    clock.sleep(1)
    # The follower was silent for a whole session: gone, and the leader is told to rejoin.
    assert groups.heartbeat(GROUP, follower, generation) == GroupError.UNKNOWN_MEMBER_ID
    assert groups.heartbeat(GROUP, leader, generation) == GroupError.REBALANCE_IN_PROGRESS
    result = joined(join(groups, leader, (("range", b"a"),)))
    assert (result.generation_id, [m.member_id for m in result.members]) == (generation + 1, [leader])


def test_leaving_rebalances_the_rest_and_the_last_leave_empties_the_group(groups: GroupMembership) -> None:
    leader, follower, generation = stable_pair(groups)
    assert groups.leave(GROUP, [(leader, None), ("nobody", None)]) == [GroupError.NONE, GroupError.UNKNOWN_MEMBER_ID]
    assert groups.heartbeat(GROUP, follower, generation) == GroupError.REBALANCE_IN_PROGRESS
    result = joined(join(groups, follower, (("range", b"b"),)))
    assert (result.generation_id, result.leader) == (generation + 1, follower)
    assert groups.leave(GROUP, [(follower, None)]) == [GroupError.NONE]
    described = groups.describe(GROUP)
    assert described is not None and (described.state, described.members) == (GroupState.EMPTY, ())
    assert groups.delete(GROUP) == GroupError.NONE
    assert groups.describe(GROUP) is None


def test_a_pending_sync_is_told_to_rejoin_when_a_member_joins_before_the_leader_synced(
    groups: GroupMembership,
) -> None:
    leader = joined(join(groups)).member_id
    follower = member_of(join(groups))
    generation = joined(join(groups, leader)).generation_id
    assert joined(groups.poll_join(GROUP, follower)).generation_id == generation
    assert groups.sync(GROUP, follower, generation, {}) is None
    member_of(join(groups))
    assert groups.poll_sync(GROUP, follower, generation) == SyncResult(GroupError.REBALANCE_IN_PROGRESS)
    assert groups.sync(GROUP, leader, generation, {}) == SyncResult(GroupError.REBALANCE_IN_PROGRESS)


def test_the_protocol_most_members_prefer_among_those_all_support_is_chosen(groups: GroupMembership) -> None:
    a = member_of(join(groups, protocols=(("roundrobin", b"a"), ("range", b"a"))))
    b = member_of(join(groups, protocols=(("range", b"b"), ("roundrobin", b"b"), ("sticky", b"b"))))
    c = member_of(join(groups, protocols=(("range", b"c"), ("roundrobin", b"c"))))
    results = [join(groups, a, (("roundrobin", b"a"), ("range", b"a")))]
    results += [groups.poll_join(GROUP, m) for m in (b, c)]
    assert {joined(r).protocol_name for r in results} == {"range"}
    assert isinstance(join(groups, protocols=(("sticky", b"d"),)), JoinResult)
    assert join(groups, protocols=(("sticky", b"d"),)).error == GroupError.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[union-attr]
    assert join(groups, protocol_type="connect").error == GroupError.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("member_id", "session_ms", "group", "error"),
    [
        ("", 5_999, GROUP, GroupError.INVALID_SESSION_TIMEOUT),
        ("", 1_800_001, GROUP, GroupError.INVALID_SESSION_TIMEOUT),
        ("", SESSION_MS, "", GroupError.INVALID_GROUP_ID),
        ("made-up", SESSION_MS, "no-such-group", GroupError.UNKNOWN_MEMBER_ID),
    ],
)
def test_bad_joins_get_kafkas_errors(
    groups: GroupMembership, member_id: str, session_ms: int, group: str, error: GroupError
) -> None:
    outcome = join(groups, member_id, session_ms=session_ms, group=group)
    assert isinstance(outcome, JoinResult) and outcome.error == error


def test_sync_and_heartbeat_of_other_generations_or_members_are_refused(groups: GroupMembership) -> None:
    leader, _, generation = stable_pair(groups)
    assert groups.sync(GROUP, leader, generation - 1, {}) == SyncResult(GroupError.ILLEGAL_GENERATION)
    assert groups.sync(GROUP, "stranger", generation, {}) == SyncResult(GroupError.UNKNOWN_MEMBER_ID)
    assert groups.sync("no-such-group", leader, generation, {}) == SyncResult(GroupError.UNKNOWN_MEMBER_ID)
    assert groups.sync(GROUP, leader, generation, {}, protocol_name="sticky") == SyncResult(
        GroupError.INCONSISTENT_GROUP_PROTOCOL
    )
    assert groups.heartbeat(GROUP, leader, generation + 1) == GroupError.ILLEGAL_GENERATION
    assert groups.heartbeat(GROUP, "stranger", generation) == GroupError.UNKNOWN_MEMBER_ID


def test_commits_are_checked_against_the_generation(groups: GroupMembership) -> None:
    assert groups.check_commit("never-joined", "", 3) == GroupError.ILLEGAL_GENERATION
    leader, follower, generation = stable_pair(groups)
    assert groups.check_commit(GROUP, leader, generation) == GroupError.NONE
    assert groups.check_commit(GROUP, leader, generation - 1) == GroupError.ILLEGAL_GENERATION
    assert groups.check_commit(GROUP, "stranger", generation) == GroupError.UNKNOWN_MEMBER_ID
    # During the join phase the current generation may still commit what it consumed.
    member_of(join(groups))
    assert groups.check_commit(GROUP, follower, generation) == GroupError.NONE
    assert isinstance(join(groups, leader, (("range", b"a"),)), PendingJoin)
    joined(join(groups, follower, (("range", b"b"),)))
    # Every member rejoined: the sync phase of the next generation refuses its members' commits; a stranger is
    # still unknown and a member of the last generation still of another one (Kafka checks both first).
    assert groups.check_commit(GROUP, leader, generation + 1) == GroupError.REBALANCE_IN_PROGRESS
    assert groups.check_commit(GROUP, "stranger", generation + 1) == GroupError.UNKNOWN_MEMBER_ID
    assert groups.check_commit(GROUP, leader, generation) == GroupError.ILLEGAL_GENERATION


def test_a_commit_of_generation_minus_one_is_written_only_into_a_group_without_members(
    groups: GroupMembership, clock: MockClock
) -> None:
    """Kafka's `validateOffsetCommit`: a consumer that assigns its own partitions (generation -1, no member id)
    commits into an unknown or Empty group; into a group with members it gets UNKNOWN_MEMBER_ID, in every
    state that has members."""
    assert groups.check_commit("never-joined", "", -1) == GroupError.NONE
    assert groups.check_commit("never-joined", "someone", -1) == GroupError.NONE
    leader, follower, generation = stable_pair(groups)
    assert groups.describe(GROUP).state == GroupState.STABLE  # type: ignore[union-attr]
    assert groups.check_commit(GROUP, "", -1) == GroupError.UNKNOWN_MEMBER_ID
    # A member that leaves out its generation is of another one.
    assert groups.check_commit(GROUP, leader, -1) == GroupError.ILLEGAL_GENERATION
    newcomer = member_of(join(groups))
    assert groups.describe(GROUP).state == GroupState.PREPARING_REBALANCE  # type: ignore[union-attr]
    assert groups.check_commit(GROUP, "", -1) == GroupError.UNKNOWN_MEMBER_ID
    assert isinstance(join(groups, leader, (("range", b"a"),)), PendingJoin)
    joined(join(groups, follower, (("range", b"b"),)))
    assert groups.describe(GROUP).state == GroupState.COMPLETING_REBALANCE  # type: ignore[union-attr]
    assert groups.check_commit(GROUP, "", -1) == GroupError.UNKNOWN_MEMBER_ID
    assert groups.leave(GROUP, [(leader, None), (follower, None), (newcomer, None)]) == [GroupError.NONE] * 3
    clock.sleep(1)
    assert groups.describe(GROUP).state == GroupState.EMPTY  # type: ignore[union-attr]
    assert groups.check_commit(GROUP, "", -1) == GroupError.NONE
    # An Empty group takes generation -1 whatever the member id; a generation of its past is a stranger's.
    assert groups.check_commit(GROUP, leader, -1) == GroupError.NONE
    assert groups.check_commit(GROUP, leader, generation + 1) == GroupError.UNKNOWN_MEMBER_ID


def test_a_group_with_members_cannot_be_deleted(groups: GroupMembership) -> None:
    leader, _, _ = stable_pair(groups)
    assert groups.delete(GROUP) == GroupError.NON_EMPTY_GROUP
    assert groups.is_active(GROUP)
    assert groups.delete("no-such-group") == GroupError.GROUP_ID_NOT_FOUND
    assert groups.group_ids() == [GROUP]
    groups.leave(GROUP, [(leader, None)])
    assert groups.delete(GROUP) == GroupError.NON_EMPTY_GROUP


def test_the_group_settings_are_the_brokers_properties_with_kafkas_defaults() -> None:
    from storage.config.broker_config import BrokerConfig

    assert MembershipConfig.of(BrokerConfig.from_properties({})) == MembershipConfig()
    configured = BrokerConfig.from_properties(
        {
            "group.min.session.timeout.ms": "1000",
            "group.max.session.timeout.ms": "90000",
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    assert MembershipConfig.of(configured) == MembershipConfig(1000, 90000, 0)


def static_pair(groups: GroupMembership) -> tuple[str, str, int]:
    """Two static members (instances i1, i2) through join and sync: (leader, follower, generation)."""
    first = joined(join(groups, protocols=(("range", b"a"),), instance="i1"))
    assert first.member_id.startswith("i1-")
    second = member_of(join(groups, protocols=(("range", b"b"),), instance="i2"))
    assert groups.heartbeat(GROUP, first.member_id, first.generation_id, "i1") == GroupError.REBALANCE_IN_PROGRESS
    leader = joined(join(groups, first.member_id, (("range", b"a"),), instance="i1"))
    follower = joined(groups.poll_join(GROUP, second))
    assert leader.leader == leader.member_id and follower.generation_id == 2
    assert groups.sync(GROUP, second, 2, {}, group_instance_id="i2") is None
    assignments = {leader.member_id: b"p0", second: b"p1"}
    assert groups.sync(GROUP, leader.member_id, 2, assignments, group_instance_id="i1") is not None
    return leader.member_id, second, 2


def test_a_static_member_back_under_a_new_id_takes_its_place_without_a_rebalance(groups: GroupMembership) -> None:
    leader, follower, generation = static_pair(groups)
    back = joined(join(groups, protocols=(("range", b"b"),), instance="i2"))
    # The same generation, leader and assignment: nobody else is disturbed.
    assert back.member_id != follower and back.member_id.startswith("i2-")
    assert (back.generation_id, back.leader, back.members, back.skip_assignment) == (generation, leader, (), False)
    assert groups.sync(GROUP, back.member_id, generation, {}, group_instance_id="i2") == SyncResult(
        GroupError.NONE, "consumer", "range", b"p1"
    )
    assert groups.heartbeat(GROUP, leader, generation, "i1") == GroupError.NONE
    # The member id it replaced is fenced when it names the instance, unknown when it does not.
    assert groups.heartbeat(GROUP, follower, generation, "i2") == GroupError.FENCED_INSTANCE_ID
    assert groups.heartbeat(GROUP, follower, generation) == GroupError.UNKNOWN_MEMBER_ID
    assert groups.check_commit(GROUP, follower, generation, "i2") == GroupError.FENCED_INSTANCE_ID
    assert groups.sync(GROUP, follower, generation, {}, group_instance_id="i2") == SyncResult(
        GroupError.FENCED_INSTANCE_ID
    )
    assert join(groups, follower, (("range", b"b"),), instance="i2") == JoinResult(
        GroupError.FENCED_INSTANCE_ID, follower
    )
    assert groups.heartbeat(GROUP, back.member_id, generation, "i9") == GroupError.UNKNOWN_MEMBER_ID
    described = groups.describe(GROUP)
    assert described is not None and described.state == GroupState.STABLE
    assert sorted((m.member_id, m.group_instance_id) for m in described.members) == sorted(
        [(leader, "i1"), (back.member_id, "i2")]
    )


def test_a_static_leader_back_on_join_group_v9_is_told_to_skip_its_assignment(groups: GroupMembership) -> None:
    _, follower, generation = static_pair(groups)
    back = joined(join(groups, protocols=(("range", b"a"),), instance="i1", skip_assignment_supported=True))
    assert (back.generation_id, back.leader, back.skip_assignment) == (generation, back.member_id, True)
    assert sorted(m.member_id for m in back.members) == sorted([back.member_id, follower])
    # Before v9 the answer names the leader it replaced, and no members.
    again = joined(join(groups, protocols=(("range", b"a"),), instance="i1"))
    assert (again.leader, again.members, again.skip_assignment) == (back.member_id, (), False)


def test_a_static_member_back_during_the_sync_phase_rebalances_again(groups: GroupMembership) -> None:
    leader, follower, generation = static_pair(groups)
    # Another protocol list whose common protocol is still range: the Stable group goes on as it is.
    other = joined(join(groups, protocols=(("roundrobin", b"b"), ("range", b"b")), instance="i2"))
    assert other.generation_id == generation
    # A third member makes a new generation; the other two join it, and nobody syncs yet.
    third = member_of(join(groups, protocols=(("range", b"c"),), instance="i3"))
    assert groups.heartbeat(GROUP, leader, generation, "i1") == GroupError.REBALANCE_IN_PROGRESS
    assert isinstance(join(groups, leader, (("range", b"a"),), instance="i1"), PendingJoin)
    joined(join(groups, other.member_id, (("range", b"b"),), instance="i2"))
    assert groups.describe(GROUP).state == GroupState.COMPLETING_REBALANCE  # type: ignore[union-attr]
    # The leader may have assigned the id i2 had: i2 back under a new id starts yet another rebalance.
    assert isinstance(join(groups, protocols=(("range", b"b"),), instance="i2"), PendingJoin)
    assert groups.describe(GROUP).state == GroupState.PREPARING_REBALANCE  # type: ignore[union-attr]
    assert groups.heartbeat(GROUP, third, generation + 1, "i3") == GroupError.REBALANCE_IN_PROGRESS
    assert follower not in {m.member_id for m in groups.describe(GROUP).members}  # type: ignore[union-attr]


def test_an_administrator_removes_a_static_member_by_its_instance_id(groups: GroupMembership) -> None:
    leader, follower, generation = static_pair(groups)
    assert groups.leave(GROUP, [("", "i2"), ("", "i9"), ("someone", "i1")]) == [
        GroupError.NONE,
        GroupError.UNKNOWN_MEMBER_ID,
        GroupError.FENCED_INSTANCE_ID,
    ]
    assert groups.heartbeat(GROUP, follower, generation, "i2") == GroupError.UNKNOWN_MEMBER_ID
    assert groups.heartbeat(GROUP, leader, generation, "i1") == GroupError.REBALANCE_IN_PROGRESS
    # Its instance id is free again: a member joining with it is a new member.
    assert isinstance(join(groups, protocols=(("range", b"b"),), instance="i2"), PendingJoin)


def test_a_wait_of_a_member_whose_instance_came_back_under_a_new_id_is_fenced(groups: GroupMembership) -> None:
    leader, follower, generation = static_pair(groups)
    third = member_of(join(groups, protocols=(("range", b"c"),), instance="i3"))
    assert isinstance(join(groups, follower, (("range", b"b"),), instance="i2"), PendingJoin)
    # A second process with the same instance id joins: it takes i2's place, and the first one's wait is fenced once.
    assert isinstance(join(groups, protocols=(("range", b"b"),), instance="i2"), PendingJoin)
    assert groups.poll_join(GROUP, follower) == JoinResult(GroupError.FENCED_INSTANCE_ID, follower)
    assert groups.poll_join(GROUP, follower) == JoinResult(GroupError.UNKNOWN_MEMBER_ID, follower)
    assert groups.heartbeat(GROUP, leader, generation, "i1") == GroupError.REBALANCE_IN_PROGRESS
    assert isinstance(groups.poll_join(GROUP, third), PendingJoin)
