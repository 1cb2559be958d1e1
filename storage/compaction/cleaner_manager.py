"""Which log to compact next, and how far each log is compacted (Kafka's `LogCleanerManager`).

State it owns, for the compacted logs of one log dir:

- the cleaner checkpoint: per partition, the first dirty offset (everything below it was deduplicated),
  persisted in the dir's `cleaner-offset-checkpoint` (text: `0`, count, `topic partition offset` lines;
  see `checkpoint_file.py`), rewritten atomically by `checkpoint()`. A missing or corrupt file means
  "never cleaned": the next pass starts at the log start, which is always safe;
- which log is being cleaned (never two passes on one log);
- which logs failed, why and when, and when they may be tried again.

Choosing (`cleanable_logs`, `grab_filthiest_log`), per compacted log:

- first dirty offset = checkpoint entry, or the log start offset; an entry below the log start or above
  the log end (truncation, deleted records) is reset to the log start;
- first uncleanable offset = `cleaner.first_uncleanable_offset` (high watermark, active segment,
  `min.compaction.lag.ms`), and, for logs that qualify, the first open transaction;
- clean bytes = segments wholly below the first dirty offset; cleanable bytes = segments from the one
  holding the first dirty offset up to the first uncleanable one; dirty ratio = cleanable / (clean +
  cleanable). (Kafka counts a segment holding the first dirty offset on both sides; here it is cleanable.)
- a log qualifies when its ratio exceeds `min.cleanable.dirty.ratio`, or when its oldest dirty data is
  older than `max.compaction.lag.ms` (the first batch timestamp of a dirty non-active segment) and it has
  cleanable bytes. The highest ratio wins.

Failures (Kafka's complaint, spec §6.4: one exception marks a partition uncleanable until restart, and
`__consumer_offsets` grows without bound): here a failed pass marks only that log, records the error text
and time, and retries it after `log.cleaner.backoff.ms` x 2**(failures - 1), capped at 64 x the backoff
(16 minutes at the 15 s default), so a transient fault clears by itself and a persistent one costs one
failed pass per cap. `uncleanable()` lists them. A successful pass clears the record.

`run_once()` is one iteration of a Kafka cleaner thread: grab, clean, record progress, checkpoint, then
retention (`delete_old_segments`) for every compacted log, as Kafka's cleaner thread does, including logs
whose cleaning failed (Kafka skips those, so a broken compacted log also stops honouring retention).
The caller (the broker's actor) schedules it, every `log.cleaner.backoff.ms` when it returns None.
All methods are thread-safe; `run_once` must not run twice at once for the same manager.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from storage import file_names
from storage.clock import Clock
from storage.compaction.cleaner import (
    Cleaner,
    CleanResult,
    dirty_segments,
    first_uncleanable_offset,
    first_unstable_offset,
    floor_base_offset,
)
from storage.config.cleaner_config import CleanerConfig
from storage.errors import CorruptCheckpointError, StorageError
from storage.logdir.checkpoint_file import OffsetCheckpointFile
from storage.records.record_batch import MAGIC_OFFSET, MAX_TIMESTAMP_OFFSET, RECORD_BATCH_OVERHEAD
from storage.segment.log_segment import LogSegment

if TYPE_CHECKING:
    from storage.partition.log import Log

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# Retry backoff doubles per failure up to 2**6 = 64 x log.cleaner.backoff.ms (16 min at the 15 s default).
MAX_BACKOFF_DOUBLINGS = 6


def failure_backoff_ms(backoff_ms: int, failures: int) -> int:
    """How long a log waits after its `failures`-th failed cleaning in a row before it is tried again."""
    return backoff_ms * 2 ** min(failures - 1, MAX_BACKOFF_DOUBLINGS)


@dataclass(frozen=True)
class LogToClean:
    """A compacted log's cleanable range and how dirty it is."""

    topic: str
    partition: int
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int
    checkpoint_reset: bool

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def dirty_ratio(self) -> float:
        """cleanable / (clean + cleanable); 0 for an empty log."""
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        """Dirty data is older than max.compaction.lag.ms."""
        return self.max_compaction_delay_ms > 0

    @property
    def eligible(self) -> bool:
        return (self.needs_compaction_now and self.cleanable_bytes > 0) or (
            self.dirty_ratio > self.log.config.min_cleanable_dirty_ratio
        )


@dataclass(frozen=True)
class UncleanableLog:
    """Why a log's last pass failed, how often in a row, and when it is tried again."""

    reason: str
    failed_at_ms: int
    failures: int
    retry_at_ms: int


