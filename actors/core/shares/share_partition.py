"""One share-partition: the records of one topic partition as one share group consumes them (KIP-932, Kafka's
`SharePartition`), every record delivered to one member at a time under a time lock and acknowledged one by one.

The share-partition start offset (SPSO, `start_offset`) is the first offset not yet done; every offset below it is
acknowledged or archived. The end offset (SPEO, `end_offset`) is the offset after the last record taken into flight;
the offsets from SPSO up to SPEO are *in flight*, each in one state (Kafka's `RecordState`, ids as Kafka writes them):

    Available (0) --acquire: delivery count + 1, locked to the member for the lock duration--> Acquired (1)
    Acquired --ACCEPT--> Acknowledged (2)                      (terminal)
    Acquired --REJECT or GAP--> Archived (4)                   (terminal)
    Acquired --RELEASE, lock expiry, member released--> Available, or Archived once the delivery count has reached
               `group.share.delivery.count.limit` (Kafka's `InFlightState.tryUpdateState`)

so a record's delivery count never exceeds the limit. SPSO moves over every done prefix and never back; offsets of
the in-flight range that no run covers held no record when read (the log's first batch began after SPEO) and count
as done (Kafka's cache simply lacks them, and its start-offset walk skips them the same way).

Acquiring (Kafka's `acquire`): the caller reads the log from `next_fetch_offset()` (the first Available record, else
SPEO) and hands over the offset ranges of the batches it read. Available records in flight within them are acquired
first, a whole run at a time until `max_fetch_records` is reached (a soft limit, as Kafka's); then records beyond
SPEO, at most `max_fetch_records` less those acquired and at most `group.share.partition.max.record.locks` in
flight (Kafka 4.2's `lastOffsetAndMaxRecordsToAcquire`), rounded up to the end of the log batch holding the last
one (Kafka's `lastOffsetFromBatchWithRequestOffset`), so the locks can exceed the limit by one batch. A read that
begins below SPSO is taken from SPSO on. In the record-limit acquire mode (Kafka 4.2's `share.acquire.mode=
record_limit`, ShareFetch v2's `ShareAcquireMode` 1) `max_fetch_records` is a hard limit: an Available run is
acquired only up to it, and of new records the batch holding the last one still goes into flight whole, its records
past the limit Available with delivery count 0 (Kafka's in-flight batch with per-offset state), for the next fetch.

Acknowledging (Kafka's `acknowledge`) is all or nothing for the share-partition: the batches are first checked as
`acknowledgements.validate_batches` does (INVALID_REQUEST), then each batch's offsets below SPSO are skipped (they
are done already), a batch when nothing is in flight is INVALID_RECORD_STATE ("not found in the cache"), a batch
starting at or past SPEO or ending past it is INVALID_REQUEST ("past acquired records"),
and an offset in it that is not Acquired by this member (Available, another member's, already acknowledged or
archived, or settled by the batch before it in the same request: a RENEW leaves it Acquired) is INVALID_RECORD_STATE
(`InvalidRecordStateError`); only when every batch passes does any record change.
A RENEW (Kafka 4.2, KIP-1222) leaves its records Acquired by the member and moves their lock deadline to now plus the
group's lock duration; it changes nothing the durable state holds, so it writes nothing.

Time moves only through the injected clock: each call first releases the records whose lock deadline
(acquisition time + the group's `share.record.lock.duration.ms`, else `group.share.record.lock.duration.ms`) has
passed (Kafka's `AcquisitionLockTimerTask`); `next_deadline_ms` tells a timer when the next one is due.

Durable state (`state`, `storage.records.share_group_state.ShareGroupState`): what a restart must keep. A
share-partition built from it has the same SPSO and the same Available, Acknowledged and Archived records; records
that were Acquired come back Available with the delivery count they had before that acquisition (Kafka writes
nothing when it acquires). An uninitialized state takes its SPSO from `share.auto.offset.reset`: the log end offset
for `latest` (Kafka's default), the log start offset for `earliest`
(Kafka's `startOffsetDuringInitialization`).

SPSO also moves when the log start offset passes it (`update_log_start_offset`: retention, DeleteRecords).

The state as last written (`summary`, what DescribeShareGroupOffsets reports): Kafka's share-partition writes its
state to the share coordinator at every change that settles records (an acknowledgement that changed something, a
release, a lock expiry) and moves SPSO over the done prefix only once the write succeeded, so the written start offset
is SPSO from before that change, while the written delivery complete count (the acknowledged and archived records
at or above it, Kafka 4.2's `deliveryCompleteCount`) already counts what the change settled. An acquisition writes
nothing. A share-partition that has written nothing reports start offset -1; one built from a given `state`
(AlterShareGroupOffsets) reports that state until its first write.

Dead letters (Kafka 4.4, KIP-1191): when the group has a dead-letter topic (`errors.deadletterqueue.topic.name`),
each range a REJECT archives, and each range archived because its delivery count reached the limit (a release, a
lock expiry or a member's records released at the limit), is kept with its delivery count and reason for
`take_dead_letters`, which the leader writes to that topic (`actors.core.shares.dead_letters`). The records are
Archived at once: Kafka's intermediate ARCHIVING state, held while the dead letter is written, ends Archived whether
the write succeeds or not. A GAP and an aborted transaction's records are archived without a dead letter, as Kafka
archives them.

A read_committed group (`share.isolation.level`) reads the log only below its last stable offset, and
`archive_aborted` archives the records of aborted transactions just acquired, leaving them out of what is delivered.

Not served yet: throttled delivery of records near the delivery limit.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType, validate_batches
from actors.core.shares.dead_letters import CLIENT_REJECT, DELIVERY_COUNT_EXCEEDED, DeadLetters
from actors.core.shares.group_share_config import EARLIEST, ResolvedShareConfig
from storage.clock import Clock
from storage.errors import InvalidRecordStateError, InvalidRequestError
from storage.records.share_group_state import UNINITIALIZED_START_OFFSET, ShareGroupState, StateBatch


class RecordState(enum.Enum):
    """A record's state in a share-partition, valued as Kafka's `RecordState` ids."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        """Whether the record is done: never delivered again."""
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


# What each acknowledge type makes of an acquired record (Kafka's `ACK_TYPE_TO_RECORD_STATE`); RELEASE archives
# instead once the delivery count limit is reached.
_ACK_STATES = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


@dataclass(slots=True)
class DeliveryTally:
    """Records counted as their deliveries ended, for the metrics: acquired again after an earlier delivery
    (`redelivered`), archived by a REJECT (`rejected`) or at the delivery count limit (`delivery_limit`), and released
    by their acquisition lock's expiry (`lock_timeouts`, Kafka's AcquisitionLockTimeoutPerSec). Only ever grows; one
    tally may outlive several share-partitions of a group (its leader keeps it across reloads)."""

    redelivered: int = 0
    rejected: int = 0
    delivery_limit: int = 0
    lock_timeouts: int = 0


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """An offset range (inclusive) acquired for a member, and its records' delivery count (ShareFetch's
    AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class InFlightRecords:
    """An offset range (inclusive) of in-flight records in one state, as ShareGroupDescribe and the tests see it;
    `member_id` and `deadline_ms` (the lock's) are set while Acquired only."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int | None = None


@dataclass(frozen=True, slots=True)
class StateSummary:
    """The share-partition's state as last written (see the module docstring): its start offset (-1 before any
    write), the records done at or above it, and whether the share-partition wrote it (under its leader's epoch)
    rather than receiving it whole (AlterShareGroupOffsets, which Kafka writes with leader epoch 0)."""

    start_offset: int
    delivery_complete_count: int
    written_by_leader: bool


@dataclass(slots=True)
class _Run:
    """Consecutive in-flight offsets in the same state, delivery count, holder and lock deadline."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int | None = None

    def same_as(self, other: _Run) -> bool:
        return (self.state, self.delivery_count, self.member_id, self.deadline_ms) == (
            other.state,
            other.delivery_count,
            other.member_id,
            other.deadline_ms,
        )


class SharePartition:
    """One share-partition's in-flight records (see the module docstring for the rules).

    `config` is what the group runs with (the delivery count limit, the record lock limit, the lock duration, the
    auto offset reset), read at each call so a changed group config applies to the next acquisition. `state` is the
    durable state to start from; for an uninitialized one, `log_start_offset` and `log_end_offset` are the log's, for
    `share.auto.offset.reset`. A log whose start offset has passed the state's start offset since it was written
    (retention while the share-partition was away) is followed by `update_log_start_offset`.
    """

    def __init__(
        self,
        clock: Clock,
        config: ResolvedShareConfig | None = None,
        *,
        state: ShareGroupState | None = None,
        log_start_offset: int = 0,
        log_end_offset: int = 0,
        tally: DeliveryTally | None = None,
    ) -> None:
        self.config = config or ResolvedShareConfig()
        self.tally = tally if tally is not None else DeliveryTally()
        self._clock = clock
        state = state or ShareGroupState()
        self.state_epoch = state.state_epoch
        self._runs: list[_Run] = []
        self._dead_letters: list[DeadLetters] = []
        self._written = StateSummary(state.start_offset, _done_count(state.state_batches), written_by_leader=False)
        if not state.initialized:
            start = log_start_offset if self.config.auto_offset_reset == EARLIEST else log_end_offset
            self._start = self._end = start
            return
        self._start = state.start_offset
        for batch in state.state_batches:
            self._runs.append(
                _Run(batch.first_offset, batch.last_offset, RecordState(batch.delivery_state), batch.delivery_count)
            )
        self._end = self._runs[-1].last + 1 if self._runs else self._start
        self._merge()
        self._advance_start()

    @classmethod
    def starting_at(cls, clock: Clock, start_offset: int, tally: DeliveryTally | None = None) -> SharePartition:
        """A share-partition whose state was written whole with `start_offset` and nothing in flight
        (AlterShareGroupOffsets). Kafka takes any offset: one below 0 (-1 is Kafka's "uninitialized") is reported as
        written, and the share-partition starts at the log start offset, which it follows from its first use."""
        state = ShareGroupState(start_offset=max(start_offset, UNINITIALIZED_START_OFFSET))
        share = cls(clock, state=state, tally=tally)
        share._written = StateSummary(start_offset, 0, written_by_leader=False)
        return share

    # --- what a reader sees ------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """SPSO: every offset below it is acknowledged or archived."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO: the offset after the last record taken into flight (equal to SPSO when none is in flight). Kafka's
        `endOffset` is the last in-flight offset itself, this minus one, while records are in flight."""
        return self._end

    def in_flight(self) -> tuple[InFlightRecords, ...]:
        """The in-flight records, in offset order, a range per run of equal state."""
        return tuple(
            InFlightRecords(r.first, r.last, r.state, r.delivery_count, r.member_id, r.deadline_ms) for r in self._runs
        )

    def summary(self) -> StateSummary:
        """The state as last written (see the module docstring), expired locks released first."""
        self.maybe_expire_locks()
        return self._written

    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first Available in-flight record, else SPEO (Kafka's
        `nextFetchOffset`)."""
        self.maybe_expire_locks()
        for run in self._runs:
            if run.state is RecordState.AVAILABLE:
                return run.first
        return self._end

    def can_acquire_records(self) -> bool:
        """Whether a read may acquire anything: an in-flight record is Available, or fewer than
        `group.share.partition.max.record.locks` are in flight (Kafka's `canAcquireRecords`)."""
        return self.next_fetch_offset() < self._end or self._end - self._start < self.config.max_record_locks

    def next_deadline_ms(self) -> int | None:
        """The earliest lock deadline of an acquired record, when a timer should call `maybe_expire_locks`."""
        deadlines = [r.deadline_ms for r in self._runs if r.deadline_ms is not None]
        return min(deadlines) if deadlines else None

    def state(self) -> ShareGroupState:
        """The durable state to write (see `storage.records.share_group_state`): SPSO and every in-flight record,
        Acquired ones as Available with the delivery count they had before their acquisition, but for the last ones
        never delivered before it."""
        batches: list[StateBatch] = []
        for run in self._runs:
            state, count = run.state, run.delivery_count
            if state is RecordState.ACQUIRED:
                state, count = RecordState.AVAILABLE, count - 1
            previous = batches[-1] if batches else None
            if (
                previous is not None
                and previous.last_offset + 1 == run.first
                and (previous.delivery_state, previous.delivery_count) == (state.value, count)
            ):
                batches[-1] = StateBatch(previous.first_offset, run.last, state.value, count)
            else:
                batches.append(StateBatch(run.first, run.last, state.value, count))
        # Records at the end never delivered before their current acquisition are as if never read: leaving them out
        # keeps a fetch of new records from changing the durable state (Kafka writes nothing when it acquires).
        while batches and (batches[-1].delivery_state, batches[-1].delivery_count) == (RecordState.AVAILABLE.value, 0):
            batches.pop()
        return ShareGroupState(self.state_epoch, self._start, tuple(batches))

    # --- what members do ---------------------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        max_fetch_records: int,
        record_limit: bool = False,
    ) -> list[AcquiredRecords]:
        """Acquires for `member_id` what it may take of the records a read of the log returned, `log_batches` being
        the (base offset, last offset) of each batch read, in order; `record_limit` makes `max_fetch_records` a hard
        limit (see the module docstring)."""
        self.maybe_expire_locks()
        if max_fetch_records <= 0 or not log_batches:
            return []
        first = max(log_batches[0][0], self._start)
        last = log_batches[-1][1]
        if last < first:
            return []
        deadline_ms = self._clock.milliseconds() + self.config.record_lock_duration_ms
        taken: list[_Run] = []
        count = 0
        overlap_last = min(last, self._end - 1)
        if first <= overlap_last:
            for run in self._slice(first, overlap_last):
                if count >= max_fetch_records:
                    break
                if run.state is RecordState.AVAILABLE:
                    if record_limit and count + run.last - run.first + 1 > max_fetch_records:
                        self._split_before(run.first + max_fetch_records - count)
                    run.state, run.member_id, run.deadline_ms = RecordState.ACQUIRED, member_id, deadline_ms
                    run.delivery_count += 1
                    taken.append(run)
                    count += run.last - run.first + 1
                    if run.delivery_count > 1:
                        self.tally.redelivered += run.last - run.first + 1
        room = min(max_fetch_records - count, self.config.max_record_locks - (self._end - self._start))
        if last >= self._end and room > 0:
            new_first = max(first, self._end)
            new_last = min(last, _end_of_batch(log_batches, new_first + room - 1))
            acquired_last = min(new_last, new_first + room - 1) if record_limit else new_last
            run = _Run(new_first, acquired_last, RecordState.ACQUIRED, 1, member_id, deadline_ms)
            self._runs.append(run)
            taken.append(run)
            if acquired_last < new_last:
                self._runs.append(_Run(acquired_last + 1, new_last, RecordState.AVAILABLE, 0))
            self._end = new_last + 1
        acquired = _coalesce([AcquiredRecords(r.first, r.last, r.delivery_count) for r in taken])
        self._merge()
        self._advance_start()
        return acquired

    def archive_aborted(
        self, acquired: Sequence[AcquiredRecords], aborted: Sequence[tuple[int, int]]
    ) -> list[AcquiredRecords]:
        """Archives the records just `acquired` that lie in the batches of aborted transactions (`aborted`, the
        (base offset, last offset) of each, in order) and returns the acquired ranges without them: a read_committed
        group never delivers them (Kafka's `filterAbortedTransactionalAcquiredRecords`). Nothing is written for it, as
        Kafka writes nothing when it acquires; the durable state carries them Archived from the next write."""
        kept: list[AcquiredRecords] = []
        for ranged in acquired:
            first = ranged.first_offset
            for base, last in aborted:
                if last < first or base > ranged.last_offset:
                    continue
                if base > first:
                    kept.append(AcquiredRecords(first, base - 1, ranged.delivery_count))
                for run in self._slice(max(base, first), min(last, ranged.last_offset)):
                    if run.state is RecordState.ACQUIRED:
                        run.state, run.member_id, run.deadline_ms = RecordState.ARCHIVED, None, None
                first = last + 1
            if first <= ranged.last_offset:
                kept.append(AcquiredRecords(first, ranged.last_offset, ranged.delivery_count))
        self._merge()
        self._advance_start()
        return kept

    def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch], renew: bool = False) -> None:
        """Applies `member_id`'s acknowledgements, all or none (see the module docstring for the errors); with
        `renew`, RENEW may be among them."""
        self.maybe_expire_locks()
        validate_batches(batches, renew)
        changes: list[tuple[int, int, AcknowledgeType]] = []
        claimed_last = -1
        for batch in batches:
            if batch.last_offset < self._start:
                continue
            first = max(batch.first_offset, self._start)
            if not self._runs:
                raise InvalidRecordStateError(
                    "Batch record not found. The request batch offsets are not found in the cache.", offset=first
                )
            if first >= self._end:
                raise InvalidRequestError(
                    "Batch record not found. The first offset in request is past acquired records.", offset=first
                )
            if batch.last_offset >= self._end:
                raise InvalidRequestError(
                    "Batch record not found. The last offset in request is past acquired records.",
                    offset=batch.last_offset,
                )
            if first <= claimed_last:
                raise InvalidRecordStateError(
                    "The record state is invalid. The acknowledgement of delivery could not be completed.",
                    offset=first,
                )
            if batch.type_at(batch.last_offset) is not AcknowledgeType.RENEW:
                claimed_last = batch.last_offset
            for run in self._overlapping(first, batch.last_offset):
                if run.state is not RecordState.ACQUIRED or run.member_id != member_id:
                    raise InvalidRecordStateError(
                        "The record state is invalid. The acknowledgement of delivery could not be completed.",
                        offset=max(run.first, first),
                    )
            changes.extend(_type_ranges(batch, first))
        renewed_until = self._clock.milliseconds() + self.config.record_lock_duration_ms
        for change_first, change_last, ack_type in changes:
            for run in self._slice(change_first, change_last):
                if ack_type is AcknowledgeType.RENEW:
                    run.deadline_ms = renewed_until
                else:
                    self._settle(run, _ACK_STATES[ack_type], rejected=ack_type is AcknowledgeType.REJECT)
        if any(ack_type is not AcknowledgeType.RENEW for _, _, ack_type in changes):
            self._write()
        self._merge()
        self._advance_start()

    def release_acquired_records(self, member_id: str) -> None:
        """Releases every record `member_id` holds, as when its share session ends or it leaves the group (Kafka's
        `releaseAcquiredRecords`): each becomes Available, or Archived at the delivery count limit."""
        self.maybe_expire_locks()
        held = [r for r in self._runs if r.state is RecordState.ACQUIRED and r.member_id == member_id]
        for run in held:
            self._settle(run, RecordState.AVAILABLE)
        if held:
            self._write()
        self._merge()
        self._advance_start()

    def update_log_start_offset(self, log_start_offset: int) -> None:
        """Moves SPSO up to a log start offset that passed it (retention, DeleteRecords; Kafka's
        `updateCacheAndOffsets`): the records below are gone from the log, so none is delivered again. Kafka archives
        the Available ones and lets the Acquired ones archive when released; since a holder's acknowledgement below
        SPSO is skipped either way, they are dropped here at once."""
        self.maybe_expire_locks()
        if log_start_offset <= self._start:
            return
        self._split_before(log_start_offset)
        self._runs = [run for run in self._runs if run.first >= log_start_offset]
        self._start = log_start_offset
        self._end = max(self._end, log_start_offset)
        self._advance_start()

    def maybe_expire_locks(self) -> None:
        """Releases the acquired records whose lock deadline has passed, as if their holder released them."""
        now_ms = self._clock.milliseconds()
        expired = False
        for run in self._runs:
            if run.deadline_ms is not None and run.deadline_ms <= now_ms:
                self.tally.lock_timeouts += run.last - run.first + 1
                self._settle(run, RecordState.AVAILABLE)
                expired = True
        if expired:
            self._write()
            self._merge()
            self._advance_start()

    # --- the runs ----------------------------------------------------------------------------------------

    def _write(self) -> None:
        """Records the state a change writes: SPSO before the change moves it, and the records done at or above it."""
        done = sum(r.last - r.first + 1 for r in self._runs if r.state.terminal)
        self._written = StateSummary(self._start, done, written_by_leader=True)

    def take_dead_letters(self) -> list[DeadLetters]:
        """The ranges archived for the dead-letter topic since the last call (see the module docstring), in the order
        they were archived."""
        taken, self._dead_letters = self._dead_letters, []
        return taken

    def _settle(self, run: _Run, state: RecordState, *, rejected: bool = False) -> None:
        """Ends `run`'s acquisition in `state`; a release at the delivery count limit archives. A range archived by
        a REJECT (`rejected`) or at the limit is kept as dead letters when the group has a dead-letter topic."""
        message = CLIENT_REJECT if rejected else None
        records = run.last - run.first + 1
        if rejected:
            self.tally.rejected += records
        if state is RecordState.AVAILABLE and run.delivery_count >= self.config.delivery_count_limit:
            state, message = RecordState.ARCHIVED, DELIVERY_COUNT_EXCEEDED
            self.tally.delivery_limit += records
        if message is not None and self.config.dead_letters.enabled:
            self._dead_letters.append(DeadLetters(run.first, run.last, run.delivery_count, message))
        run.state, run.member_id, run.deadline_ms = state, None, None

    def _overlapping(self, first: int, last: int) -> Iterator[_Run]:
        """The runs holding any offset of first..last, in order."""
        index = max(bisect.bisect_right(self._runs, first, key=lambda r: r.first) - 1, 0)
        for run in self._runs[index:]:
            if run.first > last:
                return
            if run.last >= first:
                yield run

    def _slice(self, first: int, last: int) -> list[_Run]:
        """The runs covering first..last, split so that each lies within it."""
        self._split_before(first)
        self._split_before(last + 1)
        return list(self._overlapping(first, last))

    def _split_before(self, offset: int) -> None:
        index = bisect.bisect_right(self._runs, offset, key=lambda r: r.first) - 1
        if index < 0:
            return
        run = self._runs[index]
        if run.first < offset <= run.last:
            tail = _Run(offset, run.last, run.state, run.delivery_count, run.member_id, run.deadline_ms)
            run.last = offset - 1
            self._runs.insert(index + 1, tail)

    def _merge(self) -> None:
        merged: list[_Run] = []
        for run in self._runs:
            if merged and merged[-1].last + 1 == run.first and merged[-1].same_as(run):
                merged[-1].last = run.last
            else:
                merged.append(run)
        self._runs = merged

    def _advance_start(self) -> None:
        """Moves SPSO over the done prefix: terminal runs and the offsets between runs (Kafka's
        `maybeUpdateCachedStateAndOffsets`), dropping the runs it passes."""
        cursor = self._start
        done = 0
        for run in self._runs:
            if not run.state.terminal:
                cursor = max(cursor, run.first)
                break
            cursor = run.last + 1
            done += 1
        else:
            cursor = self._end
        del self._runs[:done]
        self._start = cursor


