"""Share groups' membership as the group coordinator keeps it, driven by ShareGroupHeartbeat (76), as Kafka 4.2's
`GroupMetadataManager.shareGroupHeartbeat` and `GroupCoordinatorService` serve it.

A group has a *group epoch*, bumped whenever what its assignment depends on changes: a member joins, leaves or is
removed, a member's subscription changes, or a subscribed topic appears, goes or gains partitions (the group's
subscription metadata, computed again at every heartbeat). At the next heartbeat after a bump the `simple` assignor
(`share_assignor`) computes every member's target assignment and the *assignment epoch* becomes the group epoch.
Share groups need no revocation (a partition may be shared): a member takes its target at its next heartbeat and
its member epoch becomes the assignment epoch (Kafka's `ShareGroupAssignmentBuilder`).

A heartbeat (Kafka's checks, in order; each refusal is a `HeartbeatRefused` with Kafka's code and message and changes
nothing):
- INVALID_REQUEST when the member id, the group id or a given rack id is empty, when epoch 0 names no subscribed
  topics, or when the epoch is below -1 (GroupCoordinatorService's `throwIfShareGroupHeartbeatRequestIsInvalid`;
  Kafka 4.2's clients make their own member ids);
- epoch -1 leaves: GROUP_ID_NOT_FOUND for an unknown group, UNKNOWN_MEMBER_ID for an unknown member, else the member
  is removed, the group epoch bumped, and the answer carries epoch -1;
- epoch 0 joins (creating the group); any other epoch needs the group (GROUP_ID_NOT_FOUND); a group of
  `group.share.max.size` members takes no new one (GROUP_MAX_SIZE_REACHED, checked first, as Kafka's
  `throwIfShareGroupIsFull`); any epoch but 0 needs the member (UNKNOWN_MEMBER_ID);
- an epoch above the member's, or below it other than its previous epoch (whose answer may have been lost), is
  FENCED_MEMBER_EPOCH; epoch 0 from a known member is a rejoin and is not checked.
The answer has the member's epoch, the heartbeat interval (the group's `share.heartbeat.interval.ms`, else
`group.share.heartbeat.interval.ms`) and the assignment when the request's epoch was 0 or the assignment changed.

Time moves only through the injected clock: every call first removes the members whose session timeout
(`share.session.timeout.ms`, else `group.share.session.timeout.ms`) passed without a heartbeat, bumping the group
epoch, as Kafka's session timer does. A group is Empty without members and Stable with any.

Not served yet: the share coordinator's state initialization gating the assignment (Kafka 4.2 assigns a partition
only once its share-group state is initialized: the `assignable` seam), regex subscriptions (share groups have
none), rack awareness, and keeping membership across a coordinator restart (members rejoin with epoch 0).

Seams: the clock and `find_topics(names)`, the id and partition count of each named topic that exists.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from actors.core.groups.assignors import Assignment
from actors.core.groups.consumer_group_api import JOIN_EPOCH, LEAVE_EPOCH, HeartbeatRefused, TopicInfo
from actors.core.groups.group_membership import GroupError
from actors.core.shares.group_share_config import GroupShareConfig, ResolvedShareConfig
from actors.core.shares.share_assignor import SIMPLE_ASSIGNOR, simple_assign
from storage.clock import Clock
from storage.config.share_group_config import ShareGroupConfig

SHARE_GROUP_TYPE = "share"


class ShareGroupState(enum.Enum):
    """Kafka's share group states, valued as ShareGroupDescribe and ListGroups spell them."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    """A ShareGroupHeartbeat's fields (None: unchanged since the member's last heartbeat, as on the wire)."""

    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    """A ShareGroupHeartbeat's answer; `assignment` is None when it did not change."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class ShareHeartbeatAnswer:
    """A ShareGroupHeartbeat's outcome as the coordinator hands it over: the result, or the refusal's error and
    Kafka's message (`result` None)."""

    error: GroupError
    message: str | None
    result: ShareHeartbeatResult | None


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    """One member as ShareGroupDescribe shows it."""

    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """One share group as ShareGroupDescribe shows it."""

    group_id: str
    state: ShareGroupState
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[ShareMemberDescription, ...]


@dataclass(slots=True)
class _Member:
    member_id: str
    member_epoch: int = JOIN_EPOCH
    previous_member_epoch: int = JOIN_EPOCH
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assignment: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0


@dataclass(slots=True)
class _Group:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    subscription_metadata: dict[str, TopicInfo] = field(default_factory=dict)


class ShareGroups:
    """Every share group of one group coordinator (see the module docstring for the rules).

    `group_configs(group_id)` gives a group's own settings (its GROUP config resource), checked against `config`
    at each use; `assignable(topic_id, partition)` says whether the group may be given a partition yet.
    """

    def __init__(
        self,
        clock: Clock,
        find_topics: Callable[[Iterable[str]], Mapping[str, TopicInfo]],
        config: ShareGroupConfig | None = None,
        *,
        group_configs: Callable[[str], GroupShareConfig] | None = None,
        assignable: Callable[[uuid.UUID, int], bool] | None = None,
    ) -> None:
        self._clock = clock
        self._find_topics = find_topics
        self.config = config or ShareGroupConfig()
        self._group_configs = group_configs or (lambda _group_id: GroupShareConfig())
        self._assignable = assignable
        self._groups: dict[str, _Group] = {}

    def settings(self, group_id: str) -> ResolvedShareConfig:
        """What the group runs with: its own settings within the broker's bounds, else the broker's."""
        return self._group_configs(group_id).resolve(self.config)

    def heartbeat(self, request: ShareHeartbeatRequest) -> ShareHeartbeatResult:
        """Answers one ShareGroupHeartbeat, or raises `HeartbeatRefused` (see the module docstring)."""
        self.expire_sessions()
        _validate(request)
        if request.member_epoch == LEAVE_EPOCH:
            return self._leave(request)
        group = self._groups.get(request.group_id)
        if group is None and request.member_epoch != JOIN_EPOCH:
            raise HeartbeatRefused(GroupError.GROUP_ID_NOT_FOUND, f"Group {request.group_id} not found.")
        group = group or _Group(request.group_id)
        member = group.members.get(request.member_id)
        if member is None and len(group.members) >= self.config.group_share_max_size:
            raise HeartbeatRefused(
                GroupError.GROUP_MAX_SIZE_REACHED,
                f"The share group has reached its maximum capacity of {self.config.group_share_max_size} members.",
            )
        if member is None and request.member_epoch != JOIN_EPOCH:
            raise HeartbeatRefused(
                GroupError.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of group {request.group_id}."
            )
        if member is not None and request.member_epoch != JOIN_EPOCH:
            _check_epoch(member, request.member_epoch)
        settings = self.settings(request.group_id)
        self._groups[group.group_id] = group
        is_new = member is None
        member = member or _Member(request.member_id)
        group.members[member.member_id] = member
        old_assignment = member.assignment
        bump = is_new
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(set(request.subscribed_topic_names)))
            bump = bump or names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_deadline_ms = self._clock.milliseconds() + settings.session_timeout_ms
        metadata = self._subscription_metadata(group)
        if bump or metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
            member.assignment = group.targets.get(member.member_id, {})
        changed = member.assignment != old_assignment
        return ShareHeartbeatResult(
            member.member_id,
            member.member_epoch,
            settings.heartbeat_interval_ms,
            member.assignment if request.member_epoch == JOIN_EPOCH or changed else None,
        )

    def answer(self, request: ShareHeartbeatRequest) -> ShareHeartbeatAnswer:
        """`heartbeat`'s result, or its refusal, as a value."""
        try:
            return ShareHeartbeatAnswer(GroupError.NONE, None, self.heartbeat(request))
        except HeartbeatRefused as refused:
            return ShareHeartbeatAnswer(refused.error, refused.message, None)

    def has_group(self, group_id: str) -> bool:
        """Whether `group_id` is a share group here."""
        return group_id in self._groups

    def admit_offsets_change(self, group_id: str, create: bool) -> GroupError:
        """Whether AlterShareGroupOffsets (`create`) or DeleteShareGroupOffsets may change the group's share-group
        state, as Kafka 4.2's group coordinator decides: NON_EMPTY_GROUP while the group has members; an unknown
        group is made, Empty, when `create` (Kafka's AlterShareGroupOffsets creates it)."""
        self.expire_sessions()
        group = self._groups.get(group_id)
        if group is None:
            if create:
                self._groups[group_id] = _Group(group_id)
            return GroupError.NONE
        return GroupError.NON_EMPTY_GROUP if group.members else GroupError.NONE

    def delete(self, group_id: str) -> GroupError:
        """Forgets an Empty group (DeleteGroups): NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND if it is
        unknown."""
        self.expire_sessions()
        group = self._groups.get(group_id)
        if group is None:
            return GroupError.GROUP_ID_NOT_FOUND
        if group.members:
            return GroupError.NON_EMPTY_GROUP
        del self._groups[group_id]
        return GroupError.NONE

    def expire_sessions(self) -> None:
        """Removes the members whose session timed out (Kafka's session timer), bumping their groups' epochs."""
        now_ms = self._clock.milliseconds()
        for group in self._groups.values():
            expired = [m for m in group.members.values() if m.session_deadline_ms <= now_ms]
            for member in expired:
                self._remove(group, member)

    def next_deadline_ms(self) -> int | None:
        """When the next session times out, for a timer to call `expire_sessions`."""
        deadlines = [m.session_deadline_ms for g in self._groups.values() for m in g.members.values()]
        return min(deadlines) if deadlines else None

    def describe(self, group_id: str) -> ShareGroupDescription:
        """The group as ShareGroupDescribe shows it; Dead for a group that does not exist."""
        self.expire_sessions()
        group = self._groups.get(group_id)
        if group is None:
            return ShareGroupDescription(group_id, ShareGroupState.DEAD, 0, 0, SIMPLE_ASSIGNOR, ())
        members = tuple(
            ShareMemberDescription(
                m.member_id,
                m.rack_id,
                m.member_epoch,
                m.client_id,
                m.client_host,
                m.subscribed_topic_names,
                m.assignment,
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        )
        state = ShareGroupState.STABLE if group.members else ShareGroupState.EMPTY
        return ShareGroupDescription(
            group_id, state, group.group_epoch, group.assignment_epoch, SIMPLE_ASSIGNOR, members
        )

    def group_ids(self) -> list[str]:
        """Every share group's id (ListGroups with the share type)."""
        return sorted(self._groups)

    # --- internals -----------------------------------------------------------------------------------------

    def _leave(self, request: ShareHeartbeatRequest) -> ShareHeartbeatResult:
        group = self._groups.get(request.group_id)
        if group is None:
            raise HeartbeatRefused(GroupError.GROUP_ID_NOT_FOUND, f"Group {request.group_id} not found.")
        member = group.members.get(request.member_id)
        if member is None:
            raise HeartbeatRefused(
                GroupError.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of group {request.group_id}."
            )
        self._remove(group, member)
        return ShareHeartbeatResult(
            request.member_id, LEAVE_EPOCH, self.settings(request.group_id).heartbeat_interval_ms
        )

    def _remove(self, group: _Group, member: _Member) -> None:
        """Kafka's `shareGroupFenceMember`: the member, its target and its assignment go; the epoch is bumped."""
        del group.members[member.member_id]
        group.targets.pop(member.member_id, None)
        group.subscription_metadata = self._subscription_metadata(group)
        group.group_epoch += 1

    def _subscription_metadata(self, group: _Group) -> dict[str, TopicInfo]:
        names = {name for m in group.members.values() for name in m.subscribed_topic_names}
        return dict(self._find_topics(sorted(names))) if names else {}

    def _assign(self, group: _Group) -> None:
        metadata = group.subscription_metadata
        subscriptions = {
            m.member_id: frozenset(metadata[n].topic_id for n in m.subscribed_topic_names if n in metadata)
            for m in group.members.values()
        }
        counts = {info.topic_id: info.partitions for info in metadata.values()}
        group.targets = simple_assign(subscriptions, counts, group.targets, self._assignable)
        group.assignment_epoch = group.group_epoch


def _validate(request: ShareHeartbeatRequest) -> None:
    """Kafka 4.2's `throwIfShareGroupHeartbeatRequestIsInvalid`, in its order and with its messages."""
    if not request.member_id:
        raise HeartbeatRefused(GroupError.INVALID_REQUEST, "MemberId can't be empty.")
    if not request.group_id:
        raise HeartbeatRefused(GroupError.INVALID_REQUEST, "GroupId can't be empty.")
    if request.rack_id is not None and not request.rack_id:
        raise HeartbeatRefused(GroupError.INVALID_REQUEST, "RackId can't be empty.")
    if request.member_epoch == JOIN_EPOCH:
        if not request.subscribed_topic_names:
            raise HeartbeatRefused(GroupError.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    elif request.member_epoch < LEAVE_EPOCH:
        raise HeartbeatRefused(GroupError.INVALID_REQUEST, "MemberEpoch is invalid.")


def _check_epoch(member: _Member, epoch: int) -> None:
    """Kafka's `throwIfShareGroupMemberEpochIsInvalid`."""
    if epoch > member.member_epoch:
        raise HeartbeatRefused(
            GroupError.FENCED_MEMBER_EPOCH,
            f"The share group member has a greater member epoch ({epoch}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if epoch < member.member_epoch and epoch != member.previous_member_epoch:
        raise HeartbeatRefused(
            GroupError.FENCED_MEMBER_EPOCH,
            f"The share group member has a smaller member epoch ({epoch}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
