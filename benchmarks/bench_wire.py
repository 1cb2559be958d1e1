"""Kafka-protocol benchmarks: the same confluent-kafka client against raybroker's listener and against Apache Kafka.

| figure         | what                                                         | baseline                          |
|----------------|--------------------------------------------------------------|-----------------------------------|
| `wire_produce` | records/s, one Producer into one partition, 100-byte values, | Apache Kafka 3.9 (KRaft, one node |
|                | `acks=1`, every record acknowledged (flush)                  | on loopback), same client/records |
| `wire_fetch`   | MB/s of values, one consumer reading a partition from offset | the same from Kafka               |
|                | 0 to its end (1 GiB of 1 KiB values; 64 MiB with --quick),   |                                   |
|                | `fetch.queue.backoff.ms=10` (see `CONSUMER_QUEUE_BACKOFF`)   |                                   |
| `wire_latency` | p99 ms from `produce` to the consumer's `poll` returning the | the same through Kafka            |
|                | record, 10,000 records/s, producer and consumer in separate  |                                   |
|                | processes; the median of 5 runs a side (2 with --quick), the |                                   |
|                | sides alternating in order; p50 in the goal text             |                                   |

Kafka starts once for the module (`benchmarks.kafka_broker`, fetched from Maven Central on the first run); the
listener runs in this process over the run's shared broker (`KafkaListener`, its own thread and event loop).
Every client runs in a process of its own (spawned), so the client's Python never competes for this process's
GIL with the listener, and both brokers face exactly the same client. The two sides are measured alternately,
best of N for throughputs. Latency stamps each value with CLOCK_MONOTONIC (one clock for every process on the
machine); the producer uses `linger.ms=1` on both sides, so the 10 records of each 1 ms tick leave as one Produce
request (librdkafka's default of 5 ms would be most of the 5 ms budget by itself; with 0 every record is a
request of its own).
"""

from __future__ import annotations

import multiprocessing
import os
import struct
import time
import uuid
from typing import Any, NamedTuple

from benchmarks.common import BenchContext, Figure, percentile
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.processes import CLIENT_TIMEOUT_S, QUIET, in_process, spawn
from benchmarks.side_by_side import beside_kafka

