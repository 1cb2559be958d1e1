"""AlterReplicaLogDirs (34): moves the answering broker's replicas between its own log dirs, what
`kafka-reassign-partitions.sh --execute` sends to each broker whose replicas its reassignment JSON gives `log_dirs`
(and the Admin client's `alterReplicaLogDirs`).

As Kafka's `ReplicaManager.alterReplicaLogDirs`, through the node's log manager
(`storage.logdir.log_manager.LogManager.alter_replica_log_dirs`), one answer per partition asked (a partition listed
under two dirs takes the last): NONE once the move has started (its copy fills in the background; DescribeLogDirs
shows it as a future replica until it replaces the current one) or when the replica is already in that dir;
LOG_DIR_NOT_FOUND (57) for a path that is not one of the broker's `log.dirs`; KAFKA_STORAGE_ERROR (56) for an offline
dir or partition; REPLICA_NOT_AVAILABLE (9) when the broker holds no replica of a partition the cluster has, and
UNKNOWN_TOPIC_OR_PARTITION (3) for one it has not (Kafka's `getPartitionOrException` asks its metadata cache); either
way the dir is remembered: a replica created there later, as a reassignment adds it, goes into it;
INVALID_TOPIC_EXCEPTION (17) for a name too long for the copy's folder. A second request naming another dir for a
partition being moved replaces the move.

Authorization, as Kafka's `KafkaApis`: ALTER on the cluster, else every partition answers
CLUSTER_AUTHORIZATION_FAILED (31) and nothing moves. A broker whose log manager does not answer answers its error
for every partition. v1 and v2 are served (what Kafka 3.9 and 4.x clients send; v0 is deprecated and kio has none).
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
from storage.errors import RaybrokerError, ReplicaNotAvailableError
from storage.topic_partition import TopicPartition

ALTER_REPLICA_LOG_DIRS_KEY = 34


class AlterReplicaLogDirsHandler(GuardedHandler[BrokerView]):
    """Answers AlterReplicaLogDirs (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        asked: dict[TopicPartition, str] = {
            (topic.name, partition): entry.path
            for entry in request.body.dirs
            for topic in entry.topics
            for partition in topic.partitions
        }
        answers: dict[TopicPartition, ErrorCode]
        if not allows_cluster(self._access, request.context, AclOperation.ALTER):
            answers = dict.fromkeys(asked, ErrorCode.cluster_authorization_failed)
        else:
            try:
                moved = await self._view.alter_replica_log_dirs(asked)
            except RaybrokerError as exc:
                answers = dict.fromkeys(asked, error_code(exc))
            else:
                answers = {tp: _code(moved[tp]) for tp in asked}
                not_held = [tp for tp, error in moved.items() if isinstance(error, ReplicaNotAvailableError)]
                if not_held:
                    topics = await self._view.topics()
                    for topic, partition in not_held:
                        if topic not in topics or partition >= topics[topic].partition_count:
                            answers[(topic, partition)] = ErrorCode.unknown_topic_or_partition
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), code in answers.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
        results = [{"topic_name": topic, "partitions": partitions} for topic, partitions in by_topic.items()]
        return build(
            response_schema(ALTER_REPLICA_LOG_DIRS_KEY, request.api_version), {"throttle_time": 0, "results": results}
        )


def _code(error: RaybrokerError | None) -> ErrorCode:
    return ErrorCode.none if error is None else error_code(error)
