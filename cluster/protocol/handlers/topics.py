"""CreateTopics (key 19), DeleteTopics (key 20) and CreatePartitions (key 37): topic administration.

Each topic gets its own error code and message; a request never fails as a whole. The broker answers once the
work is done (topic creation and growth are synchronous in the controller), so `timeout_ms` is not waited on.

CreateTopics:
- `num_partitions` -1 takes the broker's `num.partitions`; 0 or below -1 answers INVALID_PARTITIONS (37).
- `replication_factor` -1 takes the broker's `default.replication.factor`; the controller places that many replicas
  of each partition on distinct brokers. 0, below -1, or more than the running brokers answers
  INVALID_REPLICATION_FACTOR (38).
- Manual `assignments` replace both counts (sent with either, INVALID_REQUEST, 42) and place each partition's
  replicas on the brokers they name, the first preferred as leader, as Kafka's controller does. They must number
  the partitions 0..n-1 once each, and each must name registered brokers (a listener's `node.id`), each once, as
  many as the first partition has; else INVALID_REPLICA_ASSIGNMENT (39) with Kafka's message.
- `configs` are Kafka's topic configs, checked against Kafka's names and ranges: INVALID_CONFIG (40) otherwise,
  a null value included. A topic named twice in one request answers INVALID_REQUEST for each entry.
- `validate_only` runs every check and creates nothing. v5+ answers carry the partition count, the replication
  factor and the topic's configs with their sources (`cluster.protocol.config_entries`).
- v7+ answers carry the new topic's id (KIP-516; drawn by the controller, null for `validate_only`).

DeleteTopics deletes by name, or (v6) by topic id: an unknown id answers UNKNOWN_TOPIC_ID (100), an entry naming both
a name and an id, or neither, INVALID_REQUEST (42), as Kafka's controller; answers carry the deleted topic's name and
id (an id entry refused for DELETE keeps its name only if the principal may DESCRIBE the topic). With
`delete.topic.enable=false` every entry answers TOPIC_DELETION_DISABLED (73).

CreatePartitions grows a topic to `count` (not growing it answers INVALID_PARTITIONS), each new partition with the
topic's replication factor, placed by the controller or by the given `assignments` (one per new partition, each
checked as CreateTopics checks them, with as many replicas as the topic's replication factor); `validate_only`
changes nothing.

A `controller_mutation_rate` quota (KIP-599; `actors.core.quotas.controller_mutations`) applying to the connection's
user and client id is charged each topic's partitions (created, added or deleted) once the topic passed every other
check (a creation or growth is validated first) and before it changes anything, `validate_only` included. Strict,
from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3, a topic asked while the quota's bucket is below zero
answers THROTTLING_QUOTA_EXCEEDED (89, with no message, as Kafka's) and is not carried out; older versions carry out
every topic. Either way the answer's `throttle_time_ms` is the time until the bucket is back at zero, and the
connection is muted for it.

Authorization, as Kafka's controller checks it, after the duplicate-name check and before anything else:
- CreateTopics needs CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED (29); a topic created
  by a principal that may not DESCRIBE_CONFIGS it answers without its configs, `topic_config_error_code` 29.
- DeleteTopics needs DELETE on the cluster, or DESCRIBE and DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED,
  whether the topic exists or not.
- CreatePartitions needs ALTER on the topic, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.quotas.controller_mutations import MutationQuota, ThrottlingQuotaExceededError
from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.config_entries import ConfigDescriber
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, allows_cluster
from cluster.protocol.handlers.metadata import wire_topic_id
from cluster.protocol.messages import build
from cluster.protocol.quota_enforcer import QuotaEnforcer
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from storage.errors import RaybrokerError
from storage.kafka_uuid import ZERO_UUID

CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
CREATE_PARTITIONS_KEY = 37
USE_DEFAULT = -1  # num_partitions / replication_factor: the broker's default
BOTH_NAME_AND_ID = "You may not specify both topic name and topic id."
NEITHER_NAME_NOR_ID = "Neither topic name nor id were specified."
# The first versions whose controller_mutation_rate quota is strict (KIP-599).
STRICT_CREATE_TOPICS = 6
STRICT_DELETE_TOPICS = 5
STRICT_CREATE_PARTITIONS = 3


def _mutations(quotas: QuotaEnforcer | None, request: Request, strict_since: int) -> MutationQuota | None:
    """The request's `controller_mutation_rate` quota, None if none applies."""
    if quotas is None:
        return None
    return quotas.mutations(request.context, request.client_id, request.api_version >= strict_since)


