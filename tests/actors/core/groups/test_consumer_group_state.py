"""KIP-848's group state machine without Ray, on a `MockClock`, against Kafka's rules (KIP-848 and Kafka's
`GroupMetadataManager` / `CurrentAssignmentBuilder`): epochs, incremental reconciliation (revoke first, then
assign what others released), fencing, session and rebalance timeouts, subscription changes and regexes, the
commit and fetch checks, and Kafka's error answers and messages."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import pytest

from actors.core.groups.consumer_group_api import (
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
    TopicInfo,
)
from actors.core.groups.consumer_group_state import ConsumerGroups
from actors.core.groups.group_membership import GroupError
from storage.clock import MockClock
from storage.config.group_protocol_config import GroupProtocolConfig

GROUP = "g"
ORDERS = TopicInfo("orders", uuid.UUID(int=7), 4)
CONFIG = GroupProtocolConfig()


class Topics:
    """The cluster's topics as the state machine looks them up; tests add and grow topics."""

    def __init__(self, *topics: TopicInfo) -> None:
        self.topics = {topic.name: topic for topic in topics}

    def find(self, names: Iterable[str]) -> Mapping[str, TopicInfo]:
        return {name: self.topics[name] for name in names if name in self.topics}

    def names(self) -> list[str]:
        return list(self.topics)


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def topics() -> Topics:
    return Topics(ORDERS)


@pytest.fixture
def groups(clock: MockClock, topics: Topics) -> ConsumerGroups:
    return ConsumerGroups(clock, CONFIG, topics.find, topics.names)


def join(
    groups: ConsumerGroups, member: str, topics: tuple[str, ...] = ("orders",), **fields: object
) -> HeartbeatResult:
    request = HeartbeatRequest(
        GROUP,
        member,
        0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=topics,
        owned={},
        **fields,  # type: ignore[arg-type]
    )
    return groups.heartbeat(request)


def beat(
    groups: ConsumerGroups, member: str, epoch: int, owned: dict[uuid.UUID, frozenset[int]] | None
) -> HeartbeatResult:
    return groups.heartbeat(HeartbeatRequest(GROUP, member, epoch, owned=owned))


def partitions(result: HeartbeatResult) -> set[int]:
    assert result.assignment is not None
    return set(result.assignment.get(ORDERS.topic_id, frozenset()))


def test_a_second_member_gets_its_share_only_after_the_first_revoked_it(groups: ConsumerGroups) -> None:
    first = join(groups, "m1")
    assert (first.error, first.member_epoch, partitions(first)) == (GroupError.NONE, 1, {0, 1, 2, 3})
    assert first.heartbeat_interval_ms == CONFIG.group_consumer_heartbeat_interval_ms
    second = join(groups, "m2")
    # Epoch 2 is the group's, but everything is still m1's: m2 waits for it with nothing.
    assert (second.member_epoch, partitions(second)) == (2, set())
    revoke = beat(groups, "m1", 1, {ORDERS.topic_id: frozenset({0, 1, 2, 3})})
    kept = partitions(revoke)
    assert revoke.member_epoch == 1 and len(kept) == 2
    # Still listing the revoked partitions: nothing moves.
    assert beat(groups, "m1", 1, {ORDERS.topic_id: frozenset({0, 1, 2, 3})}).assignment is None
    assert beat(groups, "m2", 2, {}).assignment is None
    done = beat(groups, "m1", 1, {ORDERS.topic_id: frozenset(kept)})
    assert (done.member_epoch, done.assignment) == (2, None)
    released = beat(groups, "m2", 2, {})
    assert partitions(released) == {0, 1, 2, 3} - kept
    description = groups.describe(GROUP)
    assert description is not None
    assert (description.state, description.group_epoch, description.assignment_epoch) == (
        ConsumerGroupState.STABLE,
        2,
        2,
    )


