"""Which compacted partition to clean next, and how far each is cleaned (Kafka's `LogCleanerManager`).

The only keeper of cleaning state for one broker's compacted partitions, across its log dirs:

- the cleaner checkpoint: per partition, the first dirty offset (everything below it was deduplicated),
  persisted in its log dir's `cleaner-offset-checkpoint` (text: `0`, count, `topic partition offset` lines;
  see `checkpoint_file.py`), read when the manager is created and rewritten atomically by `checkpoint()`.
  A missing or corrupt file means "never cleaned": the next pass starts at the log start, which is always
  safe. Entries of partitions not registered (yet) are kept, in the dir they were read from;
- which partition is being cleaned (never two passes on one partition), and none while its owner pauses it;
- which partitions failed, why and when, and when they may be tried again.

The partitions themselves are `CleanablePartition`s (in process: `storage.logdir.partition_handles.LocalPartition`;
on Ray: the partition's actor or host). The manager asks each for its cleanable range; a chosen one hands it a
snapshot of its log, one of the broker's cleaner threads (`storage.compaction.cleaner_threads`) writes the
cleaned segments from it, and the partition swaps them in, because a log's segment list can only be changed by
the process that owns it (the two phases of `storage.compaction.cleaner`). Every call returns a `Pending`
answer, so partitions and cleaner threads in other processes work in parallel.

Choosing (`cleanable_logs`, `grab_filthiest_logs`), per compacted partition (`log_to_clean`):

- first dirty offset = checkpoint entry, or the log start offset; an entry below the log start or above
  the log end (truncation, deleted records) is reset to the log start, and rewritten in the checkpoint at
  the end of the pass, for every such log, chosen or not (as Kafka's `grabFilthiestCompactedLog` does);
  otherwise a log that is not chosen keeps its stale entry and is warned about on every pass;
- first uncleanable offset = `cleanable_range.first_uncleanable_offset` (last stable offset, active segment,
  `min.compaction.lag.ms`);
- clean bytes = segments wholly below the first dirty offset; cleanable bytes = segments from the one
  holding the first dirty offset up to the first uncleanable one; dirty ratio = cleanable / (clean +
  cleanable). (Kafka counts a segment holding the first dirty offset on both sides; here it is cleanable.)
- a log qualifies when its ratio exceeds `min.cleanable.dirty.ratio`, or when its oldest dirty data is
  older than `max.compaction.lag.ms` (the first batch timestamp of a dirty non-active segment) and it has
  cleanable bytes. The highest ratio wins.

Failures: in Kafka one exception marks a partition uncleanable until the broker restarts, and
`__consumer_offsets` then grows without bound. Here a failed pass marks only that partition, records the
error text and time, and retries it after `log.cleaner.backoff.ms` x 2**(failures - 1), capped at 64 x the
backoff (16 minutes at the 15 s default), so a transient fault clears by itself and a persistent one costs
one failed pass per cap. `uncleanable()` lists them. A successful pass clears the record.

`run_once()` is one iteration of Kafka's cleaner threads: grab the filthiest partitions, one per cleaner
thread, clean them at once (snapshots, then the threads' phase, then the swaps, each step asked of all of them
before any answer is collected), record progress, checkpoint, then retention (`delete_old_segments`) for
every compacted partition, as Kafka's cleaner thread does, including those whose cleaning failed (Kafka
skips those, so a broken compacted log also stops honouring retention). The broker's log manager
(`storage.logdir.log_manager`) schedules it every `log.cleaner.backoff.ms`. All methods are thread-safe;
`run_once` must not run twice at once for the same manager.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from storage import file_names
from storage.clock import Clock
from storage.compaction.clean_result import CleanedLog, CleanResult, aborted_pass
from storage.compaction.cleanable_range import (
    dirty_segments,
    first_uncleanable_offset,
)
from storage.compaction.cleaner_threads import CleanerThread
from storage.compaction.log_snapshot import LogSnapshot
from storage.config.cleaner_config import CleanerConfig
from storage.errors import KafkaStorageError, StorageError
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.pending import Pending
from storage.records.record_batch import MAGIC_OFFSET, MAX_TIMESTAMP_OFFSET, RECORD_BATCH_OVERHEAD
from storage.segment.log_segment import LogSegment
from storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from storage.partition.log import Log

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Retry backoff doubles per failure up to 2**6 = 64 x log.cleaner.backoff.ms (16 min at the 15 s default).
MAX_BACKOFF_DOUBLINGS = 6


def failure_backoff_ms(backoff_ms: int, failures: int) -> int:
    """How long a partition waits after its `failures`-th failed cleaning in a row before it is tried again."""
    doublings: int = min(failures - 1, MAX_BACKOFF_DOUBLINGS)
    return backoff_ms << doublings


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log's cleanable range and how dirty it is (plain values: it crosses processes)."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int
    checkpoint_reset: bool
    min_cleanable_dirty_ratio: float

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
            self.dirty_ratio > self.min_cleanable_dirty_ratio
        )


@dataclass(frozen=True, slots=True)
class UncleanableLog:
    """Why a partition's last pass failed, how often in a row, and when it is tried again."""

    reason: str
    failed_at_ms: int
    failures: int
    retry_at_ms: int


