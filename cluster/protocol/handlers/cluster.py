"""DescribeCluster (key 60): the cluster id, the controller and the brokers, as Kafka's Admin `describeCluster`.

The brokers are Metadata's (`cluster.protocol.handlers.metadata`): every node's running listener and this one;
each listener reports itself as the controller, since it serves every administrative request itself. Asking
for the controllers' endpoints (v1+ `endpoint_type` 2) answers UNSUPPORTED_ENDPOINT_TYPE (115), as a Kafka
broker does; no broker is fenced.

Authorization, as a Kafka broker's: none is needed to ask. The cluster's authorized operations are filled when
asked (`include_cluster_authorized_operations`): those the principal may do if it may DESCRIBE the cluster, else 0;
not asked, Kafka's "omitted" sentinel.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import (
    GuardedHandler,
    cluster_authorized_operations,
)
from cluster.protocol.handlers.metadata import brokers_with
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint, BrokerView

DESCRIBE_CLUSTER_KEY = 60
BROKERS_ENDPOINT = 1


class DescribeClusterHandler(GuardedHandler[BrokerView]):
    """Answers DescribeCluster (see the module docstring)."""

    def __init__(self, view: BrokerView, endpoint: BrokerEndpoint, access: AccessControl | None = None) -> None:
        super().__init__(view, access)
        self._endpoint = endpoint

    async def __call__(self, request: Request) -> Any:
        endpoint_type = getattr(request.body, "endpoint_type", BROKERS_ENDPOINT)
        node = self._endpoint
        operations = cluster_authorized_operations(
            self._access, request.context, request.body.include_cluster_authorized_operations
        )
        answer: dict[str, Any] = {
            "throttle_time": 0,
            "endpoint_type": endpoint_type,
            "cluster_id": await self._view.cluster_id(),
            "controller_id": node.node_id,
            "cluster_authorized_operations": operations,
        }
        if endpoint_type != BROKERS_ENDPOINT:
            answer.update(
                error_code=ErrorCode.unsupported_endpoint_type,
                error_message=f"endpoint type {endpoint_type}: this listener serves brokers (1) only",
                brokers=[],
            )
        else:
            answer.update(
                error_code=ErrorCode.none,
                error_message=None,
                brokers=[
                    {
                        "broker_id": broker.node_id,
                        "host": broker.host,
                        "port": broker.port,
                        "rack": None,
                        "is_fenced": False,
                    }
                    for broker in brokers_with(node, await self._view.brokers(), request.context.listener_name)
                ],
            )
        return build(response_schema(DESCRIBE_CLUSTER_KEY, request.api_version), answer)
