"""Kafka Streams under exactly_once_v2 over the Kafka protocol: the same application against raybroker's listener
and against Apache Kafka.

| figure        | what                                                      | baseline                                |
|---------------|-----------------------------------------------------------|-----------------------------------------|
| `streams_eos` | input records/s through Kafka Streams 3.9.1's word count  | Apache Kafka 3.9 (KRaft, one node on    |
|               | (`java/StreamsWordCount.java`: lines split into words,    | loopback), the same application, input  |
|               | re-keyed through a repartition topic, counted in a        | and clients                             |
|               | changelogged store, every count to the output topic;      |                                         |
|               | `processing.guarantee=exactly_once_v2`, commits every     |                                         |
|               | 100 ms), from the application's RUNNING state to the last |                                         |
|               | of its output records read at read_committed              |                                         |

Each input line has 4 words and makes 4 output records, 4 repartition records and 4 changelog records, all written
in the application's transactions (one every 100 ms: AddPartitionsToTxn for the 9 partitions it writes, its
consumer's offsets through AddOffsetsToTxn and TxnOffsetCommit, EndTxn and its markers), and read back at
read_committed from the repartition topic by the application itself. The input (3 partitions) is written before the
application starts; its start (the JVM, the group's first rebalance, which waits `group.initial.rebalance.delay.ms`:
0 on `benchmarks.kafka_broker`'s Kafka, Kafka's default 3 s on the run's broker) is not timed. The application is
the one `tests/cluster/applications/test_kafka_streams.py` crashes. The listener runs in this process over the run's
shared broker, with one `__transaction_state` partition (each is an actor process), as `bench_txn`'s; the clients
(the input's producer, the output's reader, the JVM they start) run in a spawned process of their own per
measurement, the sides alternately, best of N.

Measured with other work running, with 100,000 lines: 8,630 against Kafka's 8,578 input rec/s (ratio
1.01) in one run, 12,834 against 15,364 (0.84) in another. With `--quick`'s 20,000 lines a run lasts a few seconds,
most of them with the JVM's JIT still warming up, and the ratio swings (0.53, 0.66 and 0.98 in three runs).
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.java_build import compile_java
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.processes import QUIET, in_process
from benchmarks.side_by_side import beside_kafka

JAVA_SOURCE = Path(__file__).parent / "java" / "StreamsWordCount.java"
MAIN_CLASS = "StreamsWordCount"
STREAMS_VERSION = "3.9.1"
# Kafka's clients log through slf4j 1.7; without a binding their errors would not reach the application's log.
ARTIFACTS = [("org.apache.kafka", "kafka-streams", STREAMS_VERSION), ("org.slf4j", "slf4j-simple", "1.7.36")]
HEAP = "-Xmx512m"
RUNNING_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 15.0
PARTITIONS = 3
WORDS_PER_LINE = 4
VOCABULARY = [f"w{index:03d}" for index in range(1_000)]
# Goal: at least Apache Kafka's rate with the same application and input.
KAFKA_GOAL_RATIO = 1.0


def run(ctx: BenchContext) -> list[Figure]:
    classpath = compile_java(ctx, JAVA_SOURCE, ARTIFACTS, "Kafka Streams")
    with beside_kafka(ctx, {"transaction.state.log.num.partitions": "1"}) as targets:
        lines = 20_000 if ctx.quick else 100_000
        repeats = 1 if ctx.quick else 2
        best = dict.fromkeys(targets, 0.0)
        for attempt in range(repeats):
            for name, bootstrap in targets.items():
                folder = ctx.scratch(f"streams-{name}")
                best[name] = max(best[name], in_process(streams_client, bootstrap, classpath, str(folder), lines))
            ctx.progress(
                f"  streams_eos {attempt + 1}/{repeats}: {best['raybroker']:,.0f} vs Kafka {best['kafka']:,.0f} "
                f"input rec/s ({lines:,} lines)"
            )
    return [
        throughput_figure(
            "streams_eos",
            best["raybroker"],
            "rec/s",
            f"Apache Kafka {KAFKA_VERSION}, Kafka Streams {STREAMS_VERSION} exactly_once_v2 (same application)",
            best["kafka"],
            KAFKA_GOAL_RATIO,
            f"ratio >= {KAFKA_GOAL_RATIO:g}",
        )
    ]


def streams_client(bootstrap: str, classpath: str, folder: str, lines: int) -> float:
    """Writes `lines` input lines, runs the application until a read_committed consumer has read all its output,
    stops it; input records/s from its RUNNING state to the last output record (see the module docstring)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    suffix = uuid.uuid4().hex[:8]
    input_topic, output_topic, application_id = f"bench-lines-{suffix}", f"bench-counts-{suffix}", f"bench-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    topics = [NewTopic(topic, PARTITIONS, 1) for topic in (input_topic, output_topic)]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(timeout=60)
    rng = random.Random(7)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **QUIET})
    for index in range(lines):
        line = " ".join(rng.choice(VOCABULARY) for _ in range(WORDS_PER_LINE))
        while True:
            try:
                producer.produce(input_topic, value=line.encode(), key=str(index).encode())
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError("the input was not acknowledged within 60 s")

    log_path = Path(folder) / "streams.log"
    arguments = [bootstrap, application_id, input_topic, output_topic, str(Path(folder) / "state")]
    with open(log_path, "wb") as log:
        app = subprocess.Popen(
            ["java", HEAP, "-cp", classpath, MAIN_CLASS, *arguments],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-reader-{suffix}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    try:
        consumer.assign([TopicPartition(output_topic, partition, 0) for partition in range(PARTITIONS)])
        deadline = time.monotonic() + RUNNING_TIMEOUT_S
        while "-> RUNNING" not in log_path.read_text(errors="replace"):
            _check(app, log_path, deadline, "RUNNING")
            time.sleep(0.01)
        start = time.perf_counter()
        expected, read = lines * WORDS_PER_LINE, 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while read < expected:
            read += sum(message.error() is None for message in consumer.consume(10_000, 0.05))
            _check(app, log_path, deadline, f"{expected:,} output records ({read:,} read)")
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
        _stop(app)
    return lines / elapsed


def _check(app: subprocess.Popen[bytes], log_path: Path, deadline: float, waiting_for: str) -> None:
    code = app.poll()
    if code is not None or time.monotonic() > deadline:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        what = f"exited ({code})" if code is not None else "took too long"
        raise RuntimeError(f"the Streams application {what} before {waiting_for}:\n{tail}")


def _stop(app: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the application closes cleanly), then SIGKILL after `STOP_TIMEOUT_S`: the one process started here."""
    if app.poll() is None:
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait()
