"""Share group membership against Kafka 4.2's `GroupMetadataManager.shareGroupHeartbeat` and
`GroupCoordinatorService`: joining with epoch 0, the group and assignment epochs, the `simple` assignment taken at
once, leaving with epoch -1, session timeouts on a mock clock, subscription and topic changes, and every refusal
with Kafka's code and message."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import pytest

from actors.core.groups.consumer_group_api import HeartbeatRefused, TopicInfo
from actors.core.groups.group_membership import GroupError
from actors.core.shares.group_share_config import GroupShareConfig
from actors.core.shares.share_group import ShareGroups, ShareGroupState, ShareHeartbeatRequest
from storage.clock import MockClock
from storage.config.share_group_config import ShareGroupConfig

ORDERS, CLICKS = uuid.UUID(int=1), uuid.UUID(int=2)


class Topics:
    """The cluster's topics as the coordinator's `find_topics` seam reads them."""

    def __init__(self) -> None:
        self.topics = {"orders": TopicInfo("orders", ORDERS, 2), "clicks": TopicInfo("clicks", CLICKS, 1)}

    def find(self, names: Iterable[str]) -> Mapping[str, TopicInfo]:
        return {n: self.topics[n] for n in names if n in self.topics}


def _groups(clock: MockClock | None = None, **kwargs: object) -> tuple[ShareGroups, Topics, MockClock]:
    topics, clock = Topics(), clock or MockClock()
    return ShareGroups(clock, topics.find, **kwargs), topics, clock  # type: ignore[arg-type]


def _hb(member: str, epoch: int, topics: tuple[str, ...] | None = None, group: str = "g") -> ShareHeartbeatRequest:
    return ShareHeartbeatRequest(group, member, epoch, topics)


def _refused(groups: ShareGroups, request: ShareHeartbeatRequest) -> tuple[GroupError, str]:
    with pytest.raises(HeartbeatRefused) as info:
        groups.heartbeat(request)
    return info.value.error, info.value.message


def test_the_first_member_joins_and_gets_every_partition() -> None:
    """Kafka's `shareGroupHeartbeat`: epoch 0 creates the group, bumps the group epoch to 1, computes the target
    assignment and the member takes it at once (`ShareGroupAssignmentBuilder`); the interval is
    `group.share.heartbeat.interval.ms` (5000)."""
    groups, _, _ = _groups()
    result = groups.heartbeat(_hb("m1", 0, ("orders",)))
    assert (result.member_id, result.member_epoch, result.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert result.assignment == {ORDERS: frozenset({0, 1})}
    description = groups.describe("g")
    assert (description.state, description.group_epoch, description.assignment_epoch) == (ShareGroupState.STABLE, 1, 1)
    assert description.assignor_name == "simple"


def test_a_second_member_bumps_the_epoch_and_both_move_to_the_new_assignment() -> None:
    groups, _, _ = _groups()
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    second = groups.heartbeat(_hb("m2", 0, ("orders",)))
    assert second.member_epoch == 2
    first = groups.heartbeat(_hb("m1", 1))
    assert first.member_epoch == 2
    assert first.assignment is not None and second.assignment is not None
    assert first.assignment[ORDERS] | second.assignment[ORDERS] == frozenset({0, 1})
    assert not first.assignment[ORDERS] & second.assignment[ORDERS]
    unchanged = groups.heartbeat(_hb("m1", 2))
    assert (unchanged.member_epoch, unchanged.assignment) == (2, None)


def test_more_members_than_partitions_share_them() -> None:
    """KIP-932: with more consumers than partitions every member still gets a partition."""
    groups, _, _ = _groups()
    results = [groups.heartbeat(_hb(f"m{i}", 0, ("clicks",))) for i in range(3)]
    for i in range(3):
        result = groups.heartbeat(_hb(f"m{i}", results[i].member_epoch))
        assignment = result.assignment if result.assignment is not None else results[i].assignment
        assert assignment == {CLICKS: frozenset({0})}


def test_a_leave_answers_epoch_minus_one_and_bumps_the_group_epoch() -> None:
    """Kafka's `shareGroupLeave` / `shareGroupFenceMember`."""
    groups, _, _ = _groups()
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    groups.heartbeat(_hb("m2", 0, ("orders",)))
    left = groups.heartbeat(_hb("m2", -1))
    assert left.member_epoch == -1
    assert groups.describe("g").group_epoch == 3
    # m1 never took epoch 2's half: its partitions are the same again, so the answer carries none.
    stayed = groups.heartbeat(_hb("m1", 1))
    assert (stayed.member_epoch, stayed.assignment) == (3, None)
    assert groups.describe("g").members[0].assignment == {ORDERS: frozenset({0, 1})}
    groups.heartbeat(_hb("m1", -1))
    assert groups.describe("g").state is ShareGroupState.EMPTY


