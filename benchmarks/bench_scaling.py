"""How each broker's cost grows with partitions: the same producer and consumer against raybroker and Apache Kafka,
one topic of 10, 100, 1,000 and 10,000 partitions at a time (10 to 1,000 with --quick).

| figure                        | what (at the largest count)                      | baseline                         |
|-------------------------------|--------------------------------------------------|----------------------------------|
| `partitions_scaling`          | records/s one confluent-kafka Producer writes,   | Apache Kafka 3.9 (KRaft, one     |
|                               | 100-byte values spread over every partition in   | node on loopback), same clients  |
|                               | turn (acks=all, linger 5 ms), all acknowledged   |                                  |
| `partitions_scaling_memory`   | bytes per partition the broker's processes grew  | Kafka's JVM, measured the same   |
|                               | by (USS), from before the topic's creation to    | way                              |
|                               | `SETTLE_S` after it was written and read         |                                  |
| `partitions_scaling_create_s` | seconds from AdminClient's create_topics until   | Kafka's time                     |
|                               | the metadata names a leader for every partition  |                                  |

Each count's goal text also gives the consumer's records/s (one consumer assigned every partition, reading the
topic from its start) and the producer's p99 acknowledgement latency at a fixed rate spread over every partition.
Each figure carries its curve over the counts (`benchmarks.plots`).

raybroker is the run's broker with `log.partitions.per.process=PER_PROCESS`: a node meant to hold 10,000
partitions hosts as many in each process as its open-file limit lets a process keep open (`actors.open_files`: 3,948
at 20,000; at the default 16 it would start 625 processes, ~61 MiB each). Its memory is
the USS of every Ray worker process of the node (partition hosts, spares, log manager, controller, coordinators)
plus this process, which runs the Kafka listener: everything that serves the topic, as Kafka's one JVM does. Kafka
runs with its heap of `benchmarks.kafka_broker.HEAP`. One run a side per count (10,000 partitions take minutes to
create), the sides' order swapped at each count; each topic is deleted before the next count's. A side that fails at
a count (a client's error or timeout) ends the module there: the figures are those of the largest count both sides
got through, the failure is in every goal text, and the throughput goal is unmet.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from benchmarks.bench_wire import CONSUMER_QUEUE_BACKOFF, PRODUCER_QUEUE
from benchmarks.common import BenchContext, Curves, Figure, percentile, throughput_figure
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.processes import CLIENT_TIMEOUT_S, QUIET, in_process
from benchmarks.side_by_side import beside_kafka

COUNTS = (10, 100, 1_000, 10_000)
QUICK_COUNTS = (10, 100, 1_000)
PER_PROCESS = 10_000
VALUE_BYTES = 100
RECORDS = 1_000_000
QUICK_RECORDS = 200_000
LATENCY_RATE_PER_S = 2_000
LATENCY_SECONDS = 5.0
QUICK_LATENCY_SECONDS = 2.0
LATENCY_TICK_S = 0.01
CREATE_TIMEOUT_S = 900.0
# Seconds at rest before the memory is read, on both sides: what a broker holds once a workload is over, after
# raybroker's processes gave back the heap the workload freed (`actors.heap_trim`, ~3 s after a process comes to rest).
SETTLE_S = 10.0
# librdkafka's largest `socket.timeout.ms`: how long one CreateTopics or CreatePartitions request may take.
SOCKET_TIMEOUT_MS = 300_000
# Partitions a topic is created with, then added by this many at a time (CreatePartitions): Kafka's KRaft controller
# refuses an operation of more than 10,000 metadata records (a topic of 10,000 partitions is 10,001) with
# POLICY_VIOLATION "Unable to perform excessively large batch operation".
CREATE_STEP = 5_000
MIB = 1024 * 1024
PRODUCER = {"acks": "all", "linger.ms": 5, **PRODUCER_QUEUE}


@dataclass(frozen=True, slots=True)
class Point:
    """One side's measurements at one partition count."""

    create_s: float
    produce_rps: float
    consume_rps: float
    p99_ms: float
    bytes_per_partition: float


def run(ctx: BenchContext) -> list[Figure]:
    counts = QUICK_COUNTS if ctx.quick else COUNTS
    records = QUICK_RECORDS if ctx.quick else RECORDS
    latency_s = QUICK_LATENCY_SECONDS if ctx.quick else LATENCY_SECONDS
    points: dict[str, dict[int, Point]] = {"raybroker": {}, "kafka": {}}
    failures: list[str] = []
    with beside_kafka(ctx, {}, broker_properties={"log.partitions.per.process": str(PER_PROCESS)}) as targets:
        kafka_pid = _kafka_pid(targets["kafka"])
        for index, count in enumerate(counts):
            sides = list(targets) if index % 2 == 0 else list(reversed(targets))
            for side in sides:
                memory = _ray_uss if side == "raybroker" else lambda: psutil.Process(kafka_pid).memory_full_info().uss
                try:
                    points[side][count] = _measure(ctx, side, targets[side], count, records, latency_s, memory)
                except RuntimeError as exc:
                    failures.append(f"{side} did not get through {count:,} partitions: {exc}")
                    ctx.progress(f"  {failures[-1]}")
            if failures:
                # A larger count would fail the same way, after minutes more.
                break
    return _figures(points, records, counts[-1], failures)


