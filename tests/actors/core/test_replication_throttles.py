"""Replication throttles on a real move (`actors.core.quotas.replication_quotas`), plain, no Ray: a two-node
in-process broker on the system clock, whose new replicas really fetch. A partition of about 900 kB moved to the
other node under a leader or a follower throttle of 300 kB/s takes as long as the rate says (the first window's
bytes aside), where the same move unthrottled takes a fraction of a second; a drain (the controller's own move) is
throttled at the balancer's rate; a replica in the ISR is never throttled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.controller.topic_metadata import AdvertisedListener
from actors.core.in_process_broker import InProcessBroker
from actors.metrics.names import REASSIGNMENT_BYTES_IN, REASSIGNMENT_BYTES_OUT
from actors.metrics.recorder import MetricsRecorder
from storage.clock import SYSTEM_CLOCK
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import start_broker

BROKER_IDS = {"node-0": 10, "node-1": 11}
RATE = 300_000
RECORDS = 600
VALUE = b"v" * 1_500
DEADLINE_S = 60.0


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = start_broker(
        tmp_path,
        nodes=2,
        clock=SYSTEM_CLOCK,
        replication_quota_window_num="2",
        replication_quota_window_size_seconds="1",
        replica_fetch_max_bytes="65536",
        raybroker_balancer_replication_throttle=str(RATE),
    )
    try:
        for node, broker_id in BROKER_IDS.items():
            running.controller.register_listener(node, AdvertisedListener(broker_id, "127.0.0.1", 9000 + broker_id))
        yield running
    finally:
        running.close()


def write(broker: InProcessBroker, topic: str, count: int) -> None:
    for _ in range(count):
        builder = RecordBatchBuilder()
        builder.append(None, VALUE, timestamp=1)
        broker.leader(topic, 0).append(builder.build(), 1)


def move_seconds(
    broker: InProcessBroker, configs: dict[str, dict[str, str]], rates: dict[str, str]
) -> dict[str, float]:
    """Creates a topic of `configs` each (topic -> config) on node-0 and writes it, sets `rates` on both brokers, moves
    every topic to node-1 at once and answers how long each new replica took to catch up and take over."""
    controller = broker.controller
    for topic, config in configs.items():
        controller.create_topic(topic, 1, config, replication_factor=1)
        write(broker, topic, RECORDS)
    for broker_id in BROKER_IDS.values():
        controller.alter_broker_configs(str(broker_id), rates)
    moves = {}
    for topic in configs:
        (source,) = controller.partition_state(topic, 0).replicas
        moves[(topic, 0)] = tuple(node for node in BROKER_IDS if node != source)
    started = time.monotonic()
    assert controller.alter_partition_reassignments(moves) == dict.fromkeys(moves)
    took: dict[str, float] = {}
    while len(took) < len(moves):
        assert time.monotonic() - started < DEADLINE_S, f"the new replicas did not catch up: {took}"
        for (topic, partition), target in moves.items():
            if topic not in took and controller.partition_state(topic, partition).replicas == target:
                took[topic] = time.monotonic() - started
        time.sleep(0.02)
    return took


def test_throttled_moves_copy_at_the_throttles_rate(two_nodes: InProcessBroker) -> None:
    """Three moves at once: one whose leader-side replicas are throttled, one whose follower-side ones are, one
    without; both rates are set on both brokers, so each throttled move is bounded by its own side's quota."""
    took = move_seconds(
        two_nodes,
        {
            "leader-throttled": {"leader.replication.throttled.replicas": "*"},
            "follower-throttled": {"follower.replication.throttled.replicas": "*"},
            "plain": {},
        },
        {"leader.replication.throttled.rate": str(RATE), "follower.replication.throttled.rate": str(RATE)},
    )
    size = RECORDS * len(VALUE)
    for topic in ("leader-throttled", "follower-throttled"):
        # The sensor's first window (1 s at the rate) passes at once; the rest at the rate.
        assert size / RATE + 5 >= took[topic] >= (size - 2 * RATE) / RATE, took
        assert took["plain"] < took[topic] / 3, took


def test_a_drain_copies_at_the_balancer_throttle(two_nodes: InProcessBroker) -> None:
    """The controller's own move (a drain) is throttled at `raybroker.balancer.replication.throttle` with no
    throttle configured by an operator."""
    controller = two_nodes.controller
    controller.create_topic("drained", 1, replication_factor=1)
    write(two_nodes, "drained", RECORDS)
    (source,) = controller.partition_state("drained", 0).replicas
    started = time.monotonic()
    ((_, _, target),) = controller.drain_broker(source)
    while controller.partition_state("drained", 0).replicas != target:
        assert time.monotonic() - started < DEADLINE_S, "the drained replica did not catch up"
        time.sleep(0.02)
    size = RECORDS * len(VALUE)
    assert time.monotonic() - started >= (size - 2 * RATE) / RATE


def test_a_replica_in_the_isr_is_not_throttled(two_nodes: InProcessBroker) -> None:
    controller = two_nodes.controller
    controller.create_topic("steady", 1, {"follower.replication.throttled.replicas": "*"}, replication_factor=2)
    for broker_id in BROKER_IDS.values():
        controller.alter_broker_configs(str(broker_id), {"follower.replication.throttled.rate": "1000"})
    started = time.monotonic()
    write(two_nodes, "steady", RECORDS)
    leader = two_nodes.leader("steady", 0)
    end = leader.log.log_end_offset
    while leader.log.high_watermark < end:
        assert time.monotonic() - started < DEADLINE_S, "the follower in the ISR was throttled"
        time.sleep(0.01)
    assert time.monotonic() - started < RECORDS * len(VALUE) / 1000 / 10


def test_a_moves_bytes_are_counted_as_kafkas_reassignment_bytes_in_and_out(tmp_path: Path) -> None:
    """Kafka's ReassignmentBytesInPerSec and ReassignmentBytesOutPerSec: an unthrottled move counts every byte the new
    replica copied, on the follower's side and on the leader's (the leader's log, as its new replica fetched it
    whole); a follower in the ISR of a partition not moving is not counted, nor is the moved partition once the
    move is done."""
    metrics = MetricsRecorder()
    broker = start_broker(tmp_path, nodes=2, clock=SYSTEM_CLOCK, metrics=metrics)
    try:
        controller = broker.controller
        controller.create_topic("steady", 1, replication_factor=2)
        write(broker, "steady", 50)
        controller.create_topic("moving", 1, replication_factor=1)
        write(broker, "moving", RECORDS)
        (source,) = controller.partition_state("moving", 0).replicas
        moved_bytes = broker.leader("moving", 0).log.size_in_bytes
        target = next(node for node in BROKER_IDS if node != source)
        assert controller.alter_partition_reassignments({("moving", 0): (target,)}) == {("moving", 0): None}
        started = time.monotonic()
        while controller.partition_state("moving", 0).replicas != (target,):
            assert time.monotonic() - started < DEADLINE_S, "the new replica did not catch up"
            time.sleep(0.02)
        counted = (metrics.value(REASSIGNMENT_BYTES_IN), metrics.value(REASSIGNMENT_BYTES_OUT))
        assert counted == (moved_bytes, moved_bytes)
        write(broker, "steady", 50)
        write(broker, "moving", 10)
        assert (metrics.value(REASSIGNMENT_BYTES_IN), metrics.value(REASSIGNMENT_BYTES_OUT)) == counted
    finally:
        broker.close()
