"""DeleteRecords (key 21): moves partitions' log start offsets forward, as Kafka's `kafka-delete-records.sh`.

For each partition, records below `offset` stop being readable and their whole segments are deleted (-1 means the
high watermark: everything so far). The answer is the partition's new log start offset (`low_watermark`); an
offset beyond the high watermark answers OFFSET_OUT_OF_RANGE (1), an unknown partition
UNKNOWN_TOPIC_OR_PARTITION (3), both with a low watermark of -1. Partitions are handled concurrently.

Authorization: DELETE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29), whether the
topic exists or not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, authorized_names
from cluster.protocol.messages import build
from cluster.protocol.views.broker_view import BrokerView
from storage.errors import RaybrokerError

DELETE_RECORDS_KEY = 21
UNKNOWN_LOW_WATERMARK = -1


class DeleteRecordsHandler(GuardedHandler[BrokerView]):
    """Answers DeleteRecords (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        allowed = authorized_names(
            self._access,
            request.context,
            AclOperation.DELETE,
            ResourceType.TOPIC,
            (topic.name for topic in request.body.topics),
        )
        topics = []
        for topic in request.body.topics:
            if topic.name not in allowed:
                denied = [
                    {
                        "partition_index": part.partition_index,
                        "low_watermark": UNKNOWN_LOW_WATERMARK,
                        "error_code": ErrorCode.topic_authorization_failed,
                    }
                    for part in topic.partitions
                ]
                topics.append({"name": topic.name, "partitions": denied})
                continue
            partitions = await asyncio.gather(
                *(self._delete(topic.name, part.partition_index, part.offset) for part in topic.partitions)
            )
            topics.append({"name": topic.name, "partitions": list(partitions)})
        return build(response_schema(DELETE_RECORDS_KEY, request.api_version), {"throttle_time": 0, "topics": topics})

    async def _delete(self, topic: str, partition: int, offset: int) -> dict[str, Any]:
        answer: dict[str, Any] = {"partition_index": partition}
        try:
            low_watermark = await self._view.delete_records(topic, partition, offset)
        except RaybrokerError as exc:
            return {**answer, "low_watermark": UNKNOWN_LOW_WATERMARK, "error_code": error_code(exc)}
        return {**answer, "low_watermark": low_watermark, "error_code": ErrorCode.none}
