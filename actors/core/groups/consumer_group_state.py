"""Kafka's consumer group protocol (KIP-848) as a state machine: server-side assignment, member epochs and
incremental reconciliation, driven by ConsumerGroupHeartbeat.

A group has a *group epoch*, bumped whenever what the assignment depends on changes: a member joins, leaves, is
removed, or changes its subscription, or a subscribed topic appears, goes or gains partitions (the group's
*subscription metadata*, read again at most every `METADATA_REFRESH_MS` and at every subscription change). At the
next heartbeat after a bump, the group's assignor (`actors.core.groups.assignors`; the one most members ask for,
else the first of `group.consumer.assignors`) computes the *target assignment* of every member, and the
*assignment epoch* becomes the group epoch.

Each member moves toward its target on its own heartbeats (Kafka's `CurrentAssignmentBuilder`), never waiting for
the others: partitions it owns outside its target are revoked first (state UNREVOKED_PARTITIONS, its epoch
unchanged until its heartbeat no longer lists them); then it takes the target's partitions no other member still
owns and moves to the assignment epoch (STABLE, or UNRELEASED_PARTITIONS while some of its target is still owned
by a member that has not revoked it; it gets them at a later heartbeat). A member epoch that does not match the
coordinator's is FENCED_MEMBER_EPOCH, except the previous epoch with owned partitions within the current assignment
(the answer that bumped the epoch was lost). OffsetCommit and OffsetFetch carry the member epoch: another epoch is
STALE_MEMBER_EPOCH.

Time moves only through the injected clock: every call first removes the members whose session timeout (the group's
`consumer.session.timeout.ms`, else `group.consumer.session.timeout.ms`) passed without a heartbeat, and those that
did not revoke partitions within their rebalance timeout. Kafka's answers and messages are kept for malformed
requests (INVALID_REQUEST), unknown groups and members, fenced epochs, unknown assignors, bad regular expressions (RE2
syntax, as Kafka's RE2/J; a pattern matches a topic name whole) and a full group.

Static membership (an instance id, `group.instance.id`), as Kafka's: one member holds an instance id at a time (a
second joining with it while the first is in the group is UNRELEASED_INSTANCE_ID); a static leave (epoch -2) keeps the
member in the group at epoch -2 with its partitions until its session times out, and a member joining with its
instance id before then takes its place, partitions and target included, without a new group epoch; a heartbeat or
leave naming an instance id no member holds is UNKNOWN_MEMBER_ID, one naming another member's is FENCED_INSTANCE_ID.

Classic members (Kafka's `classicGroup*ToConsumerGroup`): a JoinGroup into a group with members makes the member a
classic member of it, subscribed as its first protocol's subscription says and owning the partitions listed there.
It is answered at once with its member epoch as the generation, no leader, and its first protocol's name; its
SyncGroup is answered at once with the partitions the coordinator assigned it (revoking first, like any member); a
Heartbeat answers REBALANCE_IN_PROGRESS when it must join again to move on. Its session is its own
`session.timeout.ms`, and it must sync after a join, and join after being told to, within its rebalance timeout.
A generation other than its epoch is ILLEGAL_GENERATION (offset commits and fetches included).

Moving between protocols (`group.consumer.migration.policy`, `bidirectional` by default): a classic group with
members is adopted when a consumer member joins it (`adopt`, an upgrade: its generation becomes the group epoch and
each member keeps its assignment), and a group whose last consumer member left, with classic members only, is handed
back to the classic protocol (`take_downgrade`). An empty group of one protocol is taken over by the other.

What is not served: rack-aware assignment, and static classic members in a consumer group beyond their JoinGroup (the
classic protocol's SyncGroup, Heartbeat and LeaveGroup reach a member by its member id). State is in memory only:
after the coordinator restarts, a member's heartbeat is UNKNOWN_MEMBER_ID and Kafka's clients join again with
epoch 0.

Seams: the clock and `find_topics(names)`, the id and partition count of each named topic that exists,
`all_topics()`, every non-internal topic name (for regex subscriptions), and `timeouts(group_id)`, the group's session
timeout and heartbeat interval (its own `consumer.*` configs, else the broker's), read at each heartbeat, as Kafka
applies a changed group config. No I/O of its own; tested on a
`MockClock`.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import re2

from actors.core.groups.assignors import ASSIGNORS, Assignment, AssignmentSpec
from actors.core.groups.consumer_group_api import (
    FIRST_CLIENT_MEMBER_ID_VERSION,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroupDescription,
    ConsumerGroupState,
    ConsumerMemberDescription,
    HeartbeatRefused,
    HeartbeatRequest,
    HeartbeatResult,
    TopicInfo,
    re2j_description,
)
from actors.core.groups.consumer_members import (
    NO_EPOCH,
    ClassicMetadata,
    ConsumerMember,
    MemberState,
    reconcile,
    within,
)
from actors.core.groups.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    version_of,
)
from actors.core.groups.group_membership import (
    ClassicGroupSnapshot,
    ClassicMemberSnapshot,
    GroupError,
    JoinResult,
    SyncResult,
)
from storage.clock import Clock
from storage.config.group_protocol_config import GroupProtocolConfig

# How often a group's subscribed topics are looked up again between subscription changes (Kafka reacts to each new
# metadata image; a second bounds how late a new partition is assigned).
METADATA_REFRESH_MS = 1000


@dataclass(slots=True)
class _Group:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # Subscribed topic name -> what it is now; only topics that exist.
    metadata: dict[str, TopicInfo] = field(default_factory=dict)
    metadata_refresh_due_ms: int = 0
    # The group epoch before a consumer-protocol member last left, until `take_downgrade` looked at it: a downgrade
    # takes the group as it was before that member's leave (Kafka converts instead of removing the member).
    epoch_before_consumer_left: int | None = None


class ConsumerGroups:
    """The consumer-protocol groups of one coordinator (see the module docstring). Not thread-safe: the owner
    serialises calls."""

    def __init__(
        self,
        clock: Clock,
        config: GroupProtocolConfig,
        find_topics: Callable[[Iterable[str]], Mapping[str, TopicInfo]],
        all_topics: Callable[[], Iterable[str]],
        timeouts: Callable[[str], tuple[int, int]] | None = None,
    ) -> None:
        self._clock = clock
        self._config = config
        default = (config.group_consumer_session_timeout_ms, config.group_consumer_heartbeat_interval_ms)
        self._timeouts = timeouts or (lambda _group_id: default)
        self._find_topics = find_topics
        self._all_topics = all_topics
        self._groups: dict[str, _Group] = {}
        regex_options = re2.Options()
        regex_options.log_errors = False
        self._regex_options = regex_options

    # --- ConsumerGroupHeartbeat ----------------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1, -2)."""
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(request)
            return self._heartbeat(request)
        except HeartbeatRefused as refused:
            # Kafka's error answer carries nothing but the code and the message.
            return HeartbeatResult(refused.error, refused.message)

    def _validate(self, request: HeartbeatRequest) -> None:
        """Kafka's checks of the request's own fields, in Kafka's order."""
        if request.api_version >= FIRST_CLIENT_MEMBER_ID_VERSION or request.member_epoch != JOIN_EPOCH:
            _require(request.member_id != "", "MemberId can't be empty.")
        _require(request.group_id != "", "GroupId can't be empty.")
        _require(request.instance_id != "", "InstanceId can't be empty.")
        _require(request.rack_id != "", "RackId can't be empty.")
        if request.member_epoch == JOIN_EPOCH:
            _require(request.rebalance_timeout_ms != -1, "RebalanceTimeoutMs must be provided in first request.")
            _require(request.owned == {}, "TopicPartitions must be empty when (re-)joining.")
            _require(
                request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None,
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            )
        elif request.member_epoch == STATIC_LEAVE_EPOCH:
            _require(request.instance_id is not None, "InstanceId can't be null.")
        elif request.member_epoch < STATIC_LEAVE_EPOCH:
            _require(False, "MemberEpoch is invalid.")
        assignor = request.server_assignor
        if assignor is not None and assignor not in self._config.group_consumer_assignors:
            raise HeartbeatRefused(
                GroupError.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {assignor} is not supported. Supported assignors: "
                f"{', '.join(self._config.group_consumer_assignors)}.",
            )
        if request.subscribed_topic_regex is not None:
            self._compile(request.subscribed_topic_regex)

    def _compile(self, pattern: str) -> re2._Regexp:
        try:
            return re2.compile(pattern, options=self._regex_options)
        except re2.error as exc:
            raise HeartbeatRefused(
                GroupError.INVALID_REGULAR_EXPRESSION,
                f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {re2j_description(exc)}.",
            ) from exc

    def _leave(self, request: HeartbeatRequest) -> HeartbeatResult:
        group = self._existing(request.group_id)
        if request.instance_id is not None:
            member = _static_member(group, request.instance_id, request.member_id)
        else:
            found = group.members.get(request.member_id)
            if found is None:
                raise HeartbeatRefused(
                    GroupError.UNKNOWN_MEMBER_ID,
                    f"Member {request.member_id} is not a member of group {group.group_id}.",
                )
            member = found
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            # Gone for now: its partitions stay its own until its session ends or its instance joins again.
            group.members[member.member_id] = replace(
                member,
                member_epoch=STATIC_LEAVE_EPOCH,
                session_deadline_ms=self._clock.milliseconds() + self._timeouts(group.group_id)[0],
                revocation_deadline_ms=None,
            )
        else:
            self._remove(group, member.member_id)
        return HeartbeatResult(GroupError.NONE, None, member.member_id, request.member_epoch)

    def _heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        now = self._clock.milliseconds()
        joining = request.member_epoch == JOIN_EPOCH
        group = self._groups.get(request.group_id)
        if group is None:
            if not joining:
                raise HeartbeatRefused(GroupError.GROUP_ID_NOT_FOUND, f"Consumer group {request.group_id} not found.")
            group = _Group(request.group_id)
        else:
            self._expire(group, now)
        member_id = request.member_id or str(uuid.uuid4())
        replaced = None
        if request.instance_id is not None and not joining:
            _static_member(group, request.instance_id, member_id)
        elif request.instance_id is not None:
            holder = _holder(group, request.instance_id)
            if holder is not None and holder.member_id != member_id:
                if holder.member_epoch != STATIC_LEAVE_EPOCH:
                    raise HeartbeatRefused(
                        GroupError.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {request.instance_id} cannot join the group "
                        f"because the instance id is owned by {holder.member_id} member.",
                    )
                replaced = holder
        member = group.members.get(member_id)
        if replaced is not None:
            # The instance is back under a new member id: it goes on with what its previous member held.
            previous = replace(replaced, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            del group.members[replaced.member_id]
            target = group.target.pop(replaced.member_id, None)
            if target is not None:
                group.target[member_id] = target
        elif member is None:
            if not joining:
                raise HeartbeatRefused(
                    GroupError.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}."
                )
            if len(group.members) >= self._config.group_consumer_max_size:
                raise HeartbeatRefused(
                    GroupError.GROUP_MAX_SIZE_REACHED,
                    f"The consumer group has reached its maximum capacity of "
                    f"{self._config.group_consumer_max_size} members.",
                )
            previous = ConsumerMember(member_id)
        elif joining:
            # A known member joining again (after a fence, or a lost answer) starts over without partitions.
            previous = replace(
                member,
                member_epoch=0,
                previous_member_epoch=NO_EPOCH,
                state=MemberState.STABLE,
                assigned={},
                pending_revocation={},
                revocation_deadline_ms=None,
            )
        else:
            _check_epoch(member, request.member_epoch, request.owned)
            previous = member
        updated = replace(
            previous,
            instance_id=request.instance_id if request.instance_id is not None else previous.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else previous.rack_id,
            rebalance_timeout_ms=(
                request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1 else previous.rebalance_timeout_ms
            ),
            server_assignor=request.server_assignor
            if request.server_assignor is not None
            else previous.server_assignor,
            subscribed_topic_names=(
                tuple(sorted(set(request.subscribed_topic_names)))
                if request.subscribed_topic_names is not None
                else previous.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (request.subscribed_topic_regex or None)
                if request.subscribed_topic_regex is not None
                else previous.subscribed_topic_regex
            ),
            client_id=request.client_id,
            client_host=request.client_host,
        )
        bump = (member is None and replaced is None) or (
            updated.subscribed_topic_names != previous.subscribed_topic_names
            or updated.subscribed_topic_regex != previous.subscribed_topic_regex
            or updated.server_assignor != previous.server_assignor
        )
        self._groups[group.group_id] = group
        reconciled = self._update(group, updated, bump, request.owned, now)
        reconciled.session_deadline_ms = now + self._timeouts(group.group_id)[0]
        if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
            if reconciled.revocation_deadline_ms is None:
                reconciled.revocation_deadline_ms = now + reconciled.rebalance_timeout_ms
        else:
            reconciled.revocation_deadline_ms = None
        group.members[member_id] = reconciled
        full_request = joining or (
            request.rebalance_timeout_ms != -1
            and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None)
            and request.owned is not None
        )
        changed = joining or previous.assigned != reconciled.assigned
        return HeartbeatResult(
            GroupError.NONE,
            None,
            member_id,
            reconciled.member_epoch,
            self._timeouts(group.group_id)[1],
            dict(reconciled.assigned) if full_request or changed else None,
        )

    # --- Classic members: JoinGroup, SyncGroup, Heartbeat and LeaveGroup into a consumer-protocol group ------

    def classic_join(
        self,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Iterable[tuple[str, bytes]],
        require_known_member_id: bool = False,
        skip_assignment_supported: bool = False,
    ) -> JoinResult:
        """A classic member's JoinGroup into this group, which has members (Kafka's
        `classicGroupJoinToConsumerGroup`): the member's subscription is its first protocol's, and what it owns
        the subscription's owned partitions. Answered at once: its generation is its member epoch after one
        reconciliation step, no leader, and its protocol the first it lists. It must SyncGroup within its rebalance
        timeout."""
        now = self._clock.milliseconds()
        group = self._groups[group_id]
        self._expire(group, now)
        offered = tuple(protocols)
        requested_id = member_id
        unknown = member_id == ""
        member_id = member_id or str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= self._config.group_consumer_max_size:
            return JoinResult(GroupError.GROUP_MAX_SIZE_REACHED, requested_id)
        if not self._supports_protocols(group, protocol_type, [name for name, _ in offered]):
            return JoinResult(GroupError.INCONSISTENT_GROUP_PROTOCOL, requested_id)
        if require_known_member_id and unknown and group_instance_id is None:
            return JoinResult(GroupError.MEMBER_ID_REQUIRED, member_id)
        subscription = decode_subscription(offered[0][1])
        if subscription is None:
            return JoinResult(GroupError.UNKNOWN_SERVER_ERROR, requested_id)
        replaced = None
        if group_instance_id is None:
            previous = group.members.get(member_id) or ConsumerMember(member_id)
        else:
            holder = _holder(group, group_instance_id)
            if holder is None:
                if not unknown:
                    return JoinResult(GroupError.UNKNOWN_MEMBER_ID, requested_id)
                previous = ConsumerMember(member_id)
            elif unknown:
                # The instance is back under a new member id: it goes on with what its previous member held.
                replaced = holder
                previous = replace(holder, member_id=member_id, member_epoch=0, previous_member_epoch=0)
                del group.members[holder.member_id]
                target = group.target.pop(holder.member_id, None)
                if target is not None:
                    group.target[member_id] = target
            elif holder.member_id != member_id:
                return JoinResult(GroupError.FENCED_INSTANCE_ID, requested_id)
            else:
                previous = holder
        updated = replace(
            previous,
            instance_id=group_instance_id if group_instance_id is not None else previous.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else previous.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != -1 else previous.rebalance_timeout_ms,
            server_assignor=None,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            client_id=client_id,
            client_host=client_host,
            classic=ClassicMetadata(session_timeout_ms, offered),
        )
        new = member_id not in group.members and replaced is None
        bump = new or updated.subscribed_topic_names != previous.subscribed_topic_names
        ids = {info.name: info.topic_id for info in group.metadata.values()}
        reconciled = self._update(group, updated, bump, _by_topic_id(subscription.owned, ids), now)
        reconciled.session_deadline_ms = now + session_timeout_ms
        reconciled.revocation_deadline_ms = None
        reconciled.join_deadline_ms = None
        reconciled.sync_deadline_ms = now + max(reconciled.rebalance_timeout_ms, 0)
        group.members[member_id] = reconciled
        return JoinResult(
            GroupError.NONE, member_id, reconciled.member_epoch, CONSUMER_PROTOCOL_TYPE, offered[0][0], ""
        )

    def classic_sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        group_instance_id: str | None = None,
    ) -> SyncResult:
        """A classic member's SyncGroup: its assigned partitions, at once, in its subscription's version (Kafka's
        `classicGroupSyncToConsumerGroup`); REBALANCE_IN_PROGRESS when a newer group epoch wants it to join again
        first (unless it is still revoking: it revokes, then joins)."""
        now = self._clock.milliseconds()
        group = self._groups[group_id]
        self._expire(group, now)
        if not group.members:
            return SyncResult(GroupError.UNKNOWN_MEMBER_ID)
        member, verdict = _classic_member(group, member_id, group_instance_id, generation_id)
        if member is None or member.classic is None:
            return SyncResult(verdict)
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != member.classic.protocol_name
        ):
            return SyncResult(GroupError.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            _must_join(member, now)
            return SyncResult(GroupError.REBALANCE_IN_PROGRESS)
        member.sync_deadline_ms = None
        member.session_deadline_ms = now + member.classic.session_timeout_ms
        names = {info.topic_id: info.name for info in group.metadata.values()}
        version = version_of(member.classic.protocols[0][1])
        return SyncResult(GroupError.NONE, protocol_type, protocol_name, _encoded(member.assigned, names, version))

    def classic_heartbeat(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> GroupError:
        """A classic member's Heartbeat: NONE, or REBALANCE_IN_PROGRESS when it must join again to move on (a newer
        group epoch, partitions to revoke, or partitions of its target now released by their owners); it must
        then join within its rebalance timeout."""
        now = self._clock.milliseconds()
        group = self._groups[group_id]
        self._expire(group, now)
        member, verdict = _classic_member(group, member_id, group_instance_id, generation_id)
        if member is None or member.classic is None:
            return verdict
        member.session_deadline_ms = now + member.classic.session_timeout_ms
        released = member.state == MemberState.UNRELEASED_PARTITIONS and not self._waits_for_release(group, member)
        if member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS or released:
            _must_join(member, now)
            return GroupError.REBALANCE_IN_PROGRESS
        return GroupError.NONE

    def classic_leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[GroupError]:
        """Classic members leaving (LeaveGroup), each named by member id and instance id (an instance id alone
        removes the static member holding it): each one's outcome in order (UNKNOWN_MEMBER_ID for a member that is
        not in the group or does not speak the classic protocol, FENCED_INSTANCE_ID for an instance id another
        member holds); one group epoch bump for all who left."""
        group = self._groups[group_id]
        self._expire(group, self._clock.milliseconds())
        outcome: list[GroupError] = []
        for member_id, instance_id in members:
            if instance_id is None:
                member = group.members.get(member_id)
                verdict = GroupError.UNKNOWN_MEMBER_ID if member is None else GroupError.NONE
            else:
                member = _holder(group, instance_id)
                verdict = GroupError.UNKNOWN_MEMBER_ID if member is None else GroupError.NONE
                if member is not None and member_id and member.member_id != member_id:
                    verdict = GroupError.FENCED_INSTANCE_ID
            if member is not None and verdict == GroupError.NONE and member.classic is None:
                verdict = GroupError.UNKNOWN_MEMBER_ID
            if member is not None and verdict == GroupError.NONE:
                self._remove(group, member.member_id, bump=False)
            outcome.append(verdict)
        if GroupError.NONE in outcome:
            group.group_epoch += 1
        return outcome

    def _supports_protocols(self, group: _Group, protocol_type: str, names: list[str]) -> bool:
        """Kafka's `supportsClassicProtocols`: the consumer protocol type, and a protocol every classic member of
        the group lists."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        classic = [member.classic for member in group.members.values() if member.classic is not None]
        listed = Counter(name for metadata in classic for name in {name for name, _ in metadata.protocols})
        return any(listed[name] == len(classic) for name in names)

    def _waits_for_release(self, group: _Group, member: ConsumerMember) -> bool:
        """Whether some partition of the member's target that it does not have yet is still another member's."""
        others = self._owned_by_others(group, member.member_id)
        return any(
            (topic_id, partition) in others
            for topic_id, partitions in group.target.get(member.member_id, {}).items()
            for partition in partitions - member.assigned.get(topic_id, frozenset())
        )

    # --- Moving a group with members between the protocols (`group.consumer.migration.policy`) --------------

    def adopt(self, snapshot: ClassicGroupSnapshot) -> None:
        """Takes over a classic group with members as a consumer member joins it (Kafka's online upgrade,
        `ConsumerGroup.fromClassicGroup`): group and assignment epochs are its generation, each member is a classic
        member, Stable at that epoch with its current assignment as its target. Refused (GROUP_ID_NOT_FOUND, the
        classic group left as it was) when the policy allows no upgrade, the group is not of protocol type
        "consumer", it would be over `group.consumer.max.size`, or a member's subscription or assignment does not
        decode."""
        if (
            not self._config.upgrade_enabled
            or snapshot.protocol_type != CONSUMER_PROTOCOL_TYPE
            or len(snapshot.members) > self._config.group_consumer_max_size
        ):
            raise HeartbeatRefused(GroupError.GROUP_ID_NOT_FOUND, f"Group {snapshot.group_id} is not a consumer group.")
        now = self._clock.milliseconds()
        decoded = []
        for member in snapshot.members:
            metadata = dict(member.protocols).get(snapshot.protocol_name or "", member.protocols[0][1])
            subscription = decode_subscription(metadata)
            assignment = decode_assignment(member.assignment) if member.assignment else []
            if subscription is None or assignment is None:
                raise HeartbeatRefused(
                    GroupError.GROUP_ID_NOT_FOUND,
                    f"Cannot upgrade the classic group {snapshot.group_id} to consumer group because the embedded "
                    f"consumer protocol is malformed.",
                )
            decoded.append((member, subscription, assignment))
        topics = self._find_topics(sorted({topic for _, _, assigned in decoded for topic, _ in assigned}))
        group = _Group(snapshot.group_id, snapshot.generation_id, snapshot.generation_id)
        ids = {name: info.topic_id for name, info in topics.items()}
        for member, subscription, assigned in decoded:
            partitions = _by_topic_id(assigned, ids)
            group.members[member.member_id] = ConsumerMember(
                member.member_id,
                instance_id=member.group_instance_id,
                rack_id=subscription.rack_id,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                client_id=member.client_id,
                client_host=member.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                member_epoch=snapshot.generation_id,
                previous_member_epoch=snapshot.generation_id,
                assigned=partitions,
                session_deadline_ms=now + member.session_timeout_ms,
                classic=ClassicMetadata(member.session_timeout_ms, member.protocols),
            )
            group.target[member.member_id] = dict(partitions)
        group.metadata = self._subscription_metadata(group)
        group.metadata_refresh_due_ms = now + METADATA_REFRESH_MS
        self._groups[group.group_id] = group

    def take_downgrade(self, group_id: str) -> ClassicGroupSnapshot | None:
        """After a consumer member left (or was removed) leaving classic members only, and the policy allows a
        downgrade: the group as a classic group (Kafka's `ClassicGroup.fromConsumerGroup`), forgotten here, its
        generation the group epoch before that member left and each member's assignment its target, for the classic
        protocol to adopt and rebalance. None otherwise. Applies the group's due timeouts first."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        self._expire(group, self._clock.milliseconds())
        epoch = group.epoch_before_consumer_left
        group.epoch_before_consumer_left = None
        if epoch is None:
            return None
        if not group.members or not self._config.downgrade_enabled:
            return None
        if any(member.classic is None for member in group.members.values()):
            return None
        del self._groups[group_id]
        names = {info.topic_id: info.name for info in group.metadata.values()}
        members = tuple(
            ClassicMemberSnapshot(
                member.member_id,
                member.instance_id,
                member.client_id,
                member.client_host,
                classic.session_timeout_ms,
                member.rebalance_timeout_ms,
                classic.protocols,
                _encoded(group.target.get(member.member_id, {}), names, version_of(classic.protocols[0][1])),
            )
            for member in group.members.values()
            if (classic := member.classic) is not None
        )
        return ClassicGroupSnapshot(group_id, epoch, CONSUMER_PROTOCOL_TYPE, None, members)

    def _update(
        self, group: _Group, updated: ConsumerMember, bump: bool, owned: Assignment | None, now: int
    ) -> ConsumerMember:
        """Stores the member as its request left it; bumps the group epoch if `bump` (its subscription changed, or
        it is new) or the subscribed topics changed, assigns again if the epoch moved, and returns the member one
        reconciliation step further (not stored yet: its caller sets its deadlines)."""
        group.members[updated.member_id] = updated
        if bump or now >= group.metadata_refresh_due_ms:
            metadata = self._subscription_metadata(group)
            group.metadata_refresh_due_ms = now + METADATA_REFRESH_MS
            if metadata != group.metadata:
                group.metadata = metadata
                bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        return reconcile(
            updated,
            group.assignment_epoch,
            group.target.get(updated.member_id, {}),
            owned,
            self._owned_by_others(group, updated.member_id),
        )

    # --- Assignment ------------------------------------------------------------------------------------------

    def _subscription_metadata(self, group: _Group) -> dict[str, TopicInfo]:
        names: set[str] = set()
        patterns = set()
        for member in group.members.values():
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                patterns.add(member.subscribed_topic_regex)
        if patterns:
            compiled = [self._compile(pattern) for pattern in sorted(patterns)]
            names.update(name for name in self._all_topics() if any(regex.fullmatch(name) for regex in compiled))
        return dict(self._find_topics(sorted(names))) if names else {}

    def _subscribed_ids(self, group: _Group, member: ConsumerMember) -> frozenset[uuid.UUID]:
        regex = self._compile(member.subscribed_topic_regex) if member.subscribed_topic_regex else None
        return frozenset(
            info.topic_id
            for name, info in group.metadata.items()
            if name in member.subscribed_topic_names or (regex is not None and regex.fullmatch(name))
        )

    def _assignor_name(self, group: _Group) -> str:
        asked = Counter(member.server_assignor for member in group.members.values() if member.server_assignor)
        if asked:
            return sorted(asked.items(), key=lambda item: (-item[1], item[0]))[0][0]
        return self._config.group_consumer_assignors[0]

    def _assign(self, group: _Group) -> None:
        spec = AssignmentSpec(
            subscriptions={
                member_id: self._subscribed_ids(group, member) for member_id, member in group.members.items()
            },
            partition_counts={info.topic_id: info.partitions for info in group.metadata.values()},
            previous=group.target,
        )
        group.target = ASSIGNORS[self._assignor_name(group)](spec)
        group.assignment_epoch = group.group_epoch

    @staticmethod
    def _owned_by_others(group: _Group, member_id: str) -> set[tuple[uuid.UUID, int]]:
        """Every partition assigned to, or still being revoked by, another member."""
        owned: set[tuple[uuid.UUID, int]] = set()
        for other in group.members.values():
            if other.member_id == member_id:
                continue
            for assignment in (other.assigned, other.pending_revocation):
                owned.update((topic_id, partition) for topic_id, numbers in assignment.items() for partition in numbers)
        return owned

    # --- Timeouts and removal --------------------------------------------------------------------------------

    def _expire(self, group: _Group, now: int) -> None:
        """Removes the members whose session ended, whose revocation outlived their rebalance timeout, and classic
        members that did not join again, or sync, within theirs."""
        for member in list(group.members.values()):
            if any(now >= deadline for deadline in member.deadlines()):
                self._remove(group, member.member_id)

    def _remove(self, group: _Group, member_id: str, *, bump: bool = True) -> None:
        member = group.members.pop(member_id)
        group.target.pop(member_id, None)
        if member.classic is None:
            group.epoch_before_consumer_left = group.group_epoch
        if bump:
            group.group_epoch += 1
        group.metadata_refresh_due_ms = 0

    def _existing(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            raise HeartbeatRefused(GroupError.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        self._expire(group, self._clock.milliseconds())
        return group

    # --- What other APIs ask ---------------------------------------------------------------------------------

    def has_group(self, group_id: str) -> bool:
        """Whether `group_id` is a consumer-protocol group (with or without members)."""
        return group_id in self._groups

    def is_active(self, group_id: str) -> bool:
        """Whether the group has members now."""
        group = self._groups.get(group_id)
        if group is None:
            return False
        self._expire(group, self._clock.milliseconds())
        return bool(group.members)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def delete(self, group_id: str) -> GroupError:
        """Forgets an empty group: NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND if unknown."""
        if group_id not in self._groups:
            return GroupError.GROUP_ID_NOT_FOUND
        if self.is_active(group_id):
            return GroupError.NON_EMPTY_GROUP
        del self._groups[group_id]
        return GroupError.NONE

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        """The topics some member subscribes to now (OffsetDelete keeps their offsets)."""
        group = self._groups.get(group_id)
        if group is None or not self.is_active(group_id):
            return frozenset()
        return frozenset(group.metadata)

    def check_commit(
        self, group_id: str, member_id: str, member_epoch: int, *, transactional: bool, api_version: int
    ) -> GroupError:
        """Kafka's check of an OffsetCommit or TxnOffsetCommit into a consumer group: epoch < 0 only into a group
        without members, else the member must exist, commit with OffsetCommit v9+ (a consumer member's plain
        commit; a classic member may use any version), and name its current epoch (a classic member's generation)."""
        group = self._groups[group_id]
        self._expire(group, self._clock.milliseconds())
        if member_epoch < 0 and not group.members:
            return GroupError.NONE
        member = group.members.get(member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if not transactional and member.classic is None and api_version < 9:
            return GroupError.UNSUPPORTED_VERSION
        return _epoch_verdict(member, member_epoch)

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> GroupError:
        """Kafka's check of an OffsetFetch v9+ naming a member: it must exist at `member_epoch`."""
        if member_id is None and member_epoch < 0:
            return GroupError.NONE
        group = self._groups[group_id]
        self._expire(group, self._clock.milliseconds())
        member = group.members.get(member_id or "")
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        return _epoch_verdict(member, member_epoch)

    def describe(self, group_id: str) -> ConsumerGroupDescription | None:
        """The group as ConsumerGroupDescribe shows it; None if it is no consumer-protocol group."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        self._expire(group, self._clock.milliseconds())
        names = {info.topic_id: info.name for info in group.metadata.values()}
        members = tuple(
            ConsumerMemberDescription(
                member.member_id,
                member.instance_id,
                member.rack_id,
                member.member_epoch,
                member.client_id,
                member.client_host,
                member.subscribed_topic_names,
                member.subscribed_topic_regex or "",
                _known(member.assigned, names),
                _known(group.target.get(member.member_id, {}), names),
                member.classic is not None,
            )
            for member in group.members.values()
        )
        return ConsumerGroupDescription(
            group.group_id,
            _state(group),
            group.group_epoch,
            group.assignment_epoch,
            self._assignor_name(group),
            members,
            names,
        )


def _holder(group: _Group, instance_id: str) -> ConsumerMember | None:
    """The member holding `instance_id`, if any."""
    return next((member for member in group.members.values() if member.instance_id == instance_id), None)


def _static_member(group: _Group, instance_id: str, member_id: str) -> ConsumerMember:
    """The member holding `instance_id`, which must be `member_id` (Kafka's checks of a static member's heartbeat
    and leave)."""
    holder = _holder(group, instance_id)
    if holder is None:
        raise HeartbeatRefused(GroupError.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if holder.member_id != member_id:
        raise HeartbeatRefused(
            GroupError.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member {holder.member_id}.",
        )
    return holder


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise HeartbeatRefused(GroupError.INVALID_REQUEST, message)


def _check_epoch(member: ConsumerMember, received: int, owned: Assignment | None) -> None:
    """Kafka's fencing of a heartbeat's member epoch (see the module docstring)."""
    if received > member.member_epoch:
        raise HeartbeatRefused(
            GroupError.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or owned is None or not within(owned, member.assigned)
    ):
        raise HeartbeatRefused(
            GroupError.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )


def _epoch_verdict(member: ConsumerMember, member_epoch: int) -> GroupError:
    """An offset commit's or fetch's epoch against the member's: another is STALE_MEMBER_EPOCH, or for a classic
    member (whose epoch is its generation) ILLEGAL_GENERATION."""
    if member_epoch == member.member_epoch:
        return GroupError.NONE
    return GroupError.STALE_MEMBER_EPOCH if member.classic is None else GroupError.ILLEGAL_GENERATION


def _classic_member(
    group: _Group, member_id: str, instance_id: str | None, generation_id: int
) -> tuple[ConsumerMember | None, GroupError]:
    """Kafka's checks of a classic member's SyncGroup and Heartbeat: the member (by its instance id, which it must
    hold, if it names one: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), speaking the classic protocol, naming its member
    epoch as its generation (ILLEGAL_GENERATION). The member, and the verdict."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = _holder(group, instance_id)
        if member is not None and member.member_id != member_id:
            return None, GroupError.FENCED_INSTANCE_ID
    if member is None or member.classic is None:
        return None, GroupError.UNKNOWN_MEMBER_ID
    if generation_id != member.member_epoch:
        return None, GroupError.ILLEGAL_GENERATION
    return member, GroupError.NONE


def _must_join(member: ConsumerMember, now: int) -> None:
    """Starts the member's rebalance timeout to join again, unless it already runs."""
    if member.join_deadline_ms is None:
        member.join_deadline_ms = now + max(member.rebalance_timeout_ms, 0)


def _by_topic_id(pairs: Iterable[tuple[str, int]], ids: Mapping[str, uuid.UUID]) -> dict[uuid.UUID, frozenset[int]]:
    """The (topic name, partition) pairs of a classic member's subscription or assignment as partitions by topic id,
    those of topics `ids` does not name left out."""
    partitions: dict[uuid.UUID, frozenset[int]] = {}
    for topic, partition in pairs:
        if topic in ids:
            partitions[ids[topic]] = partitions.get(ids[topic], frozenset()) | {partition}
    return partitions


def _encoded(assignment: Assignment, names: Mapping[uuid.UUID, str], version: int) -> bytes:
    """A ConsumerProtocolAssignment of the partitions of `assignment` whose topics are known, at `version`."""
    return encode_assignment(
        {names[topic_id]: sorted(numbers) for topic_id, numbers in assignment.items() if topic_id in names}, version
    )


def _known(assignment: Assignment, names: Mapping[uuid.UUID, str]) -> Assignment:
    return {topic_id: partitions for topic_id, partitions in assignment.items() if topic_id in names}


def _state(group: _Group) -> ConsumerGroupState:
    if not group.members:
        return ConsumerGroupState.EMPTY
    if group.group_epoch > group.assignment_epoch:
        return ConsumerGroupState.ASSIGNING
    if any(
        member.member_epoch != group.assignment_epoch or member.state != MemberState.STABLE
        for member in group.members.values()
    ):
        return ConsumerGroupState.RECONCILING
    return ConsumerGroupState.STABLE
