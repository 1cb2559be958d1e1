"""The Spark part of `raybroker demo`: analytics over live partitions while a producer keeps writing.

`run_spark_analytics(spark, topic)` (the caller has started Ray, the broker and Spark):

1. A producer thread (`cluster.demos.page_views`) writes page-view events into the topic at a steady rate, and
   keeps writing until step 4 is done.
2. Read 1: Spark reads every partition from the earliest offset to the latest at planning time, decodes the
   values (`valueFormat="msgpack"`) and computes views per page and mean latency, in one query (one read).
3. Read 2, a few seconds later: from read 1's end offsets (`planned_read(df).ending_offsets_json()`) to the
   latest at that time, the same query.
4. The producer stops. Check: read 2 starts exactly where read 1 ended in every partition, and one read over both
   ranges has as many distinct (partition, offset) pairs as reads 1 and 2 together had records: nothing was read
   twice, nothing skipped.

Progress and results are printed with the seconds since the start, as `cluster.demos.broker_demo` does.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cluster.demos.page_views import PAGE_VIEW_SCHEMA, PageViewProducer
from cluster.spark.kafka_source import planned_read, read_topics
from cluster.spark.planning import ReadPlan
from storage.topic_partition import TopicPartition

# Events per second the producer aims at: enough for thousands of records per read, little enough to leave
# the executor's 2 cores to Spark.
DEFAULT_RATE = 2000


@dataclass(frozen=True, slots=True)
class PageStats:
    page: str
    views: int
    mean_latency_ms: float


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    """One read: the offsets it covered and what it computed."""

    start_offsets: dict[TopicPartition, int]
    end_offsets: dict[TopicPartition, int]
    records: int
    first_offsets: dict[int, int]
    last_offsets: dict[int, int]
    pages: tuple[PageStats, ...]
    seconds: float


@dataclass(frozen=True, slots=True)
class SparkAnalyticsResult:
    first: SnapshotResult
    second: SnapshotResult
    produced: int
    distinct_over_both: int

    @property
    def contiguous(self) -> bool:
        """Read 2 started at read 1's end offsets in every partition."""
        return self.second.start_offsets == self.first.end_offsets

    @property
    def exactly_once(self) -> bool:
        """Both reads together held every offset of their ranges once: none twice, none skipped."""
        return self.distinct_over_both == self.first.records + self.second.records


def _snapshot(spark: SparkSession, topic: str, starting_offsets: str) -> tuple[SnapshotResult, ReadPlan]:
    began = time.monotonic()
    df = read_topics(
        spark, topics=topic, startingOffsets=starting_offsets, valueFormat="msgpack", valueSchema=PAGE_VIEW_SCHEMA
    )
    plan = planned_read(df)
    groups = (
        df.groupBy("partition", "page")
        .agg(
            F.count("*").alias("views"),
            F.sum("latency_ms").alias("latency"),
            F.min("offset").alias("first"),
            F.max("offset").alias("last"),
        )
        .collect()
    )
    views: dict[str, int] = {}
    latency: dict[str, int] = {}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for row in groups:
        views[row["page"]] = views.get(row["page"], 0) + row["views"]
        latency[row["page"]] = latency.get(row["page"], 0) + row["latency"]
        first[row["partition"]] = min(first.get(row["partition"], row["first"]), row["first"])
        last[row["partition"]] = max(last.get(row["partition"], row["last"]), row["last"])
    pages = tuple(PageStats(page, views[page], latency[page] / views[page]) for page in sorted(views))
    result = SnapshotResult(
        dict(plan.start_offsets),
        dict(plan.end_offsets),
        sum(views.values()),
        first,
        last,
        pages,
        time.monotonic() - began,
    )
    return result, plan


def _print_snapshot(say: Callable[[str], None], name: str, result: SnapshotResult) -> None:
    ranges = ", ".join(
        f"p{tp[1]} [{result.start_offsets[tp]}, {result.end_offsets[tp]})" for tp in sorted(result.end_offsets)
    )
    say(f"{name}: {result.records} records in {result.seconds:.1f} s, offsets {ranges}")
    say(f"    {'page':<10} {'views':>7} {'mean latency ms':>16}")
    for stats in result.pages:
        say(f"    {stats.page:<10} {stats.views:>7} {stats.mean_latency_ms:>16.1f}")


def run_spark_analytics(
    spark: SparkSession,
    topic: str,
    *,
    rate: int = DEFAULT_RATE,
    warm_up_s: float = 3.0,
    pause_s: float = 3.0,
    out: TextIO = sys.stdout,
    started: float | None = None,
) -> SparkAnalyticsResult:
    """Runs the steps of the module docstring on an existing topic; prints progress to `out`.

    `started` is the `time.monotonic()` the caller's progress lines count from (default: now).
    """
    origin = time.monotonic() if started is None else started

    def say(message: str) -> None:
        print(f"[{time.monotonic() - origin:6.1f}s] {message}", file=out, flush=True)

    producer = PageViewProducer(topic, rate)
    say(f"producing page views into {topic!r} at ~{rate}/s (msgpack: user, page, latency_ms)")
    producer.start()
    try:
        time.sleep(warm_up_s)
        say("Spark read 1: earliest -> latest now, views and mean latency per page")
        first, first_plan = _snapshot(spark, topic, "earliest")
        _print_snapshot(say, "read 1", first)
        time.sleep(pause_s)
        say("Spark read 2: from read 1's end offsets -> latest now (the producer kept writing)")
        second, second_plan = _snapshot(spark, topic, first_plan.ending_offsets_json())
        _print_snapshot(say, "read 2", second)
    finally:
        produced = producer.stop()
    say(f"producer stopped after {produced} events")
    both = read_topics(spark, topics=topic, endingOffsets=second_plan.ending_offsets_json())
    distinct = both.select("partition", "offset").distinct().agg(F.count("*")).collect()[0][0]
    result = SparkAnalyticsResult(first, second, produced, distinct)
    say(
        f"check: read 2 starts where read 1 ended in every partition: {'yes' if result.contiguous else 'NO'}; "
        f"{first.records} + {second.records} records read, {distinct} distinct offsets over both ranges: "
        f"{'none read twice, none skipped' if result.exactly_once else 'MISMATCH'}"
    )
    return result
