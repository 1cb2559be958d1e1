"""What a log manager calls on a partition (`PartitionHandle`), what starts and stops partitions
(`PartitionFactory`), and their in-process implementations over `storage.partition.log.Log`.

The log manager (`storage.logdir.log_manager`) owns placement, checkpoints, scheduling and cleaning choice;
where a partition's log lives is the factory's business. In process, a `LocalPartition` holds the `Log`
itself; on Ray, `actors.server.ray_partitions` gives each partition an actor (or a place in a partition
host) behind the same two protocols. Every handle call answers a `storage.pending.Pending`, so a manager
asks all its partitions at once and then collects: Ray partitions work in parallel, local ones answer at
the call. A scheduled pass asks every partition the same question through the factory's `ask_each`, so a factory may
send one call for many partitions (on Ray, one per partition host). Errors are the partition's own typed errors
(`storage.errors`), raised by `result()`.

`partition_state`, `flush_if_due`, `swap_and_retain`, `reopen_as_replica` and `LogMove` are the one implementation of
what a partition reports, when it flushes, how it ends a compaction pass, where a reopened replica's high watermark
starts and how its log moves to another log dir; the partition actor (`actors.server.partition_log`) uses them too.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from storage.clock import Clock
from storage.compaction.clean_result import CleanedLog, CleanResult
from storage.compaction.cleaned_swap import changed_since, swap_cleaned
from storage.compaction.cleaner_manager import CleanablePartition, LogToClean, log_to_clean
from storage.compaction.log_snapshot import LogSnapshot, snapshot_for_cleaning
from storage.config.log_config import LogConfig
from storage.errors import KafkaStorageError, StorageError
from storage.partition.future_log import FutureLog
from storage.partition.log import Log
from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS
from storage.pending import Pending, completed
from storage.topic_partition import TopicPartition

T = TypeVar("T")

# What a log manager's passes ask every partition (`PartitionFactory.ask_each`): `PartitionHandle` methods of no
# arguments.
PartitionQuestion = Literal[
    "state", "delete_old_segments", "delete_due_files", "flush_if_due", "remove_expired_producers"
]


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the log manager checkpoints and describes for one partition; `pid` is the process holding it and
    `producer_count` the idempotent producers whose state it keeps."""

    directory: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    recovery_point: int
    first_segment_base: int
    size_bytes: int
    segments: int
    pid: int
    producer_count: int
    # The last stable offset: a read_committed consumer reads below it.
    last_stable_offset: int = -1
    # The future replica being filled in another log dir (`storage.partition.future_log`): that dir ("" without one),
    # the offset its copy has reached and the bytes copied.
    future_directory: str = ""
    future_log_end_offset: int = -1
    future_size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class MoveProgress:
    """Where a partition's move to another log dir stands after a round of its copy (`LogMove.advance`): `done` once
    the copy replaced the log, whose folder is then `directory` (the copy's `-future` folder before), with its old
    folder `old_folder`, renamed `-delete` unless `renamed` is False (that rename failed)."""

    directory: str
    done: bool
    old_folder: str = ""
    renamed: bool = True


class LogMove:
    """The move of one partition's log to another log dir of its broker, as the process holding the log runs it: at
    most one copy (`storage.partition.future_log.FutureLog`) at a time, a new one replacing a copy under way to
    another dir (Kafka's `futureReplicaDirChanged`). Calls come from the log manager's alter-log-dirs thread and its
    describes, so a lock keeps one copy's round and its replacement apart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._future: FutureLog | None = None

    def start(self, log: Log, log_dir: str) -> str:
        """Starts copying `log` into `log_dir` unless a copy there is under way; answers the copy's folder."""
        with self._lock:
            if self._future is not None:
                if self._future.log_dir == Path(log_dir):
                    return str(self._future.directory)
                self._future.delete()
                self._future = None
            self._future = FutureLog.create(log, Path(log_dir))
            return str(self._future.directory)

    def advance(self) -> MoveProgress:
        """One round of the copy, and the swap once it has caught up; `KafkaStorageError` without a copy."""
        with self._lock:
            future = self._future
            if future is None:
                raise KafkaStorageError("no move of this partition is under way")
            try:
                if not future.copy():
                    return MoveProgress(str(future.directory), False)
                swapped = future.swap()
            except BaseException:
                future.delete()
                self._future = None
                raise
            self._future = None
            return MoveProgress(str(swapped.directory), True, str(swapped.old_folder), swapped.renamed)

    def abort(self) -> None:
        """Drops the copy under way, if any."""
        with self._lock:
            if self._future is not None:
                self._future.delete()
                self._future = None

    @property
    def future(self) -> FutureLog | None:
        return self._future


