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

Time moves only through the injected clock: every call first removes the members whose
`group.consumer.session.timeout.ms` passed without a heartbeat, and those that did not revoke partitions within
their rebalance timeout. Kafka's answers and messages are kept for malformed requests (INVALID_REQUEST), unknown
groups and members, fenced epochs, unknown assignors, bad regular expressions (RE2 syntax, as Kafka's RE2/J;
a pattern matches a topic name whole) and a full group.

Static membership (an instance id, `group.instance.id`), as Kafka's: one member holds an instance id at a time (a
second joining with it while the first is in the group is UNRELEASED_INSTANCE_ID); a static leave (epoch -2) keeps the
member in the group at epoch -2 with its partitions until its session times out, and a member joining with its
instance id before then takes its place, partitions and target included, without a new group epoch; a heartbeat or
leave naming an instance id no member holds is UNKNOWN_MEMBER_ID, one naming another member's is FENCED_INSTANCE_ID.

What is not served: rack-aware assignment, classic members in a consumer group and
the conversion of a group between protocols while it has members (Kafka's `group.consumer.migration.policy`): an
empty group of one protocol is taken over by the other, one with members answers GROUP_ID_NOT_FOUND (heartbeat) or
INCONSISTENT_GROUP_PROTOCOL (JoinGroup). State is in memory only: after the coordinator restarts, a member's
heartbeat is UNKNOWN_MEMBER_ID and Kafka's clients join again with epoch 0.

Seams: the clock and `find_topics(names)`, the id and partition count of each named topic that exists, and
`all_topics()`, every non-internal topic name (for regex subscriptions). No I/O of its own; tested on a
`MockClock`.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import re2

from actors.core.groups.assignors import ASSIGNORS, Assignment, AssignmentSpec
from actors.core.groups.group_membership import GroupError
from storage.clock import Clock
from storage.config.group_protocol_config import GroupProtocolConfig

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
NO_EPOCH = -1
# How often a group's subscribed topics are looked up again between subscription changes (Kafka reacts to each new
# metadata image; a second bounds how late a new partition is assigned).
METADATA_REFRESH_MS = 1000
FIRST_CLIENT_MEMBER_ID_VERSION = 1


class MemberState(enum.Enum):
    """Where a member is in its reconciliation (Kafka's `MemberState`)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    """Kafka's consumer group states, valued as ConsumerGroupDescribe and ListGroups spell them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A subscribed topic as the assignment sees it."""

    name: str
    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat's fields (None / -1: unchanged since the last heartbeat, as on the wire). `owned`
    is the member's partitions by topic id; `api_version` 1+ requires the client to name its member id."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = FIRST_CLIENT_MEMBER_ID_VERSION


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat's answer; `assignment` is None when it did not change (and the request was not a
    full one)."""

    error: GroupError
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    """One member as ConsumerGroupDescribe shows it."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str
    assignment: Assignment
    target_assignment: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """One consumer group as ConsumerGroupDescribe shows it; `topic_names` names every topic id it mentions."""

    group_id: str
    state: ConsumerGroupState
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[ConsumerMemberDescription, ...]
    topic_names: Mapping[uuid.UUID, str]


