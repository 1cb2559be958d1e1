"""The consumer group protocol's messages (KIP-848) as the state machine (`consumer_group_state`) takes and answers
them: a ConsumerGroupHeartbeat's fields and answer, a group as ConsumerGroupDescribe shows it, the epochs with a
meaning of their own, and the refusal a malformed or hostile heartbeat gets, with the words of Kafka's messages for a
bad regular expression (RE2/J's, which Kafka's RE2/J quotes). Plain data, no logic but that lookup."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from actors.core.groups.assignors import Assignment
from actors.core.groups.group_membership import GroupError

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
FIRST_CLIENT_MEMBER_ID_VERSION = 1


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
    classic: bool = False


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


def re2j_description(error: Exception) -> str:
    """RE2/J's description of the syntax error RE2 raised (`error`: "<what>: <where>")."""
    text = error.args[0] if error.args else b""
    text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    what = text.partition(": ")[0]
    return _RE2J_DESCRIPTIONS.get(what, what)
