"""The logs of one broker across its log dirs (Kafka's `LogManager`), as plain storage code.

State it owns, and where that state is persisted:

| state                                  | persisted in (per log dir)                         |
|----------------------------------------|----------------------------------------------------|
| which partition lives in which dir     | the `<topic>-<partition>` folders themselves       |
| broker/cluster identity of each dir    | `meta.properties` (v1: cluster.id, node.id, directory.id) |
| exclusive ownership of each dir        | `.lock` (flock held from `startup` to `shutdown`)  |
| recovery point of each log             | `recovery-point-offset-checkpoint`                 |
| log start offset above the first base  | `log-start-offset-checkpoint`                      |
| high watermark (one replica: the LEO)  | `replication-offset-checkpoint`                    |
| clean shutdown                         | `.kafka_cleanshutdown`, written last by `shutdown` |

Startup: the cluster id is the configured one, else the one in the first readable meta.properties,
else a new one. Then per dir: take the lock, check or write meta.properties (a dir of another cluster
or node goes offline, untouched), note and DELETE the clean-shutdown marker (so a crash while running
counts as unclean), read the checkpoints (an unreadable one is treated as empty: full recovery, as
Kafka does), then open every partition folder with a bounded pool of
`num.recovery.threads.per.data.dir` threads. Folders renamed `...-delete` are removed after
`file.delete.delay.ms`. A startup that fails (a dir locked by another owner, a corrupt meta.properties,
every dir offline) closes what it opened and releases every lock before raising.

A new partition goes to the live dir that holds the fewest partitions (Kafka's rule: counts, not
bytes); if creating it there fails, that dir goes offline and the next one is tried. An I/O error on a
dir takes that dir offline: its logs' files are closed and its lock released (Kafka's
`handleLogDirFailure`), its partitions fail with `KafkaStorageError`, the other dirs keep serving.
The periodic tasks (retention, flush, checkpoints, delayed deletes) do not raise for such an error:
the dir goes offline (logged, and listed by `offline_dirs`) and the pass goes on with the other dirs.

Every method is idempotent: creating an existing log returns it, deleting a missing one does nothing,
checkpoints and scheduled tasks can run any number of times. The periodic work is exposed as methods
that the broker's actor calls on Kafka's intervals. Lock order: the manager's lock, then a log's lock.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from storage import clean_shutdown, file_names
from storage.checkpoint_file import OffsetCheckpointFile
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config import LogConfig
from storage.errors import KafkaStorageError, StorageError
from storage.log import Log
from storage.log_dir_lock import LogDirLock
from storage.meta_properties import (
    MetaProperties,
    new_directory_id,
    read_meta_properties,
    with_directory_id,
    write_meta_properties,
)

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
T = TypeVar("T")


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
        if not log_dirs:
            raise KafkaStorageError("no log dirs configured (log.dirs is empty)")
        resolved = [Path(directory).resolve() for directory in log_dirs]
        if len(set(resolved)) != len(resolved):
            raise KafkaStorageError(f"duplicate log dirs in {[str(d) for d in resolved]}")
        self.log_dirs = resolved
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self.clock = clock
        self._cluster_id_configured = cluster_id is not None
        self.cluster_id = cluster_id or _new_cluster_id()
        self.node_id = node_id
        self.recovery_threads_per_data_dir = max(1, recovery_threads_per_data_dir)
        self.file_delete_delay_ms = file_delete_delay_ms
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._locks: dict[Path, LogDirLock] = {}
        self._offline: dict[Path, str] = {}
        self._loaded_cleanly: set[Path] = set()
        self._pending_dir_deletes: list[tuple[int, Path]] = []
        self._started = False

    # --- startup ---------------------------------------------------------------------------------

    def startup(self) -> None:
        """Locks every dir, checks its identity, and loads (recovering if needed) every log in it."""
        with self._lock:
            if self._started:
                return
            try:
                self._adopt_cluster_id()
                for directory in self.log_dirs:
                    try:
                        self._load_dir(directory)
                    except (KafkaStorageError, OSError) as exc:
                        self._take_offline(directory, exc)
                if len(self._offline) == len(self.log_dirs):
                    reasons = "; ".join(f"{d}: {why}" for d, why in self._offline.items())
                    raise KafkaStorageError(f"every log dir is offline ({reasons})")
            except BaseException:
                self._abandon()
                raise
            self._started = True

    def _adopt_cluster_id(self) -> None:
        """Without a configured cluster id, the first one found in a meta.properties is this broker's.

        Read before any dir is written, so a new dir never gets a random id that the existing dirs
        would then be refused against. Unreadable files are skipped here; their dir's check reports them.
        """
        if self._cluster_id_configured:
            return
        for directory in self.log_dirs:
            path = directory / file_names.META_PROPERTIES
            try:
                if not path.is_file():
                    continue
                meta = read_meta_properties(path)
            except (StorageError, OSError):
                continue
            if meta.cluster_id is not None:
                self.cluster_id = meta.cluster_id
                return

    def _load_dir(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._locks[directory] = LogDirLock(directory)
        self._check_meta_properties(directory)
        had_clean_shutdown = clean_shutdown.delete_clean_shutdown_marker(directory)
        recovery_points = self._read_checkpoint(directory, file_names.RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(directory, file_names.LOG_START_OFFSET_CHECKPOINT)
        jobs: list[tuple[TopicPartition, Path]] = []
        for entry in sorted(directory.iterdir()):
            if not entry.is_dir():
                continue
            if file_names.is_delete_dir_name(entry.name):
                self._pending_dir_deletes.append((self.clock.milliseconds() + self.file_delete_delay_ms, entry))
                continue
            parsed = file_names.parse_partition_dir_name(entry.name)
            if parsed is None:
                continue
            if parsed in self._dir_of:
                raise KafkaStorageError(
                    f"partition {parsed[0]}-{parsed[1]} exists in both {self._dir_of[parsed]} and {directory}",
                    path=entry,
                )
            jobs.append((parsed, entry))

        def load(job: tuple[TopicPartition, Path]) -> Log:
            tp, folder = job
            return Log.open(
                folder,
                self.config_for(tp[0]),
                clock=self.clock,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                had_clean_shutdown=had_clean_shutdown,
            )

        with ThreadPoolExecutor(max_workers=self.recovery_threads_per_data_dir) as pool:
            futures: list[Future[Log]] = [pool.submit(load, job) for job in jobs]
        # Every partition found is mapped to this dir, even one that failed to open: if the dir goes
        # offline its partitions must fail, not be recreated empty elsewhere. Logs that did open are
        # registered so they are closed with the dir.
        failures: list[BaseException] = []
        for (tp, _), future in zip(jobs, futures, strict=True):
            self._dir_of[tp] = directory
            failure = future.exception()
            if failure is not None:
                failures.append(failure)
                continue
            self._logs[tp] = future.result()
        if failures:
            raise failures[0]
        self._loaded_cleanly.add(directory)
        logger.info("loaded %d logs from %s (clean shutdown: %s)", len(jobs), directory, had_clean_shutdown)

    def _check_meta_properties(self, directory: Path) -> None:
        path = directory / file_names.META_PROPERTIES
        if path.exists():
            meta = read_meta_properties(path)
            if meta.cluster_id is not None and meta.cluster_id != self.cluster_id:
                raise KafkaStorageError(
                    f"log dir belongs to cluster {meta.cluster_id}, this broker is in cluster {self.cluster_id}",
                    path=path,
                )
            node_id = meta.node_id
            if node_id is not None and node_id != self.node_id:
                raise KafkaStorageError(
                    f"log dir belongs to node {node_id}, this broker is node {self.node_id}", path=path
                )
            if meta.version == 1 and meta.directory_id is None:
                write_meta_properties(path, with_directory_id(meta), clock=self.clock)
            return
        meta = with_directory_id(MetaProperties(version=1, cluster_id=self.cluster_id, node_id=self.node_id))
        write_meta_properties(path, meta, clock=self.clock)

    def _read_checkpoint(self, directory: Path, name: str) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(directory / name).read()
        except StorageError as exc:
            logger.warning("%s: ignoring unreadable %s (%s); logs there recover fully", directory, name, exc)
            return {}

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
        if directory is not None and directory in self._offline:
            raise KafkaStorageError(
                f"partition {topic}-{partition} is offline: {self._offline[directory]}", path=directory
            )
        return self._logs.get(tp)

    def all_logs(self) -> dict[TopicPartition, Log]:
        """Online logs by (topic, partition)."""
        with self._lock:
            return {tp: log for tp, log in self._logs.items() if self._dir_of[tp] not in self._offline}

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def partition_counts(self) -> dict[Path, int]:
        """Partitions per live log dir (what placement compares)."""
        counts = {directory: 0 for directory in self.log_dirs if directory not in self._offline}
        for directory in self._dir_of.values():
            if directory in counts:
                counts[directory] += 1
        return counts

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The log of (topic, partition), created in the live dir with the fewest partitions if missing."""
        folder_name = file_names.partition_dir_name(topic, partition)
        with self._lock:
            self._require_started()
            existing = self.get_log(topic, partition)
            if existing is not None:
                return existing
            if config is not None:
                self.set_topic_config(topic, config)
            counts = self.partition_counts()
            errors: list[str] = []
            for directory in sorted(counts, key=lambda d: (counts[d], self.log_dirs.index(d))):
                try:
                    log = Log.open(
                        directory / folder_name,
                        self.config_for(topic),
                        clock=self.clock,
                        had_clean_shutdown=True,
                    )
                except (KafkaStorageError, OSError) as exc:
                    errors.append(f"{directory}: {exc}")
                    self._take_offline(directory, exc)
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
            target = directory / file_names.delete_dir_name(topic, partition, uuid.uuid4().hex)
            # Under the log's lock no append can roll a new segment into the folder while it is renamed.
            with log.lock:
                self._guard(directory, lambda: log.directory.rename(target))
                log.close_without_marker()
            del self._logs[tp]
            del self._dir_of[tp]
            self._pending_dir_deletes.append((self.clock.milliseconds() + self.file_delete_delay_ms, target))
            self.checkpoint_recovery_points([directory])
            self.checkpoint_log_start_offsets([directory])
            self.checkpoint_high_watermarks([directory])
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
        now_ms = self.clock.milliseconds()
        with self._lock:
            remaining = []
            for due, folder in self._pending_dir_deletes:
                # A folder in an offline dir is dropped here; the next startup finds it again.
                if folder.parent in self._offline:
                    continue
                if due > now_ms:
                    remaining.append((due, folder))
                    continue
                try:
                    shutil.rmtree(folder)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    self._take_offline(folder.parent, exc)
            self._pending_dir_deletes = remaining
        return pending + len(remaining)

    def _each_online_log(self, action: Callable[[Log], int]) -> int:
        """Sums `action` over the online logs; an I/O error takes that log's dir offline and the pass goes on."""
        total = 0
        for directory, log in self._online_logs():
            failure: BaseException | None = None
            with log.lock:
                # Deleted or taken offline since the snapshot: skipped, not mistaken for an I/O error.
                if log.closed or directory in self._offline:
                    continue
                try:
                    total += action(log)
                except (KafkaStorageError, OSError) as exc:
                    failure = exc
            if failure is not None:
                self._take_offline(directory, failure)
        return total

    def _online_logs(self) -> list[tuple[Path, Log]]:
        with self._lock:
            return [(self._dir_of[tp], log) for tp, log in self._logs.items() if self._dir_of[tp] not in self._offline]

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

    def _write_checkpoint(self, name: str, value: Callable[[Log], int | None], dirs: Sequence[Path] | None) -> None:
        """Rewrites `name` in each online dir of `dirs` (default: all); a dir that fails goes offline."""
        with self._lock:
            targets = self.log_dirs if dirs is None else dirs
            for directory in targets:
                if directory in self._offline or directory not in self._locks:
                    continue
                offsets: dict[TopicPartition, int] = {}
                for tp, log in self._logs.items():
                    if self._dir_of[tp] == directory:
                        offset = value(log)
                        if offset is not None:
                            offsets[tp] = offset
                try:
                    OffsetCheckpointFile(directory / name).write(offsets)
                except (KafkaStorageError, OSError) as exc:
                    self._take_offline(directory, exc)

    # --- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker; unlock."""
        with self._lock:
            if not self._started:
                return
            for directory in self.log_dirs:
                if directory in self._offline:
                    continue
                try:
                    for tp, log in self._logs.items():
                        if self._dir_of[tp] == directory:
                            log.close()
                except (StorageError, OSError) as exc:
                    self._take_offline(directory, exc)
                    continue
                self.checkpoint_recovery_points([directory])
                self.checkpoint_log_start_offsets([directory])
                self.checkpoint_high_watermarks([directory])
                if directory in self._loaded_cleanly and directory not in self._offline:
                    try:
                        clean_shutdown.write_clean_shutdown_marker(directory)
                    except (StorageError, OSError) as exc:
                        self._take_offline(directory, exc)
            self._abandon()
            self._started = False

    def _abandon(self) -> None:
        """Closes every log still open (no flush, no marker), releases every lock and forgets all state."""
        for log in self._logs.values():
            if not log.closed:
                log.close_without_marker()
        for directory in list(self._locks):
            self._release(directory)
        self._logs.clear()
        self._dir_of.clear()
        self._loaded_cleanly.clear()
        self._offline.clear()
        self._pending_dir_deletes.clear()

    # --- dir health ------------------------------------------------------------------------------

    @property
    def offline_dirs(self) -> dict[Path, str]:
        """Offline dirs and why they went offline."""
        return dict(self._offline)

    def describe_dirs(self) -> list[LogDirInfo]:
        infos = []
        for directory in self.log_dirs:
            tps = [tp for tp, d in self._dir_of.items() if d == directory]
            online = directory not in self._offline
            size = sum(self._logs[tp].size_in_bytes for tp in tps) if online else 0
            infos.append(LogDirInfo(str(directory), online, len(tps), size, self._offline.get(directory)))
        return infos

    def _guard(self, directory: Path, action: Callable[[], T]) -> T:
        """Runs `action`; an I/O failure takes `directory` offline and is re-raised as KafkaStorageError."""
        if directory in self._offline:
            raise KafkaStorageError(f"log dir is offline: {self._offline[directory]}", path=directory)
        try:
            return action()
        except KafkaStorageError as exc:
            self._take_offline(directory, exc)
            raise
        except OSError as exc:
            self._take_offline(directory, exc)
            raise KafkaStorageError(f"I/O error in log dir: {exc}", path=directory) from exc

    def _take_offline(self, directory: Path, error: BaseException) -> None:
        """Marks `directory` offline, closes its logs' files and releases its lock (Kafka's handleLogDirFailure).

        Its partitions stay mapped to it, so they fail with `KafkaStorageError` instead of being
        recreated empty in another dir. Cleanup errors are suppressed: the disk is already failing.
        """
        with self._lock:
            if directory in self._offline:
                return
            logger.error("log dir %s goes offline: %s", directory, error)
            self._offline[directory] = str(error)
            for tp, log_dir in self._dir_of.items():
                log = self._logs.get(tp)
                if log_dir == directory and log is not None:
                    with contextlib.suppress(StorageError, OSError):
                        log.close_without_marker()
            with contextlib.suppress(StorageError, OSError):
                self._release(directory)

    def _release(self, directory: Path) -> None:
        lock = self._locks.pop(directory, None)
        if lock is not None:
            lock.release()

    def _require_started(self) -> None:
        if not self._started:
            raise KafkaStorageError("the log manager is not started")


def _new_cluster_id() -> str:
    """A Kafka-style cluster id: 16 random bytes, base64url without padding (22 chars)."""
    return new_directory_id()
