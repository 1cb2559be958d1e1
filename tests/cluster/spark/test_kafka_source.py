"""`cluster.spark.kafka_source` (with `planning` and `reading` under it) against a real broker and a real RayDP Spark
session: what Spark reads equals what was written (the oracle), for every option of Spark's Kafka source that
raybroker supports."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import Counter
from typing import Any

import pytest

from actors.clients.admin import Admin
from actors.clients.consumer import Consumer
from cluster.records import range_reading
from cluster.records.offset_ranges import OffsetRange
from cluster.records.range_reading import read_ranges
from cluster.spark.kafka_source import planned_read, read_plan, read_topics
from cluster.spark.planning import plan_read
from cluster.spark.segment_source import LOCATE_MAX_BYTES, LOCATE_MAX_SLICES
from storage.errors import InvalidRequestError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from storage.records.compression import CompressionType
from tests.cluster.spark.helpers import Produced, append, unique_topic

pytestmark = [pytest.mark.ray, pytest.mark.spark]

# Recent: the test broker runs retention (7 days by default) every 500 ms, and would delete older records.
BASE_MS = int(time.time() * 1000) - 3_600_000


def records(count: int, tag: str, *, start_ms: int = BASE_MS, step_ms: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "key": None if i % 7 == 0 else f"{tag}-k{i % 5}".encode(),
            "value": None if i % 11 == 0 else f"{tag}-v{i}".encode() * (1 + i % 3),
            "timestamp": start_ms + i * step_ms,
            "headers": (("trace", f"{i}".encode()), ("empty", None)) if i % 4 == 0 else (),
        }
        for i in range(count)
    ]


def make_topic(partitions: int, prefix: str = "t", config: dict[str, str] | None = None) -> str:
    name = unique_topic(prefix)
    Admin().create_topic(name, partitions, config or {})
    return name


def fill(broker: Any, topic: str, partitions: int, batches: int, per_batch: int) -> list[Produced]:
    codecs = list(CompressionType)
    produced: list[Produced] = []
    for index in range(batches):
        for partition in range(partitions):
            produced += append(
                broker,
                topic,
                partition,
                records(per_batch, f"{partition}-{index}", start_ms=BASE_MS + index * 1000),
                compression=codecs[index % len(codecs)],
            )
    return produced


def rows(df: Any) -> list[tuple[Any, ...]]:
    """Every row as a plain tuple, through Arrow (`toPandas`), sorted by (topic, partition, offset)."""
    table = df.toPandas()
    out = []
    for row in table.itertuples(index=False):
        headers = getattr(row, "headers", None)
        out.append(
            (
                row.topic,
                int(row.partition),
                int(row.offset),
                int(row.timestamp.value // 1_000_000),
                int(row.timestampType),
                None if row.key is None else bytes(row.key),
                None if row.value is None else bytes(row.value),
                None if headers is None else tuple((h["key"], h["value"]) for h in headers),
            )
        )
    return sorted(out)


def oracle(produced: list[Produced], headers: bool = True) -> list[tuple[Any, ...]]:
    return sorted(
        (
            p.topic,
            p.partition,
            p.offset,
            p.timestamp,
            0,
            p.key,
            p.value,
            (p.headers or None) if headers else None,
        )
        for p in produced
    )


@pytest.fixture(scope="module")
def filled(spark_broker: Any) -> tuple[str, list[Produced]]:
    """3 partitions, 5 batches each (every codec), with null keys and values and headers."""
    topic = make_topic(3)
    return topic, fill(spark_broker, topic, 3, batches=5, per_batch=40)


@pytest.fixture(scope="module")
def offsets_topic(spark_broker: Any) -> str:
    """2 partitions of 50 records each, one second apart (offset n has timestamp BASE_MS + n s)."""
    topic = make_topic(2, "offsets")
    for partition in range(2):
        append(spark_broker, topic, partition, records(50, "o", step_ms=1000))
    return topic


def test_a_read_returns_every_record_with_its_offset_timestamp_key_value_and_headers(
    spark: Any, filled: tuple[str, list[Produced]]
) -> None:
    topic, produced = filled
    df = read_topics(spark, topics=topic, includeHeaders=True)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert rows(df) == oracle(produced)
    expected = Counter(p.partition for p in produced)
    plan = planned_read(df)
    assert plan.end_offsets == {(topic, p): expected[p] for p in range(3)}
    assert plan.start_offsets == {(topic, p): 0 for p in range(3)}


def test_sql_aggregates_equal_the_oracle(spark: Any, filled: tuple[str, list[Produced]]) -> None:
    topic, produced = filled
    read_topics(spark, topics=[topic]).createOrReplaceTempView("agg_view")
    result = spark.sql(
        "SELECT partition, count(*) AS n, sum(offset) AS s, min(offset) AS lo, max(offset) AS hi, "
        "min(timestamp) AS t0, max(timestamp) AS t1, count(key) AS keys, sum(length(value)) AS bytes "
        "FROM agg_view GROUP BY partition ORDER BY partition"
    ).collect()
    assert [row["partition"] for row in result] == [0, 1, 2]
    for row in result:
        mine = [p for p in produced if p.partition == row["partition"]]
        offsets = [p.offset for p in mine]
        assert (row["n"], row["s"], row["lo"], row["hi"]) == (len(mine), sum(offsets), min(offsets), max(offsets))
        assert int(row["t0"].timestamp() * 1000) == min(p.timestamp for p in mine)
        assert int(row["t1"].timestamp() * 1000) == max(p.timestamp for p in mine)
        assert row["keys"] == sum(p.key is not None for p in mine)
        assert row["bytes"] == sum(len(p.value) for p in mine if p.value is not None)


def offsets_of(df: Any) -> list[tuple[int, int]]:
    table = df.select("partition", "offset").toPandas()
    return sorted(zip(table["partition"].tolist(), table["offset"].tolist(), strict=True))


def test_reads_while_producing_are_snapshots_and_consecutive_reads_neither_skip_nor_repeat(
    spark: Any, spark_broker: Any
) -> None:
    topic = make_topic(3)
    produced: list[Produced] = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce() -> None:
        batch = 0
        while not stop.is_set():
            for partition in range(3):
                written = append(spark_broker, topic, partition, records(10, f"live{batch}"))
                with lock:
                    produced.extend(written)
            batch += 1
            time.sleep(0.005)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        deadline = time.monotonic() + 30
        while len(produced) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = read_topics(spark, topics=topic)
        first_plan = planned_read(first)
        seen_first = offsets_of(first)
        assert len(seen_first) == first.count() == first_plan.offset_count
        assert all(offset < first_plan.end_offsets[(topic, partition)] for partition, offset in seen_first)
        second = read_topics(spark, topics=topic, startingOffsets=first_plan.ending_offsets_json())
        second_plan = planned_read(second)
        seen_second = offsets_of(second)
        assert second_plan.start_offsets == first_plan.end_offsets
    finally:
        stop.set()
        producer.join()
    third = read_topics(spark, topics=topic, startingOffsets=second_plan.ending_offsets_json())
    everything = seen_first + seen_second + offsets_of(third)
    assert len(everything) == len(set(everything))
    assert sorted(everything) == sorted((p.partition, p.offset) for p in produced)
    assert seen_second, "the producer wrote nothing between the first and second reads"


def test_starting_and_ending_offsets_as_json_earliest_and_latest(spark: Any, offsets_topic: str) -> None:
    topic = offsets_topic
    df = read_topics(
        spark,
        topics=topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
        endingOffsets={topic: {"0": -1, "1": 20}},
    )
    assert offsets_of(df) == [(0, o) for o in range(10, 50)] + [(1, o) for o in range(20)]
    assigned = read_topics(spark, assign={topic: [1]}, endingOffsets={topic: {"1": 5}})
    assert offsets_of(assigned) == [(1, o) for o in range(5)]
    assert plan_read(topics=topic, startingOffsets="latest").ranges == ()


@pytest.mark.parametrize(
    "options",
    [
        lambda t: {"startingOffsets": {t: {"0": 1}}},
        lambda t: {"endingOffsets": "earliest"},
        lambda t: {"endingOffsets": {t: {"0": -2, "1": -1}}},
        lambda t: {"endingOffsets": {t: {"0": 51, "1": -1}}},
        lambda t: {"startingOffsets": {t: {"0": 30, "1": 0}}, "endingOffsets": {t: {"0": 20, "1": -1}}},
        lambda t: {"startingOffsets": "{not json"},
        lambda t: {"minPartitions": 0},
        lambda t: {"startingOffsetsByTimestampStrategy": "none"},
    ],
    ids=[
        "json-misses-a-partition",
        "ends-earliest",
        "ends-at-minus-2",
        "ends-past-latest",
        "starts-after-end",
        "bad-json",
        "min-partitions-0",
        "unknown-strategy",
    ],
)
def test_invalid_options_are_refused_when_planning(offsets_topic: str, options: Any) -> None:
    topic = offsets_topic
    with pytest.raises(InvalidRequestError):
        plan_read(topics=topic, **options(topic))
    with pytest.raises(InvalidRequestError):
        plan_read(topics=topic, assign={topic: [0]})


def test_unknown_topics_and_partitions_are_refused(offsets_topic: str) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        plan_read(topics="no-such-topic")
    with pytest.raises(UnknownTopicOrPartitionError):
        plan_read(assign={offsets_topic: [3]})
    with pytest.raises(InvalidRequestError):
        plan_read()


def test_starting_and_ending_timestamps_select_the_records_in_between(spark: Any, offsets_topic: str) -> None:
    topic = offsets_topic
    df = read_topics(spark, topics=topic, startingTimestamp=BASE_MS + 10_000, endingTimestamp=BASE_MS + 20_500)
    assert offsets_of(df) == [(p, o) for p in range(2) for o in range(10, 21)]
    by_partition = plan_read(
        topics=topic,
        startingOffsetsByTimestamp={topic: {"0": BASE_MS + 5_000, "1": BASE_MS}},
        endingTimestamp=BASE_MS + 10**9,
    )
    assert by_partition.start_offsets == {(topic, 0): 5, (topic, 1): 0}
    assert by_partition.end_offsets == {(topic, 0): 50, (topic, 1): 50}
    future = BASE_MS + 10**9
    with pytest.raises(InvalidRequestError, match="timestamp"):
        plan_read(topics=topic, startingTimestamp=future)
    assert plan_read(topics=topic, startingTimestamp=future, startingOffsetsByTimestampStrategy="latest").ranges == ()


def test_min_partitions_splits_big_partitions_and_reads_the_same_records(spark: Any, spark_broker: Any) -> None:
    topic = make_topic(2)
    append(spark_broker, topic, 0, records(300, "big"))
    append(spark_broker, topic, 1, records(20, "small"))
    whole = read_topics(spark, topics=topic)
    split = read_topics(spark, topics=topic, minPartitions=8)
    plan = planned_read(split)
    assert len(planned_read(whole).ranges) == 2 and len(plan.ranges) >= 8
    for partition, end in ((0, 300), (1, 20)):
        pieces = sorted((r.start, r.end) for r in plan.ranges if r.partition == partition)
        assert pieces[0][0] == 0 and pieces[-1][1] == end
        assert all(left[1] == right[0] for left, right in itertools.pairwise(pieces))
    assert split.rdd.getNumPartitions() == len(plan.tasks) >= 8
    assert rows(split) == rows(whole)


def test_a_read_of_several_topics_gives_each_record_its_own_topic(spark: Any, spark_broker: Any) -> None:
    """Three partitions of two topics in two Spark tasks: a task decodes the fetches of both topics together."""
    first, second = make_topic(2, "pair"), make_topic(1, "pair")
    produced = fill(spark_broker, first, 2, batches=2, per_batch=30)
    produced += fill(spark_broker, second, 1, batches=3, per_batch=20)
    df = read_topics(spark, topics=[first, second], includeHeaders=True)
    assert len(planned_read(df).tasks) < len(planned_read(df).ranges)
    assert rows(df) == oracle(produced)


def arrow_rows(batches: list[Any]) -> list[tuple[Any, ...]]:
    """The rows of Arrow batches as `rows` gives a DataFrame's, sorted."""
    out = []
    for batch in batches:
        micros = batch.column("timestamp").cast("int64").to_pylist()
        for row, timestamp_us in zip(batch.to_pylist(), micros, strict=True):
            headers = row["headers"]
            out.append(
                (
                    row["topic"],
                    row["partition"],
                    row["offset"],
                    timestamp_us // 1000,
                    row["timestampType"],
                    row["key"],
                    row["value"],
                    None if headers is None else tuple((h["key"], h["value"]) for h in headers),
                )
            )
    return sorted(out)