def _throttled(quotas: QuotaEnforcer | None, request: Request, mutations: MutationQuota | None) -> int:
    """The answer's throttle time under the request's mutation quota; mutes the connection for it."""
    throttle_ms = 0 if mutations is None else mutations.throttle_time_ms()
    if quotas is not None and throttle_ms > 0:
        quotas.mute(request.context, throttle_ms)
    return throttle_ms


def _message(exc: RaybrokerError) -> str | None:
    """A refused topic's error message: none for THROTTLING_QUOTA_EXCEEDED, as Kafka answers it."""
    return None if isinstance(exc, ThrottlingQuotaExceededError) else exc.message


class TopicRequestError(Exception):
    """A topic entry refused before it reaches the broker: the Kafka error code and message to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CreateTopicsHandler(GuardedHandler[BrokerView]):
    """Answers CreateTopics (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        describer: ConfigDescriber,
        num_partitions: int,
        access: AccessControl | None = None,
        quotas: QuotaEnforcer | None = None,
    ) -> None:
        super().__init__(view, access)
        self._describer = describer
        self._num_partitions = num_partitions
        self._quotas = quotas

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        mutations = _mutations(self._quotas, request, STRICT_CREATE_TOPICS)
        named = Counter(topic.name for topic in body.topics)
        cluster_create = allows_cluster(self._access, context, AclOperation.CREATE)
        topics = []
        for topic in body.topics:
            result: dict[str, Any] = {"name": topic.name, "topic_id": None, "configs": None}
            try:
                if named[topic.name] > 1:
                    raise TopicRequestError(ErrorCode.invalid_request, f"topic {topic.name!r} is named more than once")
                if not (
                    cluster_create or allows(self._access, context, AclOperation.CREATE, ResourceType.TOPIC, topic.name)
                ):
                    raise TopicRequestError(ErrorCode.topic_authorization_failed, "Authorization failed.")
                assignment = _assignment(topic)
                partition_count = self._partition_count(topic) if assignment is None else len(assignment)
                factor = _replication_factor(topic)
                configs = _configs(topic.configs)
                if mutations is not None:
                    await self._view.create_topic(topic.name, partition_count, configs, True, factor, assignment)
                    mutations.record(partition_count)
                info = await self._view.create_topic(
                    topic.name, partition_count, configs, body.validate_only, factor, assignment
                )
                if not body.validate_only:
                    result["topic_id"] = wire_topic_id(info.topic_id)
            except TopicRequestError as exc:
                topics.append({**result, "error_code": exc.code, "error_message": exc.message})
                continue
            except RaybrokerError as exc:
                topics.append({**result, "error_code": error_code(exc), "error_message": _message(exc)})
                continue
            if not allows(self._access, context, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name):
                topics.append(
                    {
                        **result,
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "num_partitions": USE_DEFAULT,
                        "replication_factor": USE_DEFAULT,
                        "configs": [],
                        "topic_config_error_code": ErrorCode.topic_authorization_failed,
                    }
                )
                continue
            topics.append(
                {
                    **result,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "num_partitions": info.partition_count,
                    "replication_factor": info.replication_factor,
                    "configs": [entry.as_values() for entry in self._describer.topic_entries(configs)],
                }
            )
        throttle_ms = _throttled(self._quotas, request, mutations)
        return build(
            response_schema(CREATE_TOPICS_KEY, request.api_version), {"throttle_time": throttle_ms, "topics": topics}
        )

    def _partition_count(self, topic: Any) -> int:
        count = self._num_partitions if topic.num_partitions == USE_DEFAULT else topic.num_partitions
        if count < 1:
            raise TopicRequestError(
                ErrorCode.invalid_partitions,
                "number of partitions must be larger than 0, or -1 to use the default value",
            )
        return count