def _done_count(batches: Sequence[StateBatch]) -> int:
    """The acknowledged and archived records of a written state's batches."""
    return sum(b.last_offset - b.first_offset + 1 for b in batches if RecordState(b.delivery_state).terminal)


def _end_of_batch(log_batches: Sequence[tuple[int, int]], offset: int) -> int:
    """The last offset of the log batch holding `offset`, else `offset` itself."""
    for base, last in log_batches:
        if base <= offset <= last:
            return last
    return offset


def _type_ranges(batch: AcknowledgementBatch, first: int) -> Iterator[tuple[int, int, AcknowledgeType]]:
    """first..batch.last_offset as ranges of one acknowledge type each."""
    if len(batch.acknowledge_types) == 1:
        yield first, batch.last_offset, batch.type_at(first)
        return
    range_first, range_type = first, batch.type_at(first)
    for offset in range(first + 1, batch.last_offset + 1):
        ack_type = batch.type_at(offset)
        if ack_type is not range_type:
            yield range_first, offset - 1, range_type
            range_first, range_type = offset, ack_type
    yield range_first, batch.last_offset, range_type


def _coalesce(ranges: list[AcquiredRecords]) -> list[AcquiredRecords]:
    """Adjacent ranges of the same delivery count as one."""
    out: list[AcquiredRecords] = []
    for r in ranges:
        if out and out[-1].last_offset + 1 == r.first_offset and out[-1].delivery_count == r.delivery_count:
            out[-1] = AcquiredRecords(out[-1].first_offset, r.last_offset, r.delivery_count)
        else:
            out.append(r)
    return out
