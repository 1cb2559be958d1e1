"""A same-node reader's side of the change notices (`actors.channels.change_notices`): waiting for a partition to
change.

`ChangeWatcher(loop)` binds a Unix datagram socket at an abstract address (`address`, which the reader names to each
partition it wants notices of: `PartitionLogActor.watch_changes`, after `follow`) and reads it on `loop` (asyncio's
`add_reader`, no thread). It counts the notices of each partition it follows: a waiter reads `count(topic,
partition)` before it looks at the partition (its high-watermark file), then awaits `changed(topic, partition, seen,
timeout_s)`, which returns True once a notice came after that count, False when the time is up. A notice between the
look and the wait is therefore seen, not slept through, as with the partition's own change counter
(`actors.core.replication.log_changes`).

Notices are hints (see `actors.channels.change_notices`): a datagram that does not name a partition folder is ignored,
and a waiter that finds the partition changed without a notice (one dropped, a partition process restarted without
its watchers) names itself again. Every waiting read drains the socket (at most `MAX_NOTICES_PER_WAKE` datagrams per
wake-up, so one flooding sender cannot hold the event loop).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections import defaultdict

from actors.channels.change_notices import CHANGE_WATCHER_PREFIX
from storage import file_names
from storage.topic_partition import TopicPartition

# Datagrams read per wake-up of the event loop before it serves others.
MAX_NOTICES_PER_WAKE = 256
# The socket's receive buffer: notices queued while the loop is busy (each costs a few hundred bytes of it).
RECEIVE_BUFFER_BYTES = 1 << 20
_NOTICE_MAX_BYTES = 512


class ChangeWatcher:
    """Counts the change notices of the partitions it was named to; see the module docstring. Use it from its
    event loop only."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.address = f"{CHANGE_WATCHER_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        self._socket.bind(self.address)
        self._socket.setblocking(False)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
        self._counts: dict[TopicPartition, int] = {}
        self._waiters: defaultdict[TopicPartition, list[asyncio.Future[None]]] = defaultdict(list)
        loop.add_reader(self._socket.fileno(), self._receive)

    def follow(self, topic: str, partition: int) -> None:
        """Counts (topic, partition)'s notices from now on (the caller names `address` to it); notices of partitions
        not followed are ignored, so forged names cannot grow the counts."""
        self._counts.setdefault((topic, partition), 0)

    def following(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._counts

    def unfollow(self, topic: str, partition: int) -> None:
        """Stops counting (topic, partition)'s notices (it is to be named again, or is gone); its waiters wake."""
        self._counts.pop((topic, partition), None)
        for waiter in self._waiters.pop((topic, partition), ()):
            if not waiter.done():
                waiter.set_result(None)

    def count(self, topic: str, partition: int) -> int:
        """The notices of (topic, partition) received so far."""
        return self._counts.get((topic, partition), 0)

    async def changed(self, topic: str, partition: int, seen: int, timeout_s: float) -> bool:
        """Waits until (topic, partition) has more notices than `seen` (True) or `timeout_s` passed (False)."""
        key = (topic, partition)
        if self._counts.get(key, 0) != seen:
            return True
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters[key].append(waiter)
        try:
            # `asyncio.timeout`: Python 3.11's `wait_for` can drop a cancellation that lands as the waiter is woken.
            async with asyncio.timeout(timeout_s):
                await waiter
        except TimeoutError:
            return self._counts.get(key, 0) != seen
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[key]
        return True

    def _receive(self) -> None:
        """Reads the queued notices (up to `MAX_NOTICES_PER_WAKE`) and wakes their partitions' waiters."""
        for _ in range(MAX_NOTICES_PER_WAKE):
            try:
                notice = self._socket.recv(_NOTICE_MAX_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                named = file_names.parse_partition_dir_name(notice.decode())
            except UnicodeDecodeError:
                continue
            if named is None or named not in self._counts:
                continue
            self._counts[named] += 1
            for waiter in self._waiters.pop(named, ()):
                if not waiter.done():
                    waiter.set_result(None)

    def close(self) -> None:
        self._loop.remove_reader(self._socket.fileno())
        self._socket.close()
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.cancel()
        self._waiters.clear()


__all__ = ["MAX_NOTICES_PER_WAKE", "ChangeWatcher"]
