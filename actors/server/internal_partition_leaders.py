"""The leader actors of internal topics' partitions as the coordinator actors write to and read them, and the
controller actor as they create their topics: the Ray seams of `actors.core.internal_topics`.

A coordinator's appends (its own records with acks=all, a group coordinator's transactional offsets) go through the
coordinator's `AppendRoute` (`actors.server.append_route`), the route every write to a leader takes: over the
leader's append channel when it is on this node, followers or not (their replication is then awaited with the
leader's `await_replicated`), else as Ray calls.
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.calls import call, controller
from actors.core.controller.topic_metadata import TopicMetadata
from actors.core.replication.replica import ACKS_ALL
from actors.server.append_route import AppendRoute, Batches, CoordinatorBatch, LeaderWrite, PartitionLeader
from storage.partition.log import LogAppendInfo


class RayTopicAdmin:
    """The controller actor as creating an internal topic calls it (`actors.core.internal_topics.TopicAdmin`), looked
    up by name at each call: a controller started again after its node was lost (the head) is a new actor, and a
    handle kept from before would name the dead one for good."""

    def brokers(self) -> list[str]:
        brokers: list[str] = call(controller().brokers.remote())
        return brokers

    def create_topic(
        self, name: str, partitions: int, config: Mapping[str, str], *, replication_factor: int
    ) -> TopicMetadata:
        created: TopicMetadata = call(
            controller().create_topic.remote(name, partitions, config, replication_factor=replication_factor)
        )
        return created

    def describe_topic(self, name: str) -> TopicMetadata:
        described: TopicMetadata = call(controller().describe_topic.remote(name))
        return described

    def list_topics(self, include_internal: bool = False) -> list[str]:
        names: list[str] = call(controller().list_topics.remote(include_internal))
        return names


class RayInternalPartition:
    """An internal topic's partition leader actor as a coordinator uses it: the group coordinator's
    `OffsetsPartition` (`__consumer_offsets`), the transaction coordinator's `TransactionLogPartition`
    (`__transaction_state`), as the controller elected it when the coordinator looked it up (a coordinator looks
    its partition up again after a write failed). Each append answers once every in-sync replica has it."""

    def __init__(self, route: AppendRoute, topic: str, partition: int, leader: PartitionLeader) -> None:
        self._route = route
        self._topic = topic
        self._partition = partition
        self._leader = leader

    @classmethod
    def leader_of(cls, topic: str, partition: int, route: AppendRoute) -> RayInternalPartition:
        """The partition's leader replica as the controller names it now (looked up again, whatever `route` kept)."""
        route.forget(topic, partition)
        return cls(route, topic, partition, route.leader(topic, partition))

    @classmethod
    def routed(cls, topic: str, partition: int, route: AppendRoute) -> RayInternalPartition:
        """The partition's leader replica as `route` knows it (looked up only when it has none: the route forgets a
        leader once a call to it failed), for a writer that looks its partition up at every write."""
        return cls(route, topic, partition, route.leader(topic, partition))

    def leader_epoch(self) -> int:
        return self._leader.leader_epoch

    def offsets(self) -> tuple[int, int, int]:
        answer: tuple[int, int, int] = call(self._leader.handle.offsets.remote())
        return answer

    def read(self, offset: int, max_bytes: int) -> bytes:
        answer: bytes = call(self._leader.handle.read.remote(offset, max_bytes))
        return answer

    def delete_records(self, offset: int) -> int:
        """DeleteRecords up to `offset` on the leader; its log start offset now."""
        answer: int = call(self._leader.handle.delete_records.remote(offset))
        return answer

    def append_replicated(self, batch: bytes) -> LogAppendInfo:
        """The coordinator's own batch, appended with acks=all."""
        return self._write(Batches(batch))

    def append_from_coordinator(self, batch: bytes) -> LogAppendInfo:
        """A transactional offset commit, answered once replicated (the partition takes it with acks=all)."""
        return self._write(CoordinatorBatch(batch))

    def _write(self, write: LeaderWrite) -> LogAppendInfo:
        return self._route.write(self._leader, self._topic, self._partition, write, ACKS_ALL).result()
