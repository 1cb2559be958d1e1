"""Replication throttles on a real move (`actors.core.quotas.replication_quotas`), plain, no Ray: a two-node
in-process broker on the system clock, whose new replica really fetches. A partition of about 1.5 MB moved to the
other node under a leader or a follower throttle of 300 kB/s takes as long as the rate says (the first window's
bytes aside), where the same move unthrottled takes a fraction of a second; once the new replica is in the ISR, the
throttle no longer slows it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.controller.topic_metadata import AdvertisedListener
from actors.core.in_process_broker import InProcessBroker
from storage.clock import SYSTEM_CLOCK
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import start_broker

BROKER_IDS = {"node-0": 10, "node-1": 11}
RATE = 300_000
RECORDS = 1_000
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


def move_seconds(broker: InProcessBroker, topic: str, config: dict[str, str], rates: dict[str, str]) -> float:
    """Creates `topic` on node-0 with `config`, sets `rates` on both brokers, moves it to node-1 and answers how long
    the new replica took to catch up and take over."""
    controller = broker.controller
    controller.create_topic(topic, 1, config, replication_factor=1)
    source = controller.partition_state(topic, 0).leader
    (target,) = [node for node in BROKER_IDS if node != source]
    write(broker, topic, RECORDS)
    for broker_id in BROKER_IDS.values():
        controller.alter_broker_configs(str(broker_id), rates)
    started = time.monotonic()
    assert controller.alter_partition_reassignments({(topic, 0): (target,)}) == {(topic, 0): None}
    while controller.partition_state(topic, 0).replicas != (target,):
        assert time.monotonic() - started < DEADLINE_S, "the new replica did not catch up"
        time.sleep(0.02)
    return time.monotonic() - started


def throttled_config(side: str, topic_replicas: str) -> dict[str, str]:
    return {f"{side}.replication.throttled.replicas": topic_replicas}


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_a_throttled_move_copies_at_the_throttles_rate(two_nodes: InProcessBroker, side: str) -> None:
    unthrottled_s = move_seconds(two_nodes, "plain", {}, {})
    moved_s = move_seconds(
        two_nodes,
        "throttled",
        throttled_config(side, "*"),
        {f"{side}.replication.throttled.rate": str(RATE)},
    )
    size = RECORDS * len(VALUE)
    # The sensor's first window (1 s at the rate) passes at once; the rest at the rate.
    assert moved_s >= (size - 2 * RATE) / RATE, (moved_s, unthrottled_s)
    assert moved_s <= 3 * size / RATE + 5, (moved_s, unthrottled_s)
    assert unthrottled_s < moved_s / 3, (moved_s, unthrottled_s)


def test_a_replica_in_the_isr_is_not_throttled(two_nodes: InProcessBroker) -> None:
    controller = two_nodes.controller
    controller.create_topic("steady", 1, throttled_config("follower", "*"), replication_factor=2)
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
