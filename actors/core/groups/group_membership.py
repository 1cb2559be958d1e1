"""Kafka's classic consumer-group protocol as a state machine: members, generations, rebalances and sessions.

A group moves through Kafka's states:

    Empty --first JoinGroup--> PreparingRebalance --every member joined, or rebalance timeout--> CompletingRebalance
    CompletingRebalance --the leader's SyncGroup--> Stable
    Stable / CompletingRebalance --a member joins, changes its protocols, leaves or expires--> PreparingRebalance
    PreparingRebalance --no member left when the join completes--> Empty

A JoinGroup or SyncGroup that cannot be answered yet is recorded, not answered: `join` and `sync` return a
`PendingJoin` / None, and the caller asks again with `poll_join` / `poll_sync` until the answer is there (the
group coordinator actor waits between polls on a condition, so an answer is taken as soon as it exists). Time
only moves through the injected clock: every call first expires what is due (members whose
`session.timeout.ms` passed without a heartbeat, the rebalance timeout, Kafka's initial rebalance delay), and
`next_deadline_ms` tells a waiter when the next such event is due, so no thread of its own is needed.

Kafka's answers, kept here: a JoinGroup v4+ without a member id gets MEMBER_ID_REQUIRED and a fresh id to
join with; a member that is not in the group gets UNKNOWN_MEMBER_ID (so does an OffsetCommit of generation -1
and no member id into a group that is not Empty); a SyncGroup, Heartbeat or OffsetCommit of another generation
gets ILLEGAL_GENERATION; a Heartbeat during a rebalance and a SyncGroup of a generation whose
rebalance restarted get REBALANCE_IN_PROGRESS. The leader of a generation receives every member's metadata for
the chosen protocol (the protocol every member supports that most members list first) and sends each member's
assignment in its SyncGroup; the broker never looks inside either.

Static membership (KIP-345, `group.instance.id`), as Kafka's: a member joining with an instance id and no member id
is given one (`<instance id>-<uuid>`, no MEMBER_ID_REQUIRED); if the instance id is held, the new member takes the
holder's place, assignment and leadership (`_replace_static_member`): a Stable group whose chosen protocol stays the
same answers at once in the current generation, without a rebalance, and the member id it replaced is fenced
(FENCED_INSTANCE_ID when it names the instance id, UNKNOWN_MEMBER_ID when not; a JoinGroup or SyncGroup it had
waiting is answered FENCED_INSTANCE_ID, so a second process started with the same instance id stops the first).
Every request naming an instance id must come from the member holding it (Kafka's `validateMember`); a LeaveGroup
naming an instance id and no member id removes its holder (an administrator's removal).

What is not served: the group's state across a coordinator restart (members rejoin: their next Heartbeat gets
UNKNOWN_MEMBER_ID, after which Kafka's clients join again; committed offsets are durable, they live in
`__consumer_offsets`).
This module imports nothing but the clock, the broker config and the consumer protocol's decoding, so it is tested
without Ray on a `MockClock`.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from actors.core.groups.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from storage.clock import Clock
from storage.config.broker_config import BrokerConfig

# Kafka's defaults of the broker keys of the same names.
GROUP_MIN_SESSION_TIMEOUT_MS = 6000
GROUP_MAX_SESSION_TIMEOUT_MS = 1800000
GROUP_INITIAL_REBALANCE_DELAY_MS = 3000
NO_GENERATION = -1
# ListGroups' group types: this module's groups, and those of the consumer protocol (`consumer_group_state`).
CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


class GroupError(enum.Enum):
    """The outcome of a group call, named as Kafka's error codes are (the protocol layer maps them by name)."""

    NONE = "none"
    UNKNOWN_MEMBER_ID = "unknown_member_id"
    ILLEGAL_GENERATION = "illegal_generation"
    REBALANCE_IN_PROGRESS = "rebalance_in_progress"
    MEMBER_ID_REQUIRED = "member_id_required"
    INCONSISTENT_GROUP_PROTOCOL = "inconsistent_group_protocol"
    INVALID_SESSION_TIMEOUT = "invalid_session_timeout"
    INVALID_GROUP_ID = "invalid_group_id"
    GROUP_ID_NOT_FOUND = "group_id_not_found"
    NON_EMPTY_GROUP = "non_empty_group"
    GROUP_SUBSCRIBED_TO_TOPIC = "group_subscribed_to_topic"
    # The consumer group protocol's (`actors.core.groups.consumer_group_state`).
    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_VERSION = "unsupported_version"
    FENCED_MEMBER_EPOCH = "fenced_member_epoch"
    STALE_MEMBER_EPOCH = "stale_member_epoch"
    UNSUPPORTED_ASSIGNOR = "unsupported_assignor"
    GROUP_MAX_SIZE_REACHED = "group_max_size_reached"
    INVALID_REGULAR_EXPRESSION = "invalid_regular_expression"
    UNRELEASED_INSTANCE_ID = "unreleased_instance_id"
    FENCED_INSTANCE_ID = "fenced_instance_id"
    UNKNOWN_SERVER_ERROR = "unknown_server_error"


