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

Topic ids (KIP-516): every described topic carries its id (v10+). A v12 request may name topics by id instead of by
name (when it names any by id, only those are answered, as Kafka's): a known id is described, or answered
TOPIC_AUTHORIZATION_FAILED with its id and no name (ids are not secret); an unknown one UNKNOWN_TOPIC_ID (100); none
is created. A v10-11 request naming a topic by id, or by no name, answers INVALID_REQUEST (42) for every topic.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    GuardedHandler,
    allows,
    allows_cluster,
    authorized_names,
    authorized_operations,
    cluster_authorized_operations,
)
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint, BrokerView, PartitionInfo, TopicInfo
from storage.errors import RaybrokerError, TopicExistsError, UnknownTopicOrPartitionError
from storage.kafka_uuid import ZERO_UUID

METADATA_KEY = 3
NO_LEADER_ID = -1
# The first Metadata version whose requests may name topics by id (v10-11 carry the field but must leave it zero).
TOPIC_ID_VERSION = 12


def brokers_with(endpoint: BrokerEndpoint, announced: list[BrokerEndpoint], listener_name: str) -> list[BrokerEndpoint]:
    """The announced brokers and this listener's own `endpoint` (which wins for its node id), by node id, each at
    its listener named `listener_name`: the one the asking client connected to."""
    by_id = {broker.node_id: broker for broker in announced}
    by_id[endpoint.node_id] = endpoint
    return [by_id[node_id].for_listener(listener_name) for node_id in sorted(by_id)]


class MetadataHandler(GuardedHandler[BrokerView]):
    """Answers Metadata for one listener (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        endpoint: BrokerEndpoint,
        auto_create_topics_enable: bool,
        num_partitions: int,
        access: AccessControl | None = None,
    ) -> None:
        super().__init__(view, access)
        self._endpoint = endpoint
        self._auto_create_topics_enable = auto_create_topics_enable
        self._num_partitions = num_partitions

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        requested = None if body.topics is None else [topic.name for topic in body.topics]
        if request.api_version == 0 and not requested:
            requested = None
        requested_ids = [] if body.topics is None else [getattr(t, "topic_id", None) or ZERO_UUID for t in body.topics]
        named_by_id = any(topic_id != ZERO_UUID for topic_id in requested_ids)
        if request.api_version < TOPIC_ID_VERSION and requested is not None and (None in requested or named_by_id):
            return _invalid_request(request, body.topics)
        # The topics, the brokers and the cluster id asked together: one round of controller calls, not two.
        topics, announced, cluster_id = await asyncio.gather(
            self._topics(body, context, requested, requested_ids, named_by_id),
            self._view.brokers(),
            self._view.cluster_id(),
        )
        if getattr(body, "include_topic_authorized_operations", False):
            for topic in topics:
                if topic["error_code"] != ErrorCode.topic_authorization_failed:
                    topic["topic_authorized_operations"] = authorized_operations(
                        self._access, context, ResourceType.TOPIC, topic["name"]
                    )
        cluster_operations = cluster_authorized_operations(
            self._access, context, getattr(body, "include_cluster_authorized_operations", False)
        )
        node = self._endpoint
        brokers = brokers_with(node, announced, context.listener_name)
        return build(
            response_schema(METADATA_KEY, request.api_version),
            {
                "throttle_time": 0,
                "brokers": [
                    {"node_id": broker.node_id, "host": broker.host, "port": broker.port, "rack": None}
                    for broker in brokers
                ],
                "cluster_id": cluster_id,
                "controller_id": node.node_id,
                "topics": topics,
                "cluster_authorized_operations": cluster_operations,
                "error_code": ErrorCode.none,
            },
        )

    async def _topics(
        self,
        body: Any,
        context: ConnectionContext,
        requested: list[str | None] | None,
        requested_ids: list[uuid.UUID],
        named_by_id: bool,
    ) -> list[dict[str, Any]]:
        """The request's topic entries: the topics named by id, every topic the principal may describe (`requested`
        None), or the topics named, described, created or carrying their error."""
        if named_by_id:
            return await self._by_id([topic_id for topic_id in requested_ids if topic_id != ZERO_UUID], context)
        if requested is None:
            every = await self._view.topics()
            visible = authorized_names(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, every)
            return [self._describe(every[name]) for name in sorted(visible)]
        may_create = self._auto_create_topics_enable and getattr(body, "allow_auto_topic_creation", True)
        named = [name for name in requested if name is not None]
        visible = authorized_names(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, named)
        cluster_create = allows_cluster(self._access, context, AclOperation.CREATE)
        return list(
            await asyncio.gather(
                *(self._lookup(name, may_create, context, cluster_create, name in visible) for name in requested)
            )
        )

    async def _by_id(self, topic_ids: list[uuid.UUID], context: ConnectionContext) -> list[dict[str, Any]]:
        """The entries of a request naming topics by id (v12): each known one described, or TOPIC_AUTHORIZATION_FAILED
        with its id and no name; an unknown id UNKNOWN_TOPIC_ID. Topic ids are not secret, as in Kafka."""
        names = await self._view.topic_names()
        if any(topic_id not in names for topic_id in topic_ids):
            names = await self._view.topic_names(refresh=True)
        known = [names[topic_id] for topic_id in topic_ids if topic_id in names]
        visible = authorized_names(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, known)
        topics = []
        for topic_id in dict.fromkeys(topic_ids):
            name = names.get(topic_id)
            if name is None:
                topics.append(topic_error(None, ErrorCode.unknown_topic_id, topic_id))
            elif name not in visible:
                topics.append(topic_error(None, ErrorCode.topic_authorization_failed, topic_id))
            else:
                try:
                    topics.append(self._describe(await self._view.topic(name)))
                except UnknownTopicOrPartitionError:
                    topics.append(topic_error(None, ErrorCode.unknown_topic_id, topic_id))
                except RaybrokerError as exc:
                    topics.append(topic_error(name, error_code(exc), topic_id))
        return topics

    async def _lookup(
        self, name: str | None, may_create: bool, context: ConnectionContext, cluster_create: bool, describable: bool
    ) -> dict[str, Any]:
        """One named topic's entry: refused, described, created, or carrying its error."""
        if name is None:
            return topic_error("", ErrorCode.invalid_topic_exception)
        if not describable:
            return topic_error(name, ErrorCode.topic_authorization_failed)
        try:
            return self._describe(await self._view.topic(name))
        except UnknownTopicOrPartitionError as exc:
            if not may_create:
                return topic_error(name, error_code(exc))
        except RaybrokerError as exc:
            return topic_error(name, error_code(exc))
        if not (cluster_create or allows(self._access, context, AclOperation.CREATE, ResourceType.TOPIC, name)):
            return topic_error(name, ErrorCode.topic_authorization_failed)
        try:
            return self._describe(await self._view.create_topic(name, self._num_partitions))
        except TopicExistsError:
            # Created meanwhile by another client.
            return self._describe(await self._view.topic(name))
        except RaybrokerError as exc:
            return topic_error(name, error_code(exc))

    def _describe(self, topic: TopicInfo) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "name": topic.name,
            "topic_id": wire_topic_id(topic.topic_id),
            "is_internal": topic.internal,
            "partitions": [
                partition_entry(self._endpoint.node_id, partition, topic.partition(partition))
                for partition in range(topic.partition_count)
            ],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }


