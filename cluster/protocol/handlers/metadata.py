"""Metadata (key 3): the brokers, the cluster id, and each topic's partitions with their leader and replicas.

Brokers are the Ray nodes whose Kafka listener runs, each with its `node.id` and `advertised.listeners` address
(announced to the controller when the listener starts), and always this listener itself. Each partition is
described as the controller's replication state has it (`BrokerView.topic`, `PartitionInfo`), in broker ids:
- `leader_id` is the broker of the node whose replica leads, so clients send its produces and fetches there; a
  leader on a node with no listener is named as this listener, which reaches it through Ray (every listener can
  serve every partition: a client with outdated metadata is still answered).
- A partition with no leader (none of its in-sync replicas runs) answers LEADER_NOT_AVAILABLE (5) with leader -1,
  as Kafka's does; clients wait and ask again.
- `leader_epoch` (v7+) is the controller's epoch of the leader, which clients fence stale metadata with.
- `replica_nodes` and `isr_nodes` are the replicas and in-sync replicas (preferred leader first) whose node runs a
  listener, replicas on other nodes having no broker id to name; when none has one, the leader named stands for
  them. `offline_replicas` (v5+) are the listed replicas whose broker is not running.

Topics a client names that do not exist are created with `num.partitions` partitions when
`auto.create.topics.enable` is true and the request allows it (v4+ `allow_auto_topic_creation`; earlier versions
always do); otherwise they are answered with UNKNOWN_TOPIC_OR_PARTITION (3). Creation here is synchronous, so the
topic comes back with its partitions at once. A null topic list (v1+), or an empty one in v0, asks for every topic.

Authorization, as Kafka's: a request for every topic lists only those the principal may DESCRIBE; a named topic it
may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED (29) before anyone looks whether it exists, so the answer
says nothing of its existence. Creating a missing topic needs CREATE on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED. Authorized operations (v8+) are filled when asked: the cluster's (v8-10) if the
principal may DESCRIBE the cluster (else 0), and each listed topic's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from cluster.protocol.broker_view import BrokerEndpoint, BrokerView, PartitionInfo, TopicInfo
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.errors import error_code
from cluster.protocol.framing import Request
from cluster.protocol.handlers.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    allows,
    allows_cluster,
    authorized_names,
    authorized_operations,
)
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from storage.errors import RaybrokerError, TopicExistsError, UnknownTopicOrPartitionError

METADATA_KEY = 3
NO_LEADER_ID = -1


def brokers_with(endpoint: BrokerEndpoint, announced: list[BrokerEndpoint], listener_name: str) -> list[BrokerEndpoint]:
    """The announced brokers and this listener's own `endpoint` (which wins for its node id), by node id, each at
    its listener named `listener_name`: the one the asking client connected to."""
    by_id = {broker.node_id: broker for broker in announced}
    by_id[endpoint.node_id] = endpoint
    return [by_id[node_id].for_listener(listener_name) for node_id in sorted(by_id)]


class MetadataHandler:
    """Answers Metadata for one listener (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        endpoint: BrokerEndpoint,
        auto_create_topics_enable: bool,
        num_partitions: int,
        access: AccessControl | None = None,
    ) -> None:
        self._view = view
        self._endpoint = endpoint
        self._auto_create_topics_enable = auto_create_topics_enable
        self._num_partitions = num_partitions
        self._access = access

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        requested = None if body.topics is None else [topic.name for topic in body.topics]
        if request.api_version == 0 and not requested:
            requested = None
        may_create = self._auto_create_topics_enable and getattr(body, "allow_auto_topic_creation", True)
        if requested is None:
            every = await self._view.topics()
            visible = authorized_names(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, every)
            topics: list[dict[str, Any]] = [self._describe(every[name]) for name in sorted(visible)]
        else:
            named = [name for name in requested if name is not None]
            visible = authorized_names(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, named)
            cluster_create = allows_cluster(self._access, context, AclOperation.CREATE)
            topics = list(
                await asyncio.gather(
                    *(self._lookup(name, may_create, context, cluster_create, name in visible) for name in requested)
                )
            )
        if getattr(body, "include_topic_authorized_operations", False):
            for topic in topics:
                if topic["error_code"] != ErrorCode.topic_authorization_failed:
                    topic["topic_authorized_operations"] = authorized_operations(
                        self._access, context, ResourceType.TOPIC, topic["name"]
                    )
        cluster_operations = AUTHORIZED_OPERATIONS_OMITTED
        if getattr(body, "include_cluster_authorized_operations", False):
            cluster_operations = 0
            if allows_cluster(self._access, context, AclOperation.DESCRIBE):
                cluster_operations = authorized_operations(self._access, context, ResourceType.CLUSTER, CLUSTER_NAME)
        node = self._endpoint
        brokers = brokers_with(node, await self._view.brokers(), context.listener_name)
        return build(
            load_response_schema(METADATA_KEY, request.api_version),
            {
                "throttle_time": 0,
                "brokers": [
                    {"node_id": broker.node_id, "host": broker.host, "port": broker.port, "rack": None}
                    for broker in brokers
                ],
                "cluster_id": await self._view.cluster_id(),
                "controller_id": node.node_id,
                "topics": topics,
                "cluster_authorized_operations": cluster_operations,
                "error_code": ErrorCode.none,
            },
        )

    async def _lookup(
        self, name: str | None, may_create: bool, context: ConnectionContext, cluster_create: bool, describable: bool
    ) -> dict[str, Any]:
        """One named topic's entry: refused, described, created, or carrying its error."""
        if name is None:
            return _topic_error("", ErrorCode.invalid_topic_exception)
        if not describable:
            return _topic_error(name, ErrorCode.topic_authorization_failed)
        try:
            return self._describe(await self._view.topic(name))
        except UnknownTopicOrPartitionError as exc:
            if not may_create:
                return _topic_error(name, error_code(exc))
        except RaybrokerError as exc:
            return _topic_error(name, error_code(exc))
        if not (cluster_create or allows(self._access, context, AclOperation.CREATE, ResourceType.TOPIC, name)):
            return _topic_error(name, ErrorCode.topic_authorization_failed)
        try:
            return self._describe(await self._view.create_topic(name, self._num_partitions))
        except TopicExistsError:
            # Created meanwhile by another client.
            return self._describe(await self._view.topic(name))
        except RaybrokerError as exc:
            return _topic_error(name, error_code(exc))

    def _describe(self, topic: TopicInfo) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "name": topic.name,
            "topic_id": None,
            "is_internal": topic.internal,
            "partitions": [
                self._partition(partition, topic.partition(partition)) for partition in range(topic.partition_count)
            ],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    def _partition(self, partition: int, info: PartitionInfo) -> dict[str, Any]:
        if info.offline:
            return {
                "error_code": ErrorCode.leader_not_available,
                "partition_index": partition,
                "leader_id": NO_LEADER_ID,
                "leader_epoch": info.leader_epoch,
                "replica_nodes": list(info.replicas),
                "isr_nodes": list(info.isr),
                "offline_replicas": list(info.offline_replicas),
            }
        leader = self._endpoint.node_id if info.leader is None else info.leader
        return {
            "error_code": ErrorCode.none,
            "partition_index": partition,
            "leader_id": leader,
            "leader_epoch": info.leader_epoch,
            "replica_nodes": list(info.replicas or (leader,)),
            "isr_nodes": list(info.isr or (leader,)),
            "offline_replicas": list(info.offline_replicas),
        }


def _topic_error(name: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
