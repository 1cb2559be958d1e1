"""A partition's view of its node's replication quotas on Ray: the `ReplicationThrottle` a `Replica` asks before each
fetch of a replica out of its ISR (`actors.core.quotas.replication_quotas`), answered by the node's log manager actor
(`LogManagerActor.replication_admit`), which holds the quotas every replica of the node shares."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from typing import Any

import ray

from actors.calls import call
from actors.core.quotas.replication_quotas import FOLLOWER, NO_THROTTLES, ReplicationThrottles
from actors.options import NAMESPACE, log_manager_name
from storage.errors import RaybrokerError

logger = logging.getLogger(__name__)

# How long a fetch waits for its node's replication quota to answer before it goes on unthrottled.
THROTTLE_CALL_TIMEOUT_S = 2.0
# How old the node's replication throttles a partition knows may be before it reads them again.
THROTTLES_MAX_AGE_S = 0.5


class RayReplicationThrottle:
    """The node's replication quotas, held by its log manager (the Replica's `ReplicationThrottle`). Which partitions
    they cover is kept here, read again without waiting when older than `THROTTLES_MAX_AGE_S` (the answer taken by a
    later fetch). A replica they do not cover fetches with no call at all; one they cover asks the log manager with a
    Ray call before each fetch, as Kafka's fetcher asks its quota (a throttled move is bounded by its rate, not by
    that call). A log manager that does not answer throttles nothing: a move never stalls on its quota's
    bookkeeping.

    A leader's answer to a follower never waits for anything but that call: the log manager's handle is looked up
    when the partition opens (by a follower's fetcher again if that failed, which may wait for Ray's GCS), and until
    the throttles were first read a leader takes them as none. A follower's fetcher waits for that first read, so a
    move's first fetch is covered by a throttle set before it started."""

    def __init__(self, node: str) -> None:
        self._node = node
        self._manager: Any | None = None
        self._throttles: ReplicationThrottles | None = None
        self._read_at = float("-inf")
        self._reading: Any | None = None
        self._lock = threading.Lock()
        with contextlib.suppress(ValueError):
            self._manager = _log_manager(node)

    def admit(self, side: str, topic: str, partition: int, recorded: int) -> float:
        manager = self._manager
        if not self._current(side == FOLLOWER).covers(side, topic, partition) or manager is None:
            return 0.0
        try:
            hold_off_s: float = call(
                manager.replication_admit.remote(side, topic, partition, recorded), timeout_s=THROTTLE_CALL_TIMEOUT_S
            )
        except RaybrokerError as exc:
            logger.debug("replication quota not asked: %s", exc)
            return 0.0
        return hold_off_s

    def _current(self, follower: bool) -> ReplicationThrottles:
        """The throttles last read, after taking a read that completed and starting one when they are old; a
        follower waits for the first read (see the class docstring)."""
        with self._lock:
            if follower and self._throttles is None:
                self._read_at = time.monotonic()
                self._throttles = self._first_read()
            if self._reading is not None and ray.wait([self._reading], timeout=0)[0]:
                try:
                    self._throttles = call(self._reading)
                except RaybrokerError as exc:
                    logger.debug("replication throttles not read: %s", exc)
                self._reading = None
            now = time.monotonic()
            if self._reading is None and self._manager is not None and now - self._read_at >= THROTTLES_MAX_AGE_S:
                self._read_at = now
                self._reading = self._manager.replication_throttles.remote()
            return NO_THROTTLES if self._throttles is None else self._throttles

    def _first_read(self) -> ReplicationThrottles:
        """The throttles, waited for (the log manager's handle looked up first if the partition's opening could not)."""
        try:
            if self._manager is None:
                self._manager = _log_manager(self._node)
            throttles: ReplicationThrottles = call(
                self._manager.replication_throttles.remote(), timeout_s=THROTTLE_CALL_TIMEOUT_S
            )
        except (RaybrokerError, ValueError) as exc:
            logger.debug("replication throttles not read: %s", exc)
            return NO_THROTTLES
        return throttles


@functools.cache
def _log_manager(node: str) -> Any:
    """Node `node`'s log manager actor, looked up once per process (a partition host holds many partitions);
    `ValueError` (not cached) while it is not found."""
    return ray.get_actor(log_manager_name(node), namespace=NAMESPACE)