@pytest.mark.parametrize("group_bytes", [1, range_reading.DECODE_GROUP_BYTES], ids=["fetch-by-fetch", "grouped"])
def test_read_ranges_of_many_fetches_gives_every_record_of_its_ranges_once(
    spark_broker: Any, monkeypatch: pytest.MonkeyPatch, group_bytes: int
) -> None:
    """Fetches of one batch each (the smallest fetch size), decoded one by one or across ranges together: ranges of
    two topics, one partition split where a batch is cut in two, one range starting inside a batch."""
    monkeypatch.setattr(range_reading, "DECODE_GROUP_BYTES", group_bytes)
    monkeypatch.setattr(range_reading, "MIN_FETCH_BYTES", 1)
    monkeypatch.setattr(range_reading, "FIRST_FETCH_BYTES_PER_RECORD", 1)
    first, second = make_topic(2, "many"), make_topic(1, "many")
    produced = fill(spark_broker, first, 2, batches=5, per_batch=40)
    produced += fill(spark_broker, second, 1, batches=3, per_batch=25)
    ranges = [
        OffsetRange(first, 0, 0, 70),
        OffsetRange(first, 0, 70, 200),
        OffsetRange(first, 1, 13, 150),
        OffsetRange(second, 0, 0, 75),
    ]
    wanted = [
        p
        for p in produced
        if any((r.topic, r.partition) == (p.topic, p.partition) and r.start <= p.offset < r.end for r in ranges)
    ]
    assert arrow_rows(list(read_ranges(ranges, include_headers=True))) == oracle(wanted)