def _kafka_pid(bootstrap: str) -> int:
    """The pid of the Kafka JVM listening on `bootstrap`'s port."""
    port = int(bootstrap.rsplit(":", 1)[1])
    for connection in psutil.net_connections("tcp"):
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port and connection.pid:
            return connection.pid
    raise RuntimeError(f"no process listens on {bootstrap}")


def _ray_uss() -> int:
    """USS of every Ray worker process of this machine (its title starts with `ray::`) and of this process."""
    total = psutil.Process().memory_full_info().uss
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if cmdline and cmdline[0].startswith("ray::") and process.pid != os.getpid():
            try:
                total += process.memory_full_info().uss
            except psutil.NoSuchProcess:
                continue
    return total


def _measure(
    ctx: BenchContext,
    side: str,
    bootstrap: str,
    count: int,
    records: int,
    latency_s: float,
    memory: Callable[[], int],
) -> Point:
    """One topic of `count` partitions on one side, from its creation to its deletion."""
    topic = f"bench-scaling-{count}-{uuid.uuid4().hex[:8]}"
    before = memory()
    create_s = in_process(create_topic, bootstrap, topic, count)
    produce_s = in_process(produce, bootstrap, topic, count, records)
    latencies = in_process(produce_at_rate, bootstrap, topic, count, latency_s)
    read = records + len(latencies)
    consume_s = in_process(consume, bootstrap, topic, count, read)
    time.sleep(SETTLE_S)
    grown = max(0, memory() - before)
    in_process(delete_topic, bootstrap, topic)
    point = Point(create_s, records / produce_s, read / consume_s, percentile(latencies, 0.99), grown / count)
    ctx.progress(
        f"  {side} {count:,} partitions: created in {create_s:.1f} s, produce {point.produce_rps:,.0f} rec/s, "
        f"consume {point.consume_rps:,.0f} rec/s, p99 {point.p99_ms:.1f} ms, "
        f"{point.bytes_per_partition / 1024:,.1f} KiB/partition"
    )
    return point


def create_topic(bootstrap: str, topic: str, count: int) -> float:
    """Seconds from asking for the topic (in steps of `CREATE_STEP` partitions) until the metadata names a leader for
    each of its `count` partitions."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    # librdkafka gives up on any request after `socket.timeout.ms` (60 s), whatever the admin call's own timeout.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": SOCKET_TIMEOUT_MS, **QUIET})
    admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    start = time.perf_counter()
    created = min(count, CREATE_STEP)
    waits = {"operation_timeout": CREATE_TIMEOUT_S, "request_timeout": CREATE_TIMEOUT_S}
    admin.create_topics([NewTopic(topic, created, 1)], **waits)[topic].result(timeout=CREATE_TIMEOUT_S)
    while created < count:
        created = min(count, created + CREATE_STEP)
        admin.create_partitions([NewPartitions(topic, created)], **waits)[topic].result(timeout=CREATE_TIMEOUT_S)
    while True:
        described = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
        led = 0 if described is None or described.error else sum(p.leader >= 0 for p in described.partitions.values())
        if led == count:
            return time.perf_counter() - start
        if time.perf_counter() - start > CREATE_TIMEOUT_S:
            raise RuntimeError(f"{topic}: {led} of {count} partitions have a leader after {CREATE_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.delete_topics([topic], operation_timeout=CREATE_TIMEOUT_S)[topic].result(timeout=CREATE_TIMEOUT_S)


def produce(bootstrap: str, topic: str, count: int, records: int) -> float:
    """Seconds to write `records` values, partition `i % count` for the i-th, until all are acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER, **QUIET})
    producer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    failures: list[str] = []

    def report(error: object, _: object) -> None:
        if error is not None:
            failures.append(str(error))

    value = b"v" * VALUE_BYTES
    start = time.perf_counter()
    for index in range(records):
        producer.produce(topic, value, partition=index % count, on_delivery=report)
        if index % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if remaining or failures:
        raise RuntimeError(f"{remaining} records unacknowledged, {len(failures)} failed: {failures[:3]}")
    return elapsed


