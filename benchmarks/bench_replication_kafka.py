"""Replicated produce through the Kafka protocol: the same confluent-kafka producer into raybroker's 3-node cluster
and into a three-broker Apache Kafka, both on this machine, in the same run.

| figure              | what                                                   | baseline                              |
|---------------------|--------------------------------------------------------|---------------------------------------|
| `produce_rf3_kafka` | records/s, 100-byte values, confluent-kafka `produce`  | Apache Kafka 3.9.1 with three brokers |
|                     | with `acks=all` and idempotence on (the Java client's  | (KRaft, `benchmarks.kafka_cluster`),  |
|                     | defaults), null keys, librdkafka's batching defaults,  | the same client, records and topic    |
|                     | into a topic of 3 partitions with replication factor   | layout                                |
|                     | 3, every record acknowledged (flush)                   |                                       |

raybroker runs as `produce_rf3` runs it (`benchmarks.bench_replication.three_nodes`: a head and two workers of a
`ray.cluster_utils.Cluster`, a broker on each), with a Kafka listener on each node (`start_kafka_listeners`, as
`raybroker start` starts them; `node.id` 0, 1, 2), so the client produces to each partition's leader on its own
node, as it does with Kafka. Ray starts the broker's actors at niceness 0 here (`WORKER_NICENESS`; Ray's default
is 15), the niceness of Kafka's JVMs and of the clients. Both topics are created by the client's AdminClient with
the brokers' defaults (`min.insync.replicas` 1: `acks=all` waits for every replica in the ISR, and a run counts
only with all three in it).

Every client run is a process of its own (spawned, as in `benchmarks.bench_wire`), connected, with its producer id
and a first batch to every partition acknowledged, before its clock starts. The two sides are measured alternately
after one uncounted run each of half the records (the JVMs' JIT and raybroker's partition lookups warm), best of N
each. A raybroker run counts only if it starts with all 3 replicas of every partition in sync (waiting up to
`ISR_WAIT_S` for that), and `met` is false if the ISR shrank during a counted run; the goal text lists every ISR
change on either side. A full run took ~3 minutes.

`--quick` runs this module too, with `QUICK_RECORDS` a run (a second or two of sending per run); most of its 1-2
minutes is the Ray cluster's and the three JVMs' start, which is why no test runs it. Its figure compares JVMs
that are barely warm and is noise on a loaded machine. Like `benchmarks.bench_replication` it needs Ray to itself
(it stops the shared environment first, so it runs last) and leaves nothing running.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Protocol

from benchmarks.bench_replication import (
    ISR_WAIT_S,
    PARTITIONS,
    REPLICATION_FACTOR,
    VALUE_BYTES,
    IsrRuns,
    full_isr,
    leader_offsets,
    states,
    stop_shared_ray,
    three_nodes,
)
from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.kafka_cluster import KafkaCluster
from benchmarks.processes import CLIENT_TIMEOUT_S, QUIET, in_process

RECORDS = 2_000_000
QUICK_RECORDS = 200_000
REPEATS = 3
QUICK_REPEATS = 2
# The client's first records, acknowledged before its clock starts: a batch to every partition's leader.
CLIENT_WARM_UP_RECORDS = 30_000
GOAL_RATIO = 1.0
# Ray starts its worker processes, every actor of the broker among them, at niceness 15 (`RAY_worker_niceness`),
# where Kafka's JVMs and the clients run at 0, and on 2 shared cores a nice-15 process gets 36/1060 of a core
# beside a busy nice-0 one. At 15, this figure's raybroker side moved 52-79k rec/s, at 0 92-148k (three runs each,
# load averages 11-39): the two brokers are compared at the same priority.
WORKER_NICENESS = {"worker_niceness": 0}
# The producer's local queue holds a whole run, so `produce` never stops on BufferError and the figure is the
# brokers' pace, not the queue's.
PRODUCER_QUEUE = {"queue.buffering.max.messages": 2_500_000, "queue.buffering.max.kbytes": 2_097_151}
# Kafka's Java producer defaults since 3.0: every in-sync replica acknowledges, sequence numbers on (librdkafka's
# own defaults are acks=all and idempotence off).
PRODUCER_SETTINGS = {"acks": "all", "enable.idempotence": True}


def run(ctx: BenchContext) -> list[Figure]:
    ctx.progress("  stopping the shared Ray: this module runs its own 3-node cluster")
    stop_shared_ray(ctx)
    with three_nodes(ctx, WORKER_NICENESS) as nodes:
        bootstrap = start_listeners(nodes)
        ctx.progress(f"  a Kafka listener on each node: {bootstrap}")
        ctx.progress("  starting Apache Kafka with three brokers (fetched from Maven Central on the first run) ...")
        with KafkaCluster() as kafka:
            targets = {"raybroker": bootstrap, "kafka": kafka.bootstrap_servers}
            return [_produce_rf3_kafka(ctx, targets)]


class RayNodes(Protocol):
    """A Ray cluster's head and worker nodes by Ray node id: the benchmarks' `ThreeNodes`, the tests' `Nodes`."""

    head: str
    workers: dict[str, Any]


