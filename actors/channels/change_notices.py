"""Change notices: a process holding partition logs tells same-node readers, without a call, that a partition changed.

A Kafka listener answers a consumer's fetches of a same-node partition from the partition's high-watermark file
(`storage.partition.local_log_view`), but a fetch at the end of the log waits (Kafka's `fetch.max.wait.ms`) for the
next append, and re-reading the file in a loop would either cost a core or add its period to every record's
latency. So the listener binds a Unix datagram socket in Linux's abstract namespace (`actors.channels.change_watcher`)
and names it once per partition (`PartitionLogActor.watch_changes`, a Ray call); from then on, every change the
partition's change counter counts (an append, a high watermark that moved, DeleteRecords, retention, a role change,
close: `actors.core.replication.log_changes`) sends one datagram naming the partition folder (`<topic>-<partition>`,
`storage.file_names`) to each of its watchers, after the high-watermark file says what changed.

A notice says only "look again": it carries no state, so a forged, repeated or late one costs the reader one look
at the file, and one lost (a watcher's socket buffer full, which it drains in one go) is made up by the reader's
next look. Sends never block: a full buffer drops the notice; a watcher gone (the socket closed) is forgotten. A
partition's watchers are forgotten when its log closes (a topic created again is watched anew), and with the
process (a restarted partition process has none: readers notice the silence and name themselves again).
"""

from __future__ import annotations

import logging
import socket
import threading

from storage import file_names
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# Where every watcher's address starts (an abstract Unix socket name): a partition never sends to another socket.
CHANGE_WATCHER_PREFIX = "\0raybroker-changes-"
# Watchers per partition: a listener process each (`num.network.threads` of them per node) and a few others.
MAX_WATCHERS_PER_PARTITION = 64


class ChangeNotices:
    """One process's notices to its partitions' watchers; see the module docstring. Thread-safe."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self._watchers: dict[TopicPartition, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def watch(self, topic: str, partition: int, address: str) -> None:
        """Sends (topic, partition)'s notices to the datagram socket at `address` too, from now on."""
        with self._lock:
            watchers = self._watchers.get((topic, partition), ())
            if address not in watchers:
                self._watchers[(topic, partition)] = (*watchers, address)[-MAX_WATCHERS_PER_PARTITION:]

    def watchers(self, topic: str, partition: int) -> tuple[str, ...]:
        """The addresses (topic, partition)'s notices go to."""
        return self._watchers.get((topic, partition), ())

    def forget(self, topic: str, partition: int) -> None:
        """Drops (topic, partition)'s watchers (its log closed)."""
        with self._lock:
            self._watchers.pop((topic, partition), None)

    def notify(self, topic: str, partition: int) -> None:
        """Sends one notice to each of (topic, partition)'s watchers, never waiting."""
        watchers = self._watchers.get((topic, partition))
        if not watchers:
            return
        notice = file_names.partition_dir_name(topic, partition).encode()
        for address in watchers:
            try:
                self._socket.sendto(notice, address)
            except BlockingIOError:
                continue  # its buffer is full of notices it has yet to read
            except OSError as exc:
                logger.debug("change notices: forgetting watcher %r of %s-%d: %s", address, topic, partition, exc)
                with self._lock:
                    kept = tuple(a for a in self._watchers.get((topic, partition), ()) if a != address)
                    if kept:
                        self._watchers[(topic, partition)] = kept
                    else:
                        self._watchers.pop((topic, partition), None)


_NOTICES: ChangeNotices | None = None
_NOTICES_LOCK = threading.Lock()


def notices() -> ChangeNotices:
    """This process's `ChangeNotices`, made on first use."""
    global _NOTICES
    with _NOTICES_LOCK:
        if _NOTICES is None:
            _NOTICES = ChangeNotices()
        return _NOTICES


__all__ = ["CHANGE_WATCHER_PREFIX", "MAX_WATCHERS_PER_PARTITION", "ChangeNotices", "notices"]