def test_epochs_are_fenced_but_a_lost_answer_is_forgiven(groups: ConsumerGroups) -> None:
    join(groups, "m1")
    ahead = beat(groups, "m1", 5, {})
    assert ahead.error == GroupError.FENCED_MEMBER_EPOCH
    assert ahead.message is not None and "greater member epoch (5)" in ahead.message
    join(groups, "m2")
    m1 = {ORDERS.topic_id: frozenset({0, 1, 2, 3})}
    kept = partitions(beat(groups, "m1", 1, m1))
    assert beat(groups, "m1", 1, {ORDERS.topic_id: frozenset(kept)}).member_epoch == 2
    # The answer with epoch 2 was lost: epoch 1 with partitions within the assignment is accepted...
    assert beat(groups, "m1", 1, {ORDERS.topic_id: frozenset(kept)}).error == GroupError.NONE
    # ...but not with partitions it no longer has.
    behind = beat(groups, "m1", 1, m1)
    assert behind.error == GroupError.FENCED_MEMBER_EPOCH and "smaller member epoch (1)" in (behind.message or "")


def test_unknown_groups_members_and_bad_requests_get_kafkas_answers(groups: ConsumerGroups) -> None:
    assert beat(groups, "m1", 1, None).error == GroupError.GROUP_ID_NOT_FOUND
    join(groups, "m1")
    unknown = beat(groups, "nobody", 1, None)
    assert (unknown.error, unknown.message) == (
        GroupError.UNKNOWN_MEMBER_ID,
        "Member nobody is not a member of group g.",
    )
    cases = [
        (HeartbeatRequest(GROUP, "", 0), "MemberId can't be empty."),
        (HeartbeatRequest("", "m", 0), "GroupId can't be empty."),
        (HeartbeatRequest(GROUP, "m", 0, owned={}), "RebalanceTimeoutMs must be provided in first request."),
        (
            HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",)),
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=1, owned={}),
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
        ),
        (HeartbeatRequest(GROUP, "m", -3), "MemberEpoch is invalid."),
        (HeartbeatRequest(GROUP, "m", -2), "InstanceId can't be null."),
    ]
    for request, message in cases:
        assert (groups.heartbeat(request).error, groups.heartbeat(request).message) == (
            GroupError.INVALID_REQUEST,
            message,
        )
    # Version 0 lets the coordinator name a joining member.
    named = groups.heartbeat(
        HeartbeatRequest(
            GROUP, "", 0, rebalance_timeout_ms=1, subscribed_topic_names=("orders",), owned={}, api_version=0
        )
    )
    assert named.error == GroupError.NONE and named.member_id
    assignor = join(groups, "m3", server_assignor="sticky")
    assert (assignor.error, assignor.message) == (
        GroupError.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
    )
    regex = groups.heartbeat(
        HeartbeatRequest(GROUP, "m4", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(?=x)", owned={})
    )
    assert regex.error == GroupError.INVALID_REGULAR_EXPRESSION
    assert (regex.message or "").startswith("SubscribedTopicRegex `(?=x)` is not a valid regular expression")
    description = groups.describe(GROUP)
    assert description is not None and {m.member_id for m in description.members} == {"m1", named.member_id}


def test_a_silent_member_leaves_at_its_session_timeout(groups: ConsumerGroups, clock: MockClock) -> None:
    join(groups, "m1")
    join(groups, "m2")
    kept = partitions(beat(groups, "m1", 1, {ORDERS.topic_id: frozenset({0, 1, 2, 3})}))
    beat(groups, "m1", 1, {ORDERS.topic_id: frozenset(kept)})
    m2 = partitions(beat(groups, "m2", 2, {}))
    for _ in range(8):
        clock.sleep(5_000)
        assert beat(groups, "m1", 2, {ORDERS.topic_id: frozenset(kept)}).assignment is None
    clock.sleep(10_000)
    # m2 was silent for 50 s > the 45 s session: gone (the group's epoch 3), and m1 takes its partitions.
    taken = beat(groups, "m1", 2, {ORDERS.topic_id: frozenset(kept)})
    assert taken.member_epoch == 3 and partitions(taken) == kept | m2
    assert beat(groups, "m2", 2, {}).error == GroupError.UNKNOWN_MEMBER_ID


def test_a_static_member_gone_for_now_keeps_its_partitions_until_its_session_ends(
    groups: ConsumerGroups, clock: MockClock
) -> None:
    join(groups, "m1", instance_id="i1")
    join(groups, "m2")
    kept = partitions(beat(groups, "m1", 1, {ORDERS.topic_id: frozenset({0, 1, 2, 3})}))
    beat(groups, "m1", 1, {ORDERS.topic_id: frozenset(kept)})
    m2 = partitions(beat(groups, "m2", 2, {}))
    left = groups.heartbeat(HeartbeatRequest(GROUP, "m1", -2, instance_id="i1"))
    assert (left.error, left.member_id, left.member_epoch) == (GroupError.NONE, "m1", -2)
    # While its session lasts m1's partitions stay its own: m2 is not given them and the group's epoch stays.
    for _ in range(8):
        clock.sleep(5_000)
        assert beat(groups, "m2", 2, {ORDERS.topic_id: frozenset(m2)}).assignment is None
    description = groups.describe(GROUP)
    assert description is not None and description.group_epoch == 2
    assert sorted((m.instance_id or "", m.member_epoch) for m in description.members) == [("", 2), ("i1", -2)]
    clock.sleep(10_000)
    # 50 s after the leave: m1 is gone (epoch 3) and m2 takes everything.
    taken = beat(groups, "m2", 2, {ORDERS.topic_id: frozenset(m2)})
    assert taken.member_epoch == 3 and partitions(taken) == kept | m2
    assert join(groups, "m3", instance_id="i1").member_epoch == 4


def test_a_static_member_returning_under_a_new_id_takes_its_place_without_a_rebalance(groups: ConsumerGroups) -> None:
    first = join(groups, "m1", instance_id="i1")
    beat(groups, "m1", 1, {ORDERS.topic_id: frozenset(partitions(first))})
    taken = join(groups, "m9", instance_id="i1")
    assert (taken.error, taken.member_id) == (GroupError.UNRELEASED_INSTANCE_ID, None)
    groups.heartbeat(HeartbeatRequest(GROUP, "m1", -2, instance_id="i1"))
    back = join(groups, "m9", instance_id="i1")
    assert (back.error, back.member_epoch, partitions(back)) == (GroupError.NONE, 1, {0, 1, 2, 3})
    description = groups.describe(GROUP)
    assert description is not None and description.group_epoch == 1
    assert [(m.member_id, m.instance_id) for m in description.members] == [("m9", "i1")]
    fenced = groups.heartbeat(HeartbeatRequest(GROUP, "m1", 1, instance_id="i1"))
    assert fenced.error == GroupError.FENCED_INSTANCE_ID
    unknown = groups.heartbeat(HeartbeatRequest(GROUP, "m9", 1, instance_id="i2"))
    assert (unknown.error, unknown.message) == (GroupError.UNKNOWN_MEMBER_ID, "Instance id i2 is unknown.")
    assert groups.heartbeat(HeartbeatRequest(GROUP, "m9", -1, instance_id="i1")).member_epoch == -1
    assert groups.describe(GROUP).members == ()  # type: ignore[union-attr]


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_removed(
    groups: ConsumerGroups, clock: MockClock
) -> None:
    join(groups, "m1")
    join(groups, "m2")
    everything = {ORDERS.topic_id: frozenset({0, 1, 2, 3})}
    beat(groups, "m1", 1, everything)
    for _ in range(5):
        clock.sleep(5_000)
        assert beat(groups, "m1", 1, everything).member_epoch == 1
        assert beat(groups, "m2", 2, {}).assignment is None
    clock.sleep(10_000)
    # 35 s > its 30 s rebalance timeout without revoking: removed, and m2 gets all four.
    assert beat(groups, "m1", 1, everything).error == GroupError.UNKNOWN_MEMBER_ID
    assert partitions(beat(groups, "m2", 2, {})) == {0, 1, 2, 3}


def test_leaving_and_rejoining(groups: ConsumerGroups) -> None:
    join(groups, "m1")
    join(groups, "m2")
    left = groups.heartbeat(HeartbeatRequest(GROUP, "m2", -1))
    assert (left.error, left.member_epoch) == (GroupError.NONE, -1)
    assert beat(groups, "m1", 1, {ORDERS.topic_id: frozenset({0, 1, 2, 3})}).member_epoch == 3
    # A known member joining again starts over: it had everything, gets everything back at the current epoch.
    again = join(groups, "m1")
    assert (again.member_epoch, partitions(again)) == (3, {0, 1, 2, 3})
    groups.heartbeat(HeartbeatRequest(GROUP, "m1", -1))
    description = groups.describe(GROUP)
    assert description is not None and description.state == ConsumerGroupState.EMPTY
    assert groups.delete(GROUP) == GroupError.NONE and groups.describe(GROUP) is None


def test_new_partitions_and_regex_subscriptions_are_assigned(
    groups: ConsumerGroups, topics: Topics, clock: MockClock
) -> None:
    first = groups.heartbeat(
        HeartbeatRequest(GROUP, "m1", 0, rebalance_timeout_ms=1, subscribed_topic_regex="ord.*", owned={})
    )
    assert partitions(first) == {0, 1, 2, 3}
    topics.topics["orders"] = TopicInfo("orders", ORDERS.topic_id, 6)
    payments = TopicInfo("order-payments", uuid.UUID(int=9), 1)
    topics.topics[payments.name] = payments
    topics.topics["refunds"] = TopicInfo("refunds", uuid.UUID(int=10), 1)
    clock.sleep(1_000)
    grown = beat(groups, "m1", 1, {ORDERS.topic_id: frozenset({0, 1, 2, 3})})
    assert grown.member_epoch == 2 and grown.assignment == {
        ORDERS.topic_id: frozenset(range(6)),
        payments.topic_id: frozenset({0}),
    }


def test_members_may_ask_for_the_range_assignor(groups: ConsumerGroups) -> None:
    join(groups, "m1", server_assignor="range")
    join(groups, "m2", server_assignor="range")
    description = groups.describe(GROUP)
    assert description is not None and description.assignor_name == "range"
    target = {m.member_id: m.target_assignment[ORDERS.topic_id] for m in description.members}
    assert target == {"m1": frozenset({0, 1}), "m2": frozenset({2, 3})}


def test_commits_and_fetches_are_checked_against_the_member_epoch(groups: ConsumerGroups) -> None:
    join(groups, "m1")
    check = groups.check_commit
    assert check(GROUP, "m1", 1, transactional=False, api_version=9) == GroupError.NONE
    assert check(GROUP, "m1", 0, transactional=False, api_version=9) == GroupError.STALE_MEMBER_EPOCH
    assert check(GROUP, "m1", 1, transactional=False, api_version=8) == GroupError.UNSUPPORTED_VERSION
    assert check(GROUP, "m1", 1, transactional=True, api_version=3) == GroupError.NONE
    assert check(GROUP, "x", 1, transactional=False, api_version=9) == GroupError.UNKNOWN_MEMBER_ID
    assert check(GROUP, "", -1, transactional=False, api_version=9) == GroupError.UNKNOWN_MEMBER_ID
    assert groups.check_fetch(GROUP, None, -1) == GroupError.NONE
    assert groups.check_fetch(GROUP, "m1", 1) == GroupError.NONE
    assert groups.check_fetch(GROUP, "m1", 2) == GroupError.STALE_MEMBER_EPOCH
    groups.heartbeat(HeartbeatRequest(GROUP, "m1", -1))
    assert check(GROUP, "", -1, transactional=False, api_version=9) == GroupError.NONE
