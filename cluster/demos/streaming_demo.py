"""The Structured Streaming part of `raybroker demo`: Spark's own Kafka source, over raybroker's Kafka listener,
counts page views per event-time window while a producer keeps writing; the counts are checked against what was
sent.

`run_streaming_counts(spark, topic, bootstrap_servers)` (the caller has started Ray, the broker, a Kafka listener
and Spark with its Kafka connector, `get_spark(kafka_connector=True)`):

1. The query starts at the topic's current end offsets (Spark's per-partition offsets JSON), so it counts exactly
   the events produced from then on; its first trigger (empty) pays its start-up before the producer starts.
2. `spark.readStream.format("kafka")`, a watermark on the record timestamp, `groupBy(window(timestamp))` and a
   count, in update mode with a trigger every few seconds; `foreachBatch` prints the windows each trigger updated.
   The event time is the Kafka record's timestamp, which the producer sets (`cluster.demos.page_views`).
3. The producer writes for a few seconds and stops; the query runs until it has read up to the topic's end
   offsets, then stops.
4. Check: the last count printed for each window equals the number of events the producer sent with a timestamp
   in that window: none lost, none counted twice.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from actors.clients.admin import Admin
from cluster.demos.page_views import PageViewProducer

DEFAULT_RATE = 2000
DEFAULT_WINDOW_S = 4
DEFAULT_TRIGGER_S = 2
DEFAULT_PRODUCE_S = 10.0
# State for a window is dropped once the watermark (the latest event time seen, less this delay) passes its end.
# Events are appended within milliseconds of their timestamp, so 10 s never drops one as late here; it only
# bounds the query's state.
WATERMARK_DELAY = "10 seconds"
# How long the query may take to read the last events after the producer stopped.
CATCH_UP_TIMEOUT_S = 60.0
CATCH_UP_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class StreamingCountsResult:
    """Per window (its start, epoch ms): the events produced and the last count the stream printed; `error` says
    why the query did not finish (it failed, or did not catch up in time)."""

    produced: dict[int, int]
    counted: dict[int, int]
    triggers: int
    seconds: float
    error: str | None = None

    @property
    def matches(self) -> bool:
        return self.error is None and self.counted == self.produced


def end_offsets(topic: str) -> dict[str, int]:
    """Each partition's log end offset, keyed as Spark's offsets JSON keys partitions."""
    return {str(p.partition): p.log_end_offset for p in Admin().describe_topic(topic).partitions}


def _clock(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000).strftime("%H:%M:%S")


def _read_up_to(query: Any, topic: str, offsets: dict[str, int]) -> bool:
    """Waits until a finished trigger of `query` has read `topic` up to `offsets` (its sink is done with it)."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < deadline and query.isActive:
        progress = query.lastProgress
        if progress is not None:
            reached = progress["sources"][0]["endOffset"]
            if isinstance(reached, str):
                reached = json.loads(reached)
            if reached.get(topic) == offsets:
                return True
        time.sleep(CATCH_UP_POLL_S)
    return False


def _first_trigger_done(query: Any) -> bool:
    """Waits until `query` finished its first trigger, which reads nothing (it starts at the end offsets) but pays
    the query's start-up (~10 s here: planning, code generation, the executor's Kafka consumers); the producer
    starts after it, so that the triggers that count events come at the trigger interval."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < deadline and query.isActive:
        if query.lastProgress is not None:
            return True
        time.sleep(CATCH_UP_POLL_S)
    return False


def run_streaming_counts(
    spark: SparkSession,
    topic: str,
    bootstrap_servers: str,
    *,
    rate: int = DEFAULT_RATE,
    window_s: int = DEFAULT_WINDOW_S,
    trigger_s: int = DEFAULT_TRIGGER_S,
    produce_s: float = DEFAULT_PRODUCE_S,
    out: TextIO = sys.stdout,
    started: float | None = None,
) -> StreamingCountsResult:
    """Runs the steps of the module docstring on an existing topic; prints progress to `out`.

    `started` is the `time.monotonic()` the caller's progress lines count from (default: now).
    """
    began = time.monotonic()
    origin = began if started is None else started

    def say(message: str) -> None:
        print(f"[{time.monotonic() - origin:6.1f}s] {message}", file=out, flush=True)

    window_ms = window_s * 1000
    counted: dict[int, int] = {}
    triggers = 0

    def print_trigger(batch: DataFrame, batch_id: int) -> None:
        nonlocal triggers
        rows = batch.select(F.unix_millis("window.start").alias("start_ms"), "views").collect()
        if not rows:
            return
        triggers += 1
        updated = sorted((row["start_ms"], row["views"]) for row in rows)
        counted.update(updated)
        windows = ", ".join(f"[{_clock(start)}, {_clock(start + window_ms)}) {views}" for start, views in updated)
        say(f"  trigger {batch_id}: views per window {windows}")

    starting = end_offsets(topic)
    say(
        f"Structured Streaming: Spark's Kafka source on {bootstrap_servers}, {topic!r} from offsets "
        f"{json.dumps(starting)}, page views per {window_s} s window (watermark {WATERMARK_DELAY}), "
        f"a trigger every {trigger_s} s"
    )
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: starting}))
        .load()
        .withWatermark("timestamp", WATERMARK_DELAY)
        .groupBy(F.window("timestamp", f"{window_s} seconds"))
        .agg(F.count("*").alias("views"))
        .writeStream.outputMode("update")
        .foreachBatch(print_trigger)
        .trigger(processingTime=f"{trigger_s} seconds")
        .start()
    )
    producer = PageViewProducer(topic, rate)
    try:
        if _first_trigger_done(query):
            say("the query's first trigger ran (no events yet): Spark compiled it and started its Kafka consumers")
        say(f"producing page views into {topic!r} at ~{rate}/s for {produce_s:.0f} s while the query runs")
        producer.start()
        try:
            time.sleep(produce_s)
        finally:
            producer.stop()
        final = end_offsets(topic)
        say(f"producer stopped after {producer.sent} events; waiting for the query to read up to {json.dumps(final)}")
        caught_up = _read_up_to(query, topic, final)
    finally:
        query.stop()
    failure = query.exception()
    produced = dict(Counter(timestamp // window_ms * window_ms for timestamp in producer.timestamps_ms))
    error = None if failure is None else f"the query failed: {failure}"
    if error is None and not caught_up:
        error = f"the query did not read up to the end offsets within {CATCH_UP_TIMEOUT_S:.0f} s"
    result = StreamingCountsResult(produced, counted, triggers, time.monotonic() - began, error)
    verdict = "every window's last count equals the events sent in it" if result.matches else "MISMATCH"
    if error is not None:
        verdict = f"{error}: {verdict}"
    say(
        f"check: {sum(produced.values())} events sent in {len(produced)} windows, {sum(counted.values())} counted "
        f"over {triggers} triggers: {verdict}"
    )
    return result
