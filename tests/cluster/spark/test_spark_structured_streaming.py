"""Structured Streaming through Spark's own Kafka source and sink (the connector of the shared session) on
raybroker's Kafka listener, with live producers.

- A windowed count with a watermark on event time into a Parquet sink with a checkpoint, stopped between triggers
  while the producer keeps writing and restarted from the checkpoint: the file sink must hold every produced
  record's window once, with exactly its count and the sum of its sequence numbers (nothing lost, nothing counted
  twice), and the restarted query must start where the stopped one ended.
- `foreachBatch` writing each micro-batch into another raybroker topic through Spark's Kafka sink: read back, every
  source record is there (at-least-once, as Spark promises for its Kafka sink).

The oracle is what confluent-kafka's producer delivered (each record's sequence number, event time and headers).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from actors.clients.admin import Admin
from cluster.protocol.listener import KafkaListener
from tests.cluster.spark.helpers import unique_topic

pytestmark = [pytest.mark.ray, pytest.mark.spark]

PARTITIONS = 2
WINDOW_MS = 1000
RECORDS_PER_WINDOW = 40
# Records arrive out of order within a window (each window's records are shuffled), never by more than one
# window: a watermark delay of two windows drops none of them as late.
WATERMARK_DELAY = "2 seconds"
# A trigger of the windowed query takes ~1.5 s here (~9 s the first): every 3 s leaves a gap between triggers to
# stop the query in.
TRIGGER_INTERVAL = "3 seconds"
# One window's records every 0.25 s: each trigger of the query sees new records.
PRODUCE_INTERVAL_S = 0.25
# Event times an hour back, aligned to 10 s: recent enough for the test broker's 7-day retention.
BASE_MS = (int(time.time() * 1000) - 3_600_000) // 10_000 * 10_000
WAIT_TIMEOUT_S = 90.0
# Each poll of the sink is a Spark job.
SINK_POLL_S = 0.5
STATUS_POLL_S = 0.05
SINK_SCHEMA = "window struct<start: timestamp, end: timestamp>, records long, seq_sum long"

# (sequence number, event time ms) of one delivered record.
Event = tuple[int, int]


@pytest.fixture(scope="module")
def listener(spark_broker: Any) -> Iterator[KafkaListener]:
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


def new_topic(prefix: str) -> str:
    topic = unique_topic(prefix)
    Admin().create_topic(topic, PARTITIONS, {})
    return topic


def kafka_producer(servers: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": servers, "linger.ms": "5"})


def produce(producer: Any, topic: str, events: list[Event], headers: bool = False) -> None:
    """Produces one record per event (`record`; its timestamp is the event time) and waits until all are
    delivered."""
    errors: list[Any] = []
    for seq, timestamp in events:
        key, value, record_headers = record(seq, headers)
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=seq % PARTITIONS,
            timestamp=timestamp,
            headers=list(record_headers) or None,
            on_delivery=lambda error, _message: errors.append(error) if error is not None else None,
        )
    assert producer.flush(30) == 0
    assert errors == []


def record(seq: int, headers: bool = False) -> tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]:
    """The key, value and headers `produce` sends for sequence number `seq`: every 7th key null, the value the
    number, and with `headers` a header on every 3rd record."""
    key = None if seq % 7 == 0 else f"k{seq % 5}".encode()
    return key, str(seq).encode(), (("seq", str(seq).encode()),) if headers and seq % 3 == 0 else ()


class WindowProducer:
    """A thread producing one window's worth of records (shuffled: out of order within the window) every
    `PRODUCE_INTERVAL_S`, until stopped; `delivered` is every record it produced."""

    def __init__(self, servers: str, topic: str) -> None:
        self._producer = kafka_producer(servers)
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="window-producer", daemon=True)
        self._random = random.Random(17)
        self.delivered: list[Event] = []

    def __enter__(self) -> WindowProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            first = len(self.delivered)
            window = [
                (seq, BASE_MS + seq * WINDOW_MS // RECORDS_PER_WINDOW)
                for seq in range(first, first + RECORDS_PER_WINDOW)
            ]
            self._random.shuffle(window)
            produce(self._producer, self._topic, window)
            self.delivered.extend(sorted(window))
            self._stop.wait(PRODUCE_INTERVAL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.close()


def wait_until(condition: Callable[[], bool], what: str, poll_s: float = SINK_POLL_S) -> None:
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


def triggers_with_input(query: Any) -> int:
    return sum(1 for progress in query.recentProgress if progress["numInputRows"] > 0)


def source_offsets(progress: dict[str, Any], key: str) -> Any:
    """A progress report's start or end offsets of its one source (Spark's offsets JSON, parsed)."""
    offsets = progress["sources"][0][key]
    return json.loads(offsets) if isinstance(offsets, str) else offsets


def stop_between_triggers(query: Any) -> None:
    """Stops `query` while no trigger runs (best effort: a trigger may start in between; the checkpoint and the file
    sink's log make a stop at any moment safe, which is what is tested)."""
    wait_until(lambda: not query.status["isTriggerActive"], "the end of a trigger", STATUS_POLL_S)
    query.stop()


def test_a_windowed_count_with_a_watermark_stopped_between_triggers_restarts_from_its_checkpoint_exactly_once(
    spark: Any, listener: KafkaListener, tmp_path: Path
) -> None:
    """Slow (~12 s): two streaming queries, one stopped and one restarted from its checkpoint, each through Spark's
    Kafka source and several triggers of ~1.5 s."""
    servers = listener.bootstrap_servers
    topic = new_topic("windows")
    output, checkpoint = tmp_path / "windows", tmp_path / "checkpoint"
    shuffle_partitions = spark.conf.get("spark.sql.shuffle.partitions")

    def start_query() -> Any:
        # One state partition instead of the session's 2: a trigger took ~1.5 s instead of ~2.5 s here. A query
        # takes the session's settings when it starts (later ones: from its checkpoint).
        spark.conf.set("spark.sql.shuffle.partitions", "1")
        try:
            return windowed_counts().start()
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", shuffle_partitions)

    def windowed_counts() -> Any:
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .select("timestamp", F.col("value").cast("string").cast("long").alias("seq"))
            .withWatermark("timestamp", WATERMARK_DELAY)
            .groupBy(F.window("timestamp", f"{WINDOW_MS} milliseconds"))
            .agg(F.count("*").alias("records"), F.sum("seq").alias("seq_sum"))
            .writeStream.format("parquet")
            .outputMode("append")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=TRIGGER_INTERVAL)
        )

    def sink() -> dict[int, tuple[int, int]]:
        """What the Parquet sink holds (its committed files only): window start ms -> (records, sum of seq)."""
        if not output.exists():
            return {}
        written = spark.read.schema(SINK_SCHEMA).parquet(str(output))
        collected = written.select(F.unix_millis("window.start").alias("start"), "records", "seq_sum").collect()
        windows = {row["start"]: (row["records"], row["seq_sum"]) for row in collected}
        assert len(windows) == len(collected), "a window was written twice"
        return windows

    queries: list[Any] = []
    try:
        with WindowProducer(servers, topic) as producer:
            queries.append(start_query())
            first = queries[0]
            wait_until(lambda: triggers_with_input(first) >= 2, "2 triggers with input", STATUS_POLL_S)
            stop_between_triggers(first)
            assert first.exception() is None
            stopped_at = source_offsets(first.lastProgress, "endOffset")
            # The producer keeps writing while no query runs.
            time.sleep(1.0)
            queries.append(start_query())
            second = queries[1]
            wait_until(lambda: triggers_with_input(second) >= 1, "a trigger after the restart", STATUS_POLL_S)
        # Append mode writes a window once the watermark (latest event time - delay) passed its end: a last
        # record far ahead in event time closes every window produced so far (its own stays open).
        with closing(kafka_producer(servers)) as last:
            produce(last, topic, [(len(producer.delivered), producer.delivered[-1][1] + 10 * WINDOW_MS)])
        expected: dict[int, tuple[int, int]] = {}
        for seq, timestamp in producer.delivered:
            start = timestamp // WINDOW_MS * WINDOW_MS
            records, seq_sum = expected.get(start, (0, 0))
            expected[start] = (records + 1, seq_sum + seq)
        wait_until(lambda: len(sink()) >= len(expected), f"the sink to hold {len(expected)} windows")
    finally:
        for query in queries:
            query.stop()
    assert second.exception() is None
    assert source_offsets(second.recentProgress[0], "startOffset") == stopped_at
    assert sink() == expected
    assert sum(records for records, _ in expected.values()) == len(producer.delivered) >= 5 * RECORDS_PER_WINDOW


def test_foreach_batch_writes_every_micro_batch_into_a_raybroker_topic_through_sparks_kafka_sink(
    spark: Any, listener: KafkaListener, tmp_path: Path
) -> None:
    servers = listener.bootstrap_servers
    source, target = new_topic("foreach-source"), new_topic("foreach-target")
    events = [(seq, BASE_MS + seq) for seq in range(300)]
    with closing(kafka_producer(servers)) as kafka:
        produce(kafka, source, events, headers=True)
    batch_ids: list[int] = []

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch_ids.append(batch_id)
        (
            batch.select("key", "value", "headers")
            .write.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("topic", target)
            .save()
        )

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", "150")
        .load()
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(WAIT_TIMEOUT_S)
    assert query.exception() is None
    assert len(batch_ids) >= 2

    written = Counter(
        (
            None if row.key is None else bytes(row.key),
            bytes(row.value),
            tuple((header.key, bytes(header.value)) for header in row.headers or ()),
        )
        for row in (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", target)
            .option("includeHeaders", "true")
            .load()
            .select("key", "value", "headers")
            .collect()
        )
    )
    produced = {record(seq, headers=True) for seq, _ in events}
    assert set(written) == produced
    assert sum(written.values()) >= len(events)
