"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): moving partitions' replicas between
brokers, what `kafka-reassign-partitions.sh` (`--execute`, `--verify`, `--cancel`, `--list`) and the Admin
client's `alterPartitionReassignments` / `listPartitionReassignments` send.

Alter names, per partition, the target replicas by broker id, or null to cancel the reassignment in progress, and
(v1, KIP-860) whether a move may change a partition's replication factor (when not, such a move answers
INVALID_REPLICATION_FACTOR (38) with Kafka's message, "The replication factor is changed from 1 to 2"); the
controller starts each (`actors.core.controller.reassignment`: the new replicas are added, catch up, and the
partition then takes the target alone) and answers it at once, as Kafka's controller does, without waiting for
the move. Per partition: NONE, INVALID_REPLICA_ASSIGNMENT (39) with Kafka's message (an empty list, a broker id not
registered, one named twice), UNKNOWN_TOPIC_OR_PARTITION (3), NO_REASSIGNMENT_IN_PROGRESS (85) for a cancel with
none. List answers every partition being reassigned (a null topic list), or those of the partitions named, with
their replicas, adding and removing replicas.

Authorization, as Kafka's: ALTER on the cluster for Alter, DESCRIBE for List; else the request answers
CLUSTER_AUTHORIZATION_FAILED (31) at the top (and for every partition named in Alter).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows_cluster
from cluster.protocol.messages import build
from cluster.protocol.views.broker_view import BrokerView
from storage.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError, RaybrokerError

ALTER_PARTITION_REASSIGNMENTS_KEY = 45
LIST_PARTITION_REASSIGNMENTS_KEY = 46


class AlterPartitionReassignmentsHandler(GuardedHandler[BrokerView]):
    """Answers AlterPartitionReassignments (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        # v1 (KIP-860): False refuses a move that changes a partition's replication factor; the answer repeats it.
        allow_factor_change = bool(getattr(request.body, "allow_replication_factor_change", True))
        asked = {
            (topic.name, partition.partition_index): None
            if partition.replicas is None
            else tuple(int(broker) for broker in partition.replicas)
            for topic in request.body.topics
            for partition in topic.partitions
        }
        if not allows_cluster(self._access, request.context, AclOperation.ALTER):
            denied = ErrorCode.cluster_authorization_failed
            return _alter_response(request, denied, {key: (denied, None) for key in asked}, allow_factor_change)
        try:
            outcomes = await self._view.alter_partition_reassignments(asked, allow_factor_change)
        except RaybrokerError as exc:
            failed = error_code(exc)
            return _alter_response(request, failed, {key: (failed, str(exc)) for key in asked}, allow_factor_change)
        answers = {key: _answer(outcomes[key]) for key in asked}
        return _alter_response(request, ErrorCode.none, answers, allow_factor_change)


def _answer(outcome: RaybrokerError | None) -> tuple[ErrorCode, str | None]:
    """A partition's code, and Kafka's message for a refused assignment (the other codes carry none, as Kafka's
    controller answers them)."""
    if outcome is None:
        return ErrorCode.none, None
    described = isinstance(outcome, InvalidReplicaAssignmentError | InvalidReplicationFactorError)
    return error_code(outcome), outcome.message if described else None


def _alter_response(
    request: Request, code: ErrorCode, answers: dict[tuple[str, int], tuple[ErrorCode, str | None]], allowed: bool
) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (partition_code, message) in answers.items():
        topics.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": partition_code, "error_message": message}
        )
    return build(
        response_schema(ALTER_PARTITION_REASSIGNMENTS_KEY, request.api_version),
        {
            "throttle_time": 0,
            "allow_replication_factor_change": allowed,
            "error_code": code,
            "error_message": None,
            "responses": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
        },
    )


class ListPartitionReassignmentsHandler(GuardedHandler[BrokerView]):
    """Answers ListPartitionReassignments (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        if not allows_cluster(self._access, request.context, AclOperation.DESCRIBE):
            return _list_response(request, ErrorCode.cluster_authorization_failed, None, [])
        named = (
            None
            if request.body.topics is None
            else {(topic.name, partition) for topic in request.body.topics for partition in topic.partition_indexes}
        )
        try:
            ongoing = await self._view.partition_reassignments()
        except RaybrokerError as exc:
            return _list_response(request, error_code(exc), str(exc), [])
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition, replicas, adding, removing in sorted(ongoing):
            if named is None or (topic, partition) in named:
                topics.setdefault(topic, []).append(
                    {
                        "partition_index": partition,
                        "replicas": list(replicas),
                        "adding_replicas": list(adding),
                        "removing_replicas": list(removing),
                    }
                )
        return _list_response(
            request,
            ErrorCode.none,
            None,
            [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
        )


def _list_response(request: Request, code: ErrorCode, message: str | None, topics: list[dict[str, Any]]) -> Any:
    return build(
        response_schema(LIST_PARTITION_REASSIGNMENTS_KEY, request.api_version),
        {"throttle_time": 0, "error_code": code, "error_message": message, "topics": topics},
    )
