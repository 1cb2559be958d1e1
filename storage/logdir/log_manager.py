"""The partitions of one broker across its log dirs (Kafka's `LogManager`): the logic the broker runs.

One class for both ways a broker runs: in process (`LocalPartitions`, the default: each partition a
`storage.partition.log.Log` here) and on Ray (`actors.server.log_manager_actor` passes the factory of
`actors.server.ray_partitions`: a partition actor, or a place in a partition host, per partition). The
manager sees partitions only through `storage.logdir.partition_handles` (`PartitionHandle`,
`PartitionFactory`), so its logic is tested without Ray, on a `MockClock`.

Everything dir-level (locks, meta.properties, the clean-shutdown marker, reading and writing checkpoint
files, placement order, delayed removal of `-delete` folders, offline dirs) is `storage.logdir.log_dirs.LogDirs`'s;
its docstring describes those files. Cleaning state (what is dirty, in progress, failed, backing off, and the
`cleaner-offset-checkpoint`) is `storage.compaction.cleaner_manager.CleanerManager`'s; partitions of compacted
topics are registered with it. This module owns which partition lives in which dir, and what goes into the
other three checkpoint files, one line per online partition of that dir:

| checkpoint file                      | value written per partition                                  |
|--------------------------------------|--------------------------------------------------------------|
| `recovery-point-offset-checkpoint`   | `recovery_point`: the offset below which the log is flushed  |
| `log-start-offset-checkpoint`        | `log_start_offset`, only when above the first segment's base |
| `replication-offset-checkpoint`      | `high_watermark` (one replica: the log end offset)           |

Startup: `LogDirs.startup` locks and reads every dir, then every partition folder found is opened with
a bounded pool of `num.recovery.threads.per.data.dir` threads per dir, from the dir's recovery point and
log start offset, trusting the indexes only after a clean shutdown; the factory is given the checkpointed high
watermark too (0 when the file has no entry, as Kafka's `Partition.createLog`), where a replica's log starts its
own (`storage.logdir.partition_handles.reopen_as_replica`). A partition that fails to open with an I/O error
(`KafkaStorageError`, `OSError`) takes its dir offline; any other failure, like a startup that fails (a dir locked
by another owner, a corrupt meta.properties, every dir offline), stops what was opened and releases every lock
before raising (Kafka's rule).

A partition created with its topic's id (KIP-516) gets a `partition.metadata` naming it
(`storage.files.partition_metadata`); a folder already naming another id is refused with `InconsistentTopicIdError`.
A new partition goes to the first dir of `LogDirs.placement_order` (fewest partitions); if opening it there
fails with an I/O error, that dir goes offline and the next one is tried; any other error is raised and
leaves every dir online. A dir that goes offline has its partitions' files closed (Kafka's
`handleLogDirFailure`); its partitions stay mapped to it and fail with `KafkaStorageError` instead of being
recreated empty elsewhere, while the other dirs keep serving. The periodic tasks (retention, flush,
checkpoints, delayed deletes, cleaning) do not raise for a partition's error: an I/O error takes its dir
offline (logged, and listed by `offline_dirs`), anything else is logged, and the pass goes on.
Moving a partition into another dir (AlterReplicaLogDirs, `alter_replica_log_dirs`) copies its log there while it
serves (`storage.partition.future_log`, run by its handle, advanced by the `alter-log-dirs` thread of
`storage.logdir.alter_log_dirs`), then swaps: the partition's placement, both dirs' checkpoints and its cleaning
state follow, and its old folder, renamed `-delete`, is removed after `file.delete.delay.ms`. No compaction pass
starts on a partition while it moves (Kafka pauses its cleaning), so the cleaner does not rewrite segments the copy
has taken; one under way when the move starts ends as it would, and the copy takes its swapped segments again. A
`-future` folder found at startup (a move the broker stopped in) is taken up again if the partition is still in
another online dir: the move starts again from what the copy holds that equals the log (Kafka reloads it as the
future replica and goes on fetching from its end); otherwise it is deleted, only ever the copy.

Deleting partitions rewrites their dirs' checkpoints at once, once for all of them (as Kafka's batched async delete
does), so a topic created again under the same name never inherits them. Shutdown closes (flushes) every online
partition, writes the checkpoints, then the clean-shutdown markers, and unlocks.

Scheduling: `schedule(scheduler, broker_config)` registers the periodic work on a
`storage.logdir.scheduler.Scheduler` at Kafka's intervals (`log.retention.check.interval.ms`,
`log.flush.scheduler.interval.ms`, `log.flush.offset.checkpoint.interval.ms`,
`log.flush.start.offset.checkpoint.interval.ms`, `replica.high.watermark.checkpoint.interval.ms`,
`log.cleaner.backoff.ms`, `producer.id.expiration.check.interval.ms`), each first due after
`log.initial.task.delay.ms`; whoever drives the scheduler
(a thread of the Ray actor, a test moving a `MockClock`) decides nothing else.

Every method is idempotent: creating an existing partition returns it, deleting a missing one does nothing,
checkpoints and scheduled tasks can run any number of times. Lock order: the manager's lock, then the
`LogDirs` lock, then a partition's own; every call into `LogDirs` is made under the manager's lock.
Partitions are asked outside it, except while deleting and shutting down; a new partition opens outside it too,
so the partitions of one topic open side by side (a delete waits for the creation it follows).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from storage import file_names
from storage.clock import SYSTEM_CLOCK, Clock
from storage.compaction.cleaner_manager import CleanerManager, UncleanableLog
from storage.compaction.cleaner_threads import CleanerThread, local_cleaner_threads
from storage.config.broker_config import BrokerConfig
from storage.config.cleaner_config import CleanerConfig
from storage.config.log_config import LogConfig
from storage.errors import KafkaStorageError
from storage.files.partition_metadata import record_topic_id
from storage.logdir.alter_log_dirs import AlterLogDirs
from storage.logdir.log_dirs import LoadedDir, LogDirs
from storage.logdir.metadata_mirror import MetadataMirror
from storage.logdir.partition_dirs import PartitionDirs
from storage.logdir.partition_handles import (
    LocalPartition,
    LocalPartitions,
    MoveProgress,
    PartitionCheckpoints,
    PartitionFactory,
    PartitionHandle,
    PartitionQuestion,
    PartitionState,
)
from storage.logdir.replica_dir_moves import ReplicaDirMoves
from storage.logdir.scheduler import Scheduler
from storage.partition.log import Log
from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# How long taking a dir offline waits for its partitions to close their files: a partition busy with a long
# append answers after it; one that does not (its process hung on the failed disk) must not stall the broker.
OFFLINE_TIMEOUT_SECONDS = 30
# The checkpoint files this module fills from partition states (the cleaner's is the cleaner manager's).
OFFSET_CHECKPOINTS = (
    file_names.RECOVERY_POINT_CHECKPOINT,
    file_names.LOG_START_OFFSET_CHECKPOINT,
    file_names.REPLICATION_OFFSET_CHECKPOINT,
)


@dataclass(frozen=True, slots=True)
class PartitionPlacement:
    """Where a partition lives on this broker: its log dir, and that dir's `directory.id` ("" if it has none)."""

    topic: str
    partition: int
    directory: str
    directory_id: str = ""


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """What `describe_dirs` reports about one log dir."""

    path: str
    online: bool
    partitions: int
    size_bytes: int
    error: str | None = None


