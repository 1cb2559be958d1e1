"""Spark's own Kafka source (the `spark-sql-kafka-0-10` connector that `get_spark(kafka_connector=True)` loads, the
shared session of `tests/cluster/conftest.py` included) against raybroker's Kafka listener, on RayDP's executors.

The oracle is what confluent-kafka's producer was told (each delivery report's partition and offset, with the key,
value and timestamp that were sent), and raybroker's own Spark read (`read_topics`) of the same offsets.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from actors.clients.admin import Admin
from cluster.protocol.listener import KafkaListener
from cluster.spark.kafka_source import read_topics
from cluster.spark.session import kafka_bootstrap_servers
from tests.cluster.spark.helpers import unique_topic

pytestmark = [pytest.mark.ray, pytest.mark.spark]

PARTITIONS = 2
# Recent: the test broker's retention (7 days) would delete older records under the test.
BASE_MS = int(time.time() * 1000) - 60_000
STREAM_TIMEOUT_S = 120

Row = tuple[int, int, bytes | None, bytes | None, int]


@pytest.fixture(scope="module")
def listener(spark_broker: Any) -> Iterator[KafkaListener]:
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


def produce(servers: str, topic: str, first: int, count: int) -> list[Row]:
    """Produces records `first..first+count` (some keys and values null) with confluent-kafka; returns
    (partition, offset, key, value, timestamp ms) as the delivery reports placed them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": "5"})
    delivered: list[Row] = []
    errors: list[Any] = []

    def report(key: bytes | None, value: bytes | None, timestamp: int, error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered.append((message.partition(), message.offset(), key, value, timestamp))

    for index in range(first, first + count):
        key = None if index % 7 == 0 else f"k{index % 5}".encode()
        value = None if index % 11 == 0 else f"{topic}-v{index}".encode() * (1 + index % 3)
        timestamp = BASE_MS + index
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=index % PARTITIONS,
            timestamp=timestamp,
            on_delivery=partial(report, key, value, timestamp),
        )
    assert producer.flush(30) == 0
    assert errors == []
    assert len(delivered) == count
    return delivered


def kafka_rows(df: DataFrame) -> list[Row]:
    """The compared columns of a Kafka-source DataFrame, timestamps as epoch milliseconds, sorted."""
    selected = df.select("partition", "offset", "key", "value", F.unix_millis("timestamp").alias("timestamp"))
    return sorted((r.partition, r.offset, _bytes(r.key), _bytes(r.value), r.timestamp) for r in selected.collect())


def _bytes(value: bytearray | None) -> bytes | None:
    return None if value is None else bytes(value)


def test_spark_kafka_source_batch_and_available_now_stream_read_what_was_produced(
    spark: Any, listener: KafkaListener, tmp_path: Path
) -> None:
    servers = kafka_bootstrap_servers()
    assert servers == listener.bootstrap_servers
    topic = unique_topic("connector")
    Admin().create_topic(topic, PARTITIONS, {})
    produced = produce(servers, topic, 0, 60)
    assert {row[0] for row in produced} == set(range(PARTITIONS))

    batch = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    ours = read_topics(spark, topics=[topic], startingOffsets="earliest", endingOffsets="latest")
    assert kafka_rows(batch) == kafka_rows(ours) == sorted(produced)

    output, checkpoint = tmp_path / "output", tmp_path / "checkpoint"

    def run_stream() -> list[Row]:
        """One `availableNow` run of the stream into the Parquet sink; returns everything the sink holds."""
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .select("partition", "offset", "key", "value", "timestamp")
            .writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(STREAM_TIMEOUT_S)
        assert query.exception() is None
        return kafka_rows(spark.read.parquet(str(output)))

    assert run_stream() == sorted(produced)
    # A second run continues from the checkpoint: only the new records are added, none twice.
    produced += produce(servers, topic, 60, 20)
    assert run_stream() == sorted(produced)


def test_offsets_json_and_fail_on_data_loss_after_delete_records(spark: Any, listener: KafkaListener) -> None:
    """Spark's per-partition offsets JSON (-2 earliest, -1 latest) bounds the read as it does on Kafka; after
    DeleteRecords a read from below the log start fails with `failOnDataLoss` (Spark's default) and, without it,
    starts at the log start, as raybroker's own `read_topics` does."""
    servers = listener.bootstrap_servers
    topic = unique_topic("deleted")
    Admin().create_topic(topic, PARTITIONS, {})
    produced = produce(servers, topic, 0, 40)

    def kafka_read(starting: dict[str, int], ending: dict[str, int], **options: str) -> DataFrame:
        reader = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: starting}))
            .option("endingOffsets", json.dumps({topic: ending}))
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    bounded = kafka_read({"0": 3, "1": -2}, {"0": 10, "1": -1})
    assert kafka_rows(bounded) == sorted(r for r in produced if r[0] == 1 or 3 <= r[1] < 10)

    assert Admin().delete_records(topic, 0, 5) == 5
    kept = sorted(r for r in produced if r[0] == 1 or r[1] >= 5)
    lenient = kafka_read({"0": 0, "1": -2}, {"0": -1, "1": -1}, failOnDataLoss="false")
    ours = read_topics(
        spark,
        topics=[topic],
        startingOffsets=json.dumps({topic: {"0": 0, "1": -2}}),
        endingOffsets="latest",
        failOnDataLoss="false",
    )
    assert kafka_rows(lenient) == kafka_rows(ours) == kept
    with pytest.raises(Exception, match=r"(?i)data.*lost|out of range"):
        kafka_read({"0": 0, "1": -2}, {"0": -1, "1": -1}).collect()
