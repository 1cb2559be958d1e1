"""`BrokerView` over the running broker's actors: the controller actor for topics (a `RayTransport`), partition
actors for records (`RayPartitions`, the part written for Ray).

Calls are awaited, never blocked on, so one event loop serves every connection while partitions work. An awaited
call that fails is resolved again through `actors.calls.call`, which raises the broker's typed error (or
`BrokerNotAvailableError` for a dead actor) instead of Ray's wrapper, exactly as the Python clients see it.

Partition handles are looked up once and kept: finding one asks Ray's name service (and, for partitions held by a
partition host, the controller and the node's log manager), which blocks, so it runs on a worker thread. A call
that fails with a retriable error (`storage.errors`: its actor gone, its partition unknown or led elsewhere) forgets
the handle, so the next request looks again and reaches a restarted actor or a re-created topic.

Fetches from a partition whose actor runs on this node are answered from a `LocalLogView`
(`storage.partition.local_log_view`) of its log, without a Ray call: the partition's process publishes every change in
the partition's high-watermark file (offsets, leader epoch, the active segment and the high watermark's position in it),
and the view locates a fetch in the segment files from positions it vouches for, each read's end being where the
consumer's next fetch starts. From `SENDFILE_MIN_BYTES` on the bytes stay in the segment file and the server `sendfile`s
them (`cluster.protocol.file_region`), smaller ones are read here. Whenever the view cannot answer (a first fetch or a
seek, an offset outside the published log, a segment deleted or swapped, a follower or a new leader epoch, an
unpublished high-watermark position), the actor is asked where the bytes lie (`locate`, which long-polls as `fetch`
does; a partition's first fetch asks without waiting, with the other reads of its host in the same pass of the event
loop, and waits on the view it opens), the view learns that position, in the epoch published before the call, and
answers from it; a located file that is no longer the located one falls back to the actor's `fetch`. A fetch at the end
of the log that may wait (`max_wait_ms`, `min_bytes`) waits for the partition's change notices
(`actors.channels.change_notices`: a datagram from the partition's process after each change it publishes, to this
listener's `ChangeWatcher`, named to the partition by one Ray call), then reads the view again. A partition found on
another node is fetched through its actor from then on. ListOffsets' latest offset of a partition with a view is
answered from its high-watermark file too (the leader publishes it only while it answers that offset); other timestamps
ask the actor, the ListOffsets of one pass of the event loop to one partition host in one call
(`actors.server.host_reads`).

A client's `current_leader_epoch` (Fetch and ListOffsets, KIP-320) costs no call of its own: a fetch the view answers
compares it with the leader epoch published with the offsets it answers (each look of a waiting fetch again), and a
call the fetch or ListOffsets makes anyway carries it to the actor, which checks it first
(`actors.core.replication.replica.check_current_leader_epoch` in both places). A fenced epoch keeps the partition's
handle and view: the client's metadata is what is stale, or the replica is told of the new epoch soon.

Appends go the way every client's appends go (`actors.server.append_route`): to the partition's leader over its
append channel when it is on this node and alone, else as a Ray call followed, for `acks=-1` with followers, by the
wait for replication; one partition's appends are submitted in the order `append` was called, also while an earlier
one still waits for its lookup, since the listener handles a connection's pipelined Produce requests concurrently
and an idempotent producer's sequence numbers depend on their order.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.calls import answer, get_actor, this_node_id
from actors.channels.change_watcher import ChangeWatcher
from actors.clients.local_fetch import LocatedRead
from actors.core.replication.replica import check_current_leader_epoch
from actors.options import CONTROLLER_NAME, log_manager_name
from actors.server.append_route import AppendRoute
from actors.server.host_reads import HostReads
from actors.server.lookup_batches import LookupBatches
from actors.server.partition_log import FetchResult, FileSlices
from actors.server.partition_lookup import HostedPartitionHandle, leader_replicas
from cluster.protocol.file_region import SENDFILE_MIN_BYTES, FileRegion, open_region
from cluster.protocol.views.broker_view import BrokerView, FetchedRecords, PartitionFetch
from cluster.protocol.views.local_log_dirs import LocalLogDir, local_log_dirs
from cluster.protocol.views.transport import RayTransport
from storage.errors import FencedLeaderEpochError, RaybrokerError, UnknownLeaderEpochError
from storage.partition.file_slices import FileSlice, open_located, read_located
from storage.partition.local_log_view import LocalLogView, LocalRead
from storage.partition.log import LogAppendInfo
from storage.partition.log_read import LATEST_TIMESTAMP
from storage.records.file_records import TimestampAndOffset
from storage.topic_partition import TopicPartition

# How long a fetch waiting for a same-node partition trusts its change notices before it looks at the partition again.
NOTICE_SILENCE_S = 0.1


@dataclass(frozen=True, slots=True)
class LocalViewStatistics:
    """This process's reads of partitions' `LocalLogView`s (each answer, and each look of a fetch waiting at the end
    of a log), the fetches it asked a partition's actor where the bytes lie (`locate`), the waits of fetches at the
    end of a log that a change notice ended, and the latest offsets (ListOffsets) the views answered."""

    view_reads: int
    located: int
    woken: int
    view_offsets: int


_counts = {"view_reads": 0, "located": 0, "woken": 0, "view_offsets": 0}


def statistics() -> LocalViewStatistics:
    """The counts of this process's listeners (one event loop each; a count may be a moment old)."""
    return LocalViewStatistics(**_counts)


