"""A counter of a partition's changes that readers wait on: the long-poll fetches, the leader answering a follower's
fetch, and an `acks=all` append waiting for its replication.

Every change a waiter must look at (an append, a high watermark that moved, DeleteRecords, retention, a role change,
close) calls `notify`, which counts it, runs the owner's `publish` (the partition actor rewrites its high-watermark
file and sends its change notices there, so same-node readers see each change in order) and wakes every waiter. A
share acknowledgement or release, which frees record locks a waiting ShareFetch may take, calls `wake`: counted and
woken, not published (the log did not change). A
waiter reads `count` before it looks at the log, then `wait(seen, deadline)`: a change between its look and its wait
is then seen, not slept through. The counter has its own lock, apart from the log's, so appends never wait for
readers. Waits are in real (monotonic) time: they bound how long a caller is kept, not when the log's data expires.

A waiter on several partitions at once (the replica channel answering one fetch of many partitions) `watch`es each
with one `threading.Event`, which every change of any of them sets, and `unwatch`es them when done."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LogChanges:
    """The change counter of one partition; see the module docstring."""

    def __init__(self, publish: Callable[[], None] | None = None) -> None:
        self._changed = threading.Condition()
        self._count = 0
        self._publish = publish
        self._watchers: tuple[threading.Event, ...] = ()

    @property
    def count(self) -> int:
        return self._count

    def notify(self) -> None:
        """Counts one change, publishes it and wakes every waiter."""
        with self._changed:
            self._count += 1
            self._changed.notify_all()
            for watcher in self._watchers:
                watcher.set()
            if self._publish is not None:
                self._publish()

    def wake(self) -> None:
        """Counts one change that readers of the log need not see but a waiting ShareFetch must (an acknowledgement
        or a release freed record locks) and wakes every waiter, without publishing."""
        with self._changed:
            self._count += 1
            self._changed.notify_all()
            for watcher in self._watchers:
                watcher.set()

    def watch(self, watcher: threading.Event) -> None:
        """Sets `watcher` at each change from now on, until `unwatch`."""
        with self._changed:
            self._watchers = (*self._watchers, watcher)

    def unwatch(self, watcher: threading.Event) -> None:
        """Stops setting `watcher`."""
        with self._changed:
            self._watchers = tuple(kept for kept in self._watchers if kept is not watcher)

    def wait(self, seen: int, deadline: float) -> int | None:
        """Waits until a change after count `seen` (returns the new count) or the `time.monotonic()` `deadline`
        passes (None)."""
        with self._changed:
            while self._count == seen:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    return None
                self._changed.wait(remaining_s)
            return self._count

    @property
    def lock(self) -> threading.Condition:
        """The counter's lock, for work that must not overlap a notification (publishing the offsets it counts)."""
        return self._changed
