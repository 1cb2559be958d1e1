"""DescribeLogDirs (35): the answering broker's log dirs and the replicas in them, what `kafka-log-dirs.sh
--describe` and the Admin client's `describeLogDirs` send (to every broker, each describing its own).

As Kafka's `ReplicaManager.describeLogDirs`: every configured log dir, with KAFKA_STORAGE_ERROR (56) and nothing
else when it is offline; else its replicas of the topics asked for (a null list: every replica), grouped by topic
(a topic with none of its partitions here is left out), each with its size in bytes, its offset lag (high
watermark minus log end offset, at least 0; -1 when its replica cannot answer) and `is_future_key` false; a replica
being moved into another dir of the broker (AlterReplicaLogDirs) is listed in that dir too, with `is_future_key`
true, the bytes copied so far and its offset lag behind the current replica (its log end offset minus the copy's,
as Kafka's future replica reports it); v4 adds the file system's total and usable bytes.

Authorization, as Kafka's `KafkaApis`: DESCRIBE on the cluster, else no dir is described and the request answers
CLUSTER_AUTHORIZATION_FAILED (31) at the top (v3+). A broker whose log manager does not answer reports the error
the same way (v3+) and no dir.
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
from cluster.protocol.views.local_log_dirs import LocalLogDir
from storage.errors import RaybrokerError

DESCRIBE_LOG_DIRS_KEY = 35
FIRST_SPACE_VERSION = 4


class DescribeLogDirsHandler(GuardedHandler[BrokerView]):
    """Answers DescribeLogDirs (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        if not allows_cluster(self._access, request.context, AclOperation.DESCRIBE):
            return self._response(request, ErrorCode.cluster_authorization_failed, [])
        try:
            dirs = await self._view.log_dirs()
        except RaybrokerError as exc:
            return self._response(request, error_code(exc), [])
        asked = (
            None
            if body.topics is None
            else {(topic.topic, partition) for topic in body.topics for partition in topic.partitions}
        )
        return self._response(request, ErrorCode.none, [_result(found, asked, request.api_version) for found in dirs])

    @staticmethod
    def _response(request: Request, code: ErrorCode, results: list[dict[str, Any]]) -> Any:
        return build(
            response_schema(DESCRIBE_LOG_DIRS_KEY, request.api_version),
            {"throttle_time": 0, "error_code": code, "results": results},
        )


def _result(found: LocalLogDir, asked: set[tuple[str, int]] | None, version: int) -> dict[str, Any]:
    """One dir's entry: its error, or its replicas of the partitions `asked` (None: all) grouped by topic."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for replica in found.replicas:
        if asked is None or (replica.topic, replica.partition) in asked:
            topics.setdefault(replica.topic, []).append(
                {
                    "partition_index": replica.partition,
                    "partition_size": replica.size_bytes,
                    "offset_lag": replica.offset_lag,
                    "is_future_key": replica.is_future,
                }
            )
    result: dict[str, Any] = {
        "error_code": ErrorCode.none if found.offline is None else ErrorCode.kafka_storage_error,
        "log_dir": found.path,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
    }
    if version >= FIRST_SPACE_VERSION:
        result["total_bytes"] = found.total_bytes
        result["usable_bytes"] = found.usable_bytes
    return result
