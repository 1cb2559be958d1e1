"""`BrokerView` over the in-process broker (`actors.core.in_process_broker.InProcessBroker`): the listener's seam to the
broker's plain roles, without Ray, for tests and development.

It answers as `RayBrokerView` does for a listener on node `node`: topics and configs from the controller, called on
the event loop (they answer from memory), records from each partition's leader replica (`InProcessPartitions`).
Appends run on the event loop in the order they were called, also when one awaits its `admitted` first
(`actors.server.append_order`), so a client's pipelined Produce requests keep their order; an `acks=all` append's
wait for its replication (`PartitionServer.await_replicated`, at once for a partition with one replica), and a
long-poll fetch's wait for bytes, run on a worker thread (`transport.on_worker`), so the loop serves every other
connection meanwhile. A
fetch of `SENDFILE_MIN_BYTES` or more answers a region of the segment file for the server to `sendfile`, as the Ray
view does for a partition on its own node.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from actors.core.in_process_broker import InProcessBroker
from actors.core.replication.replica import ACKS_ALL
from actors.server.append_order import AppendOrder
from cluster.protocol.file_region import SENDFILE_MIN_BYTES, FileRegion, open_region
from cluster.protocol.views.broker_view import BrokerView, FetchedRecords, PartitionFetch
from cluster.protocol.views.local_log_dirs import LocalLogDir, local_log_dirs
from cluster.protocol.views.transport import EVERY_METHOD, InProcessTransport, on_worker
from storage.errors import RaybrokerError
from storage.partition.file_slices import FileSlice, locate_file_slices, located_aborted_transactions
from storage.partition.log import LogAppendInfo
from storage.records.file_records import TimestampAndOffset
from storage.topic_partition import TopicPartition

# The partition methods that may wait (`PartitionServer.share_fetch` with `max_wait_ms`): never on the event loop.
WAITING_METHODS = frozenset({"share_fetch"})


class InProcessBrokerView(BrokerView):
    """The in-process broker as the listener of its node `node` sees it (see the module docstring); `broker` is
    the broker it views."""

    def __init__(self, broker: InProcessBroker, node: str = "node-0") -> None:
        self.broker = broker
        super().__init__(
            InProcessTransport(lambda: broker.controller, inline=EVERY_METHOD), InProcessPartitions(broker, node), node
        )


class InProcessPartitions:
    """The in-process broker's partition leaders (`InProcessBroker.leader`), as a `PartitionTransport`: their
    `PartitionServer`'s methods called on the event loop, appends and fetches as the module docstring says."""

    def __init__(self, broker: InProcessBroker, node: str = "node-0") -> None:
        self._broker = broker
        self._node = node
        self._order = AppendOrder()

    async def log_dirs(self) -> list[LocalLogDir]:
        """The log dirs and replicas of the node's log manager."""
        manager = self._broker.nodes[self._node].manager
        return local_log_dirs(manager.dirs(), await on_worker(manager.describe))

    async def alter_replica_log_dirs(
        self, dirs: Mapping[TopicPartition, str]
    ) -> dict[TopicPartition, RaybrokerError | None]:
        """The node's log manager's moves (`LogManager.alter_replica_log_dirs`), on a worker thread: starting a copy
        writes to disk."""
        manager = self._broker.nodes[self._node].manager
        return await on_worker(manager.alter_replica_log_dirs, dict(dirs))

    async def call(self, topic: str, partition: int, method: str, *args: Any) -> Any:
        """The leader's `method`, on the event loop; a ShareFetch, which may wait for records, on a worker thread."""
        bound = getattr(self._broker.leader(topic, partition), method)
        if method in WAITING_METHODS:
            return await on_worker(bound, *args)
        return bound(*args)

    async def list_offset(
        self, topic: str, partition: int, timestamp: int, isolation: str, current_leader_epoch: int
    ) -> TimestampAndOffset | None:
        return self._broker.leader(topic, partition).list_offset(timestamp, isolation, current_leader_epoch)

    async def append(
        self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int, admitted: Awaitable[None] | None
    ) -> LogAppendInfo:
        async with self._order.turn((topic, partition)):
            if admitted is not None:
                await admitted
            leader = self._broker.leader(topic, partition)
            info = leader.append(records, acks)
        if acks == ACKS_ALL:
            return await on_worker(leader.await_replicated, info, timeout_ms)
        return info

    async def fetch(self, request: PartitionFetch) -> FetchedRecords:
        leader = self._broker.leader(request.topic, request.partition)
        offset, max_bytes, isolation = request.offset, request.max_bytes, request.isolation
        log = leader.check_leader(request.current_leader_epoch)
        if request.max_wait_ms > 0:

            def located_now() -> tuple[FileSlice, ...]:
                # Each look checks the epoch again: a leader change ends the wait with the client fenced.
                return locate_file_slices(
                    leader.check_leader(request.current_leader_epoch), offset, max_bytes, isolation=isolation
                )

            await on_worker(
                leader.long_poll,
                located_now,
                lambda found: sum(part.length for part in found),
                request.max_wait_ms,
                request.min_bytes,
            )
            log = leader.check_leader(request.current_leader_epoch)
        located = locate_file_slices(log, offset, max_bytes, isolation=isolation)
        if located and located[0].length >= SENDFILE_MIN_BYTES:
            region: FileRegion | None = open_region(located[0])
            if region is not None:
                committed = isolation == "txn_committed"
                aborted = located_aborted_transactions(log, offset, located) if committed else None
                return FetchedRecords(region, log.high_watermark, log.log_start_offset, log.last_stable_offset, aborted)
        read = leader.fetch(offset, max_bytes, isolation, request.current_leader_epoch)
        return FetchedRecords(
            read.records, log.high_watermark, log.log_start_offset, log.last_stable_offset, read.aborted_transactions
        )

    def forget_topic(self, topic: str) -> None:
        """Nothing is kept of a topic's partitions: each call asks the broker for the leader."""

    def close(self) -> None:
        """Nothing is held open."""