class CleanerManager:
    """Cleaner state and checkpoint for the compacted logs of one log dir (see the module docstring)."""

    def __init__(
        self,
        checkpoint_path: Path,
        clock: Clock,
        config: CleanerConfig | None = None,
        *,
        cleaner: Cleaner | None = None,
    ) -> None:
        self.config = config or CleanerConfig()
        self._clock = clock
        self._checkpoint_file = OffsetCheckpointFile(Path(checkpoint_path))
        self._cleaner = cleaner
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._in_progress: set[TopicPartition] = set()
        self._failures: dict[TopicPartition, UncleanableLog] = {}
        try:
            self._offsets: dict[TopicPartition, int] = self._checkpoint_file.read()
        except CorruptCheckpointError as exc:
            logger.warning("%s; every log will be cleaned from its start", exc)
            self._offsets = {}

    @property
    def cleaner(self) -> Cleaner:
        """The cleaner `run_once` uses, created on first use (its offset map is allocated then)."""
        if self._cleaner is None:
            self._cleaner = Cleaner(self.config, self._clock)
        return self._cleaner

    # --- logs ----------------------------------------------------------------------------------------

    def register(self, topic: str, partition: int, log: Log) -> None:
        """Starts managing `log` (replacing a log registered under the same partition)."""
        file_names.partition_dir_name(topic, partition)
        with self._lock:
            self._logs[(topic, partition)] = log

    def unregister(self, topic: str, partition: int) -> None:
        """Stops managing the partition (deleted or moved) and forgets its checkpoint entry and failures."""
        tp = (topic, partition)
        with self._lock:
            self._logs.pop(tp, None)
            self._offsets.pop(tp, None)
            self._failures.pop(tp, None)
            self._in_progress.discard(tp)

    def cleaner_offsets(self) -> dict[TopicPartition, int]:
        """The first dirty offset of every partition the checkpoint knows."""
        with self._lock:
            return dict(self._offsets)

    # --- choosing ------------------------------------------------------------------------------------

    def cleanable_logs(self, now_ms: int | None = None) -> list[LogToClean]:
        """Every compacted log that qualifies for a pass now, filthiest first (in-progress and backing-off
        logs excluded)."""
        now_ms = self._clock.milliseconds() if now_ms is None else now_ms
        with self._lock:
            candidates = []
            for tp, log in self._logs.items():
                if tp in self._in_progress or not log.config.compact or log.closed:
                    continue
                failure = self._failures.get(tp)
                if failure is not None and now_ms < failure.retry_at_ms:
                    continue
                try:
                    ltc = self._log_to_clean(tp, log, now_ms)
                except StorageError as exc:
                    self.mark_failed(tp, exc)
                    continue
                if ltc is not None:
                    candidates.append(ltc)
        candidates.sort(key=lambda ltc: (-ltc.dirty_ratio, ltc.topic_partition))
        return candidates

    def grab_filthiest_log(self, now_ms: int | None = None) -> LogToClean | None:
        """The filthiest qualifying log, now marked in progress (and its checkpoint reset if out of range)."""
        with self._lock:
            candidates = self.cleanable_logs(now_ms)
            if not candidates:
                return None
            chosen = candidates[0]
            if chosen.checkpoint_reset:
                self._offsets[chosen.topic_partition] = chosen.first_dirty_offset
            self._in_progress.add(chosen.topic_partition)
            return chosen

    def _log_to_clean(self, tp: TopicPartition, log: Log, now_ms: int) -> LogToClean | None:
        return log_to_clean(tp, log, self._offsets.get(tp), now_ms)

    # --- progress ------------------------------------------------------------------------------------

    def done_cleaning(self, tp: TopicPartition, end_offset: int) -> None:
        """Records a finished pass: the partition's first dirty offset becomes `end_offset`."""
        with self._lock:
            self._in_progress.discard(tp)
            if tp in self._logs:
                self._offsets[tp] = end_offset
                self._failures.pop(tp, None)

    def mark_failed(self, tp: TopicPartition, error: BaseException | str) -> UncleanableLog:
        """Marks only this log uncleanable until its retry time (see the module docstring)."""
        now_ms = self._clock.milliseconds()
        reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        with self._lock:
            self._in_progress.discard(tp)
            previous = self._failures.get(tp)
            failures = 1 if previous is None else previous.failures + 1
            backoff_ms = failure_backoff_ms(self.config.log_cleaner_backoff_ms, failures)
            record = UncleanableLog(reason, now_ms, failures, now_ms + backoff_ms)
            self._failures[tp] = record
        logger.error("cleaning %s-%d failed (%d in a row, retry at %d): %s", *tp, failures, record.retry_at_ms, reason)
        return record

    def uncleanable(self) -> dict[TopicPartition, UncleanableLog]:
        """Partitions whose last pass failed, with the reason."""
        with self._lock:
            return dict(self._failures)

    def checkpoint(self) -> None:
        """Rewrites `cleaner-offset-checkpoint` atomically with every known partition's first dirty offset."""
        with self._lock:
            offsets = dict(sorted(self._offsets.items()))
        self._checkpoint_file.write(offsets)

    # --- one cleaner-thread iteration ----------------------------------------------------------------

    def run_once(self) -> CleanResult | None:
        """Cleans the filthiest log, if any (see the module docstring); None when nothing was cleaned."""
        if not self.config.enabled:
            return None
        ltc = self.grab_filthiest_log()
        result = None
        if ltc is not None:
            tp = ltc.topic_partition
            try:
                result = self.cleaner.clean(ltc.log, ltc.first_dirty_offset, ltc.first_uncleanable_offset)
            except Exception as exc:
                # Any failure is confined to this log: it is retried after its backoff, the others go on.
                self.mark_failed(tp, exc)
            else:
                if result.aborted:
                    with self._lock:
                        self._in_progress.discard(tp)
                else:
                    self.done_cleaning(tp, result.end_offset)
            self.checkpoint()
        self._run_retention()
        return result

    def _run_retention(self) -> None:
        with self._lock:
            logs = [(tp, log) for tp, log in self._logs.items() if log.config.compact and tp not in self._in_progress]
        for tp, log in logs:
            if log.closed:
                continue
            try:
                log.delete_old_segments()
                log.delete_due_files()
            except StorageError as exc:
                logger.warning("retention of %s-%d failed: %s", *tp, exc)


