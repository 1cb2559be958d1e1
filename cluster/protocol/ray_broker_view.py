"""`BrokerView` over the running broker's actors: the controller for topics, partition actors for records.

Calls are awaited, never blocked on, so one event loop serves every connection while partitions work. An awaited
call that fails is resolved again through `actors.calls.call`, which raises the broker's typed error (or
`BrokerNotAvailableError` for a dead actor) instead of Ray's wrapper, exactly as the Python clients see it.

Partition handles are looked up once and kept: finding one asks Ray's name service (and, for partitions held by a
partition host, the controller and the node's log manager), which blocks, so it runs on a worker thread. A call
that finds its actor gone (`BrokerNotAvailableError`) or its partition unknown forgets the handle, so the next
request looks again and reaches a restarted actor or a re-created topic.

Fetches from a partition whose actor runs on this node ask the actor only where the bytes lie (`locate`, which
long-polls as `fetch` does), so the batches never pass through Ray's object store: from `SENDFILE_MIN_BYTES` on
they stay in the segment file and the server `sendfile`s them (`cluster.protocol.file_region`), smaller ones are
read here (`actors.clients.local_fetch` explains why the bytes located equal the actor's). A located file that
is no longer the located one (the segment was deleted or replaced meanwhile) falls back to the actor; a
partition found on another node is fetched through its actor from then on.

Appends to one partition are submitted to its actor in the order `append` was called, also while an earlier one
still waits for its handle: the listener handles a connection's pipelined Produce requests concurrently, and Ray
runs one caller's calls to an actor's write thread in the order they were submitted, so the log gets a client's
batches in the order it sent them (an idempotent producer's sequence numbers depend on it). A partition whose
leader is on this node and alone gets its appends over the leader process's append channel instead
(`actors.server.append_channel`: ~0.1 ms where an actor call takes 1-2 ms), which answers them in the order they
were sent; `acks=-1` then needs no wait, as with every one-replica partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ray

from actors.calls import answer
from actors.clients.append_connection import AppendConnection, AppendConnections, AppendReply
from actors.clients.broker import Broker
from actors.core.controller.topic_metadata import AdvertisedListener, TopicMetadata
from actors.partition_lookup import leader_replica, partition_actor
from actors.server.partition_log import FetchResult, FileSlices
from cluster.protocol.broker_view import (
    BrokerEndpoint,
    EpochEndOffset,
    FetchedRecords,
    PartitionOffsets,
    TopicInfo,
    advertised,
    topic_info,
)
from cluster.protocol.file_region import SENDFILE_MIN_BYTES, FileRegion, offset_after_region, open_region
from storage.errors import BrokerNotAvailableError, RaybrokerError, UnknownTopicOrPartitionError
from storage.partition.file_slices import read_located
from storage.partition.log import LogAppendInfo
from storage.records.file_records import TimestampAndOffset

# A prefetched location older than this is located again: the offsets it carries would be too stale.
PREFETCH_MAX_AGE_S = 0.1


@dataclass(frozen=True, slots=True)
class _Prefetch:
    """The location of a partition's next fetch, asked for before the client asks (`RayBrokerView._prefetch`)."""

    offset: int
    max_bytes: int
    started: float
    located: asyncio.Future[FileSlices]


@dataclass(frozen=True, slots=True)
class _Leader:
    """Where a partition's appends go: its leader's handle, whether it has followers, and its append channel."""

    handle: Any
    replicated: bool
    channel: AppendConnection | None