class DeleteTopicsHandler(GuardedHandler[BrokerView]):
    """Answers DeleteTopics (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        delete_topic_enable: bool,
        access: AccessControl | None = None,
        quotas: QuotaEnforcer | None = None,
    ) -> None:
        super().__init__(view, access)
        self._delete_topic_enable = delete_topic_enable
        self._quotas = quotas

    async def __call__(self, request: Request) -> Any:
        body = request.body
        mutations = _mutations(self._quotas, request, STRICT_DELETE_TOPICS)
        if hasattr(body, "topic_names"):
            entries = [(name, ZERO_UUID) for name in body.topic_names]
        else:
            entries = [(topic.name, topic.topic_id or ZERO_UUID) for topic in body.topics]
        cluster_delete = allows_cluster(self._access, request.context, AclOperation.DELETE)
        names_by_id: Mapping[uuid.UUID, str] = {}
        if any(topic_id != ZERO_UUID for _, topic_id in entries):
            names_by_id = await self._view.topic_names(refresh=True)
        responses = []
        for name, topic_id in entries:
            response: dict[str, Any] = {"name": name, "topic_id": wire_topic_id(topic_id), "error_code": ErrorCode.none}
            if not self._delete_topic_enable:
                response.update(error_code=ErrorCode.topic_deletion_disabled, error_message="delete.topic.enable=false")
            elif name is not None and topic_id != ZERO_UUID:
                response.update(error_code=ErrorCode.invalid_request, error_message=BOTH_NAME_AND_ID)
            elif name is None and topic_id == ZERO_UUID:
                response.update(error_code=ErrorCode.invalid_request, error_message=NEITHER_NAME_NOR_ID)
            elif name is None and topic_id not in names_by_id:
                response.update(error_code=ErrorCode.unknown_topic_id, error_message=None)
            else:
                target = name if name is not None else names_by_id[topic_id]
                if not (cluster_delete or self._may_delete(request, target)):
                    describable = allows(
                        self._access, request.context, AclOperation.DESCRIBE, ResourceType.TOPIC, target
                    )
                    response.update(
                        name=target if name is not None or describable else None,
                        error_code=ErrorCode.topic_authorization_failed,
                        error_message=None,
                    )
                else:
                    response.update(await self._delete(target, mutations))
            responses.append(response)
        throttle_ms = _throttled(self._quotas, request, mutations)
        return build(
            response_schema(DELETE_TOPICS_KEY, request.api_version),
            {"throttle_time": throttle_ms, "responses": responses},
        )

    async def _delete(self, name: str, mutations: MutationQuota | None) -> dict[str, Any]:
        """The answer fields of deleting topic `name`: its name and id, or the error."""
        try:
            topic = await self._view.topic(name)
            topic_id = topic.topic_id
            if mutations is not None:
                mutations.record(topic.partition_count)
            await self._view.delete_topic(name)
        except RaybrokerError as exc:
            return {"error_code": error_code(exc), "error_message": _message(exc)}
        return {"name": name, "topic_id": wire_topic_id(topic_id)}

    def _may_delete(self, request: Request, name: str) -> bool:
        return all(
            allows(self._access, request.context, operation, ResourceType.TOPIC, name)
            for operation in (AclOperation.DESCRIBE, AclOperation.DELETE)
        )


class CreatePartitionsHandler(GuardedHandler[BrokerView]):
    """Answers CreatePartitions (see the module docstring)."""

    def __init__(
        self, view: BrokerView, access: AccessControl | None = None, quotas: QuotaEnforcer | None = None
    ) -> None:
        super().__init__(view, access)
        self._quotas = quotas

    async def __call__(self, request: Request) -> Any:
        body = request.body
        mutations = _mutations(self._quotas, request, STRICT_CREATE_PARTITIONS)
        named = Counter(topic.name for topic in body.topics)
        results = []
        for topic in body.topics:
            result: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.none, "error_message": None}
            try:
                if named[topic.name] > 1:
                    raise TopicRequestError(ErrorCode.invalid_request, f"topic {topic.name!r} is named more than once")
                if not allows(self._access, request.context, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                    raise TopicRequestError(ErrorCode.topic_authorization_failed, "The topic authorization is failed.")
                assignment = None if topic.assignments is None else [tuple(a.broker_ids) for a in topic.assignments]
                if mutations is not None:
                    await self._view.create_partitions(topic.name, topic.count, True, assignment)
                    mutations.record(topic.count - (await self._view.topic(topic.name)).partition_count)
                await self._view.create_partitions(topic.name, topic.count, body.validate_only, assignment)
            except TopicRequestError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
            except RaybrokerError as exc:
                result.update(error_code=error_code(exc), error_message=_message(exc))
            results.append(result)
        throttle_ms = _throttled(self._quotas, request, mutations)
        return build(
            response_schema(CREATE_PARTITIONS_KEY, request.api_version),
            {"throttle_time": throttle_ms, "results": results},
        )


def _replication_factor(topic: Any) -> int | None:
    """A CreateTopics entry's replication factor for the view: None for the broker's default; 0 or below -1 is
    INVALID_REPLICATION_FACTOR (the view refuses more than the running brokers)."""
    if topic.assignments:
        return None
    factor: int = topic.replication_factor
    if factor == USE_DEFAULT:
        return None
    if factor < 1:
        raise TopicRequestError(
            ErrorCode.invalid_replication_factor,
            "replication factor must be larger than 0, or -1 to use the default value",
        )
    return factor


def _configs(configs: Any) -> dict[str, str]:
    """A CreateTopics entry's configs as a mapping; a null value is INVALID_CONFIG, as in Kafka."""
    values = {}
    for config in configs:
        if config.value is None:
            raise TopicRequestError(ErrorCode.invalid_config, f"a null value is not supported for {config.name}")
        values[config.name] = config.value
    return values