PRODUCE_VALUE_BYTES = 100
FETCH_VALUE_BYTES = 1024
PRODUCE_GOAL_RPS = 1_000_000
LATENCY_RATE_PER_S = 10_000
LATENCY_TICK_S = 0.001
LATENCY_GOAL_P99_MS = 5.0
LATENCY_GOAL_RATIO = 1.0
LATENCY_LINGER_MS = 1
# Latency runs a side, in alternating order (a run is one stream of `duration_s`): the figure is each side's median.
LATENCY_ROUNDS = 5
LATENCY_ROUNDS_QUICK = 2
# The producer's local queue holds a whole run, so `produce` never stops on BufferError and the figure is the
# broker's pace, not the queue's.
PRODUCER_QUEUE = {"queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151}
# librdkafka stops fetching a partition for `fetch.queue.backoff.ms` (1 s by default) whenever its local queue
# passes `queued.max.messages.kbytes` (64 MiB): a broker that serves faster than the Python loop consumes fills it
# and the client then idles a second, which a run of ~1 s measures instead of the broker (0.25-0.71 of Kafka's
# figure with the default, 1.24-1.32 with 10 ms, alternating in one session at load 6-19). Both brokers face the
# same client.
CONSUMER_QUEUE_BACKOFF = {"fetch.queue.backoff.ms": "10"}
_STAMP = struct.Struct(">q")
# The key of the record a latency producer sends, and waits for, before its timed stream: the consumer skips it.
WARM_UP_KEY = b"warm-up"


def _now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def run(ctx: BenchContext) -> list[Figure]:
    with beside_kafka(ctx, {"num.partitions": "1"}) as targets:
        return [_wire_produce(ctx, targets), _wire_fetch(ctx, targets), _wire_latency(ctx, targets)]


def create_topic(bootstrap: str, what: str, client: dict[str, str] | None = None) -> str:
    """A new one-partition topic; `client` adds settings (security) to the AdminClient's."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-wire-{what}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **(client or {})})
    admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=30)[name].result(timeout=60)
    return name


class ClientRun(NamedTuple):
    """One client process's run: its rate, and the share of the run's wall-clock time its Python thread spent on a
    CPU (`time.thread_time`). A share near 1 means the client itself set the pace: its `produce` calls and delivery
    callbacks, or its `consume` calls and the loop over their messages, left it no time to wait for the broker."""

    rate: float
    busy: float


def produce_client(
    bootstrap: str, topic: str, count: int, value_bytes: int, client: dict[str, str] | None = None
) -> ClientRun:
    """Produces `count` random values into partition 0 with acks=1 and waits for every acknowledgement; the rate is
    records/s. `client` adds settings (security) to the Producer's."""
    from confluent_kafka import Producer

    block = os.urandom(4096 + value_bytes)
    values = [block[i % 4096 : i % 4096 + value_bytes] for i in range(count)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", **PRODUCER_QUEUE, **QUIET, **(client or {})})
    failures = 0

    def report(error: Any, _message: Any) -> None:
        nonlocal failures
        if error is not None:
            failures += 1

    produce = producer.produce
    start = time.perf_counter()
    start_cpu = time.thread_time()
    for value in values:
        produce(topic, value, partition=0, on_delivery=report)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    busy = (time.thread_time() - start_cpu) / elapsed
    if remaining or failures:
        raise RuntimeError(f"{failures} records failed, {remaining} unacknowledged")
    return ClientRun(count / elapsed, busy)


def fetch_client(bootstrap: str, topic: str, count: int, client: dict[str, str] | None = None) -> ClientRun:
    """Reads `count` records of partition 0 from offset 0; the rate is MB/s of values (10^6 bytes). `client` adds
    settings (security) to the Consumer's."""
    from confluent_kafka import Consumer, TopicPartition

    group = f"bench-{uuid.uuid4().hex}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            **CONSUMER_QUEUE_BACKOFF,
            **QUIET,
            **(client or {}),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        # The clock starts when the first batch is in (connection, metadata and the first fetch's round trip
        # are start-up, not throughput); that batch is not counted.
        first: list[Any] = []
        deadline = time.perf_counter() + CLIENT_TIMEOUT_S
        while not first and time.perf_counter() < deadline:
            first = consumer.consume(10_000, 1.0)
        start = time.perf_counter()
        start_cpu = time.thread_time()
        received = len(first)
        total_bytes = 0
        while received < count and time.perf_counter() < deadline:
            # Never more than remain: `consume` waits its whole timeout for a count that cannot come.
            for message in consumer.consume(min(10_000, count - received), 1.0):
                if message.error() is not None:
                    raise RuntimeError(str(message.error()))
                received += 1
                total_bytes += len(message.value() or b"")
        elapsed = time.perf_counter() - start
        busy = (time.thread_time() - start_cpu) / elapsed
    finally:
        consumer.close()
    if received < count:
        raise RuntimeError(f"read {received} of {count} records")
    return ClientRun(total_bytes / elapsed / 1e6, busy)


def _latency_consumer(bootstrap: str, topic: str, total: int, ready: Any) -> list[float]:
    """Polls partition 0 from offset 0 until `total` records came; returns each one's latency in ms."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False, **QUIET}
    )
    latencies: list[float] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.poll(0.5)  # connected and fetching before the producer starts
        ready.set()
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(latencies) < total and time.monotonic() < deadline:
            message = consumer.poll(0.1)
            if message is None or message.error() is not None or message.key() == WARM_UP_KEY:
                continue
            latencies.append((_now_ns() - _STAMP.unpack_from(message.value() or b"")[0]) / 1e6)
    finally:
        consumer.close()
    return latencies


def _latency_producer(bootstrap: str, topic: str, total: int, per_tick: int) -> float:
    """Sends `total` stamped records, `per_tick` every millisecond; returns the time its warm-up record took to be
    acknowledged, in ms.

    The timed stream starts once a first record is acknowledged, as the consumer starts fetching before it: a new
    librdkafka producer (2.10 on) whose first `produce` lands while its bootstrap connection's broker-list Metadata
    request is unanswered loses its topic's Metadata request with that connection (it is decommissioned when the
    broker list arrives) and waits `retry.backoff.ms` (100 ms) for it, against either broker. The p99 of a stream
    is its records' latency, not the client's start-up, which the warm-up's own time shows.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": LATENCY_LINGER_MS, **QUIET})
    warm_up_start = time.perf_counter()
    producer.produce(topic, b"", key=WARM_UP_KEY, partition=0)
    if producer.flush(CLIENT_TIMEOUT_S):
        raise RuntimeError("latency producer: the warm-up record was not acknowledged")
    warm_up_ms = (time.perf_counter() - warm_up_start) * 1000
    padding = os.urandom(PRODUCE_VALUE_BYTES - _STAMP.size)
    start = time.perf_counter()
    for tick in range(total // per_tick):
        pause = start + tick * LATENCY_TICK_S - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        for _ in range(per_tick):
            producer.produce(topic, _STAMP.pack(_now_ns()) + padding, partition=0)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("latency producer: records left unacknowledged")
    return warm_up_ms


def _latency_run(bootstrap: str, topic: str, total: int, per_tick: int) -> tuple[list[float], float]:
    """Each record's latency in ms, sorted, and the producer's warm-up record's time to its acknowledgement."""
    ready = multiprocessing.get_context("spawn").Event()
    consumer = spawn(_latency_consumer, bootstrap, topic, total, ready)
    try:
        if not ready.wait(60):
            raise RuntimeError("latency consumer did not start")
        warm_up_ms: float = in_process(_latency_producer, bootstrap, topic, total, per_tick)
        latencies: list[float] = sorted(consumer.result())
    finally:
        consumer.stop()
    if len(latencies) != total:
        raise RuntimeError(f"the consumer got {len(latencies)} of {total} records")
    return latencies, warm_up_ms


def _baseline_name() -> str:
    return f"Apache Kafka {KAFKA_VERSION} (same client)"


def _wire_produce(ctx: BenchContext, targets: dict[str, str]) -> Figure:
    count = 200_000 if ctx.quick else 1_000_000
    repeats = 2 if ctx.quick else 3
    best = dict.fromkeys(targets, ClientRun(0.0, 0.0))
    for attempt in range(repeats):
        for name, bootstrap in targets.items():
            topic = create_topic(bootstrap, "produce")
            best[name] = max(best[name], in_process(produce_client, bootstrap, topic, count, PRODUCE_VALUE_BYTES))
        ctx.progress(
            f"  wire_produce {attempt + 1}/{repeats}: {best['raybroker'].rate:,.0f} vs Kafka "
            f"{best['kafka'].rate:,.0f} rec/s"
        )
    return _client_figure("wire_produce", "rec/s", best, min_rate=PRODUCE_GOAL_RPS)


def _wire_fetch(ctx: BenchContext, targets: dict[str, str]) -> Figure:
    total_bytes = (64 << 20) if ctx.quick else (1 << 30)
    count = total_bytes // FETCH_VALUE_BYTES
    repeats = 2 if ctx.quick else 3
    topics = {}
    for name, bootstrap in targets.items():
        topics[name] = create_topic(bootstrap, "fetch")
        written = in_process(produce_client, bootstrap, topics[name], count, FETCH_VALUE_BYTES)
        ctx.progress(f"  wire_fetch: {total_bytes >> 20} MiB written into {name} ({written.rate:,.0f} rec/s)")
    best = dict.fromkeys(targets, ClientRun(0.0, 0.0))
    for attempt in range(repeats):
        for name, bootstrap in targets.items():
            best[name] = max(best[name], in_process(fetch_client, bootstrap, topics[name], count))
        ctx.progress(
            f"  wire_fetch {attempt + 1}/{repeats}: {best['raybroker'].rate:.0f} vs Kafka {best['kafka'].rate:.0f} MB/s"
        )
    return _client_figure("wire_fetch", "MB/s", best)


def _client_figure(name: str, unit: str, best: dict[str, ClientRun], min_rate: int | None = None) -> Figure:
    """The figure of the client's best runs, raybroker's against Kafka's: met at a ratio of at least 1.0 (and, with
    `min_rate`, at that rate at least), with how busy the client was in each."""
    ours = best["raybroker"].rate
    ratio = ours / best["kafka"].rate
    goal = "ratio >= 1.0" if min_rate is None else f"ratio >= 1.0 and >= {min_rate:,} {unit}"
    return Figure(
        name,
        ours,
        unit,
        _baseline_name(),
        best["kafka"].rate,
        ratio,
        f"{goal} ({_client_busy(best)})",
        ratio >= 1.0 and (min_rate is None or ours >= min_rate),
    )


def _client_busy(best: dict[str, ClientRun]) -> str:
    """How busy the client's Python thread was in each side's best run: a side near 100 % measured its client."""
    return f"client thread busy {best['raybroker'].busy:.0%} of the run, against Kafka {best['kafka'].busy:.0%}"


def _wire_latency(ctx: BenchContext, targets: dict[str, str]) -> Figure:
    duration_s = 1.0 if ctx.quick else 4.0
    rounds = LATENCY_ROUNDS_QUICK if ctx.quick else LATENCY_ROUNDS
    per_tick = round(LATENCY_RATE_PER_S * LATENCY_TICK_S)
    total = round(duration_s / LATENCY_TICK_S) * per_tick
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in targets}
    for index in range(rounds):
        # Each round reverses the order of the last, so neither side always runs on the warmer machine.
        for name in sorted(targets, reverse=index % 2 == 1):
            bootstrap = targets[name]
            latencies, warm_up = _latency_run(bootstrap, create_topic(bootstrap, "latency"), total, per_tick)
            runs[name].append((percentile(latencies, 0.99), percentile(latencies, 0.5), warm_up))
            p99, p50, _ = runs[name][-1]
            ctx.progress(
                f"  wire_latency {index + 1}/{rounds} {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
                f"(warm-up record acknowledged after {warm_up:.1f} ms)"
            )
    median = {name: sorted(found)[len(found) // 2] for name, found in runs.items()}
    ratio = median["raybroker"][0] / median["kafka"][0]
    p99s = {name: ", ".join(f"{p99:.2f}" for p99, _, _ in found) for name, found in runs.items()}
    return Figure(
        "wire_latency",
        median["raybroker"][0],
        "ms p99",
        _baseline_name(),
        median["kafka"][0],
        ratio,
        f"ratio (ours/Kafka's p99) <= {LATENCY_GOAL_RATIO} and p99 < {LATENCY_GOAL_P99_MS:g} ms at "
        f"{LATENCY_RATE_PER_S:,} rec/s; the median run of {rounds} a side, sides alternating (p99s {p99s['raybroker']} "
        f"ms vs Kafka {p99s['kafka']} ms; that run's p50 {median['raybroker'][1]:.2f} ms vs Kafka "
        f"{median['kafka'][1]:.2f} ms, warm-up record {median['raybroker'][2]:.1f} ms vs {median['kafka'][2]:.1f} ms)",
        ratio <= LATENCY_GOAL_RATIO and median["raybroker"][0] < LATENCY_GOAL_P99_MS,
    )