class RayBrokerView:
    """The broker of the Ray cluster this process is connected to, as the protocol handlers see it."""

    def __init__(self, broker: Broker) -> None:
        self._controller = broker.controller
        self._handles: dict[tuple[str, int], Any] = {}
        self._leaders: dict[tuple[str, int], _Leader] = {}
        self._connections = AppendConnections()
        self._last_append: dict[tuple[str, int], asyncio.Future[None]] = {}
        # Partitions whose actor runs on another node: fetched through the actor, not located.
        self._remote: set[tuple[str, int]] = set()
        self._prefetches: dict[tuple[str, int], _Prefetch] = {}
        self._node = _this_node()
        self._cluster_id: str | None = None

    async def cluster_id(self) -> str:
        if self._cluster_id is None:
            self._cluster_id = await answer(self._controller.cluster_id.remote())
        return self._cluster_id

    async def announce(self, endpoint: BrokerEndpoint) -> None:
        await answer(self._controller.register_listener.remote(self._node, advertised(endpoint)))

    async def withdraw(self, endpoint: BrokerEndpoint) -> None:
        """The listener stops: unregistered, and its append channel connections closed."""
        try:
            await answer(self._controller.unregister_listener.remote(self._node, advertised(endpoint)))
        finally:
            self._connections.close()

    async def brokers(self) -> list[BrokerEndpoint]:
        listeners = await self._listeners()
        return [
            BrokerEndpoint(found.broker_id, found.host, found.port, found.listeners) for found in listeners.values()
        ]

    async def topics(self) -> dict[str, TopicInfo]:
        described: dict[str, TopicMetadata] = await answer(self._controller.topics.remote())
        listeners, live = await self._cluster()
        return {name: topic_info(metadata, listeners, live) for name, metadata in described.items()}

    async def topic(self, name: str) -> TopicInfo:
        described: TopicMetadata = await answer(self._controller.describe_topic.remote(name))
        return topic_info(described, *await self._cluster())

    async def create_topic(
        self,
        name: str,
        partition_count: int,
        config: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
    ) -> TopicInfo:
        created = self._controller.create_topic.remote(
            name, partition_count, dict(config or {}), validate_only, replication_factor
        )
        return topic_info(await answer(created), *await self._cluster())

    async def delete_topic(self, name: str) -> None:
        await answer(self._controller.delete_topic.remote(name))
        self._forget(name)

    async def create_partitions(self, name: str, total: int, validate_only: bool = False) -> TopicInfo:
        grown = await answer(self._controller.add_partitions.remote(name, total, validate_only))
        return topic_info(grown, *await self._cluster())

    async def topic_config(self, name: str) -> dict[str, str]:
        metadata: TopicMetadata = await answer(self._controller.describe_topic.remote(name))
        return dict(metadata.config)

    async def set_topic_config(self, name: str, config: Mapping[str, str], validate_only: bool = False) -> None:
        await answer(self._controller.set_topic_config.remote(name, dict(config), validate_only))

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return await self._call(topic, partition, "delete_records", offset)

    async def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        return PartitionOffsets(*await self._call(topic, partition, "offsets"))

    async def epoch_end_offset(self, topic: str, partition: int, epoch: int) -> EpochEndOffset:
        return EpochEndOffset(*await self._call(topic, partition, "epoch_end_offset", epoch))

    async def append(
        self, topic: str, partition: int, records: bytes, acks: int = 1, timeout_ms: int = 30_000
    ) -> LogAppendInfo:
        key = (topic, partition)
        previous = self._last_append.get(key)
        submitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last_append[key] = submitted
        try:
            if previous is not None:
                await asyncio.shield(previous)
            leader = await self._leader(topic, partition)
            if leader.channel is not None:
                appended = _answered(leader.channel.append(topic, partition, records, acks))
            else:
                ref = leader.handle.append.remote(records, acks)
                if acks == -1 and leader.replicated:
                    # Runs once the append answered (Ray resolves the argument first), beside the partition's writes.
                    ref = leader.handle.await_replicated.remote(ref, timeout_ms)
                appended = asyncio.ensure_future(answer(ref))
        finally:
            submitted.set_result(None)
            if self._last_append.get(key) is submitted:
                del self._last_append[key]
        try:
            return await appended
        except (BrokerNotAvailableError, UnknownTopicOrPartitionError):
            self._drop(key)
            raise

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> FetchedRecords:
        key = (topic, partition)
        if key not in self._remote:
            located = await self._prefetched(key, offset, max_bytes)
            if located is None:
                located = await self._call(topic, partition, "locate", offset, max_bytes, 1, max_wait_ms, min_bytes)
            if located.node_id != self._node:
                self._remote.add(key)
            else:
                records = _local_records(located, offset)
                if records is not None:
                    if isinstance(records, FileRegion):
                        self._prefetch(key, offset_after_region(records, offset), max_bytes)
                    return FetchedRecords(records, located.high_watermark, located.log_start_offset)
            max_wait_ms = 0  # waited for already
        result: FetchResult = await self._call(
            topic, partition, "fetch", offset, max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes
        )
        return FetchedRecords(bytes(result.records), result.high_watermark, result.log_start_offset)

    def _prefetch(self, key: tuple[str, int], offset: int | None, max_bytes: int) -> None:
        """Locates the bytes the partition's next fetch will ask for while this answer is on its way."""
        if offset is None:
            return
        located = asyncio.ensure_future(self._call(*key, "locate", offset, max_bytes))
        # A prefetch nobody asks for again may fail unseen (its topic deleted): its error is dropped here.
        located.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._prefetches[key] = _Prefetch(offset, max_bytes, time.monotonic(), located)

    async def _prefetched(self, key: tuple[str, int], offset: int, max_bytes: int) -> FileSlices | None:
        """The prefetched location of this fetch's bytes, if one was started for exactly it, recently, and found
        bytes; None otherwise (the caller locates, long-polling)."""
        prefetch = self._prefetches.pop(key, None)
        if prefetch is None:
            return None
        if (prefetch.offset, prefetch.max_bytes) != (offset, max_bytes):
            prefetch.located.cancel()
            return None
        try:
            located = await prefetch.located
        except RaybrokerError:
            return None
        if time.monotonic() - prefetch.started > PREFETCH_MAX_AGE_S or not located.slices:
            return None
        return located

    async def list_offset(self, topic: str, partition: int, timestamp: int) -> TimestampAndOffset | None:
        return await self._call(topic, partition, "list_offset", timestamp)

    async def allocate_producer_id(self) -> int:
        return await answer(self._controller.allocate_producer_id.remote())

    async def _call(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        handle = await self._handle(topic, partition)
        try:
            return await answer(getattr(handle, method).remote(*args, **kwargs))
        except (BrokerNotAvailableError, UnknownTopicOrPartitionError):
            self._drop((topic, partition))
            raise

    async def _listeners(self) -> dict[str, AdvertisedListener]:
        listeners: dict[str, AdvertisedListener] = await answer(self._controller.listeners.remote())
        return listeners

    async def _cluster(self) -> tuple[dict[str, AdvertisedListener], frozenset[str]]:
        """The listeners by Ray node id, and the Ray node ids of the running brokers, asked together."""
        listeners, brokers = await asyncio.gather(self._listeners(), answer(self._controller.brokers.remote()))
        return listeners, frozenset(brokers)

    def _forget(self, topic: str) -> None:
        """Drops what is known of a deleted topic's partitions, so a re-created topic is looked up afresh."""
        for key in {*self._handles, *self._leaders, *self._remote, *self._prefetches}:
            if key[0] == topic:
                self._drop(key)

    def _drop(self, key: tuple[str, int]) -> None:
        """Forgets a partition's handle, node and prefetch: its actor is gone or it is unknown (deleted)."""
        self._handles.pop(key, None)
        self._leaders.pop(key, None)
        self._remote.discard(key)
        self._prefetches.pop(key, None)

    async def _handle(self, topic: str, partition: int) -> Any:
        key = (topic, partition)
        handle = self._handles.get(key)
        if handle is None:
            handle = await asyncio.to_thread(partition_actor, topic, partition)
            self._handles[key] = handle
        return handle

    async def _leader(self, topic: str, partition: int) -> _Leader:
        key = (topic, partition)
        leader = self._leaders.get(key)
        if leader is None:
            leader = self._leaders[key] = await asyncio.to_thread(self._find_leader, topic, partition)
        return leader

    def _find_leader(self, topic: str, partition: int) -> _Leader:
        """Blocking lookups (Ray's name service, the controller), run on a worker thread."""
        handle, state = leader_replica(topic, partition)
        return _Leader(handle, state.replication_factor > 1, self._connections.for_leader(handle, state))


def _answered(reply: AppendReply) -> asyncio.Future[LogAppendInfo]:
    """An append channel's reply as a future of this event loop (its callback runs on the connection's reader)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[LogAppendInfo] = loop.create_future()

    def resolve(done: AppendReply) -> None:
        if future.cancelled():
            return
        try:
            future.set_result(done.result())
        except RaybrokerError as exc:
            future.set_exception(exc)

    def hand_over(done: AppendReply) -> None:
        # A loop closed meanwhile (the listener stopped) has nobody left to answer.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(resolve, done)

    reply.add_done_callback(hand_over)
    return future


def _local_records(located: FileSlices, offset: int) -> bytes | FileRegion | None:
    """The located bytes: a file region to `sendfile` from `SENDFILE_MIN_BYTES` on, read here below it; None when
    the file is no longer the located one (the caller then fetches through the actor)."""
    if not located.slices:
        return b""
    file_slice = located.slices[0]
    if file_slice.length >= SENDFILE_MIN_BYTES:
        return open_region(file_slice)
    read = read_located(file_slice, offset)
    return None if read is None else bytes(read[0])


def _this_node() -> str:
    """The Ray node this process runs on: the node whose listener this is."""
    return str(ray.get_runtime_context().get_node_id())
