"""ListGroups (16), DescribeGroups (15) and DeleteGroups (42): the groups the coordinator knows, for admin tools.

A group is known when it has members (or had them since the coordinator started) or committed offsets: a group
whose consumers only commit (raybroker's Python `Consumer`, a consumer using `assign`) is listed as an Empty group
with no protocol type, as Kafka lists it. ListGroups v5 tells each group's type: "classic", or "consumer" for a group
of the consumer protocol (KIP-848), listed with its own states (Empty, Assigning, Reconciling, Stable).

DescribeGroups of a group the coordinator does not know, or of a consumer-protocol group, answers state "Dead" with
no error up to v5, and GROUP_ID_NOT_FOUND (69) from v6, as Kafka 4 does. Members' metadata and assignments are
shown in a Stable group only (Kafka's rule: in the other states they are being replaced). DeleteGroups removes an
Empty group's committed offsets (tombstones in `__consumer_offsets`); a group with members answers NON_EMPTY_GROUP
(68). An empty share group's share-partitions are dropped at every partition's leader first, as Kafka's coordinator
deletes a share group's state through its persister: a share group created again under that name starts afresh.

Authorization, as Kafka's: ListGroups lists every group to a principal that may DESCRIBE the cluster, else only
the groups it may DESCRIBE; DescribeGroups needs DESCRIBE on each group and DeleteGroups DELETE, else that group
answers GROUP_AUTHORIZATION_FAILED (30). DescribeGroups v3+ fills a described group's authorized operations when
asked (`include_authorized_operations`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.groups.group_membership import GroupDescription, GroupError, GroupState
from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import coordinator_error_code, group_error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    GuardedHandler,
    add_group_operations,
    allows,
    allows_cluster,
    authorized_names,
)
from cluster.protocol.handlers.share_group_offsets import drop_share_states
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.group_view import GroupView
from storage.errors import RaybrokerError

DESCRIBE_GROUPS_KEY = 15
LIST_GROUPS_KEY = 16
DELETE_GROUPS_KEY = 42
FIRST_NOT_FOUND_DESCRIBE_VERSION = 6


class ListGroupsHandler(GuardedHandler[GroupView]):
    """Answers ListGroups, with v4's state filter and v5's type filter (both case-insensitive, as Kafka)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        response_type = response_schema(LIST_GROUPS_KEY, request.api_version)
        states = {state.lower() for state in getattr(body, "states_filter", ())}
        types = {kind.lower() for kind in getattr(body, "types_filter", ())}
        try:
            every = await self._view.list_groups()
        except RaybrokerError as exc:
            return build(response_type, {"throttle_time": 0, "error_code": coordinator_error_code(exc), "groups": []})
        if not allows_cluster(self._access, request.context, AclOperation.DESCRIBE):
            visible = authorized_names(
                self._access, request.context, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in every)
            )
            every = [group for group in every if group.group_id in visible]
        listed = [
            {
                "group_id": group.group_id,
                "protocol_type": group.protocol_type,
                "group_state": group.state.value,
                "group_type": group.group_type,
            }
            for group in every
            if (not states or group.state.value.lower() in states) and (not types or group.group_type in types)
        ]
        return build(response_type, {"throttle_time": 0, "error_code": ErrorCode.none, "groups": listed})


class DescribeGroupsHandler(GuardedHandler[GroupView]):
    """Answers DescribeGroups (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        context = request.context
        described = [await self._describe(group, request.api_version, context) for group in request.body.groups]
        if getattr(request.body, "include_authorized_operations", False):
            add_group_operations(self._access, context, described)
        return build(
            response_schema(DESCRIBE_GROUPS_KEY, request.api_version), {"throttle_time": 0, "groups": described}
        )

    async def _describe(self, group_id: str, version: int, context: ConnectionContext) -> dict[str, Any]:
        if not allows(self._access, context, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            # Kafka's `groupError`: nothing of the group, not even a state.
            return {**_described(group_id, ErrorCode.group_authorization_failed, None), "group_state": ""}
        if not group_id:
            return _described(group_id, ErrorCode.invalid_group_id, None)
        try:
            group = await self._view.describe_group(group_id)
        except RaybrokerError as exc:
            return _described(group_id, coordinator_error_code(exc), None)
        if group is None and version >= FIRST_NOT_FOUND_DESCRIBE_VERSION:
            return _described(group_id, ErrorCode.group_id_not_found, None)
        return _described(group_id, ErrorCode.none, group)


def _described(group_id: str, code: ErrorCode, group: GroupDescription | None) -> dict[str, Any]:
    members = [] if group is None else group.members
    return {
        "error_code": code,
        "error_message": None,
        "group_id": group_id,
        "group_state": GroupState.DEAD.value if group is None else group.state.value,
        "protocol_type": "" if group is None else group.protocol_type,
        "protocol_data": "" if group is None else group.protocol_name,
        "members": [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_metadata": member.metadata,
                "member_assignment": member.assignment,
            }
            for member in members
        ],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


class DeleteGroupsHandler(GuardedHandler[GroupView]):
    """Answers DeleteGroups, one result per group named (`partitions`: where an empty share group's share-partitions
    are dropped first)."""

    def __init__(self, view: GroupView, partitions: BrokerView, access: AccessControl | None = None) -> None:
        super().__init__(view, access)
        self._partitions = partitions

    async def __call__(self, request: Request) -> Any:
        results = []
        for group_id in request.body.groups_names:
            if not allows(self._access, request.context, AclOperation.DELETE, ResourceType.GROUP, group_id):
                results.append({"group_id": group_id, "error_code": ErrorCode.group_authorization_failed})
                continue
            try:
                if await self._view.admit_share_offsets_change(group_id, False) == GroupError.NONE:
                    topics = await self._partitions.topics()
                    await drop_share_states(self._partitions, group_id, topics.values())
                code = group_error_code(await self._view.delete_group(group_id))
            except RaybrokerError as exc:
                code = coordinator_error_code(exc)
            results.append({"group_id": group_id, "error_code": code})
        return build(response_schema(DELETE_GROUPS_KEY, request.api_version), {"throttle_time": 0, "results": results})