def checkpoint_values(states: Mapping[TopicPartition, PartitionState]) -> dict[str, dict[TopicPartition, int]]:
    """What each offset checkpoint file lists for these partitions (see the module docstring's table)."""
    return {
        file_names.RECOVERY_POINT_CHECKPOINT: {tp: s.recovery_point for tp, s in states.items()},
        file_names.LOG_START_OFFSET_CHECKPOINT: {
            tp: s.log_start_offset for tp, s in states.items() if s.log_start_offset > s.first_segment_base
        },
        file_names.REPLICATION_OFFSET_CHECKPOINT: {tp: s.high_watermark for tp, s in states.items()},
    }


class LogManager(ReplicaDirMoves):
    """The partitions of one broker over one or more log dirs; see the module docstring."""

    def __init__(
        self,
        log_dirs: Sequence[str | Path],
        *,
        default_config: LogConfig | None = None,
        topic_configs: Mapping[str, LogConfig] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        cluster_id: str | None = None,
        node_id: int = 0,
        recovery_threads_per_data_dir: int = 1,
        file_delete_delay_ms: int = 60_000,
        cleaner_config: CleanerConfig | None = None,
        partitions: PartitionFactory | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        cleaner_threads: Sequence[CleanerThread] | None = None,
        on_replica_moved: Callable[[PartitionPlacement], None] | None = None,
    ) -> None:
        """`partitions` starts and stops the partitions; default: `LocalPartitions`, logs in this process, which
        forget producers idle for `producer_id_expiration_ms`. `cleaner_threads` run the compaction passes;
        default: `log.cleaner.threads` of them in this process. `on_replica_moved` is told a partition's placement
        after each move between dirs (the controller records the replica's new dir, Kafka's AssignReplicasToDirs)."""
        self._dirs = LogDirs(
            log_dirs,
            clock=clock,
            cluster_id=cluster_id,
            node_id=node_id,
            file_delete_delay_ms=file_delete_delay_ms,
            on_offline=self._handle_log_dir_failure,
        )
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self.clock = clock
        self.recovery_threads_per_data_dir = max(1, recovery_threads_per_data_dir)
        self.cleaner_config = cleaner_config or CleanerConfig()
        self._factory = partitions or LocalPartitions(clock, producer_id_expiration_ms)
        self._cleaner_threads = (
            local_cleaner_threads(self.cleaner_config, clock) if cleaner_threads is None else list(cleaner_threads)
        )
        self._lock = threading.RLock()
        self._handles: dict[TopicPartition, PartitionHandle] = {}
        self._dir_of = PartitionDirs()
        # Partitions being created outside the lock: the dir tried first (placement counts it) and when it ends.
        self._creating: dict[TopicPartition, tuple[Path | None, threading.Event]] = {}
        self._cleaner: CleanerManager | None = None
        self._metadata_dir = Path(log_dirs[0]) if log_dirs else None
        self._mirror: MetadataMirror | None = None
        self._moves = AlterLogDirs(self._handle_if_held, self._replica_moved)
        self._on_replica_moved = on_replica_moved

    @classmethod
    def from_broker_config(
        cls,
        config: BrokerConfig,
        *,
        topic_configs: Mapping[str, LogConfig] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        cluster_id: str | None = None,
        partitions: PartitionFactory | None = None,
        cleaner_threads: Sequence[CleanerThread] | None = None,
        on_replica_moved: Callable[[PartitionPlacement], None] | None = None,
    ) -> LogManager:
        """A manager of `config.log_dirs` with the broker's defaults (`log.*`, `log.cleaner.*`, `node.id`,
        `num.recovery.threads.per.data.dir`, `log.segment.delete.delay.ms`, `producer.id.expiration.ms`)."""
        return cls(
            config.log_dirs,
            default_config=config.log_config,
            topic_configs=topic_configs,
            clock=clock,
            cluster_id=cluster_id,
            node_id=config.node_id,
            recovery_threads_per_data_dir=config.num_recovery_threads_per_data_dir,
            file_delete_delay_ms=config.log_segment_delete_delay_ms,
            cleaner_config=config.cleaner_config,
            partitions=partitions,
            producer_id_expiration_ms=config.producer_id_expiration_ms,
            cleaner_threads=cleaner_threads,
            on_replica_moved=on_replica_moved,
        )

    @property
    def log_dirs(self) -> list[Path]:
        """The configured dirs, resolved, in config order."""
        return self._dirs.log_dirs

    @property
    def cluster_id(self) -> str:
        """The configured cluster id, else the one adopted from the dirs at startup."""
        return self._dirs.cluster_id

    @property
    def node_id(self) -> int:
        return self._dirs.node_id

    @property
    def file_delete_delay_ms(self) -> int:
        return self._dirs.file_delete_delay_ms

    @property
    def cleaner(self) -> CleanerManager | None:
        """The cleaning state of the compacted partitions (None before startup)."""
        return self._cleaner

    # --- startup ---------------------------------------------------------------------------------

    def startup(self, is_stray: Callable[[TopicPartition], bool] | None = None) -> None:
        """Locks every dir, checks its identity, and opens (recovering if needed) every partition in it.

        `is_stray` (Kafka's `isStray`) names the partitions found on disk that the cluster no longer has: their
        topic was deleted while this broker was down, so no delete reached it. Their folders are renamed
        `<topic>-<p>.<uuid>-stray` instead of being opened, and removed after `file.delete.delay.ms`.
        """
        with self._lock:
            if self._dirs.started:
                return
            try:
                loaded = self._dirs.startup()
                self._cleaner = CleanerManager(
                    [found.path for found in loaded],
                    self.clock,
                    self.cleaner_config,
                    threads=self._cleaner_threads,
                    on_checkpoint_failure=self._cleaner_checkpoint_failed,
                    paused=lambda tp: self._moves.target(tp) is not None,
                )
                for found in loaded:
                    try:
                        self._open_dir(found if is_stray is None else self._set_aside_strays(found, is_stray))
                    except (KafkaStorageError, OSError) as exc:
                        self._dirs.take_offline(found.path, exc)
                self._dirs.raise_if_all_offline()
            except BaseException:
                self._abandon()
                raise
            for found in loaded:
                self._resume_moves(found)

    def _resume_moves(self, loaded: LoadedDir) -> None:
        """The `-future` folders found in a dir: if that partition is still held in another online dir, its move into
        this dir starts again and takes up the copy the folder holds (`storage.partition.future_log`); otherwise, or
        if the move does not start, the folder is deleted (it is only a copy; the log it copies is elsewhere)."""
        for tp, folder in loaded.futures.items():
            current = self._dir_of.get(tp)
            if current is None or current == loaded.path or not self._dirs.is_online(loaded.path):
                shutil.rmtree(folder, ignore_errors=True)
                logger.warning("deleted %s: no partition %s-%d left to move into %s", folder, tp[0], tp[1], loaded.path)
                continue
            logger.info("partition %s-%d was being moved into %s: taking its copy up again", tp[0], tp[1], loaded.path)
            failed = self.alter_replica_log_dirs({tp: str(loaded.path)})[tp]
            if failed is not None:
                shutil.rmtree(folder, ignore_errors=True)
                logger.warning("the move of %s-%d into %s did not start again: %s", tp[0], tp[1], loaded.path, failed)

    def _set_aside_strays(self, loaded: LoadedDir, is_stray: Callable[[TopicPartition], bool]) -> LoadedDir:
        """`loaded` without its stray partitions, whose folders are renamed for deletion."""
        kept: dict[TopicPartition, Path] = {}
        for tp, folder in loaded.partitions.items():
            if not is_stray(tp):
                kept[tp] = folder
                continue
            renamed = self._dirs.schedule_folder_delete(folder, tp[0], tp[1], stray=True)
            logger.warning(
                "partition %s-%d in %s has no topic in the cluster (deleted while this broker was down): "
                "renamed %s, deleted in %d ms",
                tp[0],
                tp[1],
                loaded.path,
                renamed.name,
                self._dirs.file_delete_delay_ms,
            )
        return replace(loaded, partitions=kept)

    def _open_dir(self, loaded: LoadedDir) -> None:
        """Opens the dir's partitions, `recovery_threads_per_data_dir` at a time; raises the first failure."""

        def open_partition(tp: TopicPartition, folder: Path) -> PartitionHandle:
            checkpoints = PartitionCheckpoints(
                loaded.recovery_points.get(tp, 0),
                loaded.log_start_offsets.get(tp, 0),
                loaded.had_clean_shutdown,
                loaded.high_watermarks.get(tp, 0),
            )
            return self._factory.open(tp, folder, self.config_for(tp[0]), checkpoints)

        jobs = sorted(loaded.partitions.items())
        with ThreadPoolExecutor(max_workers=self.recovery_threads_per_data_dir) as pool:
            futures = [pool.submit(open_partition, tp, folder) for tp, folder in jobs]
        # Every partition found is mapped to this dir, even one that failed to open: if the dir goes
        # offline its partitions must fail, not be recreated empty elsewhere. Partitions that did open are
        # registered so they are closed with the dir.
        failures: list[BaseException] = []
        for (tp, _), future in zip(jobs, futures, strict=True):
            self._dir_of[tp] = loaded.path
            failure = future.exception()
            if failure is not None:
                logger.error("partition %s-%d in %s failed to open: %s", tp[0], tp[1], loaded.path, failure)
                failures.append(failure)
                continue
            self._add(tp, loaded.path, future.result())
        if failures:
            raise failures[0]
        logger.info(
            "opened %d partitions in %s (clean shutdown: %s)", len(jobs), loaded.path, loaded.had_clean_shutdown
        )

    def _add(self, tp: TopicPartition, directory: Path, handle: PartitionHandle) -> None:
        """Maps an open partition to its dir; a compacted one is registered with the cleaner."""
        self._handles[tp] = handle
        self._dir_of[tp] = directory
        if self._cleaner is not None and self.config_for(tp[0]).compact:
            self._cleaner.register(tp[0], tp[1], handle, directory)

    # --- lookup and placement --------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def set_topic_config(self, topic: str, config: LogConfig) -> int:
        """Sets a topic's config; its open partitions use it from their next append/roll/retention pass.
        Returns how many open partitions were updated."""
        with self._lock:
            self._topic_configs[topic] = config
            handles = {
                tp: h for tp, h in self._handles.items() if tp[0] == topic and self._dirs.is_online(self._dir_of[tp])
            }
            if self._cleaner is not None:
                for tp, handle in handles.items():
                    if config.compact:
                        self._cleaner.register(tp[0], tp[1], handle, self._dir_of[tp])
                    else:
                        self._cleaner.unregister(*tp)
        for pending in [handle.update_config(config) for handle in handles.values()]:
            pending.result()
        return len(handles)

    def partition(self, topic: str, partition: int) -> PartitionHandle | None:
        """The partition's handle, None if this broker has no such partition; `KafkaStorageError` if its dir
        is offline."""
        tp = (topic, partition)
        directory = self._dir_of.get(tp)
        if directory is not None:
            reason = self._dirs.offline_dirs.get(directory)
            if reason is not None:
                raise KafkaStorageError(f"partition {topic}-{partition} is offline: {reason}", path=directory)
        return self._handles.get(tp)

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The partition's `Log`, for a manager whose partitions live in this process (`LocalPartitions`)."""
        handle = self.partition(topic, partition)
        return None if handle is None else _local_log(handle)

    def all_logs(self) -> dict[TopicPartition, Log]:
        """Online logs by (topic, partition), for a manager whose partitions live in this process."""
        with self._lock:
            return {tp: _local_log(handle) for tp, handle in self._online_handles().items()}

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def partition_counts(self) -> dict[Path, int]:
        """Partitions per live log dir (what placement compares)."""
        offline = self._dirs.offline_dirs
        counts = {directory: self._dir_of.count(directory) for directory in self.log_dirs if directory not in offline}
        for first, _ in self._creating.values():
            if first in counts:
                counts[first] += 1
        return counts

    def placements(self) -> list[PartitionPlacement]:
        """Every open partition and its dir, sorted."""
        with self._lock:
            return [self._placement((t, p), self._dir_of[(t, p)]) for t, p in sorted(self._handles)]

    def _placement(self, tp: TopicPartition, directory: Path) -> PartitionPlacement:
        return PartitionPlacement(tp[0], tp[1], str(directory), self._dirs.directory_id(directory))

    def get_or_create_partition(
        self, topic: str, partition: int, config: LogConfig | None = None, topic_id: uuid.UUID | None = None
    ) -> PartitionPlacement:
        """The partition's placement, creating it (in the live dir with the fewest partitions) if missing;
        `config`, when given, becomes the topic's config first. With `topic_id`, the partition folder's
        `partition.metadata` names it (`storage.files.partition_metadata.record_topic_id`: written when missing,
        `InconsistentTopicIdError` when the folder is another topic's of the same name).

        The partition is opened outside the manager's lock, so the partitions of one topic open side by side: on
        Ray each is an actor process, ~1 s to start (3 partitions one after the other took 2-10 s).
        A second call for a partition being created waits for the first; so does a delete of it."""
        tp = (topic, partition)
        existing: PartitionPlacement | None = None
        while True:
            with self._lock:
                if not self._dirs.started:
                    raise KafkaStorageError("the log manager is not started")
                if self.partition(topic, partition) is not None:
                    existing = self._placement(tp, self._dir_of[tp])
                    break
                creating = self._creating.get(tp)
                if creating is None:
                    if config is not None and config != self._topic_configs.get(topic):
                        # Only a changed config goes out to the topic's open partitions: a topic's partitions are
                        # created one call each with the same config, and pushing it to every sibling made
                        # creating N partitions N^2 / 2 partition calls (999 hosted partitions took 250 s
                        # instead of ~12 s).
                        self.set_topic_config(topic, config)
                    order = self._dirs.placement_order(self.partition_counts())
                    preferred = self._moves.take_preferred(tp)
                    if preferred in order:
                        order.remove(preferred)
                        order.insert(0, preferred)
                    done = threading.Event()
                    self._creating[tp] = (order[0] if order else None, done)
                    break
            creating[1].wait()
        if existing is not None:
            return self._with_topic_id(existing, topic_id)
        try:
            return self._with_topic_id(self._create(tp, order), topic_id)
        finally:
            with self._lock:
                del self._creating[tp]
            done.set()

    def _with_topic_id(self, placement: PartitionPlacement, topic_id: uuid.UUID | None) -> PartitionPlacement:
        if topic_id is not None:
            folder = Path(placement.directory) / file_names.partition_dir_name(placement.topic, placement.partition)
            record_topic_id(folder, topic_id)
        return placement

    def _create(self, tp: TopicPartition, order: list[Path]) -> PartitionPlacement:
        """Opens a new partition in the first of `order` that takes it (see `get_or_create_partition`)."""
        folder_name = file_names.partition_dir_name(*tp)
        errors: list[str] = []
        for directory in order:
            try:
                handle = self._factory.open(tp, directory / folder_name, self.config_for(tp[0]), PartitionCheckpoints())
            except (KafkaStorageError, OSError) as exc:
                errors.append(f"{directory}: {exc}")
                with self._lock:
                    self._dirs.take_offline(directory, exc)
                continue
            with self._lock:
                if self._dirs.started and self._dirs.is_online(directory):
                    self._add(tp, directory, handle)
                    return self._placement(tp, directory)
            # Shut down, or the dir went offline, while the partition opened: it is not kept.
            self._factory.stop(tp, handle)
            raise KafkaStorageError(f"{folder_name} opened in {directory}, which is no longer served", path=directory)
        raise KafkaStorageError(f"cannot create {folder_name} in any live log dir ({'; '.join(errors)})")

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """`get_or_create_partition`, answering the `Log` of a partition that lives in this process."""
        self.get_or_create_partition(topic, partition, config)
        handle = self.partition(topic, partition)
        assert handle is not None, "created under the lock, deleted by a concurrent call"
        return _local_log(handle)

    def delete_log(self, topic: str, partition: int) -> bool:
        """`delete_logs` of one partition: False if it did not exist."""
        return bool(self.delete_logs(topic, [partition]))

    def delete_logs(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """Kafka-style async delete of partitions of `topic` (Kafka's batched `asyncDelete`): each closes and stops,
        its folder is renamed `...-delete` now and removed after the delay, and the checkpoints of the dirs that held
        them are rewritten once, without them (each rewrite asks every partition of its dir, so one per deleted
        partition would cost a topic's deletion its partitions squared). Answers the partitions that existed. One
        whose dir is offline is left as it is, and the first such `KafkaStorageError` is raised once the others
        are deleted."""
        wanted = list(dict.fromkeys(partitions))
        for partition in wanted:
            with self._lock:
                creating = self._creating.get((topic, partition))
            if creating is not None:
                # A delete never overtakes the creation it follows.
                creating[1].wait()
            self._abandon_move((topic, partition))
        failure: KafkaStorageError | None = None
        with self._lock:
            removed: list[tuple[TopicPartition, Path, PartitionHandle]] = []
            for partition in wanted:
                try:
                    handle = self.partition(topic, partition)
                except KafkaStorageError as exc:
                    failure = failure or exc
                    continue
                if handle is not None:
                    tp = (topic, partition)
                    removed.append((tp, self._dir_of.pop(tp), handle))
                    del self._handles[tp]
            closing = [(tp, directory, handle, _close(handle)) for tp, directory, handle in removed]
            for tp, directory, handle, closed in closing:
                try:
                    closed()
                except Exception as exc:
                    logger.warning("closing deleted partition %s-%d failed: %s", tp[0], tp[1], exc)
                finally:
                    self._factory.stop(tp, handle)
                self._dirs.schedule_folder_delete(directory / file_names.partition_dir_name(*tp), *tp)
                if self._cleaner is not None:
                    self._cleaner.unregister(*tp)
            directories = list(dict.fromkeys(directory for _, directory, _ in removed))
            if directories:
                self._write_checkpoints(directories)
            if self._cleaner is not None:
                for directory in directories:
                    self._cleaner.checkpoint(directory)
        if failure is not None:
            raise failure
        return [tp[1] for tp, _, _ in removed]

    # --- moving replicas between dirs (AlterReplicaLogDirs; the requests are `ReplicaDirMoves`') ----------

    def _replica_moved(self, tp: TopicPartition, progress: MoveProgress) -> None:
        """A partition's log now lives in its copy's dir (Kafka's `replaceCurrentWithFutureLog`): its placement, both
        dirs' checkpoints and its cleaning state follow, its old folder is removed after `file.delete.delay.ms` (a
        folder that could not be renamed takes its dir offline), and `on_replica_moved` is told."""
        new_dir = Path(progress.directory).parent
        with self._lock:
            source = self._dir_of.get(tp)
            handle = self._handles.get(tp)
            if source is None or handle is None:
                return
            self._dir_of[tp] = new_dir
            if progress.renamed:
                self._dirs.delete_folder_later(Path(progress.old_folder))
            else:
                self._dirs.take_offline(source, f"the old folder of moved partition {tp[0]}-{tp[1]} is not renamed")
            if self._cleaner is not None and self.config_for(tp[0]).compact:
                self._cleaner.register(tp[0], tp[1], handle, new_dir)
            placement = self._placement(tp, new_dir)
        logger.info("partition %s-%d moved from %s to %s", tp[0], tp[1], source, new_dir)
        self._write_checkpoints([source, new_dir])
        if self._cleaner is not None:
            for directory in (source, new_dir):
                if self._dirs.is_online(directory):
                    self._cleaner.checkpoint(directory)
        if self._on_replica_moved is not None:
            try:
                self._on_replica_moved(placement)
            except Exception as exc:
                logger.warning("the move of %s-%d was not recorded: %s", tp[0], tp[1], exc)

    # --- describing ------------------------------------------------------------------------------

    def describe(self, topic: str | None = None) -> list[tuple[PartitionPlacement, PartitionState | None]]:
        """Placement and live state of this broker's partitions (of `topic`, or all); state None for a
        partition that cannot answer (its dir offline, its process restarting)."""
        with self._lock:
            items = {tp: (self._dir_of[tp], h) for tp, h in sorted(self._handles.items()) if topic in (None, tp[0])}
        asked = self._factory.ask_each({tp: handle for tp, (_, handle) in items.items()}, "state")
        described: list[tuple[PartitionPlacement, PartitionState | None]] = []
        for tp, (directory, _) in items.items():
            try:
                state: PartitionState | None = asked[tp].result()
            except Exception:
                state = None
            described.append((self._placement(tp, directory), state))
        return described

    def describe_dirs(self) -> list[LogDirInfo]:
        states = self._each_partition("state")
        offline = self._dirs.offline_dirs
        infos = []
        for directory in self.log_dirs:
            tps = [tp for tp, d in self._dir_of.items() if d == directory]
            online = directory not in offline
            size = sum(states[tp].size_bytes for tp in tps if tp in states) if online else 0
            infos.append(LogDirInfo(str(directory), online, len(tps), size, offline.get(directory)))
        return infos

    # --- scheduled work --------------------------------------------------------------------------

    def schedule(self, scheduler: Scheduler, config: BrokerConfig) -> None:
        """Registers the periodic work at `config`'s intervals (see the module docstring)."""
        delay_ms = config.log_initial_task_delay_ms
        tasks: list[tuple[str, Callable[[], object], int]] = [
            ("kafka-log-retention", self._retention_pass, config.log_retention_check_interval_ms),
            (
                "kafka-recovery-point-checkpoint",
                self.checkpoint_recovery_points,
                config.log_flush_offset_checkpoint_interval_ms,
            ),
            (
                "kafka-log-start-offset-checkpoint",
                self.checkpoint_log_start_offsets,
                config.log_flush_start_offset_checkpoint_interval_ms,
            ),
            (
                "highwatermark-checkpoint",
                self.checkpoint_high_watermarks,
                config.replica_high_watermark_checkpoint_interval_ms,
            ),
            ("kafka-log-flusher", self.flush_dirty_logs, config.log_flush_scheduler_interval_ms),
            # 0 is a valid `log.cleaner.backoff.ms`; a pass per scheduler tick is the closest to it.
            ("log-cleaner", self.run_cleaner, max(1, config.log_cleaner_backoff_ms)),
            (
                "PeriodicProducerExpirationCheck",
                self.remove_expired_producers,
                config.producer_id_expiration_check_interval_ms,
            ),
        ]
        for name, task, period_ms in tasks:
            scheduler.schedule(name, task, delay_ms, period_ms)

    def _retention_pass(self) -> None:
        self.run_retention()
        self.delete_due_files()

    def run_retention(self) -> int:
        """One retention pass over every online partition; returns the number of segments deleted."""
        return sum(self._each_partition("delete_old_segments").values())

    def flush_dirty_logs(self) -> int:
        """fsyncs partitions whose last flush is older than their `flush.ms`; returns how many were flushed."""
        return sum(self._each_partition("flush_if_due").values())

    def remove_expired_producers(self) -> int:
        """Every online partition forgets its producers idle longer than `producer.id.expiration.ms`; returns how
        many were forgotten."""
        return sum(self._each_partition("remove_expired_producers").values())

    def delete_due_files(self) -> int:
        """Unlinks `.deleted` segments and `-delete` folders whose delay has passed; returns what is left."""
        pending: int = sum(self._each_partition("delete_due_files").values())
        with self._lock:
            return pending + self._dirs.delete_due_folders()

    def run_cleaner(self) -> int:
        """One pass of the cleaner (`CleanerManager.run_once`); returns how many partitions it cleaned."""
        if self._cleaner is None:
            return 0
        return sum(not result.aborted for result in self._cleaner.run_once())

    def uncleanable(self) -> dict[TopicPartition, UncleanableLog]:
        """Partitions whose last cleaning failed, and why."""
        return {} if self._cleaner is None else self._cleaner.uncleanable()

    def checkpoint_recovery_points(self, dirs: Sequence[Path] | None = None) -> None:
        self._write_checkpoints(dirs, [file_names.RECOVERY_POINT_CHECKPOINT])

    def checkpoint_log_start_offsets(self, dirs: Sequence[Path] | None = None) -> None:
        """Only partitions whose start offset is above their first segment's base are listed (Kafka's rule)."""
        self._write_checkpoints(dirs, [file_names.LOG_START_OFFSET_CHECKPOINT])

    def checkpoint_high_watermarks(self, dirs: Sequence[Path] | None = None) -> None:
        self._write_checkpoints(dirs, [file_names.REPLICATION_OFFSET_CHECKPOINT])

    def _write_checkpoints(
        self,
        dirs: Collection[Path] | None,
        names: Sequence[str] = OFFSET_CHECKPOINTS,
        states: Mapping[TopicPartition, PartitionState] | None = None,
    ) -> None:
        """Rewrites checkpoint `names` in each online dir of `dirs` (default: all) from the partitions' states
        (asked now unless given); a dir that fails goes offline. A partition that did not answer (its process
        restarting) keeps the entries the file had: dropping them would reopen it at offset 0 of its first segment,
        bringing back records DeleteRecords removed."""
        if states is None:
            states = self._each_partition("state", dirs)
        values = checkpoint_values(states)
        # Under the lock from reading the placement to the last write: the scheduler and a delete both write
        # (they would share `<name>.tmp`), and a partition deleted meanwhile must not be written back.
        with self._lock:
            for directory in self.log_dirs if dirs is None else dirs:
                if not self._dirs.is_online(directory):
                    continue
                silent = {tp for tp, placed in self._dir_of.items() if placed == directory and tp not in states}
                for name in names:
                    here = {tp: offset for tp, offset in values[name].items() if self._dir_of.get(tp) == directory}
                    if silent:
                        kept = self._dirs.read_checkpoint(directory, name)
                        here.update({tp: kept[tp] for tp in silent if tp in kept})
                    self._dirs.write_checkpoint(directory, name, here)

    def _each_partition(
        self, question: PartitionQuestion, dirs: Collection[Path] | None = None
    ) -> dict[TopicPartition, Any]:
        """Asks every online partition (of `dirs`, default all) `question` at once (`PartitionFactory.ask_each`), then
        collects the answers; an I/O error takes that partition's dir offline, any other failure is logged, and the
        pass goes on."""
        with self._lock:
            handles = self._online_handles(dirs)
            dir_of = {tp: self._dir_of[tp] for tp in handles}
        asked = self._factory.ask_each(handles, question)
        answers: dict[TopicPartition, Any] = {}
        for tp, pending in asked.items():
            directory = dir_of[tp]
            try:
                answers[tp] = pending.result()
            except (KafkaStorageError, OSError) as exc:
                with self._lock:
                    self._dirs.take_offline(directory, exc)
            except Exception as exc:
                logger.warning("a scheduled call of %s-%d failed: %s", tp[0], tp[1], exc)
        return answers

    def _online_handles(self, dirs: Collection[Path] | None = None) -> dict[TopicPartition, PartitionHandle]:
        return {
            tp: handle
            for tp, handle in self._handles.items()
            if self._dirs.is_online(self._dir_of[tp]) and (dirs is None or self._dir_of[tp] in dirs)
        }

    # --- the metadata log's copy ------------------------------------------------------------------

    def metadata_mirror(self) -> MetadataMirror:
        """This broker's copy of the controller's metadata log (`storage.logdir.metadata_mirror`) in its first log
        dir, opened when the controller first sends to it."""
        with self._lock:
            if self._metadata_dir is None:
                raise KafkaStorageError("a broker without log dirs keeps no copy of the metadata log")
            if self._mirror is None:
                self._mirror = MetadataMirror(self._metadata_dir, self.clock)
            return self._mirror

    def _close_metadata_mirror(self) -> None:
        with self._lock:
            if self._mirror is not None:
                self._mirror.close()
                self._mirror = None

    # --- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> dict[TopicPartition, PartitionState]:
        """Closes (flushes) every online partition, writes the checkpoints, then the clean-shutdown markers;
        stops every partition and unlocks. Returns the final state of each partition that closed."""
        self._moves.stop()
        with self._lock:
            self._close_metadata_mirror()
            if not self._dirs.started:
                return {}
            handles = self._online_handles()
            closing = [(tp, self._dir_of[tp], handle.close()) for tp, handle in handles.items()]
            states: dict[TopicPartition, PartitionState] = {}
            for tp, directory, pending in closing:
                try:
                    states[tp] = pending.result()
                except (KafkaStorageError, OSError) as exc:
                    self._dirs.take_offline(directory, exc)
                except Exception as exc:
                    logger.error("closing %s-%d failed: %s", tp[0], tp[1], exc)
                    self._dirs.mark_load_failed(directory)
            self._write_checkpoints(None, OFFSET_CHECKPOINTS, states)
            if self._cleaner is not None:
                self._cleaner.checkpoint()
            self._dirs.write_clean_shutdown_markers(self.log_dirs)
            self._abandon()
            return states

    def _abandon(self) -> None:
        """Stops every partition still running (no flush, no marker), releases every lock, forgets all state."""
        for tp, handle in self._handles.items():
            try:
                self._factory.stop(tp, handle)
            except Exception as exc:
                logger.warning("stopping %s-%d failed: %s", tp[0], tp[1], exc)
        self._dirs.release_all()
        self._handles.clear()
        self._dir_of.clear()
        self._cleaner = None

    # --- dir health ------------------------------------------------------------------------------

    @property
    def offline_dirs(self) -> dict[Path, str]:
        """Offline dirs and why they went offline."""
        return self._dirs.offline_dirs

    def dirs(self) -> dict[str, str | None]:
        """Each log dir and why it is offline (None when online)."""
        offline = self.offline_dirs
        return {str(directory): offline.get(directory) for directory in self.log_dirs}

    def log_dir_failed(self, directory: Path, reason: str) -> bool:
        """A partition's I/O error in `directory` (Kafka's LogDirFailureChannel): the dir goes offline; False if
        it already was, or is not one of this broker's dirs."""
        if directory not in self._dirs.log_dirs:
            return False
        with self._lock:
            return self._dirs.take_offline(directory, reason)

    def _cleaner_checkpoint_failed(self, directory: Path, error: BaseException) -> None:
        with self._lock:
            self._dirs.take_offline(directory, error)

    def _handle_log_dir_failure(self, directory: Path) -> None:
        """`LogDirs`' `on_offline`: every partition of the dir stops serving, its files closed without a flush
        (Kafka's handleLogDirFailure), waiting at most `OFFLINE_TIMEOUT_SECONDS` for them."""
        reason = self._dirs.offline_dirs.get(directory, "I/O error")
        with self._lock:
            handles = [handle for tp, handle in self._handles.items() if self._dir_of[tp] == directory]
            if self._cleaner is not None:
                self._cleaner.handle_log_dir_failure(directory)
            moving = [tp for tp, target in self._moves.targets().items() if directory in (target, self._dir_of[tp])]
        for tp in moving:
            self._abandon_move(tp)
        closing = [handle.go_offline(reason) for handle in handles]
        deadline = time.monotonic() + OFFLINE_TIMEOUT_SECONDS
        for pending in closing:
            try:
                pending.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                logger.warning("a partition of offline dir %s did not close its files: %s", directory, exc)


def _close(handle: PartitionHandle) -> Callable[[], object]:
    """Asks a partition to close and answers the wait for it, so that several close at once; a call that fails
    at once fails in the wait."""
    try:
        pending = handle.close()
    except Exception as exc:
        failure = exc

        def fail() -> object:
            raise failure

        return fail
    return pending.result


def _local_log(handle: PartitionHandle) -> Log:
    """The `Log` of a partition living in this process; `TypeError` for one living elsewhere."""
    if not isinstance(handle, LocalPartition):
        raise TypeError(f"{handle!r} is not a partition of this process")
    return handle.log
