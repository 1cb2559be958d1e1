"""Opening a partition folder: leftover in-flight files, segment loading, crash recovery (Kafka's `LogLoader`).

What happens on open, in order (Kafka's `LogLoader.load`):

1. Every `*.deleted` file is unlinked (its deletion was scheduled before a crash or restart).
2. `.cleaned` files are an unfinished compaction: dropped. A `.swap` whose base offset is at or
   above the smallest `.cleaned` base belongs to the same unfinished pass: dropped too.
3. The remaining `.swap` segments finish their swap: ordinary segments whose base offset falls in the
   swap's offset range are deleted (they were replaced but not yet renamed), then the `.swap` suffix
   is removed.
4. Segments load in base-offset order. An index file without its `.log` is deleted; a `.log` without
   its `.index` is recovered (indexes rebuilt).
5. After an unclean shutdown every segment from the one holding the recovery point on is recovered:
   each batch's CRC is checked, the `.log` is cut at the first invalid byte, both indexes are rebuilt,
   and if a segment lost bytes, all later segments are deleted. What was dropped is reported.
6. A segment that recovery (in step 4 or 5) finds holding offsets more than 2**31 - 1 above its base is
   split, not cut: Kafka's cleaner wrote such segments before the fix of KAFKA-6264, and their offsets cannot
   be indexed (index entries hold 32-bit relative offsets). Its batches are copied, in order, into new
   segments, each starting at the first batch that would overflow the one before (the first keeps the old
   base offset), which replace it through the cleaner's `.cleaned` -> `.swap` protocol; then the step that
   found it starts over. A crash mid-split is resolved by steps 2-3 on the next open (or the split starts
   over from the intact old segment). Such offsets in the last segment cannot come from the cleaner, which
   never writes the active segment: there they are damage, and cut.
7. With no segment left, one is created at the log start offset; if the log end is below the
   checkpointed log start offset, everything is deleted and the log restarts there.

After a clean shutdown no segment is read: indexes below the recovery point are trusted.

Then the log's state beside its segments is rebuilt: the producer state from the newest snapshot and the batches
after it (`load_producer_state`), and a damaged leader-epoch checkpoint from the epochs on the batches
(`relearn_epochs`).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from storage import file_names
from storage.clock import Clock
from storage.config.log_config import LogConfig
from storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidOffsetError,
    KafkaStorageError,
    LogSegmentOffsetOverflowError,
)
from storage.file_io import fsync_dir
from storage.files import clean_shutdown
from storage.files.log_dir_lock import LogDirLock
from storage.partition.leader_epoch_cache import LeaderEpochCache
from storage.partition.producer_append import AppendOrigin, PendingAppend, replay_batches
from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from storage.records.file_records import AnyBatch
from storage.records.record_batch import RecordBatch
from storage.segment.log_segment import LogSegment
from storage.segment.log_segments import LogSegments

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _SegmentOffsetOverflow(Exception):
    """Recovery met a legacy overflowed segment: the loader splits it and starts the step over."""

    def __init__(self, segment: LogSegment) -> None:
        super().__init__(f"offset overflow in segment {segment.base_offset}")
        self.segment = segment


@dataclass(frozen=True, slots=True)
class DroppedBytes:
    """Bytes removed by recovery: which file, from which position, how many."""

    path: str
    position: int
    size: int


@dataclass
class LoadedLog:
    """The outcome of loading a partition folder."""

    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    recovered_segments: int = 0
    dropped: list[DroppedBytes] = field(default_factory=list)


@dataclass
class OpenedLog:
    """A partition folder opened and loaded: what a `Log` starts from. `folder_lock` is held for a standalone log."""

    directory: Path
    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    folder_lock: LogDirLock | None
    dropped: list[DroppedBytes]
    producer_state: ProducerStateManager
    leader_epochs: LeaderEpochCache


def open_log_folder(
    path: Path,
    config: LogConfig,
    clock: Clock,
    *,
    recovery_point: int,
    log_start_offset: int,
    had_clean_shutdown: bool | None,
    producer_id_expiration_ms: int,
) -> OpenedLog:
    """Creates the folder if missing, loads it (`LogLoader`), then its leader epochs and producer state; see
    `Log.open` for the standalone case (`had_clean_shutdown=None`). Nothing is left locked when it raises."""
    standalone = had_clean_shutdown is None
    folder_lock = None
    try:
        path.mkdir(parents=True, exist_ok=True)
        if standalone:
            crashed_while_open = (path / file_names.LOCK_FILE).exists()
            folder_lock = LogDirLock(path)
            had_clean_shutdown = clean_shutdown.delete_clean_shutdown_marker(path) or (
                not crashed_while_open and clean_shutdown.has_clean_shutdown_marker(path.parent)
            )
    except OSError as exc:
        raise KafkaStorageError(f"cannot open log folder: {exc}", path=path) from exc
    try:
        leader_epochs, damaged_epochs = LeaderEpochCache.load(path)
        loaded = LogLoader(
            path,
            config,
            clock,
            had_clean_shutdown=bool(had_clean_shutdown),
            recovery_point=recovery_point,
            log_start_offset_checkpoint=log_start_offset,
            leader_epochs=leader_epochs,
            producer_id_expiration_ms=producer_id_expiration_ms,
        ).load()
        if damaged_epochs:
            relearn_epochs(loaded.segments, leader_epochs)
        # As Kafka's loader: drop the entries past the recovered end (a leader records its epoch at the log end
        # when elected, and a crash can cut what came after) and before the checkpointed log start.
        leader_epochs.truncate_from_end(loaded.log_end_offset)
        leader_epochs.truncate_from_start(log_start_offset)
    except BaseException:
        if folder_lock is not None:
            folder_lock.release()
        raise
    producer_state = load_producer_state(
        path,
        loaded.segments,
        loaded.log_end_offset,
        bool(had_clean_shutdown),
        clock.milliseconds(),
        producer_id_expiration_ms,
    )
    return OpenedLog(
        path,
        loaded.segments,
        loaded.log_start_offset,
        loaded.recovery_point,
        loaded.log_end_offset,
        folder_lock,
        loaded.dropped,
        producer_state,
        leader_epochs,
    )


def new_segment(
    directory: Path, base_offset: int, config: LogConfig, clock: Clock, *, suffix: str = "", new_file: bool = True
) -> LogSegment:
    """Opens (or creates) the segment at `base_offset` with the log's settings.

    A new segment gets its `.index` and `.timeindex` files at once, as in Kafka: a segment that never
    receives an index entry still has (empty) index files after a clean close, so the next open does not
    mistake it for a segment whose index was lost and rebuild it.
    """
    jitter = (
        random.randrange(min(config.segment_jitter_ms, config.effective_segment_ms)) if config.segment_jitter_ms else 0
    )
    segment = LogSegment(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        rolling_jitter_ms=jitter,
        clock=clock,
        preallocate_bytes=config.segment_bytes if (config.preallocate and new_file) else 0,
        suffix=suffix,
    )
    if new_file:
        segment.open_indexes()
    return segment


class LogLoader:
    """Loads one partition folder; see the module docstring for the steps."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        had_clean_shutdown: bool,
        recovery_point: int,
        log_start_offset_checkpoint: int,
        leader_epochs: LeaderEpochCache | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        """`leader_epochs`, when given, learns the epochs of the batches recovery re-reads; the producer state
        rebuilt to recover a segment's `.txnindex` drops the producers idle `producer_id_expiration_ms`."""
        self.directory = Path(directory)
        self.config = config
        self.clock = clock
        self.had_clean_shutdown = had_clean_shutdown
        self.recovery_point = recovery_point
        self.log_start_offset_checkpoint = log_start_offset_checkpoint
        self._leader_epochs = leader_epochs
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._dropped: list[DroppedBytes] = []
        # Base offsets of segments recovery cut short, including those already rebuilt while loading (a
        # missing or corrupt index): the later segments go too, whichever pass did the cutting.
        self._truncated_bases: set[int] = set()

    def load(self) -> LoadedLog:
        try:
            swap_files = self._remove_temp_files_and_collect_swap_files()
            self._complete_swaps(swap_files)
            segments = LogSegments()
            self._retry_on_offset_overflow(segments, lambda: self._load_segment_files(segments))
            if self.had_clean_shutdown and segments and not self._active_index_trusted(segments.active):
                self._recover_segment(segments.active, None, segments)
            recovered = (
                0
                if self.had_clean_shutdown
                else self._retry_on_offset_overflow(segments, lambda: self._recover_from(segments, self.recovery_point))
            )
            if segments:
                end_offset = segments.active.read_next_offset()
                if end_offset < self.log_start_offset_checkpoint:
                    logger.warning(
                        "%s: log end offset %d is below the checkpointed log start offset %d; deleting all segments",
                        self.directory,
                        end_offset,
                        self.log_start_offset_checkpoint,
                    )
                    for segment in segments.snapshot():
                        segment.delete_files()
                    segments.clear()
            if not segments:
                segments.add(new_segment(self.directory, self.log_start_offset_checkpoint, self.config, self.clock))
            segments.active.resize_indexes(self.config.segment_index_bytes)
            log_end_offset = segments.active.read_next_offset()
        except OSError as exc:
            raise KafkaStorageError(f"cannot load log: {exc}", path=self.directory) from exc
        first = segments.first
        log_start_offset = max(self.log_start_offset_checkpoint, first.base_offset if first else 0)
        recovery_point = log_end_offset if self.had_clean_shutdown else min(self.recovery_point, log_end_offset)
        return LoadedLog(segments, log_start_offset, recovery_point, log_end_offset, recovered, self._dropped)

    def _remove_temp_files_and_collect_swap_files(self) -> list[Path]:
        swap_files: list[Path] = []
        cleaned_files: list[Path] = []
        min_cleaned_base = None
        for entry in sorted(self.directory.iterdir()):
            if not entry.is_file():
                continue
            parsed = file_names.parse_segment_name(entry.name)
            if parsed is None:
                continue
            base, _, suffix = parsed
            if suffix == file_names.DELETED_SUFFIX:
                entry.unlink()
            elif suffix == file_names.CLEANED_SUFFIX:
                min_cleaned_base = base if min_cleaned_base is None else min(min_cleaned_base, base)
                cleaned_files.append(entry)
            elif suffix == file_names.SWAP_SUFFIX:
                swap_files.append(entry)
        kept: list[Path] = []
        for swap in swap_files:
            parsed = file_names.parse_segment_name(swap.name)
            assert parsed is not None
            if min_cleaned_base is not None and parsed[0] >= min_cleaned_base:
                logger.info("%s: deleting swap file %s of an unfinished split", self.directory, swap.name)
                swap.unlink()
            else:
                kept.append(swap)
        for cleaned in cleaned_files:
            cleaned.unlink()
        return kept

    def _complete_swaps(self, swap_files: list[Path]) -> None:
        log_swaps = [path for path in swap_files if file_names.segment_suffix(path.name) == file_names.LOG_SUFFIX]
        if not log_swaps:
            self._rename_swap_files()
            return
        min_swap_base: int | None = None
        max_swap_next = -1
        for path in log_swaps:
            base = file_names.parse_segment_name(path.name)[0]  # type: ignore[index]
            segment = new_segment(
                self.directory, base, self.config, self.clock, suffix=file_names.SWAP_SUFFIX, new_file=False
            )
            if not file_names.index_file(self.directory, base, file_names.SWAP_SUFFIX).exists():
                segment.recover()
            min_swap_base = base if min_swap_base is None else min(min_swap_base, base)
            max_swap_next = max(max_swap_next, segment.read_next_offset())
            segment.close()
        assert min_swap_base is not None
        for entry in sorted(self.directory.iterdir()):
            parsed = file_names.parse_segment_name(entry.name)
            if parsed is None or parsed[2]:
                continue
            if min_swap_base <= parsed[0] < max_swap_next:
                logger.info("%s: deleting %s, replaced by an interrupted swap", self.directory, entry.name)
                entry.unlink()
        self._rename_swap_files()

    def _rename_swap_files(self) -> None:
        """Completes the swap: every `.swap` file now in the folder loses its suffix. The folder is listed
        again, not the list collected before, because rebuilding a `.log.swap`'s missing indexes above
        created `.index.swap` / `.timeindex.swap` files that must be renamed with it (Kafka's third pass)."""
        for entry in sorted(self.directory.iterdir()):
            parsed = file_names.parse_segment_name(entry.name)
            if parsed is not None and parsed[2] == file_names.SWAP_SUFFIX:
                os.replace(entry, file_names.without_suffix(entry, file_names.SWAP_SUFFIX))

    def _load_segment_files(self, segments: LogSegments) -> None:
        """Fills `segments` from the folder, from scratch: what an earlier, interrupted attempt opened is closed."""
        for opened in segments:
            opened.close_handlers()
        segments.clear()
        names = sorted(entry.name for entry in self.directory.iterdir() if entry.is_file())
        log_bases = set()
        for name in names:
            parsed = file_names.parse_segment_name(name)
            if parsed is not None and not parsed[2] and parsed[1] == file_names.LOG_SUFFIX:
                log_bases.add(parsed[0])
        ordered = sorted(log_bases)
        next_bases = {base: ordered[i + 1] if i + 1 < len(ordered) else None for i, base in enumerate(ordered)}
        for name in names:
            parsed = file_names.parse_segment_name(name)
            if parsed is None or parsed[2]:
                continue
            base, kind, _ = parsed
            if kind != file_names.LOG_SUFFIX:
                if base not in log_bases and kind in file_names.SEGMENT_SUFFIXES:
                    logger.warning("%s: deleting orphan index file %s", self.directory, name)
                    (self.directory / name).unlink()
                continue
            segment = new_segment(self.directory, base, self.config, self.clock, new_file=False)
            if not segment.has_offset_index_file():
                logger.info("%s: rebuilding missing index of segment %d", self.directory, base)
                self._recover_segment(segment, next_bases[base], segments)
            elif not self.had_clean_shutdown:
                try:
                    segment.offset_index.sanity_check()
                    segment.time_index.sanity_check()
                    segment.txn_index.sanity_check()
                except CorruptIndexError as exc:
                    logger.warning("%s: %s; rebuilding", self.directory, exc)
                    self._recover_segment(segment, next_bases[base], segments)
            segments.add(segment)

    def _active_index_trusted(self, segment: LogSegment) -> bool:
        """After a clean shutdown indexes are trusted unread (Kafka's choice), except the active segment's last
        offset-index entry: the log end offset is read from the batch it points at, so a damaged entry (a bit
        flip in its position) would hide the segment's tail and the next append would reuse those offsets.
        Checking it costs one read of the batch header there: it must start at or below the entry's offset."""
        index = segment.offset_index
        try:
            index.sanity_check()
            segment.time_index.sanity_check()
            if index.entries == 0:
                return True
            last = index.lookup(index.last_offset)
            batch = next(segment.log.batches(last.position), None) if 0 <= last.position < segment.size else None
        except (CorruptIndexError, CorruptRecordError) as exc:
            logger.warning("%s: %s; rebuilding the indexes of segment %d", self.directory, exc, segment.base_offset)
            return False
        if batch is None or not batch.base_offset <= last.offset:
            logger.warning(
                "%s: last index entry %s of segment %d does not point at its batch; rebuilding the indexes",
                self.directory,
                last,
                segment.base_offset,
            )
            return False
        return True

    def _recover_segment(self, segment: LogSegment, next_segment_base: int | None, segments: LogSegments) -> int:
        """Kafka's `recoverSegment`: the segment re-read and cut at its first invalid byte, its indexes rebuilt,
        the `.txnindex` with them from the producer state as of its base offset (rebuilt from `segments`, the
        ones before it, as `rebuild_producer_state` does)."""
        size_before = segment.size
        state = ProducerStateManager(self.directory, self._producer_id_expiration_ms)
        rebuild_producer_state(state, segments, segment.base_offset, self.clock.milliseconds())
        try:
            truncated = segment.recover(
                next_segment_base,
                None if self._leader_epochs is None else self._leader_epochs.note_recovered_batch,
                replay_batches(state, segment.txn_index),
            )
        except LogSegmentOffsetOverflowError as exc:
            logger.warning("%s: %s; splitting the segment", self.directory, exc)
            raise _SegmentOffsetOverflow(segment) from exc
        except (InvalidOffsetError, CorruptIndexError) as exc:
            logger.warning(
                "%s: cannot recover segment %d (%s); truncating it to empty", self.directory, segment.base_offset, exc
            )
            truncated = segment.log.truncate_to(0)
            for index in (segment.offset_index, segment.time_index):
                index.truncate()
            segment.txn_index.reset()
        if truncated > 0:
            self._truncated_bases.add(segment.base_offset)
            position = size_before - truncated
            self._dropped.append(DroppedBytes(str(segment.log.path), position, truncated))
            logger.warning(
                "%s: recovery dropped %d bytes at position %d of %s",
                self.directory,
                truncated,
                position,
                segment.log.path,
            )
        return truncated

    def _retry_on_offset_overflow(self, segments: LogSegments, step: Callable[[], T]) -> T:
        """Runs `step`, splitting each overflowed segment it meets and running it again (Kafka's
        `retryOnOffsetOverflow`). Bounded: a split replaces one overflowed segment with segments that fit."""
        while True:
            try:
                return step()
            except _SegmentOffsetOverflow as overflow:
                self._split_overflowed_segment(overflow.segment, segments)

    def _split_overflowed_segment(self, segment: LogSegment, segments: LogSegments) -> None:
        """Kafka's `splitOverflowedSegment` (module docstring, step 6): copies the batches into `.cleaned`
        segments, then swaps them in for `segment`, in `segments` and on disk. Renames, in Kafka's order:
        `.cleaned` -> `.swap` from the highest base down, the old segment -> `.deleted` (then unlinked),
        `.swap` -> final from the lowest base up, so a crash at any point leaves what steps 2-3 resolve.
        Bytes after the last whole batch (a torn tail) are not copied: reported as dropped, like recovery."""
        split: list[LogSegment] = []
        copied_bytes = 0
        try:
            for batch in batches_until_invalid(segment):
                current = split[-1] if split else None
                if current is None or not current.can_convert_to_relative_offset(batch.last_offset):
                    # The first keeps the old base so the swap's offset range covers the old `.log` too.
                    base = batch.base_offset if split else segment.base_offset
                    current = new_segment(
                        self.directory, base, self.config, self.clock, suffix=file_names.CLEANED_SUFFIX
                    )
                    split.append(current)
                current.append(
                    batch.last_offset,
                    batch.max_timestamp,
                    batch.last_offset,
                    segment.log.read(batch.position, batch.size_in_bytes),
                )
                copied_bytes += batch.size_in_bytes
            modified_ms = segment.last_modified_ms()
            for part in split:
                part.on_become_inactive_segment()
                part.flush()
                part.log.set_last_modified_ms(modified_ms)
        except Exception:
            for part in split:
                part.delete_files()
            raise
        logger.warning(
            "%s: split overflowed segment %d into segments %s",
            self.directory,
            segment.base_offset,
            [part.base_offset for part in split],
        )
        if copied_bytes < segment.size:
            self._truncated_bases.add(split[-1].base_offset)
            self._dropped.append(DroppedBytes(str(segment.log.path), copied_bytes, segment.size - copied_bytes))
            logger.warning(
                "%s: split dropped %d bytes at position %d of %s",
                self.directory,
                segment.size - copied_bytes,
                copied_bytes,
                segment.log.path,
            )
        for part in reversed(split):
            part.change_file_suffixes(file_names.CLEANED_SUFFIX, file_names.SWAP_SUFFIX)
        if segments.get(segment.base_offset) is segment:
            segments.remove(segment.base_offset)
        segment.change_file_suffixes("", file_names.DELETED_SUFFIX)
        segment.delete_files()
        for part in split:
            part.change_file_suffixes(file_names.SWAP_SUFFIX, "")
            segments.add(part)
        fsync_dir(self.directory)

    def _recover_from(self, segments: LogSegments, recovery_point: int) -> int:
        unflushed = list(segments.from_floor(recovery_point))
        recovered = 0
        while unflushed:
            segment = unflushed.pop(0)
            recovered += 1
            next_base = unflushed[0].base_offset if unflushed else None
            truncated = (
                self._recover_segment(segment, next_base, segments) > 0 or segment.base_offset in self._truncated_bases
            )
            if truncated and unflushed:
                for later in unflushed:
                    logger.warning("%s: deleting segment %d after a truncated one", self.directory, later.base_offset)
                    self._dropped.append(DroppedBytes(str(later.log.path), 0, later.size))
                    segments.remove(later.base_offset)
                    later.delete_files()
                unflushed = []
        return recovered


