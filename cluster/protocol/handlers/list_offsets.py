"""ListOffsets (key 2): for each partition, the offset a timestamp or sentinel names.

`timestamp` is -2 (earliest: the log start offset), -1 (latest: the high watermark, or for `isolation_level` 1,
READ_COMMITTED (v2+), the last stable offset), -3 (the record with the largest timestamp, v7+), -4 (earliest local
offset, v8+: the earliest offset, since every segment is local here), -5 (latest tiered offset, v9+: offset -1,
timestamp -1, as Kafka answers for a topic without tiered storage), or a time in ms (the first record whose
timestamp is at or after it). A timestamp or -3 names only a record below that same bound, the one a consumer at
that isolation level could fetch (Kafka's `Partition.fetchOffsetForTimestamp`). When no record qualifies the answer
is offset -1 and timestamp -1, as Kafka's. A negative timestamp that is no sentinel, or a sentinel older than the
request's version, answers UNSUPPORTED_VERSION (35), as Kafka's `ReplicaManager`. Each offset found is answered
with its leader epoch (v4+), as Kafka's: a record's batch's, the log's newest for -1, its oldest for -2 when that
covers the log start (`storage.partition.log.Log.fetch_offset_by_timestamp`); -1 where there is none.

The leader epoch the client knows (`current_leader_epoch`, v4+, KIP-320) is checked first against the partition
leader's, as Fetch checks it (`cluster.protocol.handlers.fetch`): older answers FENCED_LEADER_EPOCH (74), newer
UNKNOWN_LEADER_EPOCH (75). Only -1 is not checked: another negative epoch is older than any, as Kafka's `KafkaApis`
reads it (unlike Fetch, which checks no negative epoch).

A partition named more than once in one request answers INVALID_REQUEST (42) each time, as Kafka's.

Authorization: DESCRIBE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29), whether the
topic exists or not.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, authorized_names
from cluster.protocol.messages import build
from cluster.protocol.views.broker_view import BrokerView
from storage.errors import RaybrokerError
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH

LIST_OFFSETS_KEY = 2
UNKNOWN = -1
READ_COMMITTED = 1
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
# The first version that may send each sentinel timestamp (Kafka's `timestampMinSupportedVersion`).
SENTINEL_MIN_VERSION = {-1: 1, EARLIEST_TIMESTAMP: 1, -3: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}


class ListOffsetsHandler(GuardedHandler[BrokerView]):
    """Answers ListOffsets (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        # v0-1 have no isolation level: they list as read_uncommitted.
        committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED
        isolation = "txn_committed" if committed else "high_watermark"
        # v0-3 have no current leader epoch: not checked.
        wanted = [
            (topic.name, part.partition_index, part.timestamp, getattr(part, "current_leader_epoch", UNDEFINED_EPOCH))
            for topic in request.body.topics
            for part in topic.partitions
        ]
        allowed = authorized_names(
            self._access, request.context, AclOperation.DESCRIBE, ResourceType.TOPIC, (each[0] for each in wanted)
        )
        version = request.api_version
        named = Counter((topic, partition) for topic, partition, *_ in wanted)
        answers = await asyncio.gather(
            *(
                _failed(each[1], ErrorCode.invalid_request)
                if named[each[:2]] > 1
                else self._list(*each, isolation, version)
                if each[0] in allowed
                else _failed(each[1], ErrorCode.topic_authorization_failed)
                for each in wanted
            )
        )
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, *_), answer in zip(wanted, answers, strict=True):
            topics.setdefault(topic, []).append(answer)
        return build(
            response_schema(LIST_OFFSETS_KEY, request.api_version),
            {"throttle_time": 0, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]},
        )

    async def _list(
        self, topic: str, partition: int, timestamp: int, current_leader_epoch: int, isolation: str, version: int
    ) -> dict[str, Any]:
        answer: dict[str, Any] = {"partition_index": partition, "leader_epoch": UNKNOWN}
        if timestamp < 0 and version < SENTINEL_MIN_VERSION.get(timestamp, version + 1):
            return {**answer, "error_code": ErrorCode.unsupported_version, "timestamp": UNKNOWN, "offset": UNKNOWN}
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            timestamp = EARLIEST_TIMESTAMP
        try:
            if timestamp == LATEST_TIERED_TIMESTAMP:
                # Kafka checks the partition (its leader, the client's epoch) and then answers "none" without tiered
                # storage: the lookup of the earliest offset makes the same checks.
                await self._view.list_offset(topic, partition, EARLIEST_TIMESTAMP, isolation, current_leader_epoch)
                found = None
            else:
                found = await self._view.list_offset(topic, partition, timestamp, isolation, current_leader_epoch)
        except RaybrokerError as exc:
            return {**answer, "error_code": error_code(exc), "timestamp": UNKNOWN, "offset": UNKNOWN}
        if found is None:
            return {**answer, "error_code": ErrorCode.none, "timestamp": UNKNOWN, "offset": UNKNOWN}
        epoch = UNKNOWN if found.leader_epoch is None else found.leader_epoch
        return {
            **answer,
            "error_code": ErrorCode.none,
            "timestamp": found.timestamp,
            "offset": found.offset,
            "leader_epoch": epoch,
        }


async def _failed(partition: int, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "leader_epoch": UNKNOWN,
        "error_code": code,
        "timestamp": UNKNOWN,
        "offset": UNKNOWN,
    }
