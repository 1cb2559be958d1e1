"""The controller's count of the changes a Metadata answer shows, which the Kafka listeners' metadata caches watch.

A Kafka broker answers Metadata from its own metadata cache, which follows the controller's metadata log; it never
asks the controller per request. raybroker's listeners keep the controller's answers to their metadata questions
(`cluster.protocol.views.broker_view`) for as long as this count stays where they last saw it: each listener keeps
one call to `Controller.await_metadata_change` waiting, which returns as soon as the count moves.

The count moves with every record the controller writes to its metadata log (topics, partition states, configs,
and the rest) and with every change of the running brokers and listeners, which are not in the log. It starts at a
random value, so a listener that saw an earlier controller's count never takes a new controller's for the same.
"""

from __future__ import annotations

import secrets
import threading

# The longest one wait for a change lasts; the listener then asks again.
MAX_WATCH_MS = 30_000


class MetadataChanges:
    """The count and its waiters (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._count = secrets.randbits(62)
        self._moved = threading.Condition()

    @property
    def count(self) -> int:
        with self._moved:
            return self._count

    def note(self) -> None:
        """One change: every waiter returns."""
        with self._moved:
            self._count += 1
            self._moved.notify_all()

    def after(self, known: int | None, max_wait_ms: int) -> int:
        """The count once it differs from `known` (at once for None), or `known` after `max_wait_ms` (at most
        `MAX_WATCH_MS`) without a change."""
        timeout_s = min(max(max_wait_ms, 0), MAX_WATCH_MS) / 1000
        with self._moved:
            self._moved.wait_for(lambda: self._count != known, timeout_s)
            return self._count


__all__ = ["MAX_WATCH_MS", "MetadataChanges"]