class CleanablePartition(Protocol):
    """What the cleaner manager calls on a partition; each call answers a `Pending`."""

    def cleanable(self, checkpointed_first_dirty: int | None) -> Pending[LogToClean | None]:
        """The partition's `log_to_clean` now (None: not compacted, closed, or not dirty enough and its
        checkpoint in range)."""
        ...

    def snapshot_for_cleaning(self, first_dirty_offset: int, first_uncleanable_offset: int) -> Pending[LogSnapshot]:
        """A pass's start: the log's snapshot (`log_snapshot.snapshot_for_cleaning`)."""
        ...

    def swap_cleaned(self, cleaned: CleanedLog) -> Pending[CleanResult]:
        """A pass's end: its cleaned segments swapped in, or discarded if the log changed (`cleaned_swap.swap_cleaned`);
        retention follows for `compact,delete` logs, as after a Kafka cleaner pass."""
        ...

    def changed_since(self, snapshot: LogSnapshot) -> Pending[bool]:
        """Whether the log changed since `snapshot` (`cleaned_swap.changed_since`): a failed pass is then aborted."""
        ...

    def delete_old_segments(self) -> Pending[int]: ...

    def delete_due_files(self) -> Pending[int]: ...


@dataclass(slots=True)
class _Registered:
    partition: CleanablePartition
    log_dir: Path


