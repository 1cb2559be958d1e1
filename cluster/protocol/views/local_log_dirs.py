"""The answering node's log dirs as DescribeLogDirs reports them (Kafka's `ReplicaManager.describeLogDirs`): each
configured dir with its error (offline: KAFKA_STORAGE_ERROR), its file system's total and usable bytes, and the
replicas it holds, each with its size (its segments' bytes) and offset lag (how far its log end offset is below the
high watermark it knows, never negative; -1 when its replica cannot answer, as Kafka's INVALID_OFFSET_LAG). A replica
being moved into another dir of the node (AlterReplicaLogDirs) is also listed in that dir as a future replica, with
the bytes copied so far and its lag behind the current replica's log end offset (Kafka's `getLogEndOffsetLag` of a
future log).

Built from what a node's log manager reports (`storage.logdir.log_manager.LogManager`: its dirs with why each is
offline, and each partition's placement and state); both hosts' partition transports answer with it. The file
system is asked here, on the node itself: the listener answering runs where the dirs are.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage.logdir.log_manager import PartitionPlacement
from storage.logdir.partition_handles import PartitionState

# Kafka's DescribeLogDirsResponse.INVALID_OFFSET_LAG, and the schema's default for sizes it does not know.
UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class LocalReplica:
    """One replica of a log dir: its partition, size in bytes and offset lag (`UNKNOWN` when it cannot answer), and
    whether it is the future replica of a move into this dir."""

    topic: str
    partition: int
    size_bytes: int
    offset_lag: int
    is_future: bool = False


@dataclass(frozen=True, slots=True)
class LocalLogDir:
    """One configured log dir: why it is offline (None when online), its file system's bytes, its replicas."""

    path: str
    offline: str | None
    total_bytes: int
    usable_bytes: int
    replicas: tuple[LocalReplica, ...]


def local_log_dirs(
    dirs: Mapping[str, str | None], described: Iterable[tuple[PartitionPlacement, PartitionState | None]]
) -> list[LocalLogDir]:
    """The dirs (path -> why offline) with the replicas `described` places in them (see the module docstring)."""
    replicas: dict[str, list[LocalReplica]] = {path: [] for path in dirs}
    for placement, state in described:
        if placement.directory not in replicas:
            continue
        if state is None:
            replica = LocalReplica(placement.topic, placement.partition, 0, UNKNOWN)
        else:
            lag = max(state.high_watermark - state.log_end_offset, 0)
            replica = LocalReplica(placement.topic, placement.partition, state.size_bytes, lag)
            if state.future_directory in replicas:
                future_lag = max(state.log_end_offset - state.future_log_end_offset, 0)
                replicas[state.future_directory].append(
                    LocalReplica(placement.topic, placement.partition, state.future_size_bytes, future_lag, True)
                )
        replicas[placement.directory].append(replica)
    found = []
    for path, offline in dirs.items():
        total, usable = (UNKNOWN, UNKNOWN) if offline is not None else _space(path)
        found.append(LocalLogDir(path, offline, total, usable, () if offline is not None else tuple(replicas[path])))
    return found


def _space(path: str) -> tuple[int, int]:
    """The total and usable bytes of the file system holding `path` (`UNKNOWN` if it cannot be asked)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return UNKNOWN, UNKNOWN
    return usage.total, usage.free