def _assignment(topic: Any) -> list[tuple[int, ...]] | None:
    """A CreateTopics entry's manual assignment, each partition's broker ids in partition order (None if it gives
    none), refused as Kafka refuses it: INVALID_REQUEST with a partition count or replication factor beside it,
    INVALID_REPLICA_ASSIGNMENT for a partition assigned twice or partitions not numbered 0..n-1."""
    if not topic.assignments:
        return None
    if topic.num_partitions != USE_DEFAULT or topic.replication_factor != USE_DEFAULT:
        raise TopicRequestError(
            ErrorCode.invalid_request,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    by_index: dict[int, tuple[int, ...]] = {}
    for assignment in topic.assignments:
        if assignment.partition_index in by_index:
            raise TopicRequestError(
                ErrorCode.invalid_replica_assignment,
                f"Found multiple manual partition assignments for partition {assignment.partition_index}",
            )
        by_index[assignment.partition_index] = tuple(assignment.broker_ids)
    if sorted(by_index) != list(range(len(by_index))):
        raise TopicRequestError(
            ErrorCode.invalid_replica_assignment,
            "Attempted to create topic with non-consecutive partition ids: "
            f"{sorted(by_index)} are not numbered 0..{len(by_index) - 1}",
        )
    return [by_index[index] for index in range(len(by_index))]
