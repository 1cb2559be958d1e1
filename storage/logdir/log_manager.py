"""The logs of one broker across its log dirs (Kafka's `LogManager`), as plain storage code.

Everything dir-level (locks, meta.properties, the clean-shutdown marker, reading and writing checkpoint
files, placement order, delayed removal of `-delete` folders, offline dirs) is `storage.logdir.log_dirs.LogDirs`'s;
its docstring describes those files. This module owns the in-process `Log` objects and what goes into
each checkpoint file, one line per online log of that dir:

| checkpoint file                      | value written per log                                        |
|--------------------------------------|--------------------------------------------------------------|
| `recovery-point-offset-checkpoint`   | `recovery_point`: the offset below which the log is flushed  |
| `log-start-offset-checkpoint`        | `log_start_offset`, only when above the first segment's base |
| `replication-offset-checkpoint`      | `high_watermark` (one replica: the log end offset)           |

Startup: `LogDirs.startup` locks and reads every dir, then every partition folder found is opened with
a bounded pool of `num.recovery.threads.per.data.dir` threads per dir, from the dir's recovery point and
log start offset, trusting the indexes only after a clean shutdown. A log that fails to open takes its
dir offline; a startup that fails (a dir locked by another owner, a corrupt meta.properties, every dir
offline) closes what it opened and releases every lock before raising.

A new partition goes to the first dir of `LogDirs.placement_order` (fewest partitions); if creating it
there fails, that dir goes offline and the next one is tried. A dir that goes offline has its logs'
files closed (Kafka's `handleLogDirFailure`); its partitions stay mapped to it and fail with
`KafkaStorageError` instead of being recreated empty elsewhere, while the other dirs keep serving. The
periodic tasks (retention, flush, checkpoints, delayed deletes) do not raise for such an error: the dir
goes offline (logged, and listed by `offline_dirs`) and the pass goes on with the other dirs. Shutdown
closes (flushes) every online log, writes the checkpoints, then the clean-shutdown markers, and unlocks.

Every method is idempotent: creating an existing log returns it, deleting a missing one does nothing,
checkpoints and scheduled tasks can run any number of times. The periodic work is exposed as methods
that the broker's actor calls on Kafka's intervals. Lock order: the manager's lock, then the `LogDirs`
lock, then a log's lock; every call into `LogDirs` is made under the manager's lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from storage import file_names
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config.log_config import LogConfig
from storage.errors import KafkaStorageError, StorageError
from storage.logdir.log_dirs import LoadedDir, LogDirs, TopicPartition
from storage.partition.log import Log

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """What `describe_dirs` reports about one log dir."""

    path: str
    online: bool
    partitions: int
    size_bytes: int
    error: str | None = None


class LogManager:
    """The partition logs of one broker over one or more log dirs; see the module docstring."""

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
    ) -> None:
        self._dirs = LogDirs(
            log_dirs,
            clock=clock,
            cluster_id=cluster_id,
            node_id=node_id,
            file_delete_delay_ms=file_delete_delay_ms,
            on_offline=self._close_logs_of_offline_dir,
        )
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self.clock = clock
        self.recovery_threads_per_data_dir = max(1, recovery_threads_per_data_dir)
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}

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

    # --- startup ---------------------------------------------------------------------------------

    def startup(self) -> None:
        """Locks every dir, checks its identity, and loads (recovering if needed) every log in it."""
        with self._lock:
            if self._dirs.started:
                return
            try:
                for loaded in self._dirs.startup():
                    try:
                        self._open_logs(loaded)
                    except (KafkaStorageError, OSError) as exc:
                        self._dirs.take_offline(loaded.path, exc)
                self._dirs.raise_if_all_offline()
            except BaseException:
                self._abandon()
                raise

    def _open_logs(self, loaded: LoadedDir) -> None:
        def load(tp: TopicPartition, folder: Path) -> Log:
            return Log.open(
                folder,
                self.config_for(tp[0]),
                clock=self.clock,
                recovery_point=loaded.recovery_points.get(tp, 0),
                log_start_offset=loaded.log_start_offsets.get(tp, 0),
                had_clean_shutdown=loaded.had_clean_shutdown,
            )

        jobs = list(loaded.partitions.items())
        with ThreadPoolExecutor(max_workers=self.recovery_threads_per_data_dir) as pool:
            futures: list[Future[Log]] = [pool.submit(load, tp, folder) for tp, folder in jobs]
        # Every partition found is mapped to this dir, even one that failed to open: if the dir goes
        # offline its partitions must fail, not be recreated empty elsewhere. Logs that did open are
        # registered so they are closed with the dir.
        failures: list[BaseException] = []
        for (tp, _), future in zip(jobs, futures, strict=True):
            self._dir_of[tp] = loaded.path
            failure = future.exception()
            if failure is not None:
                failures.append(failure)
                continue
            self._logs[tp] = future.result()
        if failures:
            raise failures[0]
        logger.info("loaded %d logs from %s (clean shutdown: %s)", len(jobs), loaded.path, loaded.had_clean_shutdown)

    # --- lookup and placement --------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        """Sets a topic's config; its open logs use it from their next append/roll/retention pass."""
        with self._lock:
            self._topic_configs[topic] = config
            for (log_topic, _), log in self._logs.items():
                if log_topic == topic:
                    log.update_config(config)

    def get_log(self, topic: str, partition: int) -> Log | None:
        tp = (topic, partition)
        directory = self._dir_of.get(tp)
        if directory is not None:
            reason = self._dirs.offline_dirs.get(directory)
            if reason is not None:
                raise KafkaStorageError(f"partition {topic}-{partition} is offline: {reason}", path=directory)
        return self._logs.get(tp)

    def all_logs(self) -> dict[TopicPartition, Log]:
        """Online logs by (topic, partition)."""
        with self._lock:
            offline = self._dirs.offline_dirs
            return {tp: log for tp, log in self._logs.items() if self._dir_of[tp] not in offline}

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def partition_counts(self) -> dict[Path, int]:
        """Partitions per live log dir (what placement compares)."""
        offline = self._dirs.offline_dirs
        counts = {directory: 0 for directory in self.log_dirs if directory not in offline}
        for directory in self._dir_of.values():
            if directory in counts:
                counts[directory] += 1
        return counts

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The log of (topic, partition), created in the live dir with the fewest partitions if missing."""
        folder_name = file_names.partition_dir_name(topic, partition)
        with self._lock:
            if not self._dirs.started:
                raise KafkaStorageError("the log manager is not started")
            existing = self.get_log(topic, partition)
            if existing is not None:
                return existing
            if config is not None:
                self.set_topic_config(topic, config)
            errors: list[str] = []
            for directory in self._dirs.placement_order(self.partition_counts()):
                try:
                    log = Log.open(
                        directory / folder_name,
                        self.config_for(topic),
                        clock=self.clock,
                        had_clean_shutdown=True,
                    )
                except (KafkaStorageError, OSError) as exc:
                    errors.append(f"{directory}: {exc}")
                    self._dirs.take_offline(directory, exc)
                    continue
                self._logs[(topic, partition)] = log
                self._dir_of[(topic, partition)] = directory
                return log
            raise KafkaStorageError(f"cannot create log {folder_name} in any live log dir ({'; '.join(errors)})")

    def delete_log(self, topic: str, partition: int) -> bool:
        """Kafka-style async delete: the folder is renamed `...-delete` now and removed after the delay."""
        with self._lock:
            tp = (topic, partition)
            log = self.get_log(topic, partition)
            if log is None:
                return False
            directory = self._dir_of[tp]
            # Under the log's lock no append can roll a new segment into the folder while it is renamed.
            with log.lock:
                self._dirs.schedule_folder_delete(log.directory, topic, partition)
                log.close_without_marker()
            del self._logs[tp]
            del self._dir_of[tp]
            self._write_checkpoints([directory])
            return True

    # --- scheduled work --------------------------------------------------------------------------

    def run_retention(self) -> int:
        """One retention pass over every online log; returns the number of segments deleted."""
        return self._each_online_log(lambda log: log.delete_old_segments())

    def flush_dirty_logs(self) -> int:
        """fsyncs logs whose last flush is older than their `flush.ms`; returns how many were flushed."""
        now_ms = self.clock.milliseconds()

        def flush_if_due(log: Log) -> int:
            if now_ms - log.last_flush_ms < log.config.flush_ms:
                return 0
            log.flush()
            return 1

        return self._each_online_log(flush_if_due)

    def delete_due_files(self) -> int:
        """Unlinks `.deleted` segments and `-delete` folders whose delay has passed; returns what is left."""
        pending = self._each_online_log(lambda log: log.delete_due_files())
        with self._lock:
            return pending + self._dirs.delete_due_folders()

    def _each_online_log(self, action: Callable[[Log], int]) -> int:
        """Sums `action` over the online logs; an I/O error takes that log's dir offline and the pass goes on."""
        total = 0
        for directory, log in self._online_logs():
            failure: BaseException | None = None
            with log.lock:
                # Deleted or taken offline since the snapshot: skipped, not mistaken for an I/O error.
                if log.closed or not self._dirs.is_online(directory):
                    continue
                try:
                    total += action(log)
                except (KafkaStorageError, OSError) as exc:
                    failure = exc
            if failure is not None:
                with self._lock:
                    self._dirs.take_offline(directory, failure)
        return total

    def _online_logs(self) -> list[tuple[Path, Log]]:
        with self._lock:
            return [(self._dir_of[tp], log) for tp, log in self.all_logs().items()]

    def checkpoint_recovery_points(self, dirs: Sequence[Path] | None = None) -> None:
        self._write_checkpoint(file_names.RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point, dirs)

    def checkpoint_log_start_offsets(self, dirs: Sequence[Path] | None = None) -> None:
        """Only logs whose start offset is above their first segment's base are listed (Kafka's rule)."""
        self._write_checkpoint(
            file_names.LOG_START_OFFSET_CHECKPOINT,
            lambda log: log.log_start_offset if log.log_start_offset > log.log_segments()[0].base_offset else None,
            dirs,
        )

    def checkpoint_high_watermarks(self, dirs: Sequence[Path] | None = None) -> None:
        self._write_checkpoint(file_names.REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark, dirs)

    def _write_checkpoints(self, dirs: Sequence[Path]) -> None:
        self.checkpoint_recovery_points(dirs)
        self.checkpoint_log_start_offsets(dirs)
        self.checkpoint_high_watermarks(dirs)

    def _write_checkpoint(self, name: str, value: Callable[[Log], int | None], dirs: Sequence[Path] | None) -> None:
        """Rewrites `name` in each online dir of `dirs` (default: all); a dir that fails goes offline."""
        with self._lock:
            for directory in self.log_dirs if dirs is None else dirs:
                # An offline dir's logs are closed: their values are not read, let alone written.
                if not self._dirs.is_online(directory):
                    continue
                offsets: dict[TopicPartition, int] = {}
                for tp, log in self._logs.items():
                    if self._dir_of[tp] == directory:
                        offset = value(log)
                        if offset is not None:
                            offsets[tp] = offset
                self._dirs.write_checkpoint(directory, name, offsets)

    # --- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown markers; unlock."""
        with self._lock:
            if not self._dirs.started:
                return
            for directory in self._dirs.online_dirs:
                try:
                    for tp, log in self._logs.items():
                        if self._dir_of[tp] == directory:
                            log.close()
                except (StorageError, OSError) as exc:
                    self._dirs.take_offline(directory, exc)
                    continue
                self._write_checkpoints([directory])
            self._dirs.write_clean_shutdown_markers(self.log_dirs)
            self._abandon()

    def _abandon(self) -> None:
        """Closes every log still open (no flush, no marker), releases every lock and forgets all state."""
        for log in self._logs.values():
            if not log.closed:
                log.close_without_marker()
        self._dirs.release_all()
        self._logs.clear()
        self._dir_of.clear()

    # --- dir health ------------------------------------------------------------------------------

    @property
    def offline_dirs(self) -> dict[Path, str]:
        """Offline dirs and why they went offline."""
        return self._dirs.offline_dirs

    def describe_dirs(self) -> list[LogDirInfo]:
        offline = self._dirs.offline_dirs
        infos = []
        for directory in self.log_dirs:
            tps = [tp for tp, d in self._dir_of.items() if d == directory]
            online = directory not in offline
            size = sum(self._logs[tp].size_in_bytes for tp in tps) if online else 0
            infos.append(LogDirInfo(str(directory), online, len(tps), size, offline.get(directory)))
        return infos

    def _close_logs_of_offline_dir(self, directory: Path) -> None:
        """`LogDirs`' `on_offline`: closes the dir's logs' files without flushing (Kafka's handleLogDirFailure).

        Cleanup errors are suppressed: the disk is already failing.
        """
        with self._lock:
            for tp, log_dir in self._dir_of.items():
                log = self._logs.get(tp)
                if log_dir == directory and log is not None:
                    with contextlib.suppress(StorageError, OSError):
                        log.close_without_marker()
