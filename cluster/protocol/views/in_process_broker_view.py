"""`BrokerView` over the in-process broker (`actors.core.in_process_broker.InProcessBroker`): the listener's seam to the
broker's plain roles, without Ray, for tests and development.

It answers as `RayBrokerView` does for a listener on node `node`: topics and configs from the controller (the
same `_topic_info` conversion into Kafka broker ids), records from each partition's leader replica. Appends run on
the event loop in the order they were called, also when one awaits its `admitted` first
(`actors.server.append_order`), so a client's pipelined Produce requests keep their order; an
`acks=all` append's wait for its replication, and a long-poll fetch's wait for bytes, run on a worker thread, so
the loop serves every other connection meanwhile. A fetch of `SENDFILE_MIN_BYTES` or more answers a region of the
segment file for the server to `sendfile`, as the Ray view does for a partition on its own node.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Mapping

from actors.core.in_process_broker import InProcessBroker
from actors.core.replication.partition_server import PartitionServer
from actors.core.replication.replica import ACKS_ALL
from actors.server.append_order import AppendOrder
from cluster.protocol.file_region import SENDFILE_MIN_BYTES, FileRegion, open_region
from cluster.protocol.views.broker_view import (
    BrokerEndpoint,
    EpochEndOffset,
    FetchedRecords,
    PartitionOffsets,
    TopicInfo,
    advertised,
    topic_info,
)
from storage.partition.file_slices import FileSlice, locate_file_slices, located_aborted_transactions
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH
from storage.partition.log import LogAppendInfo
from storage.partition.producer_state import ActiveProducer
from storage.records.file_records import TimestampAndOffset


class InProcessBrokerView:
    """The in-process broker as the listener of its node `node` sees it (see the module docstring)."""

    def __init__(self, broker: InProcessBroker, node: str = "node-0") -> None:
        self.broker = broker
        self.node = node
        self._order = AppendOrder()

    async def cluster_id(self) -> str:
        return self.broker.controller.cluster_id()

    async def announce(self, endpoint: BrokerEndpoint) -> None:
        self.broker.controller.register_listener(self.node, advertised(endpoint))

    async def withdraw(self, endpoint: BrokerEndpoint) -> None:
        self.broker.controller.unregister_listener(self.node, advertised(endpoint))

    async def brokers(self) -> list[BrokerEndpoint]:
        return [
            BrokerEndpoint(found.broker_id, found.host, found.port, found.listeners)
            for found in self.broker.controller.listeners().values()
        ]

    def _info(self, name: str) -> TopicInfo:
        controller = self.broker.controller
        return topic_info(controller.describe_topic(name), controller.listeners(), frozenset(controller.brokers()))

    async def topics(self) -> dict[str, TopicInfo]:
        controller = self.broker.controller
        listeners, live = controller.listeners(), frozenset(controller.brokers())
        return {name: topic_info(metadata, listeners, live) for name, metadata in controller.topics().items()}

    async def topic(self, name: str) -> TopicInfo:
        return self._info(name)

    async def topic_names(self, refresh: bool = False) -> Mapping[uuid.UUID, str]:
        return self.broker.controller.topic_names()

    async def create_topic(
        self,
        name: str,
        partition_count: int,
        config: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
    ) -> TopicInfo:
        controller = self.broker.controller
        created = controller.create_topic(name, partition_count, dict(config or {}), validate_only, replication_factor)
        return topic_info(created, controller.listeners(), frozenset(controller.brokers()))

    async def delete_topic(self, name: str) -> None:
        self.broker.controller.delete_topic(name)

    async def create_partitions(self, name: str, total: int, validate_only: bool = False) -> TopicInfo:
        controller = self.broker.controller
        grown = controller.add_partitions(name, total, validate_only)
        return topic_info(grown, controller.listeners(), frozenset(controller.brokers()))

    async def topic_config(self, name: str) -> dict[str, str]:
        return dict(self.broker.controller.describe_topic(name).config)

    async def set_topic_config(self, name: str, config: Mapping[str, str], validate_only: bool = False) -> None:
        self.broker.controller.set_topic_config(name, dict(config), validate_only)

    def _leader(self, topic: str, partition: int) -> PartitionServer:
        return self.broker.leader(topic, partition)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return self._leader(topic, partition).delete_records(offset)

    async def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        leader = self._leader(topic, partition)
        leader.check_leader()
        return PartitionOffsets(*leader.offsets())

    async def describe_producers(self, topic: str, partition: int) -> list[ActiveProducer]:
        return self._leader(topic, partition).check_leader().active_producers()

    async def epoch_end_offset(
        self, topic: str, partition: int, epoch: int, current_leader_epoch: int
    ) -> EpochEndOffset:
        return EpochEndOffset(*self._leader(topic, partition).epoch_end_offset(epoch, current_leader_epoch))

    async def append(
        self,
        topic: str,
        partition: int,
        records: bytes,
        acks: int = 1,
        timeout_ms: int = 30_000,
        admitted: Awaitable[None] | None = None,
    ) -> LogAppendInfo:
        async with self._order.turn((topic, partition)):
            if admitted is not None:
                await admitted
            leader = self._leader(topic, partition)
            info = leader.append(records, acks)
        if acks == ACKS_ALL and leader.log.replicated:
            return await asyncio.to_thread(leader.await_replicated, info, timeout_ms)
        return info

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        isolation: str = "high_watermark",
        current_leader_epoch: int = UNDEFINED_EPOCH,
    ) -> FetchedRecords:
        leader = self._leader(topic, partition)
        log = leader.check_leader(current_leader_epoch)
        if max_wait_ms > 0:

            def located_now() -> tuple[FileSlice, ...]:
                # Each look checks the epoch again: a leader change ends the wait with the client fenced.
                return locate_file_slices(
                    leader.check_leader(current_leader_epoch), offset, max_bytes, isolation=isolation
                )

            await asyncio.to_thread(
                leader.long_poll, located_now, lambda found: sum(part.length for part in found), max_wait_ms, min_bytes
            )
            log = leader.check_leader(current_leader_epoch)
        located = locate_file_slices(log, offset, max_bytes, isolation=isolation)
        if located and located[0].length >= SENDFILE_MIN_BYTES:
            region: FileRegion | None = open_region(located[0])
            if region is not None:
                committed = isolation == "txn_committed"
                aborted = located_aborted_transactions(log, offset, located) if committed else None
                return FetchedRecords(region, log.high_watermark, log.log_start_offset, log.last_stable_offset, aborted)
        read = leader.fetch(offset, max_bytes, isolation, current_leader_epoch)
        return FetchedRecords(
            read.records, log.high_watermark, log.log_start_offset, log.last_stable_offset, read.aborted_transactions
        )

    async def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        isolation: str = "high_watermark",
        current_leader_epoch: int = UNDEFINED_EPOCH,
    ) -> TimestampAndOffset | None:
        return self._leader(topic, partition).list_offset(timestamp, isolation, current_leader_epoch)

    async def allocate_producer_id(self) -> int:
        return self.broker.controller.allocate_producer_id()
