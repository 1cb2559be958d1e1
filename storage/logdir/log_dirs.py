"""The dir-level state of one broker's log dirs: locks, identity, markers, checkpoints, placement,
delayed folder deletion and offline dirs. The partitions themselves are the log manager's
(`storage.logdir.log_manager`), and the cleaner checkpoint is the cleaner manager's
(`storage.compaction.cleaner_manager`).

| state                                  | persisted in (per log dir)                                 |
|----------------------------------------|------------------------------------------------------------|
| which partition lives in which dir     | the `<topic>-<partition>` folders themselves               |
| broker/cluster identity of each dir    | `meta.properties` (v1: cluster.id, node.id, directory.id)  |
| exclusive ownership of each dir        | `.lock` (fcntl lock held from `startup` to `release_all`)  |
| recovery point of each log             | `recovery-point-offset-checkpoint`                         |
| log start offset above the first base  | `log-start-offset-checkpoint`                              |
| high watermark of each log             | `replication-offset-checkpoint`                            |
| where compaction resumes               | `cleaner-offset-checkpoint`                                |
| clean shutdown                         | `.kafka_cleanshutdown`, written last                       |

Checkpoints are Kafka's text format (`storage.files.checkpoint_file`: version line `0`, entry count, then one
`<topic> <partition> <offset>` line each), rewritten whole through `<name>.tmp` + fsync + rename, so a
crash leaves the old file or the new one.

Startup (once per `release_all`): the cluster id is the configured one, else the one in the first
readable meta.properties, else a new one. Then per dir: take the lock, check or write meta.properties
(a dir of another cluster or node goes offline, untouched), note and DELETE the clean-shutdown marker
(so a crash while running counts as unclean), read the offset checkpoints (an unreadable one is treated as
empty: full recovery, as Kafka does), and list the partition folders; a partition found in two dirs
is an error. Folders renamed `...-delete` or `...-stray` are removed after `file.delete.delay.ms`; `...-future`
folders (a partition's copy being filled when the broker stopped) are listed apart for the owner; folders of the
internal `__cluster_metadata` topic belong to the controller and are not listed. A startup that fails
(a dir locked by another owner, a corrupt meta.properties, a partition in two dirs, every dir offline)
releases every lock before raising.

Placement follows Kafka: a new partition goes to the live dir holding the fewest partitions (counts,
not bytes), ties broken by the configured order. A dir whose I/O fails goes offline (Kafka's
`handleLogDirFailure`): its lock is released, it is skipped from then on, and the owner's `on_offline`
callback is called once with it so the owner closes that dir's logs. The clean-shutdown marker is
written only to dirs that loaded cleanly and are still online.

A partition process restarted on its own (no startup of the owner runs) reads its entries with
`checkpointed_offsets`, read-only and lock-free: the files are only ever replaced whole.

`take_offline`, `write_checkpoint`, `write_clean_shutdown_markers`, `delete_due_folders` and
`release_all` may run any number of times. Lock order: the owner's lock, then this object's. `on_offline`
may run under this object's lock, so an owner whose callback takes the owner's lock must hold that lock
whenever it calls in.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from storage import file_names
from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import KafkaStorageError, StorageError
from storage.files import clean_shutdown
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.files.log_dir_lock import LogDirLock
from storage.files.meta_properties import (
    MetaProperties,
    new_directory_id,
    read_meta_properties,
    with_directory_id,
    write_meta_properties,
)
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
# The checkpoints a log opens from, in `checkpointed_offsets`' order.
OPENING_CHECKPOINTS = (
    file_names.RECOVERY_POINT_CHECKPOINT,
    file_names.LOG_START_OFFSET_CHECKPOINT,
    file_names.REPLICATION_OFFSET_CHECKPOINT,
)


def checkpointed_offsets(folder: Path) -> tuple[int, int, int]:
    """(recovery point, log start offset, high watermark) of the partition in `folder` from its log dir's
    checkpoints; 0 for a missing entry, file or folder name, and for an unreadable file (as at startup: full
    recovery, and a high watermark at the log start, as Kafka's)."""
    tp = file_names.parse_partition_dir_name(folder.name)
    if tp is None:
        return 0, 0, 0
    offsets = []
    for name in OPENING_CHECKPOINTS:
        try:
            found = OffsetCheckpointFile(folder.parent / name, read_only=True).read()
        except (StorageError, OSError) as exc:
            logger.warning("%s: ignoring unreadable %s (%s)", folder.parent, name, exc)
            found = {}
        offsets.append(found.get(tp, 0))
    return offsets[0], offsets[1], offsets[2]


@dataclass(frozen=True, slots=True)
class LoadedDir:
    """What startup found in one online log dir: the marker it deleted, the recovery points, log start offsets and
    high watermarks it checkpointed, its partition folders, and the `-future` folders of partitions that were being
    moved into it (`storage.partition.future_log`)."""

    path: Path
    had_clean_shutdown: bool
    recovery_points: dict[TopicPartition, int]
    log_start_offsets: dict[TopicPartition, int]
    high_watermarks: dict[TopicPartition, int]
    partitions: dict[TopicPartition, Path]
    futures: dict[TopicPartition, Path] = field(default_factory=dict)


class LogDirs:
    """One broker's log dirs at the dir level; see the module docstring."""

    def __init__(
        self,
        log_dirs: Sequence[str | Path],
        *,
        clock: Clock = SYSTEM_CLOCK,
        cluster_id: str | None = None,
        node_id: int = 0,
        file_delete_delay_ms: int = 60_000,
        on_offline: Callable[[Path], None] | None = None,
    ) -> None:
        if not log_dirs:
            raise KafkaStorageError("no log dirs configured (log.dirs is empty)")
        resolved = [Path(directory).resolve() for directory in log_dirs]
        if len(set(resolved)) != len(resolved):
            raise KafkaStorageError(f"duplicate log dirs in {[str(d) for d in resolved]}")
        self.log_dirs = resolved
        self.clock = clock
        self._cluster_id_configured = cluster_id is not None
        self.cluster_id = cluster_id or new_directory_id()
        self.node_id = node_id
        self._directory_ids: dict[Path, str] = {}
        self.file_delete_delay_ms = file_delete_delay_ms
        self._on_offline = on_offline
        self._lock = threading.RLock()
        self._started = False
        self._locks: dict[Path, LogDirLock] = {}
        self._offline: dict[Path, str] = {}
        self._loaded_cleanly: set[Path] = set()
        self._pending_folder_deletes: list[tuple[int, Path]] = []

    # --- startup ---------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Between a successful `startup` and `release_all`."""
        return self._started

    def startup(self) -> list[LoadedDir]:
        """Locks and reads every dir; returns what the online ones hold (see the module docstring)."""
        with self._lock:
            if self._started:
                raise KafkaStorageError("log dirs are already started (release_all first)")
            try:
                self._adopt_cluster_id()
                loaded = []
                seen: dict[TopicPartition, Path] = {}
                for directory in self.log_dirs:
                    try:
                        found = self._load_dir(directory)
                    except (KafkaStorageError, OSError) as exc:
                        self.take_offline(directory, exc)
                        continue
                    for tp, folder in found.partitions.items():
                        if tp in seen:
                            raise KafkaStorageError(
                                f"partition {tp[0]}-{tp[1]} exists in both {seen[tp]} and {directory}", path=folder
                            )
                        seen[tp] = directory
                    loaded.append(found)
                self.raise_if_all_offline()
            except BaseException:
                self.release_all()
                raise
            self._started = True
            return loaded

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

    def _load_dir(self, directory: Path) -> LoadedDir:
        directory.mkdir(parents=True, exist_ok=True)
        self._locks[directory] = LogDirLock(directory)
        self._check_meta_properties(directory)
        had_clean_shutdown = clean_shutdown.delete_clean_shutdown_marker(directory)
        partitions: dict[TopicPartition, Path] = {}
        futures: dict[TopicPartition, Path] = {}
        for entry in sorted(directory.iterdir()):
            if not entry.is_dir():
                continue
            future = file_names.parse_future_dir_name(entry.name)
            if future is not None:
                futures[future] = entry
                continue
            if file_names.is_delete_dir_name(entry.name) or file_names.parse_stray_dir_name(entry.name) is not None:
                self._pending_folder_deletes.append((self.clock.milliseconds() + self.file_delete_delay_ms, entry))
                continue
            parsed = file_names.parse_partition_dir_name(entry.name)
            if parsed is not None and parsed[0] != METADATA_TOPIC:
                partitions[parsed] = entry
        self._loaded_cleanly.add(directory)
        return LoadedDir(
            directory,
            had_clean_shutdown,
            self._read_checkpoint(directory, file_names.RECOVERY_POINT_CHECKPOINT),
            self._read_checkpoint(directory, file_names.LOG_START_OFFSET_CHECKPOINT),
            self._read_checkpoint(directory, file_names.REPLICATION_OFFSET_CHECKPOINT),
            partitions,
            futures,
        )

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
                meta = with_directory_id(meta)
                write_meta_properties(path, meta, clock=self.clock)
            self._directory_ids[directory] = meta.directory_id or ""
            return
        meta = with_directory_id(MetaProperties(version=1, cluster_id=self.cluster_id, node_id=self.node_id))
        write_meta_properties(path, meta, clock=self.clock)
        self._directory_ids[directory] = meta.directory_id or ""

    def directory_id(self, directory: Path) -> str:
        """The dir's `directory.id` from its meta.properties ("" for a version 0 file, which has none): what names a
        disk wherever it is mounted, so the controller can tell which replica a returning disk holds."""
        return self._directory_ids.get(directory, "")

    def read_checkpoint(self, directory: Path, name: str) -> dict[TopicPartition, int]:
        """Checkpoint `name` of `directory` as written last ({} if unreadable, with a warning)."""
        return self._read_checkpoint(directory, name)

    def _read_checkpoint(self, directory: Path, name: str) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(directory / name).read()
        except StorageError as exc:
            logger.warning("%s: ignoring unreadable %s (%s); logs there recover fully", directory, name, exc)
            return {}

    # --- placement and health --------------------------------------------------------------------

    def is_online(self, directory: Path) -> bool:
        """Locked by this broker and not offline: only such a dir is written to."""
        return directory in self._locks and directory not in self._offline

    @property
    def online_dirs(self) -> list[Path]:
        return [directory for directory in self.log_dirs if self.is_online(directory)]

    @property
    def offline_dirs(self) -> dict[Path, str]:
        """Offline dirs and why they went offline."""
        return dict(self._offline)

    def raise_if_all_offline(self) -> None:
        """Raises `KafkaStorageError` listing every dir's reason when no dir is left online."""
        if len(self._offline) == len(self.log_dirs):
            reasons = "; ".join(f"{d}: {why}" for d, why in self._offline.items())
            raise KafkaStorageError(f"every log dir is offline ({reasons})")

    def placement_order(self, counts: Mapping[Path, int]) -> list[Path]:
        """Online dirs in the order a new partition tries them: fewest partitions first, then config order."""
        return sorted(self.online_dirs, key=lambda d: (counts.get(d, 0), self.log_dirs.index(d)))

    def take_offline(self, directory: Path, error: BaseException | str) -> bool:
        """Marks `directory` offline, releases its lock, then calls `on_offline`; False if it already was offline."""
        with self._lock:
            if directory in self._offline:
                return False
            logger.error("log dir %s goes offline: %s", directory, error)
            self._offline[directory] = str(error)
            self._loaded_cleanly.discard(directory)
            lock = self._locks.pop(directory, None)
            if lock is not None:
                try:
                    lock.release()
                except (StorageError, OSError) as exc:
                    logger.warning("releasing the lock of offline dir %s failed: %s", directory, exc)
        if self._on_offline is not None:
            self._on_offline(directory)
        return True

    # --- checkpoints and markers -----------------------------------------------------------------

    def write_checkpoint(self, directory: Path, name: str, offsets: Mapping[TopicPartition, int]) -> bool:
        """Atomically rewrites checkpoint `name` in `directory`; False (and the dir offline) on an I/O error."""
        if not self.is_online(directory):
            return False
        try:
            OffsetCheckpointFile(directory / name).write(offsets)
        except (KafkaStorageError, OSError) as exc:
            self.take_offline(directory, exc)
            return False
        return True

    def write_clean_shutdown_markers(self, dirs: Iterable[Path]) -> None:
        """The marker goes only to online dirs whose logs all loaded at startup (Kafka's rule)."""
        for directory in dirs:
            if directory in self._loaded_cleanly and self.is_online(directory):
                try:
                    clean_shutdown.write_clean_shutdown_marker(directory)
                except (StorageError, OSError) as exc:
                    self.take_offline(directory, exc)

    def mark_load_failed(self, directory: Path) -> None:
        """A log of `directory` did not load: no clean-shutdown marker for it at the next shutdown."""
        self._loaded_cleanly.discard(directory)

    def release_all(self) -> None:
        """Releases every lock and forgets the offline state and pending deletions; `startup` may run again."""
        with self._lock:
            for lock in self._locks.values():
                try:
                    lock.release()
                except (StorageError, OSError) as exc:
                    logger.warning("releasing %s failed: %s", lock.path, exc)
            self._locks.clear()
            self._offline.clear()
            self._loaded_cleanly.clear()
            self._pending_folder_deletes.clear()
            self._started = False

    # --- partition folder deletion ---------------------------------------------------------------

    def schedule_folder_delete(self, folder: Path, topic: str, partition: int, *, stray: bool = False) -> Path:
        """Kafka-style async delete: renames `folder` to `<topic>-<p>.<uuid>-delete` (`-stray` for the folder of
        a partition the cluster no longer has) now; removed after `file.delete.delay.ms`.

        A failed rename takes the folder's dir offline and raises `KafkaStorageError`.
        """
        name_of = file_names.stray_dir_name if stray else file_names.delete_dir_name
        target = folder.parent / name_of(topic, partition, uuid.uuid4().hex)
        try:
            folder.rename(target)
        except OSError as exc:
            self.take_offline(folder.parent, exc)
            raise KafkaStorageError(f"cannot rename partition folder for deletion: {exc}", path=folder) from exc
        self.delete_folder_later(target)
        return target

    def delete_folder_later(self, folder: Path) -> None:
        """`folder`, renamed `-delete` already (a moved partition's old folder), is removed after
        `file.delete.delay.ms`."""
        with self._lock:
            self._pending_folder_deletes.append((self.clock.milliseconds() + self.file_delete_delay_ms, folder))

    def delete_due_folders(self) -> int:
        """Removes `-delete` folders whose delay has passed; returns how many are still pending."""
        now_ms = self.clock.milliseconds()
        with self._lock:
            remaining = []
            for due, folder in self._pending_folder_deletes:
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
                    self.take_offline(folder.parent, exc)
            self._pending_folder_deletes = remaining
            return len(remaining)
