"""FindCoordinator (key 10): which broker coordinates a consumer group or a transactional id.

The answer is this listener's own broker, as Metadata names it the leader of every partition: every listener
reaches the one group coordinator and the one transaction coordinator of the cluster, so any of them can serve any
group's or transactional id's requests and a client keeps talking to the address it bootstrapped from. Versions 0-3
ask for one key, 4+ for a list. Group keys (key type 0) and transactional keys (type 1) are served; a share-group
key (type 2) answers INVALID_REQUEST (42); an empty group id answers INVALID_GROUP_ID, an empty transactional id
INVALID_REQUEST.

Authorization comes first, as Kafka's: a group key needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED,
30), a transactional key DESCRIBE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import allows
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint

FIND_COORDINATOR_KEY = 10
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
FIRST_BATCHED_VERSION = 4


class FindCoordinatorHandler:
    """Answers FindCoordinator for one listener (see the module docstring)."""

    def __init__(self, endpoint: BrokerEndpoint, access: AccessControl | None = None) -> None:
        self._endpoint = endpoint
        self._access = access

    async def __call__(self, request: Request) -> Any:
        body = request.body
        key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
        response_type = response_schema(FIND_COORDINATOR_KEY, request.api_version)
        node = self._endpoint.for_listener(request.context.listener_name)
        if request.api_version >= FIRST_BATCHED_VERSION:
            coordinators = [
                {"key": key, **self._locate(key_type, key, node, request.context)} for key in body.coordinator_keys
            ]
            return build(response_type, {"throttle_time": 0, "coordinators": coordinators})
        return build(response_type, {"throttle_time": 0, **self._locate(key_type, body.key, node, request.context)})

    def _locate(self, key_type: int, key: str, node: BrokerEndpoint, context: ConnectionContext) -> dict[str, Any]:
        if key_type == GROUP_KEY_TYPE and not allows(
            self._access, context, AclOperation.DESCRIBE, ResourceType.GROUP, key
        ):
            return _refused(ErrorCode.group_authorization_failed, f"not authorized to DESCRIBE group {key!r}")
        if key_type == TRANSACTION_KEY_TYPE and not allows(
            self._access, context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
        ):
            return _refused(
                ErrorCode.transactional_id_authorization_failed, f"not authorized to DESCRIBE transactional id {key!r}"
            )
        if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
            return _refused(ErrorCode.invalid_request, f"key type {key_type} has no coordinator in raybroker")
        if not key and key_type == TRANSACTION_KEY_TYPE:
            return _refused(ErrorCode.invalid_request, "a transactional id must not be empty")
        if not key:
            return _refused(ErrorCode.invalid_group_id, "a group id must not be empty")
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
        }


def _refused(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