def produce_at_rate(bootstrap: str, topic: str, count: int, seconds: float) -> list[float]:
    """Milliseconds from `produce` to the acknowledgement of each record sent at `LATENCY_RATE_PER_S` for `seconds`,
    spread over the partitions in turn; ascending."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER, **QUIET})
    producer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    latencies: list[float] = []
    failures: list[str] = []
    per_tick = max(1, round(LATENCY_RATE_PER_S * LATENCY_TICK_S))
    value = b"l" * VALUE_BYTES
    sent = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(per_tick):
            stamp = time.perf_counter()

            def report(error: object, _: object, stamp: float = stamp) -> None:
                if error is not None:
                    failures.append(str(error))
                else:
                    latencies.append((time.perf_counter() - stamp) * 1000)

            producer.produce(topic, value, partition=sent % count, on_delivery=report)
            sent += 1
        # Serves acknowledgements until the next tick is due (a poll returns at the first one it serves).
        due = start + sent / LATENCY_RATE_PER_S
        while (wait := due - time.perf_counter()) > 0:
            producer.poll(wait)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    if remaining or failures or len(latencies) != sent:
        raise RuntimeError(f"{remaining} records unacknowledged, {len(failures)} failed: {failures[:3]}")
    return sorted(latencies)


def consume(bootstrap: str, topic: str, count: int, records: int) -> float:
    """Seconds for one consumer assigned every partition to read `records` values from the topic's start."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-scaling-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **CONSUMER_QUEUE_BACKOFF,
            **QUIET,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in range(count)])
        read = 0
        start = time.perf_counter()
        while read < records:
            if time.perf_counter() - start > CLIENT_TIMEOUT_S:
                raise RuntimeError(f"read {read} of {records} records in {CLIENT_TIMEOUT_S:.0f} s")
            # Never more than what is left: a call asking for more waits its whole timeout for the last records.
            for message in consumer.consume(min(10_000, records - read), 1.0):
                if message.error() is not None:
                    raise RuntimeError(f"consumer error: {message.error()}")
                read += 1
        return time.perf_counter() - start
    finally:
        consumer.close()


def _figures(points: dict[str, dict[int, Point]], records: int, goal_count: int, failures: list[str]) -> list[Figure]:
    """The module's figures at the largest count both sides got through; a side that failed at `goal_count` or
    below leaves the throughput goal unmet and its failure in each goal text."""
    ours, kafka = points["raybroker"], points["kafka"]
    counts = sorted(set(ours) & set(kafka))
    largest = counts[-1]
    failed = "".join(f"; {failure}" for failure in failures)

    def curves(title: str, label: str, field: str, scale: float = 1.0) -> Curves:
        lines = {
            side: [(float(count), getattr(measured[count], field) / scale) for count in counts]
            for side, measured in points.items()
        }
        return Curves(title, "partitions", label, lines, log_x=True, log_y=True)

    def each(field: str, fmt: str) -> str:
        return ", ".join(
            f"{count:,}: {format(getattr(ours[count], field), fmt)} vs {format(getattr(kafka[count], field), fmt)}"
            for count in counts
        )

    kafka_name = f"Apache Kafka {KAFKA_VERSION} (same clients)"
    workload = (
        f"{records:,} 100-byte records over every partition; per count, ours vs Kafka: produce rec/s "
        f"{each('produce_rps', ',.0f')}; "
        f"consume rec/s {each('consume_rps', ',.0f')}; p99 ack ms at {LATENCY_RATE_PER_S:,}/s "
        f"{each('p99_ms', '.1f')}; log.partitions.per.process={PER_PROCESS}"
    )
    throughput = throughput_figure(
        "partitions_scaling",
        ours[largest].produce_rps,
        f"rec/s at {largest:,} partitions",
        kafka_name,
        kafka[largest].produce_rps,
        1.0,
        f"ratio >= 1.0 at {goal_count:,} partitions; {workload}{failed}",
        curves("producer throughput", "records/s acknowledged", "produce_rps"),
    )
    reached = largest == goal_count and not failures
    memory_ratio = ours[largest].bytes_per_partition / kafka[largest].bytes_per_partition
    memory = Figure(
        "partitions_scaling_memory",
        ours[largest].bytes_per_partition / 1024,
        f"KiB/partition at {largest:,}",
        f"Apache Kafka {KAFKA_VERSION}'s JVM, measured the same way",
        kafka[largest].bytes_per_partition / 1024,
        memory_ratio,
        f"ratio (ours/Kafka's) <= 1.0; USS grown from before the topic to after its traffic, per partition: "
        f"{each('bytes_per_partition', ',.0f')} bytes{failed}",
        memory_ratio <= 1.0 and reached,
        curves("memory the broker grew by, per partition", "KiB per partition (USS)", "bytes_per_partition", 1024),
    )
    create_ratio = ours[largest].create_s / kafka[largest].create_s
    create = Figure(
        "partitions_scaling_create_s",
        ours[largest].create_s,
        f"s for {largest:,} partitions",
        kafka_name,
        kafka[largest].create_s,
        create_ratio,
        f"report (ours/Kafka's time); until every partition has a leader: {each('create_s', '.2f')} s{failed}",
        None,
        curves("time to create the topic", "seconds", "create_s"),
    )
    return [dataclasses.replace(throughput, met=bool(throughput.met) and reached), memory, create]
