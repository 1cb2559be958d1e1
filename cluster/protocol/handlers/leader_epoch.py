"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, with which a replica finds where its log diverges
from the leader's and a client checks that its position was not truncated away (KIP-320).

Each partition's log keeps its leader epochs (`storage.partition.leader_epoch_cache`, the partition's
`leader-epoch-checkpoint`): a partition raybroker creates is led in epoch 0 from offset 0; one opened from a Kafka
log dir goes on in the epoch its last Kafka leader wrote. The answer is Kafka's `LeaderEpochFileCache.endOffsetFor`
over those entries:

| requested `leader_epoch`          | answer (leader_epoch, end_offset)                                  |
|-----------------------------------|--------------------------------------------------------------------|
| -1 (undefined)                    | (-1, -1)                                                           |
| the partition's current epoch     | (epoch, log end offset)                                            |
| an older epoch the log knows      | (that epoch, the start offset of the next epoch)                   |
| one between two known epochs      | (the largest known epoch below it, the start offset of the next)   |
| older than every known epoch      | (requested, the first known epoch's start: the log start or later) |
| newer than the current epoch      | (-1, -1)                                                           |

A `current_leader_epoch` other than -1 is checked first against the partition's epoch, by the leader's replica
(`actors.core.replication.replica.Replica.epoch_end_offset`, which the replicas' own followers ask too): a newer one
answers UNKNOWN_LEADER_EPOCH (75), an older one FENCED_LEADER_EPOCH (74), as a Kafka leader fences a client that knows
a newer or an older leader. Unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION (3). The partition asked is its
leader's replica, whose epoch is the one Metadata reports (the controller's), so a client whose metadata names an
older leader is fenced and refreshes it.

Authorization, as Kafka's since KIP-320 let consumers ask: CLUSTER_ACTION on the cluster (a follower) or DESCRIBE
on the topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29), whether the topic exists or not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows_cluster, authorized_names
from cluster.protocol.messages import build
from cluster.protocol.views.broker_view import BrokerView
from storage.errors import RaybrokerError
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

OFFSET_FOR_LEADER_EPOCH_KEY = 23


class OffsetForLeaderEpochHandler(GuardedHandler[BrokerView]):
    """Answers OffsetForLeaderEpoch (see the module docstring)."""

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
            response_schema(OFFSET_FOR_LEADER_EPOCH_KEY, request.api_version),
            {"throttle_time": 0, "topics": topics},
        )

    async def _end_offset(self, topic: str, partition: int, current_epoch: int, epoch: int) -> dict[str, Any]:
        undefined = {"partition": partition, "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET}
        try:
            answer = await self._view.epoch_end_offset(topic, partition, epoch, current_epoch)
        except RaybrokerError as exc:
            return {**undefined, "error_code": error_code(exc)}
        return {
            "partition": partition,
            "error_code": ErrorCode.none,
            "leader_epoch": answer.epoch,
            "end_offset": answer.end_offset,
        }