def test_a_silent_member_is_removed_after_the_session_timeout() -> None:
    """Kafka's share group session timer (`group.share.session.timeout.ms`, 45000): the member is fenced and its
    next heartbeat is UNKNOWN_MEMBER_ID."""
    groups, _, clock = _groups()
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    groups.heartbeat(_hb("m2", 0, ("orders",)))
    assert groups.next_deadline_ms() == clock.milliseconds() + 45000
    clock.sleep(44999)
    groups.heartbeat(_hb("m1", 1))
    clock.sleep(1)
    groups.expire_sessions()
    assert [m.member_id for m in groups.describe("g").members] == ["m1"]
    assert _refused(groups, _hb("m2", 2))[0] is GroupError.UNKNOWN_MEMBER_ID


def test_a_subscription_change_and_new_partitions_bump_the_group_epoch() -> None:
    groups, topics, _ = _groups()
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    changed = groups.heartbeat(_hb("m1", 1, ("orders", "clicks")))
    assert changed.member_epoch == 2
    assert changed.assignment == {ORDERS: frozenset({0, 1}), CLICKS: frozenset({0})}
    topics.topics["clicks"] = TopicInfo("clicks", CLICKS, 3)
    grown = groups.heartbeat(_hb("m1", 2))
    assert (grown.member_epoch, grown.assignment) == (3, {ORDERS: frozenset({0, 1}), CLICKS: frozenset({0, 1, 2})})


def test_a_topic_that_does_not_exist_yet_is_assigned_once_it_does() -> None:
    groups, topics, _ = _groups()
    joined = groups.heartbeat(_hb("m1", 0, ("later",)))
    assert joined.assignment == {}
    topics.topics["later"] = TopicInfo("later", uuid.UUID(int=3), 1)
    assert groups.heartbeat(_hb("m1", 1)).assignment == {uuid.UUID(int=3): frozenset({0})}


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ShareHeartbeatRequest("g", "", 0, ("orders",)), "MemberId can't be empty."),
        (ShareHeartbeatRequest("", "m1", 0, ("orders",)), "GroupId can't be empty."),
        (ShareHeartbeatRequest("g", "m1", 0, ("orders",), rack_id=""), "RackId can't be empty."),
        (ShareHeartbeatRequest("g", "m1", 0, None), "SubscribedTopicNames must be set in first request."),
        (ShareHeartbeatRequest("g", "m1", 0, ()), "SubscribedTopicNames must be set in first request."),
        (ShareHeartbeatRequest("g", "m1", -2), "MemberEpoch is invalid."),
    ],
)
def test_malformed_heartbeats_are_invalid_request(request_: ShareHeartbeatRequest, message: str) -> None:
    """Kafka 4.2's `GroupCoordinatorService.throwIfShareGroupHeartbeatRequestIsInvalid`, messages verbatim."""
    groups, _, _ = _groups()
    assert _refused(groups, request_) == (GroupError.INVALID_REQUEST, message)
    assert groups.group_ids() == []


def test_unknown_groups_and_members_are_refused() -> None:
    """Kafka's `getOrMaybeCreatePersistedShareGroup` (GROUP_ID_NOT_FOUND) and `getOrMaybeCreateMember`
    (UNKNOWN_MEMBER_ID), for heartbeats and leaves alike."""
    groups, _, _ = _groups()
    assert _refused(groups, _hb("m1", 1))[0] is GroupError.GROUP_ID_NOT_FOUND
    assert _refused(groups, _hb("m1", -1))[0] is GroupError.GROUP_ID_NOT_FOUND
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    assert _refused(groups, _hb("m2", 1))[0] is GroupError.UNKNOWN_MEMBER_ID
    assert _refused(groups, _hb("m2", -1))[0] is GroupError.UNKNOWN_MEMBER_ID


