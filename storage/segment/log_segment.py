"""One segment of a partition log: a `.log` file, its sparse `.index` and `.timeindex`, and its `.txnindex` of
aborted transactions (`transaction_index`) (Kafka's `LogSegment`).

A segment is named by its base offset (the first offset it may hold). Invariants:

- every batch in the `.log` has offsets in [base_offset, base_offset + 2**31 - 1] (index entries store
  offsets relative to the base as int32);
- an offset-index entry (O, P) says the batch whose LAST offset is O starts at byte P; entries are added
  per append, when more than `index.interval.bytes` were appended since the last entry, the check made
  before counting this append's bytes (so a segment's first append never gets one);
- a time-index entry (T, O) says the largest timestamp up to offset O is T, with O the last offset of
  the batch holding T; on roll and close a final entry for the segment's max timestamp is appended;
- indexes are preallocated to `segment.index.bytes` while the segment is active and trimmed to their
  entries on roll and close, because an existing index file is taken as full when it is opened.

Indexes are opened lazily, on first use: a log with thousands of sealed segments does not map
thousands of files at start (Kafka's KAFKA-7283 change). Crash recovery (`recover`) re-reads the
`.log`, checks every batch's CRC, truncates at the first invalid byte and rebuilds both indexes.

Readers do not take the log's lock, so a segment may be deleted while one reads it (retention with
`file.delete.delay.ms` 0). `delete_files` unlinks the files at once but closes them only when the last
read in progress ends: closing a descriptor under a reader fails its `pread` ("Bad file descriptor") or,
once the number is reused, reads another file's bytes. A read that starts after the deletion raises
`SegmentDeletedError` without touching any file (an index would otherwise be reopened, and recreated
empty, at its old path); the log then reads again from its current segments.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from storage import file_names
from storage.clock import Clock
from storage.errors import (
    CorruptRecordError,
    IndexOffsetOverflowError,
    InvalidRecordError,
    InvalidRequestError,
    KafkaStorageError,
    LogSegmentOffsetOverflowError,
)
from storage.records.file_records import BatchPosition, FileRecords, TimestampAndOffset
from storage.records.record_batch import NO_TIMESTAMP, RecordBatch
from storage.segment.index_base import IndexBase
from storage.segment.offset_index import OffsetIndex
from storage.segment.time_index import TimeIndex
from storage.segment.transaction_index import AbortedTxn, TransactionIndex

MAX_RELATIVE_OFFSET = 2**31 - 1
# The offset or the time index (`LogSegment._open_index`).
_IndexT = TypeVar("_IndexT", bound=IndexBase[Any])


logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset, the base offset of the segment holding it, and its byte position there."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position: int = -1


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """A read's result: where it started and the raw batch bytes (Kafka fetch semantics)."""

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes
    first_entry_incomplete: bool = False
    # A read_committed fetch's aborted transactions overlapping `records` (possibly none); None for other reads.
    aborted_transactions: tuple[AbortedTxn, ...] | None = None


@dataclass(frozen=True, slots=True)
class RollParams:
    """What `should_roll` needs to know about the incoming append."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int


class SegmentDeletedError(KafkaStorageError):
    """A read began on a segment whose files were deleted; the reader retries on the log's current segments."""