def start_listeners(nodes: RayNodes) -> str:
    """One Kafka listener actor on each node (`node.id` 0 on the head, then the workers); the bootstrap servers of
    all of them."""
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    bootstrap = []
    for broker_id, node in enumerate([nodes.head, *sorted(nodes.workers)]):
        config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": str(broker_id)})
        bootstrap.append(start_kafka_listeners(config, node).bootstrap_servers)
    return ",".join(bootstrap)


def create_topic(bootstrap: str) -> str:
    """A new topic of `PARTITIONS` partitions with `REPLICATION_FACTOR` replicas, every other setting the broker's;
    answers once the brokers' metadata names a leader and every replica in sync for each partition (Kafka's
    CreateTopics answers before its brokers' metadata caches have the topic)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-rf3-kafka-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, PARTITIONS, REPLICATION_FACTOR)], operation_timeout=30)[name].result(timeout=60)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while time.monotonic() < deadline:
        isr = kafka_isr(bootstrap, name)
        if len(isr) == PARTITIONS and all(len(replicas) == REPLICATION_FACTOR for replicas in isr.values()):
            return name
        time.sleep(0.1)
    raise RuntimeError(f"{name}: no leader or not every replica in sync after {CLIENT_TIMEOUT_S:.0f} s")


def kafka_isr(bootstrap: str, topic: str) -> dict[int, tuple[int, ...]]:
    """Each partition's ISR (broker ids) as the brokers' metadata reports it (none for a partition without a
    leader)."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    found = metadata.topics.get(topic)
    partitions = {} if found is None or found.error is not None else found.partitions
    return {
        partition: tuple(sorted(partitions[partition].isrs)) if partitions[partition].leader >= 0 else ()
        for partition in sorted(partitions)
    }


