"""The classic group protocol: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13).

Each handler turns its request into one call of the group coordinator (`GroupView`), whose membership state
machine (`actors.core.groups.group_membership`, or for a classic member of a consumer-protocol group
`actors.core.groups.consumer_group_state`) gives Kafka's answers; the handlers only translate fields. A JoinGroup
or SyncGroup answers once the coordinator has the answer (every member joined, or the leader's assignment came),
which is why a client's request timeout for them is its `rebalance.timeout.ms` plus a margin.

Version notes: JoinGroup v0 has no `rebalance_timeout` (its session timeout serves as both, as in Kafka); v4+
asks a new member to join again with the id it is given (MEMBER_ID_REQUIRED, 79); v7+ reports the protocol
type and a nullable protocol name; v9+ may tell a static leader that rejoined a Stable group to skip its
assignment. LeaveGroup v0-2 names one member, v3+ a list with an answer per member. Static membership
(`group_instance_id`, KIP-345: JoinGroup v5+, SyncGroup and Heartbeat v3+, LeaveGroup v3+) is Kafka's: an instance
that joins again under a new member id takes its previous member's place without a rebalance, and the member id it
replaced is fenced (FENCED_INSTANCE_ID).

Authorization: each needs READ on the group, else it answers GROUP_AUTHORIZATION_FAILED (30) without reaching the
coordinator (a refused JoinGroup names no member id, as Kafka's).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.groups.group_membership import GroupError, JoinResult
from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.error_codes import coordinator_error_code, group_error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows
from cluster.protocol.messages import build, milliseconds
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.group_view import GroupView
from storage.errors import RaybrokerError

JOIN_GROUP_KEY = 11
HEARTBEAT_KEY = 12
LEAVE_GROUP_KEY = 13
SYNC_GROUP_KEY = 14
FIRST_MEMBER_ID_REQUIRED_VERSION = 4
FIRST_NULLABLE_PROTOCOL_NAME_VERSION = 7
FIRST_BATCHED_LEAVE_VERSION = 3
FIRST_SKIP_ASSIGNMENT_VERSION = 9
NO_MEMBER_ID = ""


def _may_read(access: AccessControl | None, request: Request) -> bool:
    return allows(access, request.context, AclOperation.READ, ResourceType.GROUP, request.body.group_id)


class JoinGroupHandler(GuardedHandler[GroupView]):
    """Answers JoinGroup (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        session_timeout_ms = milliseconds(body.session_timeout)
        rebalance_timeout = getattr(body, "rebalance_timeout", None)
        rebalance_timeout_ms = session_timeout_ms if rebalance_timeout is None else milliseconds(rebalance_timeout)
        if not _may_read(self._access, request):
            return self._answer(
                request, JoinResult(GroupError.NONE, NO_MEMBER_ID), ErrorCode.group_authorization_failed
            )
        try:
            result = await self._view.join_group(
                body.group_id,
                body.member_id,
                group_instance_id=getattr(body, "group_instance_id", None),
                client_id=request.client_id or "",
                client_host="",
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                protocol_type=body.protocol_type,
                protocols=[(protocol.name, protocol.metadata) for protocol in body.protocols],
                require_known_member_id=request.api_version >= FIRST_MEMBER_ID_REQUIRED_VERSION,
                skip_assignment_supported=request.api_version >= FIRST_SKIP_ASSIGNMENT_VERSION,
            )
            code = group_error_code(result.error)
        except RaybrokerError as exc:
            # The coordinator could not be asked: the answer carries the member id it was sent, and the error.
            result, code = JoinResult(GroupError.NONE, body.member_id), coordinator_error_code(exc)
        return self._answer(request, result, code)

    @staticmethod
    def _answer(request: Request, result: JoinResult, code: ErrorCode) -> Any:
        failed = code != ErrorCode.none
        no_name = None if request.api_version >= FIRST_NULLABLE_PROTOCOL_NAME_VERSION else ""
        return build(
            response_schema(JOIN_GROUP_KEY, request.api_version),
            {
                "throttle_time": 0,
                "error_code": code,
                "generation_id": -1 if failed else result.generation_id,
                "protocol_type": None if failed else result.protocol_type,
                "protocol_name": no_name if failed else result.protocol_name,
                "leader": "" if failed else result.leader,
                "skip_assignment": False if failed else result.skip_assignment,
                "member_id": result.member_id,
                "members": [
                    {
                        "member_id": member.member_id,
                        "group_instance_id": member.group_instance_id,
                        "metadata": member.metadata,
                    }
                    for member in result.members
                ],
            },
        )


class SyncGroupHandler(GuardedHandler[GroupView]):
    """Answers SyncGroup (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        values: dict[str, Any] = {"throttle_time": 0, "protocol_type": None, "protocol_name": None, "assignment": b""}
        if not _may_read(self._access, request):
            values["error_code"] = ErrorCode.group_authorization_failed
            return build(response_schema(SYNC_GROUP_KEY, request.api_version), values)
        try:
            result = await self._view.sync_group(
                body.group_id,
                body.member_id,
                body.generation_id,
                {item.member_id: item.assignment for item in body.assignments},
                getattr(body, "protocol_type", None),
                getattr(body, "protocol_name", None),
                getattr(body, "group_instance_id", None),
            )
        except RaybrokerError as exc:
            values["error_code"] = coordinator_error_code(exc)
        else:
            values["error_code"] = group_error_code(result.error)
            if result.error == GroupError.NONE:
                values.update(
                    protocol_type=result.protocol_type, protocol_name=result.protocol_name, assignment=result.assignment
                )
        return build(response_schema(SYNC_GROUP_KEY, request.api_version), values)


class HeartbeatHandler(GuardedHandler[GroupView]):
    """Answers Heartbeat: NONE, or what the member must do (rejoin: REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID...)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        if not _may_read(self._access, request):
            code = ErrorCode.group_authorization_failed
        else:
            try:
                verdict = await self._view.heartbeat(
                    body.group_id, body.member_id, body.generation_id, getattr(body, "group_instance_id", None)
                )
                code = group_error_code(verdict)
            except RaybrokerError as exc:
                code = coordinator_error_code(exc)
        return build(response_schema(HEARTBEAT_KEY, request.api_version), {"throttle_time": 0, "error_code": code})


class LeaveGroupHandler(GuardedHandler[GroupView]):
    """Answers LeaveGroup (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        response_type = response_schema(LEAVE_GROUP_KEY, request.api_version)
        batched = request.api_version >= FIRST_BATCHED_LEAVE_VERSION
        leaving: list[tuple[str, str | None]] = (
            [(m.member_id, m.group_instance_id) for m in body.members] if batched else [(body.member_id, None)]
        )
        if not _may_read(self._access, request):
            code = ErrorCode.group_authorization_failed
            return build(response_type, {"throttle_time": 0, "error_code": code, "members": []})
        try:
            outcome = await self._view.leave_group(body.group_id, leaving)
        except RaybrokerError as exc:
            return build(response_type, {"throttle_time": 0, "error_code": coordinator_error_code(exc), "members": []})
        if not batched:
            return build(response_type, {"throttle_time": 0, "error_code": group_error_code(outcome[0])})
        members = [
            {"member_id": member_id, "group_instance_id": instance, "error_code": group_error_code(verdict)}
            for (member_id, instance), verdict in zip(leaving, outcome, strict=True)
        ]
        return build(response_type, {"throttle_time": 0, "error_code": ErrorCode.none, "members": members})