def batches_until_invalid(segment: LogSegment) -> Iterator[AnyBatch]:
    """The segment's batches from its start, ending quietly where the bytes stop forming one (recovery has
    already checked the batches before an overflow, or cut what it found: the split keeps the rest as far as it is
    framed, and a damaged leader-epoch checkpoint is rebuilt from what is framed)."""
    try:
        yield from segment.log.batches(0)
    except CorruptRecordError:
        return


def relearn_epochs(segments: LogSegments, leader_epochs: LeaderEpochCache) -> None:
    """Rebuilds a damaged leader-epoch checkpoint from the epochs stamped on the log's batches, oldest first; a
    segment's walk stops where its bytes stop forming batches (the loader has cut what recovery found)."""
    for segment in segments:
        for batch in batches_until_invalid(segment):
            if isinstance(batch, RecordBatch):
                leader_epochs.note_recovered_batch(batch.partition_leader_epoch, batch.base_offset)


def load_producer_state(
    directory: Path,
    segments: LogSegments,
    log_end_offset: int,
    had_clean_shutdown: bool,
    now_ms: int,
    producer_id_expiration_ms: int,
) -> ProducerStateManager:
    """Producer state as of `log_end_offset` (`rebuild_producer_state`); snapshots above the log end are stale and
    removed. As in Kafka, a cleanly shut down log without any snapshot is not replayed (it had no producer state
    to keep)."""
    state = ProducerStateManager(directory, producer_id_expiration_ms)
    state.delete_snapshots_above(log_end_offset)
    if had_clean_shutdown and not state.snapshot_offsets():
        return state
    rebuild_producer_state(state, segments, log_end_offset, now_ms)
    return state