class LogSegment:
    """A `.log` with its lazily opened indexes; the owning `Log` serialises writes."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        rolling_jitter_ms: int,
        clock: Clock,
        preallocate_bytes: int = 0,
        suffix: str = "",
        read_only: bool = False,
        log_size_bytes: int | None = None,
    ) -> None:
        """`log_size_bytes` bounds a read-only segment's `.log` to the batches it held when another process
        snapshotted it (see `FileRecords`)."""
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.rolling_jitter_ms = rolling_jitter_ms
        self.read_only = read_only
        self._clock = clock
        self._suffix = suffix
        self.log = FileRecords(
            file_names.log_file(self.directory, base_offset, suffix),
            preallocate_bytes=preallocate_bytes,
            read_only=read_only,
            size_bytes=log_size_bytes,
        )
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | None = None
        self.created_ms = clock.milliseconds()
        self.rolling_based_timestamp: int | None = None
        self.bytes_since_last_index_entry = 0
        self._max_timestamp_and_offset: TimestampAndOffset | None = None
        # Reads in progress, and whether `delete_files` left the closing of the files to the last of them.
        self._readers_lock = threading.Lock()
        self._readers = 0
        self._deleted = False
        self._close_deferred = False

    # --- files -------------------------------------------------------------------------------------

    @property
    def offset_index_path(self) -> Path:
        return file_names.index_file(self.directory, self.base_offset, self._suffix)

    @property
    def time_index_path(self) -> Path:
        return file_names.time_index_file(self.directory, self.base_offset, self._suffix)

    @property
    def txn_index_path(self) -> Path:
        return file_names.txn_index_file(self.directory, self.base_offset, self._suffix)

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = self._open_index(OffsetIndex, self.offset_index_path)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = self._open_index(TimeIndex, self.time_index_path)
        return self._time_index

    def _open_index(self, index_type: type[_IndexT], path: Path) -> _IndexT:
        """The offset or time index at `path`, opened on first use (see the module docstring); never after the
        segment's deletion, which would recreate it empty at its old path."""
        if self._deleted:
            raise SegmentDeletedError("segment was deleted", path=self.log.path)
        return index_type(path, self.base_offset, self.max_index_size, writable=not self.read_only)

    @property
    def txn_index(self) -> TransactionIndex:
        """The `.txnindex`; its file exists only once an aborted transaction was indexed in this segment."""
        if self._txn_index is None:
            self._txn_index = TransactionIndex(self.txn_index_path, self.base_offset, read_only=self.read_only)
        return self._txn_index

    @property
    def size(self) -> int:
        return self.log.size

    def has_offset_index_file(self) -> bool:
        return self._offset_index is not None or self.offset_index_path.exists()

    def open_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """Opens (creating them if missing) both index files now rather than on first use."""
        return self.offset_index, self.time_index

    def take_state_of(self, copied: LogSegment) -> None:
        """This segment's files are a byte-identical copy of `copied`'s (a log moved to another log dir,
        `storage.partition.future_log`): what `copied` kept in memory only (its creation time, rolling jitter and
        timestamp, max timestamp, bytes since its last index entry) carries over, so it rolls and answers as before."""
        self.created_ms = copied.created_ms
        self.rolling_jitter_ms = copied.rolling_jitter_ms
        self.rolling_based_timestamp = copied.rolling_based_timestamp
        self.bytes_since_last_index_entry = copied.bytes_since_last_index_entry
        self._max_timestamp_and_offset = copied._max_timestamp_and_offset

    # --- timestamps --------------------------------------------------------------------------------

    @property
    def max_timestamp_and_offset(self) -> TimestampAndOffset:
        """The largest timestamp in the segment and the last offset of its batch (loaded from the time index)."""
        if self._max_timestamp_and_offset is None:
            last = self.time_index.last_entry
            self._max_timestamp_and_offset = TimestampAndOffset(last.timestamp, last.offset)
        return self._max_timestamp_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset.timestamp

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when the segment has no timestamps (Kafka's rule)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.log.last_modified_ms()

    def _first_batch_timestamp(self) -> int:
        if self.rolling_based_timestamp is None:
            for batch in self.log.batches(0):
                self.rolling_based_timestamp = batch.max_timestamp
                break
        return NO_TIMESTAMP if self.rolling_based_timestamp is None else self.rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Record time since the first batch when it has a timestamp, else wall time since creation."""
        first = self._first_batch_timestamp()
        if first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's roll conditions (`LogSegment.shouldRoll`), checked before each append."""
        reached_roll_ms = self.time_waited_for_roll(params.now_ms, params.max_timestamp_in_messages) > (
            params.max_segment_ms - self.rolling_jitter_ms
        )
        return (
            self.size > params.max_segment_bytes - params.messages_size
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative_offset(params.max_offset_in_messages)
        )

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    # --- append and read ---------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | memoryview | Sequence[bytes | bytearray | memoryview],
    ) -> None:
        """Appends batches whose offsets are already assigned (one buffer, or pieces written back to back),
        maintaining both sparse indexes."""
        size = len(records) if isinstance(records, bytes | bytearray | memoryview) else sum(map(len, records))
        if size == 0:
            return
        if not self.can_convert_to_relative_offset(largest_offset):
            raise IndexOffsetOverflowError(
                f"offset {largest_offset} cannot be stored relative to segment base {self.base_offset}",
                path=self.log.path,
                offset=largest_offset,
            )
        physical_position = self.log.size
        if physical_position == 0:
            self.rolling_based_timestamp = largest_timestamp
        self.log.append(records)
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_timestamp_and_offset = TimestampAndOffset(largest_timestamp, shallow_offset_of_max_timestamp)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            if self.max_timestamp_so_far >= 0:
                self.time_index.maybe_append(self.max_timestamp_so_far, self.max_timestamp_and_offset.offset)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def translate_offset(self, offset: int, starting_file_position: int = 0) -> BatchPosition | None:
        """Position and size of the batch containing `offset` (index lookup, then a scan)."""
        with self._reading():
            mapping = self.offset_index.lookup(offset)
            return self.log.search_for_offset_with_size(offset, max(mapping.position, starting_file_position))

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Keeps the files open while the block reads them; `SegmentDeletedError` if they are deleted already."""
        with self._readers_lock:
            if self._deleted:
                raise SegmentDeletedError("segment was deleted", path=self.log.path)
            self._readers += 1
        try:
            yield
        finally:
            with self._readers_lock:
                self._readers -= 1
                close_now = self._close_deferred and self._readers == 0
                if close_now:
                    self._close_deferred = False
            if close_now:
                try:
                    self.close_handlers()
                except (KafkaStorageError, OSError) as exc:
                    logger.warning("closing deleted segment %s after its last read failed: %s", self.log.path, exc)

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False
    ) -> FetchDataInfo | None:
        """Bytes from the batch containing `start_offset`, at most `max_size` (at least one batch with
        `min_one_message`), never past `max_position`; None when nothing in this segment is >= start."""
        if max_size < 0:
            raise InvalidRequestError(f"invalid max size {max_size}")
        with self._reading():
            start = self.translate_offset(start_offset)
            if start is None:
                return None
            metadata = LogOffsetMetadata(start_offset, self.base_offset, start.position)
            adjusted_max_size = max(max_size, start.size) if min_one_message else max_size
            if adjusted_max_size == 0:
                return FetchDataInfo(metadata, b"")
            end = self.size if max_position is None else min(max_position, self.size)
            fetch_size = min(end - start.position, adjusted_max_size)
            records = self.log.read(start.position, fetch_size)
        return FetchDataInfo(metadata, records, adjusted_max_size < start.size)

    def read_next_offset(self) -> int:
        """The offset after the last batch in this segment (base offset when empty)."""
        mapping = self.offset_index.lookup(self.offset_index.last_offset)
        next_offset = self.base_offset
        for batch in self.log.batches(mapping.position):
            next_offset = batch.last_offset + 1
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= `timestamp` and offset >= `starting_offset`."""
        with self._reading():
            entry = self.time_index.lookup(timestamp)
            position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
            return self.log.search_for_timestamp(timestamp, position, starting_offset)

    # --- recovery and truncation -------------------------------------------------------------------

    def recover(
        self,
        next_segment_base: int | None = None,
        on_batch_epoch: Callable[[int, int], None] | None = None,
        on_batch: Callable[[RecordBatch], None] | None = None,
    ) -> int:
        """Re-reads the whole `.log`, checking each batch; rebuilds both indexes; truncates at the first
        invalid byte. Returns the number of bytes truncated. A batch reaching `next_segment_base` (the next
        segment's base offset) is invalid too: only a damaged baseOffset puts it there. Raises
        `LogSegmentOffsetOverflowError` for an in-order batch more than 2**31 - 1 above the base in a segment
        that has a next one (a legacy overflowed segment, to be split); in the last segment it is damage, cut.
        `on_batch_epoch(partition leader epoch, base offset)` is told of every valid batch, in order (the log's
        leader-epoch cache learns the epochs it had not checkpointed). With `on_batch`, the `.txnindex` is emptied
        first, and `on_batch` is told of every valid v2 batch in order to rebuild it (the log's producer state, as
        of this segment's base, knows which aborted transaction each ABORT marker closes)."""
        for index in (self.offset_index, self.time_index):
            index.truncate()
            index.resize(self.max_index_size)
        if on_batch is not None:
            self.txn_index.reset()
        valid_bytes = 0
        last_index_entry = 0
        max_timestamp = TimestampAndOffset(NO_TIMESTAMP, -1)
        next_offset = self.base_offset
        try:
            for batch in self.log.batches(0):
                batch.ensure_valid()
                if batch.base_offset < next_offset or (
                    next_segment_base is not None and batch.last_offset >= next_segment_base
                ):
                    # baseOffset is outside the CRC: a damaged one shows as offsets going backwards or into the
                    # next segment. Cut here, keeping the batches before it; the index rebuild would otherwise
                    # fail on the out-of-order offset and cost the whole segment, and every later one.
                    raise CorruptRecordError(
                        f"batch offsets [{batch.base_offset}, {batch.last_offset}] are out of order (expected from "
                        f"{next_offset}, below {next_segment_base})",
                        path=self.log.path,
                        position=batch.position,
                    )
                if not self.can_convert_to_relative_offset(batch.last_offset):
                    if next_segment_base is not None:
                        # In order and below the next segment: a legacy overflowed segment (only Kafka's cleaner
                        # wrote those, never into the active segment), kept whole by a split, not cut.
                        raise LogSegmentOffsetOverflowError(
                            f"offset {batch.last_offset} overflows segment {self.base_offset}",
                            path=self.log.path,
                            position=batch.position,
                            offset=batch.last_offset,
                        )
                    raise CorruptRecordError(
                        f"batch offset {batch.last_offset} is outside segment {self.base_offset}'s range",
                        path=self.log.path,
                        position=batch.position,
                    )
                next_offset = batch.last_offset + 1
                if on_batch_epoch is not None and isinstance(batch, RecordBatch):
                    on_batch_epoch(batch.partition_leader_epoch, batch.base_offset)
                if on_batch is not None and isinstance(batch, RecordBatch):
                    on_batch(batch)
                if batch.max_timestamp > max_timestamp.timestamp:
                    max_timestamp = TimestampAndOffset(batch.max_timestamp, batch.last_offset)
                # The rule runs per batch here but per append when writing, so a segment written with
                # multi-batch appends can need more entries than its index holds: a full index only stops
                # adding entries (lookups scan further); it must not fail and cost the segment its data.
                if valid_bytes - last_index_entry > self.index_interval_bytes and not self.offset_index.is_full():
                    self.offset_index.append(batch.last_offset, valid_bytes)
                    if max_timestamp.timestamp >= 0 and not self.time_index.is_full():
                        self.time_index.maybe_append(max_timestamp.timestamp, max_timestamp.offset)
                    last_index_entry = valid_bytes
                valid_bytes += batch.size_in_bytes
        except (CorruptRecordError, InvalidRecordError):
            pass
        truncated = self.log.size - valid_bytes
        self.log.truncate_to(valid_bytes)
        self.offset_index.trim_to_valid_size()
        self._max_timestamp_and_offset = max_timestamp
        if max_timestamp.timestamp >= 0 and self.time_index.max_entries > 0:
            self.time_index.maybe_append(max_timestamp.timestamp, max_timestamp.offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self.bytes_since_last_index_entry = valid_bytes - last_index_entry
        self.rolling_based_timestamp = None
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Removes every batch from the one containing `offset` on; returns the bytes removed. A segment that
        ends up empty, even one that already was, restarts its roll clock (Kafka's `truncateTo`), so that
        `segment.ms` counts from now and not from when the segment was made."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        removed = 0 if mapping is None else self.log.truncate_to(mapping.position)
        if self.log.size == 0:
            self.created_ms = self._clock.milliseconds()
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        self._max_timestamp_and_offset = None
        if self.time_index.entries == 0 and self.log.size > 0:
            self._max_timestamp_and_offset = self.log.largest_timestamp_after(0)
        elif self.log.size > 0:
            last = self.time_index.last_entry
            from_position = self.offset_index.lookup(last.offset).position
            tail = self.log.largest_timestamp_after(from_position)
            best = TimestampAndOffset(last.timestamp, last.offset)
            self._max_timestamp_and_offset = tail if tail.timestamp > best.timestamp else best
        else:
            self._max_timestamp_and_offset = TimestampAndOffset(NO_TIMESTAMP, -1)
        return removed

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # --- lifecycle ---------------------------------------------------------------------------------

    def _append_final_time_index_entry(self) -> None:
        if self._max_timestamp_and_offset is not None or self._time_index is not None:
            best = self.max_timestamp_and_offset
            # segment.index.bytes may be as low as 4 (Kafka's minimum): a time index below 12 bytes has no
            # slot at all, reserved or not, and the segment rolls on every append without one.
            if best.timestamp >= 0 and self.time_index.max_entries > 0:
                self.time_index.maybe_append(best.timestamp, best.offset, skip_full_check=True)

    def on_become_inactive_segment(self) -> None:
        """On roll: final time-index entry, trim both indexes and a preallocated `.log`."""
        self._append_final_time_index_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def flush(self) -> None:
        """fsync the `.log` and the indexes."""
        self.log.flush()
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()
        if self._txn_index is not None:
            self._txn_index.flush()

    def close(self) -> None:
        """Final time-index entry, trim and close everything."""
        if not self.read_only:
            self._append_final_time_index_entry()
        self._close_indexes()
        self.log.close()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Renames all files of the segment (e.g. `.cleaned` -> `.swap`, `` -> `.deleted`)."""
        if self._suffix != old_suffix:
            raise KafkaStorageError(f"segment has suffix {self._suffix!r}, not {old_suffix!r}", path=self.log.path)
        self.log.rename_to(file_names.log_file(self.directory, self.base_offset, new_suffix))
        for path_of, index in (
            (file_names.index_file, self._offset_index),
            (file_names.time_index_file, self._time_index),
        ):
            old = path_of(self.directory, self.base_offset, old_suffix)
            new = path_of(self.directory, self.base_offset, new_suffix)
            if index is not None:
                index.rename_to(new)
            elif old.exists():
                os.replace(old, new)
        new_txn = file_names.txn_index_file(self.directory, self.base_offset, new_suffix)
        if self._txn_index is not None:
            self._txn_index.rename_to(new_txn)
        else:
            old_txn = file_names.txn_index_file(self.directory, self.base_offset, old_suffix)
            if old_txn.exists():
                os.replace(old_txn, new_txn)
        self._suffix = new_suffix

    def delete_files(self) -> None:
        """Unlinks every file of the segment (whatever its current suffix) and closes them, or, while reads are
        in progress, leaves the closing to the last of them (see the module docstring)."""
        with self._readers_lock:
            self._deleted = True
            self._close_deferred = self._readers > 0
            close_now = not self._close_deferred
        if close_now:
            self.close_handlers()
        for path in file_names.segment_files(self.directory, self.base_offset, self._suffix):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise KafkaStorageError(f"cannot delete segment file: {exc}", path=path) from exc

    def close_handlers(self) -> None:
        """Closes files without flushing (the segment is abandoned). The `.log` is closed even when an index
        cannot be (a failing disk refuses its trim), so no descriptor is left behind; that error is raised after."""
        try:
            self._close_indexes()
        finally:
            self.log.close_handlers()

    def _close_indexes(self) -> None:
        offset_index, time_index, txn_index = self._offset_index, self._time_index, self._txn_index
        self._offset_index = None
        self._time_index = None
        self._txn_index = None
        if txn_index is not None:
            txn_index.close()
        try:
            if offset_index is not None:
                offset_index.close()
        finally:
            if time_index is not None:
                time_index.close()

    @property
    def suffix(self) -> str:
        return self._suffix

    def last_modified_ms(self) -> int:
        return self.log.last_modified_ms()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log.path})"
