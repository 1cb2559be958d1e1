"""Share groups' membership APIs (KIP-932) as Kafka 4.2 serves them: ShareGroupHeartbeat (76) v1 and
ShareGroupDescribe (77) v1 (v0 was Kafka 4.0's early access, which 4.1 dropped).

ShareGroupHeartbeat is one call of the group coordinator (`GroupView.share_group_heartbeat`), whose share groups
(`actors.core.shares.share_group.ShareGroups`) give Kafka's answers and refusals (INVALID_REQUEST,
GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED, each with Kafka's message);
the handler translates fields only: partitions travel by topic id, a null subscription means "unchanged", the
client host is the connection's address as Kafka writes it (`/127.0.0.1`).

ShareGroupDescribe answers each group: its state, epochs, assignor (`simple`) and members with their assignments by
topic id and name; a group that is not a share group, GROUP_ID_NOT_FOUND ("Group g not found.").

Both answer UNSUPPORTED_VERSION while the cluster's `share.version` is below 1 (`share_version_gate`).

Authorization, as Kafka's: a heartbeat needs READ on the group (else GROUP_AUTHORIZATION_FAILED) and DESCRIBE on each
topic it subscribes to (else TOPIC_AUTHORIZATION_FAILED); describing needs DESCRIBE on each group.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.core.shares.share_group import ShareGroupDescription, ShareHeartbeatRequest
from cluster.protocol.error_codes import coordinator_error_code, group_error_code
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    GuardedHandler,
    allows,
)
from cluster.protocol.handlers.consumer_group_apis import (
    describe_answer,
    described_assignment,
    described_group_fields,
    failed_group_description,
    heartbeat_answered,
    heartbeat_fields,
    heartbeat_member,
    heartbeat_refusal,
)
from cluster.protocol.handlers.share_version_gate import ShareVersionGate
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.group_view import GroupView
from storage.errors import RaybrokerError

SHARE_GROUP_HEARTBEAT_KEY = 76
SHARE_GROUP_DESCRIBE_KEY = 77


class ShareGroupHeartbeatHandler(GuardedHandler[GroupView]):
    """Answers ShareGroupHeartbeat (see the module docstring)."""

    def __init__(
        self, view: GroupView, access: AccessControl | None = None, features: FeatureCache | None = None
    ) -> None:
        super().__init__(view, access)
        self._gate = ShareVersionGate(features)

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        values = heartbeat_fields(body)
        response_type = response_schema(SHARE_GROUP_HEARTBEAT_KEY, request.api_version)
        unserved = self._gate.refusal(before_known=ErrorCode.coordinator_not_available)
        if unserved is not None:
            return build(response_type, {**values, "error_code": unserved, "member_id": None, "member_epoch": 0})
        refusal = heartbeat_refusal(self._access, context, body.group_id, body.subscribed_topic_names)
        if refusal is not None:
            return build(response_type, {**values, "error_code": refusal})
        heartbeat = ShareHeartbeatRequest(**heartbeat_member(request))
        try:
            answer = await self._view.share_group_heartbeat(heartbeat)
        except RaybrokerError as exc:
            return build(response_type, {**values, "error_code": coordinator_error_code(exc)})
        result = answer.result
        if result is None:
            return build(
                response_type,
                {**values, "error_code": group_error_code(answer.error), "error_message": answer.message},
            )
        return build(response_type, heartbeat_answered(values, result))


class ShareGroupDescribeHandler(GuardedHandler[GroupView]):
    """Answers ShareGroupDescribe (see the module docstring); `broker` names the assigned topics."""

    def __init__(
        self,
        view: GroupView,
        broker: BrokerView,
        access: AccessControl | None = None,
        features: FeatureCache | None = None,
    ) -> None:
        super().__init__(view, access)
        self._broker = broker
        self._gate = ShareVersionGate(features)

    async def __call__(self, request: Request) -> Any:
        body = request.body
        described = [await self._describe(group_id, request) for group_id in body.group_ids]
        return describe_answer(request, SHARE_GROUP_DESCRIBE_KEY, described, self._access)

    async def _describe(self, group_id: str, request: Request) -> dict[str, Any]:
        refusal = self._gate.refusal()
        if refusal is not None:
            return failed_group_description(group_id, refusal, None)
        if not allows(self._access, request.context, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return failed_group_description(group_id, ErrorCode.group_authorization_failed, None)
        if not group_id:
            return failed_group_description(group_id, ErrorCode.invalid_group_id, None)
        try:
            group = await self._view.describe_share_group(group_id)
            names = await self._broker.topic_names() if group is not None else {}
        except RaybrokerError as exc:
            return failed_group_description(group_id, coordinator_error_code(exc), None)
        if group is None:
            return failed_group_description(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        return _described(group, dict(names))


def _described(group: ShareGroupDescription, names: dict[Any, str]) -> dict[str, Any]:
    return {
        **described_group_fields(group),
        "members": [
            {
                "member_id": member.member_id,
                "rack_id": member.rack_id,
                "member_epoch": member.member_epoch,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "subscribed_topic_names": list(member.subscribed_topic_names),
                "assignment": described_assignment(member.assignment, names),
            }
            for member in group.members
        ],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
