"""A member of a consumer-protocol group and how it moves toward its target assignment (Kafka's
`ConsumerGroupMember` and `CurrentAssignmentBuilder`).

A member never waits for the others: partitions it owns outside its target are revoked first (state
UNREVOKED_PARTITIONS, its epoch unchanged until it no longer lists them); then it takes the target's partitions no
other member still owns and moves to the assignment epoch (STABLE, or UNRELEASED_PARTITIONS while some of its target
is still owned by a member that has not revoked it; it gets them at a later request).

A member may speak the classic protocol (JoinGroup, SyncGroup, Heartbeat) inside a consumer-protocol group: it then
carries `ClassicMetadata`, its JoinGroup settings, and lists what it owns in its subscription's owned partitions
instead of a heartbeat's. Plain data and functions, no clock and no I/O.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace

from actors.core.groups.assignors import Assignment

NO_EPOCH = -1


class MemberState(enum.Enum):
    """Where a member is in its reconciliation (Kafka's `MemberState`)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """A classic member's JoinGroup settings: its session timeout and its protocols (name, subscription bytes) in
    its order of preference. Its protocol is the first it lists, as Kafka's JoinGroup answer names it."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]


@dataclass(slots=True)
class ConsumerMember:
    """One member of a consumer-protocol group. Deadlines are the clock's milliseconds: the session's, the
    revocation's (a consumer member that must revoke partitions, its rebalance timeout), and a classic member's
    join (told to join again) and sync (answered its JoinGroup) deadlines, each its rebalance timeout."""

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
    classic: ClassicMetadata | None = None
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None

    def deadlines(self) -> list[int]:
        """Every deadline the member has now."""
        others = (self.revocation_deadline_ms, self.join_deadline_ms, self.sync_deadline_ms)
        return [self.session_deadline_ms, *(deadline for deadline in others if deadline is not None)]


def within(owned: Assignment, assigned: Assignment) -> bool:
    """Whether every partition of `owned` is in `assigned`."""
    return all(partitions <= assigned.get(topic_id, frozenset()) for topic_id, partitions in owned.items())


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still lists any of `partitions` (a heartbeat that lists nothing is taken to own them)."""
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & numbers for topic_id, numbers in partitions.items())


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owned_by_others: set[tuple[uuid.UUID, int]],
) -> ConsumerMember:
    """The member one step closer to its target (see the module docstring); `owned` is what its request lists
    (None: nothing listed), `owned_by_others` every partition another member holds or is still revoking."""
    if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    if member.state == MemberState.UNREVOKED_PARTITIONS and owns_any(owned, member.pending_revocation):
        return member
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
    if revoking and owns_any(owned, revoking):
        return _moved(member, member.member_epoch, MemberState.UNREVOKED_PARTITIONS, kept_only, revoking)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _moved(member, target_epoch, state, assigned, {})


def _moved(
    member: ConsumerMember, epoch: int, state: MemberState, assigned: Assignment, revoking: Assignment
) -> ConsumerMember:
    return replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        state=state,
        assigned=assigned,
        pending_revocation=revoking,
    )