def partition_entry(node_id: int, partition: int, info: PartitionInfo) -> dict[str, Any]:
    """One partition as Metadata describes it, by a listener whose broker is `node_id` (see the module docstring)."""
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
    leader = node_id if info.leader is None else info.leader
    return {
        "error_code": ErrorCode.none,
        "partition_index": partition,
        "leader_id": leader,
        "leader_epoch": info.leader_epoch,
        "replica_nodes": list(info.replicas or (leader,)),
        "isr_nodes": list(info.isr or (leader,)),
        "offline_replicas": list(info.offline_replicas),
    }


def topic_error(name: str | None, code: ErrorCode, topic_id: uuid.UUID = ZERO_UUID) -> dict[str, Any]:
    """A topic answered only with `code`: no partitions, its id only if given (ids are not secret)."""
    return {
        "error_code": code,
        "name": name,
        "topic_id": wire_topic_id(topic_id),
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def wire_topic_id(topic_id: uuid.UUID) -> uuid.UUID | None:
    """A topic id as kio writes it: None stands for the zero id (which kio also reads back as None)."""
    return None if topic_id == ZERO_UUID else topic_id


def _invalid_request(request: Request, topics: Any) -> Any:
    """Kafka's answer to a v10-11 request naming a topic by id or by no name: every topic INVALID_REQUEST (42)."""
    return build(
        response_schema(METADATA_KEY, request.api_version),
        {
            "throttle_time": 0,
            "brokers": [],
            "cluster_id": None,
            "controller_id": NO_LEADER_ID,
            "topics": [
                {
                    **topic_error(topic.name or "", ErrorCode.invalid_request),
                    "topic_id": getattr(topic, "topic_id", None),
                }
                for topic in topics
            ],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            "error_code": ErrorCode.none,
        },
    )