class CleanerManager:
    """Cleaner state and checkpoints of one broker's compacted partitions (see the module docstring)."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        clock: Clock,
        config: CleanerConfig | None = None,
        *,
        threads: Sequence[CleanerThread] = (),
        on_checkpoint_failure: Callable[[Path, BaseException], object] | None = None,
        paused: Callable[[TopicPartition], bool] = lambda tp: False,
    ) -> None:
        """Reads the cleaner checkpoint of each of `log_dirs`; `threads` run the passes (one each at a time; none:
        nothing is cleaned). A dir whose checkpoint cannot be written is passed to `on_checkpoint_failure` (the
        log manager takes it offline); without one the error is raised. No pass starts on a partition while
        `paused(tp)` says so (one being moved to another log dir, as Kafka's `abortAndPauseCleaning` pauses it)."""
        self.config = config or CleanerConfig()
        self._threads = tuple(threads)
        self._clock = clock
        self._on_checkpoint_failure = on_checkpoint_failure
        self._paused = paused
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._log_dirs = [Path(directory) for directory in log_dirs]
        self._partitions: dict[TopicPartition, _Registered] = {}
        self._in_progress: set[TopicPartition] = set()
        self._failures: dict[TopicPartition, UncleanableLog] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # Dirs whose checkpoint holds an entry reset since it was last written.
        self._reset_dirs: set[Path] = set()
        for directory in self._log_dirs:
            path = directory / file_names.CLEANER_OFFSET_CHECKPOINT
            try:
                found = OffsetCheckpointFile(path, read_only=True).read() if path.exists() else {}
            except (StorageError, OSError) as exc:
                logger.warning("%s; its logs will be cleaned from their start", exc)
                found = {}
            for tp, offset in found.items():
                self._offsets[tp] = offset
                self._dir_of[tp] = directory

    # --- partitions ----------------------------------------------------------------------------------

    def register(self, topic: str, partition: int, cleanable: CleanablePartition, log_dir: Path) -> None:
        """Starts managing the partition, whose folder is in `log_dir` (replacing one registered under the
        same name)."""
        file_names.partition_dir_name(topic, partition)
        with self._lock:
            self._partitions[(topic, partition)] = _Registered(cleanable, Path(log_dir))
            self._dir_of[(topic, partition)] = Path(log_dir)

    def unregister(self, topic: str, partition: int) -> None:
        """Stops managing the partition (deleted or moved) and forgets its checkpoint entry and failures."""
        tp = (topic, partition)
        with self._lock:
            self._partitions.pop(tp, None)
            self._offsets.pop(tp, None)
            self._dir_of.pop(tp, None)
            self._failures.pop(tp, None)
            self._in_progress.discard(tp)

    def handle_log_dir_failure(self, log_dir: Path) -> None:
        """`log_dir` went offline: its partitions and checkpoint are no longer this manager's."""
        with self._lock:
            if log_dir in self._log_dirs:
                self._log_dirs.remove(log_dir)
            self._reset_dirs.discard(log_dir)
            for tp in [tp for tp, directory in self._dir_of.items() if directory == log_dir]:
                self.unregister(*tp)

    def cleaner_offsets(self) -> dict[TopicPartition, int]:
        """The first dirty offset of every partition the checkpoints know."""
        with self._lock:
            return dict(self._offsets)

    # --- choosing ------------------------------------------------------------------------------------

    def cleanable_logs(self, now_ms: int | None = None) -> list[LogToClean]:
        """Every compacted partition that qualifies for a pass now, filthiest first (in-progress, paused and
        backing-off partitions excluded). A partition that cannot answer is marked failed. Every checkpoint
        entry found out of range is reset here, qualifying or not; `run_once` writes it."""
        now_ms = self._clock.milliseconds() if now_ms is None else now_ms
        with self._lock:
            asked = []
            for tp, registered in self._partitions.items():
                failure = self._failures.get(tp)
                backing_off = failure is not None and now_ms < failure.retry_at_ms
                if tp in self._in_progress or backing_off or self._paused(tp):
                    continue
                asked.append((tp, registered.partition.cleanable(self._offsets.get(tp))))
            candidates = []
            for tp, found in self._answers(asked):
                if found is None:
                    continue
                if found.checkpoint_reset:
                    self._offsets[tp] = found.first_dirty_offset
                    self._reset_dirs.add(self._partitions[tp].log_dir)
                if found.eligible:
                    candidates.append(replace(found, topic=tp[0], partition=tp[1]))
        candidates.sort(key=lambda ltc: (-ltc.dirty_ratio, ltc.topic_partition))
        return candidates

    def grab_filthiest_logs(self, limit: int, now_ms: int | None = None) -> list[LogToClean]:
        """Up to `limit` filthiest qualifying partitions, now marked in progress."""
        with self._lock:
            chosen = self.cleanable_logs(now_ms)[:limit]
            for ltc in chosen:
                self._in_progress.add(ltc.topic_partition)
            return chosen

    def grab_filthiest_log(self, now_ms: int | None = None) -> LogToClean | None:
        """The filthiest qualifying partition, marked in progress; None if none qualifies."""
        chosen = self.grab_filthiest_logs(1, now_ms)
        return chosen[0] if chosen else None

    # --- progress ------------------------------------------------------------------------------------

    def done_cleaning(self, tp: TopicPartition, end_offset: int) -> None:
        """Records a finished pass: the partition's first dirty offset becomes `end_offset`."""
        with self._lock:
            self._in_progress.discard(tp)
            if tp in self._partitions:
                self._offsets[tp] = end_offset
                self._failures.pop(tp, None)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """A pass that ended without a result to record (`CleanResult.aborted`): the partition may be chosen
        again."""
        with self._lock:
            self._in_progress.discard(tp)

    def mark_failed(self, tp: TopicPartition, error: BaseException | str) -> UncleanableLog:
        """Marks only this partition uncleanable until its retry time (see the module docstring)."""
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

    def checkpoint(self, log_dir: Path | None = None) -> None:
        """Rewrites `cleaner-offset-checkpoint` atomically in `log_dir` (default: every dir) with the first
        dirty offset of each partition known there."""
        failed: list[tuple[Path, BaseException]] = []
        # One writer at a time (they would share `<name>.tmp`); the failure callback runs after, with no lock
        # of this manager held, as it takes the log manager's.
        with self._checkpoint_lock:
            with self._lock:
                directories = list(self._log_dirs) if log_dir is None else [log_dir]
                offsets = sorted(self._offsets.items())
                dir_of = dict(self._dir_of)
                self._reset_dirs.difference_update(directories)
            for directory in directories:
                here = {tp: offset for tp, offset in offsets if dir_of.get(tp) == directory}
                try:
                    OffsetCheckpointFile(directory / file_names.CLEANER_OFFSET_CHECKPOINT).write(here)
                except (KafkaStorageError, OSError) as exc:
                    if self._on_checkpoint_failure is None:
                        raise
                    failed.append((directory, exc))
        for directory, error in failed:
            assert self._on_checkpoint_failure is not None
            self._on_checkpoint_failure(directory, error)

    # --- one iteration of the cleaner threads --------------------------------------------------------

    def run_once(self) -> list[CleanResult]:
        """Cleans the filthiest partitions, one per cleaner thread, at once (see the module docstring); returns
        what each pass did, aborted passes included."""
        if not self.config.enabled:
            return []
        chosen = self.grab_filthiest_logs(len(self._threads))
        with self._lock:
            passes = [
                (ltc.topic_partition, self._partitions[ltc.topic_partition].partition, thread, ltc)
                for ltc, thread in zip(chosen, self._threads, strict=False)
            ]
        results = self._clean(passes)
        with self._lock:
            reset_dirs = sorted(self._reset_dirs)
        if chosen:
            self.checkpoint()
        else:
            for directory in reset_dirs:
                self.checkpoint(directory)
        self._run_retention()
        return results

    def _clean(
        self, passes: list[tuple[TopicPartition, CleanablePartition, CleanerThread, LogToClean]]
    ) -> list[CleanResult]:
        """The passes' three steps, each asked of every pass before any answer is collected. Any failure is
        confined to its partition: it is retried after its backoff, the others go on."""
        taken = {tp: (partition, thread) for tp, partition, thread, _ in passes}
        snapshots = [
            (tp, partition.snapshot_for_cleaning(ltc.first_dirty_offset, ltc.first_uncleanable_offset))
            for tp, partition, _, ltc in passes
        ]
        cleaning = []
        for tp, snapshot in self._answers(snapshots):
            partition, thread = taken[tp]
            cleaning.append((tp, partition, snapshot, thread.clean(snapshot)))
        swapping = []
        results = []
        for tp, partition, snapshot, pending_cleaned in cleaning:
            try:
                swapping.append((tp, partition.swap_cleaned(pending_cleaned.result())))
            except Exception as exc:
                if self._changed_since(partition, snapshot):
                    self.abort_cleaning(tp)
                    results.append(aborted_pass(snapshot))
                else:
                    self.mark_failed(tp, exc)
        for tp, result in self._answers(swapping):
            if result.aborted:
                self.abort_cleaning(tp)
            else:
                self.done_cleaning(tp, result.end_offset)
            results.append(result)
        return results

    def _answers(self, calls: Sequence[tuple[TopicPartition, Pending[T]]]) -> Iterator[tuple[TopicPartition, T]]:
        """Each partition's answer to its call, in order. A call that raised marks its partition failed (retried
        after its backoff) and gives no answer: one partition's failure never stops the others."""
        for tp, pending in calls:
            try:
                answer = pending.result()
            except Exception as exc:
                self.mark_failed(tp, exc)
                continue
            yield tp, answer

    @staticmethod
    def _changed_since(partition: CleanablePartition, snapshot: LogSnapshot) -> bool:
        """Whether a pass failed because its log changed under it (then it is aborted, not failed); a partition
        that cannot tell counts as unchanged."""
        try:
            return bool(partition.changed_since(snapshot).result())
        except Exception:
            return False

    def _run_retention(self) -> None:
        """Retention for every registered partition not being cleaned (a log manager registers only the
        partitions of compacted topics, and leaves their retention to this pass, as Kafka does)."""
        with self._lock:
            partitions = [(tp, r.partition) for tp, r in self._partitions.items() if tp not in self._in_progress]
        pending = [(tp, p.delete_old_segments(), p.delete_due_files()) for tp, p in partitions]
        for tp, deleted, due in pending:
            for answer in (deleted, due):
                try:
                    answer.result()
                except Exception as exc:
                    logger.warning("retention of %s-%d failed: %s", *tp, exc)


def log_to_clean(tp: TopicPartition, log: Log, checkpointed: int | None, now_ms: int) -> LogToClean | None:
    """`log`'s cleanable range from its checkpointed first dirty offset, or None if it does not qualify now.

    A checkpoint outside [log start, log end] restarts from the log start (`checkpoint_reset`); such a log is
    answered even when it does not qualify (`eligible` False), so that its checkpoint is corrected.
    """
    segments = log.log_segments()
    first_dirty, reset = _first_dirty_offset(log, checkpointed)
    upper = first_uncleanable_offset(log, first_dirty, now_ms, segments)
    ltc = _measure(tp, log, segments, first_dirty, upper, now_ms, reset)
    return ltc if ltc.eligible or reset else None


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
        first_dirty,
        upper,
        clean_bytes,
        cleanable_bytes,
        _max_compaction_delay_ms(log, segments, first_dirty, now_ms),
        reset,
        log.config.min_cleanable_dirty_ratio,
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


__all__ = ["CleanablePartition", "CleanerManager", "LogToClean", "UncleanableLog", "log_to_clean"]
