"""A partition log: the `<topic>-<partition>` folder of segments (Kafka's `UnifiedLog` + `LocalLog`).

Offsets: `log_start_offset` (first readable offset, only moves forward), `log_end_offset` (LEO, the next
offset to assign), `high_watermark` (last offset + 1 visible to consumers; with one replica it follows
the LEO, with several replication moves it: `set_replicated`), `recovery_point` (everything below it is known fsynced).

Append (leader path): validate the client's batches (see `log_validator`), then under the log lock
assign offsets in place from the LEO (baseOffset and leader epoch are outside the CRC), stamp
LogAppendTime if the topic uses it, roll if a roll condition holds (`LogSegment.should_roll`), write to the active
segment, advance the LEO, and fsync when `flush.messages` / `flush.ms` say so. A roll fsyncs the sealed segment
as Kafka does, in the background (`log_flush`). A producer's batches go through its producer state first
(`producer_append`: sequences, epochs, transactions); a COMMIT/ABORT marker closes its transaction, an ABORT is
indexed in the segment's `.txnindex`, and the last stable offset (LSO) moves once the high watermark passes it.

Read (fetch): whole batches from the one containing the offset, at most `max_bytes` (at least one batch
with `min_one_message`), never past the isolation bound; the result may end mid-batch like Kafka's.
Readers use an immutable snapshot of the segment list, so they never wait behind an append. A segment
deleted under a read stays open until that read ends; a read that chose a segment deleted before it
began starts again on the current segments (see `LogSegment`).

Shutdown: `close()` flushes, writes the final time-index entries, trims indexes and a preallocated
`.log`, then writes the `.kafka_cleanshutdown` marker. `Log.open` deletes that marker before loading,
so a crash while the log is open always counts as unclean and triggers recovery on the next open.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from storage import file_names
from storage.arguments import is_int
from storage.clock import SYSTEM_CLOCK, Clock
from storage.closeable import Closeable
from storage.config.log_config import LogConfig
from storage.errors import (
    InvalidRequestError,
    LogClosedError,
    LogSegmentError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StorageError,
)
from storage.file_io import fsync_dir
from storage.files import clean_shutdown
from storage.files.checkpoint_file import EpochEntry
from storage.files.log_dir_lock import LogDirLock
from storage.partition import retention
from storage.partition.log_append import assign_offsets, check_follower_offsets, parse_follower_batches, stamp_batches
from storage.partition.log_flush import LogFlush
from storage.partition.log_loader import OpenedLog, load_producer_state, new_segment, open_log_folder
from storage.partition.log_read import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    ReadView,
    check_read_arguments,
    offset_by_timestamp,
    read_records,
    read_view,
)
from storage.partition.log_validator import validate_client_records
from storage.partition.producer_append import AppendOrigin, PendingAppend, TransactionVerification
from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS, ActiveProducer
from storage.records.file_records import TimestampAndOffset
from storage.records.legacy_records import LegacyRecord
from storage.records.record_batch import NO_TIMESTAMP, ControlRecordType, Record, build_control_batch
from storage.segment.delayed_deletes import DelayedDeletes
from storage.segment.log_segment import FetchDataInfo, LogOffsetMetadata, LogSegment, RollParams, SegmentDeletedError
from storage.segment.log_segments import LogSegments
from storage.segment.transaction_index import AbortedTxn, collect_aborted_transactions

logger = logging.getLogger(__name__)

DEFAULT_FETCH_MAX_BYTES = 1024 * 1024  # Kafka's max.partition.fetch.bytes
# The epoch stamped on the batches of a log no leader epoch has written yet (Kafka's first leader's epoch).
LEADER_EPOCH = 0
# Lock-free read attempts before one under the writer lock: a segment deleted between choosing it and reading it
# (retention with file.delete.delay.ms 0) costs one retry on the current segments; two in a row do not happen.
LOCK_FREE_READ_ATTEMPTS = 2
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did: the offsets it assigned and the timestamps it saw."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    batch_count: int
    valid_bytes: int
    batch_offsets: tuple[tuple[int, int], ...] = ()
    duplicate: bool = False


class Log(Closeable):
    """One partition's log in its own folder. Appends, rolls and truncation are serialised by a lock."""

    def __init__(self, opened: OpenedLog, config: LogConfig, clock: Clock) -> None:
        """Use `Log.open`, which loads (and recovers) the folder first."""
        self.directory = opened.directory
        self._config = config
        self._clock = clock
        self._segments = opened.segments
        self._log_start_offset = opened.log_start_offset
        self._folder_lock = opened.folder_lock
        self._producer_state = opened.producer_state
        self._leader_epochs = opened.leader_epochs
        self._lock = threading.RLock()
        self._closed = False
        self._delayed_deletes = DelayedDeletes()
        self._flush = LogFlush(
            self.directory,
            self._segments,
            clock,
            self._lock,
            opened.recovery_point,
            lambda: self.log_end_offset,
            lambda: self._closed,
        )
        active = self._segments.active
        self._end_offset_metadata = LogOffsetMetadata(opened.log_end_offset, active.base_offset, active.size)
        self._high_watermark = opened.log_end_offset
        # The producer state's first unstable offset, kept for lock-free readers (Kafka's
        # `firstUnstableOffsetMetadata`): None when no transaction is open or awaiting replication.
        self._first_unstable_offset: int | None = None
        self._update_first_unstable_offset()
        # False: the high watermark follows every append (the only replica). True: replication moves it.
        self._replicated = False
        self.dropped_on_open = tuple(opened.dropped)

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: LogConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """Opens (creating it if missing) and, after an unclean shutdown, recovers the log in `directory`.

        With `had_clean_shutdown=None` the log runs standalone: it holds `<folder>/.lock` while open
        (a second process gets `LogDirLockedError`) and removes it on `close()`, which also writes
        `<folder>/.kafka_cleanshutdown`. On open, that marker means clean; so does the marker of the
        Kafka log dir holding the folder (Kafka's own layout), unless a `.lock` left in the folder
        shows that raybroker had the log open when its process died. A LogManager that owns the log
        dir passes `had_clean_shutdown`, `recovery_point` and `log_start_offset` from its checkpoints.
        `producer_id_expiration_ms` is the broker's `producer.id.expiration.ms`: producers idle that long are
        dropped from the loaded state and by `remove_expired_producers`.
        """
        config = config or LogConfig()
        opened = open_log_folder(
            Path(directory),
            config,
            clock,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
            producer_id_expiration_ms=producer_id_expiration_ms,
        )
        return cls(opened, config, clock)

    # --- state -----------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """New settings apply to the next append, roll and retention pass."""
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._end_offset_metadata.message_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._flush.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._flush.last_flush_ms

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes()

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    def log_segments(self) -> tuple[LogSegment, ...]:
        """The segments, oldest first (an immutable snapshot)."""
        return self._segments.snapshot()

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def lock(self) -> threading.RLock:
        """The writer lock (retention and the cleaner take it to change the segment list)."""
        return self._lock

    @property
    def leader_epoch(self) -> int:
        """The epoch this log stamps on the batches it appends: the newest in its leader-epoch-checkpoint (a
        Kafka log dir keeps the epoch its last leader wrote), `LEADER_EPOCH` before any."""
        latest = self._leader_epochs.latest_epoch
        return LEADER_EPOCH if latest is None else latest

    @property
    def latest_epoch(self) -> int | None:
        """The newest epoch of the leader-epoch cache, None while it has none: the epoch ListOffsets answers with the
        latest offset."""
        return self._leader_epochs.latest_epoch

    def become_leader(self, epoch: int | None = None) -> None:
        """Records that `epoch` (default: the log's current one) leads from the log end offset on, as a Kafka replica
        does when it is made leader: a new partition's checkpoint then reads `0 0` before its first record."""
        with self._lock:
            self._check_open()
            self._leader_epochs.assign(self.leader_epoch if epoch is None else epoch, self.log_end_offset)

    def epoch_entries(self) -> tuple[EpochEntry, ...]:
        """The leader-epoch-checkpoint's entries: `(epoch, first offset written under it)`, oldest first."""
        with self._lock:
            return self._leader_epochs.entries

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: `(epoch, end offset)` for a requested epoch, by Kafka's rules (see
        `leader_epoch_cache`); `(-1, -1)` for an undefined or unknown newer epoch."""
        if not is_int(epoch):
            raise InvalidRequestError(f"a leader epoch must be an int, not {type(epoch).__name__}")
        with self._lock:
            return self._leader_epochs.end_offset_for(epoch, self.log_end_offset)

    @property
    def replicated(self) -> bool:
        """Whether replication moves the high watermark (`set_replicated`) rather than every append."""
        return self._replicated

    def set_replicated(self, replicated: bool) -> None:
        """True while other replicas must have an offset before consumers see it: appends then leave the high
        watermark where it is, and the replica's leader (or, on a follower, its leader's answers) moves it with
        `update_high_watermark`. False makes this log the only replica again: the high watermark jumps to the
        log end offset and follows every append from then on."""
        with self._lock:
            self._replicated = replicated
            if not replicated:
                self._set_high_watermark(self.log_end_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Sets the high watermark, clamped to [log_start_offset, log_end_offset]; returns the new value."""
        with self._lock:
            self._set_high_watermark(min(max(offset, self._log_start_offset), self.log_end_offset))
            return self._high_watermark

    def _set_high_watermark(self, offset: int) -> None:
        """Moves the high watermark; transactions whose marker it passes become stable (holds the lock)."""
        self._high_watermark = offset
        self._producer_state.on_high_watermark_updated(offset)
        self._update_first_unstable_offset()

    def _update_first_unstable_offset(self) -> None:
        """Kafka's `maybeIncrementFirstUnstableOffset`: the producer state's, never below the log start."""
        first = self._producer_state.first_unstable_offset(self._high_watermark)
        self._first_unstable_offset = None if first is None else max(first, self._log_start_offset)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open, or whose marker the high watermark has not
        passed yet (clamped to the log start); None when there is none."""
        return self._first_unstable_offset

    def active_producers(self) -> list[ActiveProducer]:
        """The producers this partition remembers and their open transactions (Kafka's DescribeProducers)."""
        with self._lock:
            return self._producer_state.active_producers()

    @property
    def last_stable_offset(self) -> int:
        """The LSO: read_committed consumers read below it. The first unstable offset when it is below the high
        watermark, else the high watermark (Kafka's `lastStableOffset`): a transaction's records become readable
        once its marker is written and the high watermark has passed the marker."""
        first, high_watermark = self._first_unstable_offset, self._high_watermark
        return first if first is not None and first < high_watermark else high_watermark

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("log is closed", path=self.directory)
        self._flush.check()

    # --- append ----------------------------------------------------------------------------------

    def append(
        self,
        batches: bytes | bytearray | memoryview,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification: TransactionVerification | None = None,
    ) -> LogAppendInfo:
        """Appends one or more v2 batches (baseOffset 0) as the leader, assigning offsets from the LEO (Kafka's
        `appendAsLeader`).

        Every batch is validated before anything is written; a failing batch rejects the whole call.
        A batch an idempotent producer already wrote (same producer, epoch and sequences among its
        last 5 batches) is not written again: its original offsets are returned (`batch_offsets`, one
        pair per input batch; `duplicate` when no batch was written, with the first duplicate's original max
        timestamp as `log_append_time`, which Kafka answers for it whatever the topic's timestamp type). The
        batches of one call are judged in order, each after the ones before it; an out-of-order one rejects the
        whole call.

        `origin` says who writes (`producer_append.AppendOrigin`): CLIENT, a producer, whose transactional
        batches open its transaction on this partition and who may not write a non-transactional batch while one
        is open (`InvalidTxnStateError`) nor a control batch (`InvalidRecordError`); COORDINATOR, a transaction
        coordinator writing markers (see `append_transaction_marker`) or a group coordinator writing a
        transactional offset commit. `verification` is KIP-890's check, asked before a CLIENT batch opens a
        transaction (None: none is asked).
        """
        if origin is AppendOrigin.REPLICATION:
            raise InvalidRequestError("a replica's batches are appended with append_as_follower")
        now_ms = self._clock.milliseconds()
        validated = validate_client_records(
            batches, self._config, now_ms, from_coordinator=origin is AppendOrigin.COORDINATOR
        )
        with self._lock:
            self._check_open()
            self._delayed_deletes.delete_due(now_ms)
            log_append_time = now_ms if self._config.message_timestamp_type == "LogAppendTime" else NO_TIMESTAMP
            epoch = self.leader_epoch
            pending = PendingAppend(self._producer_state, origin, verification)
            assigned = assign_offsets(validated, pending, self.log_end_offset, log_append_time)
            kept, batch_offsets = assigned.batches, assigned.batch_offsets
            if not kept:
                # Kafka's answer to a duplicate: the original offsets, and its batch's timestamp as log append time.
                return LogAppendInfo(
                    batch_offsets[0][0],
                    batch_offsets[-1][1],
                    NO_TIMESTAMP,
                    -1,
                    assigned.duplicate_timestamp,
                    self._log_start_offset,
                    0,
                    0,
                    0,
                    batch_offsets,
                    duplicate=True,
                )
            self._leader_epochs.assign(epoch, kept[0].metadata.first_offset)
            stamped = stamp_batches(kept, epoch, log_append_time)
            return self._append_assigned(
                stamped.pieces,
                kept[0].metadata.first_offset,
                kept[-1].metadata.last_offset,
                stamped.max_timestamp,
                stamped.offset_of_max_timestamp,
                log_append_time,
                sum(batch.info.records_count for batch in kept),
                len(kept),
                pending,
                batch_offsets,
            )

    def append_transaction_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, result: ControlRecordType
    ) -> LogAppendInfo:
        """Writes the COMMIT or ABORT marker (`result`) of `producer_id`'s transaction, as a transaction
        coordinator's WriteTxnMarkers does on the partition leader (Kafka's `appendAsLeader` with origin
        COORDINATOR): one control batch stamped with the log's clock.

        Refused with `InvalidProducerEpochError` when `producer_epoch` is older than the producer's, with
        `TransactionCoordinatorFencedError` when `coordinator_epoch` is older than the one of the producer's last
        marker. A marker closing an open transaction completes it: an ABORT is indexed in the segment's
        `.txnindex`, and the LSO moves past the transaction once the high watermark passes the marker. A marker
        for a producer with no open transaction here (a retry, an empty transaction) is written and changes only
        the producer's epochs.
        """
        if result not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRequestError(f"a transaction marker is COMMIT or ABORT, not {result!r}")
        marker = build_control_batch(
            result,
            timestamp=self._clock.milliseconds(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
        )
        return self.append(marker, origin=AppendOrigin.COORDINATOR)

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Appends batches whose offsets are already assigned (replication, tests of offset gaps).

        Offsets must increase and start at or above the LEO; CRCs are checked; `max.message.bytes`
        is not (Kafka's follower path). The producer state and the `.txnindex` follow the batches as on the leader,
        without refusing any (origin REPLICATION).
        """
        data = bytes(batches)
        parsed = parse_follower_batches(data)
        with self._lock:
            self._check_open()
            check_follower_offsets(parsed, self.log_end_offset)
            pending = PendingAppend(self._producer_state, AppendOrigin.REPLICATION)
            for batch in parsed:
                pending.append_batch(batch)
            best = max(parsed, key=lambda batch: batch.max_timestamp)
            info = self._append_assigned(
                [data],
                parsed[0].base_offset,
                parsed[-1].last_offset,
                best.max_timestamp,
                best.last_offset,
                NO_TIMESTAMP,
                sum(batch.records_count for batch in parsed),
                len(parsed),
                pending,
            )
            for batch in parsed:
                # A leader stamps its epoch on what it writes; -1 (written by no leader) starts no epoch.
                if batch.partition_leader_epoch >= 0:
                    self._leader_epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            return info

    def _append_assigned(
        self,
        pieces: list[bytes | bytearray | memoryview],
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        log_append_time: int,
        record_count: int,
        batch_count: int,
        pending: PendingAppend,
        batch_offsets: tuple[tuple[int, int], ...] = (),
    ) -> LogAppendInfo:
        """Writes assigned batches to the active segment (rolling first if due), then applies their producer state
        (indexing aborted transactions in that segment), then moves the high watermark of a single replica."""
        size = sum(len(piece) for piece in pieces)
        if size > self._config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {size} bytes is larger than segment.bytes ({self._config.segment_bytes})"
            )
        segment = self._maybe_roll(size, first_offset, last_offset, max_timestamp)
        segment.append(last_offset, max_timestamp, offset_of_max_timestamp, pieces)
        self._end_offset_metadata = LogOffsetMetadata(last_offset + 1, segment.base_offset, segment.size)
        pending.commit(segment.txn_index)
        if self._replicated:
            self._update_first_unstable_offset()
        else:
            self._set_high_watermark(last_offset + 1)
        now_ms = self._clock.milliseconds()
        if (
            self.log_end_offset - self._flush.recovery_point >= self._config.flush_messages
            or now_ms - self._flush.last_flush_ms >= self._config.flush_ms
        ):
            self.flush()
        return LogAppendInfo(
            first_offset,
            last_offset,
            max_timestamp,
            offset_of_max_timestamp,
            log_append_time,
            self._log_start_offset,
            record_count,
            batch_count,
            size,
            batch_offsets,
        )

    # --- roll ------------------------------------------------------------------------------------

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, max_timestamp: int) -> LogSegment:
        segment = self._segments.active
        params = RollParams(
            self._config.effective_segment_ms,
            self._config.segment_bytes,
            max_timestamp,
            last_offset,
            size,
            self._clock.milliseconds(),
        )
        if segment.should_roll(params):
            return self.roll(first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Starts a new active segment at max(expected_next_offset, LEO); seals the old one."""
        with self._lock:
            self._check_open()
            new_offset = max(expected_next_offset or 0, self.log_end_offset)
            active = self._segments.active
            if active.base_offset == new_offset:
                if active.size > 0:
                    raise LogSegmentError(
                        f"cannot roll to offset {new_offset}: segment {active.base_offset} exists and holds data",
                        path=self.directory,
                    )
                self._segments.remove(active.base_offset)
                active.delete_files()
            elif new_offset < active.base_offset:
                raise LogSegmentError(
                    f"cannot roll to offset {new_offset}, below the active segment {active.base_offset}",
                    path=self.directory,
                )
            else:
                for stale in file_names.segment_files(self.directory, new_offset):
                    if stale.exists():
                        logger.warning("%s: deleting stale file %s before rolling", self.directory, stale.name)
                        stale.unlink()
                active.on_become_inactive_segment()
            segment = new_segment(self.directory, new_offset, self._config, self._clock)
            self._segments.add(segment)
            self._end_offset_metadata = LogOffsetMetadata(self.log_end_offset, segment.base_offset, segment.size)
            self._producer_state.write_snapshot(new_offset)
            self._flush.flush_in_background(new_offset)
            return segment

    def wait_for_background_flushes(self) -> None:
        """Returns once the flushes started by rolls so far are done (the recovery point has moved)."""
        self._flush.wait()

    # --- flush -----------------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsyncs every segment holding offsets in [recovery_point, offset) and moves the recovery point."""
        with self._lock:
            self._check_open()
            target = self.log_end_offset if offset is None else offset
            if target > self._flush.recovery_point or offset is None:
                self._flush.flush(target)

    # --- read ------------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        min_one_message: bool = True,
        *,
        isolation: str = "log_end",
    ) -> FetchDataInfo:
        """Kafka's fetch semantics (whole batches, the first one even above `max_bytes`).

        `isolation` (Kafka's `FetchIsolation`) bounds what is read: `log_end` (a follower), `high_watermark` (a
        read_uncommitted consumer) or `txn_committed` (a read_committed consumer: below the last stable offset).
        A `txn_committed` read also answers the aborted transactions overlapping the bytes it returns
        (`FetchDataInfo.aborted_transactions`, Kafka's `addAbortedTransactions`), so the consumer can drop their
        records; the other two answer None there.
        """
        check_read_arguments(offset, max_bytes, isolation)
        return self._lock_free(lambda view: read_view(view, offset, max_bytes, min_one_message, isolation))

    def _lock_free(self, read: Callable[[ReadView], T]) -> T:
        """`read` on a view of the log taken without the writer lock; retried on a fresh view when a segment it
        chose was deleted meanwhile (`SegmentDeletedError`), and at last under the lock, which deletions take."""
        self._check_open()
        for _ in range(LOCK_FREE_READ_ATTEMPTS):
            try:
                return read(self._read_view())
            except SegmentDeletedError:
                continue
        with self._lock:
            self._check_open()
            return read(self._read_view())

    def _read_view(self) -> ReadView:
        return ReadView(
            self.directory,
            self._segments.snapshot(),
            self._end_offset_metadata,
            self._log_start_offset,
            self._high_watermark,
            self.last_stable_offset,
        )

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), from the `.txnindex` files of
        the segment holding `fetch_offset` and the ones after it, as far as needed (Kafka's
        `collectAbortedTransactions`): each entry's producer id, first offset, ABORT marker offset and last stable
        offset. A read_committed consumer skips a transactional batch of a listed producer from the entry's first
        offset until that producer's ABORT marker."""
        return collect_aborted_transactions(self._segments.snapshot(), fetch_offset, upper_bound_offset)

    def records(
        self, start_offset: int | None = None, end_offset: int | None = None
    ) -> Iterator[Record | LegacyRecord]:
        """Every record from `start_offset` (default: log start) to `end_offset` (default: LEO), decoded: a
        convenience for tools and tests (consumers fetch bytes with `read`)."""
        start = self._log_start_offset if start_offset is None else start_offset
        end = self.log_end_offset if end_offset is None else end_offset
        return read_records(lambda position: self.read(position, DEFAULT_FETCH_MAX_BYTES).records, start, end)

    # --- offsets by time -------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record with timestamp >= `timestamp_ms`, or None."""
        found = self.fetch_offset_by_timestamp(timestamp_ms)
        return None if found is None else found.offset

    def fetch_offset_by_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets: a timestamp, or EARLIEST (-2), LATEST (-1), MAX_TIMESTAMP (-3). LATEST is the log
        end offset; a read_committed consumer's LATEST is `last_stable_offset` (its caller bounds the answer).
        Leader epochs as Kafka's: a record's batch's, LATEST's the newest, EARLIEST's the oldest covering the start."""
        if not is_int(timestamp_ms):
            raise InvalidRequestError(f"a ListOffsets timestamp must be an int, not {type(timestamp_ms).__name__}")
        self._check_open()
        if timestamp_ms == EARLIEST_TIMESTAMP:
            start = self._log_start_offset
            return TimestampAndOffset(NO_TIMESTAMP, start, self._leader_epochs.earliest_covering(start))
        if timestamp_ms == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self.log_end_offset, self._leader_epochs.latest_epoch)
        if timestamp_ms < 0 and timestamp_ms != MAX_TIMESTAMP:
            raise InvalidRequestError(f"invalid ListOffsets timestamp {timestamp_ms}")
        return self._lock_free(lambda view: offset_by_timestamp(view.segments, timestamp_ms, view.log_start_offset))

    def list_offset(self, timestamp_ms: int, isolation: str = "high_watermark") -> TimestampAndOffset | None:
        """ListOffsets for a consumer reading at `isolation` (Kafka's `Partition.fetchOffsetForTimestamp`): LATEST
        (-1) is the high watermark, or for `txn_committed` (read_committed) the last stable offset; EARLIEST is the
        log start; a timestamp or MAX_TIMESTAMP answers only a record below that bound (None otherwise), since the
        consumer could not fetch one at or past it."""
        if isolation not in ("high_watermark", "txn_committed"):
            raise InvalidRequestError(f"unknown isolation {isolation!r}; expected high_watermark or txn_committed")
        fetchable = self.last_stable_offset if isolation == "txn_committed" else self._high_watermark
        if timestamp_ms == LATEST_TIMESTAMP:
            self._check_open()
            return TimestampAndOffset(NO_TIMESTAMP, fetchable, self._leader_epochs.latest_epoch)
        found = self.fetch_offset_by_timestamp(timestamp_ms)
        if timestamp_ms == EARLIEST_TIMESTAMP or found is None or found.offset < fetchable:
            return found
        return None

    # --- truncation ------------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Removes every offset >= `target_offset` (batch-granular); no-op at or beyond the LEO."""
        if target_offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate to negative offset {target_offset}", offset=target_offset)
        with self._lock:
            self._check_open()
            if target_offset >= self.log_end_offset:
                # Kafka's rule: an epoch a replica started leading at its end, then wrote nothing in, goes.
                self._leader_epochs.truncate_from_end(self.log_end_offset)
                return False
            first = self._segments.first
            if first is not None and target_offset < first.base_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            for segment in reversed(self._segments.snapshot()):
                if segment.base_offset > target_offset:
                    self._segments.remove(segment.base_offset)
                    self._schedule_delete(segment)
            active = self._segments.active
            active.truncate_to(target_offset)
            self._end_offset_metadata = LogOffsetMetadata(target_offset, active.base_offset, active.size)
            self._log_start_offset = min(self._log_start_offset, target_offset)
            self._flush.on_truncated(target_offset)
            self._leader_epochs.truncate_from_end(target_offset)
            self._producer_state.delete_snapshots_above(target_offset)
            self._producer_state = load_producer_state(
                self.directory,
                self._segments,
                target_offset,
                False,
                self._clock.milliseconds(),
                self._producer_state.producer_id_expiration_ms,
            )
            self._set_high_watermark(min(self._high_watermark, target_offset))
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Deletes every segment and restarts the log, empty, at `new_offset`."""
        with self._lock:
            self._check_open()
            old = self._segments.snapshot()
            fresh = None
            for segment in old:
                if segment.base_offset == new_offset:
                    segment.delete_files()
                    fresh = segment
            self._segments.clear()
            for segment in old:
                if segment is not fresh:
                    self._schedule_delete(segment)
            segment = new_segment(self.directory, new_offset, self._config, self._clock)
            self._segments.add(segment)
            self._end_offset_metadata = LogOffsetMetadata(new_offset, new_offset, 0)
            self._log_start_offset = new_offset
            self._flush.on_truncated(new_offset)
            self._leader_epochs.clear()
            self._producer_state.clear()
            self._producer_state.delete_snapshots_above(-1)
            self._set_high_watermark(new_offset)

    # --- deletion --------------------------------------------------------------------------------

    def _schedule_delete(self, segment: LogSegment) -> None:
        """Renames the segment's files to `.deleted`; they are unlinked after `file.delete.delay.ms`."""
        self._delayed_deletes.schedule(segment, self._clock.milliseconds(), self._config.file_delete_delay_ms)

    def delete_due_files(self) -> int:
        """Unlinks `.deleted` files whose delay has passed; returns how many segments are still pending."""
        with self._lock:
            return self._delayed_deletes.delete_due(self._clock.milliseconds())

    # --- retention -----------------------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_offset: int) -> int:
        """Moves the log start offset forward (never back, never past the high watermark); returns it."""
        with self._lock:
            self._check_open()
            if new_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset to {new_offset}, past the high watermark {self._high_watermark}",
                    path=self.directory,
                    offset=new_offset,
                )
            if new_offset > self._log_start_offset:
                self._set_log_start_offset(new_offset)
            return self._log_start_offset

    def _set_log_start_offset(self, new_offset: int) -> None:
        """Moves the log start forward and deletes the producer snapshots below it (they describe deleted
        records; Kafka's `onLogStartOffsetIncremented`), so retention bounds them as it bounds segments."""
        self._log_start_offset = new_offset
        self._leader_epochs.truncate_from_start(new_offset)
        self._producer_state.delete_snapshots_before(new_offset)
        self._producer_state.on_log_start_offset_incremented(new_offset)
        self._update_first_unstable_offset()

    def remove_and_delete_segments(self, segments: list[LogSegment]) -> int:
        """Removes `segments` (oldest first) from the log and schedules their files for deletion.

        If they are all of the log's segments, a fresh empty active segment is rolled first so the log
        stays appendable at the same offset. Returns the number of segments removed.
        """
        if not segments:
            return 0
        with self._lock:
            self._check_open()
            if len(segments) == len(self._segments):
                new_active = self.roll()
                segments = [segment for segment in segments if segment.base_offset != new_active.base_offset]
            for segment in segments:
                self._segments.remove(segment.base_offset)
                self._schedule_delete(segment)
            first = self._segments.first
            if first is not None and first.base_offset > self._log_start_offset:
                self._set_log_start_offset(first.base_offset)
            return len(segments)

    def delete_old_segments(self) -> int:
        """One retention pass (log-start breach, then size and time for `delete` policies); see retention.py.

        Holds the writer lock from choosing segments to removing them: a truncation or roll in between
        would leave the pass deleting segments that are no longer the ones it judged (Kafka does the same).
        """
        with self._lock:
            self._check_open()
            return retention.delete_old_segments(self)

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords: moves the log start offset (-1 = high watermark); returns the new start."""
        with self._lock:
            return retention.delete_records(self, offset)

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment]) -> None:
        """Swaps compacted segments in (Kafka's replaceSegments), crash-safely.

        `new_segments` carry the `.cleaned` suffix. Steps: `.cleaned` -> `.swap` (descending offsets),
        the segment map switches to the new segments, old segments -> `.deleted` (unlinked later),
        `.swap` -> final names, fsync the folder. A crash between any two steps is resolved on open.
        """
        with self._lock:
            self._check_open()
            for segment in sorted(new_segments, key=lambda s: s.base_offset, reverse=True):
                segment.change_file_suffixes(file_names.CLEANED_SUFFIX, file_names.SWAP_SUFFIX)
            new_bases = {segment.base_offset for segment in new_segments}
            for segment in old_segments:
                if segment.base_offset not in new_bases:
                    self._segments.remove(segment.base_offset)
            for segment in new_segments:
                self._segments.add(segment)
            for segment in old_segments:
                self._schedule_delete(segment)
                if segment.base_offset not in new_bases:
                    self._producer_state.delete_snapshot(segment.base_offset)
            for segment in new_segments:
                segment.change_file_suffixes(file_names.SWAP_SUFFIX, "")
            fsync_dir(self.directory)

    @property
    def truncations(self) -> int:
        """How many times the log was cut (`truncate_to`, `truncate_fully_and_start_at`): segment bytes rewritten."""
        return self._flush.truncations

    def move_to(self, directory: Path, segments: LogSegments) -> tuple[LogSegment, ...]:
        """The log lives in `directory`, a byte-identical copy of its folder loaded as `segments`, from now on
        (`storage.partition.future_log`): offsets, producer state and epochs stay; returns the segments it held."""
        with self._lock:
            self._check_open()
            old, self.directory, self._segments = self._segments.snapshot(), directory, segments
            self._flush = self._flush.moved(directory, segments)
            self._producer_state.directory = directory
            self._leader_epochs.move_to(directory)
            if self._folder_lock is not None:
                self._folder_lock.release()
                self._folder_lock = LogDirLock(directory)
            active = segments.active
            self._end_offset_metadata = LogOffsetMetadata(self.log_end_offset, active.base_offset, active.size)
            return old

    # --- producer state --------------------------------------------------------------------------

    def remove_expired_producers(self) -> int:
        """Forgets producers idle longer than `producer.id.expiration.ms` (Kafka's periodic
        `removeExpiredProducers`); returns how many."""
        with self._lock:
            self._check_open()
            return self._producer_state.remove_expired_producers(self._clock.milliseconds())

    @property
    def producer_count(self) -> int:
        """Producers whose state the log keeps now."""
        return len(self._producer_state.producers)

    # --- close -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Clean shutdown: flush, final time-index entries, trim files, then the clean-shutdown marker."""
        self.wait_for_background_flushes()
        with self._lock:
            if self._closed:
                return
            self.flush()
            if self._producer_state.changed_since_snapshot:
                self._producer_state.write_snapshot(self.log_end_offset)
            for segment in self._segments:
                segment.close()
            for segment in self._delayed_deletes.segments:
                segment.close_handlers()
            self._closed = True
            if self._folder_lock is not None:
                clean_shutdown.write_clean_shutdown_marker(self.directory)
                self._folder_lock.release()
                self._folder_lock.path.unlink(missing_ok=True)

    def close_without_marker(self) -> None:
        """Closes files without flushing or writing the marker: what a crash leaves (for tests and tools), and
        how the logs of a failed log dir are dropped. Never raises: an I/O error closing one segment (a full
        disk refusing an index trim) is logged and the other segments are still closed."""
        with self._lock:
            self._closed = True
            for segment in [*self._segments, *self._delayed_deletes.segments]:
                try:
                    segment.close_handlers()
                except (StorageError, OSError) as exc:
                    logger.warning("%s: closing segment %d failed: %s", self.directory, segment.base_offset, exc)
            if self._folder_lock is not None:
                self._folder_lock.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"Log({self.directory}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self._segments)})"
        )


__all__ = ["FetchDataInfo", "Log", "LogAppendInfo", "StorageError"]
