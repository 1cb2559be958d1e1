"""A partition actor's share-partition states on Ray: the `ShareStatePersister` its leader's `LeaderShares` writes
through, each read and write a Ray call to the group coordinator actor (its handle looked up once a process,
`SHARED_GROUP_COORDINATOR`), which holds the cluster's one
`ShareStateStore` over `__share_group_state` (`actors.server.group_coordinator_actor`), as Kafka's partition leaders
call the share coordinator. One writer per state partition keeps the store's cache and its leader-epoch fencing
right when a partition's leader moves to another node: the new leader's first read fences the old one.

The topic id is asked of the controller at the first call and kept: a topic deleted and created again has a new
partition actor.

`ray_dead_letters` is the partition's `DeadLetterWriter` the same way: each batch of dead letters a Ray call to the
group coordinator actor's `write_dead_letters`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from actors.calls import SHARED_GROUP_COORDINATOR, call, controller
from actors.core.shares.dead_letters import DeadLetterBatch, PartitionDeadLetters
from storage.records.share_group_state import ShareGroupState, SharePartitionKey


class RayPartitionStates:
    """One partition's share-partition states, kept by the group coordinator actor; `leader_epoch()` is the epoch
    the replica leads in."""

    def __init__(self, topic: str, partition: int, leader_epoch: Callable[[], int]) -> None:
        self._topic = topic
        self._partition = partition
        self._leader_epoch = leader_epoch
        self._topic_id: uuid.UUID | None = None

    def read_state(self, group_id: str) -> ShareGroupState:
        state: ShareGroupState = SHARED_GROUP_COORDINATOR.call(
            "read_share_state", self._key(group_id), self._leader_epoch()
        )
        return state

    def write_state(self, group_id: str, state: ShareGroupState) -> None:
        SHARED_GROUP_COORDINATOR.call("write_share_state", self._key(group_id), state, self._leader_epoch())

    def _key(self, group_id: str) -> SharePartitionKey:
        if self._topic_id is None:
            self._topic_id = call(controller().describe_topic.remote(self._topic)).topic_id
        return SharePartitionKey(group_id, self._topic_id, self._partition)


def ray_dead_letters(topic: str, partition: int) -> PartitionDeadLetters:
    """The partition's `DeadLetterWriter`: its dead letters written by the group coordinator actor."""

    def write(batch: DeadLetterBatch) -> None:
        SHARED_GROUP_COORDINATOR.call("write_dead_letters", batch)

    return PartitionDeadLetters(write, topic, partition)