def rebuild_producer_state(state: ProducerStateManager, segments: LogSegments, up_to: int, now_ms: int) -> None:
    """`state` as of offset `up_to` (Kafka's `rebuildProducerState`): the newest snapshot at or below it, without
    the producers expired at `now_ms`, then the producer batches and markers of [snapshot, up_to) replayed from the
    segments (batch headers, and the records of markers), one segment at a time. The `.txnindex` files are left
    as they are: they already hold what the replay finds."""
    start = state.load_latest_snapshot(up_to, now_ms)
    start = 0 if start is None else start
    for segment in segments.from_floor(start):
        if segment.base_offset >= up_to:
            break
        position = segment.offset_index.lookup(start).position if segment.base_offset <= start else 0
        pending = PendingAppend(state, AppendOrigin.REPLICATION)
        try:
            for batch in segment.log.batches(position):
                if batch.last_offset >= up_to:
                    break
                if batch.last_offset >= start and isinstance(batch, RecordBatch):
                    pending.append_batch(batch)
        except CorruptRecordError as exc:
            # Damage below the recovery point is not this replay's to repair: the batches before it count, and
            # nothing after it in this segment can be trusted.
            logger.warning("replaying producer state: %s; the rest of segment %d is skipped", exc, segment.base_offset)
        pending.commit(None)
