"""Reading what the cluster's gauges and `raybroker status` need over Ray: the groups' committed offsets (the group
coordinator) and partitions' high watermarks (their leaders); and the controller's gauge publisher.

Both readers skip what does not answer within `READ_TIMEOUT_S` (a leader restarting, a group coordinator not up
yet) rather than fail: a gauge or a status line missing for one partition is better than none at all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from actors.calls import call, get_actor
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.metrics.gauges import CommittedOffsets, PartitionLag, cluster_samples, consumer_lag
from actors.metrics.recorder import BrokerMetrics, Sample
from actors.options import group_coordinator_name
from storage.errors import RaybrokerError
from storage.records.consumer_offsets import OffsetAndMetadata

logger = logging.getLogger(__name__)

# One answer of a group coordinator or a leader: a few ms when the cluster is well; with every core busy, actor
# calls took up to 2 s to answer in the load tests.
READ_TIMEOUT_S = 10.0
# How often the controller's process reads the groups' lag: a commit moves it at most every
# `auto.commit.interval.ms` (5000, Kafka's default), and each read is one call per group and per partition with
# commits. Offline and under-replicated counts are read from the controller's own state at every export.
LAG_INTERVAL_S = 5.0


def committed_offsets(timeout_s: float = READ_TIMEOUT_S) -> dict[tuple[str, str, int], int]:
    """Every group's committed offsets, from the group coordinator: (group, topic, partition) -> offset.
    Raises `BrokerNotAvailableError` when no coordinator runs."""
    coordinator: Any = get_actor(group_coordinator_name())
    groups = call(coordinator.list_groups.remote(), timeout_s=timeout_s)
    asked = {group.group_id: coordinator.group_offsets.remote(group.group_id) for group in groups}
    committed: dict[tuple[str, str, int], int] = {}
    for group, ref in asked.items():
        offsets: dict[tuple[str, int], OffsetAndMetadata] = call(ref, timeout_s=timeout_s)
        for (topic, partition), found in offsets.items():
            committed[(group, topic, partition)] = found.offset
    return committed


# (topic, partition, node id) -> the handle of that node's replica (`actors.server.partition_lookup.replica_actor`).
ReplicaLookup = Callable[[str, int, str], Any]


class HighWatermarkReader:
    """Partitions' high watermarks from their leaders, all asked at once; leaders' handles, found with `replica`, are
    kept between reads (a lookup asks Ray's name service) and looked up again after a failure."""

    def __init__(self, replica: ReplicaLookup) -> None:
        self._replica = replica
        self._handles: dict[tuple[str, int, str], Any] = {}

    def read(self, states: Iterable[LeaderAndIsr], timeout_s: float = READ_TIMEOUT_S) -> dict[tuple[str, int], int]:
        """(topic, partition) -> high watermark, for each partition with a leader that answered."""
        asked: dict[tuple[str, int, str], Any] = {}
        for state in states:
            if state.offline:
                continue
            key = (state.topic, state.partition, state.leader)
            try:
                handle = self._handles.get(key)
                if handle is None:
                    handle = self._replica(*key)
                asked[key] = handle.offsets.remote()
            except RaybrokerError:
                self._handles.pop(key, None)
                continue
            self._handles[key] = handle
        answers: dict[tuple[str, int], int] = {}
        for key, ref in asked.items():
            try:
                _, high_watermark, _ = call(ref, timeout_s=timeout_s)
            except RaybrokerError:
                self._handles.pop(key, None)
                continue
            answers[(key[0], key[1])] = high_watermark
        return answers


class ClusterGaugePublisher:
    """The cluster's gauges, published from the controller's process into `metrics`: offline and under-replicated
    partitions and the topic counts from `states()` (the controller's replication states) at every export, the
    groups' lag from a read every `interval_s` on a thread of its own (the leaders found with `replica`). `stop()`
    ends both."""

    def __init__(
        self,
        metrics: BrokerMetrics,
        states: Callable[[], Iterable[LeaderAndIsr]],
        replica: ReplicaLookup,
        interval_s: float = LAG_INTERVAL_S,
    ) -> None:
        self._metrics = metrics
        self._states = states
        self._interval_s = interval_s
        self._watermarks = HighWatermarkReader(replica)
        self._lags: list[PartitionLag] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-gauges", daemon=True)
        metrics.add_gauges(self._samples)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._metrics.remove_gauges(self._samples)

    def _samples(self) -> list[Sample]:
        return cluster_samples(self._states(), self._lags)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                self._lags = self._read_lags()
            except Exception:
                logger.exception("reading the consumer groups' lag failed")
                self._lags = []

    def _read_lags(self) -> list[PartitionLag]:
        """The groups' lag now; none while the group coordinator does not answer (a stale lag would mislead)."""
        try:
            committed: CommittedOffsets = committed_offsets()
        except RaybrokerError as exc:
            logger.info("no consumer lag this time: %s", exc)
            return []
        consumed = {(topic, partition) for _, topic, partition in committed}
        states = [state for state in self._states() if (state.topic, state.partition) in consumed]
        return consumer_lag(committed, self._watermarks.read(states))