def partition_state(log: Log, move: LogMove | None = None) -> PartitionState:
    """`log`'s offsets, size and segment count now, and its `move`'s copy if one is under way."""
    segments = log.log_segments()
    future = None if move is None else move.future
    return PartitionState(
        str(log.directory),
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        log.recovery_point,
        segments[0].base_offset,
        log.size_in_bytes,
        len(segments),
        os.getpid(),
        log.producer_count,
        log.last_stable_offset,
        "" if future is None else str(future.log_dir),
        -1 if future is None else future.log_end_offset,
        0 if future is None else future.size_bytes,
    )


def swap_and_retain(log: Log, cleaned: CleanedLog) -> CleanResult:
    """The owner's end of a compaction pass (`cleaned_swap.swap_cleaned`), then retention for a `compact,delete` log,
    as after a Kafka cleaner pass."""
    result = swap_cleaned(log, cleaned)
    with log.lock:
        if log.config.delete and not log.closed:
            log.delete_old_segments()
    return result


def reopen_as_replica(log: Log, high_watermark: int) -> None:
    """Kafka's `Partition.createLog` for a replica's log its broker reopens: `log` becomes replicated (its replica moves
    the high watermark from now on, `Log.set_replicated`), with its high watermark at `high_watermark`, the entry of
    its log dir's `replication-offset-checkpoint` (0 when it has none), clamped to [log start, log end], not at its log
    end: a tail past the checkpoint may be on no other replica, and must not be read as committed. Its replica moves
    it to the log end once it learns it is the only one in sync (Kafka's `maybeIncrementLeaderHW`), else as its
    followers fetch."""
    log.set_replicated(True)
    log.update_high_watermark(high_watermark)


def flush_if_due(log: Log) -> bool:
    """fsyncs `log` when its last flush is older than its `flush.ms`; returns whether it flushed."""
    if log.clock.milliseconds() - log.last_flush_ms < log.config.flush_ms:
        return False
    log.flush()
    return True


class PartitionHandle(CleanablePartition, Protocol):
    """One partition as its log manager sees it (plus `cleanable`, the owner's two phases of a compaction pass,
    `delete_old_segments` and `delete_due_files` from `CleanablePartition`)."""

    def state(self) -> Pending[PartitionState]: ...

    def update_config(self, config: LogConfig) -> Pending[None]: ...

    def flush_if_due(self) -> Pending[bool]: ...

    def remove_expired_producers(self) -> Pending[int]:
        """Forgets producers idle longer than `producer.id.expiration.ms`; how many."""
        ...

    def close(self) -> Pending[PartitionState]:
        """Clean shutdown of the log (flush, trim, markers); its final state."""
        ...

    def go_offline(self, reason: str) -> Pending[None]:
        """Its log dir failed: files closed without a flush; every later call raises `KafkaStorageError`."""
        ...

    def start_move(self, log_dir: str) -> Pending[str]:
        """Starts copying the log into `log_dir` (`LogMove.start`); the copy's folder."""
        ...

    def advance_move(self) -> Pending[MoveProgress]:
        """One round of the move under way (`LogMove.advance`)."""
        ...

    def abort_move(self) -> Pending[None]:
        """Drops the move under way, if any."""
        ...


@dataclass(frozen=True, slots=True)
class PartitionCheckpoints:
    """What a log dir says of a partition the log manager opens: its entries in the dir's
    `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` (0 when it has none), whether the dir was
    shut down cleanly, and its `replication-offset-checkpoint` entry, where a replicated log's high watermark starts
    (`reopen_as_replica`; 0 when it has none). The defaults are a new partition's: nothing to recover, and no high
    watermark (None) to start from."""

    recovery_point: int = 0
    log_start_offset: int = 0
    had_clean_shutdown: bool = True
    high_watermark: int | None = None


class PartitionFactory(Protocol):
    """Starts and stops the partitions of one log manager."""

    def open(
        self, tp: TopicPartition, folder: Path, config: LogConfig, checkpoints: PartitionCheckpoints
    ) -> PartitionHandle:
        """Opens (creating it if missing, recovering it if needed) the log in `folder` from `checkpoints`; waits
        until it is open, and raises why it did not open (nothing is left running then)."""
        ...

    def stop(self, tp: TopicPartition, handle: PartitionHandle) -> None:
        """Releases the partition for good (its log closed or not): nothing of it keeps running."""
        ...

    def ask_each(
        self, handles: Mapping[TopicPartition, PartitionHandle], question: PartitionQuestion
    ) -> dict[TopicPartition, Pending[Any]]:
        """Asks each of `handles` `question` at once; each answer is collected from its partition's `Pending`."""
        ...


