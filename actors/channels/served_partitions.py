"""What a channel of this process serves each partition with: the append channel its partition logs, the replica
channel their follower-fetch answers; and the one channel of each kind a process runs.

A partition's entry is replaced when a new log of it opens (its topic created again) and removed only by the one it
names, so the old log closing after the new one opened leaves the new one served. Entries change under a lock; a
channel's thread looks one up without it (a dict read is atomic in CPython).

A process runs at most one channel of each kind (`ProcessChannel`), started by the first partition it is asked to
serve: every partition log of the process is served by it, on one socket.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from storage.topic_partition import TopicPartition

T = TypeVar("T")
# Where a channel listens, as `serve` answers it: the append channel's socket path, the replica channel's address.
A = TypeVar("A")


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


class PartitionChannel(Generic[T, A]):
    """A channel that serves partitions, each with its `T` (`_served`), and listens at `address`."""

    address: A

    def __init__(self) -> None:
        self._served: ServedPartitions[T] = ServedPartitions()

    def serve(self, topic: str, partition: int, served: T) -> A:
        """Serves (topic, partition) with `served` from now on; returns the channel's address."""
        self._served.serve(topic, partition, served)
        return self.address

    def stop_serving(self, topic: str, partition: int, served: T) -> None:
        """Stops serving (topic, partition) unless another log of it (a topic created again) serves it by now."""
        self._served.stop_serving(topic, partition, served)


class ProcessChannel(Generic[T, A]):
    """This process's one channel of a kind (see the module docstring), started under a lock by the first `serve`."""

    def __init__(self) -> None:
        self._channel: PartitionChannel[T, A] | None = None
        self._lock = threading.Lock()

    def serve(self, start: Callable[[], PartitionChannel[T, A]], topic: str, partition: int, served: T) -> A:
        """Serves (topic, partition) with `served` on the channel, which `start` starts if none runs yet; returns
        the channel's address."""
        with self._lock:
            if self._channel is None:
                self._channel = start()
            channel = self._channel
        return channel.serve(topic, partition, served)

    def stop_serving(self, topic: str, partition: int, served: T) -> None:
        """Stops serving (topic, partition) with `served` (its log closed); nothing if no channel runs."""
        with self._lock:
            channel = self._channel
        if channel is not None:
            channel.stop_serving(topic, partition, served)


__all__ = ["PartitionChannel", "ProcessChannel", "ServedPartitions"]
