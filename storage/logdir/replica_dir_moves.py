"""AlterReplicaLogDirs on one broker: the requests to move a partition's replica into another of its log dirs,
checked as Kafka's `ReplicaManager.alterReplicaLogDirs` checks them, and a move under way abandoned. The copy and the
swap run on the `alter-log-dirs` thread (`storage.logdir.alter_log_dirs`), which calls back `LogManager._replica_moved`
once a copy caught up. A mixin of `storage.logdir.log_manager.LogManager`, whose state and lock it works on
(declared below for the type checker only)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from storage import file_names
from storage.errors import InvalidTopicError, KafkaStorageError, RaybrokerError, ReplicaNotAvailableError
from storage.logdir.alter_log_dirs import AlterLogDirs, named_log_dir
from storage.logdir.log_dirs import LogDirs
from storage.logdir.partition_dirs import PartitionDirs
from storage.logdir.partition_handles import PartitionHandle
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)


class ReplicaDirMoves:
    """Moves of this broker's replicas between its log dirs, for `LogManager` (see the module docstring)."""

    if TYPE_CHECKING:
        _dirs: LogDirs
        _lock: threading.RLock
        _handles: dict[TopicPartition, PartitionHandle]
        _dir_of: PartitionDirs
        _moves: AlterLogDirs

        @property
        def log_dirs(self) -> list[Path]: ...

        def partition(self, topic: str, partition: int) -> PartitionHandle | None: ...

    def alter_replica_log_dirs(self, dirs: Mapping[TopicPartition, str]) -> dict[TopicPartition, RaybrokerError | None]:
        """Kafka's `ReplicaManager.alterReplicaLogDirs`: moves each partition's replica into the log dir named (its
        absolute path), answering per partition None or why not, as Kafka checks it: `InvalidTopicError` for a name
        too long for its `-future` folder, `LogDirNotFoundError` for a dir not in `log.dirs`, `KafkaStorageError` for
        an offline dir or partition (or any dir offline, when a copy would start), `ReplicaNotAvailableError` when
        the broker holds no replica (the dir is then where the partition is created later). A move under way to
        another dir is abandoned first; a replica already in the dir is left as it is. The copy and the swap run on
        the `alter-log-dirs` thread (`storage.logdir.alter_log_dirs`)."""
        return {tp: self._alter_replica_log_dir(tp, target) for tp, target in dirs.items()}

    def _alter_replica_log_dir(self, tp: TopicPartition, target: str) -> RaybrokerError | None:
        try:
            if file_names.future_dir_name_too_long(*tp):
                raise InvalidTopicError(f"the topic name is too long: {tp[0][:20]}...")
            directory = named_log_dir(target, self.log_dirs)
            if not self._dirs.is_online(directory):
                raise KafkaStorageError(f"log dir {target} is offline", path=directory)
            with self._lock:
                handle = self.partition(*tp)
                current = self._dir_of.get(tp)
                moving_to = self._moves.target(tp)
            if moving_to is not None and moving_to != directory:
                self._abandon_move(tp)
            if handle is None:
                self._moves.prefer(tp, directory)
                raise ReplicaNotAvailableError(f"this broker holds no replica of {tp[0]}-{tp[1]}")
            if current == directory or moving_to == directory:
                return None
            if self._dirs.offline_dirs:
                offline = ", ".join(str(d) for d in self._dirs.offline_dirs)
                raise KafkaStorageError(f"cannot create a future log while log dirs {offline} are offline")
            handle.start_move(str(directory)).result()
            self._moves.start(tp, directory)
        except RaybrokerError as exc:
            return exc
        return None

    def _abandon_move(self, tp: TopicPartition) -> None:
        """Drops `tp`'s move under way, if any, and its copy."""
        if self._moves.cancel(tp) is None:
            return
        handle = self._handles.get(tp)
        if handle is not None:
            try:
                handle.abort_move().result()
            except Exception as exc:
                logger.warning("dropping the copy of %s-%d failed: %s", tp[0], tp[1], exc)

    def wait_for_moves(self, timeout_s: float) -> bool:
        """Waits until no move is under way; False if one still is after `timeout_s`."""
        return self._moves.wait_until_done(timeout_s)

    def _handle_if_held(self, tp: TopicPartition) -> PartitionHandle | None:
        with self._lock:
            return self._handles.get(tp)