def test_epochs_other_than_the_current_or_previous_are_fenced() -> None:
    """Kafka's `throwIfShareGroupMemberEpochIsInvalid`: greater is fenced, smaller is fenced unless it is the
    previous epoch (the answer that bumped it may have been lost); epoch 0 rejoins."""
    groups, _, _ = _groups()
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    groups.heartbeat(_hb("m2", 0, ("orders",)))
    assert groups.heartbeat(_hb("m1", 1)).member_epoch == 2
    error, message = _refused(groups, _hb("m1", 3))
    assert error is GroupError.FENCED_MEMBER_EPOCH and "greater member epoch (3)" in message
    assert groups.heartbeat(_hb("m1", 1)).member_epoch == 2
    groups.heartbeat(_hb("m3", 0, ("orders",)))
    groups.heartbeat(_hb("m1", 2))
    error, message = _refused(groups, _hb("m1", 1))
    assert error is GroupError.FENCED_MEMBER_EPOCH and "smaller member epoch (1)" in message
    rejoined = groups.heartbeat(_hb("m1", 0, ("orders",)))
    assert rejoined.assignment is not None


def test_a_full_group_takes_no_new_member() -> None:
    """Kafka's `throwIfShareGroupIsFull`: `group.share.max.size` members, GROUP_MAX_SIZE_REACHED."""
    groups, _, _ = _groups(config=ShareGroupConfig(group_share_max_size=10))
    for i in range(10):
        groups.heartbeat(_hb(f"m{i}", 0, ("orders",)))
    assert _refused(groups, _hb("m10", 0, ("orders",)))[0] is GroupError.GROUP_MAX_SIZE_REACHED
    assert groups.heartbeat(_hb("m0", 0, ("orders",))).member_id == "m0"


def test_the_groups_own_settings_apply() -> None:
    """Kafka's `shareGroupHeartbeatIntervalMs` / `shareGroupSessionTimeoutMs` read the group's config first."""
    clock = MockClock()
    configs = {"g": GroupShareConfig(share_heartbeat_interval_ms=8000, share_session_timeout_ms=50000)}
    groups, _, _ = _groups(clock, group_configs=lambda gid: configs.get(gid, GroupShareConfig()))
    assert groups.heartbeat(_hb("m1", 0, ("orders",))).heartbeat_interval_ms == 8000
    assert groups.heartbeat(_hb("m1", 0, ("orders",), group="other")).heartbeat_interval_ms == 5000
    clock.sleep(46000)
    groups.expire_sessions()
    assert [m.member_id for m in groups.describe("g").members] == ["m1"]
    assert groups.describe("other").state is ShareGroupState.EMPTY


def test_an_unknown_group_is_described_dead() -> None:
    groups, _, _ = _groups()
    assert groups.describe("nope").state is ShareGroupState.DEAD


def test_offsets_change_only_in_a_group_without_members_and_alter_creates_the_group() -> None:
    """Kafka 4.2's AlterShareGroupOffsets and DeleteShareGroupOffsets: NON_EMPTY_GROUP while a member is in the
    group, allowed once it left; an unknown group is allowed, and made (Empty) only by Alter (`create`)."""
    groups, _, _ = _groups()
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    assert groups.admit_offsets_change("g", create=True) == GroupError.NON_EMPTY_GROUP
    assert groups.admit_offsets_change("g", create=False) == GroupError.NON_EMPTY_GROUP
    groups.heartbeat(_hb("m1", -1))
    assert groups.admit_offsets_change("g", create=False) == GroupError.NONE
    assert groups.admit_offsets_change("new", create=False) == GroupError.NONE
    assert not groups.has_group("new")
    assert groups.admit_offsets_change("new", create=True) == GroupError.NONE
    assert groups.describe("new").state == ShareGroupState.EMPTY
    assert groups.group_ids() == ["g", "new"]


def test_a_member_whose_session_timed_out_leaves_the_group_empty_for_offset_changes() -> None:
    groups, _, clock = _groups()
    groups.heartbeat(_hb("m1", 0, ("orders",)))
    clock.sleep(groups.config.group_share_session_timeout_ms)
    assert groups.admit_offsets_change("g", create=True) == GroupError.NONE


def test_only_an_empty_group_is_deleted() -> None:
    groups, _, _ = _groups()
    assert groups.delete("g") == GroupError.GROUP_ID_NOT_FOUND
    groups.heartbeat(_hb("m1", 0, ("t",)))
    assert groups.delete("g") == GroupError.NON_EMPTY_GROUP
    assert groups.has_group("g")
    groups.heartbeat(_hb("m1", -1))
    assert groups.delete("g") == GroupError.NONE
    assert not groups.has_group("g") and groups.group_ids() == []
