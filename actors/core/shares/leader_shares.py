"""The share-partitions a partition's leader holds, one per share group consuming the partition (Kafka's
`SharePartitionManager` cache, for one partition), so that a ShareFetch acquires beside the log it reads.

A share-partition (`share_partition.SharePartition`) is made at its group's first use of the partition, from the
durable state its `ShareStatePersister` reads (`actors.core.shares.share_state_store`: `__share_group_state`); a
state never written takes its SPSO from the group's `share.auto.offset.reset` (the high watermark for `latest`, the
log start offset for `earliest`), as Kafka initializes one. Before each use it follows a log start offset that passed
its SPSO (retention, DeleteRecords).

A fetch reads whole batches from the share-partition's next fetch offset (the first Available record, else SPEO)
up to the high watermark (the last stable offset for a group whose `share.isolation.level` is `read_committed`, as
Kafka reads for it with `FetchIsolation.TXN_COMMITTED`) and at most `max_bytes` (at least one batch), hands their
offset ranges to `acquire`, and answers the bytes read with the ranges acquired for the member; the client keeps the
records of those ranges only, as Kafka's sends whole batches too. A read that acquired nothing answers no bytes. A
read_committed read also answers the aborted transactions overlapping it (from the `.txnindex`); the batches of
aborted transactions among those read (`storage.partition.aborted_batches`, the rule Kafka's
`SharePartition.fetchAbortedTransactionRecordBatches` applies) are archived as soon as acquired and left out of the
ranges answered (Kafka's `maybeFilterAbortedTransactionalAcquiredRecords`), so they are never delivered.

Durability: after every call, a share-partition whose durable state (`SharePartition.state`) changed since it was
last written is written before the call answers (an acknowledgement, a release, a lock expiry counted, SPSO moved), so
an answered ACCEPT is never delivered again and a restarted or new leader loses no record that was not accepted. The
share-partitions are kept for one leader epoch: a replica that leads again later reads their states again. A
failed read or write drops the share-partition from memory and raises: its next use reads the durable state again, so
nothing the failed call changed counts (the member's acknowledgement failed and its records come back). Without a
persister (a partition actor outside Ray, in tests) the share-partitions live in the leader's memory only.

The share-group offset admin APIs reach the share-partitions here too: `summary` is the state a share-partition last
wrote (DescribeShareGroupOffsets; a group's state not in memory is read first), `alter` replaces a group's
share-partition by one starting at the given offset with nothing in flight and writes it (AlterShareGroupOffsets:
Kafka initializes the share-group state afresh), and `delete` drops it and writes an uninitialized state
(DeleteShareGroupOffsets), so the group's next fetch starts again from `share.auto.offset.reset`. The group
coordinator checks first that the group is empty.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from actors.core.shares.acknowledgements import AcknowledgementBatch
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_partition import AcquiredRecords, InFlightRecords, SharePartition, StateSummary
from storage.clock import Clock
from storage.partition.aborted_batches import AbortedBatches
from storage.records.record_batch import iter_batches
from storage.records.share_group_state import UNINITIALIZED_START_OFFSET, ShareGroupState
from storage.segment.transaction_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class ShareFetched:
    """A share fetch's answer for one partition: the batches read (whole) and the ranges acquired in them."""

    records: bytes
    acquired: tuple[AcquiredRecords, ...]


@dataclass(frozen=True, slots=True)
class LogRead:
    """What a share fetch's read of the log returns: whole batches, and for a read_committed read the aborted
    transactions overlapping them (empty for a read_uncommitted one)."""

    records: bytes
    aborted_transactions: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True, slots=True)
class LogPosition:
    """The leader's log as a share fetch sees it: its start offset, its high watermark, a read of whole batches
    (`read(offset, max_bytes, read_committed)`) from an offset below the high watermark, or below the last stable
    offset when `read_committed`, at most `max_bytes` but at least one batch, the leader epoch the replica leads in,
    and its last stable offset (None: the high watermark, a log without open transactions)."""

    log_start_offset: int
    high_watermark: int
    read: Callable[[int, int, bool], LogRead]
    leader_epoch: int
    last_stable_offset: int | None = None

    def fetchable_end(self, read_committed: bool) -> int:
        """The offset a read at the isolation level stops before: the last stable offset for read_committed."""
        if read_committed and self.last_stable_offset is not None:
            return self.last_stable_offset
        return self.high_watermark


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


class ShareStatePersister(Protocol):
    """Where the durable states of one partition's share-partitions are kept, by group (Kafka's `Persister`)."""

    def read_state(self, group_id: str) -> ShareGroupState:
        """The group's share-partition state last written (uninitialized if none was)."""
        ...

    def write_state(self, group_id: str, state: ShareGroupState) -> None:
        """Writes the group's share-partition state, durable on return."""
        ...