class GroupState(enum.Enum):
    """Kafka's classic group states, valued as DescribeGroups and ListGroups spell them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """Kafka's group settings (`group.min.session.timeout.ms`, ...), with Kafka's defaults."""

    group_min_session_timeout_ms: int = GROUP_MIN_SESSION_TIMEOUT_MS
    group_max_session_timeout_ms: int = GROUP_MAX_SESSION_TIMEOUT_MS
    group_initial_rebalance_delay_ms: int = GROUP_INITIAL_REBALANCE_DELAY_MS

    def accepts_session_timeout(self, session_timeout_ms: int) -> bool:
        """Whether a member's `session.timeout.ms` is within the broker's bounds (else INVALID_SESSION_TIMEOUT)."""
        return self.group_min_session_timeout_ms <= session_timeout_ms <= self.group_max_session_timeout_ms

    @classmethod
    def of(cls, config: BrokerConfig) -> MembershipConfig:
        """The group settings of a broker's `server.properties`."""
        return cls(
            config.group_min_session_timeout_ms,
            config.group_max_session_timeout_ms,
            config.group_initial_rebalance_delay_ms,
        )


@dataclass(frozen=True, slots=True)
class JoinMember:
    """One member as the leader sees it in its JoinGroup answer: its id and its metadata for the chosen protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup answer. `members` is filled for the leader only."""

    error: GroupError
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class PendingJoin:
    """A JoinGroup recorded but not answered yet: ask `poll_join` with this member id."""

    member_id: str


