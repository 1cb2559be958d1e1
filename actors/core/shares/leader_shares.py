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
offset ranges to `acquire`, and answers the batches read from the first to the last holding an acquired record
(Kafka's `maybeSliceFetchRecords` slices its read the same way) with the ranges acquired for the member; the client
keeps the records of those ranges only, as Kafka's sends whole batches too. A read that acquired nothing answers no
bytes. A read_committed read also answers the aborted transactions overlapping it (from the `.txnindex`); the batches of
aborted transactions among those read (`storage.partition.aborted_batches`, the rule Kafka's
`SharePartition.fetchAbortedTransactionRecordBatches` applies) are archived as soon as acquired and left out of the
ranges answered (Kafka's `maybeFilterAbortedTransactionalAcquiredRecords`), so they are never delivered.

Durability: after every call, a share-partition whose durable state (`SharePartition.state`) changed since it was
last written is written before the call answers (an acknowledgement, a release, a lock expiry counted, SPSO moved), so
an answered ACCEPT is never delivered again and a restarted or new leader loses no record that was not accepted.
The lock is not held while a state is written (a Ray call and an acks=all append on Ray), so members acquire and
acknowledge while it is: each call stages the state its change made, and one call at a time writes the latest
state staged, which covers every call staged before it (a group commit, as Kafka's share coordinator batches the
writes of many acknowledgements); a call answers once a write covering its change is durable. The share-partitions
are kept for one leader epoch: a replica that leads again later reads their states again. A failed read or write
drops the share-partition from memory and raises, for every call whose change it carried: its next use reads the
durable state again, so nothing those calls changed counts (their acknowledgements failed and their records come
back). A share-partition replaced before its staged state was written (a new leader epoch, an alter or a delete)
fails the calls still waiting with `FencedLeaderEpochError`, and their state is never written over the new one.
Without a persister (a partition actor outside Ray, in tests) the share-partitions live in the leader's memory only.

Dead letters (Kafka 4.4's dead-letter topic, `actors.core.shares.dead_letters`): the ranges a call archived for the
group's dead-letter topic (`SharePartition.take_dead_letters`) are handed to the leader's `DeadLetterWriter` once the
call's state is durable, outside the lock, with each record's key and value read from the log when the group copies
records, before the call answers. A write that fails is logged and the records stay archived, as Kafka archives them
whether its write succeeds or not.

The share-group offset admin APIs reach the share-partitions here too: `summary` is the state a share-partition last
wrote (DescribeShareGroupOffsets; a group's state not in memory is read first), `alter` replaces a group's
share-partition by one starting at the given offset with nothing in flight and writes it (AlterShareGroupOffsets:
Kafka initializes the share-group state afresh), and `delete` drops it and writes an uninitialized state
(DeleteShareGroupOffsets), so the group's next fetch starts again from `share.auto.offset.reset`. The group
coordinator checks first that the group is empty.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

from actors.core.shares.acknowledgements import AcknowledgementBatch
from actors.core.shares.dead_letters import DeadLetters, DeadLetterWriter
from actors.core.shares.group_share_config import DeadLetterSettings, ResolvedShareConfig
from actors.core.shares.share_partition import (
    AcquiredRecords,
    DeliveryTally,
    InFlightRecords,
    SharePartition,
    StateSummary,
)
from storage.clock import Clock
from storage.errors import FencedLeaderEpochError, RaybrokerError
from storage.partition.aborted_batches import AbortedBatches
from storage.records.record_batch import iter_batches
from storage.records.share_group_state import UNINITIALIZED_START_OFFSET, ShareGroupState
from storage.segment.transaction_index import AbortedTxn

logger = logging.getLogger(__name__)

# The bytes of each read of the log for the records a dead letter copies (one batch at least).
DEAD_LETTER_READ_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ShareFetched:
    """A share fetch's answer for one partition: the batches read (whole) and the ranges acquired in them; when the
    fetch carried acknowledgements, why they were refused (None: applied, or none carried)."""

    records: bytes
    acquired: tuple[AcquiredRecords, ...]
    acknowledge_error: RaybrokerError | None = None


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


@dataclass(frozen=True, slots=True)
class SharePartitionStatistics:
    """One group's share-partition as the metrics show it (Kafka's `SharePartitionMetrics`): the records tracked
    between SPSO and SPEO, the runs of equal state they form (Kafka's cached in-flight batches), the backlog, the
    lag DescribeShareGroupOffsets reports (`ShareOffsets.lag`), and the records counted as their deliveries ended
    since this leader first held the group (`DeliveryTally`: redelivered, archived, lock timeouts)."""

    group_id: str
    in_flight_records: int
    in_flight_batches: int
    backlog: int
    tally: DeliveryTally = field(default_factory=DeliveryTally)


def share_lag(summary: StateSummary, high_watermark: int) -> int:
    """The records of a log at `high_watermark` not yet acknowledged or archived, from a share-partition's state as
    last written: Kafka 4.2's `latest offset - startOffset - deliveryCompleteCount`."""
    return high_watermark - summary.start_offset - summary.delivery_complete_count


class ShareStatePersister(Protocol):
    """Where the durable states of one partition's share-partitions are kept, by group (Kafka's `Persister`)."""

    def read_state(self, group_id: str) -> ShareGroupState:
        """The group's share-partition state last written (uninitialized if none was)."""
        ...

    def write_state(self, group_id: str, state: ShareGroupState) -> None:
        """Writes the group's share-partition state, durable on return."""
        ...


@dataclass(eq=False)
class _Writes:
    """A share-partition held in memory and its durable writes (see the module docstring): the latest state staged
    and its version (versions count the states staged; the one made with it, already durable, is 0), the version
    durable, whether a call is writing, and the failure of the versions up to `failed_version`."""

    share: SharePartition
    staged: ShareGroupState
    staged_version: int = 0
    durable_version: int = 0
    writing: bool = False
    failure: BaseException | None = None
    failed_version: int = -1

    def fail(self, failure: BaseException) -> None:
        """Fails every version staged so far: their calls raise `failure` and their state is never written."""
        self.failure, self.failed_version = failure, self.staged_version


class LeaderShares:
    """The share-partitions of one partition leader, by group (see the module docstring); thread-safe. `persister`
    keeps their durable states (None: kept in memory only); `dead_letters` writes their dead letters (None: dropped)."""

    def __init__(
        self,
        clock: Clock,
        persister: ShareStatePersister | None = None,
        dead_letters: DeadLetterWriter | None = None,
    ) -> None:
        self._clock = clock
        self._persister = persister
        self._dead_letters = dead_letters
        self._lock = threading.Lock()
        self._written_out = threading.Condition(self._lock)
        # The share-partitions held, by group, each with its writes.
        self._writes: dict[str, _Writes] = {}
        self._tallies: dict[str, DeliveryTally] = {}
        self._leader_epoch: int | None = None

    def acquire(
        self,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        log: LogPosition,
        max_bytes: int,
        max_records: int,
        record_limit: bool = False,
    ) -> ShareFetched:
        """Reads the log from the group's next fetch offset and acquires for `member_id` what it may take, at most
        `max_records` with `record_limit` (`SharePartition.acquire`)."""
        with self._persisted(group_id, log):
            share = self._share_partition(group_id, config, log)
            offset = share.next_fetch_offset()
            if offset >= log.fetchable_end(config.read_committed) or not share.can_acquire_records():
                return ShareFetched(b"", ())
            read = log.read(offset, max_bytes, config.read_committed)
            records = read.records
            spans = _batch_spans(records)
            acquired = share.acquire(member_id, [(base, last) for base, last, _, _ in spans], max_records, record_limit)
            if acquired and read.aborted_transactions:
                acquired = share.archive_aborted(acquired, _aborted_batches(records, read.aborted_transactions))
        if not acquired:
            return ShareFetched(b"", ())
        return ShareFetched(_acquired_slice(records, spans, acquired), tuple(acquired))

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        log: LogPosition,
        batches: Sequence[AcknowledgementBatch],
        renew: bool = False,
        on_applied: Callable[[], None] | None = None,
    ) -> None:
        """Applies `member_id`'s acknowledgements, all or none (`SharePartition.acknowledge`'s errors), RENEW among
        them only with `renew`. `on_applied` runs once they are applied, under the lock and before their state is
        written: a ShareFetch it wakes acquires the records the acknowledgements let it take as soon as the lock is
        released for the write, since an acquisition of new records writes nothing, so the next member's records
        go out while this member's state is written."""
        with self._persisted(group_id, log):
            self._share_partition(group_id, config, log).acknowledge(member_id, batches, renew)
            if on_applied is not None:
                on_applied()

    def release(self, group_id: str, member_id: str, leader_epoch: int, log: LogPosition | None = None) -> None:
        """Releases every record `member_id` holds in the group's share-partition, if it has one (in the leader epoch
        `leader_epoch`); `log` is read for the records its dead letters copy (None: none copied)."""
        with self._persisted(group_id, log):
            self._follow_leader_epoch(leader_epoch)
            share = self._held(group_id)
            if share is not None:
                share.release_acquired_records(member_id)

    def in_flight(self, group_id: str) -> tuple[int, tuple[InFlightRecords, ...]] | None:
        """The group's SPSO and in-flight records; None before its first use of the partition. Nothing is written:
        a lock expiry it finds is written by the next call that changes the share-partition."""
        with self._lock:
            share = self._held(group_id)
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
        lag = share_lag(summary, high_watermark)
        return ShareOffsets(summary.start_offset, leader_epoch if summary.written_by_leader else 0, lag)

    def statistics(self, high_watermark: int) -> list[SharePartitionStatistics]:
        """Each share-partition in memory (a group that fetched here in this leader epoch) as the metrics show it,
        for a log at `high_watermark`, by group. The backlog of one whose state was never written yet (nothing
        acknowledged: every change is written before it answers) is everything from its SPSO. Nothing is read or
        written."""
        with self._lock:
            found = []
            for group_id, share in sorted((group_id, writes.share) for group_id, writes in self._writes.items()):
                summary = share.summary()
                if summary.start_offset == UNINITIALIZED_START_OFFSET:
                    backlog = high_watermark - share.start_offset
                else:
                    backlog = share_lag(summary, high_watermark)
                runs = share.in_flight()
                records = sum(run.last_offset - run.first_offset + 1 for run in runs)
                tally = self._tallies.setdefault(group_id, DeliveryTally())
                found.append(SharePartitionStatistics(group_id, records, len(runs), backlog, replace(tally)))
            return found

    def alter(self, group_id: str, start_offset: int, leader_epoch: int) -> None:
        """The group's share-partition replaced by one starting at `start_offset`, nothing in flight, and written (see
        the module docstring); its settings are the group's again at its next use."""
        with self._lock:
            self._follow_leader_epoch(leader_epoch)
            share = SharePartition.starting_at(self._clock, start_offset, self._tally(group_id))
            self._replace(group_id, share)
            if self._persister is not None:
                self._persister.write_state(group_id, share.state())

    def delete(self, group_id: str, leader_epoch: int) -> bool:
        """Drops the group's share-partition and writes its state uninitialized; whether there was one."""
        with self._lock:
            self._follow_leader_epoch(leader_epoch)
            if self._loaded(group_id) is None:
                return False
            self._replace(group_id, None)
            if self._persister is not None:
                self._persister.write_state(group_id, ShareGroupState())
            return True

    def _loaded(self, group_id: str) -> SharePartition | None:
        """The group's share-partition in memory, else made from its durable state if it has one. Called with the
        lock held."""
        share = self._held(group_id)
        if share is not None or self._persister is None:
            return share
        state = self._persister.read_state(group_id)
        if not state.initialized:
            return None
        share = SharePartition(self._clock, state=state, tally=self._tally(group_id))
        self._keep(group_id, share, state)
        return share

    def _tally(self, group_id: str) -> DeliveryTally:
        """The group's delivery tally here, shared by every share-partition this leader makes for it, so that the
        counts only grow (a counter's rule) across reloads, alterations and leader epochs. Called with the lock held."""
        return self._tallies.setdefault(group_id, DeliveryTally())

    def _held(self, group_id: str) -> SharePartition | None:
        """The group's share-partition in memory, if it has one. Called with the lock held."""
        writes = self._writes.get(group_id)
        return None if writes is None else writes.share

    def _keep(self, group_id: str, share: SharePartition, written: ShareGroupState) -> None:
        """Holds `share` as the group's share-partition, `written` being its durable state. Called with the lock
        held."""
        self._writes[group_id] = _Writes(share, written)

    def _replace(self, group_id: str, share: SharePartition | None) -> None:
        """Drops the group's share-partition (for `share`, written by the caller, if not None) once no call is
        writing its state; the calls still waiting for theirs fail (see the module docstring). Called with the lock
        held."""
        writes = self._writes.get(group_id)
        while writes is not None and writes.writing:
            self._written_out.wait()
            writes = self._writes.get(group_id)
        self._forget(group_id, writes, _replaced(group_id))
        if share is not None:
            self._keep(group_id, share, share.state())

    @contextmanager
    def _persisted(self, group_id: str, log: LogPosition | None = None) -> Iterator[None]:
        """Runs the block under the lock, then makes the group's share-partition state durable if it changed, even
        after a block that raised (a refused acknowledgement may follow a lock expiry), then writes the dead letters
        that state archived, reading their records from `log` (see the module docstring)."""
        letters: list[DeadLetters] = []
        settings = DeadLetterSettings()
        try:
            with self._lock:
                try:
                    yield
                finally:
                    self._make_durable(group_id)
                    share = self._held(group_id)
                    if share is not None:
                        letters, settings = share.take_dead_letters(), share.config.dead_letters
        finally:
            if letters:
                self._write_dead_letters(group_id, settings, letters, log)

    def _write_dead_letters(
        self, group_id: str, settings: DeadLetterSettings, letters: list[DeadLetters], log: LogPosition | None
    ) -> None:
        """Hands `letters` to the dead-letter writer, with their records' keys and values when the group copies
        them; a failure is logged (the records stay archived)."""
        if self._dead_letters is None:
            logger.warning(
                "share group %s: no dead-letter writer here, %d ranges archived only", group_id, len(letters)
            )
            return
        try:
            originals = _originals(letters, log) if settings.copy_record and log is not None else {}
            self._dead_letters.write_dead_letters(group_id, settings, tuple(letters), originals)
        except Exception as exc:  # Kafka archives whether its write succeeds or not; the member's call stands.
            logger.warning(
                "share group %s: failed to write to DLQ, proceeding to ARCHIVED regardless: %s", group_id, exc
            )

    def _make_durable(self, group_id: str) -> None:
        """Stages the share-partition's state if it changed since the last one staged, and then waits until a write
        covering it is durable, writing the latest state staged when no other call is. Called with the lock held;
        released while writing."""
        writes = self._writes.get(group_id)
        if writes is None or self._persister is None:
            return
        state = writes.share.state()
        if state == writes.staged:
            return
        writes.staged = state
        writes.staged_version += 1
        version = writes.staged_version
        while writes.durable_version < version:
            if writes.failure is not None and writes.failed_version >= version:
                raise writes.failure
            if writes.writing:
                self._written_out.wait()
                continue
            staged, staged_version = writes.staged, writes.staged_version
            writes.writing = True
            self._lock.release()
            failure: BaseException | None = None
            try:
                self._persister.write_state(group_id, staged)
            except BaseException as exc:
                failure = exc
            finally:
                self._lock.acquire()
                writes.writing = False
                self._written_out.notify_all()
            if failure is not None:
                self._forget(group_id, writes, failure)
                raise failure
            writes.durable_version = staged_version

    def _forget(self, group_id: str, writes: _Writes | None, failure: BaseException) -> None:
        """Drops `writes`' share-partition if it is still the group's, and fails the calls waiting for its states.
        Called with the lock held."""
        if writes is None:
            return
        writes.fail(failure)
        self._written_out.notify_all()
        if self._writes.get(group_id) is writes:
            del self._writes[group_id]

    def _follow_leader_epoch(self, leader_epoch: int) -> None:
        """Forgets every share-partition made in another leader epoch: the leader may have moved away and back since,
        and another leader written their states meanwhile, so they are read again. Called with the lock held."""
        if leader_epoch != self._leader_epoch and self._persister is not None:
            for group_id, writes in list(self._writes.items()):
                self._forget(group_id, writes, _replaced(group_id))
        self._leader_epoch = leader_epoch

    def _share_partition(self, group_id: str, config: ResolvedShareConfig, log: LogPosition) -> SharePartition:
        self._follow_leader_epoch(log.leader_epoch)
        share = self._held(group_id)
        if share is None:
            state = ShareGroupState() if self._persister is None else self._persister.read_state(group_id)
            share = SharePartition(
                self._clock,
                config,
                state=state,
                log_start_offset=log.log_start_offset,
                log_end_offset=log.high_watermark,
                tally=self._tally(group_id),
            )
            self._keep(group_id, share, state)
        share.config = config
        share.update_log_start_offset(log.log_start_offset)
        return share


def _replaced(group_id: str) -> FencedLeaderEpochError:
    return FencedLeaderEpochError(
        f"share group {group_id}: its share-partition was replaced (a new leader epoch, or its offsets altered or "
        "deleted) before this change was written"
    )


def _originals(letters: Sequence[DeadLetters], log: LogPosition) -> dict[int, tuple[bytes | None, bytes | None]]:
    """The key and value of every record of `letters`' ranges still in the log (read_uncommitted), by offset."""
    wanted = {offset for letter in letters for offset in range(letter.first_offset, letter.last_offset + 1)}
    found: dict[int, tuple[bytes | None, bytes | None]] = {}
    offset, last = max(min(wanted), log.log_start_offset), max(wanted)
    while offset <= last and offset < log.high_watermark:
        batches = list(iter_batches(log.read(offset, DEAD_LETTER_READ_BYTES, False).records))
        if not batches:
            break
        for batch in batches:
            for record in batch.records():
                if record.offset in wanted:
                    found[record.offset] = (record.key, record.value)
        offset = batches[-1].next_offset
    return found


def _aborted_batches(records: bytes, aborted: Sequence[AbortedTxn]) -> list[tuple[int, int]]:
    """The (base offset, last offset) of the data batches of aborted transactions among `records`."""
    dropped = AbortedBatches(aborted)
    return [(batch.base_offset, batch.last_offset) for batch in iter_batches(records) if dropped.drops(batch)]


def _batch_spans(records: bytes) -> list[tuple[int, int, int, int]]:
    """Each whole batch of `records` as (base offset, last offset, start byte, end byte)."""
    spans = []
    position = 0
    for batch in iter_batches(records):
        size = batch.size_in_bytes
        spans.append((batch.base_offset, batch.last_offset, position, position + size))
        position += size
    return spans


def _acquired_slice(
    records: bytes, spans: Sequence[tuple[int, int, int, int]], acquired: Sequence[AcquiredRecords]
) -> bytes:
    """The bytes of `records` from the first batch holding an acquired record to the last one (Kafka's
    `ShareFetchUtils.maybeSliceFetchRecords`): a read of `max_bytes` may run far past what a member may take, and
    only the acquired ranges are the member's."""
    first = min(range_.first_offset for range_ in acquired)
    last = max(range_.last_offset for range_ in acquired)
    holding = [(start, end) for base, last_offset, start, end in spans if last_offset >= first and base <= last]
    if not holding:
        return b""
    return records[holding[0][0] : holding[-1][1]]
