"""The Spark bridge and the isolation levels: the transaction scenario (`tests.transaction_scenario`: commits,
aborts, interleaved and open transactions on three partitions, written into the partition actors) read by
`read_topics` by default (read_committed) and with `isolationLevel="read_uncommitted"` (Spark's own default),
compared with the scenario's model, and the plan's end offsets at each level's end. Both readers: the JVM segment
reader (`cluster.spark.segment_source`, what `read_topics` uses when the session has it) and Spark's Python
workers (`jvm=False`) give the same rows, for the scenario and for batches of every codec."""

from __future__ import annotations

import time
from typing import Any

import pytest

import cluster.spark.session
from actors.clients.admin import Admin
from cluster.spark.kafka_source import planned_read, read_topics
from storage.records.compression import CompressionType
from tests.cluster.spark.helpers import append, unique_topic
from tests.transaction_scenario import PARTITIONS, Scenario, write_through_actors

pytestmark = [pytest.mark.ray, pytest.mark.spark]

TOPIC = "spark-isolation"


@pytest.fixture(scope="module")
def scenario(spark_broker: Any) -> Scenario:
    Admin(spark_broker).create_topic(TOPIC, PARTITIONS)
    return write_through_actors(TOPIC)


@pytest.mark.parametrize("isolation", [None, "read_committed", "read_uncommitted"])
def test_read_topics_reads_what_its_isolation_level_allows(
    spark: Any, scenario: Scenario, isolation: str | None
) -> None:
    options: dict[str, Any] = {} if isolation is None else {"isolationLevel": isolation}
    df = read_topics(spark, topics=TOPIC, **options)
    level = isolation or "read_committed"
    rows = [
        (int(row.partition), int(row.offset), bytes(row.value))
        for row in df.select("partition", "offset", "value").collect()
    ]
    assert sorted(rows) == sorted(scenario.read(level))
    assert planned_read(df).end_offsets == {(TOPIC, p): scenario.end(p, level) for p in range(PARTITIONS)}


def _scan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _rows(df: Any) -> list[tuple[Any, ...]]:
    """Every row as a tuple of plain values, in (topic, partition, offset) order."""
    out = [
        tuple(tuple(tuple(header) for header in value) if isinstance(value, list) else value for value in row)
        for row in df.collect()
    ]
    return sorted(out, key=lambda row: (row[2], row[3], row[4]))


def test_the_jvm_reader_reads_the_rows_python_workers_read(
    spark: Any, spark_broker: Any, scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recent: the test broker's retention (7 days) would delete older records.
    base_ms = int(time.time() * 1000) - 3_600_000
    codecs = unique_topic("jvm-codecs")
    Admin(spark_broker).create_topic(codecs, 2)
    for index, codec in enumerate(CompressionType):
        for partition in range(2):
            records = [
                {
                    "key": None if i % 5 == 0 else f"k{i}".encode(),
                    "value": None if i % 7 == 0 else f"{codec.name}-{partition}-{i}".encode() * (1 + i % 3),
                    "timestamp": base_ms + index * 1000 + i,
                    "headers": (("h", f"{i}".encode()), ("none", None)) if i % 4 == 0 else (),
                }
                for i in range(30)
            ]
            append(spark_broker, codecs, partition, records, compression=codec)
    # Partition 0 from inside its first batch to inside its fourth: the reader keeps only the planned offsets.
    offsets: dict[str, Any] = {
        "startingOffsets": {codecs: {"0": 7, "1": -2}},
        "endingOffsets": {codecs: {"0": 100, "1": -1}},
    }
    reads: list[tuple[str, dict[str, Any]]] = [(codecs, {"includeHeaders": True, **offsets}), (TOPIC, {})]
    for topic, options in reads:
        jvm = read_topics(spark, topics=topic, **options)
        assert "raybroker segments" in _scan(jvm)
        python = read_topics(spark, topics=topic, jvm=False, **options)
        assert "raybroker segments" not in _scan(python)
        got = _rows(jvm)
        assert got == _rows(python)
        assert len(got) == (93 + 30 * len(CompressionType) if topic == codecs else len(scenario.read("read_committed")))
    monkeypatch.setattr(cluster.spark.session, "_segment_reader", False)
    assert "raybroker segments" not in _scan(read_topics(spark, topics=TOPIC))
