"""The consumer group protocol of Kafka 4 (KIP-848): ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

ConsumerGroupHeartbeat is one call of the group coordinator (`GroupView.consumer_group_heartbeat`), whose state
machine (`actors.core.groups.consumer_group_state`) gives Kafka's answers; the handler only translates fields:
partitions travel by topic id both ways, a duration of -1 or a null list means "unchanged", and Kafka's error message
goes out beside the code. v0 lets the coordinator name a joining member (an empty member id); v1, what Kafka 4 clients
send, requires the client's own id. The client host is the connection's address, as Kafka reports it (`/127.0.0.1`).

Both are served while the cluster finalizes `group.version` 1 or above (the listener's copy of the features,
`cluster.protocol.feature_cache`), as Kafka 4.2's broker serves them: below it a heartbeat answers UNSUPPORTED_VERSION
(35) and so does each group described, with no message; before the listener's first copy of the features arrives they
answer COORDINATOR_NOT_AVAILABLE (15), which clients retry.

ConsumerGroupDescribe answers each group: a consumer-protocol group's state, epochs, assignor and members (their
current and target assignments with topic names); a group of the classic protocol, or one unknown,
GROUP_ID_NOT_FOUND with Kafka's message, which Kafka's admin client takes as the sign to ask DescribeGroups.

Authorization, as Kafka's: a heartbeat needs READ on the group (else GROUP_AUTHORIZATION_FAILED, 30) and DESCRIBE on
every topic it names (else TOPIC_AUTHORIZATION_FAILED, 29); describing needs DESCRIBE on each group, and the
authorized operations are filled when asked.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import GROUP_VERSION, GROUP_VERSION_LEVEL, UNKNOWN_EPOCH
from actors.core.groups.assignors import Assignment
from actors.core.groups.consumer_group_api import (
    ConsumerGroupDescription,
    ConsumerMemberDescription,
    HeartbeatRequest,
)
from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import coordinator_error_code, group_error_code
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    GuardedHandler,
    add_group_operations,
    allows,
    authorized_names,
)
from cluster.protocol.messages import build, milliseconds
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.group_view import GroupView
from storage.errors import RaybrokerError

CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69
# ConsumerGroupDescribe v1's member types: a member speaking the classic protocol, and one speaking the consumer's.
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


class HeartbeatAnswer(Protocol):
    """What a heartbeat answer tells its member (`HeartbeatResult`, `ShareHeartbeatResult`)."""

    @property
    def member_id(self) -> str | None: ...

    @property
    def member_epoch(self) -> int: ...

    @property
    def heartbeat_interval_ms(self) -> int: ...

    @property
    def assignment(self) -> Assignment | None: ...


def heartbeat_fields(body: Any) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat's or ShareGroupHeartbeat's answer before the coordinator is asked: the member's own
    id and epoch back, no error, no assignment (their answers have the same fields)."""
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": body.member_id or None,
        "member_epoch": body.member_epoch,
        "heartbeat_interval": 0,
        "assignment": None,
    }


def heartbeat_member(request: Request) -> dict[str, Any]:
    """What a ConsumerGroupHeartbeat and a ShareGroupHeartbeat tell the coordinator alike: the member, its rack and
    subscribed topics, and the client it runs in."""
    body = request.body
    return {
        "group_id": body.group_id,
        "member_id": body.member_id,
        "member_epoch": body.member_epoch,
        "rack_id": body.rack_id,
        "subscribed_topic_names": None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
        "client_id": request.client_id or "",
        "client_host": coordinator_client_host(request.context),
    }