@dataclass(frozen=True, slots=True)
class SyncResult:
    """A SyncGroup answer: the member's assignment, as the leader sent it."""

    error: GroupError
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member as DescribeGroups shows it (metadata and assignment only in a Stable group, as Kafka)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """One group as DescribeGroups and ListGroups show it: `state` is a `GroupState`, or for a consumer-protocol
    group a `consumer_group_api.ConsumerGroupState` (that module imports this one), with its group epoch as the
    generation."""

    group_id: str
    state: enum.Enum
    protocol_type: str
    protocol_name: str
    generation_id: int
    members: tuple[MemberDescription, ...]
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True, slots=True)
class ClassicMemberSnapshot:
    """One member of a group handed between the protocols: its JoinGroup settings and its current assignment."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicGroupSnapshot:
    """A group with members handed between the protocols (Kafka's online upgrade and downgrade): its generation,
    protocol type and chosen protocol (None before its first join completed), and its members."""

    group_id: str
    generation_id: int
    protocol_type: str
    protocol_name: str | None
    members: tuple[ClassicMemberSnapshot, ...]


@dataclass(slots=True)
class _Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    session_deadline_ms: int
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    join_result: JoinResult | None = None
    sync_result: SyncResult | None = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol_name: str) -> bytes:
        return next(metadata for name, metadata in self.protocols if name == protocol_name)


@dataclass(slots=True)
class _Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    # In join order: the first member of a generation without its previous leader becomes the leader.
    members: dict[str, _Member] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, each with the deadline by which it must join.
    pending_members: dict[str, int] = field(default_factory=dict)
    # Static members: instance id (`group.instance.id`) -> the member id it is known by now.
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids replaced by their instance while their JoinGroup or SyncGroup waited: that wait is answered
    # FENCED_INSTANCE_ID (Kafka completes the replaced member's pending answers so), then the id is forgotten.
    fenced_waits: set[str] = field(default_factory=set)
    rebalance_started_ms: int = 0
    rebalance_deadline_ms: int = 0
    # Kafka's initial rebalance delay: a rebalance that starts from Empty waits this long for more members.
    delay_until_ms: int = 0


class GroupMembership:
    """The membership of every group of one coordinator (see the module docstring). Not thread-safe: the owner
    serialises calls (the group coordinator actor holds one lock around each)."""

    def __init__(self, clock: Clock, config: MembershipConfig | None = None) -> None:
        self._clock = clock
        self._config = config or MembershipConfig()
        self._groups: dict[str, _Group] = {}

    @property
    def config(self) -> MembershipConfig:
        return self._config

    # --- JoinGroup -------------------------------------------------------------------------------------------

    def join(
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
    ) -> JoinResult | PendingJoin:
        """A member's JoinGroup: its answer, or `PendingJoin` when the answer must wait for the other members.
        `skip_assignment_supported`: JoinGroup v9+, whose answer may tell a static leader rejoining a Stable group
        that its group's assignment stands (see the module docstring)."""
        now = self._clock.milliseconds()
        offered = tuple(protocols)
        if not group_id:
            return JoinResult(GroupError.INVALID_GROUP_ID, member_id)
        if not self._config.accepts_session_timeout(session_timeout_ms):
            return JoinResult(GroupError.INVALID_SESSION_TIMEOUT, member_id)
        if not protocol_type or not offered:
            return JoinResult(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id)
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(GroupError.UNKNOWN_MEMBER_ID, member_id)
            group = self._groups[group_id] = _Group(group_id)
        self._advance(group, now)
        if not self._accepts_protocols(group, member_id, protocol_type, [name for name, _ in offered]):
            return JoinResult(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id)
        rebalance_timeout_ms = max(rebalance_timeout_ms, 0)
        if not member_id:
            member_id = f"{group_instance_id or client_id or 'member'}-{uuid.uuid4()}"
            if group_instance_id is not None:
                previous = group.static_members.get(group_instance_id)
                if previous is not None:
                    return self._replace_static_member(
                        group,
                        group_instance_id,
                        previous,
                        member_id,
                        session_timeout_ms,
                        rebalance_timeout_ms,
                        offered,
                        skip_assignment_supported,
                    )
            elif require_known_member_id:
                group.pending_members[member_id] = now + session_timeout_ms
                return JoinResult(GroupError.MEMBER_ID_REQUIRED, member_id)
        elif member_id in group.pending_members:
            del group.pending_members[member_id]
        else:
            verdict = _member_verdict(group, member_id, group_instance_id)
            if verdict != GroupError.NONE:
                return JoinResult(verdict, member_id)
        member = group.members.get(member_id)
        if member is None:
            group.protocol_type = protocol_type
            if group_instance_id is not None:
                group.static_members[group_instance_id] = member_id
            group.members[member_id] = _Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                offered,
                now + session_timeout_ms,
                awaiting_join=True,
            )
            self._rebalance_for_new_member(group, now, rebalance_timeout_ms)
        else:
            unchanged = member.protocols == offered
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.protocols = offered
            member.session_deadline_ms = now + session_timeout_ms
            member.join_result = None
            if unchanged and (
                group.state == GroupState.COMPLETING_REBALANCE
                or (group.state == GroupState.STABLE and member_id != group.leader_id)
            ):
                # The member lost its answer, or a follower rejoins with nothing new: the current generation stands.
                return self._join_result(group, member)
            member.awaiting_join = True
            if group.state != GroupState.PREPARING_REBALANCE:
                self._prepare_rebalance(group, now)
        self._maybe_complete_join(group, now)
        return self.poll_join(group_id, member_id)

    def _replace_static_member(
        self,
        group: _Group,
        instance_id: str,
        previous_id: str,
        member_id: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        offered: tuple[tuple[str, bytes], ...],
        skip_assignment_supported: bool,
    ) -> JoinResult | PendingJoin:
        """A static member back under a new member id (Kafka's `updateStaticMemberThenRebalanceOrCompleteJoin`): it
        takes its previous member's place, assignment and leadership. A Stable group whose protocol stays the same
        answers at once in the current generation (a leader on JoinGroup v9+ gets the members and is told to skip
        its assignment); a group completing a rebalance rebalances again (the leader may have assigned the previous
        member id); one preparing a rebalance goes on with it."""
        now = self._clock.milliseconds()
        current_leader = group.leader_id or ""
        member = group.members.pop(previous_id)
        if member.awaiting_join or member.awaiting_sync:
            group.fenced_waits.add(previous_id)
        member.awaiting_join = member.awaiting_sync = False
        member.member_id = member_id
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocols = offered
        member.session_deadline_ms = now + session_timeout_ms
        member.join_result = None
        member.sync_result = None
        group.members[member_id] = member
        if group.leader_id == previous_id:
            group.leader_id = member_id
        group.static_members[instance_id] = member_id
        if group.state == GroupState.STABLE and group.protocol_name == self._select_protocol(group):
            if skip_assignment_supported:
                leads = member_id == group.leader_id
                result = self._join_result(group, member)
                return replace(result, members=result.members if leads else (), skip_assignment=leads)
            return JoinResult(
                GroupError.NONE,
                member_id,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                current_leader,
            )
        member.awaiting_join = True
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now)
        self._maybe_complete_join(group, now)
        return self.poll_join(group.group_id, member_id)

    def poll_join(self, group_id: str, member_id: str) -> JoinResult | PendingJoin:
        """The answer to `member_id`'s JoinGroup once the join phase completed, else `PendingJoin` again."""
        group = self._groups.get(group_id)
        if group is not None:
            self._advance(group, self._clock.milliseconds())
        member = None if group is None else group.members.get(member_id)
        if member is None:
            return JoinResult(_gone(group, member_id), member_id)
        result, member.join_result = member.join_result, None
        return PendingJoin(member_id) if result is None else result

    # --- SyncGroup -------------------------------------------------------------------------------------------

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        group_instance_id: str | None = None,
    ) -> SyncResult | None:
        """A member's SyncGroup: its assignment, or None while the leader's SyncGroup has not come."""
        now = self._clock.milliseconds()
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(GroupError.UNKNOWN_MEMBER_ID)
        self._advance(group, now)
        verdict = _member_verdict(group, member_id, group_instance_id)
        if verdict != GroupError.NONE:
            return SyncResult(verdict)
        member = group.members[member_id]
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return SyncResult(GroupError.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(GroupError.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(GroupError.INCONSISTENT_GROUP_PROTOCOL)
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(GroupError.REBALANCE_IN_PROGRESS)
        member.session_deadline_ms = now + member.session_timeout_ms
        if group.state == GroupState.STABLE:
            return self._sync_result(group, member)
        member.sync_result = None
        member.awaiting_sync = True
        if member_id == group.leader_id:
            for each in group.members.values():
                each.assignment = bytes(assignments.get(each.member_id, b""))
            group.state = GroupState.STABLE
            for each in group.members.values():
                if each.awaiting_sync:
                    each.awaiting_sync = False
                    each.sync_result = self._sync_result(group, each)
        return self.poll_sync(group_id, member_id, generation_id)

    def poll_sync(self, group_id: str, member_id: str, generation_id: int) -> SyncResult | None:
        """The answer to `member_id`'s SyncGroup once the leader's came (or the generation ended), else None."""
        group = self._groups.get(group_id)
        if group is not None:
            self._advance(group, self._clock.milliseconds())
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return SyncResult(_gone(group, member_id))
        result, member.sync_result = member.sync_result, None
        if result is not None:
            return result
        if not member.awaiting_sync or group.generation_id != generation_id:
            return SyncResult(GroupError.REBALANCE_IN_PROGRESS)
        return None

    # --- Heartbeat, LeaveGroup, OffsetCommit checks ----------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> GroupError:
        """A member's Heartbeat: it keeps the member's session alive and tells it whether to rejoin."""
        now = self._clock.milliseconds()
        group = self._groups.get(group_id)
        if group is None:
            return GroupError.UNKNOWN_MEMBER_ID
        self._advance(group, now)
        verdict = _member_verdict(group, member_id, group_instance_id)
        if verdict != GroupError.NONE:
            return verdict
        member = group.members[member_id]
        if generation_id != group.generation_id:
            return GroupError.ILLEGAL_GENERATION
        member.session_deadline_ms = now + member.session_timeout_ms
        if group.state == GroupState.PREPARING_REBALANCE:
            return GroupError.REBALANCE_IN_PROGRESS
        return GroupError.NONE

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[GroupError]:
        """Members leaving the group (LeaveGroup), each named by member id and instance id (an instance id with no
        member id removes the static member holding it, an administrator's removal): each one's outcome, in
        order; the others rebalance without them."""
        now = self._clock.milliseconds()
        group = self._groups.get(group_id)
        leaving = list(members)
        if group is None:
            return [GroupError.UNKNOWN_MEMBER_ID for _ in leaving]
        self._advance(group, now)
        outcome: list[GroupError] = []
        for member_id, instance_id in leaving:
            if not member_id:
                holder = None if instance_id is None else group.static_members.get(instance_id)
                if holder is None:
                    outcome.append(GroupError.UNKNOWN_MEMBER_ID)
                    continue
                member_id = holder
            elif group.pending_members.pop(member_id, None) is not None:
                outcome.append(GroupError.NONE)
                continue
            else:
                verdict = _member_verdict(group, member_id, instance_id)
                if verdict != GroupError.NONE:
                    outcome.append(verdict)
                    continue
            self._remove_member(group, member_id, now)
            outcome.append(GroupError.NONE)
        self._maybe_complete_join(group, now)
        return outcome

    def check_commit(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> GroupError:
        """Whether an OffsetCommit may be written, checked in the order of Kafka's classic coordinator
        (`GroupCoordinator.validateOffsetCommit`, then `doCommitOffsets`):

        - a group this coordinator does not know: a commit with generation -1 is written (a consumer that
          assigns its own partitions, or the admin client's AlterConsumerGroupOffsets); any other generation is
          ILLEGAL_GENERATION;
        - an Empty group takes any commit with generation -1, whatever its member id;
        - otherwise (a generation >= 0, or a group with members: PreparingRebalance, CompletingRebalance,
          Stable) only a member's commit is written: one that is not a member of the group is
          UNKNOWN_MEMBER_ID (generation -1 without a member id included, as Kafka answers a consumer that
          assigns its partitions itself under the id of an active group), a member of another generation gets
          ILLEGAL_GENERATION, and a current member's commit during the sync phase (CompletingRebalance)
          REBALANCE_IN_PROGRESS. During PreparingRebalance the current generation still commits what it
          consumed.

        A static member's commit (`group_instance_id`) must come from the member holding its instance id
        (FENCED_INSTANCE_ID otherwise). A member's accepted commit also counts as its heartbeat. raybroker's Python
        `Consumer` does not come here: it commits through `GroupCoordinatorActor.commit`, outside the wire groups'
        membership."""
        now = self._clock.milliseconds()
        group = self._groups.get(group_id)
        if group is None:
            return GroupError.NONE if generation_id < 0 else GroupError.ILLEGAL_GENERATION
        self._advance(group, now)
        if generation_id < 0 and group.state == GroupState.EMPTY:
            return GroupError.NONE
        # Generation -1 without a member id is refused here too: into a group with members only they commit.
        verdict = _member_verdict(group, member_id, group_instance_id)
        if verdict != GroupError.NONE:
            return verdict
        member = group.members[member_id]
        if generation_id != group.generation_id:
            return GroupError.ILLEGAL_GENERATION
        if group.state == GroupState.COMPLETING_REBALANCE:
            return GroupError.REBALANCE_IN_PROGRESS
        member.session_deadline_ms = now + member.session_timeout_ms
        return GroupError.NONE

    def check_transactional_commit(self, group_id: str, member_id: str, generation_id: int) -> GroupError:
        """Whether a TxnOffsetCommit may be written (Kafka's classic `validateOffsetCommit` for a transactional
        commit): without member information (empty member id, generation -1) always; with some, only a current
        member's commit of the current generation (else UNKNOWN_MEMBER_ID, then ILLEGAL_GENERATION), whatever
        the group's state: unlike a plain commit, a transactional one is written during the sync phase too, and
        a group this coordinator does not know has no members."""
        if not member_id and generation_id < 0:
            return GroupError.NONE
        group = self._groups.get(group_id)
        if group is not None:
            self._advance(group, self._clock.milliseconds())
        if group is None or member_id not in group.members:
            return GroupError.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return GroupError.ILLEGAL_GENERATION
        return GroupError.NONE

    # --- ListGroups, DescribeGroups, DeleteGroups ------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription | None:
        """The group as DescribeGroups shows it; None for a group this coordinator has no members of, ever."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        self._advance(group, self._clock.milliseconds())
        stable = group.state == GroupState.STABLE
        protocol_name = group.protocol_name or ""
        members = tuple(
            MemberDescription(
                member.member_id,
                member.group_instance_id,
                member.client_id,
                member.client_host,
                member.metadata_for(protocol_name) if stable else b"",
                member.assignment if stable else b"",
            )
            for member in group.members.values()
        )
        return GroupDescription(
            group.group_id,
            group.state,
            group.protocol_type or "",
            protocol_name if stable else "",
            group.generation_id,
            members,
        )

    def has_group(self, group_id: str) -> bool:
        """Whether the coordinator knows `group_id` as a classic group (with or without members)."""
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def delete(self, group_id: str) -> GroupError:
        """Forgets an Empty group (DeleteGroups); a group with members is NON_EMPTY_GROUP."""
        group = self._groups.get(group_id)
        if group is None:
            return GroupError.GROUP_ID_NOT_FOUND
        self._advance(group, self._clock.milliseconds())
        if group.members or group.pending_members:
            return GroupError.NON_EMPTY_GROUP
        del self._groups[group_id]
        return GroupError.NONE

    def subscriptions(self, group_id: str) -> tuple[GroupError, frozenset[str]]:
        """What OffsetDelete may delete of the group's committed offsets, as Kafka decides it: (NONE, the topics
        its members subscribe to) for a group of protocol type "consumer" with members, or for an Empty group
        (subscribing to nothing); NON_EMPTY_GROUP for another group with members; GROUP_ID_NOT_FOUND for a group
        that never had members here. The topics are those of the selected protocol's subscriptions; if one of
        them does not decode, none are known (Kafka's `computeSubscribedTopics`)."""
        group = self._groups.get(group_id)
        if group is None:
            return GroupError.GROUP_ID_NOT_FOUND, frozenset()
        self._advance(group, self._clock.milliseconds())
        if group.state == GroupState.EMPTY:
            return GroupError.NONE, frozenset()
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return GroupError.NON_EMPTY_GROUP, frozenset()
        topics: set[str] = set()
        for member in group.members.values():
            subscribed = subscribed_topics(dict(member.protocols).get(group.protocol_name or "", b""))
            if subscribed is None:
                return GroupError.NONE, frozenset()
            topics |= subscribed
        return GroupError.NONE, frozenset(topics)

    def is_active(self, group_id: str) -> bool:
        """Whether the group has members (or members about to join): its offsets must not be reset under it."""
        group = self._groups.get(group_id)
        if group is None:
            return False
        self._advance(group, self._clock.milliseconds())
        return bool(group.members or group.pending_members)

    def next_deadline_ms(self, group_id: str) -> int | None:
        """When the group's next timed event is due (a session expiry, the rebalance timeout or delay), if any."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        deadlines = [deadline for deadline in group.pending_members.values()]
        deadlines += [m.session_deadline_ms for m in group.members.values() if not m.awaiting_join]
        if group.state == GroupState.PREPARING_REBALANCE:
            deadlines += [group.rebalance_deadline_ms, group.delay_until_ms]
        return min(deadlines, default=None)

    # --- Handing a group between the protocols ----------------------------------------------------------------

    def snapshot(self, group_id: str) -> ClassicGroupSnapshot | None:
        """The group with its members as they are now, for an upgrade to a consumer-protocol group; None if it has
        no members."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        self._advance(group, self._clock.milliseconds())
        if not group.members:
            return None
        return ClassicGroupSnapshot(
            group.group_id,
            group.generation_id,
            group.protocol_type or "",
            group.protocol_name,
            tuple(
                ClassicMemberSnapshot(
                    member.member_id,
                    member.group_instance_id,
                    member.client_id,
                    member.client_host,
                    member.session_timeout_ms,
                    member.rebalance_timeout_ms,
                    member.protocols,
                    member.assignment,
                )
                for member in group.members.values()
            ),
        )

    def forget(self, group_id: str) -> None:
        """Drops the group, members and all: it was handed to the consumer protocol. A member still waiting for its
        JoinGroup or SyncGroup answer is told by the coordinator to join again."""
        self._groups.pop(group_id, None)

    def adopt(self, snapshot: ClassicGroupSnapshot) -> None:
        """Takes over a consumer-protocol group whose members all speak the classic protocol (Kafka's online
        downgrade): Stable in the snapshot's generation with each member's assignment, its protocol chosen as a
        join would choose it, the first member its leader, then at once a rebalance, which every member joins
        again within its rebalance timeout."""
        now = self._clock.milliseconds()
        group = _Group(
            snapshot.group_id,
            GroupState.STABLE,
            snapshot.generation_id,
            snapshot.protocol_type,
        )
        for member in snapshot.members:
            group.members[member.member_id] = _Member(
                member.member_id,
                member.group_instance_id,
                member.client_id,
                member.client_host,
                member.session_timeout_ms,
                member.rebalance_timeout_ms,
                member.protocols,
                now + member.session_timeout_ms,
                member.assignment,
            )
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        group.protocol_name = self._select_protocol(group)
        group.leader_id = next(iter(group.members))
        self._groups[snapshot.group_id] = group
        self._prepare_rebalance(group, now)

    # --- The state machine -----------------------------------------------------------------------------------

    def _accepts_protocols(self, group: _Group, member_id: str, protocol_type: str, names: list[str]) -> bool:
        others = [member for key, member in group.members.items() if key != member_id]
        if not others:
            return True
        if protocol_type != group.protocol_type:
            return False
        return any(all(name in member.protocol_names() for member in others) for name in names)

    def _advance(self, group: _Group, now: int) -> None:
        """Applies every timed event due by `now`: expired sessions and member ids, the rebalance deadline."""
        for member_id, deadline in list(group.pending_members.items()):
            if now >= deadline:
                del group.pending_members[member_id]
        # A member waiting for its JoinGroup answer is bounded by the rebalance timeout, not by its session.
        for member in list(group.members.values()):
            if not member.awaiting_join and now >= member.session_deadline_ms:
                self._remove_member(group, member.member_id, now)
        self._maybe_complete_join(group, now)

    def _remove_member(self, group: _Group, member_id: str, now: int) -> None:
        _drop(group, member_id)
        if group.leader_id == member_id:
            group.leader_id = None
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)

    def _rebalance_for_new_member(self, group: _Group, now: int, rebalance_timeout_ms: int) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now)
            return
        group.rebalance_deadline_ms = max(
            group.rebalance_deadline_ms, group.rebalance_started_ms + rebalance_timeout_ms
        )
        if group.delay_until_ms > now:
            # Kafka's initial delay: each member joining during it waits another delay, up to the rebalance timeout.
            group.delay_until_ms = min(now + self._config.group_initial_rebalance_delay_ms, group.rebalance_deadline_ms)

    def _prepare_rebalance(self, group: _Group, now: int) -> None:
        for member in group.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                member.sync_result = SyncResult(GroupError.REBALANCE_IN_PROGRESS)
        from_empty = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        timeout_ms = max((member.rebalance_timeout_ms for member in group.members.values()), default=0)
        group.rebalance_started_ms = now
        group.rebalance_deadline_ms = now + timeout_ms
        delay_ms = min(self._config.group_initial_rebalance_delay_ms, timeout_ms) if from_empty else 0
        group.delay_until_ms = now + delay_ms

    def _maybe_complete_join(self, group: _Group, now: int) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if now >= group.rebalance_deadline_ms:
            # Members that did not rejoin in time are out; so are member ids never used.
            for member in list(group.members.values()):
                if not member.awaiting_join:
                    _drop(group, member.member_id)
            group.pending_members.clear()
            self._complete_join(group, now)
        elif (
            now >= group.delay_until_ms
            and not group.pending_members
            and all(member.awaiting_join for member in group.members.values())
        ):
            self._complete_join(group, now)

    def _complete_join(self, group: _Group, now: int) -> None:
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        for member in group.members.values():
            member.awaiting_join = False
            member.session_deadline_ms = now + member.session_timeout_ms
            member.join_result = self._join_result(group, member)

    def _select_protocol(self, group: _Group) -> str:
        """The protocol every member supports that most members list first (ties: the first member's order)."""
        members = list(group.members.values())
        candidates = [name for name in members[0].protocol_names() if all(name in m.protocol_names() for m in members)]
        votes = {name: 0 for name in candidates}
        for member in members:
            votes[next(name for name in member.protocol_names() if name in votes)] += 1
        return max(candidates, key=lambda name: votes[name])

    def _join_result(self, group: _Group, member: _Member) -> JoinResult:
        protocol_name = group.protocol_name or ""
        leader = group.leader_id or ""
        members: tuple[JoinMember, ...] = ()
        if member.member_id == leader:
            members = tuple(
                JoinMember(each.member_id, each.group_instance_id, each.metadata_for(protocol_name))
                for each in group.members.values()
            )
        return JoinResult(
            GroupError.NONE, member.member_id, group.generation_id, group.protocol_type, protocol_name, leader, members
        )

    def _sync_result(self, group: _Group, member: _Member) -> SyncResult:
        return SyncResult(GroupError.NONE, group.protocol_type, group.protocol_name, member.assignment)


def _member_verdict(group: _Group, member_id: str, instance_id: str | None) -> GroupError:
    """Kafka's `validateMember`: an instance id must be known (UNKNOWN_MEMBER_ID) and held by `member_id`
    (FENCED_INSTANCE_ID: another member took its place); the member must be in the group (UNKNOWN_MEMBER_ID)."""
    if instance_id is not None:
        holder = group.static_members.get(instance_id)
        if holder is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if holder != member_id:
            return GroupError.FENCED_INSTANCE_ID
    return GroupError.NONE if member_id in group.members else GroupError.UNKNOWN_MEMBER_ID


def _drop(group: _Group, member_id: str) -> None:
    """Removes the member, and its instance id's mapping if it holds one."""
    member = group.members.pop(member_id)
    if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == member_id:
        del group.static_members[member.group_instance_id]


def _gone(group: _Group | None, member_id: str) -> GroupError:
    """The answer to a wait of a member no longer in the group: FENCED_INSTANCE_ID (once) if its instance took a new
    member id meanwhile, else UNKNOWN_MEMBER_ID."""
    if group is not None and member_id in group.fenced_waits:
        group.fenced_waits.discard(member_id)
        return GroupError.FENCED_INSTANCE_ID
    return GroupError.UNKNOWN_MEMBER_ID
