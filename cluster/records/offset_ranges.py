"""Offset ranges of partitions, how they are split and packed into read tasks, and the partition handles that read
them: what the read-planning core (`cluster.records.read_plan`) and its front ends, the Spark bridge
(`cluster.spark.planning`) and Ray Data's source (`cluster.data.read_planning`), plan with.

A range is `[start, end)` of one partition; its `size` (offsets) is an upper bound of its records, as compaction
leaves gaps. Splitting cuts a range into pieces of about equal offset counts, covering every offset once; packing
puts ranges into a given number of tasks, heaviest first onto the least loaded task, so that the tasks of one wave
finish together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actors.clients.broker import Broker
from actors.server.partition_lookup import partition_actor
from storage.errors import InvalidRequestError
from storage.topic_partition import TopicPartition

_handles: dict[TopicPartition, Any] = {}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records `[start, end)` of one partition; `start_is_earliest`: the start was `earliest` (late-bound)."""

    topic: str
    partition: int
    start: int
    end: int
    start_is_earliest: bool = False

    @property
    def size(self) -> int:
        """Offsets in the range: an upper bound of its records (compaction leaves gaps)."""
        return self.end - self.start


def partitions_of(broker: Broker, topics: Sequence[str]) -> list[TopicPartition]:
    """Every partition of `topics`, sorted; `UnknownTopicOrPartitionError` for a topic the cluster does not have."""
    names = list(dict.fromkeys(topics))
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InvalidRequestError(f"topics must name at least one topic, got {list(topics)!r}")
    return sorted((name, partition) for name in names for partition in broker.topic(name).partitions)


def split_range(offset_range: OffsetRange, count: int) -> list[OffsetRange]:
    """`offset_range` cut into `count` pieces (at most one per offset) of about equal offset counts; only the first
    piece keeps a late-bound start."""
    count = max(1, min(count, offset_range.size))
    pieces = []
    start = offset_range.start
    for index in range(count):
        end = offset_range.start + offset_range.size * (index + 1) // count
        pieces.append(
            OffsetRange(
                offset_range.topic, offset_range.partition, start, end, offset_range.start_is_earliest and index == 0
            )
        )
        start = end
    return pieces


def group_ranges(
    ranges: Sequence[OffsetRange], task_count: int, weight: Callable[[OffsetRange], float] | None = None
) -> tuple[tuple[int, ...], ...]:
    """Packs ranges (by index) into `task_count` tasks, heaviest range first onto the least loaded task (`weight`:
    a range's offset count unless given); each task's ranges in (topic, partition, start) order."""
    if task_count <= 0:
        return ()
    weigh = weight or (lambda offset_range: offset_range.size)
    loads = [0.0] * task_count
    members: list[list[int]] = [[] for _ in range(task_count)]
    for index in sorted(range(len(ranges)), key=lambda i: -weigh(ranges[i])):
        task = loads.index(min(loads))
        loads[task] += weigh(ranges[index])
        members[task].append(index)
    order = {index: (r.topic, r.partition, r.start) for index, r in enumerate(ranges)}
    return tuple(tuple(sorted(task, key=order.__getitem__)) for task in members if task)


def partition_handle(tp: TopicPartition, *, refresh: bool = False) -> Any:
    """The handle of the partition's leader replica, looked up once per process (a driver plans with it; Spark's
    Python workers and Ray's, which are reused across tasks, read with it); `refresh` looks it up again, after
    the leader moved or its node died (`BrokerNotAvailableError` while the partition has no leader)."""
    handle = None if refresh else _handles.get(tp)
    if handle is None:
        _handles.pop(tp, None)
        handle = partition_actor(*tp)
        _handles[tp] = handle
    return handle
