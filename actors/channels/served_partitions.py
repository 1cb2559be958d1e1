"""What a channel of this process serves each partition with: the append channel its partition logs, the replica
channel their follower-fetch answers.

A partition's entry is replaced when a new log of it opens (its topic created again) and removed only by the one it
names, so the old log closing after the new one opened leaves the new one served. Entries change under a lock; a
channel's thread looks one up without it (a dict read is atomic in CPython).
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from storage.topic_partition import TopicPartition

T = TypeVar("T")


class ServedPartitions(Generic[T]):
    """(topic, partition) -> what serves it; see the module docstring."""

    def __init__(self) -> None:
        self._served: dict[TopicPartition, T] = {}
        self._lock = threading.Lock()

    def serve(self, topic: str, partition: int, served: T) -> None:
        """`served` serves (topic, partition) from now on."""
        with self._lock:
            self._served[(topic, partition)] = served

    def stop_serving(self, topic: str, partition: int, served: T) -> None:
        """(topic, partition) is served no more, unless by another than `served` by now."""
        with self._lock:
            if self._served.get((topic, partition)) == served:
                del self._served[(topic, partition)]

    def get(self, topic: str, partition: int) -> T | None:
        """What serves (topic, partition); None if nothing does."""
        return self._served.get((topic, partition))


__all__ = ["ServedPartitions"]