class LocalPartition:
    """A `Log` in this process. Calls run at once, under the log's lock; a closed log (deleted, or its dir
    offline) answers None to `cleanable`, False to `flush_if_due` and 0 to retention, as it has nothing to do."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.move = LogMove()

    def state(self) -> Pending[PartitionState]:
        return completed(lambda: partition_state(self.log, self.move))

    def start_move(self, log_dir: str) -> Pending[str]:
        return completed(lambda: self.move.start(self.log, log_dir))

    def advance_move(self) -> Pending[MoveProgress]:
        return completed(self.move.advance)

    def abort_move(self) -> Pending[None]:
        return completed(self.move.abort)

    def update_config(self, config: LogConfig) -> Pending[None]:
        return completed(lambda: self.log.update_config(config))

    def delete_old_segments(self) -> Pending[int]:
        return completed(lambda: self._unless_closed(self.log.delete_old_segments, 0))

    def delete_due_files(self) -> Pending[int]:
        return completed(lambda: self._unless_closed(self.log.delete_due_files, 0))

    def flush_if_due(self) -> Pending[bool]:
        return completed(lambda: self._unless_closed(lambda: flush_if_due(self.log), False))

    def remove_expired_producers(self) -> Pending[int]:
        return completed(lambda: self._unless_closed(self.log.remove_expired_producers, 0))

    def cleanable(self, checkpointed_first_dirty: int | None) -> Pending[LogToClean | None]:
        def measure() -> LogToClean | None:
            if not self.log.config.compact:
                return None
            # The cleaner manager names the range after the partition it asked.
            return log_to_clean(("", 0), self.log, checkpointed_first_dirty, self.log.clock.milliseconds())

        return completed(lambda: self._unless_closed(measure, None))

    def snapshot_for_cleaning(self, first_dirty_offset: int, first_uncleanable_offset: int) -> Pending[LogSnapshot]:
        return completed(lambda: snapshot_for_cleaning(self.log, first_dirty_offset, first_uncleanable_offset))

    def swap_cleaned(self, cleaned: CleanedLog) -> Pending[CleanResult]:
        return completed(lambda: swap_and_retain(self.log, cleaned))

    def changed_since(self, snapshot: LogSnapshot) -> Pending[bool]:
        return completed(lambda: changed_since(self.log, snapshot))

    def close(self) -> Pending[PartitionState]:
        def close() -> PartitionState:
            self.log.close()
            return partition_state(self.log)

        return completed(close)

    def go_offline(self, reason: str) -> Pending[None]:
        def close_files() -> None:
            # The disk is already failing: errors closing its files change nothing.
            with contextlib.suppress(StorageError, OSError):
                self.log.close_without_marker()

        return completed(close_files)

    def _unless_closed(self, work: Callable[[], T], closed: T) -> T:
        with self.log.lock:
            return closed if self.log.closed else work()


class LocalPartitions:
    """The in-process `PartitionFactory`: a `Log` per partition. Each log is its own only replica (its high
    watermark its log end offset) unless `replicated`: then a log found on disk opens at its checkpointed high
    watermark (`reopen_as_replica`), for the replica role a subclass's `handle_for` gives it to move."""

    def __init__(
        self, clock: Clock, producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS, *, replicated: bool = False
    ) -> None:
        self._clock = clock
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._replicated = replicated

    def open(
        self, tp: TopicPartition, folder: Path, config: LogConfig, checkpoints: PartitionCheckpoints
    ) -> LocalPartition:
        log = Log.open(
            folder,
            config,
            clock=self._clock,
            recovery_point=checkpoints.recovery_point,
            log_start_offset=checkpoints.log_start_offset,
            had_clean_shutdown=checkpoints.had_clean_shutdown,
            producer_id_expiration_ms=self._producer_id_expiration_ms,
        )
        if self._replicated and checkpoints.high_watermark is not None:
            reopen_as_replica(log, checkpoints.high_watermark)
        return self.handle_for(tp, log)

    def handle_for(self, tp: TopicPartition, log: Log) -> LocalPartition:
        """The log manager's handle on the partition's `log`, just opened; a subclass's may serve the log more
        (the in-process broker's gives it its replica role)."""
        return LocalPartition(log)

    def stop(self, tp: TopicPartition, handle: PartitionHandle) -> None:
        if isinstance(handle, LocalPartition) and not handle.log.closed:
            handle.log.close_without_marker()

    def ask_each(
        self, handles: Mapping[TopicPartition, PartitionHandle], question: PartitionQuestion
    ) -> dict[TopicPartition, Pending[Any]]:
        """Each handle's own call: in process, each answers at once."""
        return {tp: getattr(handle, question)() for tp, handle in handles.items()}