class LeaderShares:
    """The share-partitions of one partition leader, by group (see the module docstring); thread-safe. `persister`
    keeps their durable states (None: kept in memory only)."""

    def __init__(self, clock: Clock, persister: ShareStatePersister | None = None) -> None:
        self._clock = clock
        self._persister = persister
        self._lock = threading.Lock()
        self._partitions: dict[str, SharePartition] = {}
        self._written: dict[str, ShareGroupState] = {}
        self._leader_epoch: int | None = None

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
        with self._lock, self._persisted(group_id):
            share = self._share_partition(group_id, config, log)
            offset = share.next_fetch_offset()
            if offset >= log.fetchable_end(config.read_committed) or not share.can_acquire_records():
                return ShareFetched(b"", ())
            read = log.read(offset, max_bytes, config.read_committed)
            records = read.records
            batches = [(batch.base_offset, batch.last_offset) for batch in iter_batches(records)]
            acquired = share.acquire(member_id, batches, max_records)
            if acquired and read.aborted_transactions:
                acquired = share.archive_aborted(acquired, _aborted_batches(records, read.aborted_transactions))
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
        with self._lock, self._persisted(group_id):
            self._share_partition(group_id, config, log).acknowledge(member_id, batches)

    def release(self, group_id: str, member_id: str, leader_epoch: int) -> None:
        """Releases every record `member_id` holds in the group's share-partition, if it has one (in the leader epoch
        `leader_epoch`)."""
        with self._lock, self._persisted(group_id):
            self._follow_leader_epoch(leader_epoch)
            share = self._partitions.get(group_id)
            if share is not None:
                share.release_acquired_records(member_id)

    def in_flight(self, group_id: str) -> tuple[int, tuple[InFlightRecords, ...]] | None:
        """The group's SPSO and in-flight records; None before its first use of the partition. Nothing is written:
        a lock expiry it finds is written by the next call that changes the share-partition."""
        with self._lock:
            share = self._partitions.get(group_id)
            if share is None:
                return None
            share.maybe_expire_locks()
            return share.start_offset, share.in_flight()

    def summary(self, group_id: str, leader_epoch: int) -> StateSummary | None:
        """The state the group's share-partition last wrote (`SharePartition.summary`), in the leader epoch
        `leader_epoch`; None if it has none here."""
        with self._lock:
            self._follow_leader_epoch(leader_epoch)
            share = self._loaded(group_id)
            return None if share is None else share.summary()

    def offsets(self, group_id: str, high_watermark: int, leader_epoch: int) -> ShareOffsets | None:
        """The group's share-partition as DescribeShareGroupOffsets reports it (`ShareOffsets`), for a log at
        `high_watermark` led in `leader_epoch` (written by an AlterShareGroupOffsets and not since: epoch 0); None if
        the group has none here."""
        summary = self.summary(group_id, leader_epoch)
        if summary is None:
            return None
        if summary.start_offset == UNINITIALIZED_START_OFFSET:
            return UNKNOWN_SHARE_OFFSETS
        lag = high_watermark - summary.start_offset - summary.delivery_complete_count
        return ShareOffsets(summary.start_offset, leader_epoch if summary.written_by_leader else 0, lag)

    def alter(self, group_id: str, start_offset: int, leader_epoch: int) -> None:
        """The group's share-partition replaced by one starting at `start_offset`, nothing in flight, and written (see
        the module docstring); its settings are the group's again at its next use."""
        with self._lock:
            self._follow_leader_epoch(leader_epoch)
            self._partitions[group_id] = SharePartition.starting_at(self._clock, start_offset)
            self._written.pop(group_id, None)
            self._write(group_id)

    def delete(self, group_id: str, leader_epoch: int) -> bool:
        """Drops the group's share-partition and writes its state uninitialized; whether there was one."""
        with self._lock:
            self._follow_leader_epoch(leader_epoch)
            if self._loaded(group_id) is None:
                return False
            del self._partitions[group_id]
            self._written.pop(group_id, None)
            if self._persister is not None:
                self._persister.write_state(group_id, ShareGroupState())
            return True

    def _loaded(self, group_id: str) -> SharePartition | None:
        """The group's share-partition in memory, else made from its durable state if it has one. Called with the
        lock held."""
        share = self._partitions.get(group_id)
        if share is not None or self._persister is None:
            return share
        state = self._persister.read_state(group_id)
        if not state.initialized:
            return None
        share = SharePartition(self._clock, state=state)
        self._partitions[group_id] = share
        self._written[group_id] = state
        return share

    @contextmanager
    def _persisted(self, group_id: str) -> Iterator[None]:
        """Writes the group's share-partition state after the block, even one that raised (a refused
        acknowledgement may follow a lock expiry), if it changed (see the module docstring). Called with the lock
        held."""
        try:
            yield
        finally:
            self._write(group_id)

    def _write(self, group_id: str) -> None:
        share = self._partitions.get(group_id)
        if share is None or self._persister is None:
            return
        state = share.state()
        if state == self._written.get(group_id):
            return
        try:
            self._persister.write_state(group_id, state)
        except BaseException:
            self._partitions.pop(group_id, None)
            self._written.pop(group_id, None)
            raise
        self._written[group_id] = state

    def _follow_leader_epoch(self, leader_epoch: int) -> None:
        """Forgets every share-partition made in another leader epoch: the leader may have moved away and back since,
        and another leader written their states meanwhile, so they are read again. Called with the lock held."""
        if leader_epoch != self._leader_epoch and self._persister is not None:
            self._partitions.clear()
            self._written.clear()
        self._leader_epoch = leader_epoch

    def _share_partition(self, group_id: str, config: ResolvedShareConfig, log: LogPosition) -> SharePartition:
        self._follow_leader_epoch(log.leader_epoch)
        share = self._partitions.get(group_id)
        if share is None:
            state = ShareGroupState() if self._persister is None else self._persister.read_state(group_id)
            share = SharePartition(
                self._clock,
                config,
                state=state,
                log_start_offset=log.log_start_offset,
                log_end_offset=log.high_watermark,
            )
            self._partitions[group_id] = share
            self._written[group_id] = state
        share.config = config
        share.update_log_start_offset(log.log_start_offset)
        return share


def _aborted_batches(records: bytes, aborted: Sequence[AbortedTxn]) -> list[tuple[int, int]]:
    """The (base offset, last offset) of the data batches of aborted transactions among `records`."""
    dropped = AbortedBatches(aborted)
    return [(batch.base_offset, batch.last_offset) for batch in iter_batches(records) if dropped.drops(batch)]
