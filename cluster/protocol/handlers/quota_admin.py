"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49): the cluster's client quotas, as Kafka's
`kafka-configs --entity-type users|clients|ips` and Admin clients manage them.

The quotas live in the controller (`actors.core.quotas.client_quotas`, whose rules and messages are Kafka's); after
a change this listener's `QuotaEnforcer` reloads them at once, other listeners within their refresh interval.

| API                  | needs                     | refused: CLUSTER_AUTHORIZATION_FAILED (31) |
|----------------------|---------------------------|--------------------------------------------|
| DescribeClientQuotas | DESCRIBE_CONFIGS on cluster | for the answer                           |
| AlterClientQuotas    | ALTER_CONFIGS on cluster  | for every entity                           |

DescribeClientQuotas answers a malformed filter INVALID_REQUEST (42) and an unknown entity type UNSUPPORTED_VERSION
(35), with Kafka's message and no entries; AlterClientQuotas answers each entity on its own: NONE, or INVALID_REQUEST
with Kafka's message, the other entities applied (`validate_only` applies none).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.quotas.client_quotas import Entity, FilterComponent, QuotaAlteration, UnknownEntityTypeError
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows_cluster
from cluster.protocol.messages import build
from cluster.protocol.quota_enforcer import QuotaEnforcer
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.security_view import SecurityView
from storage.errors import RaybrokerError

DESCRIBE_CLIENT_QUOTAS_KEY = 48
ALTER_CLIENT_QUOTAS_KEY = 49


def _entity(pairs: Entity | tuple[tuple[str, str | None], ...]) -> list[dict[str, Any]]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in pairs]


class DescribeClientQuotasHandler(GuardedHandler[SecurityView]):
    """Answers DescribeClientQuotas (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        response_type = response_schema(DESCRIBE_CLIENT_QUOTAS_KEY, request.api_version)
        body = request.body
        if not allows_cluster(self._access, request.context, AclOperation.DESCRIBE_CONFIGS):
            return self._failed(response_type, ErrorCode.cluster_authorization_failed, None)
        components = [FilterComponent(c.entity_type, int(c.match_type), c.match) for c in body.components]
        try:
            found = await self._view.describe_client_quotas(components, bool(body.strict))
        except UnknownEntityTypeError as exc:
            return self._failed(response_type, ErrorCode.unsupported_version, str(exc))
        except RaybrokerError as exc:
            return self._failed(response_type, error_code(exc), str(exc))
        entries = [
            {"entity": _entity(entity), "values": [{"key": key, "value": value} for key, value in values.items()]}
            for entity, values in found
        ]
        return build(
            response_type, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": entries}
        )

    @staticmethod
    def _failed(response_type: Any, code: ErrorCode, message: str | None) -> Any:
        return build(response_type, {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None})


class AlterClientQuotasHandler(GuardedHandler[SecurityView]):
    """Answers AlterClientQuotas (see the module docstring); reloads this listener's quotas after a change."""

    def __init__(self, security: SecurityView, quotas: QuotaEnforcer, access: AccessControl | None = None) -> None:
        super().__init__(security, access)
        self._quotas = quotas

    async def __call__(self, request: Request) -> Any:
        body = request.body
        alterations = [
            QuotaAlteration(
                tuple((e.entity_type, e.entity_name) for e in entry.entity),
                tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops),
            )
            for entry in body.entries
        ]
        results: list[tuple[ErrorCode, str | None]]
        if not allows_cluster(self._access, request.context, AclOperation.ALTER_CONFIGS):
            results = [(ErrorCode.cluster_authorization_failed, None)] * len(alterations)
        else:
            try:
                answers = await self._view.alter_client_quotas(alterations, bool(body.validate_only))
            except RaybrokerError as exc:
                results = [(error_code(exc), str(exc))] * len(alterations)
            else:
                results = [(ErrorCode.none, None) if a is None else (ErrorCode.invalid_request, a) for a in answers]
                if not body.validate_only:
                    await self._quotas.refresh()
        return build(
            response_schema(ALTER_CLIENT_QUOTAS_KEY, request.api_version),
            {
                "throttle_time": 0,
                "entries": [
                    {"error_code": code, "error_message": message, "entity": _entity(alteration.entity)}
                    for alteration, (code, message) in zip(alterations, results, strict=True)
                ],
            },
        )
