"""Gauges from the broker's state, against plain models: consumer lag as kafka_exporter defines it, the controller's
offline and under-replicated counts over random replication states, uncleanable partitions per log dir."""

from __future__ import annotations

import random

from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from actors.metrics.gauges import PartitionLag, cluster_samples, consumer_lag, uncleanable_samples
from actors.metrics.names import (
    ACTIVE_CONTROLLER,
    CONSUMER_GROUP_LAG,
    CONSUMER_GROUP_OFFSET,
    GLOBAL_PARTITION_COUNT,
    GLOBAL_TOPIC_COUNT,
    OFFLINE_PARTITIONS,
    REASSIGNING_PARTITIONS,
    UNCLEANABLE_PARTITIONS,
    UNDER_REPLICATED_PARTITIONS,
)
from storage.logdir.log_manager import PartitionPlacement


def test_lag_is_high_watermark_minus_committed_and_never_negative() -> None:
    committed = {("g1", "orders", 0): 10, ("g1", "orders", 1): 7, ("g2", "orders", 0): 40, ("g1", "gone", 0): 3}
    high_watermarks = {("orders", 0): 25, ("orders", 1): 7}
    lags = consumer_lag(committed, high_watermarks)
    assert lags == [
        PartitionLag("g1", "orders", 0, 10, 25),
        PartitionLag("g1", "orders", 1, 7, 7),
        PartitionLag("g2", "orders", 0, 40, 25),
    ]
    assert [row.lag for row in lags] == [15, 0, 0]


def random_state(rng: random.Random, topic: str, partition: int, nodes: list[str]) -> LeaderAndIsr:
    replicas = tuple(rng.sample(nodes, rng.randint(1, len(nodes))))
    isr = tuple(node for node in replicas if rng.random() < 0.7)
    leader = isr[0] if isr and rng.random() < 0.85 else NO_LEADER
    adding = replicas[-1:] if len(replicas) > 1 and rng.random() < 0.3 else ()
    return LeaderAndIsr(topic, partition, leader, rng.randint(0, 5), replicas, isr or replicas[:1], adding=adding)


def test_offline_under_replicated_and_reassigning_counts_match_a_model_of_random_states() -> None:
    rng = random.Random(11)
    nodes = ["n1", "n2", "n3"]
    for _ in range(50):
        states = [
            random_state(rng, f"t{topic}", partition, nodes)
            for topic in range(rng.randint(0, 4))
            for partition in range(rng.randint(1, 6))
        ]
        samples = {spec: value for spec, labels, value in cluster_samples(states, []) if not labels}
        # The model, by Kafka's definitions: no leader is offline; a led partition with an ISR smaller than its
        # replicas is under-replicated (an offline one is reported as offline only).
        assert samples[OFFLINE_PARTITIONS] == len([s for s in states if s.leader == NO_LEADER])
        assert samples[UNDER_REPLICATED_PARTITIONS] == len(
            [s for s in states if s.leader != NO_LEADER and len(s.isr) < len(s.replicas)]
        )
        assert samples[REASSIGNING_PARTITIONS] == len([s for s in states if s.adding or s.removing])
        assert samples[GLOBAL_PARTITION_COUNT] == len(states)
        assert samples[GLOBAL_TOPIC_COUNT] == len({s.topic for s in states})
        assert samples[ACTIVE_CONTROLLER] == 1


def test_each_lag_row_gives_a_lag_and_an_offset_series_labelled_by_group_topic_partition() -> None:
    weird = 'we"ird\\group\nname'
    lags = [PartitionLag(weird, "orders", 2, 5, 9), PartitionLag("g", "orders", 0, 3, 3)]
    samples = [(spec, labels, value) for spec, labels, value in cluster_samples([], lags) if labels]
    assert samples == [
        (CONSUMER_GROUP_LAG, (weird, "orders", "2"), 4),
        (CONSUMER_GROUP_OFFSET, (weird, "orders", "2"), 5),
        (CONSUMER_GROUP_LAG, ("g", "orders", "0"), 0),
        (CONSUMER_GROUP_OFFSET, ("g", "orders", "0"), 3),
    ]


def test_uncleanable_partitions_are_counted_per_log_dir_and_every_dir_reports() -> None:
    placements = [
        PartitionPlacement("a", 0, "/d1"),
        PartitionPlacement("a", 1, "/d2"),
        PartitionPlacement("b", 0, "/d1"),
        PartitionPlacement("c", 0, "/d1"),
    ]
    samples = uncleanable_samples(["/d1", "/d2", "/d3"], placements, {("a", 0), ("c", 0), ("zz", 9)})
    assert samples == [
        (UNCLEANABLE_PARTITIONS, ("/d1",), 2),
        (UNCLEANABLE_PARTITIONS, ("/d2",), 0),
        (UNCLEANABLE_PARTITIONS, ("/d3",), 0),
    ]