def kafka_leaders(bootstrap: str, topic: str) -> list[int]:
    """Each partition's leader (broker id), in partition order."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    partitions = metadata.topics[topic].partitions
    return [partitions[partition].leader for partition in sorted(partitions)]


def _isr(name: str, bootstrap: str, topic: str, wait: bool) -> dict[int, tuple[Any, ...]]:
    """Each partition's ISR: raybroker's from its controller (once whole, up to `ISR_WAIT_S`, with `wait`), Kafka's
    from its metadata."""
    if name != "raybroker":
        return kafka_isr(bootstrap, topic)
    found = full_isr(topic) if wait else states(topic)
    return {partition: tuple(state.isr) for partition, state in sorted(found.items())}


def produce_all_acks(bootstrap: str, topic: str, count: int) -> float:
    """Produces `count` random `VALUE_BYTES`-byte values with null keys (`PRODUCER_SETTINGS`) and waits for every
    acknowledgement; returns records/s. The first `CLIENT_WARM_UP_RECORDS` are acknowledged before the clock
    starts and are not counted."""
    from confluent_kafka import Producer

    block = os.urandom(4096 + VALUE_BYTES)
    values = [block[i % 4096 : i % 4096 + VALUE_BYTES] for i in range(count)]
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS, **PRODUCER_QUEUE, **QUIET})
    failures: list[str] = []

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    produce = producer.produce
    for partition in range(PARTITIONS):
        for value in values[: CLIENT_WARM_UP_RECORDS // PARTITIONS]:
            produce(topic, value, partition=partition, on_delivery=report)
    if producer.flush(CLIENT_TIMEOUT_S) or failures:
        raise RuntimeError(f"warm-up: {len(failures)} records failed ({failures[:1]}), or some unacknowledged")
    start = time.perf_counter()
    for value in values:
        produce(topic, value, on_delivery=report)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if remaining or failures:
        raise RuntimeError(f"{len(failures)} records failed ({failures[:1]}), {remaining} unacknowledged")
    return count / elapsed


def _produce_rf3_kafka(ctx: BenchContext, targets: dict[str, str]) -> Figure:
    count = QUICK_RECORDS if ctx.quick else RECORDS
    repeats = QUICK_REPEATS if ctx.quick else REPEATS
    topics = {name: create_topic(bootstrap) for name, bootstrap in targets.items()}
    ours_leaders = sorted(state.leader[:6] for state in full_isr(topics["raybroker"]).values())
    ctx.progress(
        f"  leaders: raybroker (node id prefixes) {ours_leaders}, "
        f"Kafka (broker ids) {kafka_leaders(targets['kafka'], topics['kafka'])}"
    )
    sent = dict.fromkeys(targets, 0)
    for name, bootstrap in targets.items():
        rate = in_process(produce_all_acks, bootstrap, topics[name], count // 2)
        sent[name] += CLIENT_WARM_UP_RECORDS // PARTITIONS * PARTITIONS + count // 2
        ctx.progress(f"  produce_rf3_kafka warm-up (not counted): {name} {rate:,.0f} rec/s")
    best = dict.fromkeys(targets, 0.0)
    isr = IsrRuns()
    counted = 0
    for attempt in range(repeats):
        for name, bootstrap in targets.items():
            before = _isr(name, bootstrap, topics[name], wait=True)
            rate = in_process(produce_all_acks, bootstrap, topics[name], count)
            sent[name] += CLIENT_WARM_UP_RECORDS // PARTITIONS * PARTITIONS + count
            after = _isr(name, bootstrap, topics[name], wait=False)
            counts, note = isr.observe(
                f"{name} run {attempt + 1}",
                [len(replicas) for replicas in before.values()],
                [len(replicas) for replicas in after.values()],
                before != after,
                judged=name == "raybroker",
            )
            if counts:
                best[name] = max(best[name], rate)
                counted += name == "raybroker"
            ctx.progress(f"  produce_rf3_kafka {attempt + 1}/{repeats}: {name} {rate:,.0f} rec/s, {note}")
    offsets = leader_offsets(topics["raybroker"])
    if sum(end for _, _, end in offsets) != sent["raybroker"] or any(hw != end for _, hw, end in offsets):
        raise RuntimeError(
            f"{topics['raybroker']}: (log start, high watermark, log end) {offsets}, {sent['raybroker']} records sent"
        )
    if not counted:
        raise RuntimeError(
            f"no raybroker run started with every replica in sync (within {ISR_WAIT_S:g} s): {isr.notes}"
        )
    figure = throughput_figure(
        "produce_rf3_kafka",
        best["raybroker"],
        "rec/s",
        f"Apache Kafka {KAFKA_VERSION}, 3 brokers (same client)",
        best["kafka"],
        GOAL_RATIO,
        f"ratio >= {GOAL_RATIO} with raybroker's ISR whole; confluent-kafka acks=all, idempotent, "
        f"{VALUE_BYTES}-byte values into {PARTITIONS} partitions x {REPLICATION_FACTOR} replicas, {count:,} records "
        f"a run, best of {counted} (raybroker) and {repeats} (Kafka) runs; "
        + isr.summary("ISR of 3 throughout on both"),
    )
    return isr.verdict(figure)
