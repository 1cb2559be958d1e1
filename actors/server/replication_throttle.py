"""A partition's view of its node's replication quotas on Ray: the `ReplicationThrottle` a `Replica` asks before each
fetch of a replica out of its ISR (`actors.core.quotas.replication_quotas`), answered by the node's log manager actor
(`LogManagerActor.replication_admit`), which holds the quotas every replica of the node shares."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray

from actors.calls import call
from actors.core.quotas.replication_quotas import NO_THROTTLES, ReplicationThrottles
from actors.options import NAMESPACE, log_manager_name
from storage.errors import RaybrokerError

logger = logging.getLogger(__name__)

# How long a fetch waits for its node's replication quota to answer before it goes on unthrottled.
THROTTLE_CALL_TIMEOUT_S = 2.0
# How old the node's replication throttles a partition knows may be before it reads them again.
THROTTLES_MAX_AGE_S = 0.5


class RayReplicationThrottle:
    """The node's replication quotas, held by its log manager (the Replica's `ReplicationThrottle`). Which partitions
    they cover is kept here: read with a wait the first time, then again without waiting when older than
    `THROTTLES_MAX_AGE_S` (the answer taken by a later fetch). A replica they do not cover fetches with no call at
    all; one they cover asks the log manager with a Ray call before each fetch, as Kafka's fetcher asks its quota (a
    throttled move is bounded by its rate, not by that call). A log manager that does not answer throttles nothing: a
    move never stalls on its quota's bookkeeping."""

    def __init__(self, node: str) -> None:
        self._node = node
        self._manager: Any | None = None
        self._throttles: ReplicationThrottles | None = None
        self._read_at = float("-inf")
        self._reading: Any | None = None
        self._lock = threading.Lock()

    def admit(self, side: str, topic: str, partition: int, recorded: int) -> float:
        if not self._current().covers(side, topic, partition):
            return 0.0
        try:
            hold_off_s: float = call(
                self._log_manager().replication_admit.remote(side, topic, partition, recorded),
                timeout_s=THROTTLE_CALL_TIMEOUT_S,
            )
        except (RaybrokerError, ValueError) as exc:
            self._manager = None
            logger.debug("replication quota not asked: %s", exc)
            return 0.0
        return hold_off_s

    def _current(self) -> ReplicationThrottles:
        """The throttles last read, after taking a read that completed and starting one when they are old (waiting
        for the first)."""
        with self._lock:
            if self._throttles is None:
                self._read_at = time.monotonic()
                try:
                    self._throttles = call(
                        self._log_manager().replication_throttles.remote(), timeout_s=THROTTLE_CALL_TIMEOUT_S
                    )
                except (RaybrokerError, ValueError) as exc:
                    logger.debug("replication throttles not read: %s", exc)
                    self._throttles = NO_THROTTLES
            if self._reading is not None and ray.wait([self._reading], timeout=0)[0]:
                try:
                    self._throttles = call(self._reading)
                except RaybrokerError as exc:
                    logger.debug("replication throttles not read: %s", exc)
                self._reading = None
            now = time.monotonic()
            if self._reading is None and now - self._read_at >= THROTTLES_MAX_AGE_S:
                self._read_at = now
                try:
                    self._reading = self._log_manager().replication_throttles.remote()
                except ValueError as exc:
                    logger.debug("replication throttles not read: %s", exc)
            return self._throttles

    def _log_manager(self) -> Any:
        if self._manager is None:
            self._manager = ray.get_actor(log_manager_name(self._node), namespace=NAMESPACE)
        return self._manager