def test_a_compacted_topic_reads_the_surviving_records_with_their_offset_gaps(spark: Any, spark_broker: Any) -> None:
    from actors.calls import call

    topic = make_topic(
        1, "compact", {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
    )
    for index in range(30):
        append(
            spark_broker,
            topic,
            0,
            [
                {"key": f"k{i}".encode(), "value": f"v{index}-{i}".encode(), "timestamp": BASE_MS + index}
                for i in range(4)
            ],
        )
    # Made before the cleaning: the JVM reader has located the segments that the cleaning then rewrites.
    located_before = read_topics(spark, topics=topic)
    handle = spark_broker.partition(topic, 0)
    found = call(handle.cleanable.remote(None))
    if found is not None:
        call(handle.clean.remote(found.first_dirty_offset, found.first_uncleanable_offset))
    with Consumer(spark_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        expected: list[tuple[int, bytes, bytes]] = []
        while consumer.position((topic, 0)) < 120:
            expected += [(r.offset, r.key, r.value) for r in consumer.poll(timeout_ms=1000)]
    df = read_topics(spark, topics=topic)
    table = df.select("offset", "key", "value").toPandas()
    got = sorted(
        zip(table["offset"], (bytes(k) for k in table["key"]), (bytes(v) for v in table["value"]), strict=True)
    )
    assert got == sorted(expected)
    assert sorted(int(row.offset) for row in located_before.select("offset").collect()) == [o for o, _, _ in got]
    assert len(got) < 120, "compaction removed nothing"
    assert {key: value for _, key, value in got} == {f"k{i}".encode(): f"v29-{i}".encode() for i in range(4)}


def test_records_compaction_merged_into_a_segment_empty_when_located_are_read(spark: Any, spark_broker: Any) -> None:
    """A first cleaning pass empties the oldest segment; after the read is planned a second pass merges it with
    the next segment and deletes that one: the records it held are in the first one's file, located as no slice at
    all (it was empty). The broker's own cleaner never qualifies the topic (dirty ratio 1.0): the passes are the
    test's."""
    from actors.calls import call

    topic = make_topic(
        1, "merged", {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "1.0"}
    )
    handle = spark_broker.partition(topic, 0)

    def append_batches(indexes: range, prefix: str) -> None:
        for index in indexes:
            batch = [
                {"key": f"{prefix}{i}".encode(), "value": f"v{index}-{i}".encode(), "timestamp": BASE_MS + index}
                for i in range(4)
            ]
            append(spark_broker, topic, 0, batch)

    # Two segments of "k" keys (the first then emptied by the "k" keys of the second), rolled by an "m" batch.
    append_batches(range(17), "k")
    append_batches(range(17, 18), "m")
    first_pass = call(handle.clean.remote(0))
    append_batches(range(18, 30), "m")
    located = call(handle.locate.remote(0, LOCATE_MAX_BYTES, LOCATE_MAX_SLICES))
    located_before = read_topics(spark, topics=topic)
    call(handle.clean.remote(first_pass.end_offset))
    with Consumer(spark_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        expected: list[tuple[int, bytes, bytes]] = []
        while consumer.position((topic, 0)) < 120:
            expected += [(r.offset, r.key, r.value) for r in consumer.poll(timeout_ms=1000)]
    assert any(not os.path.exists(s.path) for s in located.slices), "the second pass deleted no located segment"
    assert any(key.startswith(b"k") for _, key, _ in expected), "no record of the deleted segment survived"
    table = located_before.select("offset", "key", "value").toPandas()
    got = zip(table["offset"], (bytes(k) for k in table["key"]), (bytes(v) for v in table["value"]), strict=True)
    assert sorted(got) == sorted(expected)


def test_fail_on_data_loss_fails_or_skips_records_deleted_after_planning(spark: Any, spark_broker: Any) -> None:
    topic = make_topic(1, "loss")
    for index in range(10):
        append(spark_broker, topic, 0, records(10, f"l{index}"))
    strict = plan_read(topics=topic, startingOffsets={topic: {"0": 10}})
    lenient = plan_read(topics=topic, startingOffsets={topic: {"0": 10}}, failOnDataLoss=False)
    earliest = plan_read(topics=topic)
    Admin().delete_records(topic, 0, 40)
    with pytest.raises(Exception, match="failOnDataLoss"):
        read_plan(spark, strict).count()
    assert offsets_of(read_plan(spark, lenient)) == [(0, o) for o in range(40, 100)]
    assert offsets_of(read_plan(spark, earliest)) == [(0, o) for o in range(40, 100)]
    with pytest.raises(OffsetOutOfRangeError):
        plan_read(topics=topic, startingOffsets={topic: {"0": 10}})
    assert plan_read(topics=topic, startingOffsets={topic: {"0": 10}}, failOnDataLoss=False).start_offsets == {
        (topic, 0): 40
    }


def test_read_ranges_outside_spark_fails_on_data_loss_as_a_typed_error(spark_broker: Any) -> None:
    topic = make_topic(1, "loss-driver")
    append(spark_broker, topic, 0, records(50, "d"))
    Admin().delete_records(topic, 0, 20)
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss"):
        list(read_ranges([OffsetRange(topic, 0, 5, 50)]))
    kept = [
        o for b in read_ranges([OffsetRange(topic, 0, 5, 50)], fail_on_data_loss=False) for o in b["offset"].to_pylist()
    ]
    assert kept == list(range(20, 50))