def heartbeat_refusal(
    access: AccessControl | None, context: ConnectionContext, group_id: str, subscribed: Iterable[str] | None
) -> ErrorCode | None:
    """Why a heartbeat is refused before the coordinator is asked, as Kafka checks it: GROUP_AUTHORIZATION_FAILED
    without READ on the group, TOPIC_AUTHORIZATION_FAILED without DESCRIBE on every subscribed topic; else None."""
    if not allows(access, context, AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    named = tuple(subscribed or ())
    if len(authorized_names(access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, named)) < len(set(named)):
        return ErrorCode.topic_authorization_failed
    return None


def heartbeat_answered(fields: dict[str, Any], result: HeartbeatAnswer) -> dict[str, Any]:
    """`fields` with what the coordinator told the member: its id, epoch, heartbeat interval and assignment."""
    return {
        **fields,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": None
        if result.assignment is None
        else {"topic_partitions": assignment_by_topic_id(result.assignment)},
    }


class _ConsumerProtocolHandler(GuardedHandler[GroupView]):
    """A handler of the consumer protocol, which the cluster's `group.version` turns on (see the module docstring)."""

    def __init__(self, view: GroupView, features: FeatureCache, access: AccessControl | None = None) -> None:
        super().__init__(view, access)
        self._features = features

    def _refusal(self) -> ErrorCode | None:
        """Why the protocol is not served now, or None if it is."""
        epoch, levels = self._features.current()
        if epoch == UNKNOWN_EPOCH:
            return ErrorCode.coordinator_not_available
        if levels.get(GROUP_VERSION, 0) < GROUP_VERSION_LEVEL:
            return ErrorCode.unsupported_version
        return None


class ConsumerGroupHeartbeatHandler(_ConsumerProtocolHandler):
    """Answers ConsumerGroupHeartbeat (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        values = heartbeat_fields(body)
        response_type = response_schema(CONSUMER_GROUP_HEARTBEAT_KEY, request.api_version)
        refusal = self._refusal()
        if refusal is not None:
            return build(response_type, {**values, "error_code": refusal, "member_id": None, "member_epoch": 0})
        refusal = heartbeat_refusal(self._access, context, body.group_id, body.subscribed_topic_names)
        if refusal is not None:
            return build(response_type, {**values, "error_code": refusal})
        heartbeat = HeartbeatRequest(
            **heartbeat_member(request),
            instance_id=body.instance_id,
            rebalance_timeout_ms=milliseconds(body.rebalance_timeout),
            subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
            server_assignor=body.server_assignor,
            owned=None if body.topic_partitions is None else _assignment(body.topic_partitions),
            api_version=request.api_version,
        )
        try:
            result = await self._view.consumer_group_heartbeat(heartbeat)
        except RaybrokerError as exc:
            return build(response_type, {**values, "error_code": coordinator_error_code(exc)})
        return build(
            response_type,
            {
                **heartbeat_answered(values, result),
                "error_code": group_error_code(result.error),
                "error_message": result.message,
            },
        )


class ConsumerGroupDescribeHandler(_ConsumerProtocolHandler):
    """Answers ConsumerGroupDescribe (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        refusal = self._refusal()
        described = [
            failed_group_description(group_id, refusal, None)
            if refusal is not None
            else await self._describe(group_id, request.context, request.api_version)
            for group_id in body.group_ids
        ]
        return describe_answer(request, CONSUMER_GROUP_DESCRIBE_KEY, described, self._access)

    async def _describe(self, group_id: str, context: ConnectionContext, version: int) -> dict[str, Any]:
        if not allows(self._access, context, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return failed_group_description(group_id, ErrorCode.group_authorization_failed, None)
        if not group_id:
            return failed_group_description(group_id, ErrorCode.invalid_group_id, None)
        try:
            group = await self._view.describe_consumer_group(group_id)
            # Kafka tells a group of the classic protocol (members, or committed offsets only) from no group.
            classic = None if group is not None else await self._view.describe_group(group_id)
        except RaybrokerError as exc:
            return failed_group_description(group_id, coordinator_error_code(exc), None)
        if group is None:
            message = f"Group {group_id} is not a consumer group." if classic else f"Group {group_id} not found."
            return failed_group_description(group_id, ErrorCode.group_id_not_found, message)
        return _described(group, version)


def _described(group: ConsumerGroupDescription, version: int) -> dict[str, Any]:
    return {
        **described_group_fields(group),
        "members": [
            {
                "member_id": member.member_id,
                "instance_id": member.instance_id,
                "rack_id": member.rack_id,
                "member_epoch": member.member_epoch,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "subscribed_topic_names": list(member.subscribed_topic_names),
                "subscribed_topic_regex": member.subscribed_topic_regex,
                "assignment": described_assignment(member.assignment, group.topic_names),
                "target_assignment": described_assignment(member.target_assignment, group.topic_names),
                "member_type": _member_type(member, version),
            }
            for member in group.members
        ],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


class DescribedGroup(Protocol):
    """What ConsumerGroupDescribe and ShareGroupDescribe show of a group above its members."""

    @property
    def group_id(self) -> str: ...

    @property
    def state(self) -> Any: ...

    @property
    def group_epoch(self) -> int: ...

    @property
    def assignment_epoch(self) -> int: ...

    @property
    def assignor_name(self) -> str: ...


def described_group_fields(group: DescribedGroup) -> dict[str, Any]:
    """A described group's entry above its members (the same in ConsumerGroupDescribe and ShareGroupDescribe)."""
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state.value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor_name,
    }


def described_assignment(assignment: Assignment, names: Mapping[uuid.UUID, str]) -> dict[str, Any]:
    """A member's assignment as the describe APIs show it: by topic name, each topic's id, name and partitions."""
    return {
        "topic_partitions": [
            {"topic_id": topic_id, "topic_name": names.get(topic_id, ""), "partitions": sorted(partitions)}
            for topic_id, partitions in sorted(assignment.items(), key=lambda item: names.get(item[0], ""))
        ]
    }


def describe_answer(request: Request, key: int, described: list[dict[str, Any]], access: AccessControl | None) -> Any:
    """A ConsumerGroupDescribe or ShareGroupDescribe answer of `described` groups, each described one with its
    authorized operations when the request asks for them."""
    if request.body.include_authorized_operations:
        add_group_operations(access, request.context, described)
    return build(response_schema(key, request.api_version), {"throttle_time": 0, "groups": described})


def failed_group_description(group_id: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    """A described group's entry answering `code`: the same fields in ConsumerGroupDescribe and ShareGroupDescribe."""
    return {
        "error_code": code,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _assignment(topic_partitions: Any) -> Assignment:
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for topic in topic_partitions:
        if topic.topic_id is not None:
            owned[topic.topic_id] = owned.get(topic.topic_id, frozenset()) | frozenset(topic.partitions)
    return owned


def assignment_by_topic_id(assignment: Assignment) -> list[dict[str, Any]]:
    """A heartbeat answer's assignment: partitions by topic id (ShareGroupHeartbeat's too)."""
    return [
        {"topic_id": topic_id, "partitions": sorted(partitions)}
        for topic_id, partitions in sorted(assignment.items(), key=lambda item: str(item[0]))
    ]


def coordinator_client_host(context: ConnectionContext) -> str:
    """The client's address as Kafka's coordinator writes it (`InetAddress.toString`, with a leading slash)."""
    return f"/{context.client_host}" if context.client_host else ""


def _member_type(member: ConsumerMemberDescription, version: int) -> int:
    """The member's type in ConsumerGroupDescribe v1+ (-1, unknown, before)."""
    if version < 1:
        return -1
    return CLASSIC_MEMBER_TYPE if member.classic else CONSUMER_MEMBER_TYPE
