"""Creating a topic through a Kafka Admin client, against Apache Kafka.

| figure           | what                                                        | baseline                           |
|------------------|-------------------------------------------------------------|------------------------------------|
| `create_topic_s` | seconds from confluent-kafka's `AdminClient.create_topics`  | Apache Kafka 3.9 (KRaft, one node  |
|                  | of a 3-partition topic until a Producer has one record      | on loopback), same clients         |
|                  | acknowledged by each partition's leader (`acks=1`): what an |                                    |
|                  | operator's script or a test fixture waits for               |                                    |

The clients run in a process of their own (spawned), new for every topic, so each run pays the same connection
set-up on both sides; the two brokers are measured alternately and the median of the runs is reported. Lower is
better: the ratio is ours over Kafka's, and the goal is at most Kafka's time.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from benchmarks.common import BenchContext, Figure
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.processes import CLIENT_TIMEOUT_S, QUIET, in_process
from benchmarks.side_by_side import beside_kafka

PARTITIONS = 3
RUNS = 5
QUICK_RUNS = 2
GOAL_RATIO = 1.0


def run(ctx: BenchContext) -> list[Figure]:
    with beside_kafka(ctx, {"num.partitions": "1"}) as targets:
        return [_create_topic_s(ctx, targets)]


def create_and_produce(bootstrap: str) -> float:
    """Seconds from asking for a new `PARTITIONS`-partition topic until each partition acknowledged a record."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-create-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, **QUIET})
    # Both clients are connected before the clock starts: connecting is not creating.
    admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    producer.list_topics(timeout=CLIENT_TIMEOUT_S)
    acknowledged: set[int] = set()
    failures: list[str] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            acknowledged.add(message.partition())

    start = time.perf_counter()
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30)[topic].result(timeout=CLIENT_TIMEOUT_S)
    for partition in range(PARTITIONS):
        producer.produce(topic, b"first", partition=partition, on_delivery=report)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if remaining or failures or len(acknowledged) != PARTITIONS:
        raise RuntimeError(f"{remaining} records unacknowledged, failures {failures}, partitions {acknowledged}")
    return elapsed


def _create_topic_s(ctx: BenchContext, targets: dict[str, str]) -> Figure:
    runs = QUICK_RUNS if ctx.quick else RUNS
    times: dict[str, list[float]] = {name: [] for name in targets}
    for attempt in range(runs):
        for name, bootstrap in targets.items():
            times[name].append(in_process(create_and_produce, bootstrap))
        ctx.progress(
            f"  create_topic_s {attempt + 1}/{runs}: {times['raybroker'][-1]:.2f} s vs Kafka {times['kafka'][-1]:.2f} s"
        )
    ours = statistics.median(times["raybroker"])
    kafka = statistics.median(times["kafka"])
    ratio = ours / kafka
    return Figure(
        "create_topic_s",
        ours,
        "s (median)",
        f"Apache Kafka {KAFKA_VERSION} (same clients)",
        kafka,
        ratio,
        f"ratio (ours/Kafka's time) <= {GOAL_RATIO:g}",
        ratio <= GOAL_RATIO,
    )
