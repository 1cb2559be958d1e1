"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, with which a client checks that its position
was not truncated away (KIP-320).

raybroker keeps one replica per partition and never elects another leader, so each partition has had one leader
epoch, `LEADER_EPOCH` (0), since it was created; Metadata reports it as -1 (unknown), so that clients skip this
validation, but a client that asks is answered as Kafka's `LeaderEpochFileCache.endOffsetFor` would with that one
epoch starting at the log start offset:

| requested `leader_epoch` | answer (leader_epoch, end_offset)                       |
|--------------------------|---------------------------------------------------------|
| -1 (undefined)           | (-1, -1)                                                |
| 0, the current epoch     | (0, log end offset)                                     |
| above 0                  | (-1, -1): no such epoch                                 |
| below -1                 | (requested, log start offset): older than every epoch   |

A `current_leader_epoch` other than -1 is checked first: above 0 answers UNKNOWN_LEADER_EPOCH (75), below 0
FENCED_LEADER_EPOCH (74), as a Kafka leader fences a client that knows a newer or an older leader. Unknown
partitions answer UNKNOWN_TOPIC_OR_PARTITION (3).

Authorization, as Kafka's since KIP-320 let consumers ask: CLUSTER_ACTION on the cluster (a follower) or DESCRIBE
on the topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29), whether the topic exists or not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from actors.server.security.acls import AclOperation, ResourceType
from cluster.protocol.broker_view import BrokerView
from cluster.protocol.errors import error_code
from cluster.protocol.framing import Request
from cluster.protocol.handlers.authorization import allows_cluster, authorized_names
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from storage.errors import RaybrokerError

OFFSET_FOR_LEADER_EPOCH_KEY = 23
LEADER_EPOCH = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class OffsetForLeaderEpochHandler:
    """Answers OffsetForLeaderEpoch (see the module docstring)."""

    def __init__(self, view: BrokerView, access: AccessControl | None = None) -> None:
        self._view = view
        self._access = access

    async def __call__(self, request: Request) -> Any:
        names = [topic.topic for topic in request.body.topics]
        if allows_cluster(self._access, request.context, AclOperation.CLUSTER_ACTION):
            allowed = set(names)
        else:
            allowed = authorized_names(self._access, request.context, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        topics = []
        for topic in request.body.topics:
            if topic.topic not in allowed:
                denied = [
                    {
                        "partition": part.partition,
                        "error_code": ErrorCode.topic_authorization_failed,
                        "leader_epoch": UNDEFINED_EPOCH,
                        "end_offset": UNDEFINED_EPOCH_OFFSET,
                    }
                    for part in topic.partitions
                ]
                topics.append({"topic": topic.topic, "partitions": denied})
                continue
            partitions = await asyncio.gather(
                *(
                    self._end_offset(topic.topic, part.partition, part.current_leader_epoch, part.leader_epoch)
                    for part in topic.partitions
                )
            )
            topics.append({"topic": topic.topic, "partitions": list(partitions)})
        return build(
            load_response_schema(OFFSET_FOR_LEADER_EPOCH_KEY, request.api_version),
            {"throttle_time": 0, "topics": topics},
        )

    async def _end_offset(self, topic: str, partition: int, current_epoch: int, epoch: int) -> dict[str, Any]:
        undefined = {"partition": partition, "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET}
        try:
            offsets = await self._view.offsets(topic, partition)
        except RaybrokerError as exc:
            return {**undefined, "error_code": error_code(exc)}
        if current_epoch != UNDEFINED_EPOCH and current_epoch > LEADER_EPOCH:
            return {**undefined, "error_code": ErrorCode.unknown_leader_epoch}
        if current_epoch != UNDEFINED_EPOCH and current_epoch < LEADER_EPOCH:
            return {**undefined, "error_code": ErrorCode.fenced_leader_epoch}
        if epoch == LEADER_EPOCH:
            return {
                **undefined,
                "error_code": ErrorCode.none,
                "leader_epoch": epoch,
                "end_offset": offsets.log_end_offset,
            }
        if epoch < UNDEFINED_EPOCH:
            return {
                **undefined,
                "error_code": ErrorCode.none,
                "leader_epoch": epoch,
                "end_offset": offsets.log_start_offset,
            }
        return {**undefined, "error_code": ErrorCode.none}
