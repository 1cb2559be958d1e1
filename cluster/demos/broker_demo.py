"""`raybroker demo`: the main job on an embedded default — a local Ray, the broker on it, a topic,
producers and consumers — printed step by step.

1. Start an embedded Ray (4 logical CPUs whatever the machine's cores, log forwarding off) and the broker over
   two log dirs in a fresh temporary folder (kept, so its files can be inspected with `dump-log`).
2. Create the topic `page-views` with 4 partitions.
3. Produce page-view events (msgpack values: user, page, latency_ms; keyed by user, so each user's
   events stay in order on one partition) through the idempotent `Producer`.
4. Consume them all back through a `Consumer` in a group, commit, and check that every event came
   back exactly once, in order per partition.
5. Open a Kafka-protocol listener on a free loopback port (in this process) and let an unmodified Kafka client
   (confluent-kafka) create a topic, produce to it and consume it back (`cluster.demos.kafka_client_demo`).
6. Spark over the live partitions (`cluster.demos.spark_demo`): a RayDP session on the same Ray; while a
   producer keeps writing, two Spark reads compute views and mean latency per page, the second one from
   the first's end offsets, showing it sees the new events and none twice.
7. Structured Streaming (`cluster.demos.streaming_demo`): Spark's own Kafka source reads the topic through the
   listener of step 5 while a producer writes, and prints page views per event-time window for a few triggers;
   the last counts must equal what was produced in each window. Spark's Kafka connector comes from the download
   cache (`cluster.downloads`; Maven Central the first time); if it cannot be had, this step is skipped with a
   message.
8. Shut Spark and the broker down cleanly (checkpoints, `.kafka_cleanshutdown`) and stop Ray, then print how
   long each part took.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import ray

from actors.clients.admin import Admin
from actors.clients.broker import start_broker, stop_broker
from actors.clients.consumer import Consumer, ConsumerRecord
from actors.clients.producer import Producer
from actors.clients.serializers import msgpack_deserializer
from cluster.demos.kafka_client_demo import run_kafka_clients
from cluster.demos.page_views import PAGES, USERS
from cluster.protocol.listener import KafkaListener
from cluster.runtime import ensure_ray
from storage.errors import RaybrokerError

TOPIC = "page-views"
PARTITIONS = 4
KAFKA_CLIENT_RECORDS = 10_000


def _events(count: int, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [
        {"user": f"user-{rng.randrange(USERS)}", "page": rng.choice(PAGES), "latency_ms": rng.randrange(5, 400), "n": i}
        for i in range(count)
    ]


def run_broker_demo(
    directory: Path | None = None,
    events: int = 20_000,
    out: TextIO = sys.stdout,
    spark: bool = True,
    streaming: bool = True,
) -> int:
    """Runs the demo (the Spark steps only with `spark`, the streaming one only with `streaming` too); returns 0
    when every check held."""

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", file=out, flush=True)

    started = time.monotonic()
    parts = _PartTimes(started)
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="raybroker-demo-"))
    log_dirs = [root / "logs-a", root / "logs-b"]
    say("starting an embedded Ray cluster")
    started_ray = ensure_ray()
    try:
        say(f"starting the broker over {', '.join(str(d) for d in log_dirs)}")
        start_broker({"log.dirs": ",".join(str(d) for d in log_dirs), "offsets.topic.num.partitions": "1"})
        parts.lap("Ray and broker start")
        admin = Admin()
        say(f"creating topic {TOPIC!r} with {PARTITIONS} partitions")
        admin.create_topic(TOPIC, PARTITIONS)
        sent = _events(events)
        say(f"producing {len(sent)} page-view events (msgpack, keyed by user, lz4)")
        produce_started = time.monotonic()
        with Producer(compression_type="lz4", linger_ms=5) as producer:
            futures = [producer.send(TOPIC, value=event, key=str(event["user"])) for event in sent]
            producer.flush()
            metadata = [future.result() for future in futures]
        produce_s = time.monotonic() - produce_started
        say(f"produced {len(metadata)} events in {produce_s:.2f} s ({len(metadata) / produce_s:,.0f} events/s)")
        per_partition = Counter(meta.partition for meta in metadata)
        say("events per partition: " + ", ".join(f"{p}: {per_partition[p]}" for p in sorted(per_partition)))

        say("consuming them back in group 'demo'")
        consumer = Consumer(group_id="demo", auto_offset_reset="earliest", value_deserializer=msgpack_deserializer)
        consumer.subscribe([TOPIC])
        received: list[ConsumerRecord] = []
        deadline = time.monotonic() + 60
        while len(received) < len(sent) and time.monotonic() < deadline:
            received.extend(consumer.poll(timeout_ms=500))
        consumer.commit()
        consumer.close()
        numbers = sorted(record.value["n"] for record in received)
        in_order = all(
            earlier.offset < later.offset
            for records in _by_partition(received).values()
            for earlier, later in itertools.pairwise(records)
        )
        exactly_once = numbers == list(range(len(sent)))
        say(f"consumed {len(received)} events: exactly once: {exactly_once}, in order per partition: {in_order}")
        latency = [int(record.value["latency_ms"]) for record in received]
        if latency:
            say(f"mean page latency {sum(latency) / len(latency):.1f} ms over {len(latency)} page views")
        for description in admin.describe_topic(TOPIC).partitions:
            say(
                f"  partition {description.partition}: offsets {description.log_start_offset}.."
                f"{description.log_end_offset}, {description.size_bytes} bytes in {description.log_dir}"
            )
        parts.lap("produce and consume")
        with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as listener:
            say(f"opened a Kafka-protocol listener on {listener.bootstrap_servers}")
            wire_ok = run_kafka_clients(listener.bootstrap_servers, KAFKA_CLIENT_RECORDS, say)
            parts.lap("Kafka clients")
            spark_ok = True
            if spark:
                spark_ok = _run_spark_parts(root, listener.bootstrap_servers, streaming, parts, say, out, started)
        say("stopping the broker (checkpoints and clean-shutdown markers are written)")
        stop_broker()
        parts.lap("broker stop")
        say(f"done; the log dirs stay in {root} (try: raybroker dump-log --print-data-log {log_dirs[0]}/*/*.log)")
        say(f"time per part: {parts.summary()}")
        return 0 if exactly_once and in_order and wire_ok and spark_ok else 1
    finally:
        if started_ray:
            ray.shutdown()


class _PartTimes:
    """How long each part of the demo took (parts run one after another), for the summary line at the end."""

    def __init__(self, started: float) -> None:
        self._mark = started
        self.seconds: dict[str, float] = {}

    def lap(self, part: str) -> None:
        """Ends `part` now; the next part starts now."""
        now = time.monotonic()
        self.seconds[part] = now - self._mark
        self._mark = now

    def summary(self) -> str:
        return ", ".join(f"{part} {seconds:.1f} s" for part, seconds in self.seconds.items())


def _run_spark_parts(
    root: Path,
    bootstrap_servers: str,
    streaming: bool,
    parts: _PartTimes,
    say: Callable[[str], None],
    out: TextIO,
    started: float,
) -> bool:
    """Steps 6 and 7: starts Spark (with its Kafka connector for the streaming step), runs the two reads and the
    stream, stops Spark; True when their checks held."""
    # Spark: pyspark and RayDP load only for these steps, which `--no-spark` skips (they need Java).
    from cluster.demos.spark_demo import run_spark_analytics
    from cluster.demos.streaming_demo import run_streaming_counts
    from cluster.spark.session import get_spark, stop_spark

    jvm_log = root / "spark-driver.log"
    connector = " with Spark's Kafka connector (cached, or from Maven Central the first time)" if streaming else ""
    say(
        f"starting Spark on Ray (RayDP: 1 executor, 2 cores){connector} and warming up its Python workers; its "
        f"driver JVM logs to {jvm_log}"
    )
    unavailable: RaybrokerError | None = None
    with _jvm_output_to(jvm_log):
        try:
            session = get_spark(kafka_connector=streaming)
        except RaybrokerError as exc:
            if not streaming:
                raise
            unavailable = exc
            session = get_spark()
    if unavailable is not None:
        say(f"{unavailable.message} (see {jvm_log}); the Structured Streaming step is skipped")
        streaming = False
    parts.lap("Spark start")
    try:
        result = run_spark_analytics(session, TOPIC, out=out, started=started)
        ok = result.contiguous and result.exactly_once
        parts.lap("Spark reads")
        if streaming:
            counts = run_streaming_counts(session, TOPIC, bootstrap_servers, out=out, started=started)
            ok = ok and counts.matches
            parts.lap("Structured Streaming")
    finally:
        say("stopping Spark")
        stop_spark()
    parts.lap("Spark stop")
    return ok


@contextlib.contextmanager
def _jvm_output_to(path: Path) -> Iterator[None]:
    """Points this process's stdout and stderr (file descriptors 1 and 2) at `path` while the block runs.

    The Spark driver JVM that `get_spark` spawns inherits both descriptors and keeps them for its whole life: Ivy's
    resolution report (on stdout), the JVM's log lines (a failed broadcast when a streaming query is stopped
    mid-trigger arrives on stdout), and the native Ray client's ("GcsClient has no Cluster ID set", printed
    before Ray reads `RAY_BACKEND_LOG_LEVEL`, which itself announces the level it set) go to the file instead of
    between the demo's lines. The descriptors are this process's own again when the block ends; the block must
    print nothing of the demo's own.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {descriptor: os.dup(descriptor) for descriptor in (1, 2)}
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for descriptor in saved:
            os.dup2(target, descriptor)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for descriptor, original in saved.items():
            os.dup2(original, descriptor)
            os.close(original)
        os.close(target)


def _by_partition(records: list[ConsumerRecord]) -> dict[int, list[ConsumerRecord]]:
    grouped: dict[int, list[ConsumerRecord]] = {}
    for record in records:
        grouped.setdefault(record.partition, []).append(record)
    return grouped