class RayBrokerView(BrokerView):
    """The broker of the Ray cluster this process is connected to, as the protocol handlers see it: the controller
    actor, whose metadata answers it keeps while they hold (`cluster.protocol.views.metadata_cache`), and the
    partitions through `RayPartitions`."""

    def __init__(self) -> None:
        node = this_node_id()
        super().__init__(RayTransport(CONTROLLER_NAME), RayPartitions(node), node, metadata_cache=True)


class RayPartitions:
    """The partitions' leaders on Ray for the listener on node `node`, as a `PartitionTransport` (see the module
    docstring)."""

    def __init__(self, node: str) -> None:
        self._node = node
        self._handles: dict[tuple[str, int], Any] = {}
        self._lookups: LookupBatches[tuple[str, int], Any] = LookupBatches(_leader_handles)
        self._host_reads = HostReads()
        self._appends = AppendRoute()
        # Partitions whose actor runs on another node: fetched through the actor, not located.
        self._remote: set[tuple[str, int]] = set()
        # Views of the logs of this node's partitions, opened from the first located answer.
        self._views: dict[tuple[str, int], LocalLogView] = {}
        self._watcher: ChangeWatcher | None = None

    async def call(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """The partition actor's `method`; a retriable error forgets its handle and view, except a client's leader
        epoch fenced (the client's metadata, not the handle, is stale; or the replica learns the epoch soon)."""
        return await self._call(False, topic, partition, method, *args, **kwargs)

    async def read_at_once(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """`call` of a read that answers without waiting: for a hosted partition, sent with the other reads asked of its
        host in this pass of the event loop (`actors.server.host_reads`)."""
        return await self._call(True, topic, partition, method, *args, **kwargs)

    async def _call(self, at_once: bool, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        handle = await self._handle(topic, partition)
        try:
            if at_once and isinstance(handle, HostedPartitionHandle):
                return await self._host_reads.read(handle, method, *args, **kwargs)
            return await answer(getattr(handle, method).remote(*args, **kwargs))
        except RaybrokerError as exc:
            if exc.retriable and not isinstance(exc, FencedLeaderEpochError | UnknownLeaderEpochError):
                self._drop((topic, partition))
            raise

    async def append(
        self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int, admitted: Awaitable[None] | None
    ) -> LogAppendInfo:
        try:
            return await self._appends.append(topic, partition, records, acks, timeout_ms, admitted)
        except RaybrokerError as exc:
            if exc.retriable:
                self._drop((topic, partition))
            raise

    async def fetch(self, request: PartitionFetch) -> FetchedRecords:
        key = request.key
        view = self._views.get(key)
        max_wait_ms = request.max_wait_ms
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        if view is not None:
            answer = await self._from_view_waiting(request, view, deadline)
            if answer is not None:
                return answer
            max_wait_ms = max(0, int((deadline - time.monotonic()) * 1000))
        read = LocatedRead(request.offset, _read_slice, prefer_local=key not in self._remote)
        if read.locating:
            epoch = None if view is None else view.leader_epoch()
            _counts["located"] += 1
            # A partition's first fetch here asks where its bytes lie without waiting, with the other reads of its host
            # in this pass (a consumer's first contact with thousands of partitions); with nothing there yet it waits
            # on the view the answer opens.
            first = view is None
            located: FileSlices = await (self.read_at_once if first else self.call)(
                *key,
                "locate",
                request.offset,
                request.max_bytes,
                1,
                0 if first else max_wait_ms,
                request.min_bytes,
                request.isolation,
                current_leader_epoch=request.current_leader_epoch,
            )
            if first and not located.slices and located.node_id == self._node and max_wait_ms > 0:
                self._open_view(key, located.high_watermark_file)
                opened = self._views.get(key)
                waited = None if opened is None else await self._from_view_waiting(request, opened, deadline)
                if waited is not None:
                    return waited
            if located.node_id == self._node:
                if view is not None and view.high_watermark_file != located.high_watermark_file:
                    # The partition moved to another log dir of this node: its file is the new folder's.
                    self._views.pop(key).close()
                    view = None
                if view is None:
                    self._open_view(key, located.high_watermark_file)
                elif epoch is not None and located.slices:
                    view.learn(request.offset, located.slices[0], epoch)
                    answer = _from_view(request, view)
                    if answer is not None and answer.records:
                        return answer
            records = read.read(located)
            if read.node_id != self._node:
                self._remote.add(key)
            if records is not None:
                return FetchedRecords(
                    records[0],
                    located.high_watermark,
                    located.log_start_offset,
                    located.last_stable_offset,
                    located.aborted_transactions,
                )
            max_wait_ms = max(0, int((deadline - time.monotonic()) * 1000)) if first else 0  # else waited for already
        else:
            read.actor_fetched()
        result: FetchResult = await self.call(
            *key,
            "fetch",
            request.offset,
            request.max_bytes,
            max_wait_ms=max_wait_ms,
            min_bytes=request.min_bytes,
            isolation=request.isolation,
            current_leader_epoch=request.current_leader_epoch,
        )
        return FetchedRecords(
            bytes(result.records),
            result.high_watermark,
            result.log_start_offset,
            result.last_stable_offset,
            result.aborted_transactions,
        )

    async def list_offset(
        self, topic: str, partition: int, timestamp: int, isolation: str, current_leader_epoch: int
    ) -> TimestampAndOffset | None:
        view = self._views.get((topic, partition))
        latest = None if view is None or timestamp != LATEST_TIMESTAMP else view.latest_offset(isolation)
        if latest is not None:
            found, leader_epoch = latest
            check_current_leader_epoch(current_leader_epoch, leader_epoch, f"{topic}-{partition}")
            _counts["view_offsets"] += 1
            return found
        return await self.read_at_once(topic, partition, "list_offset", timestamp, isolation, current_leader_epoch)

    async def _from_view_waiting(
        self, request: PartitionFetch, view: LocalLogView, deadline: float
    ) -> FetchedRecords | None:
        """The fetch answered from the partition's view, once `min_bytes` are there or at `deadline` (monotonic),
        woken by the partition's change notices (`actors.channels.change_watcher`), each look fenced by the client's
        `current_leader_epoch` (`_from_view`); None when the view cannot answer. The first wait names this
        listener's watcher to the partition (one Ray call). A wait that heard nothing for `NOTICE_SILENCE_S` looks
        again, and bytes found then, without a notice, make the next wait name the watcher again (its notices were
        lost: a restarted partition process knows no watchers)."""
        key = request.key
        watcher = self._change_watcher()
        noticed = True
        while True:
            seen = watcher.count(*key)
            answer = _from_view(request, view)
            if answer is None:
                return None
            if answer.records and not noticed:
                watcher.unfollow(*key)
            remaining_s = deadline - time.monotonic()
            if len(answer.records) >= request.min_bytes or remaining_s <= 0:
                return answer
            _dropped(answer)
            if not watcher.following(*key):
                watcher.follow(*key)
                try:
                    await self.call(*key, "watch_changes", watcher.address)
                except RaybrokerError:
                    watcher.unfollow(*key)
                    return None
                continue
            noticed = await watcher.changed(*key, seen, min(remaining_s, NOTICE_SILENCE_S))
            _counts["woken"] += noticed

    def _change_watcher(self) -> ChangeWatcher:
        """This listener's change watcher, bound on first use on the listener's event loop."""
        if self._watcher is None:
            self._watcher = ChangeWatcher(asyncio.get_running_loop())
        return self._watcher

    def _open_view(self, key: tuple[str, int], high_watermark_file: str) -> None:
        """Opens the partition's view, unless a fetch running beside this one opened it meanwhile."""
        if key not in self._views:
            view = LocalLogView.open(high_watermark_file)
            if view is not None:
                self._views[key] = view

    async def log_dirs(self) -> list[LocalLogDir]:
        """This node's log dirs and replicas, from its log manager actor."""
        manager = await asyncio.to_thread(get_actor, log_manager_name(self._node))
        dirs, described = await asyncio.gather(answer(manager.dirs.remote()), answer(manager.describe.remote()))
        return local_log_dirs(dirs, described)

    async def alter_replica_log_dirs(
        self, dirs: Mapping[TopicPartition, str]
    ) -> dict[TopicPartition, RaybrokerError | None]:
        """This node's replicas moved between its log dirs, by its log manager actor."""
        manager = await asyncio.to_thread(get_actor, log_manager_name(self._node))
        return await answer(manager.alter_replica_log_dirs.remote(dict(dirs)))

    def forget_topic(self, topic: str) -> None:
        """Drops what is known of a deleted topic's partitions, so a re-created topic is looked up afresh."""
        for key in {*self._handles, *self._remote, *self._views}:
            if key[0] == topic:
                self._drop(key)
        self._appends.forget_topic(topic)

    def close(self) -> None:
        """Closes the append channel connections and the change watcher."""
        self._appends.close()
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    def _drop(self, key: tuple[str, int]) -> None:
        """Forgets a partition's handle, node and view: its actor is gone or it is unknown (deleted)."""
        self._handles.pop(key, None)
        self._appends.forget(*key)
        self._remote.discard(key)
        view = self._views.pop(key, None)
        if view is not None:
            view.close()
        if self._watcher is not None:
            self._watcher.unfollow(*key)

    async def _handle(self, topic: str, partition: int) -> Any:
        key = (topic, partition)
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles[key] = await self._lookups.get(key)
        return handle


def _leader_handles(keys: list[tuple[str, int]]) -> dict[tuple[str, int], Any]:
    """The leader replicas' handles of `keys` (`leader_replicas`), each key's error in its place."""
    return {
        key: found if isinstance(found, RaybrokerError) else found[0] for key, found in leader_replicas(keys).items()
    }


def _from_view(request: PartitionFetch, view: LocalLogView) -> FetchedRecords | None:
    """The fetch answered from the partition's view now: its bytes (a region of the segment file to `sendfile`
    from `SENDFILE_MIN_BYTES` on, read here below) with the published offsets; None when the view cannot answer or
    the file named is no longer the one located. The client's `current_leader_epoch` is checked against the epoch
    published with those offsets (`check_current_leader_epoch`, as the actor checks it), before the bytes are read
    or a region of them opened."""
    read: LocalRead | None = view.read(request.offset, request.max_bytes, request.isolation)
    if read is None:
        return None
    check_current_leader_epoch(request.current_leader_epoch, read.leader_epoch, f"{request.topic}-{request.partition}")
    records = b"" if read.file_slice is None else _records_at(read.file_slice)
    if records is None:
        return None
    _counts["view_reads"] += 1
    return FetchedRecords(
        records, read.high_watermark, read.log_start_offset, read.last_stable_offset, read.aborted_transactions
    )


def _dropped(answer: FetchedRecords) -> None:
    """An answer not sent: its file region, if any, is closed."""
    if isinstance(answer.records, FileRegion):
        answer.records.close()


def _records_at(file_slice: FileSlice) -> bytes | FileRegion | None:
    """The slice's bytes as the server sends them: a region from `SENDFILE_MIN_BYTES` on, else read here; None when
    the file is no longer the one located."""
    if file_slice.length >= SENDFILE_MIN_BYTES:
        return open_region(file_slice)
    fd = open_located(file_slice)
    if fd is None:
        return None
    try:
        data = os.pread(fd, file_slice.length, file_slice.position)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == file_slice.length else None


def _read_slice(file_slice: FileSlice, offset: int) -> tuple[bytes | FileRegion, int | None] | None:
    """A located slice as the server sends it, with the offset after its last whole batch (None when not walked): a
    file region to `sendfile` from `SENDFILE_MIN_BYTES` on, read here below it; None when the file is no longer the
    located one (the caller then fetches through the actor)."""
    if file_slice.length >= SENDFILE_MIN_BYTES:
        region = open_region(file_slice)
        return None if region is None else (region, None)
    read = read_located(file_slice, offset)
    return None if read is None else (bytes(read[0]), read[1])
