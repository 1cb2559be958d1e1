"""The share-partitions a partition's leader holds, one per share group consuming the partition (Kafka's
`SharePartitionManager` cache, for one partition), so that a ShareFetch acquires beside the log it reads.

A share-partition (`share_partition.SharePartition`) is made at its group's first use of the partition: its SPSO
comes from the group's `share.auto.offset.reset` (the high watermark for `latest`, the log start offset for
`earliest`), as Kafka initializes one whose state the share coordinator has not written yet. Before each use it
follows a log start offset that passed its SPSO (retention, DeleteRecords).

A fetch reads whole batches from the share-partition's next fetch offset (the first Available record, else SPEO)
up to the high watermark and at most `max_bytes` (at least one batch), hands their offset ranges to `acquire`, and
answers the bytes read with the ranges acquired for the member; the client keeps the records of those ranges only,
as Kafka's sends whole batches too. A read that acquired nothing answers no bytes.

The share-group offset admin APIs reach the share-partitions here too: `summary` is the state a share-partition last
wrote (DescribeShareGroupOffsets), `alter` replaces a group's share-partition by one starting at the given offset with
nothing in flight (AlterShareGroupOffsets: Kafka initializes the share-group state afresh, and the leader's cached
share-partition is then fenced and read again), and `delete` drops it (DeleteShareGroupOffsets), so the group's next
fetch starts again from `share.auto.offset.reset`. The group coordinator checks first that the group is empty.

Not durable yet: the share-partitions live in the leader's memory, so a leader restart or change starts each group
afresh from `share.auto.offset.reset` (Kafka writes them to `__share_group_state` through its share coordinator).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from actors.core.shares.acknowledgements import AcknowledgementBatch
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_partition import AcquiredRecords, InFlightRecords, SharePartition, StateSummary
from actors.core.shares.share_partition_state import UNINITIALIZED_START_OFFSET
from storage.clock import Clock
from storage.records.record_batch import iter_batches


@dataclass(frozen=True, slots=True)
class ShareFetched:
    """A share fetch's answer for one partition: the batches read (whole) and the ranges acquired in them."""

    records: bytes
    acquired: tuple[AcquiredRecords, ...]


@dataclass(frozen=True, slots=True)
class LogPosition:
    """The leader's log as a share fetch sees it: its start offset, its high watermark, and a read of whole
    batches from an offset below the high watermark, at most `max_bytes` but at least one batch."""

    log_start_offset: int
    high_watermark: int
    read: Callable[[int, int], bytes]


@dataclass(frozen=True, slots=True)
class ShareOffsets:
    """A group's share-partition as DescribeShareGroupOffsets reports it: the start offset last written (-1: none
    yet), the leader epoch written with it, and the lag: the high watermark less that start offset and the records
    done at or above it (Kafka 4.2's `latest offset - startOffset - deliveryCompleteCount`, negative when the start
    offset was set past the log's end), -1 without a start offset."""

    start_offset: int
    leader_epoch: int
    lag: int


UNKNOWN_SHARE_OFFSETS = ShareOffsets(UNINITIALIZED_START_OFFSET, 0, -1)


class LeaderShares:
    """The share-partitions of one partition leader, by group (see the module docstring); thread-safe."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._partitions: dict[str, SharePartition] = {}

    def acquire(
        self,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        log: LogPosition,
        max_bytes: int,
        max_records: int,
    ) -> ShareFetched:
        """Reads the log from the group's next fetch offset and acquires for `member_id` what it may take."""
        with self._lock:
            share = self._share_partition(group_id, config, log)
            offset = share.next_fetch_offset()
            if offset >= log.high_watermark or not share.can_acquire_records():
                return ShareFetched(b"", ())
            records = log.read(offset, max_bytes)
            batches = [(batch.base_offset, batch.last_offset) for batch in iter_batches(records)]
            acquired = share.acquire(member_id, batches, max_records)
        if not acquired:
            return ShareFetched(b"", ())
        return ShareFetched(records, tuple(acquired))

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        log: LogPosition,
        batches: Sequence[AcknowledgementBatch],
    ) -> None:
        """Applies `member_id`'s acknowledgements, all or none (`SharePartition.acknowledge`'s errors)."""
        with self._lock:
            self._share_partition(group_id, config, log).acknowledge(member_id, batches)

    def release(self, group_id: str, member_id: str) -> None:
        """Releases every record `member_id` holds in the group's share-partition, if it has one."""
        with self._lock:
            share = self._partitions.get(group_id)
            if share is not None:
                share.release_acquired_records(member_id)

    def in_flight(self, group_id: str) -> tuple[int, tuple[InFlightRecords, ...]] | None:
        """The group's SPSO and in-flight records; None before its first use of the partition."""
        with self._lock:
            share = self._partitions.get(group_id)
            if share is None:
                return None
            share.maybe_expire_locks()
            return share.start_offset, share.in_flight()

    def summary(self, group_id: str) -> StateSummary | None:
        """The state the group's share-partition last wrote (`SharePartition.summary`); None if it has none here."""
        with self._lock:
            share = self._partitions.get(group_id)
            return None if share is None else share.summary()

    def offsets(self, group_id: str, high_watermark: int, leader_epoch: int) -> ShareOffsets | None:
        """The group's share-partition as DescribeShareGroupOffsets reports it (`ShareOffsets`), for a log at
        `high_watermark` led in `leader_epoch` (written by an AlterShareGroupOffsets and not since: epoch 0); None if
        the group has none here."""
        summary = self.summary(group_id)
        if summary is None:
            return None
        if summary.start_offset == UNINITIALIZED_START_OFFSET:
            return UNKNOWN_SHARE_OFFSETS
        lag = high_watermark - summary.start_offset - summary.delivery_complete_count
        return ShareOffsets(summary.start_offset, leader_epoch if summary.written_by_leader else 0, lag)

    def alter(self, group_id: str, start_offset: int) -> None:
        """The group's share-partition replaced by one starting at `start_offset`, nothing in flight (see the module
        docstring); its settings are the group's again at its next use."""
        with self._lock:
            self._partitions[group_id] = SharePartition.starting_at(self._clock, start_offset)

    def delete(self, group_id: str) -> bool:
        """Drops the group's share-partition; whether there was one."""
        with self._lock:
            return self._partitions.pop(group_id, None) is not None

    def _share_partition(self, group_id: str, config: ResolvedShareConfig, log: LogPosition) -> SharePartition:
        share = self._partitions.get(group_id)
        if share is None:
            share = SharePartition(
                self._clock, config, log_start_offset=log.log_start_offset, log_end_offset=log.high_watermark
            )
            self._partitions[group_id] = share
        share.config = config
        share.update_log_start_offset(log.log_start_offset)
        return share
