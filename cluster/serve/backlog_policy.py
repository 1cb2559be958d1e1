"""Serve autoscaling on a task queue's backlog: `ShareGroupBacklogPolicy`, a Serve autoscaling policy (a class
`AutoscalingPolicy(policy_function=..., policy_kwargs=...)` instantiates once in the Serve controller) that asks
for one replica per `tasks_per_replica` tasks not yet done in the queue, so a deployment of
`share_group_tasks.RaybrokerTaskProcessorAdapter` workers grows with its queue and shrinks, to zero if its
`min_replicas` allows, once the queue is drained.

The backlog is `queue_backlog`: the records of the queue's partitions that the share group has not acknowledged or
archived, in flight included (the lag DescribeShareGroupOffsets reports, summed over the partitions; a partition the
group never fetched counts from its log start). A thread reads it every `refresh_s` seconds, so the controller's
autoscaling loop never waits on the broker; until the first read, or when the broker cannot be asked, the policy
keeps the current number of replicas. Serve applies the deployment's bounds, delays and scaling factors to what it
asks.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from typing import Any

from actors.calls import call
from actors.clients.broker import Broker
from actors.server.partition_lookup import partition_actor
from storage.errors import RaybrokerError

logger = logging.getLogger(__name__)


def queue_backlog(broker: Broker, queue_name: str, group_id: str) -> int:
    """The records of `queue_name` that `group_id` has not acknowledged or archived (see the module docstring)."""
    partitions = sorted(broker.topic(queue_name).partitions)
    handles = [partition_actor(queue_name, partition) for partition in partitions]
    lags = call_all([handle.share_offsets.remote(group_id) for handle in handles])
    backlog = 0
    for handle, offsets in zip(handles, lags, strict=True):
        if offsets is None or offsets.lag < 0:
            log_start, high_watermark, _ = call(handle.offsets.remote())
            backlog += high_watermark - log_start
        else:
            backlog += offsets.lag
    return backlog


def call_all(refs: list[Any]) -> list[Any]:
    """Each answer, the first error raised."""
    return [call(ref) for ref in refs]


class ShareGroupBacklogPolicy:
    """A Serve autoscaling policy on a queue's backlog (see the module docstring)."""

    def __init__(
        self, queue_name: str, group_id: str | None = None, tasks_per_replica: int = 10, refresh_s: float = 1.0
    ) -> None:
        if tasks_per_replica < 1 or refresh_s <= 0:
            raise ValueError(f"tasks_per_replica must be >= 1 and refresh_s > 0, got {tasks_per_replica}, {refresh_s}")
        self.queue_name = queue_name
        self.group_id = group_id or f"serve-{queue_name}"
        self.tasks_per_replica = tasks_per_replica
        self.backlog: int | None = None
        self._stop = threading.Event()
        threading.Thread(
            target=_refresh, args=(weakref.ref(self), self._stop, refresh_s), name="share-group-backlog", daemon=True
        ).start()

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        """The replicas the backlog asks for; the current number until it is known."""
        backlog = self.backlog
        if backlog is None:
            return ctx.current_num_replicas, {}
        return math.ceil(backlog / self.tasks_per_replica), {"backlog": backlog}

    def __del__(self) -> None:
        self._stop.set()


def _refresh(policy: weakref.ref[ShareGroupBacklogPolicy], stop: threading.Event, refresh_s: float) -> None:
    """Reads the backlog of the policy's queue every `refresh_s` while the policy lives."""
    broker: Broker | None = None
    while not stop.wait(refresh_s):
        alive = policy()
        if alive is None:
            return
        try:
            broker = broker or Broker.connect()
            alive.backlog = queue_backlog(broker, alive.queue_name, alive.group_id)
        except RaybrokerError as exc:
            logger.warning("the backlog of %s is unknown: %s", alive.queue_name, exc)
            broker = None
        del alive