class HeartbeatRefused(Exception):
    """A heartbeat answered with an error (`error`, Kafka's `message`); nothing about the group changed."""

    def __init__(self, error: GroupError, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(slots=True)
class _Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = NO_EPOCH
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None


@dataclass(slots=True)
class _Group:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # Subscribed topic name -> what it is now; only topics that exist.
    metadata: dict[str, TopicInfo] = field(default_factory=dict)
    metadata_refresh_due_ms: int = 0


class ConsumerGroups:
    """The consumer-protocol groups of one coordinator (see the module docstring). Not thread-safe: the owner
    serialises calls."""

    def __init__(
        self,
        clock: Clock,
        config: GroupProtocolConfig,
        find_topics: Callable[[Iterable[str]], Mapping[str, TopicInfo]],
        all_topics: Callable[[], Iterable[str]],
    ) -> None:
        self._clock = clock
        self._config = config
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
                f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {_re2j_description(exc)}.",
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
                session_deadline_ms=self._clock.milliseconds() + self._config.group_consumer_session_timeout_ms,
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
            previous = _Member(member_id)
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
        group.members[member_id] = updated
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
        reconciled = _reconcile(
            updated,
            group.assignment_epoch,
            group.target.get(member_id, {}),
            request.owned,
            self._owned_by_others(group, member_id),
        )
        reconciled.session_deadline_ms = now + self._config.group_consumer_session_timeout_ms
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
            self._config.group_consumer_heartbeat_interval_ms,
            dict(reconciled.assigned) if full_request or changed else None,
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

    def _subscribed_ids(self, group: _Group, member: _Member) -> frozenset[uuid.UUID]:
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
        """Removes the members whose session ended or whose revocation outlived their rebalance timeout."""
        for member in list(group.members.values()):
            late = member.revocation_deadline_ms is not None and now >= member.revocation_deadline_ms
            if now >= member.session_deadline_ms or late:
                self._remove(group, member.member_id)

    def _remove(self, group: _Group, member_id: str) -> None:
        del group.members[member_id]
        group.target.pop(member_id, None)
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
        without members, else the member must exist, commit with OffsetCommit v9+ (a plain commit), and name its
        current epoch."""
        group = self._groups[group_id]
        self._expire(group, self._clock.milliseconds())
        if member_epoch < 0 and not group.members:
            return GroupError.NONE
        member = group.members.get(member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if not transactional and api_version < 9:
            return GroupError.UNSUPPORTED_VERSION
        return GroupError.NONE if member_epoch == member.member_epoch else GroupError.STALE_MEMBER_EPOCH

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> GroupError:
        """Kafka's check of an OffsetFetch v9+ naming a member: it must exist at `member_epoch`."""
        if member_id is None and member_epoch < 0:
            return GroupError.NONE
        group = self._groups[group_id]
        self._expire(group, self._clock.milliseconds())
        member = group.members.get(member_id or "")
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        return GroupError.NONE if member_epoch == member.member_epoch else GroupError.STALE_MEMBER_EPOCH

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


# RE2's error texts and RE2/J's descriptions of the same errors (Kafka's message quotes RE2/J's).
_RE2J_DESCRIPTIONS = {
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "unexpected )",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class",
    "invalid character class range": "invalid character class range",
    "no argument for repetition operator": "missing argument to repetition operator",
    "trailing \\": "trailing backslash at end of expression",
    "invalid UTF-8": "invalid UTF-8",
    "invalid named capture group": "invalid named capture",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
}


def _re2j_description(error: Exception) -> str:
    """RE2/J's description of the syntax error RE2 raised (`error`: "<what>: <where>")."""
    text = error.args[0] if error.args else b""
    text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    what = text.partition(": ")[0]
    return _RE2J_DESCRIPTIONS.get(what, what)


def _holder(group: _Group, instance_id: str) -> _Member | None:
    """The member holding `instance_id`, if any."""
    return next((member for member in group.members.values() if member.instance_id == instance_id), None)


def _static_member(group: _Group, instance_id: str, member_id: str) -> _Member:
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


def _check_epoch(member: _Member, received: int, owned: Assignment | None) -> None:
    """Kafka's fencing of a heartbeat's member epoch (see the module docstring)."""
    if received > member.member_epoch:
        raise HeartbeatRefused(
            GroupError.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or owned is None or not _within(owned, member.assigned)
    ):
        raise HeartbeatRefused(
            GroupError.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )


def _within(owned: Assignment, assigned: Assignment) -> bool:
    return all(partitions <= assigned.get(topic_id, frozenset()) for topic_id, partitions in owned.items())


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still lists any of `partitions` (a heartbeat that lists nothing is taken to own them)."""
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & numbers for topic_id, numbers in partitions.items())


def _reconcile(
    member: _Member,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owned_by_others: set[tuple[uuid.UUID, int]],
) -> _Member:
    """The member one step closer to its target (Kafka's `CurrentAssignmentBuilder`; see the module docstring)."""
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned, owned_by_others)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned, owned_by_others)
    return _next_assignment(member, member.member_epoch, target_epoch, target, owned, owned_by_others)


def _next_assignment(
    member: _Member,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owned_by_others: set[tuple[uuid.UUID, int]],
) -> _Member:
    kept_only: dict[uuid.UUID, frozenset[int]] = {}
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        newly = {partition for partition in wanted - kept if (topic_id, partition) not in owned_by_others}
        unreleased = unreleased or len(newly) < len(wanted - kept)
        if kept:
            kept_only[topic_id] = kept
        if kept | newly:
            assigned[topic_id] = kept | newly
        if current - kept:
            revoking[topic_id] = current - kept
    if revoking and _owns_any(owned, revoking):
        return _moved(member, member_epoch, MemberState.UNREVOKED_PARTITIONS, kept_only, revoking)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _moved(member, target_epoch, state, assigned, {})


def _moved(member: _Member, epoch: int, state: MemberState, assigned: Assignment, revoking: Assignment) -> _Member:
    return replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        state=state,
        assigned=assigned,
        pending_revocation=revoking,
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
