"""Gauges computed from state the broker already holds, Ray-free: a replica's log numbers, a leader's share-partitions,
the cluster's offline and under-replicated partitions, consumer groups' lag.

Consumer lag is kafka_exporter's `kafka_consumergroup_lag`: for each (group, topic, partition) with a committed
offset, the partition's high watermark (what ListOffsets "latest" answers a consumer, the `LOG-END-OFFSET` of
`raybroker consumer-groups --describe`) minus the committed offset, never below 0 (a commit past the high watermark,
as after DeleteRecords moved it or a follower's truncation, means nothing is left to read). A partition whose high
watermark is unknown (offline, its topic deleted) has no lag row.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.shares.leader_shares import SharePartitionStatistics
from actors.metrics.names import (
    ACTIVE_CONTROLLER,
    CONSUMER_GROUP_LAG,
    CONSUMER_GROUP_OFFSET,
    GLOBAL_PARTITION_COUNT,
    GLOBAL_TOPIC_COUNT,
    LOG_END_OFFSET,
    LOG_SEGMENTS,
    LOG_SIZE,
    LOG_START_OFFSET,
    OFFLINE_PARTITIONS,
    REASSIGNING_PARTITIONS,
    SHARE_ARCHIVED,
    SHARE_BACKLOG,
    SHARE_IN_FLIGHT_BATCHES,
    SHARE_IN_FLIGHT_MESSAGES,
    SHARE_LOCK_TIMEOUTS,
    SHARE_REDELIVERED,
    UNCLEANABLE_PARTITIONS,
    UNDER_REPLICATED_PARTITIONS,
)
from actors.metrics.recorder import Sample
from storage.logdir.log_manager import PartitionPlacement
from storage.logdir.partition_handles import PartitionState

# (group, topic, partition) -> committed offset
CommittedOffsets = Mapping[tuple[str, str, int], int]
# (topic, partition) -> high watermark
HighWatermarks = Mapping[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One group's position in one partition: its committed offset, the partition's high watermark, the lag."""

    group: str
    topic: str
    partition: int
    committed_offset: int
    high_watermark: int

    @property
    def lag(self) -> int:
        return max(self.high_watermark - self.committed_offset, 0)


def consumer_lag(committed: CommittedOffsets, high_watermarks: HighWatermarks) -> list[PartitionLag]:
    """The lag of every committed (group, topic, partition) whose high watermark is known, sorted."""
    return [
        PartitionLag(group, topic, partition, offset, high_watermarks[(topic, partition)])
        for (group, topic, partition), offset in sorted(committed.items())
        if (topic, partition) in high_watermarks
    ]


def log_samples(topic: str, partition: int, state: PartitionState) -> list[Sample]:
    """A replica's `kafka.log:type=Log` gauges."""
    labels = (topic, str(partition))
    return [
        (LOG_SIZE, labels, state.size_bytes),
        (LOG_END_OFFSET, labels, state.log_end_offset),
        (LOG_START_OFFSET, labels, state.log_start_offset),
        (LOG_SEGMENTS, labels, state.segments),
    ]


def share_partition_samples(topic: str, partition: int, statistics: Iterable[SharePartitionStatistics]) -> list[Sample]:
    """A partition leader's `kafka.server:type=SharePartitionMetrics` gauges, per share group, the backlog beside
    them (the records the group has not acknowledged or archived, which Serve's autoscaling policy reads too), and
    the group's delivery tally as counters' totals (lock timeouts, redeliveries, archivings by reason)."""
    samples: list[Sample] = []
    for found in statistics:
        labels = (found.group_id, topic, str(partition))
        tally = found.tally
        samples += [
            (SHARE_IN_FLIGHT_MESSAGES, labels, found.in_flight_records),
            (SHARE_IN_FLIGHT_BATCHES, labels, found.in_flight_batches),
            (SHARE_BACKLOG, labels, found.backlog),
            (SHARE_LOCK_TIMEOUTS, labels, tally.lock_timeouts),
            (SHARE_REDELIVERED, labels, tally.redelivered),
            (SHARE_ARCHIVED, (*labels, "reject"), tally.rejected),
            (SHARE_ARCHIVED, (*labels, "delivery_limit"), tally.delivery_limit),
        ]
    return samples


def uncleanable_samples(
    log_dirs: Iterable[str], placements: Iterable[PartitionPlacement], uncleanable: Collection[tuple[str, int]]
) -> list[Sample]:
    """`uncleanable-partitions-count` of each log dir: its partitions among `uncleanable` (0 where none failed)."""
    counts = dict.fromkeys(log_dirs, 0)
    for placement in placements:
        if (placement.topic, placement.partition) in uncleanable:
            counts[placement.directory] = counts.get(placement.directory, 0) + 1
    return [(UNCLEANABLE_PARTITIONS, (directory,), count) for directory, count in sorted(counts.items())]


def cluster_samples(states: Iterable[LeaderAndIsr], lags: Iterable[PartitionLag]) -> list[Sample]:
    """The controller's gauges: offline, under-replicated and reassigning partitions, topic and partition counts,
    and every group's lag and committed offset."""
    partitions = list(states)
    offline = sum(1 for state in partitions if state.offline)
    under_replicated = sum(1 for state in partitions if not state.offline and state.under_replicated)
    samples: list[Sample] = [
        (ACTIVE_CONTROLLER, (), 1),
        (OFFLINE_PARTITIONS, (), offline),
        (UNDER_REPLICATED_PARTITIONS, (), under_replicated),
        (REASSIGNING_PARTITIONS, (), sum(1 for state in partitions if state.reassigning)),
        (GLOBAL_TOPIC_COUNT, (), len({state.topic for state in partitions})),
        (GLOBAL_PARTITION_COUNT, (), len(partitions)),
    ]
    for row in lags:
        labels = (row.group, row.topic, str(row.partition))
        samples.append((CONSUMER_GROUP_LAG, labels, row.lag))
        samples.append((CONSUMER_GROUP_OFFSET, labels, row.committed_offset))
    return samples