def log_to_clean(tp: TopicPartition, log: Log, checkpointed: int | None, now_ms: int) -> LogToClean | None:
    """`log`'s cleanable range from its checkpointed first dirty offset, or None if it does not qualify now.

    A checkpoint outside [log start, log end] restarts from the log start (`checkpoint_reset`).
    """
    segments = log.log_segments()
    first_dirty, reset = _first_dirty_offset(log, checkpointed)
    upper = first_uncleanable_offset(log, first_dirty, now_ms, segments)
    ltc = _measure(tp, log, segments, first_dirty, upper, now_ms, reset)
    if not ltc.eligible:
        return None
    # Only now look for open transactions: it reads every batch header from the first dirty segment.
    unstable = first_unstable_offset(segments, first_dirty)
    if unstable is not None and unstable < upper:
        ltc = _measure(tp, log, segments, first_dirty, floor_base_offset(segments, unstable), now_ms, reset)
        if not ltc.eligible:
            return None
    return ltc


def _first_dirty_offset(log: Log, checkpointed: int | None) -> tuple[int, bool]:
    start = log.log_start_offset
    if checkpointed is None:
        return start, False
    if checkpointed < start or checkpointed > log.log_end_offset:
        logger.warning(
            "%s: cleaner checkpoint %d is outside [%d, %d]; cleaning from the log start",
            log.directory,
            checkpointed,
            start,
            log.log_end_offset,
        )
        return start, True
    return checkpointed, False


def _measure(
    tp: TopicPartition,
    log: Log,
    segments: tuple[LogSegment, ...],
    first_dirty: int,
    upper: int,
    now_ms: int,
    reset: bool,
) -> LogToClean:
    clean_bytes = 0
    for index, segment in enumerate(segments):
        end = segments[index + 1].base_offset if index + 1 < len(segments) else log.log_end_offset
        if end > first_dirty:
            break
        clean_bytes += segment.size
    cleanable_bytes = sum(segment.size for segment in dirty_segments(segments, first_dirty, upper))
    return LogToClean(
        tp[0],
        tp[1],
        log,
        first_dirty,
        upper,
        clean_bytes,
        cleanable_bytes,
        _max_compaction_delay_ms(log, segments, first_dirty, now_ms),
        reset,
    )


def _max_compaction_delay_ms(log: Log, segments: tuple[LogSegment, ...], first_dirty: int, now_ms: int) -> int:
    """How long the oldest dirty data has waited beyond max.compaction.lag.ms (0 if it has not)."""
    first_timestamps = [
        timestamp
        for segment in dirty_segments(segments[:-1], first_dirty, segments[-1].base_offset)
        if (timestamp := _first_batch_timestamp(segment)) > 0
    ]
    if not first_timestamps:
        return 0
    clean_until_ms = now_ms - log.config.max_compaction_lag_ms
    earliest = min(first_timestamps)
    return clean_until_ms - earliest if earliest < clean_until_ms else 0


def _first_batch_timestamp(segment: LogSegment) -> int:
    """Max timestamp of the segment's first v2 batch (Kafka's `getFirstBatchTimestamp`); -1 if unknown.

    Reads only the 61-byte header, not the 1 MiB chunk a batch iterator would.
    """
    header = segment.log.read(0, RECORD_BATCH_OVERHEAD)
    if len(header) < RECORD_BATCH_OVERHEAD or header[MAGIC_OFFSET] != 2:
        return -1
    return int.from_bytes(header[MAX_TIMESTAMP_OFFSET : MAX_TIMESTAMP_OFFSET + 8], "big", signed=True)


__all__ = ["CleanerManager", "LogToClean", "UncleanableLog"]
